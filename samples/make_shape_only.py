#!/usr/bin/python3
"""Build shape-only ONNX models (transformers and DLRMs): a graph and dims, but no weights.

Every initializer is marked as external data (in "<name>.weights", with the offset and
length it would have), but that file is never written. The .onnx file therefore holds
only the graph, so even a 175B-parameter model stays a few hundred KB; it is meant to be
planned from its dims, never run.

Small values that shape inference must read (Reshape shapes, Split sizes, indices) are
Constant nodes, so that shapes can be inferred without the missing data.
"""

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.mapping import TENSOR_TYPE_TO_NP_TYPE

OPSET = 17
MANIFEST = "shape_only_manifest.json"
BATCH = "batch"


@dataclass(frozen=True)
class Preset:
    kind: str      # "bert": post-LN encoder with pooler and classifier; "gpt": pre-LN causal LM
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int


PRESETS = {
    "bert-large": Preset("bert", layers=24, hidden=1024, heads=16, seq=512, vocab=30522),
    "bert-2.5b": Preset("bert", layers=54, hidden=1920, heads=24, seq=512, vocab=30522),
    "bert-5b": Preset("bert", layers=64, hidden=2560, heads=32, seq=512, vocab=30522),
    "gpt3-175b": Preset("gpt", layers=96, hidden=12288, heads=96, seq=2048, vocab=50257),
    # The 39.1B GPT of Megatron-LM's scaling table (Narayanan et al., SC'21, Table 1).
    "gpt-39b": Preset("gpt", layers=48, hidden=8192, heads=64, seq=2048, vocab=51200),
    # GPT-3 175B cut to one and two layers: their difference is one layer, embedding and head
    # excluded (tests/bench/gpt3_layer_h100.py).
    "gpt3-175b-1layer": Preset("gpt", layers=1, hidden=12288, heads=96, seq=2048, vocab=50257),
    "gpt3-175b-2layer": Preset("gpt", layers=2, hidden=12288, heads=96, seq=2048, vocab=50257),
    # GPT-3's width at a quarter of its depth (44B): few layers for many devices, the planning-time
    # case of tests/bench/planning_bench.py.
    "gpt-44b": Preset("gpt", layers=24, hidden=12288, heads=96, seq=2048, vocab=50257),
}

# The weak-scaling GPTs of Megatron-LM (Narayanan et al., SC'21, Table 1: sequence 2048, vocabulary
# 51200), built on request only (tests/bench/megatron_calibration.py), not by default.
SCALING_PRESETS = {
    "megatron-1.7b": Preset("gpt", layers=24, hidden=2304, heads=24, seq=2048, vocab=51200),
    "megatron-3.6b": Preset("gpt", layers=30, hidden=3072, heads=32, seq=2048, vocab=51200),
    "megatron-7.5b": Preset("gpt", layers=36, hidden=4096, heads=32, seq=2048, vocab=51200),
    "megatron-18.4b": Preset("gpt", layers=40, hidden=6144, heads=48, seq=2048, vocab=51200),
    "megatron-39.1b": Preset("gpt", layers=48, hidden=8192, heads=64, seq=2048, vocab=51200),
    "megatron-76.1b": Preset("gpt", layers=60, hidden=10240, heads=80, seq=2048, vocab=51200),
    "megatron-145.6b": Preset("gpt", layers=80, hidden=12288, heads=96, seq=2048, vocab=51200),
    "megatron-310.1b": Preset("gpt", layers=96, hidden=16384, heads=128, seq=2048, vocab=51200),
    "megatron-529.6b": Preset("gpt", layers=105, hidden=20480, heads=128, seq=2048, vocab=51200),
    "megatron-1008b": Preset("gpt", layers=128, hidden=25600, heads=160, seq=2048, vocab=51200),
    # The 22B GPT of Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
    # Models" (2022), Table 3; their 175B, 530B and 1T are gpt3-175b, megatron-529.6b and -1008b.
    "korthikanti-22b": Preset("gpt", layers=48, hidden=6144, heads=64, seq=2048, vocab=51200),
}

