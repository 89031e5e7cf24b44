#!/usr/bin/python3
"""Write the traced TorchScript models of tests/unit/tensor_regions_test.cpp into --out.

gpt.trace.pt: the sample GPT of samples/sample_models.py (fused QKV split three ways, heads
reshaped out of the hidden dim, a tied LM head), 2 layers, input tokens:2x32:int64.
encoder_layer.trace.pt: torch's own nn.TransformerEncoderLayer, batch first (its MultiheadAttention
views the projections as [seq, batch * heads, head_dim]), 4 heads, a 256-wide MLP, input x:4x6x64.
gpt_odd_vocab.trace.pt: the sample GPT with a vocabulary of 1001 tokens, which no degree above 1 divides
(tensor ranks hold slices one row apart, as torch.tensor_split cuts them), 2 layers, input tokens:8x32:int64.
scaled_mlp.trace.pt: an MLP whose hidden activations a learnable scalar scales inside its region, input x:8x16x32.
encoder.trace.pt: torch's nn.TransformerEncoder of 4 such layers (d_model 64, a 128-wide MLP) without
dropout, for rannc-run's tensor-parallel training against one process, input x:8x16x64.
gpt_attention_dropout.trace.pt: the sample GPT (4 layers, width 64, 4 heads, a vocabulary of 1024) on a
sequence of 128, with dropout (p=0.1) on its attention weights, inside each attention core: selective
recomputation must draw the same masks again, and frees activations that stand out, input tokens:8x128:int64.
fused_mlp.trace.pt and fused_mlp.onnx: two pre-norm SwiGLU MLP blocks whose gate and up projections
are one linear cut in halves by slicing (ONNX Slice along the split dim, a fused weight of 2 parts),
for the tensor ranks' cut of ONNX stages against the trace, input x:8x8x32.
Run with /usr/bin/python3 (the interpreter that has torch).
"""

import argparse
import os
import sys
import warnings

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples"))
from sample_models import Gpt, SelfAttention  # noqa: E402


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer whose forward argument is named x."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256, dropout=0.1,
                                                batch_first=True)

    def forward(self, x):
        return self.layer(x)


class Encoder(nn.Module):
    """nn.TransformerEncoder without dropout, so that training is deterministic."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=4)

    def forward(self, x):
        return self.encoder(x)


class DropoutAttention(SelfAttention):
    """The sample's attention with dropout on the attention weights, between the softmax and the
    product with V."""

    def attend(self, scores, v):
        return torch.matmul(nn.functional.dropout(torch.softmax(scores, dim=-1), 0.1, self.training), v)


def attention_dropout_gpt():
    # A sequence of 128 over a width of 64: the cores' [batch, heads, 128, 128] activations stand out.
    model = Gpt(vocab=1024, d_model=64, n_layers=4, n_heads=4, max_len=128)
    for block in model.blocks:
        block.attn.__class__ = DropoutAttention  # the same weights, attention dropout added
    return model


class FusedMlp(nn.Module):
    """x + down(silu(gate) * up) after a LayerNorm, gate and up the halves of one linear."""

    def __init__(self, d=32, hidden=64):
        super().__init__()
        self.hidden = hidden
        self.norm = nn.LayerNorm(d)
        self.gate_up = nn.Linear(d, 2 * hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        gate_up = self.gate_up(self.norm(x))
        gate, up = gate_up[:, :, :self.hidden], gate_up[:, :, self.hidden:]
        return x + self.down(torch.sigmoid(gate) * gate * up)


class ScaledMlp(nn.Module):
    """An MLP whose hidden activations a learnable scalar scales: a weight its tensor-parallel region
    reads whole, whose gradient each rank has only in part."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 128)
        self.fc2 = nn.Linear(128, 32)
        self.alpha = nn.Parameter(torch.full((1,), 0.5))

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)) * self.alpha)


def save_traced(model, example, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about dropout's randomness
        torch.jit.trace(model.train(), example, check_trace=False).save(path)
    print("wrote", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    save_traced(Gpt(n_layers=2), (torch.zeros(2, 32, dtype=torch.long),), os.path.join(args.out, "gpt.trace.pt"))
    save_traced(EncoderLayer(), (torch.randn(4, 6, 64),), os.path.join(args.out, "encoder_layer.trace.pt"))
    save_traced(Encoder(), (torch.randn(8, 16, 64),), os.path.join(args.out, "encoder.trace.pt"))
    save_traced(ScaledMlp(), (torch.randn(8, 16, 32),), os.path.join(args.out, "scaled_mlp.trace.pt"))
    save_traced(Gpt(vocab=1001, n_layers=2), (torch.zeros(8, 32, dtype=torch.long),),
                os.path.join(args.out, "gpt_odd_vocab.trace.pt"))
    fused = nn.Sequential(FusedMlp(), FusedMlp()).train()
    example = torch.randn(8, 8, 32)
    save_traced(fused, (example,), os.path.join(args.out, "fused_mlp.trace.pt"))
    torch.onnx.export(fused, (example,), os.path.join(args.out, "fused_mlp.onnx"), opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})
    print("wrote", os.path.join(args.out, "fused_mlp.onnx"))
    save_traced(attention_dropout_gpt(), (torch.zeros(8, 128, dtype=torch.long),),
                os.path.join(args.out, "gpt_attention_dropout.trace.pt"))


if __name__ == "__main__":
    main()
