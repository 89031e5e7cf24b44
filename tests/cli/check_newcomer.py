#!/usr/bin/python3
"""What a newcomer does: `cmake --install`, then the installed tools from another folder, with no
build tree on PATH.

usage: check_newcomer.py CHECK PREFIX [ARGS...]

install PREFIX CMAKE BUILD_DIR   cmake --install BUILD_DIR --prefix PREFIX (emptied first): both tools
                                 in bin/, the torch plugin under lib, README, LICENSE and docs/ in
                                 share/doc/rannc-partition.
version-help PREFIX              --version of both tools (one line, exit 0); `help` and `help COMMAND`
                                 print the usage (exit 0); `help NOTHING` and no arguments are one
                                 line and exit 2; so is rannc-run without a plan; rannc-run --help
                                 groups its options and ends with examples.
train PREFIX MODEL               partition MODEL (a relative path) from one folder, OUT/launch.sh
                                 from another (2 steps under mpirun, rannc-run found beside the
                                 installed rannc-partition), verify from a third; job.sbatch under
                                 bash with a stand-in srun (srun --mpi=pmix, run by mpirun), with
                                 RANNC_LAUNCHER=mpirun (mpirun), and RANNC_LAUNCHER=bogus (one line, exit 2).
folder PREFIX MODEL BAD_MODEL    a run that fails leaves no new folder (before the plan exists, or
                                 when BAD_MODEL's stage files fail the check); a new plan removes
                                 the stage files of an earlier one and keeps other files.
no-runtime PREFIX MODEL          launch.sh and job.sbatch of a rannc-partition with no rannc-run beside
                                 it and none on PATH: one line and exit 2; RANNC_RUN, else PATH, is used.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MLP_ARGS = ["--input", "x:32x64", "--batch", "32", "--device", "cpu", "--optimizer", "sgd"]
CRASH_SIGNS = ("terminate called", "Segmentation fault", "core dumped", "Traceback", "Aborted", "what():")
NO_RUNTIME = "cannot find rannc-run (set RANNC_RUN, or put it on PATH)"


def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def run(command, expect=0, timeout=600, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if result.returncode != expect:
        fail(f"{' '.join(command)}: exit {result.returncode}, expected {expect}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    if any(sign in result.stderr for sign in CRASH_SIGNS):
        fail(f"{' '.join(command)}: stderr shows a crash\n{result.stderr[-3000:]}")
    return result


def one_error_line(result, pattern):
    lines = result.stderr.splitlines()
    if len(lines) != 1 or not re.search(pattern, lines[0]):
        fail(f"expected one stderr line matching {pattern!r}, got: {result.stderr!r}")


def tool(prefix, name):
    return os.path.join(prefix, "bin", name)


def clean_env(**extra):
    """The environment without any rannc-run on PATH (the build tree's, or another install's)."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not os.path.exists(os.path.join(p, "rannc-run"))]
    env = {k: v for k, v in os.environ.items() if k not in ("RANNC_RUN", "RANNC_TORCH_PLUGIN", "MPIRUN")}
    env.update(PATH=os.pathsep.join(path), OMP_NUM_THREADS="1")
    env.update(extra)
    return env


# mpirun as root on one machine: allowed, and more ranks than cores.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_base_warn_component_unused": "0"}


def install(prefix, cmake, build_dir):
    shutil.rmtree(prefix, ignore_errors=True)
    run([cmake, "--install", build_dir, "--prefix", prefix])
    expected = [tool(prefix, "rannc-partition"), tool(prefix, "rannc-run"),
                os.path.join(prefix, "share/doc/rannc-partition/README.md"),
                os.path.join(prefix, "share/doc/rannc-partition/LICENSE"),
                os.path.join(prefix, "share/doc/rannc-partition/contract.md"),
                os.path.join(prefix, "share/doc/rannc-partition/plan-format.md"),
                os.path.join(prefix, "share/doc/rannc-partition/plan.schema.json")]
    missing = [path for path in expected if not os.path.isfile(path)]
    plugins = glob.glob(os.path.join(prefix, "lib*", "**", "librannc_torch.so"), recursive=True)
    if missing or len(plugins) != 1:
        fail(f"install: missing {missing}, plugins {plugins}")
    print("ok: installed", ", ".join(os.path.relpath(p, prefix) for p in expected + plugins))


