#!/usr/bin/python3
"""Deterministic mutation fuzzer of every input rannc-partition and rannc-run read.

usage: fuzz_inputs.py --rannc BIN [--run BIN] --work DIR --seed S --cases N [--jobs J] [--timeout T]
                      [--seeds DIR] [--only KIND,...]

Seeds (made by make_seeds.py into --seeds, default WORK/seeds, unless already there): a plan of
a tiny MLP with its stage files, a cluster JSON, a profile DB, two small ONNX models and a .pt.
Case i of seed S mutates one of them with random.Random("S:i"), so a case is the same whatever
--cases or --jobs are, and runs the commands that read it under a time limit:

  plan        show (+ --json), verify (1 in 3), mpirun -np 1 rannc-run (1 in 5, 1-rank plans)
  stage       a stage file of a plan mutated as a .pt zip: verify, mpirun -np 1 rannc-run
  cluster     inspect --cluster, partition --cluster --plan-only
  profile_db  inspect --profile-db, partition --profile-db --plan-only, profile (1 in 4)
  onnx        inspect, partition --plan-only (1 in 2), partition with stage files (1 in 6)
  pt          inspect --input, partition --plan-only (1 in 4)
  pt2         a torch.export archive (PyTorch 2.6's layout or 2.9's PT2 archive) with its program
              JSON, its weights config, an entry or its bytes mutated: inspect, partition
              --plan-only (1 in 2), partition with stage files (1 in 4; the weights are read)

A command keeps the contract when it exits 0 (and any plan.json it wrote holds finite numbers
and no leftover *.tmp files), or exits 1 or 2 with exactly one line on stderr; a signal, exit
>= 128, a timeout, more lines, `terminate called`/`what():`/a traceback are failures. Each failing
case goes to WORK/failures/CASE/ with its input, command.sh and result.txt; WORK/summary.json
counts the failure classes. Exit status 1 when any case failed.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fuzz_common  # noqa: E402
import mutators  # noqa: E402

X_ARG = "x:4x8:float32"
KINDS = [("plan", 26), ("stage", 6), ("cluster", 16), ("profile_db", 12), ("onnx", 26), ("pt", 14), ("pt2", 14)]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rannc", required=True)
    parser.add_argument("--run", help="rannc-run binary (plans are also run with mpirun -np 1)")
    parser.add_argument("--work", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--seeds", help="seed folder (default WORK/seeds, made when missing)")
    parser.add_argument("--only", default="", help="comma-separated kinds to fuzz (%s)" %
                        ",".join(k for k, _ in KINDS))
    parser.add_argument("--first", type=int, default=0, help="index of the first case (to replay one)")
    return parser.parse_args()


def ensure_seeds(args):
    seeds = os.path.abspath(args.seeds or os.path.join(args.work, "seeds"))
    import make_seeds
    # Seeds of a build before the mixed-cluster ones (plan4) are written again.
    if not os.path.exists(os.path.join(seeds, "plan4", "plan.json")):
        make_seeds.write_all(os.path.abspath(args.rannc), seeds)
    elif not os.path.exists(os.path.join(seeds, "pt2", "v29.pt2")):  # seeds of a build before the .pt2 ones
        make_seeds.write_pt2(seeds)
    if not os.path.exists(os.path.join(seeds, "plan5", "plan.json")):  # before the context-parallel one
        make_seeds.write_context_plan(os.path.abspath(args.rannc), seeds)
    return seeds


def program_json_invalid(data):
    """A .pt2 program that is no JSON as Python's json reads it: torch.export writes with Python's
    json, whose NaN, Infinity and -Infinity (a masked_fill(mask, -inf)) the frontend reads too."""
    try:
        json.loads(data.decode("utf-8"))
    except RecursionError:
        return False
    except (ValueError, UnicodeDecodeError):
        return True
    return False


def mutate_pt2(rng, case, seeds):
    """A .pt2 seed with one part mutated; returns the archive's bytes. Only a program that is no
    JSON must be refused by every command: planning reads no weight, so a damaged weight or
    weights config must be refused by stage writing only (and may be by nothing else)."""
    seed_name = rng.choice(["tiny_attention.pt2", "v29.pt2"])
    data = read(os.path.join(seeds, "pt2", seed_name))
    entries = mutators.read_zip(data)
    names = [n for n, _ in entries]
    program = "v29/models/model.json" if seed_name == "v29.pt2" else "serialized_exported_program.json"
    roll = rng.random()
    if roll < 0.5:
        i = names.index(program)
        content, what = mutators.mutate_json(rng, entries[i][1])
        case.invalid = program_json_invalid(content)
        entries[i] = (program, content)
    elif roll < 0.7 and seed_name == "v29.pt2":
        i = names.index("v29/data/weights/model_weights_config.json")
        content, what = mutators.mutate_json(rng, entries[i][1])
        entries[i] = (entries[i][0], content)
        what = "weights config: " + what
    elif roll < 0.85:
        i = rng.randrange(len(entries))
        name, content = entries[i]
        step = rng.random()
        if step < 0.3:
            del entries[i]
            what = "%s removed" % name
        elif step < 0.5:
            entries[i] = (name, content[:rng.choice([0, 1, len(content) // 2, max(len(content) - 1, 0)])])
            what = "%s truncated to %d of %d bytes" % (name, len(entries[i][1]), len(content))
        elif step < 0.7:
            entries.append(entries[i])
            what = "%s duplicated" % name
        else:
            content, what = mutators.mutate_bytes(rng, content)
            entries[i] = (name, content)
            what = "%s: %s" % (name, what)
        case.invalid = what.startswith(program) and program_json_invalid(dict(entries).get(program, b""))
    else:
        out, what = mutators.mutate_bytes(rng, data)
        return out, "%s: archive bytes: %s" % (seed_name, what)
    return mutators.write_zip(entries), "%s: %s" % (seed_name, what)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


class Case:
    def __init__(self, index, kind, folder):
        self.index = index
        self.kind = kind
        self.folder = folder
        self.what = ""
        self.invalid = False
        self.commands = []  # (label, argv, options)


def choose_kind(rng, kinds):
    total = sum(w for _, w in kinds)
    roll = rng.uniform(0, total)
    for kind, weight in kinds:
        roll -= weight
        if roll <= 0:
            return kind
    return kinds[-1][0]


def mutate_json_seed(rng, case, seeds, name):
    """Writes the seed NAME into the case folder, mutated as JSON (or as bytes, one time in 7 or
    so); returns its path."""
    path = os.path.join(case.folder, name)
    data, case.what = (mutators.mutate_json if rng.random() < 0.85 else mutators.mutate_bytes)(
        rng, read(os.path.join(seeds, name)))
    write(path, data)
    case.invalid = strict_json_invalid(data)
    return path


def build_case(args, seeds, index, kinds):
    """Writes case INDEX's mutated input into its folder and lists the commands to run."""
    rng = random.Random("%d:%d" % (args.seed, index))
    kind = choose_kind(rng, kinds)
    folder = os.path.join(args.work, "cases", "%05d" % index)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    case = Case(index, kind, folder)
    rannc = os.path.abspath(args.rannc)
    out = os.path.join(folder, "out")

    if kind in ("plan", "stage"):
        # plan3, sharded, has no stage files: its plan.json alone is mutated.
        plan_name = rng.choice(["plan1", "plan2", "plan3", "plan4", "plan5"] if kind == "plan" else ["plan1", "plan2"])
        source = os.path.join(seeds, plan_name)
        for name in os.listdir(source):
            if name.endswith(".pt") or name == "plan.json":
                shutil.copy(os.path.join(source, name), folder)
        plan = os.path.join(folder, "plan.json")
        if kind == "plan":
            data, case.what = (mutators.mutate_json if rng.random() < 0.8 else mutators.mutate_bytes)(rng, read(plan))
            write(plan, data)
            case.invalid = strict_json_invalid(data)
        else:
            stage = rng.choice(sorted(n for n in os.listdir(folder) if n.endswith(".pt")))
            data, what = mutators.mutate_pt(rng, read(os.path.join(folder, stage)))
            write(os.path.join(folder, stage), data)
            case.what = "%s: %s" % (stage, what)
        case.what = "%s %s" % (plan_name, case.what)
        if kind == "plan":
            case.commands.append(("show", [rannc, "show", plan], {}))
            if rng.random() < 0.3:
                case.commands.append(("show --json", [rannc, "show", plan, "--json"], {}))
        if plan_name != "plan3" and (kind == "stage" or rng.random() < 0.33):
            case.commands.append(("verify", [rannc, "verify", plan], {}))
        if args.run and plan_name == "plan1" and (kind == "stage" or rng.random() < 0.2):
            case.commands.append(("rannc-run", fuzz_common.mpirun_prefix() +
                                  [os.path.abspath(args.run), plan, "--steps", "1", "--loss", "cross_entropy", "--timeout", "10"],
                                  {"mpi": True, "timeout": max(args.timeout, 40)}))
        return case

    if kind == "cluster":
        path = mutate_json_seed(rng, case, seeds, rng.choice(["cluster.json", "mixed_cluster.json"]))
        model = os.path.join(seeds, "mlp.onnx")
        case.commands.append(("inspect --cluster", [rannc, "inspect", model, "--cluster", path], {}))
        case.commands.append(("partition --cluster", [rannc, model, "--cluster", path, "--plan-only", "-o", out],
                              {"out": out}))
        return case

    if kind == "profile_db":
        path = mutate_json_seed(rng, case, seeds, "profile_db.json")
        model = os.path.join(seeds, "mlp.onnx")
        case.commands.append(("inspect --profile-db", [rannc, "inspect", model, "--device", "cpu", "--profile-db", path],
                              {}))
        case.commands.append(("partition --profile-db", [rannc, model, "--device", "cpu", "--gpus", "2",
                                                         "--profile-db", path, "--plan-only", "-o", out], {"out": out}))
        if rng.random() < 0.25:
            case.commands.append(("profile --profile-db", [rannc, "profile", os.path.join(seeds, "mlp.pt"), "--input",
                                                           X_ARG, "--profile-db", path, "--reps", "1"], {}))
        return case

    if kind == "onnx":
        seed_name = rng.choice(["mlp.onnx", "conv.onnx"])
        path = os.path.join(folder, "model.onnx")
        data, case.what = (mutators.mutate_onnx if rng.random() < 0.8 else mutators.mutate_bytes)(
            rng, read(os.path.join(seeds, seed_name)))
        case.what = "%s: %s" % (seed_name, case.what)
        write(path, data)
        case.commands.append(("inspect onnx", [rannc, "inspect", path], {}))
        roll = rng.random()
        if roll < 0.5:
            case.commands.append(("partition onnx --plan-only", [rannc, path, "--gpus", "2", "--plan-only", "-o", out],
                                  {"out": out}))
        elif roll < 0.67:
            case.commands.append(("partition onnx", [rannc, path, "--gpus", "2", "-o", out], {"out": out}))
        return case

    if kind == "pt2":
        path = os.path.join(folder, "model.pt2")
        data, case.what = mutate_pt2(rng, case, seeds)
        write(path, data)
        case.commands.append(("inspect pt2", [rannc, "inspect", path], {}))
        roll = rng.random()
        if roll < 0.5:
            case.commands.append(("partition pt2 --plan-only", [rannc, path, "--device", "cpu", "--gpus", "2",
                                                                "--plan-only", "-o", out], {"out": out}))
        elif roll < 0.75:
            case.commands.append(("partition pt2", [rannc, path, "--device", "cpu", "--gpus", "2", "--no-check",
                                                    "-o", out], {"out": out}))
        return case

    # pt
    path = os.path.join(folder, "model.pt")
    data, case.what = (mutators.mutate_pt if rng.random() < 0.8 else mutators.mutate_bytes)(
        rng, read(os.path.join(seeds, "mlp.pt")))
    write(path, data)
    case.commands.append(("inspect pt", [rannc, "inspect", path, "--input", X_ARG], {}))
    if rng.random() < 0.25:
        case.commands.append(("partition pt --plan-only", [rannc, path, "--input", X_ARG, "--plan-only", "-o", out],
                              {"out": out}))
    return case