@dataclass(frozen=True)
class LlamaPreset:
    """A Llama decoder: pre-norm RMSNorm, grouped-query attention with rotary position embeddings,
    a SwiGLU MLP, no biases, an untied output head."""
    layers: int
    hidden: int
    heads: int           # query heads
    kv_heads: int        # key/value heads, each shared by heads / kv_heads query heads
    intermediate: int    # the SwiGLU MLP's width
    seq: int
    vocab: int
    rope_theta: float
    norm_eps: float
    kind: str = "llama"


# Meta's Llama-3 70B (config.json of meta-llama/Meta-Llama-3-70B; 70,553,706,496 parameters) at its
# 8192-token context, and trained on at 32768 (long-context; tests/bench/megatron_calibration.py).
LLAMA_PRESETS = {
    "llama3-70b": LlamaPreset(layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672, seq=8192,
                              vocab=128256, rope_theta=500000.0, norm_eps=1e-5),
    "llama3-70b-32k": LlamaPreset(layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672, seq=32768,
                                  vocab=128256, rope_theta=500000.0, norm_eps=1e-5),
}


@dataclass(frozen=True)
class DlrmPreset:
    """A recommendation model: a bottom MLP on the dense features, one pooled embedding per table
    (Gather of the table's rows, ReduceSum over the bag), an interaction, a top MLP and a sigmoid."""
    rows: tuple          # rows per table
    dims: tuple          # embedding dim per table
    pooling: tuple       # lookups per sample per table (1: one-hot)
    bottom: tuple        # bottom MLP widths after the 13 dense features
    top: tuple           # top MLP widths (the last is 1)
    interaction: str     # "dot": pairwise dots (lower triangle); "dcn": DCNv2 low-rank cross; "cat": concatenation
    cross_layers: int = 0
    cross_rank: int = 0


DENSE_FEATURES = 13
# Criteo's 26 categorical features in the reference DLRM's scripts (facebookresearch/dlrm).
KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
               5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
MLPERF_V1_ROWS = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208, 11938,
                  155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36)
MLPERF_V2_ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
                  155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
MLPERF_V2_POOLING = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)


def synthetic_tables(count, seed):
    """`count` tables: dims 4 to 384 (multiples of 4), rows log-uniform in 1e3..1e8, pooling about 15."""
    rng = np.random.default_rng(seed)
    rows = tuple(int(r) for r in np.round(10 ** rng.uniform(3, 8, count)))
    dims = tuple(int(d) for d in 4 * rng.integers(1, 97, count))
    pooling = tuple(int(p) for p in np.clip(np.round(rng.normal(15, 5, count)), 1, 60))
    return rows, dims, pooling


SYNTHETIC_1000 = synthetic_tables(1000, 2024)

DLRM_PRESETS = {
    "dlrm-kaggle": DlrmPreset(KAGGLE_ROWS, (16,) * 26, (1,) * 26, (512, 256, 64, 16), (512, 256, 1), "dot"),
    "dlrm-mlperf-v1": DlrmPreset(MLPERF_V1_ROWS, (128,) * 26, (1,) * 26, (512, 256, 128), (1024, 1024, 512, 256, 1),
                                 "dot"),
    "dlrm-mlperf-v2": DlrmPreset(MLPERF_V2_ROWS, (128,) * 26, MLPERF_V2_POOLING, (512, 256, 128),
                                 (1024, 1024, 512, 256, 1), "dcn", cross_layers=3, cross_rank=512),
    "dlrm-synthetic-1000": DlrmPreset(*SYNTHETIC_1000, (512, 256, 64), (512, 256, 1), "cat"),
    "dlrm-12t": DlrmPreset((10 ** 9,) * 48, (256,) * 48, (1,) * 48, (512, 256, 256), (1024, 512, 256, 1), "dot"),
}

