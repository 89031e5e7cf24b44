#!/usr/bin/python3
"""Writes malformed plans for the `show` error tests, each derived from a real plan of the GPT
sample (five stages): truncated, a newer version, a foreign format, a stage input whose
source is a later stage, a plan folder that lacks a stage file, a field nested 100000 deep, a
field holding a long array or string, a malformed sha256, and a plan folder whose stage_1.pt is
another stage's file.

usage: make_bad_plans.py BINARY SAMPLES_DIR OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys


def main():
    binary, samples, out = sys.argv[1:4]
    good = os.path.join(out, "good")
    subprocess.run([binary, os.path.join(samples, "gpt.onnx"), "--gpus", "8", "--batch", "64", "--mem", "36M", "-o", good],
                   check=True, capture_output=True, timeout=300)
    with open(os.path.join(good, "plan.json")) as f:
        text = f.read()
    plan = json.loads(text)
    if len(plan["stages"]) < 4:
        sys.exit(f"FAILED: expected a plan of at least 4 stages, got {len(plan['stages'])}")

    def write(name, content):
        with open(os.path.join(out, name), "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content, indent=1))

    write("truncated.json", text[: len(text) // 2])
    write("version2.json", {**plan, "version": 2})
    write("foreign.json", {**plan, "format": "onnx-model"})
    later = json.loads(text)
    later["stages"][1]["inputs"][0]["source"] = {"stage": 3, "output": 0}
    write("later_stage.json", later)
    deep = 100000
    write("deep.json", text.replace('"schedule": "', '"schedule": ' + "[" * deep + "]" * deep + ', "was": "', 1))
    write("long_array.json", {**plan, "cluster": {**plan["cluster"], "gpus": [[i, [i]] for i in range(100000)]}})
    write("long_string.json", {**plan, "format": "x" * 1000000})
    bad_sha = json.loads(text)
    bad_sha["stages"][0]["sha256"] = "not a hash"
    write("bad_sha256.json", bad_sha)
    swapped = os.path.join(out, "swapped_stage")
    shutil.rmtree(swapped, ignore_errors=True)
    shutil.copytree(good, swapped)
    shutil.copyfile(os.path.join(swapped, "stage_0.pt"), os.path.join(swapped, "stage_1.pt"))
    missing = os.path.join(out, "missing_stage")
    shutil.rmtree(missing, ignore_errors=True)
    shutil.copytree(good, missing)
    os.remove(os.path.join(missing, "stage_1.pt"))
    print("ok: bad plans in", out)


if __name__ == "__main__":
    main()