def must_fail(case):
    """Whether the mutated input is certainly invalid: JSON that is not strict JSON, or a model whose
    one structured mutation was tagged invalid (with two, the second could undo the first)."""
    return case.invalid or mutators.MUST_FAIL in case.what


def strict_json_invalid(data):
    """True when data is not JSON at all (syntax, NaN/Infinity, bad UTF-8); deep nesting, which only
    Python's recursion limit refuses, does not count."""
    def reject(name):
        raise ValueError(name)
    try:
        json.loads(data.decode("utf-8"), parse_constant=reject)
    except RecursionError:
        return False
    except (ValueError, UnicodeDecodeError):
        return True
    return False


def output_problems(out):
    """A successful partition: strict, finite plan.json and no leftover temporary files."""
    problems = []
    if not os.path.isdir(out):
        return ["exit 0 but no output folder"]
    plan = os.path.join(out, "plan.json")
    if not os.path.exists(plan):
        problems.append("exit 0 but no plan.json")
    else:
        problems.extend(fuzz_common.non_finite_numbers(plan))
    leftovers = [n for n in os.listdir(out) if ".tmp" in n]
    if leftovers:
        problems.append("temporary files left: %s" % ", ".join(sorted(leftovers)[:3]))
    return problems


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def failure_class(label, problems, stderr):
    """Groups failures: the command, what kind of problem, and the stderr line with numbers and
    paths blanked."""
    kinds = []
    fatal = [p for p in problems if p.startswith("killed by") or p.startswith("timeout") or
             (p.startswith("exit") and "expected" not in p)]
    if fatal:  # a crash or hang: what stderr held matters less
        problems = fatal + [p for p in problems if p.startswith("crash signs")]
    for p in problems:
        if p.startswith("killed by") or p.startswith("exit") and "expected" not in p:
            kinds.append(p.split(",")[0])
        elif p.startswith("timeout"):
            kinds.append("timeout")
        elif "lines on stderr" in p:
            kinds.append("multi-line stderr")
        elif p.startswith("crash signs"):
            kinds.append(p)
        else:
            kinds.append(re.sub(r"\d+", "N", p.split(":")[0] if "null" not in p else "null number in plan.json"))
    line = first_line(stderr)
    line = re.sub(r"/[^\s:'\"]*", "PATH", line)
    line = re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "N", line)
    return "%s | %s | %s" % (label, "; ".join(sorted(set(kinds))), line[:160])