BERT_CLASSES = 2
BERT_LN_EPS = 1e-12
GPT_LN_EPS = 1e-5


# ---------------------------------------------------------------------------
# Graph builder
# ---------------------------------------------------------------------------

class GraphBuilder:
    """Collects nodes and external-data initializers, and names values uniquely."""

    def __init__(self, weights_file):
        self.weights_file = weights_file
        self.nodes = []
        self.initializers = []
        self.offset = 0           # where the next initializer would start in weights_file
        self.float_elements = 0   # the parameter count
        self.constants = {}       # cache, so that identical constants are made once
        self.count = 0

    def fresh(self, hint):
        self.count += 1
        return "%s_%d" % (hint, self.count)

    def weight(self, name, dims, dtype=TensorProto.FLOAT):
        numel = math.prod(dims)
        nbytes = numel * TENSOR_TYPE_TO_NP_TYPE[dtype].itemsize
        tensor = TensorProto(name=name, data_type=dtype, dims=dims,
                             data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.weights_file), ("offset", self.offset),
                           ("length", nbytes)):
            tensor.external_data.add(key=key, value=str(value))
        self.initializers.append(tensor)
        self.offset += nbytes
        if dtype == TensorProto.FLOAT:
            self.float_elements += numel
        return name

    def const(self, values, dtype):
        """A Constant node holding values (a list, or a scalar for a 0-d tensor)."""
        key = (repr(values), dtype)
        if key not in self.constants:
            array = np.array(values, dtype=TENSOR_TYPE_TO_NP_TYPE[dtype])
            name = self.fresh("const")
            value = helper.make_tensor(name + "_value", dtype, array.shape, array.flatten().tolist())
            self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=value))
            self.constants[key] = name
        return self.constants[key]

    def int64(self, values):
        return self.const(values, TensorProto.INT64)

    def float(self, value):
        return self.const(value, TensorProto.FLOAT)

    def rename_output(self, old, new):
        producer = next(n for n in self.nodes if old in n.output)
        producer.output[list(producer.output).index(old)] = new

    def op(self, op_type, inputs, n_outputs=1, **attrs):
        name = self.fresh(op_type)
        outputs = [name] if n_outputs == 1 else ["%s_out%d" % (name, i) for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs[0] if n_outputs == 1 else outputs


# ---------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------

def linear(g, x, prefix, n_in, n_out):
    w = g.weight(prefix + ".weight", [n_in, n_out])
    b = g.weight(prefix + ".bias", [n_out])
    return g.op("Add", [g.op("MatMul", [x, w]), b])


def layer_norm(g, x, prefix, hidden, eps):
    scale = g.weight(prefix + ".weight", [hidden])
    bias = g.weight(prefix + ".bias", [hidden])
    return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


def gelu(g, x):
    """The exact (erf) GELU: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = g.op("Erf", [g.op("Div", [x, g.float(math.sqrt(2.0))])])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [erf, g.float(1.0)])]), g.float(0.5)])


def feed_forward(g, x, prefix, hidden):
    h = gelu(g, linear(g, x, prefix + ".fc1", hidden, 4 * hidden))
    return linear(g, h, prefix + ".fc2", 4 * hidden, hidden)


def attention(g, x, prefix, p, causal_mask=None):
    head_dim = p.hidden // p.heads
    qkv = linear(g, x, prefix + ".qkv", p.hidden, 3 * p.hidden)
    q, k, v = g.op("Split", [qkv, g.int64([p.hidden] * 3)], n_outputs=3, axis=2)
    # 0 copies the input dim, so the symbolic batch survives the reshape.
    heads_shape = g.int64([0, 0, p.heads, head_dim])
    q = g.op("Transpose", [g.op("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])
    k_t = g.op("Transpose", [g.op("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k_t]), g.float(math.sqrt(head_dim))])
    if causal_mask is not None:
        scores = g.op("Where", [causal_mask, scores, g.float(float("-inf"))])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    context = g.op("Transpose", [context], perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, g.int64([0, 0, p.hidden])])
    return linear(g, context, prefix + ".out", p.hidden, p.hidden)


def embed(g, tokens, p, prefix):
    """Token plus learned position embeddings: [batch, seq, hidden]."""
    word = g.weight(prefix + ".word.weight", [p.vocab, p.hidden])
    pos = g.weight(prefix + ".position.weight", [p.seq, p.hidden])
    x = g.op("Gather", [word, tokens])
    x = g.op("Add", [x, g.op("Gather", [pos, g.int64(list(range(p.seq)))])])
    return x, word


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

def build_bert(g, tokens, p):
    """Post-LN encoder; pooler (tanh on token 0) and classifier: logits [batch, 2]."""
    x, _ = embed(g, tokens, p, "embeddings")
    # Single-segment input: every token has type 0, so row 0 of the type table is added.
    token_type = g.weight("embeddings.token_type.weight", [2, p.hidden])
    x = g.op("Add", [x, g.op("Gather", [token_type, g.int64(0)])])
    x = layer_norm(g, x, "embeddings.norm", p.hidden, BERT_LN_EPS)
    for i in range(p.layers):
        prefix = "layers.%d" % i
        x = layer_norm(g, g.op("Add", [x, attention(g, x, prefix + ".attn", p)]),
                       prefix + ".norm1", p.hidden, BERT_LN_EPS)
        x = layer_norm(g, g.op("Add", [x, feed_forward(g, x, prefix + ".ffn", p.hidden)]),
                       prefix + ".norm2", p.hidden, BERT_LN_EPS)
    first_token = g.op("Gather", [x, g.int64(0)], axis=1)
    pooled = g.op("Tanh", [linear(g, first_token, "pooler", p.hidden, p.hidden)])
    return linear(g, pooled, "classifier", p.hidden, BERT_CLASSES), [BATCH, BERT_CLASSES]


def build_gpt(g, tokens, p):
    """Pre-LN causal LM whose head is the transposed token embedding: logits [batch, seq, vocab]."""
    x, word = embed(g, tokens, p, "embeddings")
    # True where attention is allowed (lower triangle); bool, so not a parameter.
    mask = g.weight("causal_mask", [p.seq, p.seq], dtype=TensorProto.BOOL)
    for i in range(p.layers):
        prefix = "layers.%d" % i
        h = layer_norm(g, x, prefix + ".norm1", p.hidden, GPT_LN_EPS)
        x = g.op("Add", [x, attention(g, h, prefix + ".attn", p, causal_mask=mask)])
        h = layer_norm(g, x, prefix + ".norm2", p.hidden, GPT_LN_EPS)
        x = g.op("Add", [x, feed_forward(g, h, prefix + ".ffn", p.hidden)])
    x = layer_norm(g, x, "final_norm", p.hidden, GPT_LN_EPS)
    # Tied head: the same initializer as the token embedding, transposed in the graph.
    logits = g.op("MatMul", [x, g.op("Transpose", [word], perm=[1, 0])])
    return logits, [BATCH, p.seq, p.vocab]


def projection(g, x, prefix, n_in, n_out):
    """A linear without bias, its weight stored [in, out]."""
    return g.op("MatMul", [x, g.weight(prefix + ".weight", [n_in, n_out])])


def rms_norm(g, x, prefix, hidden, eps):
    """LlamaRMSNorm as torch.onnx exports it: x / sqrt(mean(x^2) + eps) * weight (rsqrt is 1 / Sqrt)."""
    variance = g.op("ReduceMean", [g.op("Pow", [x, g.float(2.0)])], axes=[-1], keepdims=1)
    inverse = g.op("Div", [g.float(1.0), g.op("Sqrt", [g.op("Add", [variance, g.float(eps)])])])
    return g.op("Mul", [g.weight(prefix + ".weight", [hidden]), g.op("Mul", [x, inverse])])


def rotary_tables(g, p):
    """cos and sin [seq, head_dim] of the rotary embedding, from the positions (Range) and the inverse
    frequencies theta^(-2i/head_dim) as HF's LlamaRotaryEmbedding computes them; constants only."""
    head_dim = p.hidden // p.heads
    positions = g.op("Range", [g.float(0.0), g.float(float(p.seq)), g.float(1.0)])
    inv_freq = [p.rope_theta ** (-i / head_dim) for i in range(0, head_dim, 2)]
    freqs = g.op("Mul", [g.op("Unsqueeze", [positions, g.int64([1])]), g.const([inv_freq], TensorProto.FLOAT)])
    angles = g.op("Concat", [freqs, freqs], axis=-1)
    return g.op("Cos", [angles]), g.op("Sin", [angles])


def rotate(g, x, cos, sin, head_dim):
    """apply_rotary_pos_emb on [batch, heads, seq, head_dim]: x * cos + rotate_half(x) * sin, where
    rotate_half(x) = cat(-x2, x1) of the two halves of the last dim."""
    half = head_dim // 2
    x1 = g.op("Slice", [x, g.int64([0]), g.int64([half]), g.int64([-1])])
    x2 = g.op("Slice", [x, g.int64([half]), g.int64([head_dim]), g.int64([-1])])
    rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])