def version_help(prefix):
    with tempfile.TemporaryDirectory() as cwd:
        env = clean_env()
        for name in ("rannc-partition", "rannc-run"):
            out = run([tool(prefix, name), "--version"], cwd=cwd, env=env).stdout
            if not re.fullmatch(rf"{name} \d+\.\d+\.\d+ \(libtorch \d+\.\d+\.\d+, ONNX \d+\.\d+\.\d+\)\n", out):
                fail(f"{name} --version: {out!r}")
            print("ok:", out.strip())
        partition = tool(prefix, "rannc-partition")
        usage = run([partition, "help"], cwd=cwd, env=env).stdout
        if "usage: rannc-partition MODEL" not in usage or "--gpus" not in usage:
            fail(f"help: {usage[:500]!r}")
        # One usage line, the options in groups people look for, then examples and the next step.
        groups = [usage.find("\n" + name) for name in ("Model:", "Cluster (", "Search (", "Embedding tables", "Output:")]
        if min(groups) < 0 or groups != sorted(groups) or usage.find("--layout") < groups[2] or usage.find("--quiet") < groups[4]:
            fail(f"help: groups Model, Cluster, Search, Embedding tables, Output in that order: {usage!r}")
        for text in ("Examples:", "--layout pp=8,dp=8", "launch.sh", "job.sbatch", "h100-80g", "80GiB"):
            if text not in usage:
                fail(f"help: no {text!r}: {usage!r}")
        for verb in ("inspect", "profile", "show", "verify", "sweep", "export"):
            text = run([partition, "help", verb], cwd=cwd, env=env).stdout
            if f"usage: rannc-partition {verb} " not in text or "Example" not in text:
                fail(f"help {verb}: {text[:500]!r}")
        for name, text in (("rannc-partition", usage), ("rannc-run", run([tool(prefix, "rannc-run"), "--help"], cwd=cwd, env=env).stdout)):
            if len(re.findall("(?im)^usage:", text)) != 1:
                fail(f"{name} --help: not exactly one usage line: {text[:300]!r}")
        if run([partition, "help", "partition"], cwd=cwd, env=env).stdout != usage:
            fail("help partition differs from help")
        one_error_line(run([partition, "help", "nothing"], expect=2, cwd=cwd, env=env), "help nothing: no such command")
        one_error_line(run([partition], expect=2, cwd=cwd, env=env), "usage: rannc-partition MODEL")
        runner = tool(prefix, "rannc-run")
        for args in ([], ["--steps", "5"]):
            one_error_line(run([runner, *args], expect=2, cwd=cwd, env=env),
                           r"^rannc-run: error: no plan given; usage: rannc-run PLAN \[--steps N .*\(see rannc-run --help\)$")
        text = run([runner, "--help"], cwd=cwd, env=env).stdout
        groups = [text.find("\n" + name + ":\n") for name in ("Positionals", "Training", "Data", "Checkpoints", "Output")]
        if min(groups) < 0 or groups != sorted(groups) or text.find("\n  --save ") < groups[3] or text.find("\n  --data ") < groups[2]:
            fail(f"rannc-run --help: PLAN, then the option groups Training, Data, Checkpoints, Output: {text!r}")
        examples = text[text.find("Examples:"):]
        for example in ("mpirun -np 8 rannc-run rannc-out/plan.json --steps 100", "--resume", "--save",
                        "rannc-out/launch.sh", "sbatch job.sbatch"):
            if example not in examples:
                fail(f"rannc-run --help: no example with {example!r}: {text!r}")
        if os.listdir(cwd):
            fail(f"help or --version wrote files: {os.listdir(cwd)}")
    print("ok: help, help COMMAND, and no arguments; rannc-run without a plan, and its grouped --help")


def train(prefix, model):
    with tempfile.TemporaryDirectory() as tmp:
        there, elsewhere, third = (os.path.join(tmp, name) for name in ("there", "elsewhere", "third"))
        for folder in (there, elsewhere, third):
            os.makedirs(folder)
        env = clean_env()
        # A relative model path and output folder, from the folder a newcomer happens to be in.
        run([tool(prefix, "rannc-partition"), os.path.relpath(model, there), *MLP_ARGS, "--gpus", "2", "--stages", "2",
             "-o", "out"], cwd=there, env=env)
        out = os.path.join(there, "out")
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        if plan["model"]["path"] != os.path.realpath(model):
            fail(f"model.path {plan['model']['path']!r} is not the model's absolute path {os.path.realpath(model)!r}")
        with open(os.path.join(out, "launch.sh")) as f:
            installed_run = os.path.join(os.path.realpath(prefix), "bin", "rannc-run")
            if f"'{installed_run}'" not in f.read():
                fail(f"launch.sh does not look for {installed_run}")
        report = os.path.join(third, "report.json")
        result = run([os.path.join(out, "launch.sh"), "--steps", "2", "--loss", "mse", "--report", report],
                     cwd=elsewhere, env=clean_env(**MPI_ENV), timeout=600)
        with open(report) as f:
            steps = json.load(f)["steps"]
        if len(steps) != 2:
            fail(f"launch.sh ran {len(steps)} steps: {result.stdout[-2000:]}")
        print(f"ok: launch.sh from another folder trained {len(plan['ranks'])} ranks, losses",
              [round(step["loss"], 4) for step in steps])
        job_sbatch(out, elsewhere, len(plan["ranks"]))
        verify = json.loads(run([tool(prefix, "rannc-partition"), "verify", os.path.relpath(os.path.join(out, "plan.json"), third),
                                 "--json"], cwd=third, env=env).stdout)
        if not verify["passed"]:
            fail(f"verify: {json.dumps(verify)}")
        print("ok: verify from a third folder")


