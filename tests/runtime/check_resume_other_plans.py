"""A model trained under one plan after another, each resuming the last one's checkpoint: the
losses are those of single-process PyTorch.

usage: check_resume_other_plans.py --partition BIN --run BIN --model PATH --reference-model PATH --out DIR
           [--np 4] [--steps-each 3] --plan "PARTITION_ARGS" --plan "PARTITION_ARGS" ...
           [--other-batch "PARTITION_ARGS"] [--expect I:sharded|I:unsharded|I:tpT ...]

Adam, lr 0.01, cross entropy, on a --data folder: plan 1 trains steps 0..S-1 and saves; plan 2
resumes that checkpoint (written under plan 1: other stages, replicas, tensor ranks or sharding)
and trains to 2S, saving; and so on. Every step's loss equals the TorchScript reference model's
trained in one process with torch.optim.Adam, within 1e-5. Each resumed run says it re-cut a
checkpoint of another plan. --other-batch: a plan of another global batch, whose --resume is
refused with exit 2 and one line ("global batches"). Also refused so: a checkpoint of format
version 1 ("earlier rannc-run"), and one whose optimizer file holds an entry that is not
NAME:FIELD[@OFFSET] (its manifest updated to the file's bytes: "not an optimizer state entry"). --expect: what plan I must be (some stage with
sharded optimizer state, none, or every stage over T tensor ranks).
"""
import argparse
import hashlib
import json
import os
import shutil

import torch

from check_training import describe, fail, mpirun_command, parse, partition, run_job
from check_checkpoint import losses_of
import training_reference

RUN_ARGS = ("--loss", "cross_entropy", "--optimizer", "adam", "--lr", 0.01, "--seed", 1)
TOLERANCE = 1e-5


def kinds(plan):
    """What the plan is, in --expect's words."""
    sharded = any(stage.get("state_sharding", "none") != "none" for stage in plan["stages"])
    degrees = {stage.get("tensor_parallel", {}).get("degree", 1) for stage in plan["stages"]}
    return {"sharded" if sharded else "unsharded", *(f"tp{d}" for d in degrees)}


def run(args, plan, plan_path, data_dir, steps, *extra):
    command = mpirun_command(len(plan["ranks"]), args.run, plan_path, "--steps", steps, "--data", data_dir, *RUN_ARGS,
                             *extra)
    return run_job(command, 600)[:2]


def expect_refusal(args, plan, plan_path, data_dir, steps, checkpoint, words):
    status, output = run(args, plan, plan_path, data_dir, steps, "--resume", checkpoint)
    lines = [line for line in output.splitlines() if line.startswith("rannc-run:") and words in line]
    if status != 2 or not lines:
        fail(f"--resume {checkpoint}: expected exit 2 and a line with {words!r}, got exit {status}:\n{output}")
    print(f"refused ({words}):", lines[0])


def edited_copy(args, name):
    """A copy of the last plan's checkpoint, and its manifest."""
    last = os.path.join(args.out, f"saved_{len(args.plan) - 1}")
    with open(os.path.join(last, "latest")) as f:
        source = os.path.join(last, f.read().strip())
    copy = os.path.join(args.out, name)
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    with open(os.path.join(copy, "checkpoint.json")) as f:
        return copy, json.load(f)


def save_manifest(folder, manifest):
    with open(os.path.join(folder, "checkpoint.json"), "w") as f:
        json.dump(manifest, f)


