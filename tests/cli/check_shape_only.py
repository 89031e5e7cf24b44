"""Inspects the shape-only models (external-data initializers, no data files): each must report
its exact parameter count (for Llama-3 70B the one Meta published), quickly and in little memory,
which shows the weights are never loaded; a DLRM's embedding tables must be its configuration's
(rows, dims and lookups per sample of each table, summed bags): Criteo Kaggle, MLPerf DLRM v1
and v2 (multi-hot, one table of 100 lookups), 1000 synthetic tables and 48 tables of 10^9 rows
(12T parameters).

usage: check_shape_only.py BINARY SHAPE_ONLY_DIR
"""
import json
import os
import subprocess
import sys
import time

MAX_SECONDS = 10.0
MAX_RSS_MIB = 64.0


def check_tables(name, tables, expected):
    """The tables inspect found against the configuration the generator built."""
    found = [(t["rows"], t["dim"], t["pooling"], t["pooling_mode"]) for t in tables]
    want = [(r, d, float(p), "sum") for r, d, p in zip(expected["rows"], expected["dims"], expected["pooling"])]
    if found != want:
        wrong = next(i for i, (a, b) in enumerate(zip(found + [None] * len(want), want)) if a != b)
        return [f"{name}: {len(found)} tables found, {len(want)} built; table {wrong}: {found[wrong:wrong + 1]} "
                f"against {want[wrong]}"]
    print(f"{'':<20} {len(found)} embedding tables as configured")
    return []


def main():
    binary, folder = sys.argv[1:3]
    with open(f"{folder}/shape_only_manifest.json") as f:
        manifest = json.load(f)
    problems = []
    print(f"{'model':<20} {'params':>18} {'nodes':>6} {'seconds':>8} {'peak RSS':>9}")
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
        print(f"{name:<20} {report['params']:>18,} {report['nodes']:>6} {seconds:>8.2f} {rss_mib:>6.1f} MiB")
        if report["params"] != expected["params"]:
            problems.append(f"{name}: params {report['params']} != {expected['params']}")
        if seconds > MAX_SECONDS:
            problems.append(f"{name}: took {seconds:.1f} s (limit {MAX_SECONDS} s)")
        if rss_mib > MAX_RSS_MIB:
            problems.append(f"{name}: peak RSS {rss_mib:.1f} MiB (limit {MAX_RSS_MIB} MiB)")
        if expected.get("kind") == "dlrm":
            problems += check_tables(name, report["embedding_tables"], expected)
        if name == "gpt3-175b" and not 170e9 < report["params"] < 180e9:
            problems.append(f"{name}: {report['params']} params is not about 175 billion")
        if name == "llama3-70b" and report["params"] != 70_553_706_496:
            problems.append(f"{name}: {report['params']} params is not Llama-3 70B's 70,553,706,496")
    if problems:
        sys.exit("FAILED:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
