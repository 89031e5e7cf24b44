#!/usr/bin/python3
"""Named regression cases of hostile inputs: each writes its input, runs the command(s) under a
time limit and checks the exit status, that stderr is one line matching a pattern, and that
nothing crashed (no signal, `terminate called`, `what():`, traceback or hang).

usage: hostile_inputs.py --rannc BIN [--run BIN] --work DIR [--seeds DIR] [--case ID ...] [--list]

Without --case every case runs and a summary is printed. Exit status: 0 all passed, 1 a case
failed, 77 every selected case was skipped (e.g. the full-disk case where no tmpfs can be
mounted, or the rannc-run cases without --run).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "cli"))

import fuzz_common  # noqa: E402
import plan_bytes  # noqa: E402

X_ARG = "x:4x8:float32"
INT64_MAX = 2 ** 63 - 1
SKIP = 77


class Skip(Exception):
    pass


class Failed(Exception):
    pass


class Context:
    def __init__(self, args, case_id):
        self.rannc = os.path.abspath(args.rannc)
        self.run = os.path.abspath(args.run) if args.run else None
        self.seeds = args.seeds
        self.dir = os.path.join(args.work, case_id)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.log = []
        self.failures = []
        self.env = fuzz_common.quiet_env()

    def path(self, name):
        return os.path.join(self.dir, name)

    def seed(self, name):
        return os.path.join(self.seeds, name)

    def note(self, text):
        self.log.append(text)

    def execute(self, command, timeout=60):
        result = fuzz_common.run([str(c) for c in command], timeout, cwd=self.dir, env=self.env)
        self.note("$ %s\n  -> %s in %.1f s; stderr: %s" % (
            fuzz_common.shell_quote(command), result.describe_status(), result.seconds,
            " | ".join(result.stderr.splitlines()[:4])[:600] or "(empty)"))
        return result

    def expect(self, command, status, pattern=None, timeout=60, mpi=False):
        """The command must exit with STATUS (an int or a tuple) and, when it fails, write one line
        on stderr matching PATTERN."""
        allowed = status if isinstance(status, tuple) else (status,)
        result = self.execute(command, timeout)
        problems = fuzz_common.contract_problems(result, allowed=allowed, mpi=mpi)
        if result.returncode not in (0, None) and pattern and not result.timed_out and \
                not re.search(pattern, result.stderr):
            problems.append("stderr does not match %r" % pattern)
        if problems:
            # Recorded, and the case goes on: the report shows every command of a case.
            self.failures.append("%s: %s" % (fuzz_common.shell_quote(command)[:400], "; ".join(problems)))
            self.note("  FAILED: " + "; ".join(problems))
        return result

    def fail(self, message):
        """A failed check that does not stop the case."""
        self.failures.append(message)
        self.note("  FAILED: " + message)

    def mpirun(self, *args):
        if not self.run:
            raise Skip("no --run binary")
        return fuzz_common.mpirun_prefix() + [self.run] + list(args)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def copy_plan(ctx, name="plan1", into="plan"):
    folder = ctx.path(into)
    shutil.copytree(ctx.seed(name), folder)
    return os.path.join(folder, "plan.json")


def deep_text(depth):
    return "[" * depth + "]" * depth


def onnx_mlp(ctx):
    import onnx
    return onnx.load(ctx.seed("mlp.onnx"))


def save_onnx(model, path):
    import onnx
    onnx.save(model, path)
    return path


def fixed_batch_onnx(ctx, value, name):
    model = onnx_mlp(ctx)
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_value = value
    return save_onnx(model, ctx.path(name))


def plain_onnx_graph(nodes, inputs, outputs, initializers=(), functions=(), extra_opsets=()):
    import onnx
    from onnx import helper
    graph = helper.make_graph(nodes, "hostile", inputs=inputs, outputs=outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in extra_opsets]
    model = helper.make_model(graph, producer_name="rannc-hostile", opset_imports=opsets, functions=list(functions))
    return model


def float_value(name, dims):
    from onnx import TensorProto, helper
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

PLAN_ERROR = r"plan\.json"


def case_deep_plan_show(ctx):
    """A plan whose `schedule` is an array nested 100000 deep: show and verify say one line."""
    plan = copy_plan(ctx)
    text = open(plan).read()
    text = re.sub(r'"schedule": "[a-z0-9]+"', '"schedule": ' + deep_text(100000), text, count=1)
    write(plan, text)
    ctx.expect([ctx.rannc, "show", plan], 2, PLAN_ERROR)
    ctx.expect([ctx.rannc, "show", plan, "--json"], 2, PLAN_ERROR)
    ctx.expect([ctx.rannc, "verify", plan], 2, PLAN_ERROR)
    # The whole file one deep array, and a deep object in a field the reader quotes.
    write(plan, deep_text(100000))
    ctx.expect([ctx.rannc, "show", plan], 2, PLAN_ERROR)
    plan_tree = read_json(ctx.seed("plan1/plan.json"))
    text = json.dumps(plan_tree).replace('"version": 1', '"version": ' + '{"a":' * 100000 + "1" + "}" * 100000, 1)
    write(plan, text)
    ctx.expect([ctx.rannc, "show", plan], 2, PLAN_ERROR)


def case_deep_plan_run(ctx):
    """The same nested plan given to rannc-run: one line, exit 2, before training."""
    plan = copy_plan(ctx)
    text = open(plan).read()
    text = re.sub(r'"schedule": "[a-z0-9]+"', '"schedule": ' + deep_text(100000), text, count=1)
    write(plan, text)
    ctx.expect(ctx.mpirun(plan, "--steps", "1", "--loss", "cross_entropy"), 2, PLAN_ERROR, mpi=True)


def case_deep_cluster(ctx):
    """A cluster JSON with a nested array 100000 deep as `mem` and as the whole file."""
    cluster = read_json(ctx.seed("cluster.json"))
    text = json.dumps(cluster).replace('"80G"', deep_text(100000))
    path = ctx.path("cluster.json")
    write(path, text)
    ctx.expect([ctx.rannc, "inspect", ctx.seed("mlp.onnx"), "--cluster", path], 2, "cluster.json")
    ctx.expect([ctx.rannc, ctx.seed("mlp.onnx"), "--cluster", path, "--plan-only", "-o", ctx.path("out")], 2,
               "cluster.json")
    write(path, deep_text(100000))
    ctx.expect([ctx.rannc, "inspect", ctx.seed("mlp.onnx"), "--cluster", path], 2, "cluster.json")


def case_deep_profile_db(ctx):
    """A profile DB with a nested array 100000 deep as a version and as an op's kind."""
    db = read_json(ctx.seed("profile_db.json"))
    path = ctx.path("db.json")
    text = json.dumps(db).replace('"version": 1', '"version": ' + deep_text(100000), 1)
    write(path, text)
    ctx.expect([ctx.rannc, "inspect", ctx.seed("mlp.onnx"), "--device", "cpu", "--profile-db", path], 2, "db.json")
    text = re.sub(r'"kind": "[^"]*"', '"kind": ' + deep_text(100000), json.dumps(db), count=1)
    write(path, text)
    ctx.expect([ctx.rannc, "inspect", ctx.seed("mlp.onnx"), "--device", "cpu", "--profile-db", path], 2, "db.json")


