"""Runs a command that must fail cleanly: the expected exit status, exactly one line on stderr
that matches a pattern, and no sign of a crash.

usage: expect_error.py STATUS PATTERN -- COMMAND [ARGS...]
"""
import re
import subprocess
import sys

CRASH_SIGNS = ("terminate called", "Segmentation fault", "core dumped", "Traceback", "Aborted", "what():")


def main():
    separator = sys.argv.index("--")
    status, pattern = int(sys.argv[1]), sys.argv[2]
    command = sys.argv[separator + 1:]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = result.stderr.splitlines()
    problems = []
    if result.returncode != status:
        problems.append(f"exit status {result.returncode}, expected {status}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, expected 1")
    if not re.search(pattern, result.stderr):
        problems.append(f"stderr does not match {pattern!r}")
    if any(sign in result.stderr for sign in CRASH_SIGNS):
        problems.append("stderr shows a crash")
    if problems:
        print("command:", " ".join(command))
        print("stderr:", result.stderr)
        print("stdout:", result.stdout[:2000])
        sys.exit("FAILED: " + "; ".join(problems))
    print("ok:", lines[0])


if __name__ == "__main__":
    main()