def job_sbatch(out, tmp, ranks):
    """OUT/job.sbatch under bash as SLURM would run it, in the plan's folder: by default through
    `srun --mpi=pmix` (a stand-in srun that records its arguments and runs the ranks by mpirun),
    with RANNC_LAUNCHER=mpirun through mpirun (recorded, then the real one); any other launcher is
    one line and exit 2."""
    real_mpirun = shutil.which("mpirun")
    stubs = os.path.join(tmp, "slurm-stubs")
    os.makedirs(stubs)
    srun_log, mpirun_log = os.path.join(tmp, "srun.args"), os.path.join(tmp, "mpirun.args")
    with open(os.path.join(stubs, "srun"), "w") as f:
        f.write(f"""#!/usr/bin/env bash
printf '%s\\n' "$@" > {srun_log}
args=()
for arg in "$@"; do
  case "$arg" in --mpi=pmix|--ntasks=*) ;; *) args+=("$arg") ;; esac
done
exec {real_mpirun} -np {ranks} "${{args[@]}}"
""")
    with open(os.path.join(stubs, "mpirun"), "w") as f:
        f.write(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > {mpirun_log}\nexec {real_mpirun} \"$@\"\n")
    for name in ("srun", "mpirun"):
        os.chmod(os.path.join(stubs, name), 0o755)
    env = clean_env(**MPI_ENV)
    env["PATH"] = stubs + os.pathsep + env["PATH"]
    job = os.path.join(out, "job.sbatch")

    def recorded(path):
        if not os.path.exists(path):
            return None
        with open(path) as f:
            args = f.read().splitlines()
        os.remove(path)
        return args

    plan_path = os.path.realpath(os.path.join(out, "plan.json"))

    def runs_the_plan(args, report):
        """rannc-run, the plan and the arguments job.sbatch was given, after the launcher's own."""
        return len(args) == 8 and os.path.realpath(args[1]) == plan_path and \
            args[2:] == ["--steps", "2", "--loss", "mse", "--report", report]

    for launcher in ("", "mpirun"):
        report = os.path.join(tmp, f"job_report_{launcher or 'srun'}.json")
        run_env = dict(env, RANNC_LAUNCHER=launcher) if launcher else env
        result = run(["bash", job, "--steps", "2", "--loss", "mse", "--report", report], cwd=out, env=run_env)
        srun_args, mpirun_args = recorded(srun_log), recorded(mpirun_log)
        with open(report) as f:
            steps = json.load(f)["steps"]
        if len(steps) != 2:
            fail(f"job.sbatch ({launcher or 'srun'}) ran {len(steps)} steps: {result.stdout[-2000:]}")
        if not launcher:
            if mpirun_args is not None or not srun_args or srun_args[:2] != ["--mpi=pmix", f"--ntasks={ranks}"] or \
                    not runs_the_plan(srun_args[2:], report):
                fail(f"job.sbatch ran srun {srun_args}, mpirun {mpirun_args}")
        elif srun_args is not None or not mpirun_args or mpirun_args[:2] != ["-np", str(ranks)] or \
                not runs_the_plan(mpirun_args[2:], report):
            fail(f"job.sbatch with RANNC_LAUNCHER=mpirun ran srun {srun_args}, mpirun {mpirun_args}")
        print(f"ok: job.sbatch by {launcher or 'srun --mpi=pmix'} trained {ranks} ranks, losses",
              [round(step["loss"], 4) for step in steps])
    one_error_line(run(["bash", job], expect=2, cwd=out, env=dict(env, RANNC_LAUNCHER="bogus")),
                   re.escape("job.sbatch: RANNC_LAUNCHER=bogus: must be srun (the default) or mpirun"))
    if recorded(srun_log) is not None or recorded(mpirun_log) is not None:
        fail("job.sbatch with RANNC_LAUNCHER=bogus started a launcher")
    print("ok: RANNC_LAUNCHER=bogus: one line, exit 2")


