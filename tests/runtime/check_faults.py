"""rannc-run fails cleanly: a wrong world size, a stage file one rank cannot load, and a rank killed
mid-run all end the whole job with a non-zero exit, promptly, naming what went wrong.

usage: check_faults.py world-size|bad-stage-file|killed-rank --partition BIN --run BIN --model PATH
           --out DIR [--np 4] -- EXTRA_PARTITION_ARGS...

world-size      plan for R ranks, start R/2: non-zero exit within 60 s, a line with "ranks", R and R/2.
bad-stage-file  overwrite the last stage's file with garbage of the same size: non-zero exit within
                60 s, naming "rank N" for a rank of that stage.
killed-rank     SIGKILL the highest rank once rank 0 has printed step 2 of a long run: mpirun exits
                non-zero within 60 s and names the rank, and no rannc-run process is left.
nan-loss        data whose step 1 holds NaN: step 0 trains, then one line "step 1: the loss is nan",
                every rank exits 1 within 60 s, and the report holds step 0 and what stopped training.
diverged        --lr 1e30 with mse: the loss overflows within a few steps; one line, every rank exits 1.
unwritable-report  --report /proc/nonexistent/report.json: every rank exits 2 before any step runs, with
                one line naming the report.
bad-options     --bucket-kib 0 or past 2^30, an unknown --lr-schedule, negative --warmup-steps,
                --clip-grad-norm or --weight-decay, a NaN --lr, --save-every without --save, a --save
                folder that cannot be made, a --resume folder without a checkpoint, --resume with
                --init, an --init that is /dev/zero or not a state dict: every rank exits 2 before
                any step runs, with one line naming the option; so does a --log that cannot be created.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import numpy as np

from check_training import describe, fail, mpirun_command, mpirun_env, parse, partition, run_job
import training_reference

DEADLINE = 60  # seconds from the fault to the end of the job
RUN_ARGS = ("--loss", "cross_entropy", "--optimizer", "sgd", "--lr", 0.01)  # random inputs and targets from --seed


def world_size(args, plan, plan_path):
    ranks = len(plan["ranks"])
    started = ranks // 2
    status, output, seconds = run_job(mpirun_command(started, args.run, plan_path, "--steps", 2, *RUN_ARGS), DEADLINE)
    print(f"-np {started} for a plan of {ranks} ranks: exit {status} after {seconds:.1f} s")
    if status is None or status == 0:
        fail(f"expected a non-zero exit within {DEADLINE} s\n{output}")
    numbers = re.compile(rf"\b{ranks}\b.*\b{started}\b|\b{started}\b.*\b{ranks}\b")
    named = [line for line in output.splitlines() if "ranks" in line and numbers.search(line)]
    if not named:
        fail(f"no line names the ranks, {ranks} and {started}:\n{output}")
    print("says:", named[0])


def bad_stage_file(args, plan, plan_path):
    stage = plan["stages"][-1]
    path = os.path.join(os.path.dirname(plan_path), stage["file"])
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(bytes((i * 7919) % 251 for i in range(size)))
    ranks = len(plan["ranks"])
    status, output, seconds = run_job(mpirun_command(ranks, args.run, plan_path, "--steps", 2, *RUN_ARGS), DEADLINE)
    print(f"{stage['file']} ({size} bytes) overwritten, ranks {stage['ranks']}: exit {status} after {seconds:.1f} s")
    if status is None or status == 0:
        fail(f"expected a non-zero exit within {DEADLINE} s\n{output}")
    named = [line for line in output.splitlines() if any(re.search(rf"\brank {r}\b", line) for r in stage["ranks"])]
    if not named:
        fail(f"the output names none of {', '.join(f'rank {r}' for r in stage['ranks'])}:\n{output}")
    print("says:", named[0])


def descendants(pid):
    """Processes below pid, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rank_processes(mpirun_pid, run):
    """{rank: pid} of the rannc-run processes under mpirun, from OMPI_COMM_WORLD_RANK."""
    ranks = {}
    for pid in descendants(mpirun_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if os.path.basename(run).encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = pid
    return ranks


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def killed_rank(args, plan, plan_path):
    ranks = len(plan["ranks"])
    job = subprocess.Popen(mpirun_command(ranks, args.run, plan_path, "--steps", 100000, *RUN_ARGS), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=mpirun_env(), start_new_session=True)
    lines, step2 = [], threading.Event()

    def read():
        for line in job.stdout:
            lines.append(line)
            if line.startswith("step 2 "):
                step2.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        start = time.monotonic()
        while not step2.wait(0.5):
            if job.poll() is not None or time.monotonic() - start > 300:
                fail("rank 0 printed no 'step 2' line (within 300 s):\n" + "".join(lines))
        processes = rank_processes(job.pid, args.run)
        if sorted(processes) != list(range(ranks)):
            fail(f"found rannc-run ranks {sorted(processes)} under mpirun, expected 0..{ranks - 1}")
        victim = ranks - 1
        os.kill(processes[victim], signal.SIGKILL)
        killed = time.monotonic()
        try:
            status = job.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            fail(f"mpirun still runs {DEADLINE} s after rank {victim} was killed")
        seconds = time.monotonic() - killed
        reader.join(10)
        output = "".join(lines)
        print(f"killed rank {victim} (pid {processes[victim]}) after step 2: mpirun exit {status} after {seconds:.1f} s")
        if status == 0:
            fail(f"mpirun exited 0 after rank {victim} was killed\n{output}")
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in processes.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [rank for rank, pid in processes.items() if alive(pid)]
        if left:
            fail(f"ranks {left} still run after mpirun exited")
        # Lines joined: OpenMPI 5 wraps its "process rank 3 ... exited on / signal 9 (Killed)".
        tail = " ".join(output.splitlines()[-50:])
        named = re.search(rf"\brank {victim}\b.{{0,80}}?(kill|signal 9)", tail, re.IGNORECASE)
        if not named:
            fail(f"no line says that rank {victim} was killed:\n{output[-4000:]}")
        print("says:", named.group(0))
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def rank_statuses(args, plan_path, ranks, status_dir, *run_args):
    """Runs the job with each rank's exit status recorded in status_dir (the wrapper itself exits 0,
    so mpirun kills no rank that is still on its way out); returns {rank: status}, output, seconds."""
    shutil.rmtree(status_dir, ignore_errors=True)
    os.makedirs(status_dir)
    wrapper = f'"$0" "$@"; echo $? > {status_dir}/rank_$OMPI_COMM_WORLD_RANK'
    command = mpirun_command(ranks, "sh", "-c", wrapper, args.run, plan_path, *run_args)
    status, output, seconds = run_job(command, DEADLINE + 30)
    if status is None:
        fail(f"the job still ran after {DEADLINE + 30} s\n{output}")
    statuses = {}
    for rank in range(ranks):
        try:
            with open(os.path.join(status_dir, f"rank_{rank}")) as f:
                statuses[rank] = int(f.read())
        except (OSError, ValueError):
            statuses[rank] = None
    return statuses, output, seconds


def expect_stop(args, plan, plan_path, run_args, says, status):
    """The plain job exits non-zero promptly with one line matching `says`; every rank exits `status`."""
    ranks = len(plan["ranks"])
    job_status, output, seconds = run_job(mpirun_command(ranks, args.run, plan_path, *run_args), DEADLINE)
    print(f"exit {job_status} after {seconds:.1f} s")
    if job_status is None or job_status == 0:
        fail(f"expected a non-zero exit within {DEADLINE} s\n{output}")
    ours = [line for line in output.splitlines() if line.startswith("rannc-run:") and "rannc-run: " + describe_prefix(plan_path) not in line]
    named = [line for line in ours if re.search(says, line)]
    if len(named) != 1 or len(ours) != 1:
        fail(f"expected exactly one rannc-run line matching {says!r}, got {ours}\n{output}")
    if any(sign in output for sign in ("terminate called", "Segmentation fault", "core dumped")):
        fail(f"a crash:\n{output}")
    print("says:", named[0])
    statuses, output, _ = rank_statuses(args, plan_path, ranks, os.path.join(args.out, "status"), *run_args)
    if set(statuses.values()) != {status}:
        fail(f"rank exit statuses {statuses}, expected {status} on every rank\n{output}")
    print(f"every rank exits {status}")
    return output


def describe_prefix(plan_path):
    return plan_path + ": "  # rank 0's description of the job ("rannc-run: PLAN: 4 ranks, ...")


def nan_loss(args, plan, plan_path):
    data = os.path.join(args.out, "data")
    training_reference.make_data(plan, 3, "cross_entropy", data, seed=1)
    batch = plan["batch"]["global"]
    for spec in plan["model"]["inputs"]:
        path = os.path.join(data, spec["name"] + ".npy")
        values = np.load(path)
        values[batch:2 * batch] = np.nan
        np.save(path, values)
    report = os.path.join(args.out, "report.json")
    if os.path.exists(report):
        os.remove(report)
    run_args = ["--steps", 3, "--data", data, "--loss", "cross_entropy", "--optimizer", "sgd", "--report", report]
    output = expect_stop(args, plan, plan_path, run_args, r"^rannc-run: step 1: the loss is nan; training stopped", 1)
    if not re.search(r"^step 0 loss ", output, re.MULTILINE) or re.search(r"^step 1 loss ", output, re.MULTILINE):
        fail(f"expected step 0 and no step 1 printed:\n{output}")
    with open(report) as f:
        written = json.load(f)
    if [s["step"] for s in written["steps"]] != [0] or "step 1" not in written.get("stopped", ""):
        fail(f"the report does not hold step 0 and what stopped training: {written}")
    print("report:", written["stopped"])


def diverged(args, plan, plan_path):
    run_args = ["--steps", 20, "--loss", "mse", "--optimizer", "sgd", "--lr", "1e30"]
    expect_stop(args, plan, plan_path, run_args, r"^rannc-run: step \d+: the loss is (nan|inf|-inf); training stopped", 1)


def unwritable_report(args, plan, plan_path):
    report = "/proc/nonexistent/report.json"
    run_args = ["--steps", 2, *RUN_ARGS, "--report", report]
    output = expect_stop(args, plan, plan_path, run_args, rf"^rannc-run: (rank 0: )?--report {report}: cannot create: ", 2)
    if re.search(r"^step \d", output, re.MULTILINE):
        fail(f"training started although the report cannot be written:\n{output}")


def bad_options(args, plan, plan_path):
    cases = [(["--bucket-kib", 0], r"--bucket-kib 0: must be 1 to 2\^30"),
             (["--bucket-kib", 2**30 + 1], rf"--bucket-kib {2**30 + 1}: must be 1 to 2\^30"),
             (["--lr-schedule", "step"], r"--lr-schedule step: unknown \(known: constant, linear, cosine\)"),
             (["--warmup-steps", -1], r"--warmup-steps must not be negative"),
             (["--clip-grad-norm", -1], r"--clip-grad-norm -1: must be 0 to 1e\+30"),
             (["--weight-decay", -0.5], r"--weight-decay -0.5: must be 0 to 1e\+06"),
             (["--lr", "nan"], r"--lr nan: must be 0 to 1e\+30"),
             (["--save-every", 2], r"--save-every needs --save DIR"),
             (["--save", "/proc/nonexistent/ckpt"], r"(rank 0: )?--save /proc/nonexistent/ckpt: cannot create"),
             (["--save", "/dev/null"], r"(rank 0: )?--save /dev/null: cannot create"),
             (["--resume", "/nonexistent"], r"--resume /nonexistent: not a folder"),
             (["--resume", "/tmp"], r"--resume /tmp: no checkpoint"),
             (["--resume", "/tmp", "--init", "/dev/zero"], r"--resume and --init: give one"),
             (["--init", "/dev/zero"], r"--init /dev/zero: not a regular file"),
             (["--init", plan_path], r"--init .*plan.json: not a state dict saved by torch.save")]
    for option, says in cases:
        # The option replaces RUN_ARGS' own setting of it, if any.
        base = list(RUN_ARGS)
        if option[0] in base:
            del base[base.index(option[0]):base.index(option[0]) + 2]
        expect_stop(args, plan, plan_path, ["--steps", 2, *base, *option], rf"^rannc-run: {says}", 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["world-size", "bad-stage-file", "killed-rank", "nan-loss", "diverged",
                                          "unwritable-report", "bad-options"])
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--np", type=int, default=4, help="devices to plan for")
    args = parse(parser)

    plan_dir = os.path.join(args.out, "plan")
    plan = partition(args.partition, args.model, plan_dir, args.np, args.extra)
    print("plan:", describe(plan))
    {"world-size": world_size, "bad-stage-file": bad_stage_file, "killed-rank": killed_rank, "nan-loss": nan_loss,
     "diverged": diverged, "unwritable-report": unwritable_report, "bad-options": bad_options}[args.check](
        args, plan, os.path.join(plan_dir, "plan.json"))
    print("OK:", args.check)


if __name__ == "__main__":
    main()
