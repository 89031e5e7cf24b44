"""GPT-3 175B as a shape-only .pt2 (tests/models/pt2/gpt3-175b.pt2: exported by PyTorch 2.6 from the
meta device, so its state dict holds no bytes) against the shape-only ONNX GPT-3 175B of
samples/make_shape_only.py:

1. inspect of each: the same parameter count (174,604,259,328), the .pt2 in little memory and
   time (its weights are never read);
2. each planned on 1024 A100 80 GB devices, as planning_bench.py's GPT-3 case (--batch 1536
   --precision bf16-mixed --plan-only --json), REPS times: a table of the medians (the binary's
   planning phases and the wall time of the process); the .pt2 must plan within LIMIT times the
   ONNX model's median wall time;
3. partition without --plan-only refuses the .pt2 in one line: it stores no weights for stage
   files, so plan it with --plan-only.

usage: check_pt2_shape_only.py BINARY PT2 ONNX OUT [--reps N] [--limit X]
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

PARAMS = 174_604_259_328
PHASES = ["load", "units", "coarsen", "costs", "search", "simulate", "total"]
REQUEST = ["--gpus", "1024", "--batch", "1536", "--device", "a100-80g", "--precision", "bf16-mixed", "--plan-only",
           "--json"]


def fail(message):
    sys.exit("FAIL: " + message)


def run(command, timeout=300):
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    return result, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before


def inspect(binary, path):
    result, wall, rss, _ = run([binary, "inspect", path, "--json"])
    if result.returncode != 0:
        fail(f"inspect {path}: exit {result.returncode}: {result.stderr.strip()}")
    report = json.loads(result.stdout)
    print(f"inspect {os.path.basename(path)}: {report['params']:,} params, {report['nodes']} nodes, {wall:.2f} s")
    if report["params"] != PARAMS:
        fail(f"{path}: {report['params']:,} params, GPT-3 175B has {PARAMS:,}")
    return wall


def plan(binary, path, out):
    shutil.rmtree(out, ignore_errors=True)
    result, wall, _, _ = run([binary, path, *REQUEST, "-o", out])
    if result.returncode != 0:
        fail(f"{path} on 1024 devices: exit {result.returncode}: {result.stderr.strip()}")
    return json.loads(result.stdout), wall


def fmt_ms(ms):
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("pt2")
    parser.add_argument("onnx")
    parser.add_argument("out")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--limit", type=float, default=2.0, help="the .pt2's median wall time over the ONNX model's")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    inspect(args.binary, args.onnx)
    inspect(args.binary, args.pt2)

    rows, walls = [], {}
    for label, path in ((".onnx", args.onnx), (".pt2", args.pt2)):
        runs = [plan(args.binary, path, os.path.join(args.out, "plan" + label.replace(".", "_"))) for _ in range(args.reps)]
        summaries = [s for s, _ in runs]
        walls[label] = statistics.median(w for _, w in runs)
        first = summaries[0]
        phases = [fmt_ms(statistics.median(s["planning"]["ms"][p] for s in summaries)) for p in PHASES]
        rows.append([f"GPT-3 175B {label}", args.reps, *phases, f"{walls[label]:.2f} s",
                     f"{len(first['stages'])} x {first['batch']['pipelines']}", first["batch"]["microbatches"],
                     f"{first['predicted']['efficiency']:.2f}"])
    header = ["model", "reps", *(f"{p} (median)" for p in PHASES), "wall (median)", "stages x pipelines",
              "microbatches", "efficiency"]
    print("\n1024 x a100-80g, --batch 1536 --precision bf16-mixed --plan-only")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    ratio = walls[".pt2"] / walls[".onnx"]
    print(f"\n.pt2 / .onnx median wall time: {ratio:.2f} (limit {args.limit})")
    if ratio > args.limit:
        fail(f"the .pt2 plans in {walls['.pt2']:.2f} s, {ratio:.2f} times the ONNX model's {walls['.onnx']:.2f} s")

    # Stage files need weights, which a shape-only export has not: one line, exit 2.
    out = os.path.join(args.out, "stages")
    shutil.rmtree(out, ignore_errors=True)
    result, _, _, _ = run([args.binary, args.pt2, "--gpus", "64", "--batch", "64", "--device", "a100-80g", "--precision",
                           "bf16-mixed", "-o", out])
    lines = result.stderr.strip().splitlines()
    pattern = r"gpt3-175b\.pt2: the archive stores no data for '.*' \(a shape-only export\? plan it with --plan-only\)"
    if result.returncode != 2 or len(lines) != 1 or not re.search(pattern, lines[0]) or os.path.exists(out):
        fail(f"partition of the shape-only .pt2 with stage files: exit {result.returncode}, stderr {result.stderr!r}"
             f"{', and it left ' + out if os.path.exists(out) else ''} (expected one line matching {pattern!r})")
    print("refused with stage files:", lines[0])
    print("OK: GPT-3 175B as a shape-only .pt2 plans on 1024 devices from its program alone, "
          f"{ratio:.2f} times the ONNX model's time")


if __name__ == "__main__":
    main()