def llama_attention(g, x, prefix, p, cos, sin, causal_mask):
    """Grouped-query attention as HF's eager LlamaAttention exports: q, k, v projections into heads,
    rotary embeddings on q and k, k and v repeated to the query heads (repeat_kv: Unsqueeze, Expand,
    Reshape), the causal softmax of the scaled scores, the product with v, the output projection."""
    head_dim = p.hidden // p.heads
    group = p.heads // p.kv_heads

    def heads(name, count):
        t = projection(g, x, prefix + "." + name, p.hidden, count * head_dim)
        return g.op("Transpose", [g.op("Reshape", [t, g.int64([0, 0, count, head_dim])])], perm=[0, 2, 1, 3])

    def repeat_kv(t):
        t = g.op("Expand", [g.op("Unsqueeze", [t, g.int64([2])]), g.int64([1, 1, group, 1, 1])])
        return g.op("Reshape", [t, g.int64([0, p.heads, p.seq, head_dim])])

    q = rotate(g, heads("q_proj", p.heads), cos, sin, head_dim)
    k = repeat_kv(rotate(g, heads("k_proj", p.kv_heads), cos, sin, head_dim))
    v = repeat_kv(heads("v_proj", p.kv_heads))
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = g.op("Where", [causal_mask, g.op("Div", [scores, g.float(math.sqrt(head_dim))]),
                            g.float(float("-inf"))])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), g.int64([0, 0, p.hidden])])
    return projection(g, context, prefix + ".o_proj", p.hidden, p.hidden)


