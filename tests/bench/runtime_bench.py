#!/usr/bin/python3
"""rannc-run measured against the plan's prediction, and against a plain libtorch loop.

Part 1 (cost-model accuracy): for each case, partition a sample for N CPU "devices", train STEPS
steps under `mpirun -np N rannc-run` on .npy data, and print the plan's predicted iteration time
against the median measured step (steps after the first), and per stage the predicted memory
per rank against the largest peak of tensor memory measured on its ranks.

Part 2 (runtime overhead): each sample as a 1-stage, 1-rank plan under rannc-run against
plain_training_loop (tests/bench/plain_training_loop.cpp: forward, cross entropy, backward,
SGD step in one process) on the same data; overhead = median rannc-run step / median plain step - 1.
Goal: under 10%.

On a machine with fewer cores than ranks, ranks share cores and measured times grow with the
oversubscription; the prediction assumes one device per rank. OMP_NUM_THREADS=1 per rank.

With --gpu PRESET (a machine with a GPU and a CUDA build, docs/gpu.md) it runs part 2 alone, on
the GPU, over the models of tests/bench/gpu_models.py in SAMPLES_DIR, planned for PRESET.

usage: runtime_bench.py BUILD_DIR SAMPLES_DIR [--steps N] [--only NAME,...] [--gpu PRESET] [--repeats R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
import training_reference  # noqa: E402

SAMPLES = {  # name: (example input, global batch)
    "mlp": ("x:4x64", 64),
    "gpt": ("tokens:8x32:int64", 16),
    "bert": ("tokens:8x32:int64", 16),
    "resnet50": ("x:2x3x224x224", 8),
}
GPU_SAMPLES = {  # the models of gpu_models.py: name: (example input, global batch)
    "mlp": ("x:32x64", 32), "gpt": ("tokens:8x32:int64", 8), "bert": ("tokens:8x32:int64", 8),
    "gpt_wide": ("tokens:8x256:int64", 8), "bert_wide": ("tokens:8x256:int64", 8),
    "resnet50": ("x:32x3x224x224", 32),
}
ACCURACY_CASES = [  # sample, devices, stages (None: the planner's), optimizer, more partition arguments
    ("mlp", 2, 2, "sgd", []), ("gpt", 2, 2, "sgd", []), ("bert", 2, 2, "sgd", []), ("resnet50", 2, 2, "sgd", []),
    ("mlp", 4, 4, "sgd", []), ("gpt", 4, 4, "sgd", []), ("bert", 4, 4, "sgd", []), ("resnet50", 4, 4, "sgd", []),
    # Sharded Adam state over 2 pipelines; a stage offloaded by the planner under short memory.
    ("gpt", 4, 2, "adam", ["--shard-state", "optimizer"]), ("bert", 4, 2, "adam", ["--shard-state", "optimizer"]),
    ("mlp", 4, None, "adam", ["--mem", "300K"]),
]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")


def partition(build, samples, name, devices, stages, microbatches, out, optimizer="sgd", extra=(), device="cpu"):
    example, batch = (GPU_SAMPLES if device != "cpu" else SAMPLES)[name]
    command = [os.path.join(build, "bin", "rannc-partition"), os.path.join(samples, name + ".trace.pt"),
               "--input", example, "--batch", str(batch), "--gpus", str(devices), "--device", device,
               "--optimizer", optimizer, "-o", out, *extra]
    if stages:
        command += ["--stages", str(stages)]
    if microbatches:
        command += ["--microbatches", str(microbatches)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f)


def run_plan(build, out, plan, steps, optimizer="sgd", env=ENV):
    data = os.path.join(out, "data")
    training_reference.make_data(plan, steps, "cross_entropy", data, seed=0)
    report = os.path.join(out, "report.json")
    subprocess.run(["mpirun", "-np", str(len(plan["ranks"])), os.path.join(build, "bin", "rannc-run"),
                    os.path.join(out, "plan.json"), "--steps", str(steps), "--data", data, "--loss", "cross_entropy",
                    "--optimizer", optimizer, "--lr", "0.01", "--report", report],
                   check=True, capture_output=True, text=True, env=env)
    with open(report) as f:
        return json.load(f), data


def median_step_ms(step_ms):
    return statistics.median(step_ms[1:] if len(step_ms) > 1 else step_ms)


def accuracy(build, samples, steps, names):
    print("cost-model accuracy: predicted vs measured (median step after the first; peak tensor memory per rank;")
    print("on CPU an offloaded stage's host memory is the same memory, so it is predicted with the device's)")
    print(f"{'model':<9} {'opt':<4} {'ranks':>5} {'stages':>6} {'mb':>3} {'pred ms':>9} {'meas ms':>9} {'meas/pred':>9}  "
          f"{'stage':>5} {'state':<9} {'pred MiB':>9} {'meas MiB':>9} {'meas/pred':>9}")
    worst = 0.0
    for name, devices, stages, optimizer, extra in ACCURACY_CASES:
        if names and name not in names:
            continue
        with tempfile.TemporaryDirectory() as out:
            plan = partition(build, samples, name, devices, stages, None, out, optimizer, extra)
            report, _ = run_plan(build, out, plan, steps, optimizer)
        predicted = plan["predicted"]["iteration_ms"]
        measured = median_step_ms([s["ms"] for s in report["steps"]])
        peaks = {}
        for r in report["ranks"]:
            peaks[r["stage"]] = max(peaks.get(r["stage"], 0), r["peak_mem_bytes"])
        for i, stage in enumerate(plan["stages"]):
            head = (f"{name:<9} {optimizer:<4} {len(plan['ranks']):>5} {len(plan['stages']):>6} "
                    f"{plan['batch']['microbatches']:>3} {predicted:>9.2f} {measured:>9.2f} {measured / predicted:>9.2f}"
                    if i == 0 else " " * 60)
            state = "offload" if stage["offload"] else "sharded" if stage.get("state_sharding", "none") != "none" else "-"
            pred_mem = (stage["predicted"]["mem_bytes"] + stage["predicted"].get("host_mem_bytes", 0)) / 2**20
            meas_mem = peaks.get(stage["id"], 0) / 2**20
            print(f"{head}  {stage['id']:>5} {state:<9} {pred_mem:>9.1f} {meas_mem:>9.1f} {meas_mem / pred_mem:>9.2f}")
            worst = max(worst, meas_mem / pred_mem)
    print(f"memory: the largest measured / predicted is {worst:.2f}: "
          f"{'every rank at or below its prediction' if worst <= 1 else 'UNDER-PREDICTED'}")


def overhead(build, samples, steps, names, device="cpu", repeats=1):
    where = "on the CPU" if device == "cpu" else "on the GPU, planned for " + device
    print(f"\nruntime overhead {where}: 1 stage on 1 rank vs a plain libtorch loop (median step after the first;")
    print(f"with {repeats} rounds of the three runs in turn, the median of the rounds' medians: a host-bound step's")
    print("pace drifts between runs, and taking turns lets each see the same drift)")
    print("(plain: the executor's defaults; as run: with its graph optimizer off, as rannc-run runs stages)")
    print(f"{'model':<9} {'batch':>5} {'plain ms':>9} {'as run ms':>9} {'rannc ms':>9} {'vs plain':>9} {'vs as run':>9}")
    plain_binary = os.path.join(build, "bin", "plain_training_loop")
    env = dict(ENV, RANNC_DEVICE="cpu" if device == "cpu" else "cuda")
    phases = {}
    for name, (example, batch) in (SAMPLES if device == "cpu" else GPU_SAMPLES).items():
        if names and name not in names:
            continue
        rounds = {"plain": [], "as run": [], "rannc": []}
        with tempfile.TemporaryDirectory() as out:
            plan = partition(build, samples, name, 1, 1, 1, out, device=device)
            inputs = [i["name"] for i in plan["model"]["inputs"]]
            for _ in range(repeats):
                report, data = run_plan(build, out, plan, steps, env=env)
                loops = [subprocess.run([plain_binary, plan["model"]["path"], data, str(batch), str(steps), "0.01", *inputs],
                                        check=True, capture_output=True, text=True,
                                        env=dict(env, RANNC_PLAIN_OPTIMIZE=optimize))
                         for optimize in ("1", "0")]
                for key, loop in zip(("plain", "as run"), loops):
                    rounds[key].append(median_step_ms([float(line.split()[-1]) for line in loop.stdout.splitlines()]))
                rounds["rannc"].append(median_step_ms([s["ms"] for s in report["steps"]]))
        plain, as_run, rannc = (statistics.median(rounds[key]) for key in ("plain", "as run", "rannc"))
        losses = [float(line.split()[3]) for line in loops[1].stdout.splitlines()]
        loss_gap = max(abs(a - s["loss"]) / abs(a) for a, s in zip(losses, report["steps"]))
        print(f"{name:<9} {batch:>5} {plain:>9.2f} {as_run:>9.2f} {rannc:>9.2f} {100 * (rannc / plain - 1):>8.1f}% "
              f"{100 * (rannc / as_run - 1):>8.1f}%   (losses within {loss_gap:.1e} of the loop as run)", flush=True)
        phases[name] = (host_phases(loops[1].stdout), report["ranks"][0].get("host_ms", {}))
    print("\nwhere the host's step goes (ms per step, the mean over all steps, the first included; the loop as run;")
    print("the last round)")
    print(f"{'model':<9} {'':<6} " + " ".join(f"{p:>9}" for p in PHASES))
    for name, (loop, rannc) in phases.items():
        print(f"{name:<9} {'loop':<6} " + " ".join(f"{loop.get(p, 0):>9.3f}" for p in PHASES))
        print(f"{'':<9} {'rannc':<6} " + " ".join(f"{rannc.get(p, 0):>9.3f}" for p in PHASES))


PHASES = ("data", "passes", "optimizer", "wait")


def host_phases(loop_output):
    """The mean of each phase the plain loop prints ("data D passes P optimizer O wait W"), as rannc-run reports it."""
    lines = [line.split() for line in loop_output.splitlines()]
    return {p: statistics.mean(float(f[f.index(p) + 1]) for f in lines) for p in PHASES if lines and p in lines[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("samples")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--only", default="", help="comma-separated samples")
    parser.add_argument("--gpu", default="", metavar="PRESET", help="part 2 alone, on the GPU, planned for PRESET")
    parser.add_argument("--repeats", type=int, default=1, help="part 2: rounds of the three runs in turn")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    subprocess.run(["ninja", "-C", args.build, "rannc-run", "rannc-partition", "plain_training_loop"], check=True,
                   capture_output=True)
    if args.gpu:
        overhead(args.build, args.samples, args.steps, names, device=args.gpu, repeats=args.repeats)
        return
    accuracy(args.build, args.samples, args.steps, names)
    overhead(args.build, args.samples, args.steps, names, repeats=args.repeats)


if __name__ == "__main__":
    main()
