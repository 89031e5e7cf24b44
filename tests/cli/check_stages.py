"""Stage files end to end: partition a sample into K stages, run `verify` (forward outputs and
every parameter gradient against the unpartitioned model), then check the contract from Python
alone: load every stage with torch.jit.load, chain them using only plan.json and compare with
the model's own output.

usage: check_stages.py RANNC SAMPLES_DIR OUT_DIR MODEL_FILE REFERENCE_PT STAGES [--tamper] [--gpus N]

REFERENCE_PT is the TorchScript form of the same sample (for an ONNX model, its trace: same
weights). With --tamper, a weight of the last stage file is changed after verify passed: verify
must then refuse the file (exit 2, its sha256 differs from the plan's), and with the plan's sha256
updated fail with exit status 1. --gpus N (default STAGES) leaves room for replicas; the
plan must then have a stage with more than one replica per pipeline.
"""
import hashlib
import json
import os
import sys

import torch

from plan_runs import fail, max_rel, run, verify, write_plan

TOLERANCE = 1e-5
BATCH = 16  # several microbatches, and replicas when the plan wants them
IMAGE = 64  # image inputs at 64x64 instead of 224x224: the same ops, a tenth of the time


def input_args(samples_dir, model_name):
    with open(os.path.join(samples_dir, "manifest.json")) as f:
        entry = json.load(f)["models"][model_name]
    args = []
    for spec in entry["inputs"]:
        dims = [BATCH] + spec["shape"][1:]
        if len(dims) == 4:
            dims[2:] = [min(d, IMAGE) for d in dims[2:]]
        args += ["--input", f"{spec['name']}:{'x'.join(map(str, dims))}:{spec['dtype']}"]
    return args


def partition_and_verify(rannc, samples_dir, out_dir, model_file, stages, gpus, extra):
    model_name = os.path.basename(model_file).split(".")[0]
    plan = write_plan(rannc, model_file, out_dir,
                      [*input_args(samples_dir, model_name), "--gpus", str(gpus), "--stages", str(stages), "--mem", "80G",
                       *extra])
    if len(plan["stages"]) != stages:
        fail(f"asked for {stages} stages, the plan has {len(plan['stages'])}")
    if gpus > stages and all(s["replicas_per_pipeline"] == 1 for s in plan["stages"]):
        fail(f"{gpus} devices for {stages} stages, yet no stage has replicas: the check would not exercise them")
    report = verify(rannc, out_dir)
    params = sum(len(s["params"]) for s in plan["stages"])
    distinct = len({p["name"] for s in plan["stages"] for p in s["params"]})
    if report["gradients"]["compared"] != distinct or report["outputs"]["compared"] < 1:
        fail(f"verify compared {report['gradients']['compared']} gradients for {distinct} parameters: {report}")
    print(f"verify: {stages} stages, {params} stage parameters ({distinct} distinct), "
          f"max rel {max_rel(report):.3g}")
    return plan


def random_input(spec, batch):
    shape = list(spec["shape"])
    shape[spec["batch_dim"]] = batch
    dtype = getattr(torch, spec["dtype"])
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, 8, shape, dtype=dtype)  # valid indices for every sample's tables


def cut(tensor, batch_dim, start, length):
    return tensor if batch_dim < 0 else tensor.narrow(batch_dim, start, length)


def chain(plan, out_dir, inputs):
    """One microbatch through every stage, each cut among its replicas, using plan.json only."""
    microbatch = plan["batch"]["microbatch_size"]
    sent = {}  # (stage, output) -> the whole microbatch
    model_outputs = {}
    for stage in plan["stages"]:
        module = torch.jit.load(os.path.join(out_dir, stage["file"]))
        check_weights(stage, module)
        replicas = stage["replicas_per_pipeline"]
        length = microbatch // replicas
        pieces = []
        for j in range(replicas):
            args = []
            for spec in stage["inputs"]:
                source = spec["source"]
                whole = inputs[source["model_input"]] if "model_input" in source else sent[(source["stage"], source["output"])]
                args.append(cut(whole, spec["batch_dim"], j * length, length))
                if list(args[-1].shape) != spec["shape"]:
                    fail(f"stage {stage['id']} input {spec['name']}: shape {list(args[-1].shape)}, plan says {spec['shape']}")
            outputs = module(*args)
            if not isinstance(outputs, tuple) or len(outputs) != len(stage["outputs"]):
                fail(f"stage {stage['id']}: forward returned {type(outputs).__name__}, not a tuple of {len(stage['outputs'])}")
            pieces.append(outputs)
        for o, spec in enumerate(stage["outputs"]):
            parts = [p[o] for p in pieces]
            whole = torch.cat(parts, spec["batch_dim"]) if spec["batch_dim"] >= 0 else parts[0]
            sent[(stage["id"], o)] = whole
            if spec.get("model_output"):
                model_outputs[spec["name"]] = whole
    return model_outputs


