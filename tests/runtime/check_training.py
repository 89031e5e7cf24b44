"""rannc-run trains as one process would: partition a model, run the plan under mpirun on a data
folder, and compare the loss of every step with single-process torch SGD (or Adam) on the same data.

usage: check_training.py --partition BIN --run BIN --model PATH [--reference-model PATH] --out DIR [--np 4] [--steps 5]
           [--loss cross_entropy|mse] [--lr 0.05] [--seed 1] [--accumulate] [--tolerance 1e-4]
           [--expect-stages K] [--expect-replicas] [--expect-schedule NAME] [--expect-sharded] [--expect-offload] [--expect-selective]
           [--expect-tensor-parallel T] [--expect-sequence-parallel on|off] [--expect-interleave V] [--expect-memory-within LOW] [--expect-core-memory] [--dropout]
           [--recompute] [--offload] [--optimizer sgd|momentum|adam] [--bucket-kib N] [--weight-decay X]
           [--clip-grad-norm X] [--lr-schedule constant|linear|cosine] [--warmup-steps N] [--shuffle]
           [--data-steps X] [--accumulate-steps K] -- EXTRA_PARTITION_ARGS...

Checks: the plan has the expected shape; rannc-run exits 0; rank 0 prints one
`step N loss X ms Y lr R samples/s S eta E s` line per step (R the schedule's rate) and --log holds
the same steps as JSON lines; the report has one entry per step and per rank (peak_mem_bytes > 0); each
rank read from --data exactly its rows of its stage's arrays (data_bytes); each step's
loss is within relative --tolerance of the reference (--accumulate: the reference forwards the plan's
microbatches one by one, for BatchNorm; always for a bf16-mixed plan, see cut_like_the_plan()); and the updates are visible at that tolerance (the
reference without updates differs by 10x the tolerance at some step), so a run that never steps
cannot pass. --expect-selective: the stage files call their attention cores through
rannc::recompute_core, and the plan trained again with recompute off and full gives the same losses
(selective_recompute.py; --dropout makes the run without recomputation the reference).

The reference runs on one thread like each rank and adds gradients in the runtime's order (see
training_reference.py): the ResNet-50 sample's gradients change by a few percent when its weights
change in the last bit, so two correct runs that merely add in different orders agree to ~1e-6 on
steps 0 and 1 and only to ~1e-2 later.
"""
import argparse
import atexit
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import training_reference  # first: it sets OMP_NUM_THREADS before numpy or torch start OpenMP
import selective_recompute  # noqa: E402
from plan_memory import memory_misses  # noqa: E402

import numpy as np  # noqa: E402

STEP_LINE = re.compile(r"^step (\d+) loss (\S+) ms (\S+) lr (\S+) samples/s (\S+) eta (\S+) s$")


def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def partition(rannc, model, out_dir, gpus, extra, optimizer="sgd"):
    """Plans `model` for `gpus` CPU devices into out_dir; returns the plan."""
    shutil.rmtree(out_dir, ignore_errors=True)
    command = [rannc, os.path.abspath(model), *extra, "--device", "cpu", "--gpus", str(gpus), "--optimizer", optimizer,
               "-o", out_dir]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        fail(f"{' '.join(command)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    with open(os.path.join(out_dir, "plan.json")) as f:
        return json.load(f)


def check_tensor_parallel_plan(plan, degree, sequence_parallel):
    """Every stage runs on groups of `degree` devices and names one stage file per tensor rank, and some
    stage splits regions; with sequence parallelism "on" some stage has sequence ops, with "off" none."""
    split_stages = [s for s in plan["stages"] if s.get("tensor_parallel", {}).get("regions")]
    if not split_stages:
        fail(f"expected some stage to split regions over {degree} devices, none does")
    sequence_ops = any(s.get("tensor_parallel", {}).get("sequence_ops") for s in plan["stages"])
    if sequence_parallel is not None and sequence_ops != (sequence_parallel == "on"):
        fail(f"expected sequence parallelism {sequence_parallel}, the plan's sequence ops say otherwise")
    for stage in plan["stages"]:
        split = stage.get("tensor_parallel", {})
        if split.get("degree", 1) != degree:
            fail(f"expected stage {stage['id']} on groups of {degree} devices: {split.get('degree', 1)}")
        files = [f["file"] for f in split.get("files", [])]
        if files != [f"stage_{stage['id']}_tp{r}.pt" for r in range(degree)]:
            fail(f"expected one stage file per tensor rank of stage {stage['id']}: {files}")
    print(f"tensor parallel: {degree} ranks per stage, regions per stage",
          [len(s["tensor_parallel"]["regions"]) for s in plan["stages"]], "sequence-parallel ops per stage",
          [len(s["tensor_parallel"]["sequence_ops"]) for s in plan["stages"]])


def parse(parser):
    """Parses the arguments before `--`; the ones after it are returned as `extra` (partition arguments)."""
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]
    return args


