"""Generates the modern-export corpus with PyTorch 2.x (Debian 13's python3-torch 2.6): small
models exported the four ways a user of today's PyTorch would, each stored with fixed inputs and
PyTorch's own outputs, gradients and training losses, so that a build against any libtorch (1.13
on Debian 12 too) is checked against the real PyTorch 2.6 and not only against itself.

usage (from the host, the Debian 13 root at ROOT):
    python3 tests/modern/make_modern_corpus.py --root /srv/trixie [--out tests/modern/fixtures]
usage (inside a root whose python3 has torch 2.x, torchvision and onnx):
    python3 make_modern_corpus.py --out DIR

--root copies this script into ROOT/tmp/rannc-modern-corpus, runs it there under chroot and
copies the fixtures back over --out: always at that path, because the TorchScript and .pt2
files record the generator's path in their debug information, and the same path gives the same
bytes. Both ways return at once when the fixtures are up to date (the manifest's generator_sha256
is this script's and every file it lists has its SHA-256), without starting torch.

Models (MODELS below; each in train() mode with dropout p=0, 9k to 20k parameters, so that the
fixtures take about 6 MB together, under issue 29's 10 MB): a Llama-style decoder,
nn.TransformerEncoder with norm_first, a dense mixture of experts, torchvision's
SwinTransformer, ConvNeXt and MobileNetV3 in small configurations, and a model whose head is
tied to its embedding. Each is exported as
  torchscript  torch.jit.trace
  onnx18       torch.onnx.export(dynamo=False, opset_version=18), training mode, batch axis dynamic
  onnx20       the same at opset 20 (nn.GELU becomes onnx::Gelu)
  pt2          torch.export.export with the batch dim dynamic as users write it (Dim("batch"), or
               Dim("batch", max=1024) where export asks for a bound; static where it proves the
               batch constant), then torch.export.save
and stored in fixtures/NAME/:
  NAME.pt, NAME.opset18.onnx, NAME.opset20.onnx, NAME.pt2   the exports
  state_dict.npz   the initial state_dict, by state_dict key: what the TorchScript and .pt2 exports
                   hold (checked); the ONNX exports' BatchNorm running statistics are those after
                   one train-mode forward, which torch.onnx.export runs while tracing
  reference.npz    "input/<name>" the fixed inputs (the batch of the manifest), "target", "output"
                   (the model's output for them, train mode), "loss" (the trainer's loss of it)
  grads.npz        the gradient of that loss for every trainable state_dict entry (a tied weight
                   under each of its keys)
  data/            a rannc-run --data folder: <input>.npy and target.npy, `steps` x `batch` rows

Tensors are .npy/.npz (numpy's format, no torch pickles), so torch 1.13 and 2.x read them alike.
The .npz files are written with fixed zip timestamps so that a rerun gives the same bytes.

The loss is rannc-run's (docs/contract.md; tests/runtime/training_reference.py): cross_entropy
over the output's last dim or mse, reduced to the mean over the global batch; `losses` are its
value at each of `steps` steps of single-process torch.optim.SGD(lr) on data/ in order (the loss of
a step is computed before its update), `losses_without_update` the same at lr 0, so a checker can
tell a run that never steps. One thread, like each rannc-run rank.

manifest.json: {"generator_sha256", "torch", "torchvision", "onnx", "numpy", "forms", "files":
{PATH: sha256}, "models": {NAME: {"title", "inputs": ["NAME:DIMS[:DTYPE]", ...], "batch",
"output_shape", "loss": "cross_entropy"|"mse", "lr", "steps", "losses", "losses_without_update",
"params", "batch_norm", "tolerance", "notes", "state_dict", "reference", "grads", "data",
"exports": {FORM: {"file", "bytes", "dynamic_batch", "ops"; ONNX: "opset", "ir_version"; pt2:
"batch_range"}}}}}. `inputs` are rannc-partition's --input arguments at `batch`, named after the
forward's arguments; `params` counts model.parameters() (a tied weight once); `batch_norm` says
the outputs depend on which samples are forwarded together (microbatches and replicas see other
statistics than the stored reference); `ops` lists the ops of the export (TorchScript:
aten::NAME; .pt2: the overloads; ONNX: op types), so a checker can tell which ones its libtorch
lacks; `tolerance` is the relative difference allowed between another build's outputs and
gradients and PyTorch 2.6's.

The model builders are importable (build_model(NAME) -> (module, inputs)), for tests that need
the nn.Module itself, e.g. a strict load_state_dict of a trained checkpoint under PyTorch 2.x.
"""
import argparse
import copy
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import warnings
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FORMS = ("torchscript", "onnx18", "onnx20", "pt2")
SUFFIX = {"torchscript": ".pt", "onnx18": ".opset18.onnx", "onnx20": ".opset20.onnx", "pt2": ".pt2"}
ROOT_WORKDIR = "/tmp/rannc-modern-corpus"  # inside the root: fixed, see the docstring
SIZE_LIMIT = 10 * 10 ** 6  # issue 29: the committed fixtures stay under 10 MB together


