#!/usr/bin/env python3
"""Predicted against measured training steps on this machine's GPU (docs/gpu.md): for each model
gpu_models.py traced, `rannc-partition profile --check --json` times every op signature (CUDA
events) into one profile DB, predicts the step from them, and times whole steps of the model in
libtorch. Prints predicted and measured step time and peak memory with their ratios, and whether
each meets the targets (time within 15%, peak memory at or above the measured and within 20%).

usage: gpu_profile_bench.py --partition BIN --models DIR [--db FILE] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--partition", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--db", default="")
    parser.add_argument("--json", default="")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    db = args.db or os.path.join(args.models, "profile_db.json")
    listing = subprocess.run([sys.executable, os.path.join(HERE, "gpu_models.py"), "--out", args.models],
                             check=True, capture_output=True, text=True).stdout
    rows = []
    for line in listing.splitlines():
        name, path, spec = line.split()
        result = subprocess.run([args.partition, "profile", path, "--input", spec, "--profile-db", db, "--check",
                                 "--reps", str(args.reps), "--json"], capture_output=True, text=True)
        if result.returncode != 0:
            print("%s: profile failed: %s" % (name, result.stderr.strip()), flush=True)
            continue
        report = json.loads(result.stdout)
        report["name"] = name
        rows.append(report)
        p, m = report["predicted"], report["measured"]
        print("%-10s %s" % (name, json.dumps({"predicted": p, "measured": m})), flush=True)
    device = rows[0]["device"] if rows else "?"
    print("\ndevice: %s (%s)" % (device, rows[0]["device_description"] if rows else ""))
    header = "%-10s %12s %12s %7s %5s | %11s %11s %7s %5s" % (
        "model", "pred step", "meas step", "ratio", "ok", "pred peak", "meas peak", "ratio", "ok")
    print(header)
    print("-" * len(header))
    for r in rows:
        p, m = r["predicted"], r["measured"]
        t = p["step_ms"] / m["step_ms"] if m["step_ms"] > 0 else float("nan")
        b = p["peak_bytes"] / m["peak_bytes"] if m["peak_bytes"] > 0 else float("nan")
        r["time_ratio"], r["peak_ratio"] = t, b
        r["time_ok"], r["peak_ok"] = abs(t - 1) <= 0.15, 1.0 <= b <= 1.2
        print("%-10s %9.3f ms %9.3f ms %7.3f %5s | %8.1f MiB %8.1f MiB %7.3f %5s" % (
            r["name"], p["step_ms"], m["step_ms"], t, "yes" if r["time_ok"] else "NO",
            p["peak_bytes"] / 2**20, m["peak_bytes"] / 2**20, b, "yes" if r["peak_ok"] else "NO"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