def describe(plan):
    batch = plan["batch"]
    replicas = "/".join(str(s["replicas_per_pipeline"]) for s in plan["stages"])
    return (f"{len(plan['stages'])} stages, replicas per pipeline {replicas}, {batch['pipelines']} pipelines x "
            f"{batch['microbatches']} microbatches x {batch['microbatch_size']} samples = {batch['global']}, "
            f"{plan['schedule']}, {len(plan['ranks'])} ranks")


def mpirun_command(ranks, run, plan_path, *args):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), run,
            plan_path, *map(str, args)]


_MPI_TMPDIR = None


def mpirun_env():
    """One thread per rank, and a temporary folder of this test's own for Open MPI (removed at
    exit): a job a fault test kills leaves its session folder behind, and Open MPI 5 refuses to
    start a later job whose process id happens to match one (PMIX_ERR_EXISTS, "prte_session_dir
    failed")."""
    global _MPI_TMPDIR
    if _MPI_TMPDIR is None:
        _MPI_TMPDIR = tempfile.mkdtemp(prefix="rannc-mpi-")
        atexit.register(shutil.rmtree, _MPI_TMPDIR, True)
    return dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=_MPI_TMPDIR)


def run_job(command, timeout):
    """Runs an mpirun job in its own process group; returns (exit status, output, seconds).
    On timeout the whole group is killed and the status is None."""
    start = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=mpirun_env(),
                           start_new_session=True)
    try:
        output, _ = job.communicate(timeout=timeout)
        status = job.returncode
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        output, _ = job.communicate()
        status = None
    return status, output, time.monotonic() - start


def set_stage_flags(plan_path, recompute, offload):
    """Turns on recompute and/or offload for every stage (the planner sets them only when memory is short)."""
    with open(plan_path) as f:
        plan = json.load(f)
    for stage in plan["stages"]:
        stage["recompute"] = stage["recompute"] or recompute
        stage["offload"] = stage["offload"] or offload
    with open(plan_path, "w") as f:
        json.dump(plan, f, indent=1)
    return plan


