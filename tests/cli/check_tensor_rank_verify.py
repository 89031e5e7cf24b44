"""`verify` chains the tensor ranks' stage files too: partition a TorchScript model with --layout
pp=P,dp=1,tp=T and check that partition's own check and `verify` both chained the files of T
tensor ranks, and that verify compared every gradient joined from the ranks with the model's and
every replicated gradient and unsplit output of ranks 1.. with rank 0's, all within 1e-5.

With --tamper, a slice of a split weight in one rank's file is then changed (and the plan's
SHA-256 of that file updated, so that verify runs it): verify must fail (exit 1) on the rank
files while the whole stage files still match.

usage: check_tensor_rank_verify.py --partition BIN --ops-library PATH --model PATH --out DIR
           --tensor-parallel T [--stages P] [--tamper] -- PARTITION_ARGS...
"""
import argparse
import hashlib
import json
import os
import re
import shutil

import torch

import plan_schema
from plan_runs import fail, run

TOLERANCE = 1e-5


def partition(args):
    """The plan, and partition's own check of the files it wrote, which must have chained the rank files."""
    shutil.rmtree(args.out, ignore_errors=True)
    result = run([args.partition, args.model, *args.extra, "--device", "cpu",
                  "--gpus", str(args.stages * args.tensor_parallel),
                  "--layout", f"pp={args.stages},dp=1,tp={args.tensor_parallel}", "-o", args.out, "--json"])
    check = json.loads(result.stdout)["check"]
    path = os.path.join(args.out, "plan.json")
    with open(path) as f:
        plan = json.load(f)
    plan_schema.check(plan, path)
    if not all(stage["tensor_parallel"].get("files") for stage in plan["stages"]):
        fail(f"a stage without rank files: {path}")
    ranks = check.get("tensor_ranks", {})
    if not check.get("compared") or not ranks.get("chained") or ranks.get("degree") != args.tensor_parallel:
        fail(f"partition's check did not chain the rank files: {json.dumps(check)}")
    print(f"partition's check: the files of {ranks['degree']} tensor ranks within {worst_of(ranks):.3g}")
    return plan


def worst_of(ranks):
    return max(ranks[k].get("max_rel", 0) for k in ("outputs", "gradients", "across_ranks"))


def split_logits(stage):
    """The model output a vocabulary head leaves split: the stage's first, where it splits the head."""
    heads = [r for r in stage["tensor_parallel"]["regions"] if r.get("kind") == "vocabulary_head"]
    firsts = [o["name"] for o in stage["outputs"] if o.get("model_output")][:1]
    return set(firsts) if heads else set()


def expected_across_ranks(plan, degree):
    """What each rank computes whole, compared on ranks 1.. with rank 0: replicated gradients per stage, unsplit outputs."""
    replicated = 0
    outputs = 0
    for stage in plan["stages"]:
        split = {w["name"] for w in stage["tensor_parallel"]["weights"]}
        replicated += sum(1 for p in stage["params"] if p["name"] not in split)
        outputs += sum(1 for o in stage["outputs"] if o.get("model_output") and o["name"] not in split_logits(stage))
    return (replicated + outputs) * (degree - 1)


def verify_passes(args, plan):
    plan_path = os.path.join(args.out, "plan.json")
    report = json.loads(run([args.partition, "verify", plan_path, "--json"]).stdout)
    ranks = report.get("tensor_ranks", {})
    if not report["passed"] or report["problems"] or not ranks.get("chained"):
        fail(f"verify: {json.dumps(report)}")
    distinct = len({p["name"] for s in plan["stages"] for p in s["params"]})
    across = expected_across_ranks(plan, args.tensor_parallel)
    counts = (ranks["outputs"]["compared"], ranks["gradients"]["compared"], ranks["across_ranks"]["compared"])
    if ranks["degree"] != args.tensor_parallel or counts != (report["outputs"]["compared"], distinct, across):
        fail(f"the rank files compared {counts}, expected ({report['outputs']['compared']}, {distinct}, {across}): "
             f"{json.dumps(ranks)}")
    worst = worst_of(ranks)
    if worst > TOLERANCE:
        fail(f"the rank files differ by {worst:.3g}: {json.dumps(ranks)}")
    text = run([args.partition, "verify", plan_path]).stdout
    line = f"tensor     rank files of {args.tensor_parallel} tensor ranks chained too: "
    if line not in text:
        fail(f"verify's text has no line {line!r}:\n{text}")
    print(f"verify: the files of {args.tensor_parallel} tensor ranks chained, {counts[1]} gradients joined, "
          f"{counts[2]} compared across ranks, max rel {worst:.3g}")


def tampered_weight(plan):
    """A split weight that one stage alone holds: its stage and its plan entry."""
    for stage in plan["stages"]:
        params = {p["name"]: p for p in stage["params"]}
        for weight in stage["tensor_parallel"]["weights"]:
            param = params.get(weight["name"])
            if param and not param.get("shared_with"):
                return stage, param
    fail("no split weight held by one stage alone to change")


def tamper_and_expect_failure(args, plan):
    torch.ops.load_library(args.ops_library)
    stage, param = tampered_weight(plan)
    rank = args.tensor_parallel - 1
    entry = stage["tensor_parallel"]["files"][rank]
    path = os.path.join(args.out, entry["file"])
    module = torch.jit.load(path)
    with torch.no_grad():
        getattr(module, param["stage_name"]).add_(0.01)
    module.save(path)
    plan_path = os.path.join(args.out, "plan.json")
    result = run([args.partition, "verify", plan_path], expect=2)
    if "does not match" not in result.stderr:
        fail(f"verify of a changed rank file did not say it does not match the plan:\n{result.stderr}")
    with open(path, "rb") as f:
        plan["stages"][stage["id"]]["tensor_parallel"]["files"][rank]["sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(plan_path, "w") as f:
        json.dump(plan, f, indent=1)
    text = run([args.partition, "verify", plan_path], expect=1).stdout
    tensor_line = next((line for line in text.splitlines() if line.startswith("tensor ")), "")
    gradients = re.search(r"^gradients .* max rel (\S+)", text, re.M)
    if "FAIL: max relative difference" not in text or "(rank files)" not in tensor_line:
        fail(f"verify of a changed rank file did not fail on the rank files:\n{text}")
    if not gradients or float(gradients.group(1)) > TOLERANCE:
        fail(f"the whole stage files, unchanged, no longer match:\n{text}")
    print(f"tampered: {entry['file']}'s slice of {param['name']} off by 0.01 fails verify: {tensor_line.strip()}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--partition", required=True)
    parser.add_argument("--ops-library", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tensor-parallel", type=int, required=True)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--tamper", action="store_true")
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    plan = partition(args)
    verify_passes(args, plan)
    if args.tamper:
        tamper_and_expect_failure(args, plan)
    print("ok")


if __name__ == "__main__":
    main()
