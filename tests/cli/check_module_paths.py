#!/usr/bin/python3
"""Stages named by the model's modules: an nn.TransformerEncoder model (embed, 4 encoder layers,
head) traced to TorchScript and exported to ONNX, a scripted model of a ModuleList, and the
committed .pt2 files (whose nodes carry torch.export's nn_module_stack), each planned on a few
stages. Every op the dump of `inspect --dump-ir` shows in a layer names its module path
(encoder.layers.0.linear1), plan.json lists each stage's blocks in "modules" (in model order,
together every layer once or, at a boundary, twice), and `show`'s ops column reads them as ranges
with the op count ("embed, encoder.layers.0-1 (212 ops)").

usage: check_module_paths.py RANNC OUT PT2_DIR
"""
import json
import os
import re
import subprocess
import sys

import torch
import torch.nn as nn

import plan_schema


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    check(result.returncode == 0, f"{' '.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
    return result.stdout


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4)
        self.head = nn.Linear(32, 100)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.layers = nn.ModuleList([Block() for _ in range(6)])
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def write_models(out):
    torch.manual_seed(0)
    encoder = Encoder().train()
    tokens = torch.randint(0, 100, (2, 8))
    paths = {"encoder.trace.pt": os.path.join(out, "encoder.trace.pt"), "encoder.onnx": os.path.join(out, "encoder.onnx"),
             "blocks.script.pt": os.path.join(out, "blocks.script.pt")}
    torch.jit.trace(encoder, (tokens,), check_trace=False).save(paths["encoder.trace.pt"])
    torch.onnx.export(encoder, (tokens,), paths["encoder.onnx"], input_names=["x"], dynamic_axes={"x": {0: "batch"}},
                      opset_version=14, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    torch.jit.script(Blocks()).save(paths["blocks.script.pt"])
    return paths


def summary(blocks):
    """show's reading of a stage's blocks (ir::modules_summary), written again here."""
    items = []
    for block in blocks:
        match = re.fullmatch(r"(.*\D)(0|[1-9]\d*)", block)
        if items and match and items[-1][1] is not None and items[-1][1] == match.group(1) and items[-1][3] + 1 == int(match.group(2)):
            items[-1][3] += 1
        else:
            items.append([block, match.group(1) if match else None, int(match.group(2)) if match else 0,
                          int(match.group(2)) if match else 0])
    text = ", ".join(first if low == high else f"{first}-{high}" for first, _, low, high in items)
    return text if len(text) <= 40 else text[:37] + "..."


def check_dump(binary, model, args, layer_ops):
    """Each op of a layer in the IR dumps names its module; the text and JSON dumps agree."""
    graph = json.loads(run([binary, "inspect", model, "--dump-ir", "--json", *args]))
    text = run([binary, "inspect", model, "--dump-ir", *args])
    modules = [op["module"] for op in graph["ops"] if "module" in op]
    shown = [line.rsplit("  # ", 1)[1] for line in text.splitlines() if " = " in line and "  # " in line]
    check(sorted(modules) == sorted(shown), f"{model}: the text dump's modules differ from the JSON dump's")
    for kind, pattern in layer_ops:
        ops = [op for op in graph["ops"] if op["kind"] == kind]
        check(ops, f"{model}: no {kind} op")
        for op in ops:
            check(re.fullmatch(pattern, op.get("module", "")), f"{model}: {kind} op {op['id']} in module {op.get('module')!r}, not {pattern}")
    return graph


def check_plan(binary, model, args, out, first, last, layers):
    """plan.json names each stage's blocks in model order, `show` prints them."""
    run([binary, model, *args, "-o", out])
    path = os.path.join(out, "plan.json")
    with open(path) as f:
        plan = json.load(f)
    plan_schema.check(plan, path)
    stages = plan["stages"]
    check(all(stage.get("modules") for stage in stages), f"{model}: a stage without modules: {[s.get('modules') for s in stages]}")
    check(stages[0]["modules"][0] == first, f"{model}: stage 0 starts at {stages[0]['modules'][0]}, not {first}")
    check(stages[-1]["modules"][-1] == last, f"{model}: the last stage ends at {stages[-1]['modules'][-1]}, not {last}")
    named = [block for stage in stages for block in stage["modules"]]
    in_order = [block for i, block in enumerate(named) if i == 0 or block != named[i - 1]]  # a layer split by a boundary
    check(in_order == [first, *layers, last], f"{model}: stages name {in_order}, expected {[first, *layers, last]}")

    text = run([binary, "show", path])
    lines = text.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("stage "))
    rows = [line for line in lines if re.match(r"\s*\d+\s", line)]
    check(len(rows) == len(stages), f"{model}: show prints {len(rows)} stage rows")
    for row, stage in zip(rows, stages):
        cell = row[header.index("ops"):]
        expected = f"{summary(stage['modules'])} ({len(stage['ops'])} op{'' if len(stage['ops']) == 1 else 's'})"
        check(cell == expected, f"{model}: stage {stage['id']} ops cell {cell!r}, expected {expected!r}")
    shown = json.loads(run([binary, "show", path, "--json"]))
    check([s.get("modules") for s in shown["stages"]] == [s["modules"] for s in stages], f"{model}: show --json modules")
    print(f"ok: {os.path.basename(model)}: " + " | ".join(row[header.index("ops"):] for row in rows))
    return plan


