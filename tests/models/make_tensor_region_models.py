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
llama.trace.pt: a Llama-style decoder as Hugging Face's LlamaModel writes it (RMSNorm, rotary
embeddings, grouped-query attention of 4 query heads over 2 key/value heads through repeat_kv, a
SwiGLU MLP, an untied head), its attention written out (scores, causal mask, softmax, the product
with V) as torch 1.13 has no scaled_dot_product_attention, 4 layers of width 64 and a vocabulary
of 256, input tokens:8x64:int64.
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


# The Llama-style decoder of tests/modern/make_modern_corpus.py written out again: that script is
# hashed into its fixtures' manifest, and its attention is scaled_dot_product_attention, which
# torch 1.13 lacks.
class RmsNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n_rep):
    batch, kv_heads, seq, head_dim = x.shape
    x = x[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, head_dim)
    return x.reshape(batch, kv_heads * n_rep, seq, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, dim, heads, kv_heads, context):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)
        self.register_buffer("causal", torch.tril(torch.ones(context, context, dtype=torch.bool)), persistent=False)

    def forward(self, x, cos, sin):
        shape = (*x.shape[:-1], -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        seq = x.shape[1]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (self.head_dim ** -0.5)
        scores = scores.masked_fill(~self.causal[:seq, :seq], float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))


class LlamaLayer(nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden, context):
        super().__init__()
        self.input_layernorm = RmsNorm(dim)
        self.self_attn = LlamaAttention(dim, heads, kv_heads, context)
        self.post_attention_layernorm = RmsNorm(dim)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab=256, dim=64, layers=4, heads=4, kv_heads=2, hidden=176, context=64):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.layers = nn.ModuleList(LlamaLayer(dim, heads, kv_heads, hidden, context) for _ in range(layers))
        self.norm = RmsNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        positions = torch.arange(tokens.shape[1], dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


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
    save_traced(Llama(), (torch.zeros(8, 64, dtype=torch.long),), os.path.join(args.out, "llama.trace.pt"))


if __name__ == "__main__":
    main()