def _sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def up_to_date(out_dir):
    """Whether out_dir holds this script's fixtures, every file whole (no torch needed)."""
    try:
        with open(os.path.join(out_dir, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    if manifest.get("generator_sha256") != _sha256_file(os.path.abspath(__file__)):
        return False
    files = manifest.get("files") or {}
    return all(os.path.isfile(os.path.join(out_dir, p)) and _sha256_file(os.path.join(out_dir, p)) == h
               for p, h in files.items())


# ---------------------------------------------------------------------------------------------
# Models. Each builder seeds torch itself and returns (module, {input name: example tensor}); the
# example batch is the manifest's `batch`. torch is imported inside, so that --root and the
# up-to-date check run without it.


def _llama():
    """A Llama-style decoder as Hugging Face's LlamaModel writes it: RMSNorm, rotary embeddings
    (rotate_half, cos/sin from a non-persistent inv_freq buffer: a constant of the .pt2, not a
    state_dict entry), grouped-query attention (4 query heads over 2 key/value heads, repeat_kv)
    through F.scaled_dot_product_attention(is_causal=True), a SwiGLU MLP and an untied head."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x):
            variance = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(variance + self.eps))

    class RotaryEmbedding(nn.Module):
        def __init__(self, head_dim, base=10000.0):
            super().__init__()
            inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, x):
            positions = torch.arange(x.shape[1], dtype=torch.float32)
            freqs = torch.outer(positions, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos(), emb.sin()

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def repeat_kv(x, n_rep):
        batch, kv_heads, seq, head_dim = x.shape
        x = x[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, head_dim)
        return x.reshape(batch, kv_heads * n_rep, seq, head_dim)

    class Attention(nn.Module):
        def __init__(self, dim, heads, kv_heads):
            super().__init__()
            self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
            self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
            self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
            self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
            self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

        def forward(self, x, cos, sin):
            shape = (*x.shape[:-1], -1, self.head_dim)
            q = self.q_proj(x).view(shape).transpose(1, 2)
            k = self.k_proj(x).view(shape).transpose(1, 2)
            v = self.v_proj(x).view(shape).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = repeat_kv(k, self.heads // self.kv_heads)
            v = repeat_kv(v, self.heads // self.kv_heads)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))

    class Mlp(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.gate_proj = nn.Linear(dim, hidden, bias=False)
            self.up_proj = nn.Linear(dim, hidden, bias=False)
            self.down_proj = nn.Linear(hidden, dim, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self, dim, heads, kv_heads, hidden):
            super().__init__()
            self.input_layernorm = RMSNorm(dim)
            self.self_attn = Attention(dim, heads, kv_heads)
            self.post_attention_layernorm = RMSNorm(dim)
            self.mlp = Mlp(dim, hidden)

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Llama(nn.Module):
        def __init__(self, vocab=64, dim=32, layers=2, heads=4, kv_heads=2, hidden=48):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, dim)
            self.rotary_emb = RotaryEmbedding(dim // heads)
            self.layers = nn.ModuleList(Layer(dim, heads, kv_heads, hidden) for _ in range(layers))
            self.norm = RMSNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)

        def forward(self, tokens):
            x = self.embed_tokens(tokens)
            cos, sin = self.rotary_emb(x)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.lm_head(self.norm(x))

    torch.manual_seed(0)
    return Llama(), {"tokens": torch.randint(0, 64, (4, 8))}


def _transformer_encoder():
    """nn.TransformerEncoder of pre-norm layers (norm_first=True, batch_first, GELU) with a final
    LayerNorm, between an input projection and a per-token classifier."""
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self, features=16, dim=32, heads=4, hidden=64, layers=2, classes=10):
            super().__init__()
            self.proj = nn.Linear(features, dim)
            layer = nn.TransformerEncoderLayer(dim, heads, hidden, dropout=0.0, activation="gelu", batch_first=True,
                                               norm_first=True)
            # enable_nested_tensor is only for the inference fast path, which norm_first disables anyway.
            self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(dim), enable_nested_tensor=False)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            return self.head(self.encoder(self.proj(x)))

    torch.manual_seed(0)
    return Encoder(), {"x": torch.randn(4, 8, 16)}


def _dense_moe():
    """Mixture-of-experts blocks computed densely: a softmax router weights the outputs of every
    expert (SwiGLU-free GELU MLPs), no top-k, so nothing is data-dependent; pre-norm residual."""
    import torch
    from torch import nn

    class DenseMoE(nn.Module):
        def __init__(self, dim, hidden, experts):
            super().__init__()
            self.router = nn.Linear(dim, experts, bias=False)
            self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
                                         for _ in range(experts))

        def forward(self, x):
            gates = torch.softmax(self.router(x), dim=-1)                  # B x T x E
            outs = torch.stack([expert(x) for expert in self.experts], -1)  # B x T x D x E
            return (outs * gates.unsqueeze(-2)).sum(-1)

    class Model(nn.Module):
        def __init__(self, dim=16, hidden=32, experts=4, blocks=2):
            super().__init__()
            self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(blocks))
            self.moes = nn.ModuleList(DenseMoE(dim, hidden, experts) for _ in range(blocks))
            self.out = nn.Linear(dim, dim)

        def forward(self, x):
            for norm, moe in zip(self.norms, self.moes):
                x = x + moe(norm(x))
            return self.out(x)

    torch.manual_seed(0)
    return Model(), {"x": torch.randn(4, 8, 16)}


def _swin():
    """torchvision's SwinTransformer (patch 2, embed 8, depths [2, 2], heads [2, 4], window 4) on
    16x16 images: 8x8 patches, so the first stage's second block shifts its windows and builds the
    attention mask; stochastic depth 0 (random in training mode)."""
    import torch
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[2, 2], embed_dim=8, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                            stochastic_depth_prob=0.0, num_classes=10)
    return model, {"x": torch.randn(4, 3, 16, 16)}


def _convnext():
    """torchvision's ConvNeXt with two stages of one CNBlock (16 and 32 channels) on 16x16 images.
    layer_scale 0.5 rather than torchvision's 1e-6: at 1e-6 the blocks add a millionth of their
    output to the residual, so a block computed wrongly would not show in the outputs."""
    import torch
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], stochastic_depth_prob=0.0,
                     layer_scale=0.5, num_classes=10)
    return model, {"x": torch.randn(4, 3, 16, 16)}


def _mobilenet_v3():
    """torchvision's MobileNetV3 on mobilenet_v3_small's configuration at width 0.25 with the
    reduced tail, its first 5 inverted-residual blocks (squeeze-excitation, hardswish, strides 2)
    and a 32-wide last layer: the whole small model has 61k parameters. 24x24 images leave the
    last feature map 2x2 (it divides by 16), so train-mode BatchNorm has several values per
    channel on one sample, as a stage replica of one sample needs."""
    import torch
    from torchvision.models import mobilenetv3
    torch.manual_seed(0)
    setting, _ = mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25, reduced_tail=True)
    model = mobilenetv3.MobileNetV3(setting[:5], 32, num_classes=10, dropout=0.0)
    return model, {"x": torch.randn(4, 3, 24, 24)}


def _tied():
    """A GPT-2-style language model whose head is its token embedding (head.weight is
    embed.weight: one parameter under two state_dict keys), with learned positions and pre-norm
    MLP blocks (no attention, so that its TorchScript export loads on libtorch 1.13 too)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.ln = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"), nn.Linear(2 * dim, dim))

        def forward(self, x):
            return x + self.mlp(self.ln(x))

    class TiedLM(nn.Module):
        def __init__(self, vocab=64, dim=32, context=8, blocks=2):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(context, dim)
            self.blocks = nn.Sequential(*[Block(dim) for _ in range(blocks)])
            self.ln_f = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)
            self.head.weight = self.embed.weight
            # GPT-2's initialisation: N(0, 1) embeddings would start the tied head at logits of
            # size 30 and a loss of 22.
            nn.init.normal_(self.embed.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.02)

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1])
            return self.head(self.ln_f(self.blocks(self.embed(tokens) + self.pos(positions))))

    torch.manual_seed(0)
    return TiedLM(), {"tokens": torch.randint(0, 64, (4, 8))}


