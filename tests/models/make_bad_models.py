#!/usr/bin/python3
"""Write the model files used by the error-handling tests, plus a good baseline.

Each file is described in bad_models.json (name -> file, input_args, description).
Run with /usr/bin/python3 (the interpreter that has torch).
"""

import argparse
import json
import os
import subprocess
import sys

import onnx
import torch
import torch.nn as nn
from onnx import TensorProto, helper

OPSET = 17
X_ARGS = ["x:2x8:float32"]


def example_input():
    return torch.randn(2, 8, generator=torch.Generator().manual_seed(1234))


class SmallMlp(nn.Module):
    """8-16-4 MLP whose forward argument is named x, like the ONNX input."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.layers(x)


def small_mlp():
    torch.manual_seed(0)
    return SmallMlp().train()


# ---------------------------------------------------------------------------
# Good baseline
# ---------------------------------------------------------------------------

def write_mlp_small(out_dir):
    model, x = small_mlp(), example_input()
    pt_path = os.path.join(out_dir, "mlp_small.pt")
    onnx_path = os.path.join(out_dir, "mlp_small.onnx")
    torch.jit.trace(model, (x,)).save(pt_path)
    torch.onnx.export(model, (x,), onnx_path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=OPSET,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    onnx.checker.check_model(onnx_path)
    return pt_path, onnx_path


# ---------------------------------------------------------------------------
# Files that are not models at all
# ---------------------------------------------------------------------------

def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def write_truncated(src, dst, must_cut_inside=None):
    """Write the first half of src. must_cut_inside: byte strings one of which the cut must split."""
    with open(src, "rb") as f:
        data = f.read()
    half = len(data) // 2
    if must_cut_inside is not None and not cuts_inside(data, half, must_cut_inside):
        raise SystemExit("error: the middle of %s is not inside a weight; make the model larger" % src)
    write_bytes(dst, data[:half])


def cuts_inside(data, position, chunks):
    for chunk in chunks:
        start = data.find(chunk)
        if start != -1 and start < position < start + len(chunk):
            return True
    return False


def onnx_weight_bytes(path):
    return [t.raw_data for t in onnx.load(path).graph.initializer if t.raw_data]


# ---------------------------------------------------------------------------
# Models with an operator the tools do not know
# ---------------------------------------------------------------------------

CUSTOM_NAMESPACE = "rannc_test"

# Registered only in this process: a process that loads custom_op.pt without this
# registration must fail to resolve rannc_test::mystery.
_custom_lib = torch.library.Library(CUSTOM_NAMESPACE, "DEF")
_custom_lib.define("mystery(Tensor x) -> Tensor")
_custom_lib.impl("mystery", lambda x: x * 3, "CPU")


class CustomOpModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.ops.rannc_test.mystery(self.linear(x))


def write_custom_op_pt(path):
    torch.manual_seed(0)
    module = torch.jit.script(CustomOpModel())
    module(example_input())  # the op must run where it is registered
    module.save(path)
    check_load_fails_elsewhere(path)


def check_load_fails_elsewhere(path):
    """Loading in a fresh process, where the op is not registered, must fail."""
    code = "import sys, torch; torch.jit.load(sys.argv[1])"
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    if result.returncode == 0 or "mystery" not in result.stderr:
        raise SystemExit("error: %s loaded without the custom op registered" % path)


def write_custom_op_onnx(path):
    """x -> Relu -> rannc.test::Mystery -> y: well formed, but Mystery has no schema anywhere."""
    nodes = [helper.make_node("Relu", ["x"], ["relu_out"], name="relu"),
             helper.make_node("Mystery", ["relu_out"], ["y"], name="mystery", domain="rannc.test")]
    graph = helper.make_graph(
        nodes, "custom_op",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    model = helper.make_model(graph, producer_name="make_bad_models",
                              opset_imports=[helper.make_opsetid("", OPSET),
                                             helper.make_opsetid("rannc.test", 1)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


# ---------------------------------------------------------------------------
# Data-dependent control flow
# ---------------------------------------------------------------------------

class DataDependentIf(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        if y.sum() > 0:
            return y * 2
        else:
            return y - 1


def write_data_dependent_if(path):
    torch.manual_seed(0)
    torch.jit.script(DataDependentIf()).save(path)


class BufferWrittenForLater(torch.nn.Module):
    """Adds the batch's mean to a buffer in place that a later layer reads: a stage that writes
    it and a stage that reads it each hold their own copy, so a cut between them gives stage files
    that compute something else than the model (partition's own check must refuse them)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 16)
        self.third = torch.nn.Linear(16, 4)
        self.register_buffer("total", torch.zeros(16))

    def forward(self, x):
        h = torch.relu(self.first(x))
        self.total.add_((h.detach() * 0 + 1).amax(0))  # ones, computed from the batch
        return self.third(torch.relu(self.second(h)) + self.total)


def write_buffer_written_for_later(path):
    torch.manual_seed(0)
    # Scripted, so that the later read is of the buffer itself (a trace would read add_'s result).
    torch.jit.script(BufferWrittenForLater()).save(path)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def write_all(out_dir):
    """Write every file; returns the bad_models.json content."""
    def path(name):
        return os.path.join(out_dir, name)

    pt_path, onnx_path = write_mlp_small(out_dir)
    for name in ("empty.pt", "empty.onnx"):
        write_bytes(path(name), b"")
    write_bytes(path("text.pt"), b"This is a text file, not a TorchScript archive.\n")
    write_bytes(path("text.onnx"), b"This is a text file, not an ONNX model.\n")
    write_truncated(pt_path, path("truncated.pt"))
    write_truncated(onnx_path, path("truncated.onnx"), must_cut_inside=onnx_weight_bytes(onnx_path))
    write_custom_op_pt(path("custom_op.pt"))
    write_custom_op_onnx(path("custom_op.onnx"))
    write_data_dependent_if(path("data_dependent_if.script.pt"))
    write_buffer_written_for_later(path("buffer_written_for_later.script.pt"))
    write_bytes(path("truncated_db.json"), b'{"format": "rannc-profile-db", "version": 1, "devi')
    write_bytes(path("foreign_db.json"), b'{"format": "something-else", "version": 1}\n')
    write_bytes(path("bad_cluster.json"), b'{"nodes": 2, "gpus_per_node": 8, "device": "h100-80g", "mem": "-4G"}\n')

    def entry(file, description):
        return {"file": file, "input_args": X_ARGS, "description": description}

    return {
        "empty_pt": entry("empty.pt", "0-byte file"),
        "empty_onnx": entry("empty.onnx", "0-byte file"),
        "text_pt": entry("text.pt", "plain text, not a zip archive"),
        "text_onnx": entry("text.onnx", "plain text, not a protobuf"),
        "truncated_pt": entry("truncated.pt", "first half of mlp_small.pt (no zip directory)"),
        "truncated_onnx": entry("truncated.onnx", "first half of mlp_small.onnx, cut inside a weight"),
        "custom_op_pt": entry("custom_op.pt", "scripted call to rannc_test::mystery, not registered"),
        "custom_op_onnx": entry("custom_op.onnx", "Relu then op Mystery of domain rannc.test"),
        "data_dependent_if": entry("data_dependent_if.script.pt",
                                   "scripted if on the sign of a tensor sum"),
        "buffer_written_for_later": entry("buffer_written_for_later.script.pt",
                                          "a buffer written in place in one layer and read by a later one"),
        "truncated_db": entry("truncated_db.json", "profile DB cut mid-key"),
        "foreign_db": entry("foreign_db.json", "JSON that is not a profile DB"),
        "bad_cluster": entry("bad_cluster.json", "cluster description with negative memory"),
        "mlp_small_pt": entry("mlp_small.pt", "valid traced MLP 8-16-4 (baseline)"),
        "mlp_small_onnx": entry("mlp_small.onnx", "valid ONNX MLP 8-16-4 (baseline)"),
    }


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    manifest = write_all(args.out)
    with open(os.path.join(args.out, "bad_models.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    print("wrote %d files to %s" % (len(manifest), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
