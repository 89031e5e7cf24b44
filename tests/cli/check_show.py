#!/usr/bin/python3
"""show, the launch files and the pictures on real plans of the samples: `show` prints every
stage and the prediction (text) and a summary that agrees with plan.json (--json); launch.sh runs
`mpirun -np R` on the plan's ranks from any working directory; job.sbatch asks for the nodes the
ranks use (all #SBATCH lines above the first command, --time/--partition/--account as commented
placeholders) and starts them by srun --mpi=pmix or, on request, mpirun; schedule.svg is XML with one row per rank; stages.dot has one node per stage; and the
same inputs give byte-identical files.

usage: check_show.py BINARY SAMPLES_DIR
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import plan_schema

COMPANIONS = ("launch.sh", "job.sbatch", "schedule.svg", "stages.dot")
SVG = "{http://www.w3.org/2000/svg}"


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    check(result.returncode == 0, f"{' '.join(command)}: exit {result.returncode}: {result.stderr}")
    return result.stdout


def partition(binary, model, out, *args):
    run([binary, model, "-o", out, *args])
    with open(os.path.join(out, "plan.json")) as f:
        plan = json.load(f)
    plan_schema.check(plan, os.path.join(out, "plan.json"))
    return plan


def read(out, name):
    with open(os.path.join(out, name), "rb") as f:
        return f.read()


def check_show(binary, out, plan):
    path = os.path.join(out, "plan.json")
    text = run([binary, "show", path])
    rows = [line for line in text.splitlines() if re.match(r"\s*\d+\s", line)]
    check(len(rows) == len(plan["stages"]), f"show prints {len(rows)} stage rows, plan has {len(plan['stages'])}")
    for row, stage in zip(rows, plan["stages"]):
        check(row.split()[0] == str(stage["id"]), f"stage row order: {row}")
        check(re.search(r"node \d+: \d", row), f"ranks per node in {row}")
        check("%)" in row, f"memory percentage in {row}")
    for word in ("plan", "model", "cluster", "batch", "predicted", "peak", "unused"):
        check(re.search(rf"^{word}\b", text, re.M), f"show text has no '{word}' line")
    check(re.search(r"^predicted .*samples/s.*bubble.*efficiency", text, re.M), "show text: predicted throughput")

    summary = json.loads(run([binary, "show", path, "--json"]))
    check(len(summary["stages"]) == len(plan["stages"]), "show --json stages")
    check(summary["ranks"] == len(plan["ranks"]), "show --json ranks")
    check(summary["predicted"]["iteration_ms"] == plan["predicted"]["iteration_ms"], "show --json step time")
    check(summary["batch"]["microbatches"] == plan["batch"]["microbatches"], "show --json microbatches")
    for option in ("schedule", "optimizer", "precision"):
        check(summary[option] == plan[option], f"show --json {option}: {summary[option]!r}, plan.json {plan[option]!r}")
    for shown, stage in zip(summary["stages"], plan["stages"]):
        ranks = sorted(r for node in shown["nodes"] for r in node["ranks"])
        check(ranks == sorted(stage["ranks"]), f"stage {stage['id']} ranks by node")
        check(all(r // plan["cluster"]["gpus_per_node"] == node["node"] for node in shown["nodes"] for r in node["ranks"]),
              "ranks grouped by their node")
        check(abs(shown["mem_fraction"] * plan["cluster"]["mem_bytes"] - stage["predicted"]["mem_bytes"]) < 1e-3 * plan["cluster"]["mem_bytes"],
              "memory fraction")
        for flag in ("recompute", "offload", "state_sharding"):
            check(shown[flag] == stage.get(flag, "none"), f"stage {stage['id']} {flag}: show --json {shown[flag]!r}")
    # The text table's columns for them (left-aligned under their headers): no or what is
    # recomputed (full, selective), yes or no, and for sharded state no or the kind.
    header = next(line for line in text.splitlines() if line.lstrip().startswith("stage "))
    for row, stage in zip(rows, plan["stages"]):
        def cell(name):
            return row[header.index(" " + name + " ") + 1:].split()[0]
        recompute = {False: "no", True: "full"}.get(stage["recompute"], stage["recompute"])
        check(cell("recompute") == recompute, f"recompute cell in {row}")
        check(cell("offload") == ("yes" if stage["offload"] else "no"), f"offload cell in {row}")
        sharding = stage.get("state_sharding", "none")
        check(cell("sharded") == ("no" if sharding == "none" else sharding), f"sharded cell in {row}")


def check_launch(binary, out, plan, tmp):
    ranks = len(plan["ranks"])
    script = os.path.join(out, "launch.sh")
    text = read(out, "launch.sh").decode()
    check(os.stat(script).st_mode & stat.S_IXUSR, "launch.sh is executable")
    check(text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text, "launch.sh header")
    check(re.search(rf"-np {ranks} ", text), f"launch.sh runs -np {ranks}")
    run(["bash", "-n", script])
    # Run it from another folder with a stand-in mpirun that prints what it was given.
    stub = os.path.join(tmp, "fake-mpirun")
    with open(stub, "w") as f:
        f.write("#!/bin/sh\necho \"$@\"\n")
    os.chmod(stub, 0o755)
    args = run(["bash", script, "--steps", "2"], cwd=tmp, env={**os.environ, "MPIRUN": stub}).split()
    check(len(args) == 6 and args[:2] == ["-np", str(ranks)] and args[4:] == ["--steps", "2"], f"launch.sh ran: {args}")
    # The rannc-run built beside the rannc-partition that wrote the plan.
    beside = os.path.join(os.path.dirname(os.path.realpath(binary)), "rannc-run")
    check(os.path.realpath(args[2]) == beside, f"launch.sh runs {args[2]}, not {beside}")
    check(os.path.realpath(args[3]) == os.path.realpath(os.path.join(out, "plan.json")), f"launch.sh plan path {args[3]}")

    job = read(out, "job.sbatch").decode()
    run(["bash", "-n", os.path.join(out, "job.sbatch")])
    per_node = plan["cluster"]["gpus_per_node"]
    check(f"#SBATCH --nodes={-(-ranks // per_node)}\n" in job, "job.sbatch nodes")
    check(f"#SBATCH --ntasks={ranks}\n" in job, "job.sbatch tasks")
    check(f"#SBATCH --ntasks-per-node={min(ranks, per_node)}\n" in job, "job.sbatch tasks per node")
    check(f"#SBATCH --gpus-per-node={min(ranks, per_node)}\n" in job, "job.sbatch GPUs per node")
    # sbatch reads #SBATCH lines only above the first command.
    first_command = next(i for i, line in enumerate(job.splitlines()) if line.strip() and not line.startswith("#"))
    check(all(i < first_command for i, line in enumerate(job.splitlines()) if line.startswith("#SBATCH")),
          "job.sbatch has an #SBATCH line below a command, where sbatch ignores it")
    for placeholder in ("time=HH:MM:SS", "partition=PARTITION", "account=ACCOUNT"):
        check(f"\n##SBATCH --{placeholder}\n" in job, f"job.sbatch placeholder --{placeholder}, commented out")
    check(re.search(rf"^exec srun --mpi=pmix --ntasks={ranks} ", job, re.M), "job.sbatch srun line")
    check(re.search(rf"^  exec mpirun -np {ranks} ", job, re.M), "job.sbatch mpirun line")


def check_pictures(out, plan):
    root = ET.fromstring(read(out, "schedule.svg"))
    check(root.tag == SVG + "svg", "schedule.svg is an SVG document")
    rows = [g for g in root.iter(SVG + "g") if g.get("class") == "rank"]
    check(sorted(int(g.get("data-rank")) for g in rows) == list(range(len(plan["ranks"]))),
          f"schedule.svg has {len(rows)} rank rows, plan has {len(plan['ranks'])} ranks")
    for g in rows:
        stage = plan["ranks"][int(g.get("data-rank"))]["stage"]
        check(g.get("data-stage") == str(stage), "row shows the rank's stage")
    kinds = {rect.get("data-kind") for rect in root.iter(SVG + "rect") if rect.get("class") == "task"}
    check({"forward", "backward"} <= kinds, f"compute boxes in schedule.svg: {kinds}")
    if len(plan["stages"]) > 1 and any(s["predicted"].get("p2p_ms", 0) > 0 for s in plan["stages"]):
        check(kinds & {"activation transfer", "gradient transfer"}, "transfer boxes in schedule.svg")

    dot = read(out, "stages.dot").decode()
    nodes = re.findall(r"^  stage(\d+) \[label=", dot, re.M)
    check(sorted(map(int, nodes)) == list(range(len(plan["stages"]))), f"stages.dot nodes {nodes}")
    check(dot.startswith("digraph plan {") and dot.rstrip().endswith("}"), "stages.dot is a digraph")
    if shutil.which("dot"):
        run(["dot", "-Tsvg", "-o", os.devnull, os.path.join(out, "stages.dot")])


def main():
    binary, samples = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("gpt.onnx", ["--gpus", "8", "--batch", "64", "--mem", "40M"]),
                 ("gpt.onnx", ["--gpus", "16", "--gpus-per-node", "4", "--batch", "64", "--mem", "40M"]),
                 ("mlp.onnx", ["--gpus", "8", "--batch", "6"]),  # one rank, seven devices unused
                 # Sharded state on the replicated last stage above; here two stages offloaded.
                 ("gpt.onnx", ["--gpus", "8", "--batch", "64", "--mem", "20M", "--optimizer", "adam"])]
        for index, (model, args) in enumerate(cases):
            out = os.path.join(tmp, f"out{index}")
            plan = partition(binary, os.path.join(samples, model), out, *args)
            check_show(binary, out, plan)
            check_launch(binary, out, plan, tmp)
            check_pictures(out, plan)
            again = os.path.join(tmp, f"again{index}")
            partition(binary, os.path.join(samples, model), again, *args)
            for name in COMPANIONS:
                check(read(out, name) == read(again, name), f"{name} is not byte-identical across runs")
            print(f"ok: {model} {' '.join(args)}: {len(plan['stages'])} stages, {len(plan['ranks'])} ranks")


if __name__ == "__main__":
    main()