# name -> (title, builder, options). options: loss, lr (SGD's, large enough that 5 steps move the
# loss well beyond the checkers' 1e-4), tolerance, notes.
MODELS = {
    "llama": ("Llama-style decoder", _llama, {"loss": "cross_entropy", "lr": 0.5}),
    "transformer_encoder": ("nn.TransformerEncoder norm_first", _transformer_encoder,
                            {"loss": "cross_entropy", "lr": 0.2}),
    "dense_moe": ("dense mixture of experts", _dense_moe, {"loss": "mse", "lr": 0.2}),
    "swin": ("torchvision SwinTransformer small", _swin, {"loss": "cross_entropy", "lr": 0.2}),
    "convnext": ("torchvision ConvNeXt small", _convnext, {"loss": "cross_entropy", "lr": 0.2}),
    "mobilenet_v3": ("torchvision MobileNetV3 small", _mobilenet_v3,
                     {"loss": "cross_entropy", "lr": 0.2,
                      "notes": "BatchNorm in training mode: the stored numbers are of the whole batch at once"}),
    "tied_embedding": ("tied embedding and head", _tied, {"loss": "cross_entropy", "lr": 0.5}),
}
STEPS = 5
DATA_SEED = 1


def build_model(name):
    """The module of MODELS[name] (train mode, initial weights) and its example inputs."""
    model, inputs = MODELS[name][1]()
    model.train()
    return model, inputs


