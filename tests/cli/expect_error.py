"""Runs a command that must fail cleanly: the expected exit status, exactly one line on stderr
that matches a pattern, and no sign of a crash.

usage: expect_error.py [--max-length=N] STATUS PATTERN -- COMMAND [ARGS...]

--max-length=N also requires the line to be at most N characters (a quoted value kept short).
"""
import re
import subprocess
import sys

CRASH_SIGNS = ("terminate called", "Segmentation fault", "core dumped", "Traceback", "Aborted", "what():")


def main():
    args = sys.argv[1:]
    max_length = None
    if args[0].startswith("--max-length="):
        max_length = int(args.pop(0).split("=", 1)[1])
    separator = args.index("--")
    status, pattern = int(args[0]), args[1]
    command = args[separator + 1:]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = result.stderr.splitlines()
    problems = []
    if result.returncode != status:
        problems.append(f"exit status {result.returncode}, expected {status}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, expected 1")
    if not re.search(pattern, result.stderr):
        problems.append(f"stderr does not match {pattern!r}")
    if max_length is not None and any(len(line) > max_length for line in lines):
        problems.append(f"a line of {max(map(len, lines))} characters, more than {max_length}")
    if any(sign in result.stderr for sign in CRASH_SIGNS):
        problems.append("stderr shows a crash")
    if problems:
        print("command:", " ".join(command))
        print("stderr:", result.stderr[:4000])
        print("stdout:", result.stdout[:2000])
        sys.exit("FAILED: " + "; ".join(problems))
    print("ok:", lines[0])


if __name__ == "__main__":
    main()