def swiglu(g, x, prefix, p):
    """down(silu(gate(x)) * up(x)), SiLU exported as x * Sigmoid(x)."""
    gate = projection(g, x, prefix + ".gate_proj", p.hidden, p.intermediate)
    up = projection(g, x, prefix + ".up_proj", p.hidden, p.intermediate)
    h = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
    return projection(g, h, prefix + ".down_proj", p.intermediate, p.hidden)


def build_llama(g, tokens, p):
    """Pre-norm causal LM (RMSNorm, GQA with rotary embeddings, SwiGLU) with an untied head:
    logits [batch, seq, vocab]."""
    x = g.op("Gather", [g.weight("embed_tokens.weight", [p.vocab, p.hidden]), tokens])
    mask = g.weight("causal_mask", [p.seq, p.seq], dtype=TensorProto.BOOL)
    cos, sin = rotary_tables(g, p)
    for i in range(p.layers):
        prefix = "layers.%d" % i
        h = rms_norm(g, x, prefix + ".input_layernorm", p.hidden, p.norm_eps)
        x = g.op("Add", [x, llama_attention(g, h, prefix + ".self_attn", p, cos, sin, mask)])
        h = rms_norm(g, x, prefix + ".post_attention_layernorm", p.hidden, p.norm_eps)
        x = g.op("Add", [x, swiglu(g, h, prefix + ".mlp", p)])
    x = rms_norm(g, x, "norm", p.hidden, p.norm_eps)
    return projection(g, x, "lm_head", p.hidden, p.vocab), [BATCH, p.seq, p.vocab]


