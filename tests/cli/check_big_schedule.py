#!/usr/bin/python3
"""schedule.svg of GPT-3 175B (shape-only) planned on 64 and 4096 devices: replicas and pipelines
fold into one row per stage, so the picture stays under 1 MB. It must parse as XML and have one
`<g class="stage">` row per stage of plan.json (per device group of an interleaved plan: its first
stage's), in order, whose data-ranks, data-replicas and data-pipelines agree with the plan and whose
label shows them; no per-rank rows.

usage: check_big_schedule.py BINARY SHAPE_ONLY_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
MAX_BYTES = 1_000_000
DEVICES = (64, 4096)


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def check_schedule(binary, model, out, devices):
    command = [binary, model, "--gpus", str(devices), "--batch", "1536", "--device", "a100-80g",
               "--precision", "bf16-mixed", "--plan-only", "-o", out]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    check(result.returncode == 0, f"{' '.join(command)}: exit {result.returncode}: {result.stderr}")
    with open(os.path.join(out, "plan.json")) as f:
        plan = json.load(f)
    path = os.path.join(out, "schedule.svg")
    size = os.path.getsize(path)
    print(f"{devices} devices: {len(plan['stages'])} stages x {plan['batch']['pipelines']} pipelines, "
          f"{len(plan['ranks'])} ranks, schedule.svg {size} bytes")
    check(size < MAX_BYTES, f"{devices} devices: schedule.svg is {size} bytes (limit {MAX_BYTES})")
    root = ET.parse(path).getroot()
    check(root.tag == SVG + "svg", f"{devices} devices: schedule.svg is not an SVG document")
    groups = list(root.iter(SVG + "g"))
    check(not [g for g in groups if g.get("class") == "rank"], f"{devices} devices: per-rank rows in schedule.svg")
    rows = [g for g in groups if g.get("class") == "stage"]
    device_groups = plan["stages"][:len(plan["stages"]) // plan.get("interleave", 1)]
    check(len(rows) == len(device_groups),
          f"{devices} devices: schedule.svg has {len(rows)} stage rows, plan has {len(device_groups)} device groups")
    pipelines = plan["batch"]["pipelines"]
    for row, stage in zip(rows, device_groups):
        where = f"{devices} devices, stage {stage['id']}"
        expected = {"data-stage": stage["id"], "data-ranks": len(stage["ranks"]),
                    "data-replicas": stage["replicas_per_pipeline"], "data-pipelines": pipelines}
        for attribute, value in expected.items():
            check(row.get(attribute) == str(value), f"{where}: {attribute}={row.get(attribute)!r}, plan says {value}")
        label = " ".join("".join(text.itertext()) for text in row.findall(SVG + "text"))
        check(f"{len(stage['ranks'])} rank" in label and f"{stage['replicas_per_pipeline']} replica" in label
              and f"{pipelines} pipeline" in label, f"{where}: label {label!r} does not show the counts")
        kinds = {box.get("data-kind") for box in row.iter() if box.get("data-kind")}
        check({"forward", "backward"} <= kinds, f"{where}: compute boxes in its row: {sorted(kinds)}")


def main():
    binary, folder, out = sys.argv[1:4]
    model = os.path.join(folder, "gpt3-175b.onnx")
    for devices in DEVICES:
        check_schedule(binary, model, os.path.join(out, f"gpt3_{devices}"), devices)


if __name__ == "__main__":
    main()
