"""The sweep verb on the GPT sample over 1, 2, 4 and 8 devices of 36 MiB (and no host memory to
offload to): one row per count, the
first saying why nothing fits, each other the same plan the partition verb makes for that count
(layout, microbatches, predicted step, physical-bound figures); the CSV holds the same rows; bad
device lists and an unwritable CSV are one error line with exit 2.

usage: check_sweep.py RANNC SAMPLES OUT
"""
import csv
import json
import os
import shutil
import sys

from plan_runs import fail, run, write_plan

DEVICES = [1, 2, 4, 8]
REQUEST = ["--batch", "64", "--mem", "36M", "--host-mem", "1B"]


def main():
    rannc, samples, out = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    model = os.path.join(samples, "gpt.onnx")
    csv_path = os.path.join(out, "sweep.csv")
    rows = json.loads(run([rannc, "sweep", model, "--gpus", ",".join(map(str, DEVICES)), *REQUEST,
                           "--json", "--csv", csv_path]).stdout)
    if [row["devices"] for row in rows] != DEVICES:
        fail(f"rows for {[row['devices'] for row in rows]}, expected {DEVICES}")
    if rows[0]["fits"] or "it would fit on" not in rows[0]["reason"]:
        fail(f"1 device of 36 MiB: expected a refusal saying what would fit, got {rows[0]}")
    for row in rows[1:]:
        plan = write_plan(rannc, model, os.path.join(out, f"plan_{row['devices']}"),
                          ["--gpus", str(row["devices"]), *REQUEST, "--plan-only"])
        predicted = plan["predicted"]
        expected = {"stages": len(plan["stages"]), "pipelines": plan["batch"]["pipelines"],
                    "microbatches": plan["batch"]["microbatches"], "iteration_ms": predicted["iteration_ms"],
                    "model_tflops_per_device": predicted["model_tflops_per_device"],
                    "peak_fraction": predicted["peak_fraction"], "peak_mem_bytes": predicted["peak_mem_bytes"],
                    "replicas_per_pipeline": "/".join(str(s["replicas_per_pipeline"]) for s in plan["stages"])}
        differ = {key: (row[key], value) for key, value in expected.items() if row[key] != value}
        if differ:
            fail(f"{row['devices']} devices: sweep and partition differ (sweep, partition): {differ}")
    with open(csv_path) as f:
        table = list(csv.DictReader(f))
    if [int(r["devices"]) for r in table] != DEVICES or [r["fits"] for r in table] != [json.dumps(r["fits"]) for r in rows]:
        fail(f"the CSV rows {table} do not match the JSON rows")
    if any(float(r["iteration_ms"]) != row["iteration_ms"] for r, row in zip(table[1:], rows[1:])):
        fail("the CSV's step times differ from the JSON's")
    text = run([rannc, "sweep", model, "--gpus", "2,8", *REQUEST]).stdout
    if len(text.strip().splitlines()) != 3 or "TFLOP/s/dev" not in text:
        fail(f"the table: a header and a line per device count expected:\n{text}")
    for bad, message in ((["--gpus", "8,x"], "--gpus"), (["--gpus", "0"], "--gpus 0"),
                         (["--gpus", "8", "--csv", os.path.join(out, "no", "such", "dir", "s.csv")], "--csv")):
        result = run([rannc, "sweep", model, *REQUEST, *bad], expect=2)
        lines = result.stderr.strip().splitlines()
        if len(lines) != 1 or message not in lines[0]:
            fail(f"sweep {' '.join(bad)}: expected one line naming {message}, got {result.stderr!r}")
    check_mix(rannc, model, out)
    print("sweep: rows match the partition verb's plans, the CSV and the table; bad lists refused; a mix of presets "
          "is planned as each kind alone and as the mix")


def check_mix(rannc, model, out):
    """--gpus PRESET:N,...: one row per kind on its own nodes, then the mix, each naming its devices;
    the mix is the partition verb's plan of the same cluster file."""
    mix = ["--gpus", "a100-40g:8,h100-80g:8", "--batch", "64"]
    rows = json.loads(run([rannc, "sweep", model, *mix, "--json"]).stdout)
    if [(row["devices"], row.get("device")) for row in rows] != [(8, "a100-40g"), (8, "h100-80g"), (16, "a100-40g+h100-80g")]:
        fail(f"a mix of 8 a100-40g and 8 h100-80g: expected rows for each kind and the mix, got {rows}")
    cluster = os.path.join(out, "mix.json")
    with open(cluster, "w") as f:
        json.dump({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "a100-40g"},
                                                       {"nodes": 1, "device": "h100-80g"}]}, f)
    plan = write_plan(rannc, model, os.path.join(out, "plan_mix"), ["--cluster", cluster, "--batch", "64", "--plan-only"])
    if rows[2]["iteration_ms"] != plan["predicted"]["iteration_ms"]:
        fail(f"the mix's row {rows[2]} differs from the partition verb's plan {plan['predicted']}")
    text = run([rannc, "sweep", model, *mix]).stdout
    if "8 x h100-80g" not in text or "16 x a100-40g+h100-80g" not in text:
        fail(f"the table names each row's devices:\n{text}")
    for bad, message in ((["--gpus", "a100-40g:8,16"], "either device counts or one mix"),
                         (["--gpus", "x100:8,h100-80g:8"], "unknown device preset"),
                         (["--gpus", "a100-40g:8"], "a mix takes two device kinds or more"),
                         (["--gpus", "a100-40g:6,h100-80g:8"], "is not a whole number of nodes of 6"),
                         (["--gpus", "a100-40g:8,h100-80g:x"], "not a whole number"),
                         (["--gpus", "a100-40g:8,h100-80g:8", "--mem", "8G"], "--mem: a mix")):
        result = run([rannc, "sweep", model, "--batch", "64", *bad], expect=2)
        lines = result.stderr.strip().splitlines()
        if len(lines) != 1 or message not in lines[0]:
            fail(f"sweep {' '.join(bad)}: expected one line saying {message!r}, got {result.stderr!r}")


if __name__ == "__main__":
    main()