def train(args, plan_path, data_dir, report_path, log_path):
    """Runs the plan under mpirun; returns rank 0's output, its step lines matched and the report."""
    for stale in (report_path, log_path):
        if os.path.exists(stale):
            os.remove(stale)
    with open(plan_path) as f:
        ranks = len(json.load(f)["ranks"])
    command = mpirun_command(ranks, args.run, plan_path, "--steps", args.steps,
                             "--data", data_dir, "--loss", args.loss, "--optimizer", args.optimizer, "--lr", args.lr,
                             "--seed", args.seed, "--report", report_path, "--log", log_path,
                             *(["--bucket-kib", args.bucket_kib] if args.bucket_kib else []),
                             "--weight-decay", args.weight_decay, "--clip-grad-norm", args.clip_grad_norm,
                             "--lr-schedule", args.lr_schedule, "--warmup-steps", args.warmup_steps,
                             "--accumulate-steps", args.accumulate_steps, *(["--shuffle"] if args.shuffle else []))
    print("run:", " ".join(command), flush=True)
    status, output, seconds = run_job(command, 600)
    if status != 0:
        fail(f"rannc-run: {'timed out after 600 s' if status is None else f'exit {status}'}\n{output}")
    print(f"rannc-run: {seconds:.1f} s")
    printed = [STEP_LINE.match(line.strip()) for line in output.splitlines() if line.startswith("step ")]
    if any(m is None for m in printed) or [int(m.group(1)) for m in printed] != list(range(args.steps)):
        fail(f"rank 0 must print 'step N loss X ms Y lr R samples/s S eta E s' for steps 0..{args.steps - 1}; "
             f"output:\n{output}")
    try:
        with open(report_path) as f:
            report = json.load(f)
    except (OSError, ValueError) as error:
        fail(f"report {report_path}: {error}")
    return output, printed, report


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def check_against(report, printed, reference, frozen, args):
    """Each step's loss is within relative --tolerance of the reference's (frozen: the reference
    without updates, shown beside it), and rank 0 printed the loss the report holds."""
    bad = []
    print(f"{'step':>4} | {'rannc-run':>12} | {'reference':>12} | {'rel diff':>9} | {'tolerance':>9} | {'no update':>12}")
    for step, (entry, want, line) in enumerate(zip(report["steps"], reference, printed)):
        got, shown = float(entry["loss"]), float(line.group(2))
        still = f"{frozen[step]:>12.6f}" if frozen else f"{'':>12}"
        print(f"{step:>4} | {got:>12.6f} | {want:>12.6f} | {relative(got, want):>9.2e} | {args.tolerance:>9.1e} | {still}")
        if not relative(got, want) < args.tolerance:  # NaN fails too
            bad.append(step)
        if not abs(shown - got) <= 1e-5 * abs(got) + 1e-6:
            fail(f"step {step}: rank 0 printed loss {shown}, the report says {got}")
    if bad:
        fail(f"steps {bad}: the loss differs from the reference beyond the tolerance")


def check_report(report, plan, steps):
    ranks = len(plan["ranks"])
    if [s.get("step") for s in report.get("steps", [])] != list(range(steps)):
        fail(f"report steps {[s.get('step') for s in report.get('steps', [])]}, expected 0..{steps - 1}")
    entries = sorted(report.get("ranks", []), key=lambda r: r.get("rank", -1))
    if [r.get("rank") for r in entries] != list(range(ranks)):
        fail(f"report ranks {[r.get('rank') for r in entries]}, expected 0..{ranks - 1}")
    for entry in entries:
        expected_stage = plan["ranks"][entry["rank"]]["stage"]
        if entry.get("stage") != expected_stage:
            fail(f"report rank {entry['rank']}: stage {entry.get('stage')}, the plan says {expected_stage}")
        if not entry.get("peak_mem_bytes", 0) > 0:
            fail(f"report rank {entry['rank']}: peak_mem_bytes {entry.get('peak_mem_bytes')}")
        for key in ("fwd_ms", "bwd_ms", "comm_ms"):
            if not isinstance(entry.get(key), (int, float)) or entry[key] < 0:
                fail(f"report rank {entry['rank']}: {key} {entry.get(key)}")
        host = entry.get("host_ms", {})
        if sorted(host) != ["data", "optimizer", "passes", "wait"] or min(host.values()) < 0:
            fail(f"report rank {entry['rank']}: host_ms {host}")
        # The steps' times are rank 0's, whose phases are parts of its steps.
        step_ms = statistics.mean(s["ms"] for s in report["steps"])
        if entry["rank"] == 0 and (not host["passes"] > 0 or sum(host.values()) > step_ms * 1.001 + 0.001):
            fail(f"report rank 0: host_ms {host} do not fit in the mean step of {step_ms:.3f} ms")


def check_memory(report, plan, low):
    """Each rank's measured peak is at most the plan's prediction for its device and at least `low` of it."""
    missed = memory_misses(report, plan, low)
    if missed:
        fail(f"ranks whose peak memory is not within [{low}, 1] of the plan's prediction: {missed}")


