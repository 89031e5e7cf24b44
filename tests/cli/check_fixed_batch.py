"""An ONNX model exported without dynamic_axes runs only at the batch it was traced at: the plan
must cut the global batch into microbatches of exactly that size, one replica per stage, and
its stage files must then pass verify. A --batch that is not whole microbatches of it is refused.

usage: check_fixed_batch.py RANNC OUT_DIR
"""
import os
import sys

import onnx
import torch
import torch.nn as nn

from plan_runs import fail, run, verify, write_plan

FIXED = 2


class Heads(nn.Module):
    """Linear, a view into heads (the trace records the batch), softmax, a view back, Linear."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 12)
        self.b = nn.Linear(12, 5)

    def forward(self, x):
        h = self.a(x)
        h = torch.softmax(h.view(x.size(0), 3, 4), -1).view(x.size(0), 12)
        return self.b(h)


def export(path):
    torch.manual_seed(0)
    model = Heads().train()
    torch.onnx.export(model, (torch.randn(FIXED, 12),), path, input_names=["x"], output_names=["y"], opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    graph = onnx.load(path).graph
    dim0 = graph.input[0].type.tensor_type.shape.dim[0]
    if not dim0.HasField("dim_value") or dim0.dim_value != FIXED:
        fail(f"the export has input dim 0 {dim0}, not the fixed {FIXED}")


def check_plan(rannc, model, out_dir, args):
    plan = write_plan(rannc, model, out_dir, ["--device", "cpu", *args])
    batch = plan["batch"]
    if batch["microbatch_size"] != FIXED:
        fail(f"{args}: microbatch size {batch['microbatch_size']}, the model's fixed batch is {FIXED}")
    replicas = [s["replicas_per_pipeline"] for s in plan["stages"]]
    if any(r != 1 for r in replicas):
        fail(f"{args}: stages with replicas {replicas} would run slices smaller than the fixed batch")
    verify(rannc, out_dir, f"{args}: ")
    print(f"{' '.join(args)}: global {batch['global']} = {plan['batch']['pipelines']} pipelines x "
          f"{batch['microbatches']} microbatches x {batch['microbatch_size']}, {len(plan['stages'])} stages; verify passed")


def main():
    rannc, out_dir = sys.argv[1:3]
    os.makedirs(out_dir, exist_ok=True)
    model = os.path.join(out_dir, "fixed_batch.onnx")
    export(model)
    check_plan(rannc, model, os.path.join(out_dir, "gpus2"), ["--gpus", "2"])
    check_plan(rannc, model, os.path.join(out_dir, "gpus4_batch16"), ["--gpus", "4", "--batch", "16"])
    check_plan(rannc, model, os.path.join(out_dir, "gpus2_stages2"), ["--gpus", "2", "--stages", "2", "--batch", "8"])
    result = run([rannc, model, "--device", "cpu", "--gpus", "2", "--batch", "3", "-o", os.path.join(out_dir, "bad")],
                 expect=2)
    lines = result.stderr.splitlines()
    if len(lines) != 1 or "fixed batch of 2" not in lines[0] or "dynamic_axes={'x': {0: 'batch'}}" not in lines[0]:
        fail(f"--batch 3: expected one line with the fixed batch and the export advice, got {result.stderr!r}")
    print("--batch 3:", lines[0])
    print("ok")


if __name__ == "__main__":
    main()
