"""What check_stages.py, check_fixed_batch.py and check_onnx_ops.py share: fail with a message,
run a command and expect its exit status, write a plan and check it with `verify`.
"""
import json
import os
import shutil
import subprocess
import sys

import plan_schema


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != expect:
        fail(f"{' '.join(command)}: exit {result.returncode}, expected {expect}\n{result.stdout}{result.stderr}")
    return result


def write_plan(rannc, model, out_dir, args):
    """`rannc MODEL ARGS -o OUT_DIR` into an emptied OUT_DIR; returns its plan.json."""
    shutil.rmtree(out_dir, ignore_errors=True)
    run([rannc, model, *args, "-o", out_dir])
    path = os.path.join(out_dir, "plan.json")
    with open(path) as f:
        plan = json.load(f)
    plan_schema.check(plan, path)
    return plan


def verify(rannc, out_dir, context=""):
    """`rannc verify` on OUT_DIR/plan.json, which must pass with no problems; returns its report."""
    report = json.loads(run([rannc, "verify", os.path.join(out_dir, "plan.json"), "--json"]).stdout)
    if not report["passed"] or report["problems"]:
        fail(f"{context}verify: {json.dumps(report)}")
    return report


def max_rel(report):
    """The larger of verify's worst relative error on outputs and on gradients."""
    return max(report["outputs"].get("max_rel", 0), report["gradients"].get("max_rel", 0))