def mlp(g, x, prefix, widths, n_in, last_relu):
    for i, width in enumerate(widths):
        x = linear(g, x, "%s.%d" % (prefix, i), n_in, width)
        if i + 1 < len(widths) or last_relu:
            x = g.op("Relu", [x])
        n_in = width
    return x


def interaction(g, dense, pooled, p):
    """The features after the interaction, and their width."""
    features = [dense] + pooled
    if p.interaction == "cat":
        return g.op("Concat", features, axis=1), p.bottom[-1] + sum(p.dims)
    dim = p.dims[0]
    count = len(features)
    if p.interaction == "dcn":
        # DCNv2: x_{l+1} = x0 * (U (V x_l) + b) + x_l, with V [width, rank] and U [rank, width].
        x0 = g.op("Concat", features, axis=1)
        width = count * dim
        x = x0
        for layer in range(p.cross_layers):
            v = g.weight("cross.%d.v" % layer, [width, p.cross_rank])
            u = g.weight("cross.%d.u" % layer, [p.cross_rank, width])
            b = g.weight("cross.%d.bias" % layer, [width])
            x = g.op("Add", [g.op("Mul", [x0, g.op("Add", [g.op("MatMul", [g.op("MatMul", [x, v]), u]), b])]), x])
        return x, width
    # Pairwise dots of the features, the strictly lower triangle, beside the dense features.
    stacked = g.op("Concat", [g.op("Unsqueeze", [f, g.int64([1])]) for f in features], axis=1)
    dots = g.op("MatMul", [stacked, g.op("Transpose", [stacked], perm=[0, 2, 1])])
    flat = g.op("Reshape", [dots, g.int64([0, count * count])])
    lower = [i * count + j for i in range(count) for j in range(i)]
    pairs = g.op("Gather", [flat, g.int64(lower)], axis=1)
    return g.op("Concat", [dense, pairs], axis=1), dim + len(lower)


def build_dlrm(name, p):
    g = GraphBuilder(name + ".weights")
    inputs = [helper.make_tensor_value_info("dense", TensorProto.FLOAT, [BATCH, DENSE_FEATURES])]
    dense = mlp(g, "dense", "bottom", p.bottom, DENSE_FEATURES, last_relu=True)
    pooled = []
    for t, (rows, dim, lookups) in enumerate(zip(p.rows, p.dims, p.pooling)):
        ids = "sparse_%d" % t
        inputs.append(helper.make_tensor_value_info(ids, TensorProto.INT64, [BATCH, lookups]))
        table = g.weight("tables.%d.weight" % t, [rows, dim])
        pooled.append(g.op("ReduceSum", [g.op("Gather", [table, ids]), g.int64([1])], keepdims=0))
    x, width = interaction(g, dense, pooled, p)
    logits = mlp(g, x, "top", p.top, width, last_relu=False)
    g.nodes.append(helper.make_node("Sigmoid", [logits], ["probability"], name="probability"))
    graph = helper.make_graph(g.nodes, name.replace("-", "_"), inputs=inputs,
                              outputs=[helper.make_tensor_value_info("probability", TensorProto.FLOAT, [BATCH, 1])],
                              initializer=g.initializers)
    model = helper.make_model(graph, producer_name="make_shape_only", opset_imports=[helper.make_opsetid("", OPSET)])
    return model, g.float_elements