def main():
    binary, out, pt2_dir = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    models = write_models(out)
    tokens = ["--input", "x:8x8:int64", "--gpus", "4", "--stages", "3"]
    layers = [f"encoder.layers.{i}" for i in range(4)]

    check_dump(binary, models["encoder.trace.pt"], ["--input", "x:2x8:int64"],
               [("aten::embedding", r"embed"), ("aten::linear", r"encoder\.layers\.\d\.(self_attn|linear[12])|head"),
                ("aten::layer_norm", r"encoder\.layers\.\d\.norm[12]")])
    check_dump(binary, models["encoder.onnx"], ["--input", "x:2x8:int64"],
               [("onnx::Gather", r"embed|encoder\.layers\.\d\.self_attn"), ("onnx::Gemm", r"encoder\.layers\.\d\.self_attn|head"),
                ("onnx::MatMul", r"encoder\.layers\.\d\.(self_attn|linear[12])|head")])
    check_dump(binary, models["blocks.script.pt"], ["--input", "x:2x16"],
               [("aten::linear", r"embed|layers\.\d\.fc[12]|head")])
    check_plan(binary, models["encoder.trace.pt"], tokens, os.path.join(out, "plan_trace"), "embed", "head", layers)
    check_plan(binary, models["encoder.onnx"], tokens, os.path.join(out, "plan_onnx"), "embed", "head", layers)
    check_plan(binary, models["blocks.script.pt"], ["--input", "x:8x16", "--gpus", "4", "--stages", "4"],
               os.path.join(out, "plan_script"), "embed", "head", [f"layers.{i}" for i in range(6)])

    # torch.export's nn_module_stack: the committed files carry it (PyTorch 2.6).
    tiny = os.path.join(pt2_dir, "tiny_attention.pt2")
    check_dump(binary, tiny, [], [("aten::embedding", r"emb|pos"), ("aten::linear", r"q|kv|out|head")])
    gpt3 = os.path.join(pt2_dir, "gpt3-175b.pt2")
    check_dump(binary, gpt3, [], [("aten::layer_norm", r"layers\.\d+\.norm[12]|final_norm")])
    check_plan(binary, gpt3, ["--gpus", "4", "--stages", "4", "--batch", "4", "--mem", "2T", "--plan-only"],
               os.path.join(out, "plan_pt2"), "word", "final_norm", [f"layers.{i}" for i in range(96)])


if __name__ == "__main__":
    main()
