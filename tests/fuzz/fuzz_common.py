"""Shared by the fuzzer and the hostile-input cases: running a command under a time limit and
judging the result against the error contract (exit 0, or exit 1/2 with exactly one line on
stderr; never a signal, a crash message, a Python traceback or a hang).
"""
import json
import math
import os
import re
import signal
import subprocess
import time

CRASH_SIGNS = ("terminate called", "what():", "Segmentation fault", "core dumped", "Traceback (most recent call last)",
               "Aborted", "AddressSanitizer", "runtime error:", "stack smashing", "double free", "free(): ",
               "malloc(): ", "corrupted size", "std::bad_alloc", "Assertion `", "assertion failed", "Fatal Python error",
               "SIGSEGV", "SIGABRT", "Signal: Segmentation", "signal 11", "signal 6", "exited on signal")

# An error line longer than this is not "one short clear line" (e.g. a 3 MB value quoted whole).
MAX_LINE = 4096

# mpirun prints these when a rank dies; they are crash signs too, but only for rannc-run.
MPI_CRASH_SIGNS = ("exited on signal", "noticed that process rank")


class Result:
    def __init__(self, command, returncode, stdout, stderr, seconds, timed_out):
        self.command = command
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.timed_out = timed_out

    @property
    def lines(self):
        return [line for line in self.stderr.splitlines()]

    def describe_status(self):
        if self.timed_out:
            return "timeout after %.0f s" % self.seconds
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = "signal %d" % -self.returncode
            return "killed by %s" % name
        return "exit %d" % self.returncode


def run(command, timeout, cwd=None, env=None):
    """Runs command in its own process group; on timeout kills the whole group."""
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               cwd=cwd, env=env, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = process.communicate()
    seconds = time.monotonic() - start
    return Result(command, process.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"),
                  seconds, timed_out)


def is_verify_verdict(result):
    """verify's own verdict: exit 1 with the comparison on stdout ending in a FAIL line, stderr empty."""
    return result.returncode == 1 and not result.stderr.strip() and re.search(r"^FAIL: ", result.stdout, re.MULTILINE)


def contract_problems(result, allowed=(0, 1, 2), mpi=False, verdict=False):
    """What is wrong with a result under the error contract; [] when it keeps it. verdict: the
    command is verify, whose exit 1 may be a comparison that failed (stdout), not an error."""
    problems = []
    if verdict and is_verify_verdict(result):
        found = [s for s in CRASH_SIGNS if s in result.stdout]
        return ["crash signs: %s" % ", ".join(repr(s) for s in found)] if found else []
    if result.timed_out:
        problems.append("timeout (%.0f s)" % result.seconds)
    elif result.returncode < 0 or result.returncode >= 128:
        problems.append(result.describe_status())
    elif result.returncode not in allowed:
        problems.append("exit %d, expected one of %s" % (result.returncode, "/".join(map(str, allowed))))
    lines = strip_mpirun_banner(result.lines) if mpi else result.lines
    if result.returncode not in (0, None) and not result.timed_out and len(lines) != 1:
        problems.append("%d lines on stderr, expected 1" % len(lines))
    if lines and max(len(line) for line in lines) > MAX_LINE:
        problems.append("stderr line of %d chars (not a short line)" % max(len(line) for line in lines))
    signs = CRASH_SIGNS + (MPI_CRASH_SIGNS if mpi else ())
    found = [s for s in signs if s in result.stderr or s in result.stdout]
    if found:
        problems.append("crash signs: %s" % ", ".join(repr(s) for s in found))
    return problems


def strip_mpirun_banner(lines):
    """stderr lines without mpirun's own report of a non-zero exit (blocks between dashed lines)."""
    kept, inside = [], False
    for line in lines:
        if re.fullmatch(r"-{20,}", line.strip()):
            inside = not inside
            continue
        if not inside:
            kept.append(line)
    return kept


def _reject_constant(name):
    raise ValueError("non-finite number %s" % name)


def non_finite_numbers(path):
    """Problems of a written JSON file: not strict JSON, NaN/Infinity, or null where a number of a
    prediction belongs ('predicted' objects, times, sizes)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        return ["%s: %s" % (os.path.basename(path), str(e)[:200])]
    problems = []

    def walk(value, where, numeric_context):
        if len(problems) > 5:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, "%s.%s" % (where, key), numeric_context or key == "predicted" or
                     re.search(r"(_ms|_s|_bytes|_fraction|_per_s)$", key) is not None)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, "%s[%d]" % (where, i), numeric_context)
        elif value is None and numeric_context:
            problems.append("%s is null" % where)
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append("%s is %r" % (where, value))

    walk(data, os.path.basename(path), False)
    return problems


def shell_quote(command):
    import shlex
    return " ".join(shlex.quote(str(c)) for c in command)


def mpirun_prefix():
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "1"]


def quiet_env():
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    # Open MPI: keep its own chatter (e.g. about missing network interfaces) off stderr.
    env.setdefault("OMPI_MCA_btl_base_warn_component_unused", "0")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return env