# ---------------------------------------------------------------------------------------------
# Storing tensors.


def _npy_bytes(array):
    import numpy as np
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def save_npz(path, arrays):
    """np.savez_compressed with fixed timestamps (numpy stamps the current time, so two runs
    would differ); np.load reads it."""
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, array in arrays.items():
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, _npy_bytes(array))
    os.replace(tmp, path)


def _fixed_zip_times(path):
    """Rewrites a zip with every entry's timestamp at 1980-01-01, the rest as it was (names,
    order, bytes, compression, attributes): torch.export.save stamps the current time, so two
    runs would differ in those bytes alone."""
    with zipfile.ZipFile(path) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w") as target:
        for info, data in entries:
            info.date_time = (1980, 1, 1, 0, 0, 0)
            target.writestr(info, data)
    os.replace(tmp, path)


def _numpy(tensor):
    return tensor.detach().cpu().contiguous().numpy().copy()


# ---------------------------------------------------------------------------------------------
# Exports. Each works on its own copy of the pristine model: tracing runs the model, and a
# train-mode forward moves BatchNorm's running statistics.


def _input_arg(name, tensor):
    dims = "x".join(str(d) for d in tensor.shape)
    dtype = str(tensor.dtype).replace("torch.", "")
    return f"{name}:{dims}" if dtype == "float32" else f"{name}:{dims}:{dtype}"


