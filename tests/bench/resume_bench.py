#!/usr/bin/python3
"""rannc-run --resume under another plan: how long the ranks take to read their part of a 1 GB
checkpoint saved under another plan, and what reading costs them in memory.

A wide MLP (6 x Linear(3840, 3840), 88.5M weights: 354 MB of weights + 708 MB of Adam state, 1.06
GB of checkpoint) trains one step under a saved plan and checkpoints; a run under each new plan
resumes it and trains one more step. For each case the table gives the slowest rank's reading
time (rank 0's "read in X s" line: weights, then optimizer state) and the largest resident set
of a rank, resumed and fresh (the same plan started without --resume): their difference is what
reading the checkpoint held beyond the rank's own state. 4 ranks, OMP_NUM_THREADS=1, random data.

Goal (issue 32): under 10 s for 1 GB on this machine, never holding the whole model twice.

usage: resume_bench.py BUILD_DIR [--out DIR] [--hidden H] [--layers L]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import torch

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
RANKS = 4
BATCH = 8
# name: partition arguments; the first is the plan the checkpoint is saved under.
PLANS = {
    "2 stages x 2 replicas, sharded Adam": ["--layout", "pp=2,dp=2", "--shard-state", "optimizer"],
    "4 stages": ["--layout", "pp=4,dp=1"],
    "1 stage x 4 replicas, sharded Adam": ["--layout", "pp=1,dp=4", "--shard-state", "optimizer"],
}
# A rank's peak resident set, printed by the wrapper each rank runs under.
MAXRSS = "import resource, subprocess, sys; s = subprocess.call(sys.argv[1:]); " \
         "print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True); sys.exit(s)"


def make_model(path, hidden, layers):
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(hidden, 16))
    torch.jit.save(torch.jit.trace(model, torch.randn(BATCH, hidden)), path)
    return sum(p.numel() for p in model.parameters())


def partition(build, model, out, hidden, extra):
    shutil.rmtree(out, ignore_errors=True)
    command = [os.path.join(build, "bin", "rannc-partition"), model, "--input", f"input:{BATCH}x{hidden}", "--batch",
               str(BATCH), "--device", "cpu", "--gpus", str(RANKS), "--optimizer", "adam", "-o", out, *extra]
    subprocess.run(command, check=True, capture_output=True, text=True, env=ENV)
    return os.path.join(out, "plan.json")


def run(build, plan, steps, *extra):
    """Returns (rank 0's output, the largest rank's peak resident set in GiB)."""
    command = ["mpirun", "-np", str(RANKS), "--bind-to", "none", "/usr/bin/python3", "-c", MAXRSS,
               os.path.join(build, "bin", "rannc-run"), plan, "--steps", str(steps), "--loss", "cross_entropy",
               "--optimizer", "adam", "--lr", "0.001", "--seed", "1", *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {result.returncode}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    peaks = [int(x) for x in re.findall(r"maxrss_kib (\d+)", result.stdout)]
    return result.stdout, max(peaks) / 2**20


def folder_gib(folder):
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)) / 2**30


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--out", default="/tmp/resume_bench")
    parser.add_argument("--hidden", type=int, default=3840)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model = os.path.join(args.out, "wide_mlp.pt")
    weights = make_model(model, args.hidden, args.layers)
    names = list(PLANS)
    plans = {name: partition(args.build, model, os.path.join(args.out, f"plan_{i}"), args.hidden, PLANS[name])
             for i, name in enumerate(names)}
    saved = os.path.join(args.out, "saved")
    shutil.rmtree(saved, ignore_errors=True)
    run(args.build, plans[names[0]], 1, "--save", saved)
    with open(os.path.join(saved, "latest")) as f:
        size = folder_gib(os.path.join(saved, f.read().strip()))
    print(f"wide MLP: {weights / 1e6:.1f}M weights; checkpoint of 1 step under '{names[0]}': {size:.2f} GiB; "
          f"{RANKS} ranks on {os.cpu_count()} cores")
    print(f"| resumed under | read s (slowest rank) | checkpoint GiB / read s | max RSS per rank, resumed | fresh | resumed - fresh |")
    print("|---|---|---|---|---|---|")
    for name in names:
        output, resumed = run(args.build, plans[name], 2, "--resume", saved)
        seconds = float(re.search(r"read in ([0-9.]+) s", output).group(1))
        _, fresh = run(args.build, plans[name], 1)
        label = name + (" (the saved plan)" if name == names[0] else "")
        print(f"| {label} | {seconds:.2f} | {size / seconds:.2f} | {resumed:.2f} GiB | {fresh:.2f} GiB | "
              f"{resumed - fresh:+.2f} GiB |", flush=True)


if __name__ == "__main__":
    main()
