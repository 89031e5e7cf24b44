"""Checks the IR dumps of `inspect --dump-ir`: the text form lists every op with starred batch
dims, and the JSON form has the same ops as `inspect --json` counts; both name the same module
path per op, among them each --module given.

usage: check_dump_ir.py BINARY MODEL [--input SPEC ...] [--module PATH ...]
"""
import json
import subprocess
import sys


def run(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)}: {result.stderr.strip()}")
    return result.stdout


def main():
    binary, model, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    expect_modules = []
    while "--module" in extra:
        at = extra.index("--module")
        expect_modules.append(extra[at + 1])
        del extra[at:at + 2]
    summary = json.loads(run([binary, "inspect", model, "--json"] + extra))
    text = run([binary, "inspect", model, "--dump-ir"] + extra)
    graph = json.loads(run([binary, "inspect", model, "--dump-ir", "--json"] + extra))

    op_lines = [line for line in text.splitlines() if " = " in line]
    problems = []
    if len(op_lines) != summary["nodes"]:
        problems.append(f"text dump has {len(op_lines)} ops, inspect counts {summary['nodes']}")
    if len(graph["ops"]) != summary["nodes"]:
        problems.append(f"JSON dump has {len(graph['ops'])} ops, inspect counts {summary['nodes']}")
    if not any("[*" in line for line in op_lines):
        problems.append("no batch dim is starred in the text dump")
    outputs = [graph["values"][i] for i in graph["outputs"]]
    if [o["shape"] for o in outputs] != [o["shape"] for o in summary["outputs"]]:
        problems.append("JSON dump outputs differ from inspect's")
    if not all(o["batch_dim"] == 0 for o in outputs):
        problems.append(f"output batch dims {[o['batch_dim'] for o in outputs]}, expected 0")
    # An op's module path: "  # layers.0" after its line, "module" in its JSON; both dumps the same.
    modules = sorted(op["module"] for op in graph["ops"] if "module" in op)
    if modules != sorted(line.rsplit("  # ", 1)[1] for line in op_lines if "  # " in line):
        problems.append("the text and JSON dumps name different module paths")
    if expect_modules and not set(expect_modules) <= set(modules):
        problems.append(f"module paths {sorted(set(modules))}, expected {expect_modules} among them")
    if problems:
        sys.exit("FAILED:\n" + "\n".join(problems))
    print(f"ok: {summary['nodes']} ops in both dumps")


if __name__ == "__main__":
    main()
