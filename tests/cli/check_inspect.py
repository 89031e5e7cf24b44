"""Checks `rannc-partition inspect --json` on one generated sample, in every format it was
written in, against the numbers PyTorch reported when the sample was generated.

usage: check_inspect.py BINARY SAMPLES_DIR MODEL_NAME
"""
import json
import subprocess
import sys


def inspect(binary, path, input_args):
    command = [binary, "inspect", path, "--json"] + [f"--input={spec}" for spec in input_args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def check_format(report, expected, label):
    problems = []
    if report["params"] != expected["params"]:
        problems.append(f"params {report['params']} != PyTorch's {expected['params']}")
    expected_inputs = [(i["name"], i["shape"], i["dtype"]) for i in expected["inputs"]]
    got_inputs = [(i["name"], i["shape"], i["dtype"]) for i in report["inputs"]]
    if got_inputs != expected_inputs:
        problems.append(f"inputs {got_inputs} != {expected_inputs}")
    expected_shapes = [o["shape"] for o in expected["outputs"]]
    got_shapes = [o["shape"] for o in report["outputs"]]
    if got_shapes != expected_shapes:
        problems.append(f"output shapes {got_shapes} != {expected_shapes}")
    if report["nodes"] <= 0 or report["flops_fwd"] <= 0:
        problems.append(f"nodes {report['nodes']} and flops_fwd {report['flops_fwd']} must be positive")
    print(f"{label:>7}: params {report['params']:>12,}  nodes {report['nodes']:>5}  "
          f"flops_fwd {report['flops_fwd']:.3e}  buffers {report['buffers']:,}")
    return [f"{label}: {p}" for p in problems]


def main():
    binary, samples_dir, name = sys.argv[1:4]
    with open(f"{samples_dir}/manifest.json") as f:
        expected = json.load(f)["models"][name]
    problems = []
    for label, file_name in sorted(expected["files"].items()):
        report = inspect(binary, f"{samples_dir}/{file_name}", expected["input_args"])
        problems += check_format(report, expected, label)
    if problems:
        sys.exit("FAILED:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
