#!/usr/bin/python3
"""Sharded plans of the shape-only DLRMs (rannc-partition MODEL --plan-only): wall time of the
whole command (median of 3), the predicted step (the slowest rank), max/mean of the ranks' steps,
peak memory per device and the sharding types chosen; a model that fits nowhere prints its one
error line (exit 1). "zipf 1.05" gives every table that access skew (--table-constraints), which
sets the hit rate of a host table's device cache.

usage: sharding_bench.py BUILD_DIR SHAPE_ONLY_DIR
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [  # model, devices, memory per device, global batch, extra options
    ("dlrm-kaggle", 8, "80G", 4096, []),
    ("dlrm-mlperf-v1", 8, "40G", 65536, []),
    ("dlrm-mlperf-v1", 4, "16G", 65536, []),
    ("dlrm-mlperf-v2", 16, "80G", 65536, ["--comm-dtype", "fp32"]),
    ("dlrm-mlperf-v2", 16, "80G", 65536, ["--comm-dtype", "fp16"]),
    ("dlrm-synthetic-1000", 128, "80G", 65536, []),
    ("dlrm-12t", 128, "80G", 65536, ["--host-mem", "4T"]),
    ("dlrm-12t", 128, "80G", 65536, ["--host-mem", "4T", "zipf 1.05"]),
    ("dlrm-12t", 128, "80G", 65536, ["--host-mem", "1T"]),
]
REPEATS = 3


def skew_file(tool, model, exponent, folder):
    """A --table-constraints file giving each of the model's tables a Zipf access of `exponent`."""
    listing = subprocess.run([tool, "inspect", model, "--json"], capture_output=True, text=True, timeout=600, check=True)
    tables = [t["weight"] for t in json.loads(listing.stdout)["embedding_tables"]]
    path = os.path.join(folder, f"zipf_{exponent}.json")
    with open(path, "w") as f:
        json.dump({"tables": {name: {"zipf": exponent} for name in tables}}, f)
    return path


def plan_once(tool, model, devices, mem, batch, extra, out):
    start = time.perf_counter()
    result = subprocess.run([tool, model, "--gpus", str(devices), "--mem", mem, "--batch", str(batch), "--plan-only",
                             "-o", out, "--json", *extra], capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, result


def main():
    build, shape_only = sys.argv[1:3]
    tool = os.path.join(build, "bin", "rannc-partition")
    header = f"| {'case':<44} | {'plan s':>6} | {'step ms':>8} | {'max/mean':>8} | {'peak/dev':>9} | types |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for model, devices, mem, batch, extra in CASES:
            name = f"{model} {devices} x {mem} {' '.join(extra)}".strip()
            path = os.path.join(shape_only, model + ".onnx")
            options = [option for option in extra if not option.startswith("zipf ")]
            for option in extra:
                if option.startswith("zipf "):
                    options += ["--table-constraints", skew_file(tool, path, float(option.split()[1]), tmp)]
            runs = [plan_once(tool, path, devices, mem, batch, options, tmp) for _ in range(REPEATS)]
            seconds = statistics.median(r[0] for r in runs)
            result = runs[-1][1]
            if result.returncode != 0:
                print(f"| {name:<44} | {seconds:6.2f} | exit {result.returncode}: {result.stderr.strip()} |")
                continue
            summary = json.loads(result.stdout)
            planning, predicted = summary["planning"], summary["predicted"]
            types = ", ".join(f"{k} {v}" for k, v in sorted(planning["sharding_types"].items()))
            print(f"| {name:<44} | {seconds:6.2f} | {predicted['iteration_ms']:8.3f} | {planning['imbalance']:8.3f} | "
                  f"{predicted['peak_mem_bytes'] / 2**30:5.1f} GiB | {types} |")


if __name__ == "__main__":
    main()
