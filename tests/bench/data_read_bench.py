#!/usr/bin/python3
"""Bytes each rank of rannc-run reads from --data, against what its stage needs and against the
whole global batch of every array (what each rank would read if it read the step).

For each case: partition a sample for 4 CPU devices, write STEPS steps of .npy data, train under
`mpirun -np 4 rannc-run --report`, and print per rank its stage, the arrays its stage takes, the
bytes read per step (the report's data_bytes / STEPS), the bytes of its rows (its replica's
share of its pipeline's samples of those arrays) and of the whole global batch.

usage: data_read_bench.py BUILD_DIR SAMPLES_DIR [--steps N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
import training_reference  # noqa: E402  (first: one OpenMP thread)

import numpy as np  # noqa: E402

CASES = [  # name, sample, partition arguments
    ("gpt, 3 stages, replicas 1/1/2", "gpt", ["--input", "tokens:8x32:int64", "--batch", "8", "--stages", "3"]),
    ("bert, 2 stages x 2 pipelines", "bert", ["--input", "tokens:8x32:int64", "--batch", "8", "--stages", "2"]),
    ("mlp, 4 stages", "mlp", ["--input", "x:32x64", "--batch", "32", "--stages", "4"]),
]


def run_case(build, samples, sample, args, steps, folder):
    plan_dir, data_dir = os.path.join(folder, "plan"), os.path.join(folder, "data")
    subprocess.run([os.path.join(build, "bin", "rannc-partition"), os.path.join(samples, sample + ".trace.pt"), *args,
                    "--device", "cpu", "--gpus", "4", "-o", plan_dir], check=True, capture_output=True)
    with open(os.path.join(plan_dir, "plan.json")) as f:
        plan = json.load(f)
    training_reference.make_data(plan, steps, "cross_entropy", data_dir, 1)
    report_path = os.path.join(folder, "report.json")
    subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
                    str(len(plan["ranks"])), os.path.join(build, "bin", "rannc-run"), os.path.join(plan_dir, "plan.json"),
                    "--steps", str(steps), "--data", data_dir, "--loss", "cross_entropy", "--report", report_path],
                   check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(report_path) as f:
        return plan, json.load(f), data_dir


def row_bytes(data_dir, name):
    array = np.load(os.path.join(data_dir, name + ".npy"), mmap_mode="r")
    return array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("samples")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    print(f"{'case':<30} | {'rank':>4} | {'stage':>5} | {'arrays':<16} | {'read/step':>10} | {'its rows':>10} | "
          f"{'global batch':>12} | {'share':>6}")
    for name, sample, partition_args in CASES:
        with tempfile.TemporaryDirectory() as folder:
            plan, report, data_dir = run_case(args.build, args.samples, sample, partition_args, args.steps, folder)
            batch = plan["batch"]
            every = ["target"] + [i["name"] for i in plan["model"]["inputs"]]
            whole = batch["global"] * sum(row_bytes(data_dir, a) for a in every)
            loss_stage = next(s["id"] for s in plan["stages"] if any(o.get("model_output") for o in s["outputs"]))
            for rank in report["ranks"]:
                stage = plan["stages"][rank["stage"]]
                arrays = [i["source"]["model_input"] for i in stage["inputs"] if "model_input" in i.get("source", {})]
                arrays += ["target"] if stage["id"] == loss_stage else []
                samples = batch["global"] // batch["pipelines"] // stage["replicas_per_pipeline"]
                needed = samples * sum(row_bytes(data_dir, a) for a in arrays)
                read = rank["data_bytes"] / args.steps
                print(f"{name:<30} | {rank['rank']:>4} | {stage['id']:>5} | {','.join(arrays) or '-':<16} | "
                      f"{read:>10.0f} | {needed:>10} | {whole:>12} | {read / whole:>6.1%}")


if __name__ == "__main__":
    main()
