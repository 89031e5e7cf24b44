"""docs/plan.schema.json against the plans and the plan reader.

  check_plan_schema.py written RANNC SAMPLES ROOT MIN
      Every plan.json under ROOT that partition wrote matches the schema (after writing two of its
      own, so that a run of this test alone checks something); at least MIN are found. Folders
      of deliberately broken plans (ROOT/fuzz, ROOT/test-plans) are left out.
  check_plan_schema.py mutations RANNC SAMPLES OUT
      Each schema violation made from real plans (a required field removed, a value of the wrong
      type or out of range) is refused by the reader (`rannc-partition show`): exit 2 and one line
      naming the field's path. So a plan the schema refuses never reaches a tool. The plans, of
      the sample GPT (tied weights, buffers, integer inputs, links), MLP (unused devices, fused
      attention) and DLRM (sharded embedding tables), are
      written into OUT.
"""
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile

import plan_schema

BROKEN_ON_PURPOSE = ("fuzz", "test-plans")

# Values a field is replaced with; those the schema refuses at that place are the violations tried.
REPLACEMENTS = ["text", 1.5, -1, -0.5, True, None, [], {}, 2**31, "float99"]


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def check_written(rannc, samples, root, at_least):
    written_plans(rannc, samples, os.path.join(root, "test-out", "schema-written"))
    paths = [p for p in sorted(glob.glob(os.path.join(root, "**", "plan.json"), recursive=True))
             if os.path.relpath(p, root).split(os.sep)[0] not in BROKEN_ON_PURPOSE]
    for path in paths:
        with open(path) as f:
            plan_schema.check(json.load(f), path)
    if len(paths) < at_least:
        fail(f"only {len(paths)} plan.json under {root}, expected at least {at_least}")
    print(f"{len(paths)} plans match docs/plan.schema.json")


def places(value, path=()):
    """Every (path, value) of a document, with only the first and last element of long arrays
    (the others have the same schema)."""
    yield path, value
    if isinstance(value, dict):
        for key in sorted(value):
            yield from places(value[key], path + (key,))
    elif isinstance(value, list):
        indices = sorted({0, len(value) - 1}) if value else []
        for i in indices:
            yield from places(value[i], path + (i,))


def parent_of(document, path):
    node = document
    for part in path[:-1]:
        node = node[part]
    return node


def violations(plan):
    """(description, fields the reader may name, mutated document) for each violation tried."""
    found = []
    for path, value in places(plan):
        if not path:
            continue
        for replacement in [DELETE] + REPLACEMENTS:
            mutated = copy.deepcopy(plan)
            parent = parent_of(mutated, path)
            if replacement is DELETE:
                del parent[path[-1]]
                what = "removed"
            else:
                if replacement == value and type(replacement) is type(value):
                    continue
                parent[path[-1]] = replacement
                what = f"= {json.dumps(replacement)}"
            # The reader may name the changed field, or where the schema sees the fault (a
            # removed key's object, an array that became too short), but not the root.
            faults = {plan_schema.field_path(e.absolute_path) for e in plan_schema.errors(mutated)}
            if faults:
                fields = sorted({plan_schema.field_path(path)} | faults - {""})
                found.append((f"{plan_schema.field_path(path)} {what}", fields, mutated))
    return found


DELETE = object()


def names_field(message, plan_path, fields):
    """The reader's line names one of the fields or one inside it:
    'rannc-partition: error: PLAN: stages[0].id: ...'."""
    prefix = f"rannc-partition: error: {plan_path}: "
    if not message.startswith(prefix):
        return False
    rest = message[len(prefix):]
    return any(rest.startswith(field + tail) for field in fields for tail in (":", ".", "["))


# Between them these plans hold every optional field of the format.
PLANS = {"gpt": ["gpt.onnx", "--gpus", "8", "--batch", "64", "--mem", "40M"],
         "mlp": ["mlp.onnx", "--gpus", "8", "--batch", "6", "--plan-only", "--attention", "fused",
                 "--elementwise", "fused"],
         "dlrm": ["dlrm.trace.pt", "--input", "dense:4x13:float32", "--input", "sparse:4x8x5:int64", "--gpus", "4"]}


def written_plans(rannc, samples, out):
    plans = []
    for name, (model, *args) in PLANS.items():
        folder = os.path.join(out, name)
        result = subprocess.run([rannc, os.path.join(samples, model), *args, "-o", folder],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            fail(f"partition of {model}: exit {result.returncode}: {result.stderr.strip()}")
        with open(os.path.join(folder, "plan.json")) as f:
            plans.append(json.load(f))
        plan_schema.check(plans[-1], os.path.join(folder, "plan.json"))
    optional = ["unused_devices", "precision", "attention", "elementwise", "index_bound", "shared_with", "sha256", "intra_node", "memory",
                "model_output", "op_range", "modules", "blocks", "sharding", "embedding", "files", "stage_name", "lookup_args"]
    text = json.dumps([stage for plan in plans for stage in plan["stages"]]) + json.dumps(plans)
    missing = [key for key in optional if f'"{key}"' not in text]
    if missing:
        fail(f"the plans lack optional fields {missing}: their mutations would go untried")
    return plans


def check_mutations(rannc, samples, out):
    cases = [case for plan in written_plans(rannc, samples, out) for case in violations(plan)]
    if len(cases) < 1000:
        fail(f"only {len(cases)} schema violations made")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "plan.json")
        for description, fields, mutated in cases:
            with open(path, "w") as f:
                json.dump(mutated, f)
            result = subprocess.run([rannc, "show", path], capture_output=True, text=True, timeout=60)
            message = result.stderr.strip()
            if result.returncode != 2 or "\n" in message or not names_field(message, path, fields):
                failures.append(f"{description}: exit {result.returncode}: {message[:300]!r}")
    if failures:
        fail(f"{len(failures)} of {len(cases)} schema violations not refused naming the field:\n  "
             + "\n  ".join(failures[:20]))
    print(f"{len(cases)} schema violations, each refused by the reader naming the field")


def main():
    mode, rannc = sys.argv[1:3]
    if mode == "written":
        check_written(rannc, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "mutations":
        check_mutations(rannc, sys.argv[3], sys.argv[4])
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
