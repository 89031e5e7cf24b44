"""The sample models and their export to TorchScript and ONNX (used by generate.py).

All models run in train mode without active dropout (none in the built-in models, p=0 in
torchvision's), so outputs are deterministic.
Weights come from torch.manual_seed(0), example inputs from a generator seeded with 1234.
"""

import math
import os
import time
import warnings
from typing import Optional

import numpy as np
import onnx
import torch
import torch.nn as nn
import torchvision
from onnx import numpy_helper

ONNX_OPSET = 17

# Image sizes other than 224, for models whose train-mode auxiliary heads need them:
# inception_v3's needs the 17x17 grid of a 299 input; googlenet's pools its 14x14 grid
# (at 224) to 4x4, which ONNX export rejects unless the input is a multiple (16x16 at 256).
TV_IMAGE_SIZE = {"inception_v3": 299, "googlenet": 256}


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

def mlp_layers(sizes, final_relu):
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if final_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Mlp(nn.Module):
    """A plain MLP whose forward argument is named x, like its ONNX input."""

    def __init__(self, sizes):
        super().__init__()
        self.layers = mlp_layers(sizes, final_relu=False)

    def forward(self, x):
        return self.layers(x)


def feed_forward(d_model, d_ff):
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused qkv projection and an optional bool mask."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        # A Python float, so tracing records a constant and not a computation on sizes.
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def split_heads(self, x, b: int, t: int):
        return x.reshape(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask: Optional[torch.Tensor] = None):
        b, t, d = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = self.split_heads(q, b, t), self.split_heads(k, b, t), self.split_heads(v, b, t)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        y = self.attend(scores, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def attend(self, scores, v):
        """The attention weights' product with V (a subclass may add dropout to the weights)."""
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class GptBlock(nn.Module):
    """Pre-LN decoder block."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = feed_forward(d_model, 4 * d_model)

    def forward(self, x, mask: torch.Tensor):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """Decoder-only LM whose vocabulary is large next to its width, with a tied LM head."""

    def __init__(self, vocab=8192, d_model=128, n_layers=4, n_heads=4, max_len=32):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.register_buffer("positions", torch.arange(max_len))
        self.register_buffer("causal_mask", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))
        self.blocks = nn.ModuleList([GptBlock(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        # Tied: head and embedding are one parameter, which parameters() lists once.
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb(self.positions)
        for block in self.blocks:
            x = block(x, self.causal_mask)
        return self.lm_head(self.ln_f(x))


class BertLayer(nn.Module):
    """Post-LN encoder layer."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = SelfAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model, eps=1e-12)
        self.ffn = feed_forward(d_model, d_ff)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ffn(x))


