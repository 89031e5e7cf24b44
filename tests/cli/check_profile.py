"""Profiles a TorchScript model twice with one profile DB: the first run times every op
signature, the second times none, does not even load the model, and takes under a second.
A different batch is a different model key: its new signatures are timed.

usage: check_profile.py BINARY MODEL INPUT_SPEC
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def profile(binary, model, spec, db):
    start = time.monotonic()
    result = subprocess.run([binary, "profile", model, "--input", spec, "--profile-db", db, "--json", "--reps", "2"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"profile failed: {result.stderr.strip()}")
    return json.loads(result.stdout), time.monotonic() - start


def main():
    binary, model, spec = sys.argv[1:4]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "db.json")
        first, _ = profile(binary, model, spec, db)
        with open(db) as f:
            stored = json.load(f)
        ops = stored["devices"]["cpu"]["ops"]
        second, seconds = profile(binary, model, spec, db)
        name, dims = spec.split(":")[0], spec.split(":")[1].split("x")
        bigger = f"{name}:{int(dims[0]) * 2}x{'x'.join(dims[1:])}"
        third, _ = profile(binary, model, bigger, db)
    print(f"first: {first['timed']} of {first['signatures']} signatures timed; second: {second['timed']} timed in "
          f"{seconds:.2f} s; batch x2: {third['timed']} timed")
    if not (first["model_loaded"] and first["timed"] == first["signatures"] > 0):
        problems.append(f"first run should time all {first['signatures']} signatures, timed {first['timed']}")
    if len(ops) != first["signatures"] or any(m["fwd_ms"] <= 0 or m["reps"] != 2 for m in ops.values()):
        problems.append(f"the DB should hold {first['signatures']} measured ops, holds {len(ops)}")
    if second["timed"] != 0 or second["model_loaded"]:
        problems.append(f"second run timed {second['timed']} signatures (loaded the model: {second['model_loaded']})")
    if seconds >= 1.0:
        problems.append(f"second run took {seconds:.2f} s")
    if second["predicted"] != first["predicted"]:
        problems.append("second run predicts differently from the first")
    if not (third["model_loaded"] and 0 < third["timed"] <= third["signatures"]):
        problems.append(f"a new batch size should time its new signatures, timed {third['timed']}")
    if first["predicted"]["step_ms"] <= 0 or first["predicted"]["peak_bytes"] <= 0:
        problems.append(f"prediction is empty: {first['predicted']}")
    if problems:
        sys.exit("FAILED:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