def check_refusals(args, plan, data_dir, total):
    """Resumed under the first plan (another than the one that saved it)."""
    plan_path = os.path.join(args.out, "plan_0", "plan.json")
    old, manifest = edited_copy(args, "format_1")
    manifest["version"] = 1
    save_manifest(old, manifest)
    expect_refusal(args, plan, plan_path, data_dir, total + 1, old, "earlier rannc-run")
    bad, manifest = edited_copy(args, "bad_entry")
    name = next(n for n in sorted(manifest["files"]) if n.endswith(".optimizer.pt"))
    path = os.path.join(bad, name)
    state = torch.load(path)
    state["no field here"] = torch.zeros(2)
    torch.save(state, path)
    with open(path, "rb") as f:
        manifest["files"][name] = hashlib.sha256(f.read()).hexdigest()
    save_manifest(bad, manifest)
    expect_refusal(args, plan, plan_path, data_dir, total + 1, bad, "not an optimizer state entry")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--reference-model", required=True, help="the model as TorchScript, trained by the reference")
    parser.add_argument("--out", required=True)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--steps-each", type=int, default=3)
    parser.add_argument("--plan", action="append", required=True, help="partition arguments of one plan, in turn")
    parser.add_argument("--other-batch", help="partition arguments of a plan of another global batch")
    parser.add_argument("--expect", action="append", default=[], metavar="I:KIND",
                        help="plan I is KIND: sharded, unsharded or tpT")
    args = parse(parser)
    if len(args.plan) < 2:
        fail("give at least two --plan")
    os.makedirs(args.out, exist_ok=True)
    plans = []
    for i, plan_args in enumerate(args.plan):
        plan = partition(args.partition, args.model, os.path.join(args.out, f"plan_{i}"), args.np, plan_args.split(),
                         "adam")
        print(f"plan {i}: {describe(plan)}; {', '.join(sorted(kinds(plan)))}")
        plans.append(plan)
    for expect in args.expect:
        index, kind = expect.split(":")
        if kind not in kinds(plans[int(index)]):
            fail(f"plan {index} is {sorted(kinds(plans[int(index)]))}, not {kind}")
    total = args.steps_each * len(plans)
    data_dir = os.path.join(args.out, "data")
    training_reference.make_data(plans[0], total, "cross_entropy", data_dir, 1)

    losses = {}
    for i, plan in enumerate(plans):
        save_dir = os.path.join(args.out, f"saved_{i}")
        shutil.rmtree(save_dir, ignore_errors=True)
        report = os.path.join(args.out, f"report_{i}.json")
        resume = ["--resume", os.path.join(args.out, f"saved_{i - 1}")] if i > 0 else []
        status, output = run(args, plan, os.path.join(args.out, f"plan_{i}", "plan.json"), data_dir,
                             args.steps_each * (i + 1), "--save", save_dir, "--report", report, *resume)
        if status != 0:
            fail(f"plan {i}: rannc-run exit {status}\n{output}")
        if i > 0:
            said = [line for line in output.splitlines() if "saved under another plan" in line]
            if not said:
                fail(f"plan {i}: no line says the checkpoint was saved under another plan:\n{output}")
            print(said[0])
        got = losses_of(report)
        if sorted(got) != list(range(args.steps_each * i, args.steps_each * (i + 1))):
            fail(f"plan {i}: trained steps {sorted(got)}")
        losses.update(got)

    want = training_reference.reference_losses(args.reference_model, data_dir, plans[0], total, "cross_entropy", 0.01,
                                               optimizer_name="adam")
    print(f"{'step':>4} | {'plan':>4} | {'rannc-run':>14} | {'PyTorch':>14}")
    apart = []
    for step in range(total):
        print(f"{step:>4} | {step // args.steps_each:>4} | {losses[step]:>14.9f} | {want[step]:>14.9f}")
        if not abs(losses[step] - want[step]) <= TOLERANCE * abs(want[step]):
            apart.append(step)
    if apart:
        fail(f"steps {apart}: the losses part from single-process PyTorch's by more than {TOLERANCE}")
    print(f"OK: {len(plans)} plans in turn, {total} steps, the losses of one process within {TOLERANCE}")

    check_refusals(args, plans[0], data_dir, total)
    if args.other_batch:
        plan = partition(args.partition, args.model, os.path.join(args.out, "other_batch"), args.np,
                         args.other_batch.split(), "adam")
        status, output = run(args, plan, os.path.join(args.out, "other_batch", "plan.json"), data_dir, total + 1,
                             "--resume", os.path.join(args.out, f"saved_{len(plans) - 1}"))
        lines = [line for line in output.splitlines() if line.startswith("rannc-run:") and "global batches" in line]
        if status != 2 or len(lines) != 1:
            fail(f"--resume under a plan of another global batch: expected exit 2 and one line, got exit {status}:\n{output}")
        print("refused (another global batch):", lines[0])


if __name__ == "__main__":
    main()