class Bert(nn.Module):
    """Encoder with word, position and token-type embeddings, a pooler and a classifier."""

    def __init__(self, vocab=8192, d_model=128, n_layers=4, n_heads=4, d_ff=512, max_len=32,
                 n_classes=2):
        super().__init__()
        self.word_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.type_emb = nn.Embedding(2, d_model)
        self.register_buffer("positions", torch.arange(max_len))
        self.emb_norm = nn.LayerNorm(d_model, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.pooler = nn.Linear(d_model, d_model)
        self.classifier = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        # Single-segment input: every token has type 0.
        token_types = torch.zeros_like(tokens)
        x = self.word_emb(tokens) + self.pos_emb(self.positions) + self.type_emb(token_types)
        x = self.emb_norm(x)
        for layer in self.layers:
            x = layer(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


class Dlrm(nn.Module):
    """Bottom MLP, summed embedding bags, pairwise dot interactions, top MLP."""

    def __init__(self, n_dense=13, table_rows=(1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000),
                 dim=16):
        super().__init__()
        self.bottom = mlp_layers([n_dense, 64, 32, dim], final_relu=True)
        self.tables = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for rows in table_rows])
        n_features = len(table_rows) + 1
        rows, cols = torch.tril_indices(n_features, n_features, offset=-1)
        # Flat positions of the strictly lower triangle of the [F, F] interaction matrix.
        self.register_buffer("pair_index", rows * n_features + cols)
        n_pairs = n_features * (n_features - 1) // 2
        self.top = mlp_layers([dim + n_pairs, 64, 32, 1], final_relu=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        features = [x]
        for t, table in enumerate(self.tables):
            # A 2-D [batch, lookups] input makes each row one bag, so no offsets are needed.
            features.append(table(sparse[:, t, :]))
        z = torch.stack(features, dim=1)
        interactions = torch.bmm(z, z.transpose(1, 2)).flatten(1)
        pairs = interactions.index_select(1, self.pair_index)
        return torch.sigmoid(self.top(torch.cat([x, pairs], dim=1)))


# ---------------------------------------------------------------------------
# Samples: a model, its example inputs and how to export it
# ---------------------------------------------------------------------------

class Sample:
    def __init__(self, model, inputs, output_names, scriptable):
        self.model = model                # eager nn.Module
        self.inputs = inputs              # dict name -> tensor, in forward() argument order
        self.output_names = output_names  # None: named after the outputs (see output_names_of)
        # True/False: decided per built-in model, so a scripting error is a real error.
        # None: a model named on the command line; scripting is tried and the outcome logged.
        self.scriptable = scriptable


def input_generator():
    return torch.Generator().manual_seed(1234)


def make_builtin(name):
    g = input_generator()
    if name == "mlp":
        model = Mlp([64, 128, 128, 64, 32, 10])
        return Sample(model, {"x": torch.randn(4, 64, generator=g)}, ["y"], scriptable=True)
    if name == "gpt":
        tokens = torch.randint(0, 8192, (2, 32), generator=g)
        return Sample(Gpt(), {"tokens": tokens}, ["logits"], scriptable=True)
    if name == "bert":
        tokens = torch.randint(0, 8192, (2, 32), generator=g)
        return Sample(Bert(), {"tokens": tokens}, ["logits"], scriptable=True)
    if name == "resnet50":
        model = torchvision.models.resnet50(weights=None)
        return Sample(model, {"x": torch.randn(2, 3, 224, 224, generator=g)}, ["logits"], scriptable=True)
    if name == "dlrm":
        # Indices below the smallest table's row count are valid for every table.
        inputs = {"dense": torch.randn(4, 13, generator=g),
                  "sparse": torch.randint(0, 1000, (4, 8, 5), generator=g)}
        return Sample(Dlrm(), inputs, ["prob"], scriptable=True)
    raise ValueError("unknown model %r" % name)


def make_torchvision(tv_name):
    if tv_name not in torchvision.models.list_models(module=torchvision.models):
        raise SystemExit("error: %r is not a torchvision classification model" % tv_name)
    model = torchvision.models.get_model(tv_name, weights=None).train()
    disable_randomness(model)
    size = TV_IMAGE_SIZE.get(tv_name, 224)
    x = torch.randn(2, 3, size, size, generator=input_generator())
    return Sample(model, {"x": x}, None, scriptable=None)


def disable_randomness(model):
    """Set dropout and stochastic depth to p=0: in train mode they would make outputs random."""
    for m in model.modules():
        if isinstance(m, (nn.modules.dropout._DropoutNd, torchvision.ops.StochasticDepth)):
            m.p = 0.0


def make_sample(name):
    torch.manual_seed(0)
    if name.startswith("tv_"):
        return make_torchvision(name[len("tv_"):])
    return make_builtin(name)


# ---------------------------------------------------------------------------
# Export and verification
# ---------------------------------------------------------------------------

def output_names_of(out):
    # Train-mode googlenet and inception return named tuples: name the outputs after the fields.
    return list(out._fields) if hasattr(out, "_fields") else ["logits"]


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def tensor_info(name, t):
    return {"name": name, "shape": list(t.shape), "dtype": dtype_name(t.dtype)}


def input_arg(name, t):
    """The CLI --input spec of a tensor, e.g. tokens:2x32:int64."""
    return "%s:%s:%s" % (name, "x".join(str(d) for d in t.shape), dtype_name(t.dtype))


class FreshState:
    """Puts the model back into its initial state.

    Train-mode BatchNorm updates its running statistics on every forward pass, and
    tracing, the trace check and the ONNX export each run some. Restoring the state
    before every use and before every save makes all formats store the initial buffers.
    """

    def __init__(self, model):
        self.model = model
        self.state = {k: v.clone() for k, v in model.state_dict().items()}
        self.buffers = {k: self.state[k] for k, _ in model.named_buffers()}

    def restore(self):
        self.model.load_state_dict(self.state)
        return self.model


def export(name, out_dir):
    """Write all formats of one sample, check them and return its manifest entry."""
    start = time.time()
    sample = make_sample(name)
    fresh = FreshState(sample.model.train())
    with torch.no_grad():
        out = fresh.restore()(*sample.inputs.values())
    output_names = sample.output_names or output_names_of(out)
    files = write_formats(name, sample, output_names, fresh, out_dir)
    check_formats(files, out_dir, sample.inputs, output_names, as_tuple(out))
    print("%s: wrote %s (%.1f s)" % (name, ", ".join(files), time.time() - start), flush=True)
    return manifest_entry(sample.model, sample.inputs, output_names, as_tuple(out), files)


def write_formats(name, sample, output_names, fresh, out_dir):
    """Write trace, script (where it works) and ONNX; returns format -> file name."""
    args = tuple(sample.inputs.values())
    files = {"trace": name + ".trace.pt"}
    traced = torch.jit.trace(fresh.restore(), args)
    fresh.restore()  # the traced module shares its tensors with the model
    traced.save(os.path.join(out_dir, files["trace"]))
    if save_script(name, fresh.restore(), sample.scriptable, os.path.join(out_dir, name + ".script.pt")):
        files["script"] = name + ".script.pt"
    files["onnx"] = name + ".onnx"
    onnx_path = os.path.join(out_dir, files["onnx"])
    export_onnx(fresh.restore(), sample.inputs, output_names, onnx_path)
    restore_onnx_buffers(onnx_path, fresh.buffers)
    return files


def check_formats(files, out_dir, inputs, output_names, expected):
    for kind in ("trace", "script"):
        if kind in files:
            check_torchscript(os.path.join(out_dir, files[kind]), tuple(inputs.values()), expected)
    check_onnx(os.path.join(out_dir, files["onnx"]), list(inputs), output_names)


def manifest_entry(model, inputs, output_names, expected, files):
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "buffers": sum(b.numel() for b in model.buffers()),
        "inputs": [tensor_info(n, t) for n, t in inputs.items()],
        "input_args": [input_arg(n, t) for n, t in inputs.items()],
        "outputs": [tensor_info(n, t) for n, t in zip(output_names, expected)],
        "files": files,
    }


