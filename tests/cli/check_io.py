#!/usr/bin/python3
"""How partition writes its output folder.

usage: check_io.py CHECK RANNC MODEL OUT_DIR [PARTITION_ARGS...]

finite-plan           partition MODEL with PARTITION_ARGS: plan.json holds no null and only finite numbers.
full-disk-stages      into a tmpfs with little room left: one line "OUT/stage_N.pt: cannot write: No space left
                      on device", exit 2, no temporary file and no plan.json left behind (exit 77 where no
                      tmpfs can be mounted).
full-disk-plan-only   --plan-only into a tmpfs with very little room: one "cannot write" line, exit 2, no
                      temporary file, and the plan.json of an earlier run is gone (it named other files).
locked-folder         while another process holds OUT/.lock: exit 1 and one line; afterwards it works.
concurrent            two partitions into one folder at once, several times: each succeeds or is refused
                      with the lock message, and the folder ends consistent (verify passes, hashes match).
stage-hashes          stages[i].sha256 is the SHA-256 of each stage file; --plan-only plans have none and
                      remove the stage files of an earlier plan; a changed stage file fails show and verify.
"""
import contextlib
import fcntl
import glob
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

MLP_ARGS = ["--input", "x:32x64", "--batch", "32", "--device", "cpu", "--optimizer", "sgd"]
CRASH_SIGNS = ("terminate called", "Segmentation fault", "core dumped", "Traceback", "Aborted", "what():")


def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def run(command, timeout=300):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def expect_one_line(result, status, needle):
    lines = result.stderr.splitlines()
    if result.returncode != status or len(lines) != 1 or needle not in result.stderr or \
            any(sign in result.stderr for sign in CRASH_SIGNS):
        fail(f"expected exit {status} and one line with {needle!r}; got exit {result.returncode}, stderr:\n"
             f"{result.stderr[:3000]}")
    print("says:", lines[0])
    return lines[0]


def leftovers(folder):
    return [p for p in glob.glob(os.path.join(folder, "*")) + glob.glob(os.path.join(folder, ".*")) if ".tmp" in p]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_plan(folder):
    with open(os.path.join(folder, "plan.json")) as f:
        return json.load(f)


@contextlib.contextmanager
def tmpfs(path, size):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True, text=True)
    if mounted.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs of {size} at {path}: {mounted.stderr.strip()}")
        sys.exit(77)
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=False)


