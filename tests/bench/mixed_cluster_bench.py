#!/usr/bin/python3
"""Mixed clusters: a plan over two device kinds against the best plan on either kind alone.

For each case the cluster has nodes of A100s and nodes of H100s on one network; the same model
and batch are planned on the whole cluster (cluster JSON "node_groups") and on each kind's nodes
alone (the same network), and the table prints each plan's predicted step, the mixed plan's
speed-up over the faster single kind, its layers (blocks) per device on each kind and the
planning time. The target: the mixed plan at least 1.2x the best single-kind plan, and more blocks
per device on the faster kind. Exit 1 when a case misses either.

usage: mixed_cluster_bench.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import time

NETWORK = {"bandwidth_gbps": 25, "latency_us": 5}  # one 200 Gb/s HDR link per device, the A100 nodes'
CASES = [  # model, batch, precision, (kind, nodes) per group
    ("gpt3-175b", 1536, "bf16-mixed", [("a100-80g", 96), ("h100-80g", 32)]),
    ("bert-5b", 1024, "bf16-mixed", [("a100-40g", 12), ("h100-80g", 4)]),
]
TARGET = 1.2


def plan(binary, model, batch, precision, cluster, out):
    path = out + ".cluster.json"
    with open(path, "w") as f:
        json.dump(cluster, f)
    start = time.monotonic()
    result = subprocess.run([binary, model, "--cluster", path, "--batch", str(batch), "--precision", precision,
                             "--plan-only", "--quiet", "-o", out], capture_output=True, text=True)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{model} on {cluster}: {result.stderr.strip()}")
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f), seconds


def blocks_per_device(plan):
    """Blocks per device of each kind: a stage's blocks over its devices in one pipeline."""
    kinds = {r["rank"]: r.get("device") for r in plan["ranks"]}
    blocks, devices = {}, {}
    pipelines = plan["batch"]["pipelines"]
    for stage in plan["stages"]:
        on = {kinds[r] for r in stage["ranks"]}
        if len(on) != 1:
            continue  # a stage the kinds share holds every block on every device
        kind = on.pop()
        blocks[kind] = blocks.get(kind, 0) + stage["blocks"][1] - stage["blocks"][0]
        devices[kind] = devices.get(kind, 0) + len(stage["ranks"]) // pipelines
    return {kind: blocks[kind] / devices[kind] for kind in blocks}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    binary = os.path.join(build, "bin", "rannc-partition")
    failed = False
    print(f"{'model':10} {'cluster':32} {'step':>9} {'samples/s':>10} {'vs best one kind':>17} "
          f"{'blocks/device':>28} {'plan':>6}")
    for model, batch, precision, groups in CASES:
        path = os.path.join(build, "samples", "shape_only", model + ".onnx")
        with tempfile.TemporaryDirectory() as out:
            singles = []
            for kind, nodes in groups:
                cluster = {"nodes": nodes, "gpus_per_node": 8, "device": kind, "inter_node": NETWORK}
                single, seconds = plan(binary, path, batch, precision, cluster, os.path.join(out, kind))
                singles.append(single["predicted"]["iteration_ms"])
                print(f"{model:10} {f'{nodes * 8} x {kind}':32} {single['predicted']['iteration_ms'] / 1e3:8.2f}s "
                      f"{single['predicted']['samples_per_s']:10.1f} {'':>17} {'':>28} {seconds:5.1f}s")
            mixed_cluster = {"gpus_per_node": 8, "inter_node": NETWORK,
                             "node_groups": [{"nodes": nodes, "device": kind} for kind, nodes in groups]}
            mixed, seconds = plan(binary, path, batch, precision, mixed_cluster, os.path.join(out, "mixed"))
        step = mixed["predicted"]["iteration_ms"]
        speedup = min(singles) / step
        per_device = blocks_per_device(mixed)
        label = " + ".join(f"{nodes * 8} x {kind}" for kind, nodes in groups)
        spread = ", ".join(f"{kind} {value:.2f}" for kind, value in sorted(per_device.items()))
        print(f"{model:10} {label:32} {step / 1e3:8.2f}s {mixed['predicted']['samples_per_s']:10.1f} "
              f"{speedup:16.2f}x {spread:>28} {seconds:5.1f}s")
        faster, slower = groups[1][0], groups[0][0]
        if speedup < TARGET:
            print(f"  MISSED: {speedup:.2f}x the best single-kind plan, the target is {TARGET}x")
            failed = True
        if not per_device.get(faster, 0) > per_device.get(slower, 0):
            print(f"  MISSED: {faster} holds no more blocks per device than {slower}: {per_device}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