def batch_dim_case(ctx, value, inspect_status, timeout=30):
    model = fixed_batch_onnx(ctx, value, "batch_%d.onnx" % value)
    # A plan supports batches below 2^31 (as `--batch 3000000000` says): refused with one line.
    ctx.expect([ctx.rannc, model, "--gpus", "8", "--plan-only", "-o", ctx.path("out")], (1, 2), r"batch|%d" % value,
               timeout=timeout)
    for extra in ([], ["--json", "--device", "h100-80g"]):
        result = ctx.expect([ctx.rannc, "inspect", model] + extra, inspect_status, r"batch|%d|too large|overflow" % value,
                            timeout=timeout)
        if result.returncode == 0 and extra:
            report = json.loads(result.stdout)
            memory = report.get("predicted", {}).get("memory_bytes", {})
            if not report.get("flops_fwd", 0) > 0 or not memory.get("activations", 0) > 0:
                ctx.fail("inspect --json of batch %d: flops_fwd %r, activations %r (overflowed)" % (
                    value, report.get("flops_fwd"), memory.get("activations")))


def case_batch_dim_2pow40(ctx):
    """The ONNX MLP with its batch dim fixed to 2^40 (input and output)."""
    batch_dim_case(ctx, 2 ** 40, (0, 2))  # inspect may answer: its numbers are doubles


def case_batch_dim_int64_max(ctx):
    """The ONNX MLP with its batch dim fixed to INT64_MAX (evaluating at twice the batch overflows)."""
    batch_dim_case(ctx, INT64_MAX, 2)  # twice the batch overflows int64: flops and activations come out 0


def check_plan_numbers(ctx, out):
    plan = os.path.join(out, "plan.json")
    if os.path.exists(plan):
        problems = fuzz_common.non_finite_numbers(plan)
        if problems:
            ctx.fail("%s: %s" % (plan, "; ".join(problems)))
        else:
            ctx.note("plan.json numbers are finite")


def expect_mlp_answer(ctx, out, *args):
    """`--plan-only` of the MLP sample with ARGS: an answer (fits or says what would) within a
    minute, and a plan.json, if written, with finite numbers."""
    ctx.expect([ctx.rannc, ctx.seed("mlp.onnx"), *args, "--plan-only", "-o", out],
               (0, 1), r"does not fit|would fit|batch", timeout=60)
    check_plan_numbers(ctx, out)


def case_batch_int32_max(ctx):
    """--batch 2147483647 on the MLP sample on 8 devices: an answer (fits or says what would) in time."""
    out = ctx.path("out")
    expect_mlp_answer(ctx, out, "--batch", "2147483647", "--gpus", "8")
    ctx.expect([ctx.rannc, ctx.seed("mlp.onnx"), "--batch", "2147483647", "--gpus", "8", "--microbatches", "7",
                "--plan-only", "-o", out], (1, 2), r"batch|microbatch", timeout=60)


def case_batch_large_prime(ctx):
    """--batch 2147483629 (prime: only 1 or B microbatches) on the MLP sample: an answer in time."""
    out = ctx.path("out")
    expect_mlp_answer(ctx, out, "--batch", "2147483629", "--gpus", "8")
    expect_mlp_answer(ctx, out, "--batch", "2147483629", "--gpus", "16", "--stages", "2")


def case_conv_strides_zero(ctx):
    """An ONNX Conv with strides [0, 0] (the output size divides by the stride)."""
    import make_seeds
    model = make_seeds.conv_model(strides=(0, 0))
    path = save_onnx(model, ctx.path("conv_strides0.onnx"))
    ctx.expect([ctx.rannc, "inspect", path], 2, r"conv_strides0\.onnx.*(stride|Conv|conv)")
    ctx.expect([ctx.rannc, path, "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 2,
               r"conv_strides0\.onnx.*(stride|Conv|conv)")
    model = make_seeds.conv_model(strides=(-1, 1))
    path = save_onnx(model, ctx.path("conv_strides_negative.onnx"))
    ctx.expect([ctx.rannc, "inspect", path], 2, r"conv_strides_negative\.onnx.*(stride|Conv|conv)")


def case_recursive_function(ctx):
    """An ONNX model-local function F whose body calls F (and a pair F -> G -> F)."""
    from onnx import helper
    domain = "rannc.hostile"
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    f = helper.make_function(domain, "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["t"]),
                                                         helper.make_node("F", ["t"], ["b"], domain=domain)], opsets)
    model = plain_onnx_graph([helper.make_node("F", ["x"], ["y"], domain=domain, name="f")],
                             [float_value("x", ["batch", 8])], [float_value("y", ["batch", 8])],
                             functions=[f], extra_opsets=[domain])
    path = save_onnx(model, ctx.path("recursive.onnx"))
    ctx.expect([ctx.rannc, "inspect", path], 2, r"recursive\.onnx")
    ctx.expect([ctx.rannc, path, "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 2, r"recursive\.onnx")
    f = helper.make_function(domain, "F", ["a"], ["b"], [helper.make_node("G", ["a"], ["b"], domain=domain)], opsets)
    g = helper.make_function(domain, "G", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain=domain)], opsets)
    model = plain_onnx_graph([helper.make_node("F", ["x"], ["y"], domain=domain, name="f")],
                             [float_value("x", ["batch", 8])], [float_value("y", ["batch", 8])],
                             functions=[f, g], extra_opsets=[domain])
    path = save_onnx(model, ctx.path("mutual.onnx"))
    ctx.expect([ctx.rannc, "inspect", path], 2, r"mutual\.onnx")


def case_sum_5000(ctx):
    """An ONNX Sum of 5000 inputs (the same Relu output 5000 times): a valid model, planned in time."""
    from onnx import helper
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sum", ["r"] * 5000, ["y"], name="sum")]
    model = plain_onnx_graph(nodes, [float_value("x", ["batch", 8])], [float_value("y", ["batch", 8])])
    path = save_onnx(model, ctx.path("sum5000.onnx"))
    ctx.expect([ctx.rannc, "inspect", path, "--batch", "4"], (0, 2), r"sum5000\.onnx", timeout=60)
    out = ctx.path("out")
    ctx.expect([ctx.rannc, path, "--batch", "4", "--gpus", "2", "--plan-only", "-o", out], (0, 1, 2),
               r"sum5000\.onnx|fit", timeout=60)
    check_plan_numbers(ctx, out)
    out = ctx.path("out_stages")
    ctx.expect([ctx.rannc, path, "--batch", "4", "--gpus", "2", "-o", out], (0, 1, 2), r"sum5000\.onnx|fit",
               timeout=120)
    check_plan_numbers(ctx, out)


