"""Planning evaluates the model at a few samples whatever --input says: inspect ResNet-50 at a
batch of 64 224x224 images (a forward at that batch keeping every intermediate took 24 GB and
the OOM killer) and check the peak memory of the process, and that the shapes and FLOPs are those
of the requested batch.

usage: check_evaluation_memory.py RANNC MODEL INPUT_NAME
"""
import json
import resource
import subprocess
import sys

LIMIT_BYTES = 3 << 30  # libtorch and ResNet-50's weights take well under 1 GiB


def inspect(rannc, model, spec):
    result = subprocess.run([rannc, "inspect", model, "--input", spec, "--json"], capture_output=True, text=True,
                            timeout=600)
    if result.returncode != 0:
        sys.exit(f"FAILED: inspect --input {spec}: exit {result.returncode}: {result.stderr}")
    return json.loads(result.stdout)


def main():
    rannc, model, name = sys.argv[1:4]
    small = inspect(rannc, model, f"{name}:2x3x224x224")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    large = inspect(rannc, model, f"{name}:64x3x224x224")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    problems = []
    if peak > LIMIT_BYTES and peak > before:
        problems.append(f"peak memory {peak / 2**30:.2f} GiB at a batch of 64, limit {LIMIT_BYTES / 2**30:.0f} GiB")
    if large["inputs"][0]["shape"] != [64, 3, 224, 224]:
        problems.append(f"input shape {large['inputs'][0]['shape']}, expected [64, 3, 224, 224]")
    if large["outputs"][0]["shape"][0] != 64:
        problems.append(f"output shape {large['outputs'][0]['shape']}, expected a batch of 64")
    ratio = large["flops_fwd"] / small["flops_fwd"]
    if abs(ratio - 32) > 0.32:
        problems.append(f"forward FLOPs at 64 are {ratio:.3f} x those at 2, expected 32")
    if problems:
        sys.exit("FAILED: " + "; ".join(problems))
    print(f"ok: batch 64 inspected with a peak of {peak / 2**20:.0f} MiB; FLOPs 64/2 = {ratio:.4f}")


if __name__ == "__main__":
    main()
