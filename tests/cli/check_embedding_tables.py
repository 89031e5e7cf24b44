"""inspect finds the same embedding tables in a TorchScript model and its ONNX export: weight,
rows, dim, pooling mode, lookups per sample and the model input that indexes each.

usage: check_embedding_tables.py RANNC SAMPLES_DIR OUT_DIR

Models: the DLRM sample (8 summed EmbeddingBags of a [B, 8, 5] input); EmbeddingBag in mean mode
(3 lookups per bag); nn.Embedding summed over the bag (ONNX: Gather, then ReduceSum) beside a
plain nn.Embedding lookup (one row per lookup).
"""
import json
import os
import subprocess
import sys

import torch
import torch.nn as nn

BATCH = 4


class MeanBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(300, 8, mode="mean")
        self.head = nn.Linear(8, 2)

    def forward(self, ids):
        return self.head(self.bag(ids))


class SummedEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.items = nn.Embedding(500, 12)
        self.users = nn.Embedding(40, 12)
        self.head = nn.Linear(12, 2)

    def forward(self, items, user):
        return self.head(self.items(items).sum(dim=1) + self.users(user))


def export(model, args, names, folder, name):
    model.train()
    trace = os.path.join(folder, name + ".trace.pt")
    torch.jit.trace(model, args, check_trace=False).save(trace)
    onnx = os.path.join(folder, name + ".onnx")
    torch.onnx.export(model, args, onnx, input_names=names, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes={n: {0: "batch"} for n in names[:1]})
    return trace, onnx


def tables(rannc, model, inputs):
    result = subprocess.run([rannc, "inspect", model, *inputs, "--json"], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        print(f"FAIL: inspect {model}: exit {result.returncode}\n{result.stderr}")
        sys.exit(1)
    return json.loads(result.stdout)["embedding_tables"]


def main():
    rannc, samples, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    ids = torch.randint(0, 300, (BATCH, 3))
    mean_trace, mean_onnx = export(MeanBag(), (ids,), ["ids"], out, "mean_bag")
    items, user = torch.randint(0, 500, (BATCH, 6)), torch.randint(0, 40, (BATCH,))
    sum_trace, sum_onnx = export(SummedEmbedding(), (items, user), ["items", "user"], out, "summed_embedding")
    cases = [
        ("DLRM sample", os.path.join(samples, "dlrm.trace.pt"), os.path.join(samples, "dlrm.onnx"),
         ["--input", "dense:1x13", "--input", "sparse:1x8x5:int64"], [],
         [(f"tables.{t}.weight", 1000 * (t + 1), 16, "sum", 5.0, ["sparse"]) for t in range(8)]),
        ("EmbeddingBag, mean", mean_trace, mean_onnx, ["--input", f"ids:{BATCH}x3:int64"], [],
         [("bag.weight", 300, 8, "mean", 3.0, ["ids"])]),
        ("Embedding summed, and plain", sum_trace, sum_onnx,
         ["--input", f"items:{BATCH}x6:int64", "--input", f"user:{BATCH}:int64"], [],
         [("items.weight", 500, 12, "sum", 6.0, ["items"]), ("users.weight", 40, 12, "none", 1.0, ["user"])]),
    ]
    failures = []
    for name, trace, onnx, trace_inputs, onnx_inputs, expected in cases:
        want = sorted(expected)
        for model, inputs in ((trace, trace_inputs), (onnx, onnx_inputs)):
            got = sorted((t["weight"], t["rows"], t["dim"], t["pooling_mode"], round(t["pooling"], 6), t["indexed_by"])
                         for t in tables(rannc, model, inputs))
            print(f"{name}, {os.path.basename(model)}: {got}")
            if got != want:
                failures.append(f"{name}, {os.path.basename(model)}: found {got}, expected {want}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("OK: the same tables from TorchScript and ONNX")


if __name__ == "__main__":
    main()
