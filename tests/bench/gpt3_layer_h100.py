#!/usr/bin/python3
"""Predicted forward time of one GPT-3 175B layer on an H100 against published throughput.

The layer's time is the difference between the 2-layer and the 1-layer shape-only GPT-3
models (so embedding and head cancel), from `rannc-partition inspect --device h100-80g
--precision bf16-mixed --batch 1` (sequence 2048).

Reference: NVIDIA's Megatron-LM README (Megatron Core performance) reports up to 47% model
FLOP utilisation on H100 for GPT models from 2B to 462B parameters. At the H100 SXM's dense
BF16 peak of 989 TFLOP/s that is 465 TFLOP/s, and a layer's forward FLOPs are
24*b*s*h^2 + 4*b*s^2*h (Narayanan et al., SC'21, equation 3 without the head), so the implied
forward time is FLOPs / 465 TFLOP/s. The activations a layer keeps for backward in 16-bit
training, s*b*h*(34 + 5*a*s/h) bytes (Korthikanti et al., "Reducing Activation Recomputation
in Large Transformer Models", 2022), are compared with the memory model's.

usage: gpt3_layer_h100.py BINARY SHAPE_ONLY_DIR
"""
import json
import subprocess
import sys

H100_BF16_PEAK = 989e12
PUBLISHED_MFU = 0.47
SEQ, HIDDEN, HEADS, BATCH = 2048, 12288, 96, 1


def predict(binary, path):
    out = subprocess.run([binary, "inspect", path, "--json", "--batch", str(BATCH), "--device", "h100-80g",
                          "--precision", "bf16-mixed"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["predicted"]


def main():
    binary, folder = sys.argv[1:3]
    one = predict(binary, f"{folder}/gpt3-175b-1layer.onnx")
    two = predict(binary, f"{folder}/gpt3-175b-2layer.onnx")
    fwd_ms = two["fwd_ms"] - one["fwd_ms"]
    bwd_ms = two["bwd_ms"] - one["bwd_ms"]
    kept = two["memory_bytes"]["activations"] - one["memory_bytes"]["activations"]
    flops = 24 * BATCH * SEQ * HIDDEN ** 2 + 4 * BATCH * SEQ ** 2 * HIDDEN
    implied_ms = flops / (PUBLISHED_MFU * H100_BF16_PEAK) * 1e3
    published_kept = SEQ * BATCH * HIDDEN * (34 + 5 * HEADS * SEQ / HIDDEN)
    print(f"GPT-3 175B layer, batch {BATCH}, sequence {SEQ}, H100 SXM, bf16 mixed precision")
    print(f"{'quantity':<28} {'predicted':>12} {'published':>12} {'ratio':>7}")
    print(f"{'forward time (ms)':<28} {fwd_ms:>12.2f} {implied_ms:>12.2f} {fwd_ms / implied_ms:>7.2f}")
    print(f"{'backward / forward (2x rule)':<28} {bwd_ms / fwd_ms:>12.2f} {2.0:>12.2f} {bwd_ms / fwd_ms / 2:>7.2f}")
    print(f"{'activations (GiB)':<28} {kept / 2**30:>12.2f} {published_kept / 2**30:>12.2f} {kept / published_kept:>7.2f}")
    if not 0.5 <= fwd_ms / implied_ms <= 2.0:
        sys.exit("FAILED: the forward time is not within 2x of the published figure")


if __name__ == "__main__":
    main()
