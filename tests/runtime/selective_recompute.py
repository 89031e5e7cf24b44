"""check_training.py --expect-selective: rannc-run recomputes the attention cores of a selective plan,
and nothing else.

check_files: each stage file (and each tensor rank's) calls its attention cores through
torch.ops.rannc.recompute_core (torch_side/recompute_cores.h), every file of a stage as many, no
stage's forward computes a softmax itself (the planner starts and ends no selective stage inside a
core, which its file could not run again), and rannc-run says nothing about running selective
stages as full recomputation.

compare_variants: the same plan, data and files trained again with every stage's recompute set to
false (every activation kept) and to true (the whole forward run again in backward). The three runs'
losses agree within --tolerance (a dropout mask drawn inside a core is drawn again alike). Each rank's
peak tensor memory in the three runs is printed beside the plan's prediction; with
--expect-core-memory (a model whose cores' activations stand out from the ranks' jitter of a few
10 KiB: a long sequence), the selective run's peak on every rank whose stage has attention cores
must lie below the no-recompute run's, and above the full run's where the stage keeps 3 or more
microbatches (check_memory): the cores' activations are freed, the rest is kept.
"""
import json
import os
import shutil
import zipfile

CORE_CALL = "ops.rannc.recompute_core("


def fail(message):
    print("FAIL:", message, flush=True)
    raise SystemExit(1)


def stage_files(stage):
    return [stage["file"]] + [f["file"] for f in stage.get("tensor_parallel", {}).get("files", [])]


def saved_code(path):
    """The TorchScript source a saved module holds (its methods, forward and core_<k>)."""
    with zipfile.ZipFile(path) as archive:
        return "".join(archive.read(name).decode() for name in archive.namelist() if name.endswith(".py"))


def forward_code(code):
    """The forward method of a saved module's source, without its other methods."""
    start = code.index("def forward(")
    end = code.find("\n  def ", start)
    return code[start:] if end < 0 else code[start:end]


def check_files(plan, plan_dir, output, dropout):
    cores = {}
    for stage in plan["stages"]:
        codes = [saved_code(os.path.join(plan_dir, name)) for name in stage_files(stage)]
        if any("torch.softmax(" in forward_code(code) for code in codes):
            fail(f"stage {stage['id']}: its forward computes a softmax outside the cores it recomputes "
                 "(a stage boundary inside an attention core?)")
        counts = [code.count(CORE_CALL) for code in codes]
        if len(set(counts)) != 1:
            fail(f"stage {stage['id']}: its files {stage_files(stage)} call {counts} attention cores through "
                 "rannc::recompute_core; expected as many in each")
        if dropout and counts[0] and not all("dropout" in code.split("def core_0", 1)[-1] for code in codes):
            fail(f"stage {stage['id']}: its first attention core draws no dropout")
        cores[stage["id"]] = counts[0]
    if not any(cores.values()):
        fail("no stage file calls an attention core through rannc::recompute_core")
    if "selective recomputation" in output:
        fail(f"rannc-run still says something of selective recomputation:\n{output}")
    print("attention cores recomputed per stage:", cores)
    return cores


def variant(plan_dir, out_dir, recompute):
    """A copy of the plan with every stage's recompute set; returns its plan.json."""
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(plan_dir, out_dir)
    path = os.path.join(out_dir, "plan.json")
    with open(path) as f:
        plan = json.load(f)
    for stage in plan["stages"]:
        stage["recompute"] = recompute
    with open(path, "w") as f:
        json.dump(plan, f, indent=1)
    return path


def peaks(report):
    return {entry["rank"]: entry["peak_mem_bytes"] for entry in report["ranks"]}


def compare_variants(args, plan, plan_dir, data_dir, report, train, cores):
    """Returns the losses of each run by its recompute: "selective", "none" and "full"."""
    losses = {"selective": [float(s["loss"]) for s in report["steps"]]}
    memory = {"selective": peaks(report)}
    for name, recompute in (("none", False), ("full", True)):
        out = os.path.join(args.out, "recompute_" + name)
        _, _, variant_report = train(args, variant(plan_dir, out, recompute), data_dir,
                                     os.path.join(out, "report.json"), os.path.join(out, "log.jsonl"))
        losses[name] = [float(s["loss"]) for s in variant_report["steps"]]
        memory[name] = peaks(variant_report)
    print(f"{'step':>4} | {'selective':>12} | {'none':>12} | {'full':>12}")
    for step in range(args.steps):
        print(f"{step:>4} | {losses['selective'][step]:>12.6f} | {losses['none'][step]:>12.6f} | "
              f"{losses['full'][step]:>12.6f}")
        for name in ("none", "full"):
            want = losses[name][step]
            if not abs(losses["selective"][step] - want) <= args.tolerance * max(abs(want), 1e-12):
                fail(f"step {step}: the selective run's loss differs from the {name} run's beyond the tolerance")
    check_memory(plan, memory, cores, args.expect_core_memory)
    return losses


def in_flight(plan, stage):
    """The microbatches the stage keeps at once: 1F1B's stages after it plus one, GPipe's all."""
    microbatches = plan["batch"]["microbatches"]
    if plan["schedule"] == "gpipe":
        return microbatches
    return min(len(plan["stages"]) - stage, microbatches)


def check_memory(plan, memory, cores, strict):
    """Prints each rank's peak of the three runs beside the plan's prediction; with `strict`, fails
    unless the selective run's peak is below the no-recompute run's on every rank whose stage has
    cores, and above the full run's where the stage keeps 3 microbatches or more. (With one, full
    recomputation holds that microbatch's every activation again in backward, as much as none; with
    two, what selective keeps beyond it is about one microbatch's activations less its cores, within
    the ranks' jitter on a small model.)"""
    predicted = {stage["id"]: stage["predicted"]["mem_bytes"] for stage in plan["stages"]}
    print(f"{'rank':>4} | {'stage':>5} | {'predicted':>11} | {'full':>11} | {'selective':>11} | {'none':>11}  (peak bytes)")
    bad = []
    for rank, selective in sorted(memory["selective"].items()):
        stage = plan["ranks"][rank]["stage"]
        full, none = memory["full"][rank], memory["none"][rank]
        print(f"{rank:>4} | {stage:>5} | {int(predicted[stage]):>11} | {full:>11} | {selective:>11} | {none:>11}")
        if cores[stage] and not (selective < none and (full < selective or in_flight(plan, stage) < 3)):
            bad.append(rank)
    if strict and bad:
        fail(f"ranks {bad}: the selective run's peak memory is not between the full and no-recompute runs'")
