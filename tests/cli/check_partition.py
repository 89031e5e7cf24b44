#!/usr/bin/python3
"""The partition verb end to end on the GPT-style sample: plan.json follows docs/contract.md and is
consistent with itself and the model, every stage fits its device, every device is used or the
plan says why, forced stage/microbatch counts and GPipe are honoured, the same inputs give
byte-identical plans, and --attention fused and --elementwise fused are recorded (plan.json, the
summary, show) while the defaults name neither, and keep fewer activations on every stage of one
layout.

usage: check_partition.py BINARY SAMPLES_DIR
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

import plan_bytes
import plan_schema


def partition(binary, model, out, *args):
    command = [binary, model, "-o", out, "--json", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)}: exit {result.returncode}: {result.stderr}")
    summary = json.loads(result.stdout)
    with open(os.path.join(out, "plan.json"), "rb") as f:
        raw = f.read()
    plan = json.loads(raw)
    plan_schema.check(plan, os.path.join(out, "plan.json"))
    if plan["generator"]["command"] != shlex.join(["rannc-partition", *command[1:]]):
        sys.exit(f"FAILED: plan.json's command {plan['generator']['command']!r} is not the command run")
    return summary, plan, plan_bytes.without_generator(raw)


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def check_plan(plan, expected_params, gpus, limit=None):
    check(plan["format"] == "rannc-plan" and plan["version"] == 1, "format and version")
    check(plan["model"]["params"] == expected_params, f"params {plan['model']['params']} != {expected_params}")
    check(len(plan["model"]["sha256"]) == 64, "model sha256")
    cluster, batch, stages = plan["cluster"], plan["batch"], plan["stages"]
    check(cluster["gpus"] == gpus, "cluster gpus")
    limit = limit or cluster["mem_bytes"]
    check(batch["global"] == batch["pipelines"] * batch["microbatches"] * batch["microbatch_size"], "batch arithmetic")
    ranks = {r["rank"]: r for r in plan["ranks"]}
    unused = plan.get("unused_devices", {}).get("count", 0)
    check(len(ranks) + unused == gpus, f"{len(ranks)} ranks + {unused} unused != {gpus}")
    check(unused == 0 or plan["unused_devices"]["reason"], "unused devices come with a reason")
    seen_params = {}
    for index, stage in enumerate(stages):
        check(stage["id"] == index and stage["file"] == f"stage_{index}.pt", "stage ids and files")
        degree = stage.get("tensor_parallel", {}).get("degree", 1)
        check(stage["replicas"] * degree == len(stage["ranks"]), "replicas x tensor degree = ranks of the stage")
        for rank in stage["ranks"]:
            check(ranks[rank]["stage"] == index, f"rank {rank} placed on stage {index}")
            check(ranks[rank]["node"] == rank // cluster["gpus_per_node"], "node of a rank")
        check(stage["predicted"]["mem_bytes"] <= limit, f"stage {index} memory over the limit")
        for tensor in stage["inputs"]:
            source = tensor["source"]
            if "stage" in source:
                check(source["stage"] < index, "inputs come from earlier stages")
                sent = stages[source["stage"]]["outputs"][source["output"]]
                check(sent["name"] == tensor["name"] and sent["dtype"] == tensor["dtype"], "input matches the output sent")
            else:
                check("model_input" in source, "input source")
        for param in stage["params"]:
            seen_params[param["name"]] = param["numel"]
            check(param["stage_name"].startswith("p"), "stage_name")
    check(sum(seen_params.values()) == expected_params, "every parameter lives in some stage")
    check(any(o.get("model_output") for o in stages[-1]["outputs"]), "the last stage returns the model output")
    predicted = plan["predicted"]
    check(predicted["iteration_ms"] >= predicted["lower_bound_ms"] > 0, "step above its lower bound")
    # The physical bound is below the cost model's (no op beats the device's peak), and the
    # share of peak is the bound over the step.
    check(0 < predicted["flop_bound_ms"] <= predicted["lower_bound_ms"], "FLOP bound at or below the lower bound")
    check(close(predicted["peak_fraction"], predicted["flop_bound_ms"] / predicted["iteration_ms"]),
          "peak_fraction = flop_bound_ms / iteration_ms")
    check(0 <= predicted["bubble_fraction"] < 1, "bubble fraction")
    check(predicted["peak_mem_bytes"] == max(s["predicted"]["mem_bytes"] for s in stages), "peak memory")


def check_model_flops(binary, model, plan, devices):
    """The model FLOP/s behind the physical bound: a step's forward and backward, for a GPT about
    3 times the forward that `inspect` counts at the same batch (backward: 2 per weight matmul)."""
    result = subprocess.run([binary, "inspect", model, "--batch", str(plan["batch"]["global"]), "--json"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAILED: inspect: {result.stderr}")
    forward = json.loads(result.stdout)["flops_fwd"]
    predicted = plan["predicted"]
    step_flops = predicted["model_tflops_per_device"] * 1e12 * devices * predicted["iteration_ms"] / 1e3
    check(2 * forward <= step_flops <= 3.2 * forward,
          f"model FLOPs per step {step_flops:.4g} are not 2-3.2x the forward's {forward:.4g}")


def main():
    binary, samples = sys.argv[1:3]
    model = os.path.join(samples, "gpt.onnx")
    with open(os.path.join(samples, "manifest.json")) as f:
        params = json.load(f)["models"]["gpt"]["params"]
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        args = ["--gpus", "8", "--batch", "64", "--mem", "40M"]
        summary, plan, raw = partition(binary, model, a, *args)
        check_plan(plan, params, 8)
        check(len(summary["stages"]) > 1, "40M per device forces a pipeline")
        check_model_flops(binary, model, plan, 8)
        check(any(p.get("shared_with") for s in plan["stages"] for p in s["params"]), "the tied weight is shared")
        _, _, raw_again = partition(binary, model, b, *args)
        check(raw == raw_again, "plan.json is not byte-identical across runs")

        # --attention fused is written into plan.json, the summary and show; unfused, the default, nowhere.
        check("attention" not in plan and "attention" not in summary, "an unfused plan names no attention")
        check("elementwise" not in plan and "elementwise" not in summary, "an unfused plan names no elementwise")
        fused_summary, fused, _ = partition(binary, model, b, *args, "--attention", "fused", "--elementwise", "fused")
        check_plan(fused, params, 8)
        for kind in ("attention", "elementwise"):
            check(fused[kind] == "fused" and fused_summary[kind] == "fused", f"--{kind} fused not written")
        shown = subprocess.run([binary, "show", os.path.join(b, "plan.json")], capture_output=True, text=True, check=True).stdout
        check(", fused attention, fused elementwise\n" in shown, f"show does not say fused kernels: {shown[:600]!r}")
        # The same layout keeps fewer activations on every stage when the kernels are fused.
        layout = ["--gpus", "8", "--batch", "64", "--layout", "pp=2,dp=4"]
        _, op_by_op, _ = partition(binary, model, a, *layout)
        for flag in ("--attention", "--elementwise"):
            _, fewer, _ = partition(binary, model, b, *layout, flag, "fused")
            for s_op, s_fused in zip(op_by_op["stages"], fewer["stages"]):
                kept, kept_fused = (s["predicted"]["memory"]["activations"] for s in (s_op, s_fused))
                check(kept_fused < kept, f"{flag} fused: stage {s_op['id']} keeps {kept_fused} bytes, op by op {kept}")

        _, forced, _ = partition(binary, model, a, "--gpus", "4", "--batch", "64", "--stages", "3", "--microbatches", "4")
        check_plan(forced, params, 4)
        check(len(forced["stages"]) == 3 and forced["batch"]["microbatches"] == 4, "forced stages and microbatches")

        _, gpipe, _ = partition(binary, model, a, "--gpus", "8", "--batch", "64", "--mem", "60M", "--schedule", "gpipe")
        check_plan(gpipe, params, 8)
        check(gpipe["schedule"] == "gpipe", "gpipe schedule")

        _, multi_node, _ = partition(binary, model, a, "--gpus", "16", "--gpus-per-node", "4", "--batch", "64")
        check_plan(multi_node, params, 16)

        text = subprocess.run([binary, model, "-o", a, *args], capture_output=True, text=True, check=True).stdout
        check("stage" in text and "predicted" in text and "efficiency" in text, "the table")
    print(f"ok: {len(summary['stages'])} stages x {summary['batch']['pipelines']} pipelines, plans consistent and byte-identical")


if __name__ == "__main__":
    main()
