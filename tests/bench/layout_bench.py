#!/usr/bin/python3
"""Our plans against the layouts people write by hand, and against published throughput.

For each case, `plan_quality layouts` (tests/quality/plan_quality.cpp) enumerates the layouts a
person would write for Megatron-LM or DeepSpeed without tensor parallelism (equal layers per
stage, power-of-two pipeline and data-parallel degrees, every power-of-two microbatch size,
recomputation on or off, sharded optimizer state on or off), costs and simulates each under the
same model as our plan, and prints the best per stage count against ours.

Published figures are Megatron-LM's (Narayanan et al., "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21, Table 1), with tensor parallelism 8. The paper
counts the recomputed forward pass (4 passes' FLOPs per step instead of 3); our model FLOP/s count
3, so the comparable figure is 3/4 of the published one.

usage: layout_bench.py BUILD_DIR
"""
import os
import subprocess
import sys
import time

CASES = [  # model, GPUs, batch, device, precision, published model TFLOP/s per GPU (or None) and its source
    ("gpt3-175b", 1024, 1536, "a100-80g", "bf16-mixed", 140 * 3 / 4, "Megatron-LM: 140 TFLOP/s counting recomputation"),
    ("gpt-39b", 512, 1536, "a100-80g", "bf16-mixed", 138 * 3 / 4, "Megatron-LM: 138 TFLOP/s counting recomputation"),
    ("bert-5b", 256, 1024, "v100-32g", "fp16-mixed", None, ""),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    binary = os.path.join(build, "bin", "plan_quality")
    if not os.path.exists(binary):
        binary = os.path.join(build, "tests", "quality", "plan_quality")
    failed = False
    for model, gpus, batch, device, precision, published, source in CASES:
        path = os.path.join(build, "samples", "shape_only", model + ".onnx")
        start = time.monotonic()
        result = subprocess.run([binary, "layouts", path, str(gpus), str(batch), device, precision],
                                capture_output=True, text=True)
        print(result.stdout, end="")
        print(result.stderr, end="")
        print(f"({time.monotonic() - start:.1f} s)")
        if published:
            print(f"published: {published:.1f} model TFLOP/s per GPU ({source}, x 3/4)")
        print()
        failed = failed or result.returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