def check_progress(printed, log_path, report, plan, args):
    """Each step's printed and logged learning rate is the schedule's; the log's losses are the report's."""
    try:
        with open(log_path) as f:
            logged = [json.loads(line) for line in f]
    except (OSError, ValueError) as error:
        fail(f"--log {log_path}: {error}")
    if [entry.get("step") for entry in logged] != list(range(args.steps)):
        fail(f"--log steps {[entry.get('step') for entry in logged]}, expected 0..{args.steps - 1}")
    for step, (line, entry, reported) in enumerate(zip(printed, logged, report["steps"])):
        lr = args.lr * training_reference.lr_factor(args.lr_schedule, step, args.warmup_steps, args.steps)
        if abs(float(line.group(4)) - lr) > 1e-5 * lr + 1e-12 or abs(entry["lr"] - lr) > 1e-9 * lr + 1e-15:
            fail(f"step {step}: learning rate printed {line.group(4)}, logged {entry['lr']}, the schedule's {lr}")
        if entry["loss"] != reported["loss"] or not entry["samples_per_s"] > 0:
            fail(f"step {step}: --log {entry} against the report's {reported}")


def check_offload_bytes(report, plan, steps):
    """An offloaded stage's ranks copy their weights in and their gradients out once per step; no
    other rank copies anything."""
    for entry in report["ranks"]:
        stage = plan["stages"][entry["stage"]]
        expected = 2 * steps * sum(p["bytes"] for p in stage["params"]) if stage["offload"] else 0
        if entry.get("offload_bytes") != expected:
            fail(f"rank {entry['rank']} (stage {stage['id']}, offload {stage['offload']}): copied "
                 f"{entry.get('offload_bytes')} bytes, expected {expected}")


def check_data_bytes(report, plan, steps, data_dir):
    """Each rank reads from --data exactly its rows of the arrays its stages take (its device group's
    model chunks in an interleaved plan): per step, its replica's share of its pipeline's samples
    (B / pipelines / replicas), of each model input the stages consume, and of the target where
    the stage whose output the loss is taken of runs."""
    loss_stage = next(s["id"] for s in plan["stages"] if any(o.get("model_output") for o in s["outputs"]))
    batch = plan["batch"]
    groups = len(plan["stages"]) // plan.get("interleave", 1)
    for rank in report["ranks"]:
        stage = plan["stages"][rank["stage"]]
        chunks = plan["stages"][rank["stage"]::groups]
        names = []
        for chunk in chunks:
            names += [i["source"]["model_input"] for i in chunk["inputs"]
                      if "model_input" in i.get("source", {}) and i["source"]["model_input"] not in names]
        # A sharded plan's ranks also read the inputs its tables' ids come from.
        files = plan.get("sharding", {}).get("files")
        names += [n for n in files["indices"]["inputs"] if n not in names] if files else []
        if loss_stage in [c["id"] for c in chunks] and os.path.exists(os.path.join(data_dir, "target.npy")):
            names.append("target")
        samples = batch["microbatches"] * replica_samples(plan, stage, rank["rank"])
        row_bytes = 0
        for name in names:
            array = np.load(os.path.join(data_dir, name + ".npy"), mmap_mode="r")
            row_bytes += array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        expected = steps * samples * row_bytes
        if rank.get("data_bytes") != expected:
            fail(f"rank {rank['rank']} (stage {stage['id']}, {names}) read {rank.get('data_bytes')} bytes of --data, "
                 f"its rows are {expected} ({steps} steps x {samples} samples x {row_bytes} bytes)")
    print("data read per rank (bytes):", {r["rank"]: r["data_bytes"] for r in report["ranks"]})


def replica_samples(plan, stage, rank):
    """The samples of a microbatch a rank of a stage runs: its replica's share (replica_samples, where
    a mixed cluster's kinds share the stage unequally), else an equal share."""
    batch = plan["batch"]
    if "replica_samples" not in stage:
        return batch["microbatch_size"] // stage["replicas_per_pipeline"]
    degree = stage.get("tensor_parallel", {}).get("degree", 1)
    replica = stage["ranks"].index(rank) // degree
    return stage["replica_samples"][replica % stage["replicas_per_pipeline"]]


