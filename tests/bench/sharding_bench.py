#!/usr/bin/python3
"""The embedding-table sharding planner (sharding/sharding_planner.h) on the shape-only DLRMs:
planning time, the slowest rank's embedding step, max/mean over ranks, peak memory per device and
the sharding types chosen; a model that fits nowhere prints what it needs.

usage: sharding_bench.py BUILD_DIR SHAPE_ONLY_DIR
"""
import os
import subprocess
import sys

CASES = [  # model, devices, memory per device, batch per rank
    ("dlrm-kaggle", 8, "80G", 512),
    ("dlrm-mlperf-v1", 8, "40G", 512),
    ("dlrm-mlperf-v1", 4, "16G", 512),
    ("dlrm-mlperf-v2", 16, "80G", 4096),
    ("dlrm-synthetic-1000", 128, "80G", 512),
    ("dlrm-12t", 128, "80G", 512),
]


def main():
    build, shape_only = sys.argv[1:3]
    tool = os.path.join(build, "bin", "plan_quality")
    for model, devices, mem, batch in CASES:
        result = subprocess.run([tool, "sharding", os.path.join(shape_only, model + ".onnx"), str(devices), mem,
                                 str(batch)], capture_output=True, text=True, timeout=600)
        print((result.stdout or result.stderr).strip().replace(shape_only + "/", ""))


if __name__ == "__main__":
    main()
