"""Partitions a model and verifies its stage files, each within a time limit: for models that
are merely large (thousands of inputs to one op, tens of thousands of ops in a row), which must
neither crash nor recurse as deep as the graph.

usage: partition_and_verify.py SECONDS RANNC MODEL OUT_DIR [PARTITION ARGS...]
"""
import json
import os
import shutil
import subprocess
import sys
import time


def main():
    limit, rannc, model, out_dir = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    shutil.rmtree(out_dir, ignore_errors=True)
    for command in ([rannc, model, "-o", out_dir, *sys.argv[5:]],
                    [rannc, "verify", os.path.join(out_dir, "plan.json"), "--json"]):
        start = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        seconds = time.monotonic() - start
        if result.returncode != 0:
            sys.exit(f"FAILED: {' '.join(command)}: exit {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        print(f"{command[1]}: {seconds:.1f} s")
    report = json.loads(result.stdout)
    if not report["passed"] or report["problems"]:
        sys.exit(f"FAILED: verify: {json.dumps(report)}")
    print("ok")


if __name__ == "__main__":
    main()