def build_model(name, p):
    g = GraphBuilder(name + ".weights")
    tokens = "tokens"
    build = {"bert": build_bert, "gpt": build_gpt, "llama": build_llama}[p.kind]
    logits, logits_shape = build(g, tokens, p)
    g.rename_output(logits, "logits")
    graph = helper.make_graph(
        g.nodes, name.replace("-", "_"),
        inputs=[helper.make_tensor_value_info(tokens, TensorProto.INT64, [BATCH, p.seq])],
        outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits_shape)],
        initializer=g.initializers)
    model = helper.make_model(graph, producer_name="make_shape_only",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    return model, g.float_elements


# ---------------------------------------------------------------------------
# Checks and output
# ---------------------------------------------------------------------------

def check_structure(model):
    """Run onnx.checker on everything but the weights.

    The checker insists that external data files exist, and here by design none does;
    so it checks a copy in which every initializer is a graph input of the same type
    and shape instead.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for t in copy.graph.initializer:
        copy.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del copy.graph.initializer[:]
    onnx.checker.check_model(copy)


def check_shapes(model):
    """Every node output must get a full shape whose only symbolic dim is the batch."""
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    shapes = {vi.name: vi.type.tensor_type.shape for vi in
              list(inferred.graph.value_info) + list(inferred.graph.output)}
    for node in inferred.graph.node:
        for out in node.output:
            shape = shapes.get(out)
            if shape is None or not all(d.HasField("dim_value") or d.dim_param == BATCH
                                        for d in shape.dim):
                raise SystemExit("error: no full shape inferred for %s (%s)" % (out, node.op_type))


def write_model(model, path):
    # Serialized directly: nothing may try to write the (absent) external data.
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def update_manifest(out_dir, entries):
    path = os.path.join(out_dir, MANIFEST)
    manifest = {}
    if os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    manifest.update(entries)
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def make_preset(name, out_dir):
    start = time.time()
    dlrm = name in DLRM_PRESETS
    p = DLRM_PRESETS[name] if dlrm else PRESETS.get(name) or SCALING_PRESETS.get(name) or LLAMA_PRESETS[name]
    model, params = build_dlrm(name, p) if dlrm else build_model(name, p)
    check_structure(model)
    check_shapes(model)
    path = os.path.join(out_dir, name + ".onnx")
    write_model(model, path)
    print("%s: %s, %d bytes, %d params (%.2fB) (%.1f s)"
          % (name, path, os.path.getsize(path), params, params / 1e9, time.time() - start))
    if dlrm:
        return {"params": params, "kind": "dlrm", "file": name + ".onnx", "tables": len(p.rows),
                "rows": list(p.rows), "dims": list(p.dims), "pooling": list(p.pooling)}
    entry = {"params": params, "layers": p.layers, "hidden": p.hidden, "heads": p.heads,
             "seq": p.seq, "vocab": p.vocab, "kind": p.kind, "file": name + ".onnx"}
    if p.kind == "llama":
        entry.update(kv_heads=p.kv_heads, intermediate=p.intermediate)
    return entry


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    names = list(PRESETS) + list(LLAMA_PRESETS) + list(DLRM_PRESETS)
    parser.add_argument("--preset", default=",".join(names),
                        help="comma-separated presets (default: all of %s; on request: %s)"
                        % (",".join(names), ",".join(SCALING_PRESETS)))
    args = parser.parse_args(argv)
    args.preset = [n.strip() for n in args.preset.split(",") if n.strip()]
    known = set(PRESETS) | set(DLRM_PRESETS) | set(SCALING_PRESETS) | set(LLAMA_PRESETS)
    unknown = [n for n in args.preset if n not in known]
    if unknown:
        parser.error("unknown preset(s): %s" % ",".join(unknown))
    return args


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    update_manifest(args.out, {name: make_preset(name, args.out) for name in args.preset})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