def case_chain_20000(ctx):
    """An ONNX chain of 20000 Relu/Add ops, partitioned WITH stage files (no --plan-only)."""
    from onnx import helper
    nodes = []
    previous = "x"
    for i in range(20000):
        name = "v%d" % i
        if i % 2:
            nodes.append(helper.make_node("Add", [previous, "x"], [name], name="add%d" % i))
        else:
            nodes.append(helper.make_node("Relu", [previous], [name], name="relu%d" % i))
        previous = name
    nodes.append(helper.make_node("Identity", [previous], ["y"], name="out"))
    model = plain_onnx_graph(nodes, [float_value("x", ["batch", 8])], [float_value("y", ["batch", 8])])
    path = save_onnx(model, ctx.path("chain20000.onnx"))
    out = ctx.path("out")
    ctx.expect([ctx.rannc, path, "--batch", "4", "--gpus", "2", "-o", out], (0, 1, 2), r"chain20000\.onnx|fit",
               timeout=300)
    check_plan_numbers(ctx, out)
    if os.path.exists(os.path.join(out, "plan.json")):
        ctx.expect([ctx.rannc, "verify", os.path.join(out, "plan.json")], (0,), None, timeout=300)


def pt_with_storage(ctx, name, change, which=None):
    """mlp.pt with one weight storage changed: storage WHICH (data/WHICH), default the largest."""
    import mutators
    with open(ctx.seed("mlp.pt"), "rb") as f:
        entries = mutators.read_zip(f.read())
    storages = [i for i, (n, _) in enumerate(entries) if "/data/" in n]
    if which is None:  # the largest storage: the first layer's weight (16x8 floats)
        i = max(storages, key=lambda k: len(entries[k][1]))
    else:
        i = [k for k in storages if entries[k][0].endswith("/data/%d" % which)][0]
    entries[i] = (entries[i][0], change(entries[i][1]))
    ctx.note("%s: %s now %d bytes" % (name, entries[i][0], len(entries[i][1])))
    path = ctx.path(name)
    write(path, mutators.write_zip(entries))
    return path


def case_pt_empty_storage(ctx):
    """A .pt whose largest weight storage inside the zip is empty."""
    path = pt_with_storage(ctx, "empty_storage.pt", lambda data: b"")
    ctx.expect([ctx.rannc, "inspect", path, "--input", X_ARG], 2, r"empty_storage\.pt")
    ctx.expect([ctx.rannc, path, "--input", X_ARG, "--gpus", "2", "-o", ctx.path("out")], 2, r"empty_storage\.pt")
    for which in range(4):  # each of the four storages (weights and biases of both layers)
        name = "empty_storage_%d.pt" % which
        path = pt_with_storage(ctx, name, lambda data: b"", which)
        ctx.expect([ctx.rannc, "inspect", path, "--input", X_ARG], 2, re.escape(name))