def fill(folder, leave_bytes):
    """Fills the file system of `folder` up to `leave_bytes` free."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    with open(os.path.join(folder, "filler"), "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))


def finite_plan(rannc, model, out, extra):
    shutil.rmtree(out, ignore_errors=True)
    result = run([rannc, model, "-o", out, *extra])
    if result.returncode != 0:
        fail(f"exit {result.returncode}: {result.stderr}")
    with open(os.path.join(out, "plan.json")) as f:
        text = f.read()
    if "null" in text or "NaN" in text or "Infinity" in text:
        fail("plan.json holds null, NaN or Infinity")

    def walk(value, where):
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"{where} is {value}")
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}.{key}")
        if isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
    plan = json.loads(text)
    walk(plan, "plan")
    print(f"ok: predicted step {plan['predicted']['iteration_ms']} ms, every number finite")


def expect_no_plan(folder, plan_json_left):
    """After a write that failed: no temporary files in FOLDER, and no plan.json (else fail with
    PLAN_JSON_LEFT)."""
    if leftovers(folder):
        fail(f"temporary files left behind: {leftovers(folder)}")
    if os.path.exists(os.path.join(folder, "plan.json")):
        fail(plan_json_left)


def full_disk_stages(rannc, model, out, extra):
    with tmpfs(out, "4m") as folder:
        fill(folder, 24 * 1024)
        result = run([rannc, model, *MLP_ARGS, "--gpus", "2", "--stages", "2", "-o", folder])
        line = expect_one_line(result, 2, "No space left on device")
        if not line.startswith(f"rannc-partition: error: {folder}/stage_") or ": cannot write: " not in line:
            fail(f"the line does not name the stage file that could not be written: {line}")
        expect_no_plan(folder, "plan.json written although its stage files are not")
    print("ok: a full disk while writing stage files")


def full_disk_plan_only(rannc, model, out, extra):
    with tmpfs(out, "4m") as folder:
        with open(os.path.join(folder, "plan.json"), "w") as f:
            f.write('{"an": "earlier plan"}')
        fill(folder, 2 * 1024)
        result = run([rannc, model, *MLP_ARGS, "--gpus", "2", "--stages", "2", "--plan-only", "-o", folder])
        line = expect_one_line(result, 2, "No space left on device")
        if ": cannot write" not in line:
            fail(f"the line does not say what could not be written: {line}")
        expect_no_plan(folder, "a plan.json is left behind")
    print("ok: a full disk while writing the plan")


def locked_folder(rannc, model, out, extra):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    command = [rannc, model, *MLP_ARGS, "--gpus", "2", "--stages", "2", "-o", out]
    with open(os.path.join(out, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        expect_one_line(run(command), 1, "is writing into this folder")
    if os.path.exists(os.path.join(out, "plan.json")) or glob.glob(os.path.join(out, "stage_*")):
        fail("files written into a locked folder")
    result = run(command)
    if result.returncode != 0:
        fail(f"exit {result.returncode} once the lock is released: {result.stderr}")
    print("ok: a locked folder is refused, and written once released")


def check_consistent(rannc, out):
    plan = load_plan(out)
    for stage in plan["stages"]:
        path = os.path.join(out, stage["file"])
        if stage.get("sha256") != sha256(path):
            fail(f"{stage['file']} does not match plan.json")
    if leftovers(out):
        fail(f"temporary files left behind: {leftovers(out)}")
    result = run([rannc, "verify", os.path.join(out, "plan.json")], timeout=600)
    if result.returncode != 0:
        fail(f"verify: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return plan


def concurrent(rannc, model, out, extra):
    shutil.rmtree(out, ignore_errors=True)
    refused = 0
    for round in range(3):
        jobs = [subprocess.Popen([rannc, model, *MLP_ARGS, "--gpus", "4", "--stages", str(stages), "-o", out],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for stages in (2, 3)]
        results = [(job.wait(300), job.stderr.read()) for job in jobs]
        for status, stderr in results:
            if status == 1 and "is writing into this folder" in stderr and len(stderr.splitlines()) == 1:
                refused += 1
            elif status != 0:
                fail(f"round {round}: exit {status}: {stderr}")
        if all(status != 0 for status, _ in results):
            fail(f"round {round}: neither run wrote the folder")
        plan = check_consistent(rannc, out)
        print(f"round {round}: exits {[s for s, _ in results]}, folder holds a consistent {len(plan['stages'])}-stage plan")
    print(f"ok: concurrent runs leave a consistent folder ({refused} refused by the lock)")


def stage_hashes(rannc, model, out, extra):
    shutil.rmtree(out, ignore_errors=True)
    command = [rannc, model, *MLP_ARGS, "--gpus", "2", "--stages", "2", "-o", out]
    result = run(command)
    if result.returncode != 0:
        fail(f"exit {result.returncode}: {result.stderr}")
    plan = check_consistent(rannc, out)
    plan_path = os.path.join(out, "plan.json")
    for verb in ("show", "verify"):
        if run([rannc, verb, plan_path], timeout=600).returncode != 0:
            fail(f"{verb} of a fresh plan fails")
    # A stage file changed after partition: every reader that opens it refuses.
    stage_1 = os.path.join(out, plan["stages"][1]["file"])
    with open(stage_1, "ab") as f:
        f.write(b"\0")
    for verb in ("show", "verify"):
        expect_one_line(run([rannc, verb, plan_path], timeout=600), 2, f"{stage_1} does not match {plan_path} (sha256 ")
    # --plan-only: no hashes, and the stage files of the plan it replaces are gone.
    result = run([*command, "--plan-only"])
    if result.returncode != 0:
        fail(f"--plan-only: exit {result.returncode}: {result.stderr}")
    plan = load_plan(out)
    if any("sha256" in stage for stage in plan["stages"]):
        fail("a --plan-only plan records sha256 of stage files it did not write")
    if glob.glob(os.path.join(out, "stage_*")):
        fail(f"stage files of the earlier plan left beside a --plan-only plan: {glob.glob(os.path.join(out, 'stage_*'))}")
    if run([rannc, "show", plan_path]).returncode != 0:
        fail("show of a --plan-only plan fails")
    print("ok: stage hashes written, checked by show and verify, absent with --plan-only")


def main():
    check, rannc, model, out = sys.argv[1:5]
    extra = sys.argv[5:]
    {"finite-plan": finite_plan, "full-disk-stages": full_disk_stages, "full-disk-plan-only": full_disk_plan_only,
     "locked-folder": locked_folder, "concurrent": concurrent, "stage-hashes": stage_hashes}[check](
        rannc, model, os.path.abspath(out), extra)


if __name__ == "__main__":
    main()
