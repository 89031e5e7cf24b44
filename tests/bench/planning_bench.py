#!/usr/bin/python3
"""Planning time of the default (partition) verb on shape-only models, phase by phase.

Each case plans a shape-only ONNX model (built by samples/make_shape_only.py), or GPT-3 175B as a
shape-only .pt2 (tests/models/pt2/gpt3-175b.pt2), for a cluster of
A100 80 GB devices (unless the case names another) with `--json`, REPS times, each into a fresh output folder. The table shows
the median of each phase the binary reports (planning_ms: load, units, coarsen, costs, search,
simulate, total), the median wall time of the whole process, and the plan found. The plan.json
of the first two runs of a case must be byte-identical (planning is deterministic).

Goal: each case under 10 s; the bench fails if a case's median wall time exceeds 60 s, or if a
plan differs between runs. A model that does not fit (exit status 1) is reported in the table.

usage: planning_bench.py BINARY SHAPE_ONLY_DIR [--reps N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# GPT-3 175B as a shape-only torch.export archive (PyTorch 2.6, meta device: no weights), committed.
GPT3_PT2 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "pt2", "gpt3-175b.pt2")

CASES = [  # name, model file (in SHAPE_ONLY_DIR, or a path), devices, batch, extra arguments
    ("BERT-Large", "bert-large.onnx", 64, 256, []),
    ("BERT 1920x54 (~2.5B)", "bert-2.5b.onnx", 256, 1024, []),
    ("BERT 5B", "bert-5b.onnx", 256, 1024, []),
    ("GPT-3 175B", "gpt3-175b.onnx", 1024, 1536, ["--precision", "bf16-mixed"]),
    ("GPT-3 175B .pt2", GPT3_PT2, 1024, 1536, ["--precision", "bf16-mixed"]),
    ("GPT-3 175B", "gpt3-175b.onnx", 4096, 1536, ["--precision", "bf16-mixed"]),
    ("GPT 39B", "gpt-39b.onnx", 512, 1536, ["--precision", "bf16-mixed"]),
    ("GPT 12288x24 (44B)", "gpt-44b.onnx", 4096, 1536, ["--precision", "bf16-mixed"]),
    ("BERT 5B, V100 fp16", "bert-5b.onnx", 256, 1024, ["--device", "v100-32g", "--precision", "fp16-mixed"]),
]
PHASES = ["load", "units", "coarsen", "costs", "search", "simulate", "total"]
WALL_LIMIT_S = 60.0


def plan(binary, model, devices, batch, extra):
    """One planning run: (summary or None, wall seconds, plan.json bytes or stderr line)."""
    with tempfile.TemporaryDirectory() as out:
        device = [] if "--device" in extra else ["--device", "a100-80g"]
        command = [binary, model, "--gpus", str(devices), "--batch", str(batch), *device,
                   *extra, "--plan-only", "-o", out, "--json"]  # shape-only: no weights for stage files
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if result.returncode == 1:  # the model does not fit
            return None, wall, result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "does not fit"
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}")
        summary = json.loads(result.stdout)
        with open(os.path.join(out, "plan.json"), "rb") as f:
            # The command line it records names the output folder, which differs between runs.
            return summary, wall, f.read().replace(out.encode(), b"OUT")


def fmt_ms(ms):
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"


def machine():
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} CPUs"


def run_case(binary, folder, reps, name, file, devices, batch, extra):
    """Returns (table row, determinism verdict, median wall seconds)."""
    runs = [plan(binary, os.path.join(folder, file), devices, batch, extra) for _ in range(reps)]
    wall = statistics.median(w for _, w, _ in runs)
    first = runs[0][0]
    if first is None:  # does not fit: the stderr line in place of the plan
        row = [name, devices, batch, runs[0][2].replace("|", "/")] + [""] * 8 + [f"{wall:.2f} s", "", ""]
        return row, "n/a (does not fit)", wall
    phases = [fmt_ms(statistics.median(s["planning"]["ms"][p] for s, _, _ in runs)) for p in PHASES]
    identical = "yes" if len(runs) < 2 or runs[0][2] == runs[1][2] else "no"
    predicted = first["predicted"]
    memory = f"{predicted['peak_mem_bytes'] / 2**30:.1f} / {first['cluster']['mem_bytes'] / 2**30:.1f}"
    row = [name, devices, batch, f"{len(first['stages'])} x {first['batch']['pipelines']}", first["batch"]["microbatches"],
           *phases, f"{wall:.2f} s", f"{predicted['efficiency']:.2f}", memory]
    return row, identical, wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("shape_only")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    header = ["case", "devices", "batch", "stages x pipelines", "microbatches", *PHASES, "wall",
              "efficiency", "peak mem / limit (GiB)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    failures, verdicts = [], []
    for name, file, devices, batch, extra in CASES:
        row, identical, wall = run_case(args.binary, args.shape_only, args.reps, name, file, devices, batch, extra)
        print("| " + " | ".join(str(cell) for cell in row) + " |", flush=True)
        verdicts.append(f"{name}: plan.json byte-identical across runs: {identical}")
        if identical == "no":
            failures.append(f"{name}: plan.json differs between runs")
        if wall > WALL_LIMIT_S:
            failures.append(f"{name}: median wall time {wall:.1f} s over {WALL_LIMIT_S:.0f} s")
    print(f"\ngoal: each under 10 s (limit {WALL_LIMIT_S:.0f} s) on {machine()}")
    print("\n".join(verdicts))
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