def _restore(module, state):
    """Puts the pristine values back into a module's tensors, in place (a TorchScript module also
    lists non-persistent buffers, which no forward changes)."""
    import torch
    with torch.no_grad():
        for key, value in module.state_dict().items():
            if key in state:
                value.copy_(state[key])


def _check_state(form, saved, state):
    """An export holds the initial state_dict: the same keys (a tied weight under each of its
    names) and the same values."""
    import torch
    missing = sorted(set(state) - set(saved))
    differ = sorted(k for k in state if k in saved and not torch.equal(saved[k], state[k]))
    if missing or differ:
        raise SystemExit(f"error: the {form} export's state_dict lacks {missing[:3]} and differs at {differ[:3]}")


def export_torchscript(model, inputs, path, state):
    import torch
    model = copy.deepcopy(model)
    # With the trace check, as users trace (tests/corpus/make_corpus.py turns it off under 1.13;
    # under 2.6 every model here passes it). build() compares the outputs with the module's too.
    traced = torch.jit.trace(model, tuple(inputs.values()))
    # Tracing and its check ran train-mode forwards, which moved BatchNorm's running statistics.
    _restore(traced, state)
    traced.save(path)
    loaded = torch.jit.load(path)
    _check_state("torchscript", loaded.state_dict(), state)
    names = [a.name for a in loaded.forward.schema.arguments][1:]
    if names != list(inputs):
        raise SystemExit(f"error: {path}: forward arguments {names}, expected {list(inputs)}")
    ops = sorted({n.kind() for n in loaded.inlined_graph.nodes() if n.kind().startswith("aten::")})
    return {"dynamic_batch": True, "ops": ops}, loaded


def export_onnx(model, inputs, path, opset):
    import onnx
    import torch
    model = copy.deepcopy(model)
    names = list(inputs)
    torch.onnx.export(model, tuple(inputs.values()), path, input_names=names, output_names=["output"],
                      opset_version=opset, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes={n: {0: "batch"} for n in names + ["output"]})
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    ops = sorted({n.op_type for n in proto.graph.node})
    return {"dynamic_batch": True, "ops": ops, "opset": opset, "ir_version": proto.ir_version}


