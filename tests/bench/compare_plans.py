#!/usr/bin/python3
"""Plans from two rannc-partition binaries, byte for byte: a change that only speeds the planner
up (or only touches the pictures) must leave every plan.json as it was.

A fixed-seed set of requests (sample models and shape-only GPT/BERT configs; devices 1 to 1024, and
GPT-3 175B at a batch of 1536 on 64, 1024 and 4096;
memory, forced stages and microbatches, optimizer, precision, schedule, devices per node) is
planned by OLD_BIN and NEW_BIN with --plan-only, each into its own folder. Per request they must
exit alike, print the same text and, when they write a plan, write the same plan.json bytes; a
refusal must carry the same message. Not a CTest test: run it by hand, e.g.

  tests/bench/compare_plans.py /work/base/build/bin/rannc-partition build/bin/rannc-partition \
      build/samples --requests 300

usage: compare_plans.py OLD_BIN NEW_BIN SAMPLES_DIR [--requests N] [--seed S] [--jobs J] [--timeout S]
SAMPLES_DIR is what the "setup: samples" and "setup: shape-only models" tests make (build/samples).
"""
import argparse
import concurrent.futures
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import plan_bytes  # noqa: E402

SAMPLES = ["mlp", "gpt", "bert", "dlrm", "resnet50", "tv_mobilenet_v3_small", "tv_squeezenet1_1",
           "tv_shufflenet_v2_x0_5", "tv_efficientnet_b0", "tv_regnet_y_400mf", "tv_densenet121"]
SHAPE_ONLY = ["bert-large", "bert-2.5b", "bert-5b", "gpt3-175b"]
SMALL_GPUS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
LARGE_GPUS = [8, 16, 32, 64, 96, 128, 256, 512, 1024]
# Always planned: GPT-3 175B as the benchmarks plan it.
FIXED = [["shape_only/gpt3-175b.onnx", "--gpus", str(g), "--batch", "1536", "--precision", "bf16-mixed"]
         for g in (64, 1024, 4096)]


def maybe(rng, p, choices):
    return rng.choice(choices) if rng.random() < p else None


def requests(count, seed):
    """count argument lists (model path relative to SAMPLES_DIR first), the same for a seed."""
    rng = random.Random(seed)
    out = list(FIXED)
    while len(out) < count:
        shape_only = rng.random() < 0.35
        if shape_only:
            model = f"shape_only/{rng.choice(SHAPE_ONLY)}.onnx"
            gpus = rng.choice(LARGE_GPUS)
            # At least a sample per device: fewer make some searches take minutes.
            batch = rng.choice([b for b in (gpus, 2 * gpus, 256, 512, 1024, 1536, 3072) if b >= gpus])
            mem = maybe(rng, 0.4, ["16G", "32G", "40G", "80G", "141G"])
        else:
            model = f"{rng.choice(SAMPLES)}.onnx"
            gpus = rng.choice(SMALL_GPUS)
            batch = rng.choice([1, 4, 8, 16, 32, 48, 64, 96, 128, 256])
            mem = maybe(rng, 0.7, ["2M", "4M", "8M", "16M", "40M", "64M", "256M", "1G"])
        args = [model, "--gpus", str(gpus), "--batch", str(batch)]
        if mem:
            args += ["--mem", mem]
        per_node = maybe(rng, 0.2, [1, 2, 4, 8])
        if per_node:
            args += ["--gpus-per-node", str(per_node)]
        stages = maybe(rng, 0.2, [1, 2, 3, 4, 8, 16])
        if stages and stages <= gpus:
            args += ["--stages", str(stages)]
        microbatches = maybe(rng, 0.2, [1, 2, 4, 8, 16, 32, 64])
        if microbatches:
            args += ["--microbatches", str(microbatches)]
        for flag, choices in (("--optimizer", ["sgd", "momentum", "adam"]),
                              ("--precision", ["fp32", "bf16-mixed", "fp16-mixed"]),
                              ("--schedule", ["1f1b", "gpipe"])):
            choice = maybe(rng, 0.4, choices)
            if choice:
                args += [flag, choice]
        out.append(args)
    return out[:count]


def run(binary, samples, args, out, timeout):
    command = [binary, os.path.join(samples, args[0]), *args[1:], "--plan-only", "-o", out]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", None
    plan = None
    if result.returncode == 0:
        plan = plan_bytes.read_without_generator(os.path.join(out, "plan.json"), required=False)
    # Paths differ between the two output folders; the rest of the text must not.
    text = (result.stdout + result.stderr).replace(out, "OUT")
    return result.returncode, text, plan


def compare(old, new, samples, args, timeout):
    start = time.perf_counter()
    verdict, why = compare_runs(old, new, samples, args, timeout)
    return verdict, why, time.perf_counter() - start


def compare_runs(old, new, samples, args, timeout):
    with tempfile.TemporaryDirectory() as folder:
        a = run(old, samples, args, os.path.join(folder, "old"), timeout)
        b = run(new, samples, args, os.path.join(folder, "new"), timeout)
    if "timeout" in (a[0], b[0]):
        return f"timed out (old {a[0] == 'timeout'}, new {b[0] == 'timeout'})", ""
    if a[0] != b[0]:
        return "differ", f"exit {a[0]} vs {b[0]}"
    if a[2] != b[2]:
        return "differ", "plan.json differs"
    if a[1] != b[1]:
        return "differ", "output text differs"
    return ("plan" if a[0] == 0 else f"refused (exit {a[0]})"), ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("samples")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run; timed-out requests are counted apart")
    args = parser.parse_args()
    cases = requests(args.requests, args.seed)
    counts, problems, slowest = {}, [], []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(compare, args.old, args.new, args.samples, case, args.timeout) for case in cases]
        for case, future in zip(cases, futures):
            verdict, why, seconds = future.result()
            slowest.append((seconds, " ".join(case)))
            counts[verdict] = counts.get(verdict, 0) + 1
            if verdict == "differ":
                problems.append(f"{' '.join(case)}: {why}")
    plans = counts.get("plan", 0)
    refusals = sum(n for verdict, n in counts.items() if verdict.startswith("refused"))
    differ = counts.get("differ", 0)
    print(f"{len(cases)} requests: {plans} plans byte-identical, {refusals} refusals identical, {differ} differ")
    for verdict, n in sorted(counts.items()):
        print(f"  {verdict}: {n}")
    print("slowest requests (both binaries, s):")
    for seconds, case in sorted(slowest, reverse=True)[:5]:
        print(f"  {seconds:6.1f}  {case}")
    if problems:
        sys.exit("DIFFER:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