def check_shares(plan):
    """A stage shared by two device kinds, its replicas running unequal shares of each microbatch."""
    kinds = {r["rank"]: r.get("device") for r in plan["ranks"]}
    for stage in plan["stages"]:
        shares = stage.get("replica_samples", [])
        on = {kinds[r] for r in stage["ranks"]}
        if len(set(shares)) > 1 and len(on) > 1 and None not in on:
            print(f"stage {stage['id']}: replicas on {sorted(on)} run {shares} samples of each microbatch")
            return
    fail("expected a stage whose replicas on two device kinds run unequal shares of the microbatch, the plan has none: "
         f"{[(s.get('replica_samples'), sorted({str(kinds[r]) for r in s['ranks']})) for s in plan['stages']]}")


def cut_like_the_plan(plan, accumulate):
    """Whether the reference must forward the plan's microbatches one by one rather than the
    whole batch at once. BatchNorm asks for it (--accumulate), and so does bf16: each bf16 matmul
    rounds its result once, so a weight gradient of the whole batch and the fp32 sum of the
    microbatches' bf16 gradients differ in the last bf16 bit (2^-8), and which way depends on the
    CPU's bf16 kernels (AVX2, AVX-512, AVX512-BF16). Over 5 steps that grew to a 2e-4 loss
    difference on one CPU and 1.3e-4 on another; cut like the plan, the losses are equal to the
    last fp32 bit on each, so a real error cannot hide under a bf16-sized tolerance."""
    if plan["precision"] != "bf16-mixed":
        return accumulate
    if any(stage["replicas_per_pipeline"] > 1 for stage in plan["stages"]):
        # Replicas of a stage round their own slices' gradients, which no single process cuts alike.
        fail("a bf16-mixed plan with replicated stages has no single-process reference cut like it; "
             "plan pipelines instead")
    return True


def check_bf16(report, reference, model, data_dir, plan, args):
    """A bf16-mixed plan computes in bfloat16: its first loss is nearer torch.autocast's than fp32's."""
    fp32 = training_reference.reference_losses(model, data_dir, plan, 1, args.loss, 0.0, args.accumulate)[0]
    got = float(report["steps"][0]["loss"])
    print(f"step 0: rannc-run {got:.9f}, torch autocast bf16 {reference[0]:.9f}, torch fp32 {fp32:.9f}")
    if not abs(got - reference[0]) < abs(got - fp32):
        fail("the bf16-mixed plan's first loss is not nearer torch's bfloat16 autocast than fp32: is autocast on?")