def folder(prefix, model, bad_model):
    partition = tool(prefix, "rannc-partition")
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = os.path.join(tmp, "new", "out")
        # No plan: the model does not fit, or is not there.
        run([partition, model, *MLP_ARGS, "--gpus", "2", "--mem", "1K", "-o", fresh], expect=1, cwd=tmp, env=env)
        run([partition, os.path.join(tmp, "missing.pt"), *MLP_ARGS, "-o", fresh], expect=2, cwd=tmp, env=env)
        # A plan, but its stage files fail partition's check: the folder it made goes again.
        run([partition, bad_model, "--input", "x:4x8", "--device", "cpu", "--gpus", "3", "--stages", "3", "-o", fresh],
            expect=2, cwd=tmp, env=env)
        if os.listdir(tmp):
            fail(f"failed runs left {os.listdir(tmp)} behind")
        print("ok: failed runs leave no folder")

        out = os.path.join(tmp, "out")
        run([partition, model, *MLP_ARGS, "--gpus", "2", "--stages", "2", "-o", out], cwd=tmp, env=env)
        for name in ("stage_7.pt", "notes.txt", "stage_x.pt"):
            with open(os.path.join(out, name), "w") as f:
                f.write("not from this plan\n")
        run([partition, model, *MLP_ARGS, "--gpus", "1", "-o", out], cwd=tmp, env=env)
        left = sorted(os.listdir(out))
        if "stage_1.pt" in left or "stage_7.pt" in left or "notes.txt" not in left or "stage_x.pt" not in left:
            fail(f"after a 1-stage plan over a 2-stage one: {left}")
        # A failed run into a folder that was there keeps the folder and its other files.
        run([partition, model, *MLP_ARGS, "--gpus", "2", "--mem", "1K", "-o", out], expect=1, cwd=tmp, env=env)
        if "notes.txt" not in os.listdir(out):
            fail(f"a failed run removed files it did not write: {sorted(os.listdir(out))}")
        print("ok: stale stage files removed, other files kept:", left)


def no_runtime(prefix, model):
    with tempfile.TemporaryDirectory() as tmp:
        # An install of rannc-partition alone: no rannc-run beside it.
        alone = os.path.join(tmp, "alone")
        os.makedirs(os.path.join(alone, "bin"))
        shutil.copy2(tool(prefix, "rannc-partition"), os.path.join(alone, "bin"))
        for lib in glob.glob(os.path.join(prefix, "lib*")):
            shutil.copytree(lib, os.path.join(alone, os.path.basename(lib)))
        out = os.path.join(tmp, "out")
        run([os.path.join(alone, "bin", "rannc-partition"), model, *MLP_ARGS, "--gpus", "2", "--stages", "2",
             "--plan-only", "-o", out], cwd=tmp, env=clean_env())
        launch, job = os.path.join(out, "launch.sh"), os.path.join(out, "job.sbatch")
        one_error_line(run([launch], expect=2, cwd=tmp, env=clean_env()), re.escape("launch.sh: " + NO_RUNTIME))
        one_error_line(run(["bash", job], expect=2, cwd=out, env=clean_env()), re.escape("job.sbatch: " + NO_RUNTIME))
        print("ok: no rannc-run anywhere: one line, exit 2")

        # A stand-in mpirun that prints what it would run; RANNC_RUN first, then PATH.
        stubs = os.path.join(tmp, "stubs")
        os.makedirs(stubs)
        for name in ("mpirun", "rannc-run"):
            with open(os.path.join(stubs, name), "w") as f:
                f.write("#!/bin/sh\necho \"$@\"\n")
            os.chmod(os.path.join(stubs, name), 0o755)
        on_path = clean_env()
        on_path["PATH"] = stubs + os.pathsep + on_path["PATH"]
        args = run([launch], cwd=tmp, env=on_path).stdout.split()
        if args[2] != os.path.join(stubs, "rannc-run"):
            fail(f"launch.sh with rannc-run on PATH ran {args}")
        args = run([launch], cwd=tmp, env={**on_path, "RANNC_RUN": "/opt/my/rannc-run"}).stdout.split()
        if args[2] != "/opt/my/rannc-run":
            fail(f"launch.sh with RANNC_RUN ran {args}")
        print("ok: RANNC_RUN, else rannc-run on PATH")


def main():
    check, prefix, *args = sys.argv[1:]
    checks = {"install": install, "version-help": version_help, "train": train, "folder": folder, "no-runtime": no_runtime}
    if check not in checks:
        fail(f"unknown check {check}")
    checks[check](prefix, *args)


if __name__ == "__main__":
    main()