def save_script(name, model, scriptable, path):
    """Script the model and save it; returns whether a file was written."""
    if scriptable is None:
        try:
            scripted = torch.jit.script(model)
        except Exception as e:  # any frontend error means: this model does not script
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            print("%s: not scripted: %s" % (name, first_line))
            return False
    elif scriptable:
        scripted = torch.jit.script(model)
    else:
        print("%s: not scripted (marked as not scriptable)" % name)
        return False
    scripted.save(path)
    return True


def export_onnx(model, inputs, output_names, path):
    input_names = list(inputs)
    # do_constant_folding=False keeps a tied weight as one initializer, keeps transposed
    # weights as Transpose nodes of their parameter and keeps BatchNorm unfolded.
    # TRAINING mode exports BatchNormalization with training_mode=1, as the traces run it.
    with warnings.catch_warnings():
        # Train-mode BatchNorm increments num_batches_tracked in place. The exporter drops
        # that update (it does not affect any output) and warns once per BatchNorm.
        warnings.filterwarnings("ignore", message="ONNX Preprocess - Removing mutation")
        try:
            torch.onnx.export(
                model, tuple(inputs.values()), path,
                input_names=input_names, output_names=output_names,
                dynamic_axes={n: {0: "batch"} for n in input_names + output_names},
                opset_version=ONNX_OPSET,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False)
        except torch.onnx.errors.OnnxExporterError as e:
            raise SystemExit("error: ONNX export to %s failed: %s" % (path, str(e).splitlines()[0]))


def restore_onnx_buffers(path, buffers):
    """Store the initial buffers: the exporter reads them after its own forward pass."""
    model = onnx.load(path)
    changed = False
    for t in model.graph.initializer:
        initial = buffers.get(t.name)
        if initial is not None and not np.array_equal(numpy_helper.to_array(t), initial.numpy()):
            t.CopyFrom(numpy_helper.from_array(initial.numpy(), t.name))
            changed = True
    if changed:
        onnx.save(model, path)


def check_torchscript(path, args, expected):
    loaded = torch.jit.load(path)
    with torch.no_grad():
        got = as_tuple(loaded(*args))
    if len(got) != len(expected):
        raise SystemExit("error: %s returns %d outputs, eager %d" % (path, len(got), len(expected)))
    for want, have in zip(expected, got):
        if not torch.allclose(want, have, rtol=1e-4, atol=1e-5):
            raise SystemExit("error: %s differs from eager (max |diff| %.3g)"
                             % (path, (want - have).abs().max().item()))


def check_onnx(path, input_names, output_names):
    onnx.checker.check_model(path)
    graph = onnx.load(path).graph
    inputs = [i.name for i in graph.input]
    outputs = [o.name for o in graph.output]
    if inputs != input_names or outputs != list(output_names):
        raise SystemExit("error: %s has inputs %s and outputs %s, expected %s and %s"
                         % (path, inputs, outputs, input_names, output_names))