def case_pt_truncated_storage(ctx):
    """A .pt whose largest weight storage inside the zip is cut to half (and to 3 bytes)."""
    path = pt_with_storage(ctx, "truncated_storage.pt", lambda data: data[:len(data) // 2])
    ctx.expect([ctx.rannc, "inspect", path, "--input", X_ARG], 2, r"truncated_storage\.pt")
    ctx.expect([ctx.rannc, path, "--input", X_ARG, "--gpus", "2", "-o", ctx.path("out")], 2, r"truncated_storage\.pt")
    path = pt_with_storage(ctx, "three_bytes.pt", lambda data: data[:3])
    ctx.expect([ctx.rannc, "inspect", path, "--input", X_ARG], 2, r"three_bytes\.pt")


def stage_with_storage(ctx, change):
    """plan1 copied, its stage file's largest weight storage changed; returns the plan's path."""
    import mutators
    plan = copy_plan(ctx)
    stage = os.path.join(os.path.dirname(plan), "stage_0.pt")
    with open(stage, "rb") as f:
        entries = mutators.read_zip(f.read())
    storages = [i for i, (n, _) in enumerate(entries) if "/data/" in n]
    i = max(storages, key=lambda k: len(entries[k][1]))
    entries[i] = (entries[i][0], change(entries[i][1]))
    ctx.note("stage_0.pt: %s now %d bytes" % (entries[i][0], len(entries[i][1])))
    write(stage, mutators.write_zip(entries))
    return plan


def case_stage_file_bad_storage(ctx):
    """A plan whose stage file has a weight storage cut to 1 byte, then emptied: verify and
    rannc-run must refuse the stage file (exit 2), not compute with memory past its end."""
    for label, change in (("truncated", lambda data: data[:1]), ("empty", lambda data: b"")):
        plan = stage_with_storage(ctx, change)
        ctx.expect([ctx.rannc, "verify", plan], 2, r"stage_0\.pt")
        if ctx.run:
            ctx.expect(ctx.mpirun(plan, "--steps", "1", "--loss", "cross_entropy"), 2, r"stage_0\.pt", mpi=True)
        shutil.rmtree(os.path.dirname(plan))


def case_cluster_dev_zero(ctx):
    """--cluster /dev/zero: an endless file must be refused, not read forever."""
    ctx.expect([ctx.rannc, "inspect", ctx.seed("mlp.onnx"), "--cluster", "/dev/zero"], 2, "/dev/zero", timeout=20)
    ctx.expect([ctx.rannc, ctx.seed("mlp.onnx"), "--cluster", "/dev/zero", "--plan-only", "-o", ctx.path("out")], 2,
               "/dev/zero", timeout=20)
    ctx.expect([ctx.rannc, "inspect", ctx.seed("mlp.onnx"), "--device", "cpu", "--profile-db", "/dev/zero"], 2,
               "/dev/zero", timeout=20)


def case_model_dev_zero(ctx):
    """A model path of /dev/zero (and a .onnx / .pt symlink to it): refused, not read forever."""
    for name in ("zero.onnx", "zero.pt"):
        os.symlink("/dev/zero", ctx.path(name))
    ctx.expect([ctx.rannc, "inspect", "/dev/zero"], 2, "/dev/zero", timeout=20)
    ctx.expect([ctx.rannc, "/dev/zero", "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 2, "/dev/zero",
               timeout=20)
    ctx.expect([ctx.rannc, "inspect", ctx.path("zero.onnx")], 2, "zero.onnx", timeout=20)
    ctx.expect([ctx.rannc, "inspect", ctx.path("zero.pt"), "--input", X_ARG], 2, "zero.pt", timeout=20)
    ctx.expect([ctx.rannc, "show", "/dev/zero"], 2, "/dev/zero", timeout=20)


def cluster_numbers_case(ctx, change, label):
    cluster = read_json(ctx.seed("cluster.json"))
    cluster["nodes"] = 2
    change(cluster)
    path = ctx.path("cluster.json")
    with open(path, "w") as f:
        json.dump(cluster, f)
    ctx.note("cluster: %s" % json.dumps(cluster))
    for model, extra in ((ctx.seed("mlp.onnx"), ["--batch", "8"]), (ctx.seed("mlp.pt"), ["--input", X_ARG, "--batch", "8"])):
        out = ctx.path("out_" + os.path.basename(model))
        result = ctx.expect([ctx.rannc, model] + extra + ["--cluster", path, "--stages", "2", "--plan-only", "-o", out],
                            (0, 2), "cluster.json", timeout=60)
        if result.returncode == 0:
            check_plan_numbers(ctx, out)
            shown = ctx.expect([ctx.rannc, "show", os.path.join(out, "plan.json")], (0,), None)
            if re.search(r"\b(nan|inf|-nan)\b", shown.stdout, re.IGNORECASE):
                ctx.fail("show prints nan/inf for the %s plan: %s" % (label, shown.stdout[:400]))


def case_cluster_latency_1e308(ctx):
    """A cluster JSON with both links' latency 1e308 us: refused, or a plan with finite times."""
    def change(cluster):
        cluster["intra_node"]["latency_us"] = 1e308
        cluster["inter_node"]["latency_us"] = 1e308
    cluster_numbers_case(ctx, change, "latency 1e308")


def case_cluster_bandwidth_extremes(ctx):
    """A cluster JSON with bandwidths 1e-300 and 1e308 GB/s: refused, or a plan with finite times."""
    def change(cluster):
        cluster["intra_node"]["bandwidth_gbps"] = 1e-300
        cluster["inter_node"]["bandwidth_gbps"] = 1e308
    cluster_numbers_case(ctx, change, "bandwidth extremes")


def case_cluster_custom_device_extremes(ctx):
    """A custom device with 1e308 TFLOP/s and 1e-300 GB/s memory bandwidth."""
    def change(cluster):
        cluster["device"] = {"name": "weird", "peak_fp32_tflops": 1e308, "peak_half_tflops": 1e308,
                             "mem_bandwidth_gbps": 1e-300, "mem": "80G", "op_overhead_us": 1e308}
    cluster_numbers_case(ctx, change, "custom device extremes")


def case_profile_db_negative_counts(ctx):
    """A profile DB whose model entry has negative counts (signatures, ops, unprofiled, reps,
    byte counts): refused with one line naming the DB."""
    db = read_json(ctx.seed("profile_db.json"))
    variants = []

    def variant(name, change):
        tree = json.loads(json.dumps(db))
        change(tree)
        path = ctx.path("db_%s.json" % name)
        with open(path, "w") as f:
            json.dump(tree, f)
        variants.append(path)

    def models(tree):
        return list(tree["models"].values())

    def ops(tree):
        return [op for device in tree["devices"].values() for op in device["ops"].values()]

    def each_signature(tree, value):
        for model in models(tree):
            for key in model["signatures"]:
                model["signatures"][key] = value
    variant("signature_counts", lambda t: each_signature(t, -3))
    variant("signature_counts_int_min", lambda t: each_signature(t, -(2 ** 31)))
    variant("model_ops", lambda t: [m.__setitem__("ops", -5) for m in models(t)])
    variant("unprofiled", lambda t: [m.__setitem__("unprofiled_signatures", -1) for m in models(t)])
    variant("model_peak", lambda t: [m.__setitem__("peak_bytes", -1e9) for m in models(t)])
    variant("model_fwd_ms", lambda t: [m.__setitem__("fwd_ms", -1.0) for m in models(t)])
    variant("op_reps", lambda t: [o.__setitem__("reps", -2) for o in ops(t)])
    variant("op_peak_bytes", lambda t: [o.__setitem__("fwd_peak_bytes", -(2 ** 40)) for o in ops(t)])
    variant("op_retained_bytes", lambda t: [o.__setitem__("retained_bytes", -1) for o in ops(t)])
    for path in variants:
        name = os.path.basename(path)
        for command in ([ctx.rannc, "inspect", ctx.seed("mlp.pt"), "--input", X_ARG, "--device", "cpu",
                         "--profile-db", path],
                        [ctx.rannc, "profile", ctx.seed("mlp.pt"), "--input", X_ARG, "--profile-db", path,
                         "--reps", "1"]):
            ctx.expect(command, 2, re.escape(name) + r".*(negative|must|corrupt)")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def plan_fingerprint(folder):
    plan = read_json(os.path.join(folder, "plan.json"))
    # The command line in plan.json names the output folder: the rest must match byte for byte.
    return {"plan": hashlib.sha256(plan_bytes.read_without_generator(os.path.join(folder, "plan.json"))).hexdigest(),
            "stages": {s["file"]: sha256(os.path.join(folder, s["file"])) for s in plan["stages"]}}


def case_concurrent_same_out(ctx):
    """Three partitions (2 stages on 2 devices, 3 on 3, 1 on 1) into the same -o at once, 10 times:
    the folder must end with a plan whose stage files all come from one run (verify passes and
    every file is byte-identical to the same run made alone)."""
    model = ctx.seed("mlp.pt")
    runs = {"a": ["--gpus", "2", "--stages", "2"], "b": ["--gpus", "3", "--stages", "3"], "c": ["--gpus", "1"]}
    references = {}
    for key, extra in runs.items():
        folder = ctx.path("alone_" + key)
        ctx.expect([ctx.rannc, model, "--input", X_ARG] + extra + ["-o", folder], 0, None, timeout=120)
        references[key] = plan_fingerprint(folder)
    # Deterministic stage bytes? (compared only when a second solo run gives the same bytes)
    again = ctx.path("alone_a2")
    ctx.expect([ctx.rannc, model, "--input", X_ARG] + runs["a"] + ["-o", again], 0, None, timeout=120)
    deterministic = plan_fingerprint(again)["stages"] == references["a"]["stages"]
    ctx.note("stage files byte-deterministic: %s" % deterministic)
    shared = ctx.path("shared")
    for attempt in range(10):
        shutil.rmtree(shared, ignore_errors=True)
        processes = []
        order = ["a", "b", "c"] if attempt % 2 == 0 else ["c", "b", "a"]
        for key in order:
            command = [ctx.rannc, model, "--input", X_ARG] + runs[key] + ["-o", shared]
            processes.append((key, command, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                              env=ctx.env, start_new_session=True)))
        for key, command, process in processes:
            try:
                _, stderr = process.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                raise Failed("attempt %d: run %s hangs" % (attempt, key))
            lines = stderr.decode("utf-8", "replace").splitlines()
            ctx.note("attempt %d run %s: exit %d, stderr %s" % (attempt, key, process.returncode, lines[:3]))
            if process.returncode != 0 and (process.returncode not in (1, 2) or len(lines) != 1):
                raise Failed("attempt %d: run %s exit %d with %d stderr lines: %s" % (
                    attempt, key, process.returncode, len(lines), " | ".join(lines[:4])))
        plan_path = os.path.join(shared, "plan.json")
        if not os.path.exists(plan_path):
            raise Failed("attempt %d: no plan.json after both runs" % attempt)
        leftovers = [n for n in os.listdir(shared) if ".tmp" in n]
        if leftovers:
            raise Failed("attempt %d: temporary files left: %s" % (attempt, leftovers))
        ctx.expect([ctx.rannc, "verify", plan_path], 0, None, timeout=120)
        found = plan_fingerprint(shared)
        matches = [key for key, ref in references.items() if ref["plan"] == found["plan"]]
        if not matches:
            raise Failed("attempt %d: plan.json matches neither run alone" % attempt)
        if deterministic and found["stages"] != references[matches[0]]["stages"]:
            mixed = [f for f, h in found["stages"].items() if references[matches[0]]["stages"].get(f) != h]
            raise Failed("attempt %d: plan.json is run %s's but %s differ from that run's" % (attempt, matches[0], mixed))
        ctx.note("attempt %d: consistent plan of run %s" % (attempt, matches[0]))


def case_run_report_unwritable(ctx):
    """rannc-run --report /proc/nonexistent/x.json must fail before training, not after it."""
    plan = copy_plan(ctx)
    result = ctx.expect(ctx.mpirun(plan, "--steps", "20", "--loss", "cross_entropy", "--report", "/proc/nonexistent/x.json"), 2,
                        r"/proc/nonexistent/x\.json", mpi=True, timeout=120)
    if re.search(r"^step \d+", result.stdout, re.MULTILINE):
        ctx.fail("rannc-run trained before refusing the report path: %s" % result.stdout[:300])
    result = ctx.expect(ctx.mpirun(plan, "--steps", "20", "--loss", "cross_entropy", "--report", ctx.dir), 2, re.escape(ctx.dir), mpi=True,
                        timeout=120)
    if re.search(r"^step \d+", result.stdout, re.MULTILINE):
        ctx.fail("rannc-run trained before refusing a folder as report path: %s" % result.stdout[:300])


def write_wide_model(path, width=256):
    import torch
    import torch.nn as nn
    import make_seeds
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width), nn.ReLU(),
                          nn.Linear(width, 8)).train()
    torch.jit.trace(make_seeds.wrap(model).train(), (torch.randn(4, width),)).save(path)


