#!/usr/bin/python3
"""The whole partition run of GPT-3 175B (shape-only) and the size of its schedule.svg, by
device count: the picture folds replicas and pipelines into one row per stage above 16 ranks,
so it stays small and quick to write however many devices plan it.

Each case runs `rannc-partition gpt3-175b.onnx --gpus N --batch 1536 --device a100-80g
--precision bf16-mixed --plan-only` REPS times, each into a fresh folder, and prints the median
wall time of the process, the bytes of schedule.svg and the plan's stages and pipelines.
Goal: under 2 s and schedule.svg under 1 MB at 64 and 4096 devices. Not a CTest test (timings
depend on the machine): run it by hand.

usage: picture_bench.py BINARY SHAPE_ONLY_DIR [--reps N] [--devices N ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

GOAL_S = 2.0
GOAL_SVG_BYTES = 1_000_000


def run_once(binary, model, devices):
    with tempfile.TemporaryDirectory() as out:
        command = [binary, model, "--gpus", str(devices), "--batch", "1536", "--device", "a100-80g",
                   "--precision", "bf16-mixed", "--plan-only", "-o", out]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}")
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        return wall, os.path.getsize(os.path.join(out, "schedule.svg")), plan


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("shape_only")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--devices", type=int, nargs="+", default=[64, 1024, 4096])
    args = parser.parse_args()
    model = os.path.join(args.shape_only, "gpt3-175b.onnx")
    print("| devices | wall (median of %d) | schedule.svg bytes | stages x pipelines | ranks |" % args.reps)
    print("|---|---|---|---|---|")
    missed = []
    for devices in args.devices:
        runs = [run_once(args.binary, model, devices) for _ in range(args.reps)]
        wall = statistics.median(w for w, _, _ in runs)
        _, svg_bytes, plan = runs[0]
        print(f"| {devices} | {wall:.2f} s | {svg_bytes:,} | {len(plan['stages'])} x {plan['batch']['pipelines']} | "
              f"{len(plan['ranks'])} |", flush=True)
        if wall > GOAL_S or svg_bytes > GOAL_SVG_BYTES:
            missed.append(f"{devices} devices: {wall:.2f} s, {svg_bytes:,} bytes")
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    print(f"\ngoal: under {GOAL_S:.0f} s and {GOAL_SVG_BYTES:,} bytes, on {names[0] if names else 'unknown CPU'}, "
          f"{os.cpu_count()} CPUs")
    if missed:
        print("over the goal: " + "; ".join(missed))


if __name__ == "__main__":
    main()