def check_sharded_state(report, plan):
    """Each rank of a sharded stage steps about 1/n of its stage's weights (n: the ranks sharing
    them), every other rank at most all of them (fewer where a tied weight is sharded by a stage
    it shares): the optimizer state really is split."""
    stepped = {entry["rank"]: entry.get("optimizer_elements") for entry in report["ranks"]}
    for stage in plan["stages"]:
        elements = sum(p["numel"] for p in stage["params"])
        for rank in stage["ranks"]:
            if stage.get("state_sharding", "none") == "none":
                if not 0 < stepped[rank] <= elements:
                    fail(f"rank {rank} (stage {stage['id']}, unsharded) steps {stepped[rank]} of {elements} elements")
            elif not stepped[rank] < elements / len(stage["ranks"]) * 1.5:
                fail(f"rank {rank} (stage {stage['id']}, sharded over {len(stage['ranks'])}) steps {stepped[rank]} "
                     f"of its {elements} weight elements")
    print("sharded state: optimizer elements per rank", [stepped[r] for r in sorted(stepped)])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--reference-model",
                        help="TorchScript of the same module with the same weights, for the reference (an ONNX --model)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--np", type=int, default=4, help="devices to plan for")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--loss", default="cross_entropy", choices=training_reference.LOSSES)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--accumulate", action="store_true")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--expect-stages", type=int)
    parser.add_argument("--expect-replicas", action="store_true", help="some stage has >= 2 replicas per pipeline")
    parser.add_argument("--expect-schedule")
    parser.add_argument("--expect-sharded", action="store_true", help="some stage has sharded optimizer state")
    parser.add_argument("--expect-offload", action="store_true", help="the planner offloads some stage")
    parser.add_argument("--expect-shares", action="store_true",
                        help="a stage's replicas on two device kinds of a mixed cluster run unequal shares of each microbatch")
    parser.add_argument("--expect-tensor-parallel", type=int, metavar="T",
                        help="every stage splits its layers over T devices, each rank loading its own stage file")
    parser.add_argument("--expect-sequence-parallel", choices=("on", "off"),
                        help="with --expect-tensor-parallel: every stage has sequence-parallel ops (on) or none (off)")
    parser.add_argument("--expect-interleave", type=int, metavar="V",
                        help="the plan runs V model chunks on each device group (interleaved 1F1B)")
    parser.add_argument("--expect-selective", action="store_true",
                        help="every stage recomputes selectively, its files call their attention cores through "
                             "rannc::recompute_core, and the plan trained with recompute off and full gives the same "
                             "losses with more and less peak memory (selective_recompute.py)")
    parser.add_argument("--expect-core-memory", action="store_true",
                        help="with --expect-selective: the selective run's peak memory lies between the full and "
                             "no-recompute runs' on every rank with attention cores")
    parser.add_argument("--dropout", action="store_true",
                        help="with --expect-selective: the attention cores draw dropout, so the reference is the "
                             "plan trained without recomputation, not one process")
    parser.add_argument("--expect-memory-within", type=float, metavar="LOW",
                        help="every rank's peak tensor memory is at most the plan's prediction for its device and "
                             "at least LOW of it")
    parser.add_argument("--optimizer", default="sgd", choices=training_reference.OPTIMIZERS)
    parser.add_argument("--bucket-kib", type=int, help="rannc-run's gradient bucket of sharded state")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--clip-grad-norm", type=float, default=0.0,
                        help="also checks that some step's gradient norm was above it (the clipping acted)")
    parser.add_argument("--lr-schedule", default="constant", choices=training_reference.SCHEDULES)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--accumulate-steps", type=int, default=1,
                        help="rannc-run --accumulate-steps: the reference takes that many global batches per step at once")
    parser.add_argument("--shuffle", action="store_true", help="rannc-run --shuffle (the order from --seed)")
    parser.add_argument("--data-steps", type=float, help="the data set's size in global batches (default --steps; "
                        "fewer: the run goes over it in epochs)")
    parser.add_argument("--recompute", action="store_true", help="set recompute on every stage of the plan")
    parser.add_argument("--offload", action="store_true", help="set offload on every stage of the plan")
    args = parse(parser)
    if args.dropout and not args.expect_selective:
        parser.error("--dropout compares with the run without recomputation, which only --expect-selective trains")

    plan_dir, data_dir = os.path.join(args.out, "plan"), os.path.join(args.out, "data")
    plan = partition(args.partition, args.model, plan_dir, args.np, args.extra, args.optimizer)
    print("plan:", describe(plan))
    if args.expect_stages is not None and len(plan["stages"]) != args.expect_stages:
        fail(f"expected {args.expect_stages} stages, the plan has {len(plan['stages'])}")
    if args.expect_replicas and all(s["replicas_per_pipeline"] < 2 for s in plan["stages"]):
        fail("expected a stage with 2 or more replicas per pipeline, the plan has none")
    if args.expect_schedule and plan["schedule"] != args.expect_schedule:
        fail(f"expected schedule {args.expect_schedule}, the plan has {plan['schedule']}")
    if args.expect_sharded and all(s.get("state_sharding", "none") == "none" for s in plan["stages"]):
        fail("expected a stage with sharded optimizer state, the plan has none")
    if args.expect_offload and not any(s["offload"] for s in plan["stages"]):
        fail("expected the planner to offload a stage, the plan offloads none")
    if args.expect_shares:
        check_shares(plan)
    if args.expect_interleave and plan.get("interleave", 1) != args.expect_interleave:
        fail(f"expected {args.expect_interleave} model chunks per device group, the plan has {plan.get('interleave', 1)}")
    if args.expect_tensor_parallel:
        check_tensor_parallel_plan(plan, args.expect_tensor_parallel, args.expect_sequence_parallel)
    if args.expect_selective and any(s["recompute"] != "selective" for s in plan["stages"]):
        fail(f"expected selective recomputation on every stage: {[s['recompute'] for s in plan['stages']]}")

    args.accumulate = cut_like_the_plan(plan, args.accumulate)
    if args.recompute or args.offload:
        plan = set_stage_flags(os.path.join(plan_dir, "plan.json"), args.recompute, args.offload)
    data_rows = int((args.data_steps or args.steps * args.accumulate_steps) * plan["batch"]["global"])
    training_reference.make_data(plan, args.steps, args.loss, data_dir, args.seed, rows=data_rows)
    report_path = os.path.join(args.out, "report.json")
    log_path = os.path.join(args.out, "log.jsonl")
    output, printed, report = train(args, os.path.join(plan_dir, "plan.json"), data_dir, report_path, log_path)
    if args.expect_selective:
        cores = selective_recompute.check_files(plan, plan_dir, output, args.dropout)
    check_report(report, plan, args.steps)
    check_progress(printed, log_path, report, plan, args)
    if args.expect_memory_within is not None:
        check_memory(report, plan, args.expect_memory_within)
    if args.expect_sharded:
        check_sharded_state(report, plan)
    if args.clip_grad_norm > 0:
        norms = [s.get("grad_norm", 0) for s in report["steps"]]
        if not max(norms) > args.clip_grad_norm:
            fail(f"--clip-grad-norm {args.clip_grad_norm}: no step's gradient norm was above it {norms}: raise it")
        print("gradient norms before clipping:", [round(n, 4) for n in norms])
    if args.offload and not all(r.get("offload_bytes", 0) > 0 for r in report["ranks"]):
        fail(f"offload: every rank must report copied bytes, the report has {[r.get('offload_bytes') for r in report['ranks']]}")
    check_offload_bytes(report, plan, args.steps)
    check_data_bytes(report, plan, args.steps * args.accumulate_steps, data_dir)

    if args.expect_selective:
        variants = selective_recompute.compare_variants(args, plan, plan_dir, data_dir, report, train, cores)
    if args.dropout:
        # Dropout masks no single process draws alike: the plan trained keeping every activation is the reference.
        check_against(report, printed, variants["none"], None, args)
        print(f"OK: {args.steps} steps match the run without recomputation")
        return

    start = time.monotonic()
    model = os.path.abspath(args.reference_model or args.model)
    training = dict(weight_decay=args.weight_decay, clip_grad_norm=args.clip_grad_norm, schedule=args.lr_schedule,
                    warmup_steps=args.warmup_steps, shuffle_seed=args.seed if args.shuffle else None,
                    bf16_autocast=plan["precision"] == "bf16-mixed")
    # K batches accumulated per step train as one step of K times the batch (unshuffled data).
    reference_plan = json.loads(json.dumps(plan))
    reference_plan["batch"]["global"] *= args.accumulate_steps
    reference_plan["batch"]["microbatches"] *= args.accumulate_steps
    reference = training_reference.reference_losses(model, data_dir, reference_plan, args.steps, args.loss, args.lr,
                                                    args.accumulate, args.optimizer, **training)
    frozen = training_reference.reference_losses(model, data_dir, reference_plan, args.steps, args.loss, 0.0,
                                                 args.accumulate, args.optimizer, shuffle_seed=training["shuffle_seed"],
                                                 bf16_autocast=training["bf16_autocast"])
    print(f"reference: {time.monotonic() - start:.1f} s")

    check_against(report, printed, reference, frozen, args)
    if training["bf16_autocast"]:
        check_bf16(report, reference, model, data_dir, reference_plan, args)
    if max(relative(a, b) for a, b in zip(reference, frozen)) < 10 * args.tolerance:
        fail("the updates change the reference losses by less than 10x the tolerance at every step, too little "
             "to tell a run that never updates; raise --lr")
    print(f"OK: {args.steps} steps match the reference")


if __name__ == "__main__":
    main()
