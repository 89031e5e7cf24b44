"""The model in float32, which verify and partition's check compare the stage files with, is itself
checked against the model in float64 (docs/design.md, "How verify checks them"):

- ordinary: a GELU whose output is transposed (wav2vec2's feature extractor; libtorch 1.13's CPU
  gelu_backward gets its gradient wrong unless torch_kernel_fixes.h mends it) agrees with float64:
  partition's check line and verify say so, `--json` has reference.dtype "float64"; with
  --float64-limit below its weights verify says it used float32 alone, and why;
- cancellation: (h + 1e8) - 1e8 loses h in float32: partition warns, verify fails (exit 1), both
  naming op aten::sub (its output) at the line of this file that computes it;
- offset: a Linear of inputs offset by 1e7, centred over time: its forward is right in float32 but
  its weight gradient cancels: named as aten::linear (its backward) at the line that calls it;
- both exported to ONNX: the ops of the reference (aten::sub, aten::matmul) named by the ONNX
  tensor they compute.

usage: check_float64_reference.py RANNC OUT_DIR
"""
import json
import os
import re
import sys

import torch
import torch.nn as nn

from plan_runs import fail, run


class GeluTransposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 32, 3, bias=False)
        self.out = nn.Linear(32, 5)

    def forward(self, x):
        return self.out(nn.functional.gelu(self.conv(x)).transpose(1, 2))


class Cancellation(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        h = self.a(x)
        h = (h + 1e8) - 1e8  # MARK cancellation
        return self.b(torch.tanh(h))


class Offset(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8, bias=False)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        h = self.lin(x + 1e7)  # MARK offset
        h = h - h.mean(dim=1, keepdim=True)
        return self.out(torch.tanh(h))


def marked_line(mark):
    with open(os.path.abspath(__file__)) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# MARK {mark}"):
                return f"{os.path.abspath(__file__)}:{number}"
    fail(f"no line marked {mark}")


def save(model, shape, path):
    torch.manual_seed(0)
    example = (torch.randn(*shape),)
    if path.endswith(".onnx"):
        torch.onnx.export(model.train(), example, path, input_names=["x"], output_names=["y"], opset_version=14,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    else:
        torch.jit.trace(model.train(), example).save(path)


def partition(rannc, model, shape, out_dir):
    """Partitions into 2 stages; returns partition's check line."""
    dims = "x".join(str(d) for d in shape)
    result = run([rannc, model, "--input", f"x:{dims}", "--device", "cpu", "--gpus", "2", "--stages", "2", "-o", out_dir])
    lines = [line for line in result.stdout.splitlines() if line.startswith("check")]
    if len(lines) != 1:
        fail(f"{model}: expected one check line in\n{result.stdout}")
    return lines[0]


def verify(rannc, out_dir, expect, *args):
    plan = os.path.join(out_dir, "plan.json")
    text = run([rannc, "verify", plan, *args], expect=expect).stdout
    report = json.loads(run([rannc, "verify", plan, "--json", *args], expect=expect).stdout)
    return text, report


def check_ordinary(rannc, out_dir):
    model = os.path.join(out_dir, "gelu_transposed.pt")
    save(GeluTransposed(), (4, 4, 20), model)
    folder = os.path.join(out_dir, "gelu_transposed")
    line = partition(rannc, model, (4, 4, 20), folder)
    if "; float64 reference within" not in line:
        fail(f"ordinary: partition's check line does not say it compared with float64: {line}")
    text, report = verify(rannc, folder, 0)
    reference = report.get("reference", {})
    if reference.get("dtype") != "float64" or reference.get("differs") or not reference["gradients"]["compared"]:
        fail(f"ordinary: verify's reference is not a float64 run that agrees: {json.dumps(reference)}")
    if not re.search(r"^reference  float64: the model in float32 is within [0-9.e+-]+ \(tolerance 0.01", text, re.M):
        fail(f"ordinary: verify does not say it used float64:\n{text}")
    print("ordinary:", line.split("; ")[-1], "|", [l for l in text.splitlines() if l.startswith("reference")][0])
    _, report = verify(rannc, folder, 0, "--float64-limit", "1K")
    reference = report["reference"]
    if reference.get("dtype") != "float32" or "beyond --float64-limit 1.00 KiB" not in reference.get("reason", ""):
        fail(f"ordinary, --float64-limit 1K: expected the float32 reference and why: {json.dumps(reference)}")
    print("ordinary, --float64-limit 1K:", reference["reason"])


def check_departure(rannc, out_dir, name, model_class, shape, kind, in_backward, suffix=".pt"):
    """The model's float32 departs from float64 at op `kind`: partition warns, verify fails, both
    naming it (at the marked line of this file for TorchScript; ONNX has no Python lines)."""
    model = os.path.join(out_dir, name + suffix)
    save(model_class(), shape, model)
    folder = os.path.join(out_dir, name + suffix.replace(".", "_"))
    at = f" at {re.escape(marked_line(name))}" if suffix == ".pt" else ""
    op = rf"from op \d+ '{re.escape(kind)}' -> '[^']+'{re.escape(' (its backward)') if in_backward else ''}{at}$"
    differ = r"model: float32 .* differ from float64 by [0-9.e+-]+ \(.*\) "
    line = partition(rannc, model, shape, folder)
    if not re.search("; warning: " + differ + op, line):
        fail(f"{name}{suffix}: partition's check line does not warn naming {kind}: {line}")
    text, report = verify(rannc, folder, 1)
    if not re.search("^problem    " + differ + op, text, re.M):
        fail(f"{name}{suffix}: verify does not fail naming {kind}:\n{text}")
    departure = report["reference"].get("departure", {})
    if report["passed"] or departure.get("kind") != kind or departure.get("in_backward") != in_backward:
        fail(f"{name}{suffix}: verify --json: {json.dumps(report['reference'])}")
    print(f"{name}{suffix}:", [l for l in text.splitlines() if l.startswith("problem")][0])


def main():
    rannc, out_dir = sys.argv[1:3]
    os.makedirs(out_dir, exist_ok=True)
    check_ordinary(rannc, out_dir)
    check_departure(rannc, out_dir, "cancellation", Cancellation, (4, 8), "aten::sub", False)
    check_departure(rannc, out_dir, "offset", Offset, (4, 6, 8), "aten::linear", True)
    check_departure(rannc, out_dir, "cancellation", Cancellation, (4, 8), "aten::sub", False, ".onnx")
    check_departure(rannc, out_dir, "offset", Offset, (4, 6, 8), "aten::matmul", True, ".onnx")
    print("ok")


if __name__ == "__main__":
    main()