def export_pt2(model, inputs, path, state):
    """torch.export with the batch dim dynamic, as users write it: Dim("batch") first; where that
    fails, Dim("batch", max=1024) (slicing to the end, x[..., k:], guards the batch against
    2^63 - 1, which an unbounded dim violates); where export proves the batch must be a
    constant, at the example batch. The manifest's batch_range says which: [min, max] with max
    null for unbounded, or null for a static batch."""
    import torch
    from torch.utils._sympy.numbers import int_oo
    program, batch_range = None, None
    # A failed attempt also logs the guard's creation stack at ERROR: the one line below says it.
    logging.getLogger("torch._guards").setLevel(logging.CRITICAL)
    for label, dim in (('Dim("batch")', torch.export.Dim("batch")),
                       ('Dim("batch", max=1024)', torch.export.Dim("batch", max=1024))):
        try:
            program = torch.export.export(copy.deepcopy(model), tuple(inputs.values()),
                                          dynamic_shapes={n: {0: dim} for n in inputs})
        except Exception as error:  # torch raises several kinds for a constrained dim
            reason = " ".join(line.strip() for line in str(error).splitlines()[:2])
            print(f"  pt2: {label}: {type(error).__name__}: {reason}", flush=True)
            continue
        (ranges,) = program.range_constraints.values()  # the batch is the programs' only symbol
        batch_range = [int(ranges.lower), None if ranges.upper == int_oo else int(ranges.upper)]
        break
    if program is None:
        program = torch.export.export(copy.deepcopy(model), tuple(inputs.values()))
    torch.export.save(program, path)
    _fixed_zip_times(path)
    program = torch.export.load(path)  # what the file holds is what build() checks against the module
    _check_state("pt2", program.state_dict, state)
    # OpOverloads print as aten.NAME.OVERLOAD; the size arithmetic of a dynamic batch calls Python's
    # operators (operator.mul), named here by module and name.
    ops = sorted({str(n.target) if isinstance(n.target, torch._ops.OpOverload)
                  else f"{n.target.__module__}.{n.target.__name__}"
                  for n in program.graph.nodes if n.op == "call_function"})
    return {"dynamic_batch": batch_range is not None, "batch_range": batch_range, "ops": ops}, program


# ---------------------------------------------------------------------------------------------
# PyTorch's own numbers.


def loss_sum(out, target, loss):
    """The loss summed over its elements, as training_reference.py's _loss_sum."""
    import torch.nn.functional as F
    if loss == "cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1), reduction="sum")
    return F.mse_loss(out, target, reduction="sum")


def make_target(rng, output_shape, loss, rows):
    """Targets for `rows` samples of an output of output_shape (batch first)."""
    import numpy as np
    per_sample = list(output_shape[1:])
    if loss == "cross_entropy":
        return rng.integers(0, per_sample[-1], size=[rows] + per_sample[:-1]).astype(np.int64)
    return rng.standard_normal([rows] + per_sample).astype(np.float32)


