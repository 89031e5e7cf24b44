"""rannc-run finds each rank's place on its node from MPI, not from a launcher's environment: a job
whose ranks see no OMPI_COMM_WORLD_LOCAL_* / NODE_* variables (as under srun or another MPI), or
wrong ones, reports local ranks 0..n-1 and local size n, and trains to the losses of a plain
mpirun job.

usage: check_launcher.py --partition BIN --run BIN --model PATH --out DIR [--np 4] [--steps 3]
           -- EXTRA_PARTITION_ARGS...

Three jobs of the same plan on one node, with random inputs from --seed: plain mpirun; each rank
started through a wrapper that unsets every OMPI_COMM_WORLD_LOCAL*/NODE* variable; and one that
sets them wrong on every rank (local rank n-1, local size 1, node rank n-1), which a runtime
reading them would report. Each report must give rank r local_rank r (one node: ranks in world
order), local_size n and this machine's host name, and the same loss at every step.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

RUN_ARGS = ("--loss", "cross_entropy", "--optimizer", "sgd", "--lr", "0.5", "--seed", "3")
# Writes the OMPI_COMM_WORLD_* variables a rank is started with to DIR/env_RANK (to show that the
# wrapper did its part), then runs the rest of its arguments.
RECORD = 'env | grep "^OMPI_COMM_WORLD_" | sort > "$RANNC_TEST_ENV_DIR/env_$OMPI_COMM_WORLD_RANK"; exec "$@"'
# The same, without any of the launcher's node-local variables (OpenMPI's, and MPICH's too).
UNSET = ('for name in $(compgen -e); do case "$name" in OMPI_COMM_WORLD_LOCAL*|OMPI_COMM_WORLD_NODE*|'
         'MPI_LOCALRANKID|MPI_LOCALNRANKS) unset "$name" ;; esac; done; ' + RECORD)
LOCAL = ("OMPI_COMM_WORLD_LOCAL", "OMPI_COMM_WORLD_NODE")

def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def partition(args):
    plan_dir = os.path.join(args.out, "plan")
    command = [args.partition, os.path.abspath(args.model), *args.extra, "--device", "cpu", "--gpus", str(args.np),
               "--optimizer", "sgd", "-o", plan_dir]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        fail(f"{' '.join(command)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return os.path.join(plan_dir, "plan.json")


def run_job(args, name, plan_path, wrapper):
    """Runs the plan under mpirun, each rank through `wrapper`; returns the report."""
    report_path = os.path.join(args.out, f"report_{name}.json")
    env_dir = os.path.join(args.out, f"env_{name}")
    os.makedirs(env_dir)
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(args.np),
               "-x", "RANNC_TEST_ENV_DIR", *wrapper, args.run, plan_path, "--steps", str(args.steps),
               "--report", report_path, *RUN_ARGS]
    env = dict(os.environ, OMP_NUM_THREADS="1", RANNC_TEST_ENV_DIR=env_dir)
    start = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           start_new_session=True)
    try:
        output, _ = job.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        fail(f"{name}: timed out after 300 s: {' '.join(command)}")
    if job.returncode != 0:
        fail(f"{name}: exit {job.returncode}: {' '.join(command)}\n{output}")
    print(f"{name}: {time.monotonic() - start:.1f} s: {' '.join(command)}")
    with open(report_path) as f:
        return json.load(f), env_dir


def rank_env(env_dir, rank):
    try:
        with open(os.path.join(env_dir, f"env_{rank}")) as f:
            return dict(line.split("=", 1) for line in f.read().splitlines())
    except OSError as error:
        fail(f"the wrapper of rank {rank} left no record of its environment: {error}")


def check_places(name, report, n):
    ranks = sorted(report.get("ranks", []), key=lambda r: r.get("rank", -1))
    places = [(r.get("rank"), r.get("local_rank"), r.get("local_size"), r.get("host")) for r in ranks]
    print(f"{name}: (rank, local_rank, local_size, host):", places)
    host = socket.gethostname()
    if places != [(r, r, n, host) for r in range(n)]:
        fail(f"{name}: expected {[(r, r, n, host) for r in range(n)]}: every rank on this node ({host}), local ranks "
             f"0..{n - 1} in world order, local size {n}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]
    if args.np < 2:
        fail("--np must be at least 2, or a wrong local rank cannot show")

    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    plan_path = partition(args)
    n = args.np
    plain, _ = run_job(args, "mpirun", plan_path, [])
    check_places("mpirun", plain, n)

    unset, env_dir = run_job(args, "unset", plan_path, ["bash", "-c", UNSET, "unset-local"])
    for rank in range(n):
        left = [key for key in rank_env(env_dir, rank) if key.startswith(LOCAL)]
        if left:
            fail(f"unset: the wrapper of rank {rank} left {left}")
    check_places("unset", unset, n)

    wrong = {"OMPI_COMM_WORLD_LOCAL_RANK": str(n - 1), "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
             "OMPI_COMM_WORLD_NODE_RANK": str(n - 1)}
    bogus, env_dir = run_job(args, "wrong", plan_path, ["env", *(f"{key}={value}" for key, value in wrong.items()),
                                                        "bash", "-c", RECORD, "wrong-local"])
    for rank in range(n):
        seen = {key: value for key, value in rank_env(env_dir, rank).items() if key.startswith(LOCAL)}
        if any(seen.get(key) != value for key, value in wrong.items()):
            fail(f"wrong: rank {rank} was started with {seen}, not {wrong}")
    check_places("wrong", bogus, n)

    losses = {name: [s.get("loss") for s in report.get("steps", [])] for name, report in
              (("mpirun", plain), ("unset", unset), ("wrong", bogus))}
    print("losses:", losses)
    if len(losses["mpirun"]) != args.steps or any(value != losses["mpirun"] for value in losses.values()):
        fail(f"the three jobs must train {args.steps} steps to the same losses")
    print(f"OK: {n} ranks placed by MPI without the launcher's variables and despite wrong ones; same losses")


if __name__ == "__main__":
    main()
