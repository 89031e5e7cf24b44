"""Inspects the shape-only transformer models (external-data initializers, no data files):
each must report its exact parameter count, quickly and in little memory, which shows the
weights are never loaded.

usage: check_shape_only.py BINARY SHAPE_ONLY_DIR
"""
import json
import os
import subprocess
import sys
import time

MAX_SECONDS = 10.0
MAX_RSS_MIB = 64.0


def main():
    binary, folder = sys.argv[1:3]
    with open(f"{folder}/shape_only_manifest.json") as f:
        manifest = json.load(f)
    problems = []
    print(f"{'model':<12} {'params':>18} {'nodes':>6} {'seconds':>8} {'peak RSS':>9}")
    for name, expected in sorted(manifest.items()):
        path = f"{folder}/{expected['file']}"
        start = time.monotonic()
        process = subprocess.Popen([binary, "inspect", path, "--json", "--batch", "1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout = process.stdout.read()
        stderr = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.monotonic() - start
        rss_mib = usage.ru_maxrss / 1024
        if os.waitstatus_to_exitcode(status) != 0:
            problems.append(f"{name}: inspect failed: {stderr.strip()}")
            continue
        report = json.loads(stdout)
        print(f"{name:<12} {report['params']:>18,} {report['nodes']:>6} {seconds:>8.2f} {rss_mib:>6.1f} MiB")
        if report["params"] != expected["params"]:
            problems.append(f"{name}: params {report['params']} != {expected['params']}")
        if seconds > MAX_SECONDS:
            problems.append(f"{name}: took {seconds:.1f} s (limit {MAX_SECONDS} s)")
        if rss_mib > MAX_RSS_MIB:
            problems.append(f"{name}: peak RSS {rss_mib:.1f} MiB (limit {MAX_RSS_MIB} MiB)")
        if name == "gpt3-175b" and not 170e9 < report["params"] < 180e9:
            problems.append(f"{name}: {report['params']} params is not about 175 billion")
    if problems:
        sys.exit("FAILED:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