def make_inputs(rng, inputs, rows):
    """Random rows like the example inputs: normal floats, integers below the embedding's rows
    (every integer input here indexes a 64-row vocabulary)."""
    import numpy as np
    arrays = {}
    for name, example in inputs.items():
        shape = [rows] + list(example.shape[1:])
        if example.dtype.is_floating_point:
            arrays[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            arrays[name] = rng.integers(0, 64, size=shape).astype(np.int64)
    return arrays


def reference(model, inputs, target, loss):
    """Outputs, loss and parameter gradients of one train-mode forward/backward, gradients by
    state_dict key (a tied weight's under each of its keys)."""
    import torch
    model = copy.deepcopy(model)
    out = model(*[torch.from_numpy(a) for a in inputs.values()])
    value = loss_sum(out, torch.from_numpy(target), loss) / target_elements(out, target, loss)
    value.backward()
    params = dict(model.named_parameters(remove_duplicate=False))
    grads = {k: _numpy(p.grad) for k, p in params.items() if p.grad is not None}
    return _numpy(out), float(value.detach().double()), grads


def target_elements(out, target, loss):
    """The elements the mean runs over: the targets' for cross entropy, the output's for mse."""
    return target.size if loss == "cross_entropy" else out.numel()


def train_losses(model, data, target, batch, loss, lr, steps):
    """rannc-run's losses for `steps` SGD steps on data in order (see the module docstring)."""
    import torch
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        rows = slice(step * batch, (step + 1) * batch)
        optimizer.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(lr != 0):
            out = model(*[torch.from_numpy(a[rows]) for a in data.values()])
            value = loss_sum(out, torch.from_numpy(target[rows]), loss) / target_elements(out, target[rows], loss)
        if lr != 0:
            value.backward()
            optimizer.step()
        losses.append(float(value.detach().double()))
    return losses


# ---------------------------------------------------------------------------------------------


def _check_dropout(name, model):
    import torch
    for sub in model.modules():
        if isinstance(sub, torch.nn.Dropout) and sub.p != 0:
            raise SystemExit(f"error: {name}: a Dropout with p={sub.p} is left (verify refuses random ops)")


def build(name, out_dir):
    import numpy as np
    import torch
    title, _, options = MODELS[name]
    model, inputs = build_model(name)
    _check_dropout(name, model)
    folder = os.path.join(out_dir, name)
    os.makedirs(os.path.join(folder, "data"), exist_ok=True)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    batch_norm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())

    exports = {}
    files = {form: name + SUFFIX[form] for form in FORMS}
    exports["torchscript"], scripted = export_torchscript(model, inputs, os.path.join(folder, files["torchscript"]),
                                                          state)
    exports["onnx18"] = export_onnx(model, inputs, os.path.join(folder, files["onnx18"]), 18)
    exports["onnx20"] = export_onnx(model, inputs, os.path.join(folder, files["onnx20"]), 20)
    exports["pt2"], program = export_pt2(model, inputs, os.path.join(folder, files["pt2"]), state)
    for form in FORMS:
        exports[form]["file"] = f"{name}/{files[form]}"
        exports[form]["bytes"] = os.path.getsize(os.path.join(folder, files[form]))

    save_npz(os.path.join(folder, "state_dict.npz"), {k: _numpy(v) for k, v in state.items()})

    # The fixed inputs come from their own generator, not the example tensors (which seeded the weights).
    rng = np.random.default_rng(0)
    fixed = make_inputs(rng, inputs, len(next(iter(inputs.values()))))
    probe = copy.deepcopy(model)(*inputs.values())  # a copy: a train-mode forward moves BatchNorm's statistics
    target = make_target(rng, probe.shape, options["loss"], probe.shape[0])
    output, loss_value, grads = reference(model, fixed, target, options["loss"])
    trainable = {k for k, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    if set(grads) != trainable:
        raise SystemExit(f"error: {name}: no gradient for {sorted(trainable - set(grads))}")
    arrays = {f"input/{k}": v for k, v in fixed.items()}
    arrays.update(target=target, output=output, loss=np.array(loss_value))
    save_npz(os.path.join(folder, "reference.npz"), arrays)
    save_npz(os.path.join(folder, "grads.npz"), grads)

    # The exports compute what the module computes (a wrong export would make every check downstream wrong).
    with torch.no_grad():
        args = [torch.from_numpy(a) for a in fixed.values()]
        for form, got in (("torchscript", scripted(*args)), ("pt2", program.module()(*args))):
            if not torch.allclose(got, torch.from_numpy(output), rtol=1e-5, atol=1e-6):
                raise SystemExit(f"error: {name}: the {form} export's outputs differ from the module's")

    # Training data: `steps` global batches, from its own seed.
    rows = STEPS * probe.shape[0]
    data_rng = np.random.default_rng(DATA_SEED)
    data = make_inputs(data_rng, inputs, rows)
    data_target = make_target(data_rng, probe.shape, options["loss"], rows)
    for key, array in data.items():
        np.save(os.path.join(folder, "data", key + ".npy"), array)
    np.save(os.path.join(folder, "data", "target.npy"), data_target)
    losses = train_losses(model, data, data_target, probe.shape[0], options["loss"], options["lr"], STEPS)
    frozen = train_losses(model, data, data_target, probe.shape[0], options["loss"], 0.0, STEPS)
    moved = max(abs(a - b) / abs(b) for a, b in zip(losses, frozen))
    if not moved > 1e-3:
        raise SystemExit(f"error: {name}: SGD at lr {options['lr']} moves the losses by {moved:.1e}, too little to "
                         f"tell a run that never steps at 1e-4: raise lr")

    params = sum(p.numel() for p in model.parameters())
    entry = {
        "title": title,
        "inputs": [_input_arg(k, v) for k, v in inputs.items()],
        "batch": int(probe.shape[0]),
        "output_shape": list(probe.shape),
        "loss": options["loss"],
        "lr": options["lr"],
        "steps": STEPS,
        "losses": losses,
        "losses_without_update": frozen,
        "params": params,
        "batch_norm": batch_norm,
        # verify's default: across libtorch 1.13 and 2.6 and CPU kernel sets the stage files
        # differ from PyTorch 2.6 by 2e-6 at most (MobileNetV3's BatchNorm gradients), 1e-6 elsewhere.
        "tolerance": options.get("tolerance", 1e-5),
        "notes": options.get("notes", ""),
        "state_dict": f"{name}/state_dict.npz",
        "reference": f"{name}/reference.npz",
        "grads": f"{name}/grads.npz",
        "data": f"{name}/data",
        "exports": exports,
    }
    print(f"{name}: {params} params, inputs {' '.join(entry['inputs'])}, losses "
          f"{' '.join(f'{x:.5f}' for x in losses)}; pt2 batch range {exports['pt2']['batch_range']}",
          flush=True)
    return entry


def generate(out_dir):
    import numpy as np
    import onnx
    import torch
    import torchvision
    if int(torch.__version__.split(".")[0]) < 2:
        raise SystemExit(f"error: torch {torch.__version__}: the modern corpus needs PyTorch 2.x (see --root)")
    torch.set_num_threads(1)  # like each rannc-run rank; also keeps the reference's sums in one order
    # The TorchScript-based ONNX exporter warns, per BatchNorm, that the exported graph does not
    # count num_batches_tracked (ONNX has no such state), and that `training=` is deprecated in
    # favour of the module's own mode (which is train() already): both expected, neither news.
    warnings.filterwarnings("ignore", message="ONNX Preprocess - Removing mutation")
    warnings.filterwarnings("ignore", message="Setting `training` to something other than default")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    manifest = {"generator_sha256": _sha256_file(os.path.abspath(__file__)), "torch": torch.__version__,
                "torchvision": torchvision.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
                "forms": list(FORMS), "models": {}}
    for name in MODELS:
        manifest["models"][name] = build(name, out_dir)
    files = {}
    for folder, _, names in sorted(os.walk(out_dir)):
        for file in sorted(names):
            path = os.path.join(folder, file)
            files[os.path.relpath(path, out_dir)] = _sha256_file(path)
    manifest["files"] = files
    total = sum(os.path.getsize(os.path.join(out_dir, p)) for p in files)
    if total > SIZE_LIMIT:
        raise SystemExit(f"error: the fixtures take {total / 1e6:.2f} MB, over the 10 MB limit: shrink the models")
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"fixtures: {len(files)} files, {total / 1e6:.2f} MB")


def generate_in_root(root, out_dir):
    """Runs this script in the root at ROOT_WORKDIR and copies its fixtures to out_dir."""
    work = os.path.join(root, ROOT_WORKDIR.lstrip("/"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shutil.copy(os.path.abspath(__file__), os.path.join(work, "make_modern_corpus.py"))
    command = ["chroot", root, "python3", f"{ROOT_WORKDIR}/make_modern_corpus.py",
               "--out", f"{ROOT_WORKDIR}/fixtures"]
    print("run:", " ".join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        raise SystemExit("error: the generator failed in the root (its output above)")
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(os.path.join(work, "fixtures"), out_dir)
    shutil.rmtree(work)
    print(f"fixtures copied to {out_dir}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    parser.add_argument("--root", help="a root whose python3 has PyTorch 2.x: run there under chroot")
    parser.add_argument("--force", action="store_true", help="regenerate even when up to date")
    args = parser.parse_args()
    out_dir = os.path.abspath(args.out)
    if not args.force and up_to_date(out_dir):
        print(f"fixtures in {out_dir} are up to date")
        return
    if args.root:
        generate_in_root(args.root, out_dir)
    else:
        generate(out_dir)


if __name__ == "__main__":
    main()