def check_weights(stage, module):
    """named_parameters() are exactly the plan's stage_names; buffers are buffers."""
    names = sorted(n for n, _ in module.named_parameters())
    expected = sorted(p["stage_name"] for p in stage["params"])
    if names != expected:
        fail(f"stage {stage['id']}: parameters {names}, plan says {expected}")
    for p in stage["params"]:
        if getattr(module, p["stage_name"]).numel() != p["numel"]:
            fail(f"stage {stage['id']}: {p['stage_name']} ({p['name']}) has the wrong size")
    buffers = sorted(n for n, _ in module.named_buffers())
    if any(b["stage_name"] not in buffers for b in stage["buffers"]):
        fail(f"stage {stage['id']}: buffers {buffers}, plan says {[b['stage_name'] for b in stage['buffers']]}")


def check_contract(plan, out_dir, reference_pt):
    torch.manual_seed(0)
    microbatch = plan["batch"]["microbatch_size"]
    inputs = {spec["name"]: random_input(spec, microbatch) for spec in plan["model"]["inputs"]}
    model = torch.jit.load(reference_pt)
    ours = chain(plan, out_dir, inputs)
    with torch.no_grad():
        expected = model(*[inputs[spec["name"]] for spec in plan["model"]["inputs"]])
    expected = expected if isinstance(expected, tuple) else (expected,)
    if len(ours) != len(expected):
        fail(f"the stages return {len(ours)} model outputs, the model {len(expected)}")
    for (name, value), want in zip(ours.items(), expected):  # the plan lists model outputs in order
        error = (value - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
        if error > TOLERANCE:
            fail(f"model output {name}: relative difference {error:.3g} from the model")
    print(f"contract: {len(plan['stages'])} stage files chained from plan.json alone match the model")


def tamper_and_expect_failure(rannc, plan, out_dir):
    """A weight off by 0.01, then a weight of NaN (which no difference may hide): verify fails."""
    stage = plan["stages"][-1]
    path = os.path.join(out_dir, stage["file"])
    name = stage["params"][0]["stage_name"]
    for change, says in ((lambda w: w.add_(0.01), "FAIL: max relative difference"), (lambda w: w.fill_(float("nan")), "not finite")):
        module = torch.jit.load(path)
        with torch.no_grad():
            change(getattr(module, name))
        module.save(path)
        # The file no longer is the one partition wrote: refused before it is run ...
        plan_path = os.path.join(out_dir, "plan.json")
        result = run([rannc, "verify", plan_path], expect=2)
        if "does not match" not in result.stderr:
            fail(f"verify of a changed stage file did not say it does not match the plan:\n{result.stderr}")
        # ... and once the plan takes it for its own, the numbers tell.
        with open(plan_path) as f:
            edited = json.load(f)
        with open(path, "rb") as f:
            edited["stages"][-1]["sha256"] = hashlib.sha256(f.read()).hexdigest()
        with open(plan_path, "w") as f:
            json.dump(edited, f, indent=1)
        result = run([rannc, "verify", plan_path], expect=1)
        if says not in result.stdout:
            fail(f"verify of a tampered stage did not say {says!r}:\n{result.stdout}")
    print("tampered: verify exits 1 for a changed weight and for a NaN weight")


def main():
    rannc, samples_dir, out_dir, model_file, reference_pt, stages = sys.argv[1:7]
    options = sys.argv[7:]
    gpus = int(options[options.index("--gpus") + 1]) if "--gpus" in options else int(stages)
    # A model of pooled embedding tables is cut into stages only when not planned sharded.
    extra = ["--no-table-sharding"] if "--no-table-sharding" in options else []
    plan = partition_and_verify(rannc, samples_dir, out_dir, model_file, int(stages), gpus, extra)
    check_contract(plan, out_dir, reference_pt)
    if "--tamper" in options:
        tamper_and_expect_failure(rannc, plan, out_dir)
    print("ok")


if __name__ == "__main__":
    main()
