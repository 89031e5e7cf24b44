#!/usr/bin/env python3
"""Trace the models of the GPU benchmark (docs/gpu.md) into --out: the MLP, GPT and BERT samples
(samples/sample_models.py, at their sizes) and a BERT-style and a GPT-style model of realistic
width (hidden 1024, 16 heads, 8 layers, sequence 256), and torchvision's ResNet-50 at batch 32.
Prints one line per model: NAME FILE INPUT, INPUT being rannc-partition's --input for it.

usage: gpu_models.py --out DIR
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples"))
import sample_models  # noqa: E402

WIDE_LEN = 256


def models():
    g = torch.Generator().manual_seed(1234)
    yield "mlp", sample_models.Mlp([64, 128, 128, 64, 32, 10]), torch.randn(4, 64, generator=g), "x:32x64"
    tokens = torch.randint(0, 8192, (2, 32), generator=g)
    yield "gpt", sample_models.Gpt(), tokens, "tokens:8x32:int64"
    yield "bert", sample_models.Bert(), tokens, "tokens:8x32:int64"
    wide_tokens = torch.randint(0, 32768, (2, WIDE_LEN), generator=g)
    yield ("gpt_wide", sample_models.Gpt(vocab=32768, d_model=1024, n_layers=8, n_heads=16, max_len=WIDE_LEN),
           wide_tokens, "tokens:8x%d:int64" % WIDE_LEN)
    yield ("bert_wide", sample_models.Bert(vocab=32768, d_model=1024, n_layers=8, n_heads=16, d_ff=4096,
                                           max_len=WIDE_LEN), wide_tokens, "tokens:8x%d:int64" % WIDE_LEN)
    import torchvision
    yield "resnet50", torchvision.models.resnet50(), torch.randn(2, 3, 224, 224, generator=g), "x:32x3x224x224"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    for name, model, example, spec in models():
        path = os.path.join(args.out, name + ".trace.pt")
        if not os.path.exists(path):
            torch.jit.trace(model.train(), (example,)).save(path)
        print(name, path, spec, flush=True)


if __name__ == "__main__":
    main()
