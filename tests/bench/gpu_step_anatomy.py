#!/usr/bin/env python3
"""What bounds a training step on this GPU (docs/gpu.md): for each model of gpu_models.py, the
median wall time of a step (forward, rannc-run's loss, backward; TF32 off) against the time its
kernels keep the GPU busy, from torch.profiler. A step whose kernels take much less than its wall
time is bound by the host's dispatch, one whose kernels take nearly all of it by the GPU.

usage: gpu_step_anatomy.py --models DIR
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def example(spec):
    name, shape, *dtype = spec.split(":")
    dims = [int(d) for d in shape.split("x")]
    if dtype and dtype[0] == "int64":
        return torch.zeros(dims, dtype=torch.int64, device="cuda")
    return torch.randn(dims, device="cuda")


def loss_of(output):
    if isinstance(output, (tuple, list)):
        output = output[0]
    logits = output.float().reshape(-1, output.shape[-1])
    return torch.nn.functional.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long, device="cuda"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    listing = subprocess.run([sys.executable, os.path.join(HERE, "gpu_models.py"), "--out", args.models],
                             check=True, capture_output=True, text=True).stdout
    print("%-10s %10s %12s %10s" % ("model", "step ms", "kernels ms", "busy"))
    for line in listing.splitlines():
        name, path, spec = line.split()
        module = torch.jit.load(path, map_location="cuda").train()
        x = example(spec)

        def step():
            loss_of(module(x)).backward()

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages())
        wall = statistics.median(times)
        print("%-10s %10.3f %12.3f %9.0f%%" % (name, wall, kernel_us / 1e3, 100 * kernel_us / 1e3 / wall), flush=True)
        del module


if __name__ == "__main__":
    main()
