"""rannc-run's checkpoints: a killed job resumes with the losses of one never stopped, a checkpoint
goes back to PyTorch, and training starts from a PyTorch state_dict.

usage: check_checkpoint.py --partition BIN --run BIN --model PATH --sample NAME --samples DIR --out DIR
           --other-plan "PARTITION_ARGS" [--np 4] [--recompute] [--expect-sharded] [--expect-tensor-parallel T]
           [--expect-interleave V]
           -- EXTRA_PARTITION_ARGS...

Adam, constant learning rate, on a --data folder of STEPS + 1 steps:
1. straight: STEPS steps with --save S1 --save-every STEPS; the losses L. Each checkpoint holds one
   weights file per stage, or per tensor rank of a tensor-parallel stage (its slices); a rank of an
   interleaved plan writes one for each of its model chunks.
2. killed: the same run with --save S2 --save-every 3, SIGKILLed (the whole job) as soon as rank 0
   prints step 3, so S2/latest names step 3 (or a later multiple of 3 on a slow machine); then
   --resume S2 to STEPS: its steps equal L's exactly (the same plan, data and state).
3. export: `rannc-partition export S1 -o sd.pt [--module trained.pt]` (a tensor-parallel stage's
   slices joined); the sample's own nn.Module
   loads sd.pt with strict load_state_dict (and, for a TorchScript model, gives trained.pt's
   outputs); its loss on the data of step STEPS equals rannc-run's (a run of STEPS + 1 steps resumed
   from S1) within 1e-5.
4. init: the sample's nn.Module with other weights, saved by torch.save(model.state_dict()); rannc-run
   --init starts from it (each tensor rank from its slices): its first two losses are those of that
   model trained in PyTorch, 1e-5.
5. another plan (--other-plan: other stages, replicas, tensor ranks or sharding): the checkpoint of
   step 3 resumed under it to STEPS gives the straight run's losses within 1e-5.
6. refusals, each exit 2 with one line: --resume of a checkpoint of another model ("another
   model"), a checkpoint file changed since ("changed since"), --init of a state_dict without the
   model's weights ("has no").
7. a full disk (a tmpfs of 1.5 checkpoints; skipped where none can be mounted): the checkpoint at
   step 3 is written, the one at step 6 fails; every rank exits 2 with one line, nothing partial
   is left, and `latest` still names step 3, from which the run resumes to the straight losses.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import torch

from check_faults import alive, descendants
from check_training import describe, fail, mpirun_command, mpirun_env, parse, partition, run_job, set_stage_flags
import training_reference

STEPS = 12
SAVE_EVERY = 3
RUN_ARGS = ("--loss", "cross_entropy", "--optimizer", "adam", "--lr", 0.01, "--seed", 1)


def degree_of(stage):
    return stage.get("tensor_parallel", {}).get("degree", 1)


def weights_files(plan):
    """The checkpoint's weights files: stage_<s>.pt, or stage_<s>_tp<t>.pt per tensor rank."""
    names = []
    for stage in plan["stages"]:
        degree = degree_of(stage)
        names += ([f"stage_{stage['id']}.pt"] if degree == 1 else
                  [f"stage_{stage['id']}_tp{t}.pt" for t in range(degree)])
    return names


def check_weights_files(plan, save_dir):
    folder = os.path.join(save_dir, f"step_{STEPS:08d}")
    held = sorted(name for name in os.listdir(folder) if name.startswith("stage_") and ".optimizer." not in name)
    if held != sorted(weights_files(plan)):
        fail(f"{folder}: expected the weights files {sorted(weights_files(plan))}, it holds {held}")
    print("weights files:", held)


def losses_of(report_path):
    with open(report_path) as f:
        return {entry["step"]: float(entry["loss"]) for entry in json.load(f)["steps"]}


def train(args, plan_path, data_dir, steps, *extra, report=None, ranks=None):
    command = mpirun_command(ranks or args.ranks, args.run, plan_path, "--steps", steps, "--data", data_dir, *RUN_ARGS,
                             *extra, *(["--report", report] if report else []))
    status, output, _ = run_job(command, 600)
    return status, output


def train_ok(args, plan_path, data_dir, steps, *extra, report, ranks=None, expect=None):
    status, output = train(args, plan_path, data_dir, steps, *extra, report=report, ranks=ranks)
    if status != 0:
        fail(f"rannc-run {' '.join(map(str, extra))}: exit {status}\n{output}")
    if expect is not None:
        lines = [line for line in output.splitlines() if expect in line]
        if not lines:
            fail(f"rannc-run {' '.join(map(str, extra))}: no line with {expect!r}:\n{output}")
        print(lines[0])
    return losses_of(report)


