#!/usr/bin/python3
"""What a person asks of a plan beside the plan itself, on the GPT-style sample (8 devices of
40 MiB: a pipeline is needed):

- `--explain` lists the plan and up to 5 layouts that lost, none faster, with their step, bubble
  and memory, and what ruled out the rest (counts that add up to the candidates); the plan is the
  one written without --explain, byte for byte;
- `--layout pp=4,dp=2[,m=8]` writes exactly that layout (4 stages of one replica, 2 pipelines, 8
  microbatches) and compares it with the free plan, which is not slower;
- `--progress` prints the phases on stderr; by default (not a terminal) and with `--quiet`, stderr
  stays empty; the same for `sweep`;
- plan.json records the tool, its version and the command line, which `show` prints.

usage: check_explain_layout.py RANNC SAMPLES_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import plan_bytes

REQUEST = ["--input", "tokens:64x32:int64", "--gpus", "8", "--mem", "40M", "--plan-only"]
PROGRESS_LINE = re.compile(r"^rannc-partition: \[ *\d+\.\d s\] \S")
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def partition(rannc, model, out, *extra):
    command = [rannc, model, *REQUEST, "-o", out, *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAILED: {shlex.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
    return result, command


def check_explain(rannc, model, tmp):
    free, _ = partition(rannc, model, os.path.join(tmp, "free"), "--json")
    explained, _ = partition(rannc, model, os.path.join(tmp, "explained"), "--json", "--explain")
    summary = json.loads(explained.stdout)["explain"]
    plan_step = summary["plan"]["iteration_ms"]
    check(json.loads(free.stdout)["predicted"]["iteration_ms"] == plan_step, "--explain's plan is the free plan")
    runners = summary["runners_up"]
    check(1 <= len(runners) <= 5, f"1 to 5 runners-up, not {len(runners)}")
    check(all(r["iteration_ms"] >= plan_step for r in runners), "no runner-up is faster than the plan")
    check(runners == sorted(runners, key=lambda r: r["iteration_ms"]), "runners-up fastest first")
    check(len({r["layout"] for r in runners} | {summary["plan"]["layout"]}) == len(runners) + 1, "layouts listed once")
    for r in runners:
        check(abs(r["slower_fraction"] - (r["iteration_ms"] / plan_step - 1)) < 1e-4, f"{r['layout']}: slower_fraction")
        check(0 <= r["bubble_fraction"] < 1 and r["peak_mem_bytes"] <= 40 * 2**20, f"{r['layout']}: bubble and memory")
    counts = summary["candidates"]
    check(counts["bounded_out"] + counts["no_fit"] + counts["slower"] + counts["simulated"] == counts["total"],
          f"the candidates' counts add up: {counts}")
    check(counts["no_fit"] > 0 and any("fits in 40.00 MiB" in line for line in summary["ruled_out"]),
          "40 MiB rules out some layouts, and the explanation says so")
    same = [plan_bytes.read_without_generator(os.path.join(tmp, name, "plan.json")) for name in ("free", "explained")]
    check(same[0] == same[1], "--explain changes plan.json")
    text, _ = partition(rannc, model, os.path.join(tmp, "explained_text"), "--explain")
    tail = text.stdout[text.stdout.find("why this plan"):]
    check(re.search(r"\n  plan +pp=\d+ dp=\d+ m=\d+ b=\d+", tail) is not None, f"the plan row: {tail!r}")
    check(len(re.findall(r"\n  lost #\d +pp=.* \+\d+\.\d%", tail)) == len(runners), f"one row per runner-up: {tail!r}")
    check("candidate layouts" in tail, "what ruled out the rest")
    print(f"ok: --explain: plan {summary['plan']['layout']} and {len(runners)} runners-up; {counts}")


def check_layout(rannc, model, tmp):
    out = os.path.join(tmp, "layout")
    result, _ = partition(rannc, model, out, "--json", "--layout", "pp=4,dp=2,m=8")
    with open(os.path.join(out, "plan.json")) as f:
        plan = json.load(f)
    batch = plan["batch"]
    check(len(plan["stages"]) == 4 and batch["pipelines"] == 2 and batch["microbatches"] == 8,
          f"--layout pp=4,dp=2,m=8 wrote {len(plan['stages'])} stages x {batch['pipelines']} pipelines, "
          f"{batch['microbatches']} microbatches")
    check(all(s["replicas_per_pipeline"] == 1 for s in plan["stages"]), "one replica per stage and pipeline")
    layout = json.loads(result.stdout)["layout"]
    check(layout["asked"] == "pp=4,dp=2,m=8" and layout["forced"]["iteration_ms"] == plan["predicted"]["iteration_ms"],
          "the comparison's forced layout is the plan written")
    check(layout["free"]["iteration_ms"] <= layout["forced"]["iteration_ms"], "the free plan is not slower")
    text, _ = partition(rannc, model, out, "--layout", "pp=4,dp=2")
    check("layout pp=4,dp=2 against the free plan" in text.stdout and re.search(r"\n  asked +pp=4 dp=2 ", text.stdout),
          f"the comparison table: {text.stdout[-600:]!r}")
    print(f"ok: --layout: asked {layout['forced']['iteration_ms']:.3f} ms, free {layout['free']['iteration_ms']:.3f} ms")


def check_progress(rannc, model, samples, tmp):
    shown, _ = partition(rannc, model, os.path.join(tmp, "progress"), "--progress")
    lines = shown.stderr.splitlines()
    check(lines and all(PROGRESS_LINE.match(line) for line in lines), f"progress lines: {lines}")
    for phase in ("loaded ", "grouped ", "coarsened ", "costed ", "searched ", "simulated ", "wrote "):
        check(any(phase in line for line in lines), f"no progress line for {phase.strip()}: {lines}")
    for extra in ([], ["--quiet"]):
        quiet, _ = partition(rannc, model, os.path.join(tmp, "quiet"), *extra)
        check(quiet.stderr == "", f"stderr with {extra or 'no flag'} (not a terminal): {quiet.stderr!r}")
    sweep = subprocess.run([rannc, "sweep", model, "--input", "tokens:64x32:int64", "--gpus", "2,8", "--mem", "40M", "--progress"],
                           capture_output=True, text=True, timeout=300)
    check(sweep.returncode == 0 and "planned 8 devices" in sweep.stderr, f"sweep --progress: {sweep.stderr!r}")
    print(f"ok: --progress: {len(lines)} lines; none by default off a terminal or with --quiet")


def check_generator(rannc, model, tmp):
    out = os.path.join(tmp, "generator")
    _, command = partition(rannc, model, out)
    with open(os.path.join(out, "plan.json")) as f:
        generator = json.load(f)["generator"]
    version = subprocess.run([rannc, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    check(generator["tool"] == "rannc-partition" and generator["version"] == version, f"generator: {generator}")
    expected = shlex.join(["rannc-partition", *command[1:]])
    check(generator["command"] == expected, f"command {generator['command']!r}, expected {expected!r}")
    check(shlex.split(generator["command"])[1:] == command[1:], "the command splits back into the arguments")
    shown = subprocess.run([rannc, "show", os.path.join(out, "plan.json")], capture_output=True, text=True, check=True).stdout
    check(f"\ncommand    {expected}\n" in shown, "show prints the command")
    print(f"ok: plan.json records {generator['tool']} {generator['version']} and the command")


def main():
    rannc, samples = sys.argv[1:3]
    model = os.path.join(samples, "gpt.trace.pt")
    with tempfile.TemporaryDirectory() as tmp:
        check_explain(rannc, model, tmp)
        check_layout(rannc, model, tmp)
        check_progress(rannc, model, samples, tmp)
        check_generator(rannc, model, tmp)
    if problems:
        sys.exit("FAILED:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    main()
