"""One model of the modern-export corpus (tests/modern/make_modern_corpus.py: exported by PyTorch
2.6, with PyTorch's own outputs, gradients and losses stored beside it) in one export form
through the tool, checked against those stored numbers rather than only against itself.

usage: check_modern.py --partition BIN --fixtures DIR --model NAME --form FORM --check CHECK --out DIR
           [--run BIN] [--stages K] [--tensor-parallel T] [--recompute selective]
       check_modern.py --fixtures DIR --check fixtures

FORM is torchscript, onnx18, onnx20 or pt2 (the manifest's `exports`); CHECK one of:
  fixtures  the fixtures are those make_modern_corpus.py writes (its SHA-256 in the manifest) and
            every file is whole: a stale or damaged fixture would fail every other check obscurely
  plan      plans the whole model as one stage on one device (the batch as one microbatch), `show`s
            it, and runs the stage file under this Python's torch on the stored inputs: its output,
            loss and every parameter gradient (by the plan's `name`, the state_dict key) must match
            PyTorch 2.6's within the manifest's tolerance (relative to the largest value of each
            tensor, a gradient's to at least 1e-3 of the largest gradient)
  stages    K stages on K+1 devices, 2 microbatches, so that replica counts differ between stages
            (as tests/corpus/check_corpus.py does; a plan where they do not fails); `verify` (the stage files against the model),
            then the stage files chained here as rannc-run cuts the batch (microbatches, replica
            slices) against PyTorch 2.6's numbers as above. A model with BatchNorm skips the last
            part: its slices see other batch statistics than PyTorch's whole batch
  train     2 stages under mpirun with rannc-run for the manifest's steps on its data folder, SGD at
            its lr: each step's loss within 1e-4 (relative) of PyTorch 2.6's stored losses. Without
            BatchNorm on 3 devices and 2 microbatches (one stage with 2 replicas); with it on 2
            devices and one microbatch, so that every forward sees the whole batch as PyTorch's did.
            With --tensor-parallel T: 2 stages of T tensor ranks each (--layout pp=2,dp=1,tp=T), every
            stage splitting some region. With --recompute selective: every stage recomputes its
            attention cores, and its files call some through torch.ops.rannc.recompute_core

A TorchScript export that uses ops this build's libtorch lacks (aten::scaled_dot_product_attention
on 1.13; the manifest lists each export's ops, this Python's torch says which are unknown, after
checking that it is the libtorch the build names in --version) may be refused with one line of
stderr naming such an op; that refusal passes every check. (Where the tool plans it anyway, its
stage files are checked like any other's.) `stages` passes --no-check to partition, since verify
checks the same stage files right after it, at a finer tolerance.

Failures print the command and its output and a line `CLASS: ...`, as check_corpus.py's:
refusal, crash, bad-plan, wrong-values (verify, or the stored numbers), training, and fixtures.
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
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_TOLERANCE = 1e-4  # issue 29: rannc-run's losses within 1e-4 of PyTorch 2.6's
VERIFY_TOLERANCE = 1e-5  # verify's default: the stage files against the model, same libtorch


def fail(kind, message):
    print(f"CLASS: {kind}", flush=True)
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def shell(command):
    return " ".join(c if re.fullmatch(r"[\w./:,=+-]+", c) else repr(c) for c in command)


def run(command, timeout):
    """Runs a command in its own process group; returns (status, stdout, stderr, seconds), status
    None on timeout (the whole group killed: mpirun's ranks too)."""
    start = time.monotonic()
    try:
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    except OSError as error:  # not built, or being linked right now
        fail("crash", f"{shell(command)}: cannot start: {error}")
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


# ---------------------------------------------------------------------------------------------
# What this build should refuse.


def missing_ops(args, export):
    """The ATen ops of a TorchScript export that the build's libtorch lacks, as this Python's torch
    (the same libtorch: checked against --version) knows them; [] for other forms."""
    if args.form != "torchscript":
        return []
    import torch
    status, stdout, stderr, _ = run([args.partition, "--version"], 60)
    built = re.search(r"libtorch (\d+\.\d+)", stdout)
    ours = re.match(r"\d+\.\d+", torch.__version__).group(0)
    if status != 0 or not built:
        fail("crash", f"{args.partition} --version: {describe_status(status)}: {stdout}{stderr}")
    if built.group(1) != ours:
        fail("bad-plan", f"the build uses libtorch {built.group(1)} and this Python torch {ours}: run the check with "
                         f"the Python of the build's torch, which says what its libtorch knows")
    return [op for op in export["ops"] if not torch._C._jit_get_schemas_for_operator(op)]


# ---------------------------------------------------------------------------------------------
# Partitioning.


def partition(args, request, gpus, plan_dir, check=True):
    """Plans the model into plan_dir; returns partition's stdout, or None where the build refuses
    a TorchScript file for ops its libtorch lacks, as it should. Fails on anything else. check:
    partition's own check of its stage files (off where verify checks them next)."""
    shutil.rmtree(plan_dir, ignore_errors=True)
    command = [args.partition, args.model_path, *request, "--device", "cpu", "--gpus", str(gpus),
               "--gpus-per-node", str(gpus), "--mem", "8G", "-o", plan_dir, *([] if check else ["--no-check"])]
    print("partition:", shell(command), flush=True)
    status, stdout, stderr, seconds = run(command, args.timeout)
    print(f"partition: {describe_status(status)} in {seconds:.1f} s")
    if status == 0:
        # A model with ops the libtorch lacks may plan too, once the tool maps them: its stage
        # files are then checked like any other's.
        return stdout
    print(stdout + stderr)
    if crashed(status, stdout + stderr):
        fail("crash", f"{shell(command)}: {describe_status(status)}")
    # Asked only now: it starts torch, which takes longer than most checks here.
    missing = missing_ops(args, args.export)
    lines = [line for line in stderr.splitlines() if line.strip()]
    # Loosely: the line must name one of the ops (its wording is being improved).
    if missing and len(lines) == 1 and any(op.split("::")[-1] in lines[0] for op in missing):
        print(f"OK: refused for {', '.join(missing)}, which this libtorch lacks: {lines[0]}")
        return None
    expected = f" (expected one line naming {', '.join(missing)}, which this libtorch lacks)" if missing else ""
    fail("refusal", f"{shell(command)}: {describe_status(status)}: {stderr.strip()}{expected}")


def load_plan(plan_dir):
    with open(os.path.join(plan_dir, "plan.json")) as f:
        plan = json.load(f)
    replicas = [s["replicas_per_pipeline"] for s in plan["stages"]]
    b = plan["batch"]
    print(f"plan: {len(plan['stages'])} stages, replicas per pipeline {'/'.join(map(str, replicas))}, "
          f"{b['pipelines']} pipelines x {b['microbatches']} microbatches x {b['microbatch_size']} samples, "
          f"{len(plan['ranks'])} ranks")
    return plan


def show_and_verify(args, plan_path, verify=True):
    commands = [[args.partition, "show", plan_path]]
    if verify:
        commands.append([args.partition, "verify", plan_path, "--tolerance", str(VERIFY_TOLERANCE)])
    for command in commands:
        print(f"{command[1]}:", shell(command), flush=True)
        status, stdout, stderr, seconds = run(command, args.timeout)
        if command[1] == "verify" or status != 0:
            print(stdout + stderr)
        print(f"{command[1]}: {describe_status(status)} in {seconds:.1f} s")
        if status != 0:
            if crashed(status, stdout + stderr):
                fail("crash", f"{shell(command)}: {describe_status(status)}")
            kind = "wrong-values" if command[1] == "verify" and status == 1 else "bad-plan"
            fail(kind, f"{shell(command)}: {describe_status(status)}: "
                       f"{(stderr.strip() or stdout.strip()).splitlines()[-1]}")


# ---------------------------------------------------------------------------------------------
# The stage files against PyTorch 2.6's stored numbers.


def loss_sum(out, target, loss):
    """As training_reference.py's _loss_sum (and make_modern_corpus.py's)."""
    import torch.nn.functional as F
    if loss == "cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1), reduction="sum")
    return F.mse_loss(out, target, reduction="sum")


def run_stages(plan, plan_dir, inputs, target, loss):
    """Chains the plan's stage files over the batch as rannc-run cuts it: pipeline p's microbatch i
    is rows [(p*M + i)*m, +m), a stage of k replicas runs each of k slices of it along the batch
    dim, and each microbatch's loss (its share of the batch mean) is backpropagated through every
    stage. Returns the output (microbatches concatenated), the loss and the gradients by weight
    name (a weight held by several stages: the sum of theirs)."""
    import torch
    modules = []
    for stage in plan["stages"]:
        module = torch.jit.load(os.path.join(plan_dir, stage["file"]))
        module.train()
        modules.append(module)
    batch = plan["batch"]
    M, m = batch["microbatches"], batch["microbatch_size"]
    if batch["global"] != len(target):
        fail("bad-plan", f"the plan's global batch {batch['global']} is not the {len(target)} stored samples")
    elements = target.numel() if loss == "cross_entropy" else None
    outputs, total = [], 0.0
    for chunk in range(batch["pipelines"] * M):
        rows = slice(chunk * m, (chunk + 1) * m)
        values = {}  # (stage, output index) -> the whole microbatch's tensor
        model_output = None
        for stage, module in zip(plan["stages"], modules):
            k = stage["replicas_per_pipeline"]
            results = []
            for replica in range(k):
                stage_args = []
                for spec in stage["inputs"]:
                    source = spec["source"]
                    value = (inputs[source["model_input"]][rows] if "model_input" in source
                             else values[(source["stage"], source["output"])])
                    dim = spec.get("batch_dim")
                    if dim is not None and dim >= 0:
                        value = value.narrow(dim, replica * (m // k), m // k)
                    stage_args.append(value)
                results.append(module(*stage_args))
            for j, spec in enumerate(stage["outputs"]):
                dim = spec.get("batch_dim")
                parts = [result[j] for result in results]
                values[(stage["id"], j)] = torch.cat(parts, dim) if dim is not None and dim >= 0 else parts[0]
                if spec.get("model_output") and model_output is None:
                    model_output = values[(stage["id"], j)]
        chunk_target = target[rows]
        count = elements if elements is not None else model_output.numel() * len(target) // m
        chunk_loss = loss_sum(model_output, chunk_target, loss) / count
        chunk_loss.backward()
        total += float(chunk_loss.detach().double())
        outputs.append(model_output.detach())
    grads = {}
    for stage, module in zip(plan["stages"], modules):
        params = dict(module.named_parameters())
        for spec in stage["params"]:
            grad = params[spec["stage_name"]].grad
            if grad is None:
                fail("wrong-values", f"stage {stage['id']}: no gradient for {spec['name']} ({spec['stage_name']})")
            grads[spec["name"]] = grads[spec["name"]] + grad if spec["name"] in grads else grad.clone()
    return torch.cat(outputs), total, grads


def compare_with_pytorch(plan, plan_dir, entry, fixtures):
    """The chained stage files against PyTorch 2.6's output, loss and gradients for the stored inputs."""
    import numpy as np
    import torch
    ref = np.load(os.path.join(fixtures, entry["reference"]))
    stored_grads = np.load(os.path.join(fixtures, entry["grads"]))
    inputs = {key[len("input/"):]: torch.from_numpy(ref[key]) for key in ref.files if key.startswith("input/")}
    output, loss, grads = run_stages(plan, plan_dir, inputs, torch.from_numpy(ref["target"]), entry["loss"])
    tolerance = entry["tolerance"]
    problems = []

    def rel(got, want, scale):
        return float(np.max(np.abs(got - want))) / scale if want.size else 0.0

    want = ref["output"]
    if tuple(output.shape) != want.shape:
        fail("wrong-values", f"output shape {tuple(output.shape)}, PyTorch 2.6's {want.shape}")
    worst_out = rel(output.numpy(), want, max(float(np.max(np.abs(want))), 1e-12))
    if not worst_out <= tolerance:
        problems.append(f"output differs by {worst_out:.2e} (relative to its largest value)")
    loss_rel = abs(loss - float(ref["loss"])) / abs(float(ref["loss"]))
    if not loss_rel <= tolerance:
        problems.append(f"loss {loss:.7f}, PyTorch 2.6's {float(ref['loss']):.7f}")

    unknown = sorted(set(grads) - set(stored_grads.files))
    if unknown:
        fail("wrong-values", f"the plan's weights {unknown[:5]} are not keys of PyTorch's state_dict "
                             f"({len(unknown)} of {len(grads)}); they are named after the model's weights")
    numel = sum(g.numel() for g in grads.values())
    if numel != entry["params"]:
        fail("wrong-values", f"the stages' weights have {numel} elements, the module's parameters {entry['params']}")
    largest = max(float(np.max(np.abs(stored_grads[name]))) for name in grads)
    differences = {}
    for name, grad in grads.items():
        want = stored_grads[name]
        if tuple(grad.shape) != want.shape:
            fail("wrong-values", f"gradient of {name}: shape {tuple(grad.shape)}, PyTorch's {want.shape}")
        differences[name] = rel(grad.numpy(), want, max(float(np.max(np.abs(want))), 1e-3 * largest, 1e-30))
    # The worst first; NaN counts as the worst.
    worst_name = max(differences, key=lambda n: float("inf") if np.isnan(differences[n]) else differences[n])
    worst_grad = differences[worst_name]
    if not worst_grad <= tolerance:
        problems.append(f"gradient of {worst_name} differs by {worst_grad:.2e}")
    print(f"against PyTorch {entry['torch']}: output within {worst_out:.2e}, loss within {loss_rel:.2e}, "
          f"{len(grads)} gradients within {worst_grad:.2e} (worst {worst_name}); tolerance {tolerance}")
    if problems:
        fail("wrong-values", "the stage files do not compute what PyTorch 2.6 computed: " + "; ".join(problems))


# ---------------------------------------------------------------------------------------------
# Checks.


def request_args(entry, microbatches, stages):
    args = [a for spec in entry["inputs"] for a in ("--input", spec)]
    return args + ["--batch", str(entry["batch"]), "--microbatches", str(microbatches), "--stages", str(stages)]


def check_plan(args, entry):
    plan_dir = os.path.join(args.out, "plan")
    if partition(args, request_args(entry, 1, 1), 1, plan_dir) is None:
        return
    plan = load_plan(plan_dir)
    show_and_verify(args, os.path.join(plan_dir, "plan.json"), verify=False)
    compare_with_pytorch(plan, plan_dir, entry, args.fixtures)
    print(f"OK: {entry['title']} ({args.form}) plans, and its stage file computes PyTorch 2.6's numbers")


def check_stages(args, entry):
    plan_dir = os.path.join(args.out, "plan")
    if partition(args, request_args(entry, 2, args.stages), args.stages + 1, plan_dir, check=False) is None:
        return
    plan = load_plan(plan_dir)
    replicas = [s["replicas_per_pipeline"] for s in plan["stages"]]
    if len(replicas) != args.stages:
        fail("bad-plan", f"asked for {args.stages} stages, the plan has {len(replicas)}")
    if len(set(replicas)) < 2:
        fail("bad-plan", f"the replica counts per stage {replicas} do not differ; the test needs stages with "
                         f"different replica counts")
    show_and_verify(args, os.path.join(plan_dir, "plan.json"))
    if entry["batch_norm"]:
        print("note: BatchNorm: microbatches and replica slices normalise over other samples than PyTorch's whole "
              "batch, so only verify compares these stage files (the plan check compares one stage with PyTorch)")
    else:
        compare_with_pytorch(plan, plan_dir, entry, args.fixtures)
    print(f"OK: {entry['title']} ({args.form}), {args.stages} stages "
          f"(replicas {'/'.join(map(str, replicas))}) verified")


def train_request(args, entry):
    """The partition arguments and devices of the training check: 2 stages, or with
    --tensor-parallel T, 2 stages of T tensor ranks each."""
    if args.tensor_parallel > 1:
        request = [a for spec in entry["inputs"] for a in ("--input", spec)]
        request += ["--batch", str(entry["batch"]), "--layout", f"pp=2,dp=1,tp={args.tensor_parallel},m=2"]
        request += ["--recompute", args.recompute] if args.recompute else []
        return request, 2 * args.tensor_parallel
    # BatchNorm: one microbatch and no replicas, so each forward normalises over the whole batch.
    devices, microbatches = (2, 1) if entry["batch_norm"] else (3, 2)
    return request_args(entry, microbatches, 2), devices


def check_recomputed_cores(plan, plan_dir):
    """Every stage recomputes selectively, and the stage files call attention cores through
    torch.ops.rannc.recompute_core (each file of a stage as many)."""
    calls = []
    for stage in plan["stages"]:
        if stage["recompute"] != "selective":
            fail("bad-plan", f"stage {stage['id']} recomputes {stage['recompute']}, not selectively")
        files = [stage["file"]] + [f["file"] for f in stage.get("tensor_parallel", {}).get("files", [])]
        counts = set()
        for name in files:
            with zipfile.ZipFile(os.path.join(plan_dir, name)) as archive:
                code = "".join(archive.read(n).decode() for n in archive.namelist() if n.endswith(".py"))
            counts.add(code.count("ops.rannc.recompute_core("))
        if len(counts) != 1:
            fail("bad-plan", f"stage {stage['id']}: its files call different numbers of attention cores {counts}")
        calls.append(counts.pop())
    if not any(calls):
        fail("bad-plan", "no stage file calls an attention core through rannc::recompute_core")
    print(f"attention cores recomputed per stage: {calls}")


def check_train(args, entry):
    if not args.run:
        fail("training", "--check train needs --run")
    plan_dir = os.path.join(args.out, "plan")
    request, devices = train_request(args, entry)
    # partition's own check kept: a stage file that cannot run fails here, named, not in mpirun.
    if partition(args, request, devices, plan_dir) is None:
        return
    plan = load_plan(plan_dir)
    if args.tensor_parallel > 1:
        regions = [len(s.get("tensor_parallel", {}).get("regions", [])) for s in plan["stages"]]
        if not all(regions):
            fail("bad-plan", f"--tensor-parallel {args.tensor_parallel}: a stage splits no region: {regions}")
        print(f"tensor-parallel regions per stage: {regions}")
    if args.recompute:
        check_recomputed_cores(plan, plan_dir)
    if plan["batch"]["global"] != entry["batch"]:
        fail("bad-plan", f"global batch {plan['batch']['global']}, the stored losses are of {entry['batch']}")
    report_path = os.path.join(args.out, "report.json")
    # As tests/runtime/check_training.py launches it; the loss, optimizer and lr are the ones the
    # stored losses were trained with.
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(len(plan["ranks"])), args.run, os.path.join(plan_dir, "plan.json"),
               "--steps", str(entry["steps"]), "--data", os.path.join(args.fixtures, entry["data"]),
               "--loss", entry["loss"], "--optimizer", "sgd", "--lr", str(entry["lr"]), "--report", report_path]
    print("run:", shell(command), flush=True)
    status, stdout, stderr, seconds = run(command, args.timeout)
    print(f"rannc-run: {describe_status(status)} in {seconds:.1f} s")
    if status != 0:
        print(stdout + stderr)
        fail("crash" if crashed(status, stdout + stderr) else "training",
             f"{shell(command)}: {describe_status(status)}")
    with open(report_path) as f:
        losses = [float(s["loss"]) for s in json.load(f)["steps"]]
    want, frozen = entry["losses"], entry["losses_without_update"]
    if len(losses) != len(want):
        fail("training", f"rannc-run reported {len(losses)} steps, expected {len(want)}")
    print(f"{'step':>4} | {'rannc-run':>12} | {'PyTorch 2.6':>12} | {'rel diff':>9} | {'no update':>12}")
    bad = []
    for step, (got, ref, still) in enumerate(zip(losses, want, frozen)):
        diff = abs(got - ref) / abs(ref)
        print(f"{step:>4} | {got:>12.7f} | {ref:>12.7f} | {diff:>9.2e} | {still:>12.7f}")
        if not diff < TRAIN_TOLERANCE:  # NaN fails too
            bad.append(step)
    if bad:
        fail("training", f"steps {bad}: rannc-run's loss differs from PyTorch {entry['torch']}'s by "
                         f"{TRAIN_TOLERANCE} or more (relative)")
    print(f"OK: {entry['title']} ({args.form}) trains {len(want)} steps with PyTorch {entry['torch']}'s losses")


def check_fixtures(args):
    sys.path.insert(0, HERE)
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree (read-only in the Debian 13 root)
    import make_modern_corpus
    if not make_modern_corpus.up_to_date(args.fixtures):
        fail("fixtures", f"{args.fixtures} is not what make_modern_corpus.py writes (stale after an edit of it, or a "
                         f"file changed): python3 tests/modern/make_modern_corpus.py --root /srv/trixie (a Debian 13 "
                         f"root with python3-torch)")
    print(f"OK: {args.fixtures} holds make_modern_corpus.py's fixtures, every file whole")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partition")
    parser.add_argument("--run", help="rannc-run, for --check train")
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--model")
    parser.add_argument("--form", choices=("torchscript", "onnx18", "onnx20", "pt2"))
    parser.add_argument("--check", required=True, choices=("fixtures", "plan", "stages", "train"))
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--tensor-parallel", type=int, default=1, metavar="T",
                        help="--check train: 2 stages, each split over T tensor-parallel ranks")
    parser.add_argument("--recompute", choices=("selective",),
                        help="--check train: plan selective recomputation on every stage")
    parser.add_argument("--out")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    args.fixtures = os.path.abspath(args.fixtures)
    if args.check == "fixtures":
        check_fixtures(args)
        return
    if not (args.partition and args.model and args.form and args.out):
        parser.error(f"--check {args.check} needs --partition, --model, --form and --out")

    with open(os.path.join(args.fixtures, "manifest.json")) as f:
        manifest = json.load(f)
    if args.model not in manifest["models"]:
        fail("bad-plan", f"{args.model} is not in {args.fixtures}/manifest.json")
    entry = dict(manifest["models"][args.model], torch=manifest["torch"])
    args.export = entry["exports"][args.form]
    args.model_path = os.path.join(args.fixtures, args.export["file"])
    args.out = os.path.abspath(args.out)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    {"plan": check_plan, "stages": check_stages, "train": check_train}[args.check](args, entry)


if __name__ == "__main__":
    main()