def expect_refusal(args, plan_path, data_dir, words, *extra):
    status, output = train(args, plan_path, data_dir, STEPS, *extra)
    lines = [line for line in output.splitlines() if line.startswith("rannc-run:") and words in line]
    if status != 2 or not lines:
        fail(f"{' '.join(map(str, extra))}: expected exit 2 and a line with {words!r}, got exit {status}:\n{output}")
    print(f"refused ({' '.join(map(str, extra))}):", lines[0])


def kill_job(job):
    """SIGKILL to mpirun and every process below it (mpirun puts the ranks in groups of their own)."""
    processes = descendants(job.pid)
    for pid in processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(job.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in processes):
        if time.monotonic() > deadline:
            fail("processes of the killed job still run after 30 s")
        time.sleep(0.05)


def killed_run(args, plan_path, data_dir, save_dir):
    """Runs with --save-every 3 and SIGKILLs the job once rank 0 prints step 3; returns the steps printed."""
    command = mpirun_command(args.ranks, args.run, plan_path, "--steps", STEPS, "--data", data_dir, *RUN_ARGS,
                             "--save", save_dir, "--save-every", SAVE_EVERY)
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=mpirun_env(),
                           start_new_session=True)
    printed, step3 = [], threading.Event()

    def read():
        for line in job.stdout:
            printed.append(line)
            if line.startswith(f"step {SAVE_EVERY} "):
                kill_job(job)
                step3.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(300)  # the output ends when the job is killed at step 3, or ends on its own
    if not step3.is_set():
        kill_job(job)
        fail("rank 0 printed no 'step 3' line within 300 s, or the job ended before it:\n" + "".join(printed))
    job.wait()
    return [line for line in printed if line.startswith("step ")]


def check_resume(args, plan_path, data_dir, straight):
    save_dir = os.path.join(args.out, "killed")
    shutil.rmtree(save_dir, ignore_errors=True)
    printed = killed_run(args, plan_path, data_dir, save_dir)
    with open(os.path.join(save_dir, "latest")) as f:
        latest = f.read().strip()
    left = [name for name in os.listdir(save_dir) if name.endswith(".partial")]
    print(f"killed after {len(printed)} printed steps; latest = {latest}; partial folders left: {left}")
    resumed = train_ok(args, plan_path, data_dir, STEPS, "--resume", save_dir,
                       report=os.path.join(args.out, "resumed.json"))
    start = int(latest.split("_")[1])
    if sorted(resumed) != list(range(start, STEPS)):
        fail(f"resumed from {latest}: expected steps {start}..{STEPS - 1}, the report has {sorted(resumed)}")
    print(f"{'step':>4} | {'straight':>14} | {'resumed':>14}")
    for step in range(start, STEPS):
        print(f"{step:>4} | {straight[step]:>14.9f} | {resumed[step]:>14.9f}")
    different = [step for step in range(start, STEPS) if resumed[step] != straight[step]]
    if different:
        fail(f"steps {different}: the resumed losses differ from the straight run's")
    print(f"OK: {start} + {STEPS - start} steps with a kill between equal {STEPS} straight")


def sample_module(args):
    """A fresh instance of the sample's own nn.Module (samples/sample_models.py)."""
    sys.path.insert(0, args.samples)
    from sample_models import make_sample
    return make_sample(args.sample)


def traced(args, sample, model, name):
    """The nn.Module traced to a TorchScript file, for training_reference (which loads models so)."""
    path = os.path.join(args.out, name)
    model.train()
    torch.jit.save(torch.jit.trace(model, tuple(sample.inputs.values()), check_trace=False), path)
    return path