def case_full_disk(ctx):
    """Stage files written to a 300 KiB tmpfs that cannot hold them: one line, no `terminate
    called`, no *.tmp left behind, no plan.json."""
    mount_point = ctx.path("fulldisk")
    os.makedirs(mount_point)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", mount_point], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        raise Skip("cannot mount a tmpfs (%s)" % mounted.stderr.strip()[:200])
    try:
        model = ctx.path("wide.pt")
        write_wide_model(model)  # ~1.3 MB of weights
        out = os.path.join(mount_point, "out")
        ctx.expect([ctx.rannc, model, "--input", "x:4x256", "--gpus", "2", "--stages", "2", "-o", out], 2,
                   r"(space|write|cannot)", timeout=120)
        left = os.listdir(out) if os.path.isdir(out) else []
        ctx.note("left in the output folder: %s" % left)
        leftovers = [n for n in left if ".tmp" in n]
        if leftovers:
            ctx.fail("temporary files left behind: %s" % leftovers)
        if "plan.json" in left:
            ctx.fail("plan.json written although the stage files were not")
        # A profile DB on the full disk.
        filler = os.path.join(mount_point, "filler")
        subprocess.run(["dd", "if=/dev/zero", "of=" + filler, "bs=1k", "count=400"], capture_output=True)
        db = os.path.join(mount_point, "db.json")
        ctx.expect([ctx.rannc, "profile", ctx.seed("mlp.pt"), "--input", X_ARG, "--profile-db", db, "--reps", "1"], 2,
                   r"(space|write|cannot)", timeout=120)
        leftovers = [n for n in os.listdir(mount_point) if ".tmp" in n]
        if leftovers:
            ctx.fail("temporary files left behind by profile: %s" % leftovers)
        # The plan written to a full disk (no stage files).
        out = os.path.join(mount_point, "out2")
        ctx.expect([ctx.rannc, ctx.seed("mlp.onnx"), "--gpus", "2", "--plan-only", "-o", out], (2,),
                   r"(space|write|cannot)", timeout=60)
        if os.path.isdir(out):
            leftovers = [n for n in os.listdir(out) if ".tmp" in n]
            if leftovers:
                ctx.fail("temporary files left behind by --plan-only: %s" % leftovers)
    finally:
        subprocess.run(["umount", mount_point], capture_output=True)


# ---------------------------------------------------------------------------------------------
# Hostile .pt2 archives, made from the committed PyTorch 2.6 export tests/models/pt2/tiny_attention.pt2
# (and the PT2 archive of 2.9 that tests/models/make_pt2_layouts.py makes of it).
# ---------------------------------------------------------------------------------------------

PT2_SEED = os.path.join(os.path.dirname(HERE), "models", "pt2", "tiny_attention.pt2")
PT2_PROGRAM = "serialized_exported_program.json"


def pt2_entries():
    import zipfile
    with zipfile.ZipFile(PT2_SEED) as z:
        return [(info.filename, z.read(info.filename)) for info in z.infolist()]


def pt2_program():
    return json.loads(dict(pt2_entries())[PT2_PROGRAM])


def write_pt2(ctx, name, entries):
    """entries: (name, bytes or str or a JSON tree for the program) in order; stored as PyTorch stores."""
    import mutators
    fixed = []
    for entry, data in entries:
        if not isinstance(data, (bytes, str)):
            data = json.dumps(data)
        fixed.append((entry, data.encode() if isinstance(data, str) else data))
    path = ctx.path(name)
    write(path, mutators.write_zip(fixed))
    return path


def pt2_with_program(ctx, name, program):
    """The seed with its program replaced by PROGRAM (a JSON tree or the text itself)."""
    return write_pt2(ctx, name, [(n, program if n == PT2_PROGRAM else d) for n, d in pt2_entries()])


def expect_pt2(ctx, path, pattern=None, stages=False, timeout=30):
    """inspect and partition --plan-only of PATH (and partition with stage files): exit 2, one line
    naming the file (and matching PATTERN), promptly."""
    pattern = re.escape(os.path.basename(path)) + (".*" + pattern if pattern else "")
    ctx.expect([ctx.rannc, "inspect", path], 2, pattern, timeout=timeout)
    ctx.expect([ctx.rannc, path, "--device", "cpu", "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 2, pattern,
               timeout=timeout)
    if stages:
        ctx.expect([ctx.rannc, path, "--device", "cpu", "--gpus", "2", "--no-check", "-o", ctx.path("out")], 2,
                   pattern, timeout=timeout)


def patch_directory(data, entry, field, value):
    """The zip DATA with FIELD ("size": uncompressed size, "crc") of ENTRY changed in its central
    directory record and its local header alike: a directory that lies about the entry."""
    import struct
    name = entry.encode()
    out = bytearray(data)
    at = 0
    while True:
        central = data.find(b"PK\x01\x02", at)
        if central < 0:
            raise Failed("%s is not in the zip" % entry)
        length = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46:central + 46 + length] == name:
            break
        at = central + 4
    local = struct.unpack_from("<I", data, central + 42)[0]
    offsets = {"crc": (16, 14), "size": (24, 22), "compressed": (20, 18)}[field]
    struct.pack_into("<I", out, central + offsets[0], value)
    struct.pack_into("<I", out, local + offsets[1], value)
    return bytes(out)