def run_case(args, seeds, index, kinds):
    case = build_case(args, seeds, index, kinds)
    env = fuzz_common.quiet_env()
    outcomes = []
    for label, command, options in case.commands:
        out = options.get("out")
        if out:
            shutil.rmtree(out, ignore_errors=True)
        result = fuzz_common.run(command, options.get("timeout", args.timeout), cwd=case.folder, env=env)
        problems = fuzz_common.contract_problems(result, mpi=options.get("mpi", False),
                                                 verdict=command[1:2] == ["verify"])
        if result.returncode == 0 and not result.timed_out and must_fail(case):
            problems.append("exit 0 on an invalid input (silent acceptance)")
        if command[1:2] == ["verify"] and fuzz_common.is_verify_verdict(result) and must_fail(case):
            problems.append("an invalid stage file loaded: verify compared garbage (exit 1 verdict, not a load error)")
        if out and result.returncode == 0 and not result.timed_out:
            problems.extend(output_problems(out))
        if out and result.returncode in (1, 2) and os.path.isdir(out):
            leftovers = [n for n in os.listdir(out) if ".tmp" in n]
            if leftovers:
                problems.append("temporary files left: %s" % ", ".join(sorted(leftovers)[:3]))
        outcomes.append((label, command, result, problems))
    return case, outcomes