def check_export(args, plan_path, data_dir, plan):
    """The checkpoint after STEPS steps, back in PyTorch: the sample's nn.Module loads the state_dict
    strictly and gives rannc-run's next loss; for a TorchScript model, --module equals it."""
    state_path = os.path.join(args.out, "sd.pt")
    torchscript = plan["model"]["format"] == "torchscript"
    module_path = os.path.join(args.out, "trained.pt")
    command = [args.partition, "export", os.path.join(args.out, "straight"), "-o", state_path,
               *(["--module", module_path] if torchscript else [])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        fail(f"{' '.join(command)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    print(result.stdout.strip())
    sample = sample_module(args)
    model = sample.model
    model.load_state_dict(torch.load(state_path))  # strict: every key of the model, no other
    print("the sample's nn.Module loads the exported state_dict (strict)")
    if torchscript:
        trained = torch.jit.load(module_path)
        model.eval(), trained.eval()
        batch = [torch.from_numpy(x[:plan["batch"]["global"]].copy())
                 for x in training_reference._load_inputs(plan, data_dir)]
        with torch.no_grad():
            difference = (training_reference._model_output(model(*batch)) -
                          training_reference._model_output(trained(*batch))).abs().max().item()
        if difference != 0:
            fail(f"the nn.Module with the exported state_dict and the exported TorchScript model differ by {difference}")
        print("... and gives the exported TorchScript model's outputs")
    after = train_ok(args, plan_path, data_dir, STEPS + 1, "--resume", os.path.join(args.out, "straight"),
                     report=os.path.join(args.out, "after.json"))[STEPS]
    expected = training_reference.reference_losses(traced(args, sample, model, "exported.pt"), data_dir, plan,
                                                   STEPS + 1, "cross_entropy", 0.0, first_step=STEPS)[0]
    print(f"step {STEPS}: rannc-run {after:.9f}, the nn.Module with the exported weights {expected:.9f}")
    if not abs(after - expected) <= 1e-5 * abs(expected):
        fail("the exported weights do not give rannc-run's next loss")


def check_init(args, plan_path, data_dir, plan):
    """--init from the nn.Module's state_dict, saved as users save them (an OrderedDict)."""
    sample = sample_module(args)
    model = sample.model
    torch.manual_seed(7)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(0.5).add_(0.01 * torch.randn_like(param))
    state_path = os.path.join(args.out, "init_state.pt")
    torch.save(model.state_dict(), state_path)
    got = train_ok(args, plan_path, data_dir, 2, "--init", state_path, report=os.path.join(args.out, "init.json"))
    want = training_reference.reference_losses(traced(args, sample, model, "init_model.pt"), data_dir, plan, 2,
                                               "cross_entropy", 0.01, optimizer_name="adam")
    untouched = losses_of(os.path.join(args.out, "straight.json"))
    print(f"--init: rannc-run {[round(got[s], 7) for s in (0, 1)]}, PyTorch {[round(x, 7) for x in want]}, "
          f"without --init {[round(untouched[s], 7) for s in (0, 1)]}")
    if any(not abs(got[s] - want[s]) <= 1e-5 * abs(want[s]) for s in (0, 1)):
        fail("--init does not start from the state_dict's model")
    torch.save({"unrelated.weight": torch.zeros(3)}, os.path.join(args.out, "unrelated.pt"))
    expect_refusal(args, plan_path, data_dir, "has no", "--init", os.path.join(args.out, "unrelated.pt"))


def check_other_plan(args, data_dir, straight):
    """The checkpoint of step 3 resumed under another plan of the model (other stages, replicas,
    tensor ranks, sharding): its losses are the straight run's, within 1e-5."""
    other_dir = os.path.join(args.out, "other_plan")
    other = partition(args.partition, args.model, other_dir, args.np, args.other_plan, "adam")
    print("other plan:", describe(other))
    resumed = train_ok(args, os.path.join(other_dir, "plan.json"), data_dir, STEPS, "--resume",
                       os.path.join(args.out, "straight", f"step_{SAVE_EVERY:08d}"),
                       report=os.path.join(args.out, "other_plan.json"), ranks=len(other["ranks"]),
                       expect="saved under another plan")
    print(f"{'step':>4} | {'straight':>14} | {'other plan':>14}")
    for step in range(SAVE_EVERY, STEPS):
        print(f"{step:>4} | {straight[step]:>14.9f} | {resumed[step]:>14.9f}")
    if sorted(resumed) != list(range(SAVE_EVERY, STEPS)):
        fail(f"expected steps {SAVE_EVERY}..{STEPS - 1}, the report has {sorted(resumed)}")
    apart = [step for step in resumed if not abs(resumed[step] - straight[step]) <= 1e-5 * abs(straight[step])]
    if apart:
        fail(f"steps {apart}: resumed under another plan, the losses part from the straight run's by more than 1e-5")
    print(f"OK: {SAVE_EVERY} steps under the plan + {STEPS - SAVE_EVERY} under another equal {STEPS} straight")


def check_refusals(args, plan_path, data_dir, plan):
    other_model = os.path.join(args.out, "other_model")
    shutil.rmtree(other_model, ignore_errors=True)
    shutil.copytree(os.path.join(args.out, "straight", f"step_{SAVE_EVERY:08d}"), other_model)
    manifest_path = os.path.join(other_model, "checkpoint.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    manifest["model_sha256"] = "0" * 64
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    expect_refusal(args, plan_path, data_dir, "another model", "--resume", other_model)
    copy = os.path.join(args.out, "changed")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(os.path.join(args.out, "straight", f"step_{SAVE_EVERY * (STEPS // SAVE_EVERY):08d}"), copy)
    changed = weights_files(plan)[degree_of(plan["stages"][0]) - 1]  # stage 0's last tensor rank's
    with open(os.path.join(copy, changed), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    # The changed checkpoint is at step STEPS: resume a longer run from it.
    status, output = train(args, plan_path, data_dir, STEPS + 1, "--resume", copy)
    if status != 2 or "changed since" not in output:
        fail(f"--resume of a changed file: expected exit 2 and 'changed since', got exit {status}:\n{output}")
    print("refused (a changed file):", [line for line in output.splitlines() if "changed since" in line][0])


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))


def check_full_disk(args, plan_path, data_dir, straight):
    mount_point = os.path.join(args.out, "full_disk")
    os.makedirs(mount_point, exist_ok=True)
    subprocess.run(["umount", mount_point], capture_output=True)
    size = int(1.5 * folder_bytes(os.path.join(args.out, "straight", f"step_{SAVE_EVERY:08d}")))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount_point], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        print("full disk: skipped, cannot mount a tmpfs:", mounted.stderr.strip()[:200])
        return
    try:
        save_dir = os.path.join(mount_point, "ckpt")
        status, output = train(args, plan_path, data_dir, STEPS, "--save", save_dir, "--save-every", SAVE_EVERY)
        lines = [line for line in output.splitlines() if line.startswith("rannc-run: checkpoint:")]
        if status != 2 or len(lines) != 1:
            fail(f"--save on a full disk: expected exit 2 and one line, got exit {status}:\n{output}")
        print("full disk:", lines[0])
        left = sorted(os.listdir(save_dir))
        with open(os.path.join(save_dir, "latest")) as f:
            latest = f.read().strip()
        if latest != f"step_{SAVE_EVERY:08d}" or any(name.endswith(".partial") for name in left):
            fail(f"after the failed checkpoint: latest {latest!r}, folder {left}")
        resumed = train_ok(args, plan_path, data_dir, STEPS, "--resume", save_dir,
                           report=os.path.join(args.out, "full_disk.json"))
        if any(resumed[step] != straight[step] for step in range(SAVE_EVERY, STEPS)):
            fail("resumed from the checkpoint before the full disk: the losses differ from the straight run's")
        print(f"OK: latest still names {latest}, nothing partial left ({left}), and the run resumes from it")
    finally:
        subprocess.run(["umount", mount_point], capture_output=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--sample", required=True, help="the model's name in samples/sample_models.py")
    parser.add_argument("--samples", required=True, help="the folder of sample_models.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--recompute", action="store_true", help="set recompute on every stage of the plan")
    parser.add_argument("--expect-sharded", action="store_true")
    parser.add_argument("--expect-tensor-parallel", type=int, default=0, metavar="T",
                        help="every stage split over T tensor ranks")
    parser.add_argument("--expect-interleave", type=int, default=0, metavar="V",
                        help="the plan runs V model chunks on each device group (interleaved 1F1B)")
    parser.add_argument("--other-plan", required=True, help="partition arguments of another plan of the model")
    args = parse(parser)
    args.other_plan = args.other_plan.split()
    plan_dir, data_dir = os.path.join(args.out, "plan"), os.path.join(args.out, "data")
    plan = partition(args.partition, args.model, plan_dir, args.np, args.extra, "adam")
    plan_path = os.path.join(plan_dir, "plan.json")
    if args.recompute:
        plan = set_stage_flags(plan_path, True, False)
    print("plan:", describe(plan))
    if args.expect_sharded and all(s.get("state_sharding", "none") == "none" for s in plan["stages"]):
        fail("expected a stage with sharded optimizer state, the plan has none")
    if args.expect_tensor_parallel and any(degree_of(s) != args.expect_tensor_parallel for s in plan["stages"]):
        fail(f"expected every stage over {args.expect_tensor_parallel} tensor ranks: {[degree_of(s) for s in plan['stages']]}")
    if args.expect_interleave and plan.get("interleave", 1) != args.expect_interleave:
        fail(f"expected {args.expect_interleave} model chunks per device group, the plan has {plan.get('interleave', 1)}")
    args.ranks = len(plan["ranks"])
    training_reference.make_data(plan, STEPS + 1, "cross_entropy", data_dir, 1)

    save_dir = os.path.join(args.out, "straight")
    shutil.rmtree(save_dir, ignore_errors=True)
    straight = train_ok(args, plan_path, data_dir, STEPS, "--save", save_dir, "--save-every", SAVE_EVERY,
                        report=os.path.join(args.out, "straight.json"))
    check_weights_files(plan, save_dir)
    check_resume(args, plan_path, data_dir, straight)
    check_export(args, plan_path, data_dir, plan)
    check_init(args, plan_path, data_dir, plan)
    check_other_plan(args, data_dir, straight)
    check_refusals(args, plan_path, data_dir, plan)
    check_full_disk(args, plan_path, data_dir, straight)
    print("OK")


if __name__ == "__main__":
    main()
