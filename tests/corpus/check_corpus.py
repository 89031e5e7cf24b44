"""One corpus model (tests/corpus/make_corpus.py) through the whole tool: partition it into K
stages whose replica counts differ, check the plan, `show` it, `verify` its stage files against
the model (forward outputs and every parameter gradient), and with --train also train it a few
steps under mpirun with rannc-run against single-process torch (tests/runtime/check_training.py).

usage: check_corpus.py --partition BIN --corpus DIR --model NAME --stages K --out DIR
           [--run BIN --train] [--steps 3]
       check_corpus.py --partition BIN --corpus DIR --model NAME --every-cut --out DIR

Unequal replicas: the model's batch B (the manifest's, 4) is planned as 2 microbatches of B/2
samples on K+1 devices in one node, so every device used means one stage has 2 replicas and the
others 1 (replica counts divide the microbatch). Where the planner would rather leave a device
unused (a model too small for replicas to pay), the manifest's `plan_args` for that stage count
replace the inputs, batch and microbatch count. The plan must show replica counts that differ
between stages, or the test fails (it would not test what it says).

Every cut (--every-cut): the planner picks one cut, and a value that crosses other cuts wrongly
(a mask built from sizes that a later stage must rebuild whole) goes unseen. So the model is
also planned with a stage at every op that can start one, as many stages as partition's `units`
(its --json summary), its example batch as one microbatch, one device per stage: each stage is
one block, so every boundary the planner could choose is cut at once, and verify checks them
all. The manifest's `every_cut_tolerance` replaces `tolerance` where the cuts' other summation
order moves a gradient that is zero in exact arithmetic.

A refusal of the partitioner (exit != 0) fails the test unless the manifest's `expect_refusal`
regex matches its one-line error; a model listed as refused that plans fails too, so the
expectation is dropped once the tool accepts it. Every failure prints the exact command line and
the tool's output, and a line `CLASS: ...` naming the kind of failure:
  wrong-values  verify ran and found outputs or gradients beyond the tolerance (or NaN)
  crash         a signal, an abort, "terminate called", or a timeout
  refusal       exit 1/2 with a message where no refusal was expected
  bad-plan      partition exited 0 but the plan is rejected (show/verify exit 2, or our plan checks)
  training      rannc-run's losses differ from single-process torch (or the job failed)
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_TESTS = os.path.join(os.path.dirname(HERE), "runtime")
PYTHON = sys.executable


def fail(kind, message):
    print(f"CLASS: {kind}", flush=True)
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def shell(command):
    return " ".join(c if re.fullmatch(r"[\w./:,=+-]+", c) else repr(c) for c in command)


def run(command, timeout):
    """Runs a command; returns (status, stdout, stderr, seconds). status None: timed out."""
    start = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        out, err = job.communicate(timeout=timeout)
        status = job.returncode
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, err = job.communicate()
        status = None
    return status, out, err, time.monotonic() - start


def crashed(status, output):
    return (status is None or status < 0 or status >= 128 or "terminate called" in output
            or "Segmentation fault" in output or "Aborted" in output or "core dumped" in output)


def describe_status(status):
    if status is None:
        return "timed out"
    if status < 0:
        return f"killed by signal {signal.Signals(-status).name}"
    return f"exit {status}"


def partition(args, model, entry, request, gpus, plan_dir):
    """Plans the model into plan_dir; returns partition's stdout, or None where the manifest
    expects the refusal the tool gave. Fails on anything else."""
    command = [args.partition, model, *request, "--device", "cpu", "--gpus", str(gpus), "--gpus-per-node", str(gpus),
               "--mem", "8G", "-o", plan_dir]
    print("partition:", shell(command), flush=True)
    status, stdout, stderr, seconds = run(command, args.timeout)
    print(f"partition: {describe_status(status)} in {seconds:.1f} s")
    expected = entry.get("expect_refusal")
    if status != 0:
        print(stdout + stderr)
        if crashed(status, stdout + stderr):
            fail("crash", f"{shell(command)}: {describe_status(status)}")
        lines = [line for line in stderr.splitlines() if line.strip()]
        if expected:
            if len(lines) == 1 and re.search(expected, lines[0]):
                print(f"OK: refused as the manifest expects ({expected!r}): {lines[0]}")
                return None
            fail("refusal", f"expected one line of stderr matching {expected!r}, got {describe_status(status)}: "
                            f"{stderr.strip()}")
        fail("refusal", f"{shell(command)}: {describe_status(status)}: {stderr.strip()}")
    if expected:
        fail("bad-plan", f"the manifest expects a refusal matching {expected!r}, but the model was planned: drop the "
                         f"expectation if the plan verifies")
    return stdout


def describe_plan(plan):
    replicas = [s.get("replicas_per_pipeline", s.get("replicas")) for s in plan["stages"]]
    b = plan["batch"]
    print(f"plan: {len(plan['stages'])} stages, replicas per pipeline {'/'.join(map(str, replicas))}, "
          f"{b.get('pipelines')} pipelines x {b['microbatches']} microbatches x {b['microbatch_size']} samples, "
          f"{len(plan['ranks'])} ranks, unused devices {plan.get('unused_devices')}")
    for s in plan["stages"]:
        crossing = [(i["name"], i["shape"], i["dtype"], i.get("batch_dim")) for i in s["inputs"] if "stage" in i["source"]]
        if crossing:
            print(f"  stage {s['id']} receives {crossing}")
    return replicas


def check_replicas(replicas, entry):
    if entry.get("one_replica"):
        if set(replicas) != {1}:
            fail("bad-plan", f"replicas {replicas}, but {entry['one_replica']}")
    elif len(set(replicas)) < 2:
        fail("bad-plan", f"the replica counts per stage {replicas} do not differ; the test needs stages with "
                         f"different replica counts")


def show_and_verify(args, plan_path, tolerance):
    show = [args.partition, "show", plan_path]
    status, stdout, stderr, seconds = run(show, 120)
    if status != 0:
        print(stdout + stderr)
        fail("crash" if crashed(status, stdout + stderr) else "bad-plan", f"{shell(show)}: {describe_status(status)}: "
             f"{stderr.strip()}")
    verify = [args.partition, "verify", plan_path, "--tolerance", str(tolerance)]
    print("verify:", shell(verify), flush=True)
    status, stdout, stderr, seconds = run(verify, args.timeout)
    print(stdout + stderr)
    print(f"verify: {describe_status(status)} in {seconds:.1f} s")
    if status != 0:
        if crashed(status, stdout + stderr):
            fail("crash", f"{shell(verify)}: {describe_status(status)}")
        kind = "wrong-values" if status == 1 else "bad-plan"
        fail(kind, f"{shell(verify)}: {describe_status(status)}: {(stderr.strip() or stdout.strip()).splitlines()[-1]}")


def check_every_cut(args, model, entry, out):
    """A stage at every op that can start one (partition's `units`; --stages takes up to that
    many): every boundary the planner could ever cut, all at once."""
    # The model's example batch as one microbatch: fixed-batch exports run only at it.
    request = [a for spec in entry["inputs"] for a in ("--input", spec)]
    request += ["--batch", str(entry["batch"]), "--microbatches", "1"]
    summary = partition(args, model, entry, [*request, "--plan-only", "--json"], 1, os.path.join(out, "count"))
    if summary is None:
        return
    units = json.loads(summary)["planning"]["units"]
    plan_dir = os.path.join(out, "plan")
    if partition(args, model, entry, [*request, "--stages", str(units)], units, plan_dir) is None:
        return
    plan_path = os.path.join(plan_dir, "plan.json")
    with open(plan_path) as f:
        plan = json.load(f)
    describe_plan(plan)
    blocks = [s.get("blocks") for s in plan["stages"]]
    if blocks != [[i, i + 1] for i in range(units)]:
        fail("bad-plan", f"{units} stages should each cover one block of {units}; got blocks {blocks}")
    show_and_verify(args, plan_path, entry["every_cut_tolerance"])
    print(f"OK: {entry['title']}, a stage at each of its {units} cut points, verified")


def check_stages(args, model, entry, out):
    """K stages on K+1 devices, so that replica counts differ between stages."""
    gpus = args.stages + 1
    # The manifest may replace the inputs, batch and microbatches per stage count (plan_args), where
    # the defaults leave devices unused instead of replicating a stage.
    override = entry.get("plan_args", {}).get(str(args.stages))
    if override:
        extra = list(override) + ["--stages", str(args.stages)]
    else:
        extra = [a for spec in entry["inputs"] for a in ("--input", spec)]
        extra += ["--batch", str(entry["batch"]), "--stages", str(args.stages), "--microbatches", "2"]
    plan_dir = os.path.join(out, "plan")
    if partition(args, model, entry, extra, gpus, plan_dir) is None:
        return
    plan_path = os.path.join(plan_dir, "plan.json")
    with open(plan_path) as f:
        plan = json.load(f)
    replicas = describe_plan(plan)
    if len(plan["stages"]) != args.stages:
        fail("bad-plan", f"asked for {args.stages} stages, the plan has {len(plan['stages'])}")
    check_replicas(replicas, entry)
    show_and_verify(args, plan_path, entry.get("tolerance", 1e-5))

    if args.train:
        if not entry.get("train"):
            print(f"note: the manifest does not list {args.model} for training; verify passed")
        elif not args.run:
            fail("training", "--train needs --run")
        else:
            train = [PYTHON, os.path.join(RUNTIME_TESTS, "check_training.py"), "--partition", args.partition,
                     "--run", args.run, "--model", model, "--out", os.path.join(out, "train"), "--np", str(gpus),
                     "--steps", str(args.steps), "--loss", entry["loss"], "--lr", str(entry.get("lr", 0.5)),
                     "--expect-stages", str(args.stages), "--expect-replicas"]
            if entry.get("accumulate"):
                train.append("--accumulate")
            train += ["--", *extra, "--gpus-per-node", str(gpus), "--mem", "8G"]
            print("train:", shell(train), flush=True)
            status, stdout, stderr, seconds = run(train, args.timeout)
            print(stdout + stderr)
            if status != 0:
                fail("crash" if crashed(status, stdout + stderr) and "FAIL:" not in stdout else "training",
                     f"{shell(train)}: {describe_status(status)}")
    print(f"OK: {entry['title']}, {args.stages} stages (replicas {'/'.join(map(str, replicas))}) verified"
          + (" and trained" if args.train and entry.get("train") else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", help="rannc-run, for --train")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--model", required=True)
    layout = parser.add_mutually_exclusive_group(required=True)
    layout.add_argument("--stages", type=int)
    layout.add_argument("--every-cut", action="store_true", help="a stage at every op that can start one")
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", action="store_true", help="also train under mpirun (models with train: true)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    if args.every_cut and args.train:
        parser.error("--train goes with --stages")

    with open(os.path.join(args.corpus, "manifest.json")) as f:
        manifest = json.load(f)
    if args.model not in manifest["models"]:
        fail("bad-plan", f"{args.model} is not in {args.corpus}/manifest.json (regenerate the corpus)")
    entry = manifest["models"][args.model]
    model = os.path.abspath(os.path.join(args.corpus, entry["file"]))
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    if args.every_cut:
        check_every_cut(args, model, entry, out)
    else:
        check_stages(args, model, entry, out)


if __name__ == "__main__":
    main()
