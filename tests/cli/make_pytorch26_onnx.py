"""Exports check_onnx_ops.py's ModernNet the way PyTorch 2.x users do, with the exporter of
PyTorch 2.6 (Debian 13's python3-torch), at opsets 18 and 20, and stores fixed inputs with PyTorch
2.6's own outputs for them: tests/cli/pytorch26/modern_opset{18,20}.onnx and modern.npz. The
Debian 12 suite (PyTorch 1.13, which writes opsets up to 17) reads the committed files.

usage (in a Debian 13 root, see ../../shared/docs/TOOLCHAIN.md):
    python3 tests/cli/make_pytorch26_onnx.py [OUT_DIR]      (default: tests/cli/pytorch26)
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_onnx_ops import MODERN_INPUTS, PYTORCH26_CASES, ModernNet  # noqa: E402

SAMPLES = 16  # two microbatches of check_onnx_ops.py's plans


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch26")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = ModernNet().train()
    names = [n for n, _ in MODERN_INPUTS]
    example = tuple(torch.randn([2] + shape[1:]) for _, shape in MODERN_INPUTS)
    inputs = tuple(torch.randn([SAMPLES] + shape[1:]) for _, shape in MODERN_INPUTS)
    with torch.no_grad():
        outputs = model(*inputs)
    for name, opset in PYTORCH26_CASES.items():
        path = os.path.join(out_dir, name + ".onnx")
        torch.onnx.export(model, example, path, input_names=names, output_names=[f"out{i}" for i in range(len(outputs))],
                          dynamic_axes={n: {0: "batch"} for n in names}, opset_version=opset, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        print(f"{path}: {os.path.getsize(path)} bytes, PyTorch {torch.__version__}, opset {opset}")
    arrays = {f"input_{n}": t.numpy() for n, t in zip(names, inputs)}
    arrays.update({f"out{i}": t.numpy() for i, t in enumerate(outputs)})
    np.savez_compressed(os.path.join(out_dir, "modern.npz"), torch_version=np.array(torch.__version__), **arrays)


if __name__ == "__main__":
    main()
