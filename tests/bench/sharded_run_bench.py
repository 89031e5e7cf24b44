#!/usr/bin/python3
"""A sharded plan of a recommendation model, predicted against measured per rank: the DLRM test
model (tests/runtime/make_dlrm_bags.py: 8 tables, one of dim 256) planned for 4 CPU devices with
row-wise, table-wise, column-wise and data-parallel tables, trained for STEPS steps under
`mpirun -np 4 rannc-run` (through check_training.py, which also checks the losses against torch).

Per rank: the plan's predicted step (lookups + all-to-all + allreduce + dense part) and memory,
against the measured mean step after the first, the report's dense forward and backward, lookup
time and each collective's time per step, and the peak of tensor memory.

usage: sharded_run_bench.py BUILD_DIR [--steps N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME = os.path.join(HERE, "..", "runtime")
sys.path.insert(0, RUNTIME)
import check_sharded_training  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, os.path.join(RUNTIME, "make_dlrm_bags.py"), out], check=True)
        constraints = os.path.join(out, "constraints.json")
        with open(constraints, "w") as f:
            json.dump(check_sharded_training.CONSTRAINTS, f)
        command = [sys.executable, os.path.join(RUNTIME, "check_training.py"),
                   "--partition", os.path.join(args.build, "bin", "rannc-partition"),
                   "--run", os.path.join(args.build, "bin", "rannc-run"), "--model", os.path.join(out, "dlrm_bags.trace.pt"),
                   "--out", os.path.join(out, "run"), "--np", "4", "--steps", str(args.steps), "--loss", "mse", "--lr", "0.05",
                   "--", *check_sharded_training.PARTITION, "--table-constraints", constraints]
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            sys.exit(f"check_training failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        with open(os.path.join(out, "run", "plan", "plan.json")) as f:
            plan = json.load(f)
        with open(os.path.join(out, "run", "report.json")) as f:
            report = json.load(f)
    steps = report["steps"][1:] or report["steps"]
    measured_step = sum(s["ms"] for s in steps) / len(steps)
    print(f"{plan['cluster']['device']} preset, {plan['cluster']['gpus']} ranks, batch {plan['batch']['global']}; "
          f"measured step {measured_step:.2f} ms (mean of steps 1..{len(report['steps']) - 1}), "
          f"predicted {plan['predicted']['iteration_ms']:.3f} ms")
    print("| rank | predicted step ms | measured step ms | dense fwd+bwd ms | lookup ms | "
          "ids / pooled / grads / allreduce ms | predicted mem | measured peak |")
    print("|---|---|---|---|---|---|---|---|")
    for predicted, rank in zip(plan["sharding"]["ranks"], report["ranks"]):
        e = rank["embeddings"]
        print(f"| {rank['rank']} | {predicted['step_ms']:.3f} | {measured_step:.2f} | {rank['fwd_ms'] + rank['bwd_ms']:.2f} | "
              f"{e['lookup_ms']:.2f} | {e['index_ms']:.2f} / {e['pooled_ms']:.2f} / {e['grad_ms']:.2f} / "
              f"{e['allreduce_ms']:.2f} | {predicted['mem_bytes'] / 1024:.0f} KiB | "
              f"{rank['peak_mem_bytes'] / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()
