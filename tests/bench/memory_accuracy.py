"""Predicted against measured peak memory of finished rannc-run runs: the training tests' output
folders (each holds plan.json and report.json), one row per stage.

usage: memory_accuracy.py [--within 0.8] [--fail] DIR_OR_GLOB...
       e.g. memory_accuracy.py 'build/test-out/runtime/*_native'

predicted: stages[s].predicted.mem_bytes (+ host_mem_bytes: on the CPU an offloaded stage's host
memory is the same memory), with interleave that of the device's chunks together; measured: the
peak_mem_bytes of the stage's ranks (with interleave, report.json charges a rank to its device
group's first stage). The target: every rank at or below its prediction and above `--within` of it.
--fail exits 1 when a row misses it.
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
from plan_memory import device_memory  # noqa: E402


def plan_path(out_dir):
    """check_training.py writes the plan into DIR/plan, the sharded-run checks into DIR itself."""
    for path in (os.path.join(out_dir, "plan", "plan.json"), os.path.join(out_dir, "plan.json")):
        if os.path.exists(path):
            return path
    return None


def stage_rows(out_dir):
    with open(plan_path(out_dir)) as f:
        plan = json.load(f)
    with open(os.path.join(out_dir, "report.json")) as f:
        report = json.load(f)
    measured = {}
    for entry in report["ranks"]:
        low, high = measured.get(entry["stage"], (float("inf"), 0))
        measured[entry["stage"]] = (min(low, entry["peak_mem_bytes"]), max(high, entry["peak_mem_bytes"]))
    for stage in plan["stages"]:
        if stage["id"] not in measured:
            continue  # a later chunk of an interleaved device group
        low, high = measured[stage["id"]]
        tp = stage.get("tensor_parallel", {}).get("degree", 1)
        yield stage["id"], tp, device_memory(plan, stage["id"]), low, high


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--within", type=float, default=0.8)
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    dirs = sorted({d for pattern in args.dirs for d in glob.glob(pattern)
                   if os.path.exists(os.path.join(d, "report.json")) and plan_path(d)})
    if not dirs:
        sys.exit("memory_accuracy.py: no folder with plan.json and report.json among " + " ".join(args.dirs))
    print(f"{'run':<34} {'stage':>5} {'tp':>3} {'pred KiB':>10} {'meas KiB':>17} {'meas/pred':>11}")
    rows = missed = 0
    for out_dir in dirs:
        for stage, tp, predicted, low, high in stage_rows(out_dir):
            rows += 1
            ok = args.within * predicted <= low and high <= predicted
            missed += not ok
            print(f"{os.path.basename(out_dir):<34} {stage:>5} {tp:>3} {predicted / 1024:>10.0f} "
                  f"{low / 1024:>8.0f}-{high / 1024:<8.0f} {low / predicted:>5.2f}-{high / predicted:<5.2f}"
                  f"{'' if ok else '  MISS'}")
    print(f"{rows - missed} of {rows} stages within [{args.within}, 1] of their prediction")
    if args.fail and missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