def case_pt2_damaged_zip(ctx):
    """A .pt2 that is no zip but starts with its magic, a truncated one, one whose directory lies
    about an entry's size or CRC, an empty one, /dev/zero named x.pt2: one line, exit 2, promptly."""
    import random
    seed = open(PT2_SEED, "rb").read()
    junk = bytes(random.Random(29).getrandbits(8) for _ in range(4000))
    for name, data in (("pk_magic.pt2", b"PK\x03\x04" + junk), ("pk_directory_end.pt2", b"PK\x05\x06" + bytes(18)),
                       ("pk_nothing_else.pt2", b"PK\x03\x04"), ("empty_zip.pt2", write_pt2_bytes([])),
                       ("truncated_half.pt2", seed[:len(seed) // 2]), ("truncated_end.pt2", seed[:-10]),
                       ("truncated_directory.pt2", seed[:-200]), ("empty.pt2", b"")):
        path = ctx.path(name)
        write(path, data)
        ctx.expect([ctx.rannc, "inspect", path], 2, re.escape(name), timeout=20)
        ctx.expect([ctx.rannc, path, "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 2, re.escape(name),
                   timeout=20)
    # The directory lies about the program's size (more, less, 4 GiB) or its CRC.
    real = len(dict(pt2_entries())[PT2_PROGRAM])
    for name, field, value in (("size_more.pt2", "size", real + 1000), ("size_less.pt2", "size", real - 1000),
                               ("size_4g.pt2", "size", 0xFFFFFFF0), ("size_zero.pt2", "size", 0),
                               ("crc.pt2", "crc", 0x12345678)):
        path = ctx.path(name)
        write(path, patch_directory(seed, PT2_PROGRAM, field, value))
        expect_pt2(ctx, path, r"serialized_exported_program\.json|not a zip|damaged|CRC")
    # The weights' size (read only for stage files): planning does not read them.
    path = ctx.path("weights_size.pt2")
    write(path, patch_directory(seed, "serialized_state_dict.pt", "size", 5))
    ctx.expect([ctx.rannc, path, "--device", "cpu", "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 0, None)
    ctx.expect([ctx.rannc, path, "--device", "cpu", "--gpus", "2", "--no-check", "-o", ctx.path("out")], 2,
               r"weights_size\.pt2.*serialized_state_dict\.pt", timeout=30)
    os.symlink("/dev/zero", ctx.path("x.pt2"))
    ctx.expect([ctx.rannc, "inspect", ctx.path("x.pt2")], 2, r"x\.pt2.*not a regular file", timeout=20)
    ctx.expect([ctx.rannc, ctx.path("x.pt2"), "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 2,
               r"x\.pt2.*not a regular file", timeout=20)


def write_pt2_bytes(entries):
    import mutators
    return mutators.write_zip(entries)


def case_pt2_bad_program(ctx):
    """A .pt2 whose program is not JSON, JSON nested 100000 deep (the whole of it and inside
    fields), of another schema version, or missing what the schema requires."""
    for name, text in (("not_json.pt2", "{"), ("empty_program.pt2", ""), ("nul.pt2", "\0" * 100),
                       ("half.pt2", json.dumps(pt2_program())[:5000]), ("deep_array.pt2", deep_text(100000)),
                       ("deep_object.pt2", '{"a":' * 100000 + "1" + "}" * 100000)):
        expect_pt2(ctx, pt2_with_program(ctx, name, text), r"JSON|exported program")
    deep = pt2_program()
    text = json.dumps(deep).replace('"torch_version": "', '"torch_version": ' + deep_text(100000) + ', "x": "', 1)
    expect_pt2(ctx, pt2_with_program(ctx, "deep_field.pt2", text), "JSON nested")
    node = json.dumps(deep["graph_module"]["graph"]["nodes"][0])
    text = json.dumps(deep).replace(node[:-1], node[:-1] + ', "extra": ' + '{"a":' * 100000 + "1" + "}" * 100000, 1)
    expect_pt2(ctx, pt2_with_program(ctx, "deep_node.pt2", text), "JSON nested")

    def variant(name, change, pattern):
        program = pt2_program()
        change(program)
        expect_pt2(ctx, pt2_with_program(ctx, name, program), pattern)

    graph = lambda p: p["graph_module"]["graph"]  # noqa: E731
    signature = lambda p: p["graph_module"]["signature"]  # noqa: E731
    variant("schema_9.pt2", lambda p: p["schema_version"].__setitem__("major", 9), r"schema version 9\.")
    variant("schema_7.pt2", lambda p: p["schema_version"].__setitem__("major", 7), r"schema version 7\.")
    variant("schema_2p32_8.pt2", lambda p: p["schema_version"].__setitem__("major", 2 ** 32 + 8),
            r"schema version 4294967304\.")
    variant("schema_text.pt2", lambda p: p["schema_version"].__setitem__("major", "8"), "schema_version.major")
    variant("no_schema.pt2", lambda p: p.pop("schema_version"), "schema_version is missing")
    variant("no_graph_module.pt2", lambda p: p.pop("graph_module"), "graph_module is missing")
    variant("no_nodes.pt2", lambda p: graph(p).pop("nodes"), r"graph\.nodes is missing")
    variant("no_target.pt2", lambda p: graph(p)["nodes"][3].pop("target"), r"graph\.nodes\[3\]\.target is missing")
    variant("no_tensor_values.pt2", lambda p: graph(p).pop("tensor_values"), r"graph\.tensor_values is missing")
    variant("no_meta.pt2", lambda p: graph(p)["tensor_values"].pop("tokens"), r"tokens.*no tensor_values entry")
    variant("no_signature.pt2", lambda p: p["graph_module"].pop("signature"), "signature is missing")
    variant("empty_input_spec.pt2", lambda p: signature(p)["input_specs"].__setitem__(0, {}),
            r"input_specs\[0\] is not a one-key object")
    variant("no_outputs.pt2", lambda p: signature(p).__setitem__("output_specs", []), "returns no tensor")
    variant("undefined_value.pt2",
            lambda p: graph(p)["nodes"][-1]["inputs"][0]["arg"].__setitem__("as_tensor", {"name": "nowhere"}),
            "'nowhere', which nothing defines")


def pt2_tensor_sizes(program, name):
    return program["graph_module"]["graph"]["tensor_values"][name]["sizes"]


def case_pt2_hostile_sizes(ctx):
    """Tensors of 2^62 x 2^62 elements, negative sizes, an expr_str of 100000 nested parentheses
    (and a Symbol whose arguments no rule reads, which once looped forever): one line, exit 2."""
    program = pt2_program()
    output = program["graph_module"]["signature"]["output_specs"][0]["user_output"]["arg"]["as_tensor"]["name"]
    huge = [{"as_int": 2 ** 62}, {"as_int": 2 ** 62}]

    def variant(name, change, pattern, stages=False):
        tree = pt2_program()
        change(tree)
        expect_pt2(ctx, pt2_with_program(ctx, name, tree), pattern, stages=stages)

    variant("huge_weight.pt2", lambda p: pt2_tensor_sizes(p, "p_q_weight").__setitem__(slice(None), huge),
            "4611686018427387904")
    variant("huge_output.pt2", lambda p: pt2_tensor_sizes(p, output).__setitem__(slice(None), huge + [{"as_int": 50}]),
            "4611686018427387904")
    variant("huge_input.pt2", lambda p: pt2_tensor_sizes(p, "tokens").__setitem__(1, {"as_int": 2 ** 62}),
            "4611686018427387904|tokens")
    variant("int64_max.pt2", lambda p: pt2_tensor_sizes(p, "p_pos_weight").__setitem__(0, {"as_int": 2 ** 63 - 1}),
            "9223372036854775807")
    variant("uint64.pt2", lambda p: pt2_tensor_sizes(p, "p_pos_weight").__setitem__(0, {"as_int": 2 ** 64 - 1}),
            r"sizes\[0\] is beyond the 64-bit range")
    variant("negative_weight.pt2", lambda p: pt2_tensor_sizes(p, "p_q_weight").__setitem__(0, {"as_int": -16}),
            "negative size")
    variant("negative_input.pt2", lambda p: pt2_tensor_sizes(p, "tokens").__setitem__(1, {"as_int": -1}),
            "negative size")
    for name, expr in (("deep_expr.pt2", "(" * 100000 + "s0" + ")" * 100000),
                       ("deep_srepr.pt2", "Add(Integer(1), " * 100000 + "s0" + ")" * 100000),
                       ("stuck_symbol.pt2", "Symbol('s0', ?)"), ("unbound_symbol.pt2", "s0 + u7"),
                       ("overflow_expr.pt2", "s0 * 9223372036854775807")):
        def change(tree, expr=expr):
            for meta in tree["graph_module"]["graph"]["tensor_values"].values():
                for size in meta["sizes"]:
                    if "as_expr" in size:
                        size["as_expr"]["expr_str"] = expr
        variant(name, change, r"size|expression|batch|dim")


def pt2_v29(ctx, name, change=None, program=None):
    """The seed as the PT2 archive of PyTorch 2.9 (make_pt2_layouts.py's v29.pt2), its weights
    config changed by CHANGE(config, files) (files: path_name -> bytes)."""
    import mutators
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))
    import make_pt2_layouts
    folder = ctx.path("layouts")
    if not os.path.exists(os.path.join(folder, "v29.pt2")):
        make_pt2_layouts.main(["--seed", PT2_SEED, "--out", folder])
    with open(os.path.join(folder, "v29.pt2"), "rb") as f:
        entries = mutators.read_zip(f.read())
    config_entry = "v29/data/weights/model_weights_config.json"
    config = json.loads(dict(entries)[config_entry])["config"]
    files = {n[len("v29/data/weights/"):]: d for n, d in entries
             if n.startswith("v29/data/weights/") and n != config_entry}
    if change:
        change(config, files)
    kept = [(n, d) for n, d in entries if not n.startswith("v29/data/weights/")]
    kept += [("v29/data/weights/" + n, d) for n, d in files.items()]
    kept.append((config_entry, json.dumps({"config": config}).encode()))
    if program is not None:
        kept = [(n, json.dumps(program).encode() if n == "v29/models/model.json" else d) for n, d in kept]
    path = ctx.path(name)
    write(path, mutators.write_zip(kept))
    return path


def expect_weights_refused(ctx, path, pattern, timeout=60):
    """Planning reads no weight: --plan-only plans; stage files need them: one line, exit 2."""
    ctx.expect([ctx.rannc, path, "--device", "cpu", "--gpus", "2", "--plan-only", "-o", ctx.path("out")], 0, None,
               timeout=timeout)
    ctx.expect([ctx.rannc, path, "--device", "cpu", "--gpus", "2", "--no-check", "-o", ctx.path("out")], 2,
               re.escape(os.path.basename(path)) + ".*" + pattern, timeout=timeout)


def case_pt2_bad_weights(ctx):
    """A weights config pointing past its payload (offset, sizes, strides), at no file, with sizes
    of 2^62 over a stride of 0, a dtype with no type here, a tensor of other dims than the
    program's; weights missing, truncated or empty when stage files are written."""
    def setter(name, key, value):
        def change(config, files):
            config[name]["tensor_meta"][key] = value
        return change

    cases = [
        ("offset_past.pt2", setter("q.bias", "storage_offset", {"as_int": 2 ** 40}), "reads past its storage"),
        ("offset_negative.pt2", setter("q.bias", "storage_offset", {"as_int": -1}), "storage offset"),
        ("sizes_past.pt2", setter("q.bias", "sizes", [{"as_int": 17}]), "reads past its storage"),
        ("strides_past.pt2", setter("q.weight", "strides", [{"as_int": 17}, {"as_int": 1}]), "reads past its storage"),
        ("strides_negative.pt2", setter("q.weight", "strides", [{"as_int": -16}, {"as_int": 1}]),
         "reads past its storage"),
        ("strides_count.pt2", setter("q.weight", "strides", [{"as_int": 1}]), "strides for 2 dims"),
        ("expanded_huge.pt2", lambda c, f: c["q.bias"]["tensor_meta"].update(
            sizes=[{"as_int": 2 ** 40}], strides=[{"as_int": 0}]), "more than its storage"),
        ("numel_overflow.pt2", lambda c, f: c["q.weight"]["tensor_meta"].update(
            sizes=[{"as_int": 2 ** 62}, {"as_int": 2 ** 62}]), "beyond 64 bits"),
        ("dtype_float8.pt2", setter("q.bias", "dtype", 29), "dtype code 29"),
        ("other_dims.pt2", setter("q.bias", "sizes", [{"as_int": 3}]), r"stores 'q\.bias' as float32\[3\]"),
        ("no_file.pt2", lambda c, f: c["q.bias"].__setitem__("path_name", "weight_999"), "weight_999.* is missing"),
        ("long_path.pt2", lambda c, f: c["q.bias"].__setitem__("path_name", "w" * 100000), "path_name of 100000"),
        ("payload_cut.pt2", lambda c, f: f.__setitem__(c["q.weight"]["path_name"], f[c["q.weight"]["path_name"]][:100]),
         "reads past its storage"),
        ("payload_empty.pt2", lambda c, f: f.__setitem__(c["q.weight"]["path_name"], b""), "stores no data for 'q.weight'"),
        ("weight_left_out.pt2", lambda c, f: c.pop("q.weight"), "stores no data for 'q.weight'"),
        ("config_not_json.pt2", None, "weights config|model_weights_config"),
    ]
    for name, change, pattern in cases:
        if change is None:
            path = pt2_v29(ctx, name)
            import mutators
            entries = mutators.read_zip(open(path, "rb").read())
            entries = [(n, b"{" if n.endswith("model_weights_config.json") else d) for n, d in entries]
            write(path, mutators.write_zip(entries))
        else:
            path = pt2_v29(ctx, name, change)
        expect_weights_refused(ctx, path, pattern)
    # PyTorch 2.6's layout without its state dict, with it damaged or without one weight.
    seed = pt2_entries()
    for name, change, pattern in (
            ("no_state_dict.pt2", lambda n, d: None if n == "serialized_state_dict.pt" else d, "stores no data"),
            ("state_dict_cut.pt2", lambda n, d: d[:len(d) // 2] if n == "serialized_state_dict.pt" else d,
             "serialized_state_dict"),
            ("state_dict_text.pt2", lambda n, d: b"not a torch.save file" if n == "serialized_state_dict.pt" else d,
             "serialized_state_dict")):
        entries = [(n, change(n, d)) for n, d in seed]
        path = write_pt2(ctx, name, [(n, d) for n, d in entries if d is not None])
        expect_weights_refused(ctx, path, pattern)
    import torch
    import io
    state = torch.load(io.BytesIO(dict(seed)["serialized_state_dict.pt"]))
    del state["q.weight"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path = write_pt2(ctx, "state_dict_short.pt2",
                     [(n, buffer.getvalue() if n == "serialized_state_dict.pt" else d) for n, d in seed])
    expect_weights_refused(ctx, path, "stores no data for 'q.weight'")


CASES = [
    ("deep-plan-json", "hostile deeply nested plan JSON", case_deep_plan_show),
    ("deep-plan-json-run", "hostile deeply nested plan JSON to rannc-run", case_deep_plan_run),
    ("deep-cluster-json", "hostile deeply nested cluster JSON", case_deep_cluster),
    ("deep-profile-db", "hostile deeply nested profile DB", case_deep_profile_db),
    ("onnx-batch-2pow40", "hostile ONNX batch dim 2^40", case_batch_dim_2pow40),
    ("onnx-batch-int64-max", "hostile ONNX batch dim INT64_MAX", case_batch_dim_int64_max),
    ("batch-int32-max", "hostile --batch 2147483647", case_batch_int32_max),
    ("batch-large-prime", "hostile --batch 2147483629 (prime)", case_batch_large_prime),
    ("onnx-conv-strides-0", "hostile ONNX Conv with strides 0", case_conv_strides_zero),
    ("onnx-recursive-function", "hostile ONNX local function that calls itself", case_recursive_function),
    ("onnx-sum-5000", "hostile ONNX Sum of 5000 inputs", case_sum_5000),
    ("onnx-chain-20000", "hostile ONNX chain of 20000 ops with stage files", case_chain_20000),
    ("pt-empty-storage", "hostile .pt with an empty weight storage", case_pt_empty_storage),
    ("pt-truncated-storage", "hostile .pt with a truncated weight storage", case_pt_truncated_storage),
    ("stage-file-bad-storage", "hostile stage file with a truncated or empty weight storage",
     case_stage_file_bad_storage),
    ("cluster-dev-zero", "hostile --cluster /dev/zero", case_cluster_dev_zero),
    ("model-dev-zero", "hostile model path /dev/zero", case_model_dev_zero),
    ("cluster-latency-1e308", "hostile cluster latency 1e308", case_cluster_latency_1e308),
    ("cluster-bandwidth-extremes", "hostile cluster bandwidths 1e-300 and 1e308", case_cluster_bandwidth_extremes),
    ("cluster-device-extremes", "hostile custom device with extreme peaks", case_cluster_custom_device_extremes),
    ("profile-db-negative-counts", "hostile profile DB with negative counts", case_profile_db_negative_counts),
    ("concurrent-same-out", "hostile concurrent partitions into the same output folder", case_concurrent_same_out),
    ("run-report-unwritable", "hostile rannc-run --report to an unwritable path", case_run_report_unwritable),
    ("full-disk", "hostile full disk while writing stage files", case_full_disk),
    ("pt2-damaged-zip", "hostile .pt2 not a zip, truncated, lying directory, /dev/zero", case_pt2_damaged_zip),
    ("pt2-bad-program", "hostile .pt2 program JSON: invalid, 100000 deep, schema, missing fields",
     case_pt2_bad_program),
    ("pt2-hostile-sizes", "hostile .pt2 sizes 2^62 x 2^62, negative, 100000-deep expressions", case_pt2_hostile_sizes),
    ("pt2-bad-weights", "hostile .pt2 weights past their payload or missing when writing stage files",
     case_pt2_bad_weights),
]


def run_case(args, case_id, function):
    ctx = Context(args, case_id)
    start = time.monotonic()
    try:
        function(ctx)
        status, detail = ("FAIL", "\n".join(ctx.failures)) if ctx.failures else ("PASS", "")
    except Skip as e:
        status, detail = "SKIP", str(e)
    except Failed as e:
        status, detail = "FAIL", "\n".join(ctx.failures + [str(e)])
    except Exception as e:  # a bug of this script or an unexpected environment
        import traceback
        status, detail = "ERROR", "".join(traceback.format_exception(type(e), e, e.__traceback__))[-2000:]
    seconds = time.monotonic() - start
    with open(os.path.join(ctx.dir, "log.txt"), "w") as f:
        f.write("%s %s (%.1f s)\n%s\n\n%s\n" % (status, case_id, seconds, detail, "\n".join(ctx.log)))
    return case_id, status, detail, seconds, ctx.log


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rannc", required=False)
    parser.add_argument("--run")
    parser.add_argument("--work")
    parser.add_argument("--seeds")
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--list", action="store_true", help="print ID<TAB>TITLE per case")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if args.list:
        for case_id, title, _ in CASES:
            print("%s\t%s" % (case_id, title))
        return 0
    if not args.rannc or not args.work:
        parser.error("--rannc and --work are required")
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    args.seeds = os.path.abspath(args.seeds or os.path.join(args.work, "seeds"))
    if not os.path.exists(os.path.join(args.seeds, "plan3", "plan.json")):
        import make_seeds
        make_seeds.write_all(os.path.abspath(args.rannc), args.seeds)
    known = {case_id: function for case_id, _, function in CASES}
    selected = args.case or [case_id for case_id, _, _ in CASES]
    unknown = [c for c in selected if c not in known]
    if unknown:
        parser.error("unknown case(s): %s" % ", ".join(unknown))
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for result in pool.map(lambda c: run_case(args, c, known[c]), selected):
            case_id, status, detail, seconds, log = result
            results.append(result)
            print("%-5s %s (%.1f s)%s" % (status, case_id, seconds, ("\n    " + detail.replace("\n", "\n    "))
                                         if detail else ""))
            if args.verbose or status in ("FAIL", "ERROR") or len(selected) == 1:
                for entry in log:
                    print("    " + entry.replace("\n", "\n    "))
            sys.stdout.flush()
    statuses = [r[1] for r in results]
    print("hostile: %d passed, %d failed, %d errors, %d skipped" % (
        statuses.count("PASS"), statuses.count("FAIL"), statuses.count("ERROR"), statuses.count("SKIP")))
    if "FAIL" in statuses or "ERROR" in statuses:
        return 1
    if statuses and all(s == "SKIP" for s in statuses):
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
