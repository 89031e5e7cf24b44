#!/usr/bin/python3
"""The cost model against libtorch on this machine: profiles each model with a fresh profile
DB, predicts a training step (forward + backward) from the per-op measurements, times whole
steps of the model (`profile --check`), then profiles again to show the DB is reused.

Criteria (issue 3): predicted step time within 25% of the measured one; predicted peak
memory at or above the measured peak and within 30% of it; a second run that times no op and
takes under a second.

usage: cost_model_bench.py BINARY SAMPLES_DIR [--reps N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODELS = [("resnet50.trace.pt", "x:2x3x224x224"), ("gpt.trace.pt", "tokens:2x32:int64")]


def profile(binary, model, spec, db, check):
    command = [binary, "profile", model, "--input", spec, "--profile-db", db, "--json"] + (["--check"] if check else [])
    start = time.monotonic()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out), time.monotonic() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("samples")
    args = parser.parse_args()
    failures = []
    print(f"{'model':<18} {'pred ms':>9} {'meas ms':>9} {'ratio':>6} {'pred MiB':>9} {'meas MiB':>9} {'ratio':>6}"
          f" {'1st run s':>9} {'2nd run s':>9} {'2nd timed':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in MODELS:
            db = os.path.join(tmp, name + ".db.json")  # a fresh DB per model
            first, first_s = profile(args.binary, os.path.join(args.samples, name), spec, db, check=True)
            second, second_s = profile(args.binary, os.path.join(args.samples, name), spec, db, check=False)
            pred, meas = first["predicted"], first["measured"]
            time_ratio = pred["step_ms"] / meas["step_ms"]
            mem_ratio = pred["peak_bytes"] / meas["peak_bytes"]
            print(f"{name:<18} {pred['step_ms']:>9.1f} {meas['step_ms']:>9.1f} {time_ratio:>6.2f}"
                  f" {pred['peak_bytes'] / 2**20:>9.1f} {meas['peak_bytes'] / 2**20:>9.1f} {mem_ratio:>6.2f}"
                  f" {first_s:>9.1f} {second_s:>9.2f} {second['timed']:>9}")
            if not 0.75 <= time_ratio <= 1.25:
                failures.append(f"{name}: predicted/measured step time {time_ratio:.2f}")
            if not 1.0 <= mem_ratio <= 1.3:
                failures.append(f"{name}: predicted/measured peak memory {mem_ratio:.2f}")
            if second["timed"] != 0 or second_s >= 1.0:
                failures.append(f"{name}: second run timed {second['timed']} ops in {second_s:.2f} s")
    print(f"machine: {first['device_description']}")
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