def record_failure(args, case, label, command, result, problems):
    folder = os.path.join(args.work, "failures", "%05d_%s" % (case.index, re.sub(r"[^a-z0-9]+", "_", label)))
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(case.folder, folder, ignore=shutil.ignore_patterns("out"))
    with open(os.path.join(folder, "command.sh"), "w") as f:
        f.write("#!/bin/sh\n# case %d (seed %d): %s: %s\ncd %s\n%s\n" % (
            case.index, args.seed, case.kind, case.what, fuzz_common.shell_quote([case.folder]),
            fuzz_common.shell_quote(command)))
    with open(os.path.join(folder, "result.txt"), "w") as f:
        f.write("case %d kind %s\nmutation: %s\ncommand: %s\nstatus: %s (%.1f s)\nproblems: %s\n--- stderr (first 60 lines)\n%s\n"
                "--- stdout (first 2000 chars)\n%s\n" % (
                    case.index, case.kind, case.what, fuzz_common.shell_quote(command), result.describe_status(),
                    result.seconds, "; ".join(problems), "\n".join(result.stderr.splitlines()[:60]),
                    result.stdout[:2000]))
    return folder


def main():
    args = parse_args()
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    kinds = KINDS
    if args.only:
        wanted = set(args.only.split(","))
        kinds = [(k, w) for k, w in KINDS if k in wanted]
        if not kinds:
            sys.exit("error: --only names no known kind")
    seeds = ensure_seeds(args)
    shutil.rmtree(os.path.join(args.work, "failures"), ignore_errors=True)
    os.makedirs(os.path.join(args.work, "failures"))
    start = time.monotonic()
    classes = {}
    counts = {}
    commands_run = 0
    failed_cases = 0
    indices = range(args.first, args.first + args.cases)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case, args, seeds, i, kinds) for i in indices]
        for future in concurrent.futures.as_completed(futures):
            case, outcomes = future.result()
            counts[case.kind] = counts.get(case.kind, 0) + 1
            case_failed = False
            for label, command, result, problems in outcomes:
                commands_run += 1
                if not problems:
                    continue
                case_failed = True
                folder = record_failure(args, case, label, command, result, problems)
                key = failure_class(label, problems, result.stderr)
                entry = classes.setdefault(key, {"count": 0, "examples": []})
                entry["count"] += 1
                if len(entry["examples"]) < 3:
                    entry["examples"].append({"case": case.index, "kind": case.kind, "mutation": case.what,
                                              "command": fuzz_common.shell_quote(command),
                                              "status": result.describe_status(), "problems": problems,
                                              "stderr_head": result.stderr.splitlines()[:6], "folder": folder})
            if case_failed:
                failed_cases += 1
            else:
                shutil.rmtree(case.folder, ignore_errors=True)
    seconds = time.monotonic() - start
    summary = {"seed": args.seed, "cases": args.cases, "commands": commands_run, "kinds": counts,
               "failed_cases": failed_cases, "seconds": round(seconds, 1),
               "classes": dict(sorted(classes.items(), key=lambda kv: -kv[1]["count"]))}
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("fuzz: %d cases (%s), %d commands, %.0f s, %d failing cases in %d classes" % (
        args.cases, ", ".join("%s %d" % kv for kv in sorted(counts.items())), commands_run, seconds, failed_cases,
        len(classes)))
    for key, entry in summary["classes"].items():
        example = entry["examples"][0]
        print("FAIL x%d: %s\n    e.g. case %d (%s): %s\n    %s\n    -> %s" % (
            entry["count"], key, example["case"], example["kind"], example["mutation"][:200], example["command"][:300],
            example["status"]))
    if classes:
        print("failures in", os.path.join(args.work, "failures"), "and", os.path.join(args.work, "summary.json"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
