"""Generates the third-party model corpus: small configurations of models the team did not write
(torchvision, torchaudio, torchtext's RoBERTa, torch.nn's Transformer and RNNs, a model calling a
@torch.jit.script function, ONNX exports with and without a dynamic batch), each traced in
train() mode with dropout p=0 (verify refuses random ops in training mode), plus manifest.json.

usage: /usr/bin/python3 make_corpus.py --out DIR [--only NAME,...]

manifest.json: {"models": {NAME: {"title", "file", "inputs": ["NAME:DIMS[:DTYPE]", ...], "batch",
"loss": "cross_entropy"|"mse", "train": bool, "accumulate": bool, "expect_refusal": REGEX|null,
"tolerance", "every_cut_tolerance", "source", "notes"}}}. `inputs` are the --input arguments of
rannc-partition, named after the forward's arguments; `train` says whether check_corpus.py
--train should run rannc-run on it; `expect_refusal` is set only where the tool's refusal is the
documented, honest answer (the regex matches its one-line error); `tolerance` is verify's for the
plans of 2 and 4 stages, `every_cut_tolerance` for a stage at every cut point.

Every model is loaded back with torch.jit.load and run at another batch size before the manifest
lists it, so a failure of the tool is never a failure of the file. A run with nothing to do (every
file and the manifest there, this script unchanged) returns without rebuilding.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def _script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Model builders. Each returns (module_or_None, example_inputs: dict name -> tensor, extra dict).
# Imports are inside so that --only builds only what it needs.


def _torchvision_resnet18_slim():
    """torchvision's ResNet-18 (BasicBlock x [2,2,2,2]) at a quarter of the width, rebuilt with
    torchvision's own _make_layer so the blocks are torchvision's code; 64x64 images keep layer4
    at 2x2 so train-mode BatchNorm has several values per channel even on one sample."""
    import torch
    from torch import nn
    from torchvision.models.resnet import BasicBlock, ResNet
    torch.manual_seed(0)
    m = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)
    m.inplanes = 16
    m.conv1 = nn.Conv2d(3, 16, kernel_size=7, stride=2, padding=3, bias=False)
    m.bn1 = nn.BatchNorm2d(16)
    m.layer1 = m._make_layer(BasicBlock, 16, 2)
    m.layer2 = m._make_layer(BasicBlock, 32, 2, stride=2)
    m.layer3 = m._make_layer(BasicBlock, 64, 2, stride=2)
    m.layer4 = m._make_layer(BasicBlock, 128, 2, stride=2)
    m.fc = nn.Linear(128, 10)
    return m, {"x": torch.randn(4, 3, 64, 64)}


def _mobilenet_v3_small():
    import torch
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.mobilenet_v3_small(weights=None, num_classes=10, dropout=0.0)
    return m, {"x": torch.randn(4, 3, 64, 64)}


def _efficientnet_b0_half():
    """EfficientNet-B0's blocks at width and depth x0.5 (torchvision's own config helper),
    stochastic depth 0 (it is random in training mode), classifier dropout 0."""
    import torch
    from torchvision.models import efficientnet as E
    torch.manual_seed(0)
    setting, last_channel = E._efficientnet_conf("efficientnet_b0", width_mult=0.5, depth_mult=0.5)
    m = E.EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10, last_channel=last_channel)
    return m, {"x": torch.randn(4, 3, 64, 64)}


def _lraspp():
    """torchvision's LR-ASPP segmentation model on MobileNetV3-Large; returns out["out"] (the
    torchvision model returns a dict, which torch.jit.trace cannot return strictly)."""
    import torch
    import torchvision
    torch.manual_seed(0)
    inner = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                        num_classes=5)

    class Segmenter(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"].permute(0, 2, 3, 1)  # classes last, for cross entropy

    return Segmenter(inner), {"x": torch.randn(4, 3, 64, 64)}


def _r3d_18_slim():
    """torchvision's R3D-18 video ResNet (BasicBlock, Conv3DSimple, [2,2,2,2]) at a quarter of
    the width on a 4-frame 32x32 clip, rebuilt with torchvision's _make_layer."""
    import torch
    from torch import nn
    from torchvision.models.video.resnet import BasicBlock, BasicStem, Conv3DSimple, VideoResNet
    torch.manual_seed(0)
    m = VideoResNet(BasicBlock, [Conv3DSimple] * 4, [2, 2, 2, 2], BasicStem, num_classes=10)
    m.inplanes = 16
    m.stem = nn.Sequential(nn.Conv3d(3, 16, kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
                           nn.BatchNorm3d(16), nn.ReLU(inplace=True))
    m.layer1 = m._make_layer(BasicBlock, Conv3DSimple, 16, 2, stride=1)
    m.layer2 = m._make_layer(BasicBlock, Conv3DSimple, 32, 2, stride=2)
    m.layer3 = m._make_layer(BasicBlock, Conv3DSimple, 64, 2, stride=2)
    m.layer4 = m._make_layer(BasicBlock, Conv3DSimple, 128, 2, stride=2)
    m.fc = nn.Linear(128, 10)
    return m, {"x": torch.randn(4, 3, 4, 32, 32)}


def _swin_small():
    """torchvision's SwinTransformer (patch 4, embed 32, depths [2, 2], heads [2, 4], window 4) on
    32x32 images: its shifted-window block builds the attention mask from the feature map's sizes
    (new_zeros, then fill_ on slices of it), which every stage reading the mask must compute in
    full. Stochastic depth 0 (it is random in training mode)."""
    import torch
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    m = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                        stochastic_depth_prob=0.0, num_classes=10)
    return m, {"x": torch.randn(4, 3, 32, 32)}


def _weight_norm_as_parametrization(model):
    """torch 1.13 cannot trace a module with nn.utils.weight_norm's pre-hook ('WeightNorm' object
    has no attribute '__name__'), so each such weight becomes the same g * v / ||v|| through
    torch.nn.utils.parametrize: weight_g and weight_v stay the parameters (as
    parametrizations.weight.original0/1) and the norm is computed in the traced graph."""
    import torch
    from torch.nn.utils import parametrize
    from torch.nn.utils.weight_norm import WeightNorm

    class WeightNormParametrization(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim

        def forward(self, weight_g, weight_v):
            return torch._weight_norm(weight_v, weight_g, self.dim)

        def right_inverse(self, weight):
            return torch.norm_except_dim(weight, 2, self.dim), weight

    for module in list(model.modules()):
        for key, hook in list(module._forward_pre_hooks.items()):
            if isinstance(hook, WeightNorm):
                dim = hook.dim
                g = getattr(module, hook.name + "_g").detach().clone()
                v = getattr(module, hook.name + "_v").detach().clone()
                torch.nn.utils.remove_weight_norm(module, hook.name)
                parametrize.register_parametrization(module, hook.name, WeightNormParametrization(dim),
                                                     unsafe=True)
                original = getattr(module.parametrizations, hook.name)
                with torch.no_grad():
                    original.original0.copy_(g)
                    original.original1.copy_(v)


def _wav2vec2(mode, layer_norm_first, conv_bias):
    import torch
    from torchaudio.models import wav2vec2_model
    torch.manual_seed(0)
    inner = wav2vec2_model(
        extractor_mode=mode, extractor_conv_layer_config=[(32, 10, 5), (32, 3, 2), (32, 2, 2)],
        extractor_conv_bias=conv_bias, encoder_embed_dim=64, encoder_projection_dropout=0.0,
        encoder_pos_conv_kernel=16, encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=4,
        encoder_attention_dropout=0.0, encoder_ff_interm_features=128, encoder_ff_interm_dropout=0.0,
        encoder_dropout=0.0, encoder_layer_norm_first=layer_norm_first, encoder_layer_drop=0.0, aux_num_out=10)
    _weight_norm_as_parametrization(inner)

    class Frames(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, waveforms):
            return self.model(waveforms)[0]

    return Frames(inner), {"waveforms": torch.randn(4, 1600)}


def _conformer():
    import torch
    from torchaudio.models import Conformer
    torch.manual_seed(0)
    m = Conformer(input_dim=32, num_heads=4, ffn_dim=64, num_layers=2, depthwise_conv_kernel_size=7, dropout=0.0)
    return m, {"input": torch.randn(4, 20, 32), "lengths": torch.full((4,), 20, dtype=torch.int64)}


def _conformer_full_length():
    """Conformer with every utterance full length (lengths built inside from the input's shape),
    so random integer inputs cannot make whole rows of the padding mask True."""
    import torch
    from torchaudio.models import Conformer
    torch.manual_seed(0)
    inner = Conformer(input_dim=32, num_heads=4, ffn_dim=64, num_layers=2, depthwise_conv_kernel_size=7, dropout=0.0)

    class FullLength(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input):
            lengths = torch.full((input.shape[0],), input.shape[1], dtype=torch.int64)
            return self.model(input, lengths)[0]

    return FullLength(inner), {"input": torch.randn(4, 20, 32)}


def _emformer():
    import torch
    from torchaudio.models import Emformer
    torch.manual_seed(0)
    m = Emformer(input_dim=32, num_heads=4, ffn_dim=64, num_layers=2, segment_length=4, dropout=0.0,
                 left_context_length=4, right_context_length=2, max_memory_size=0)
    # input: (B, T + right_context_length, D); lengths: valid frames of each utterance (<= T).
    return m, {"input": torch.randn(4, 18, 32), "lengths": torch.full((4,), 16, dtype=torch.int64)}


def _load_torchtext_roberta():
    """torchtext's RoBERTa model code without `import torchtext` (its C extension is broken in
    Debian): stub packages in sys.modules and the two source files loaded by importlib."""
    base = None
    for path in sys.path + ["/usr/lib/python3/dist-packages"]:
        candidate = os.path.join(path, "torchtext", "models", "roberta")
        if os.path.isfile(os.path.join(candidate, "model.py")):
            base = candidate
            break
    if base is None:
        raise SystemExit("error: torchtext/models/roberta/model.py not found")
    for name, folder in (("torchtext", os.path.dirname(os.path.dirname(base))),
                         ("torchtext.models", os.path.dirname(base)), ("torchtext.models.roberta", base)):
        if name not in sys.modules or not getattr(sys.modules[name], "_corpus_stub", False):
            package = types.ModuleType(name)
            package.__path__ = [folder]
            package._corpus_stub = True
            sys.modules[name] = package
    modules = {}
    for leaf in ("modules", "model"):
        full = "torchtext.models.roberta." + leaf
        spec = importlib.util.spec_from_file_location(full, os.path.join(base, leaf + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        modules[leaf] = module
    return modules["model"]


def _roberta():
    import torch
    model = _load_torchtext_roberta()
    torch.manual_seed(0)
    m = model.RobertaEncoder(vocab_size=100, embedding_dim=32, ffn_dimension=64, padding_idx=1, max_seq_len=64,
                             num_attention_heads=4, num_encoder_layers=2, dropout=0.0)
    tokens = torch.randint(2, 100, (4, 12))
    return m, {"tokens": tokens}


def _nn_transformer():
    """torch.nn.Transformer, batch_first, with the causal target mask built from the target's
    length inside forward (a batch-free tensor every decoder layer reads)."""
    import torch
    torch.manual_seed(0)

    class Seq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                                                    dim_feedforward=64, dropout=0.0, batch_first=True)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, src, tgt):
            mask = self.transformer.generate_square_subsequent_mask(tgt.size(1))
            return self.head(self.transformer(src, tgt, tgt_mask=mask))

    return Seq2Seq(), {"src": torch.randn(4, 10, 32), "tgt": torch.randn(4, 8, 32)}


def _nn_transformer_encoder_seq_first():
    """torch.nn.TransformerEncoder with batch_first=False (MultiheadAttention reshapes by the
    batch size read from the shape), fed batch-first inputs transposed inside forward."""
    import torch
    torch.manual_seed(0)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
            self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.encoder(x.transpose(0, 1)).transpose(0, 1))

    return Encoder(), {"x": torch.randn(4, 12, 32)}


def _lstm():
    import torch
    torch.manual_seed(0)

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16)
            self.lstm1 = torch.nn.LSTM(16, 32, batch_first=True)
            self.lstm2 = torch.nn.LSTM(32, 32, batch_first=True)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, tokens):
            out, _ = self.lstm1(self.embed(tokens))
            out, _ = self.lstm2(torch.relu(out))
            return self.head(torch.relu(out))

    return Tagger(), {"tokens": torch.randint(0, 50, (4, 12))}


def _gru():
    import torch
    torch.manual_seed(0)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(16, 32, num_layers=2, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(64, 10)

        def forward(self, x):
            out, _ = self.gru(x)
            return self.head(out[:, -1])

    return Classifier(), {"x": torch.randn(4, 12, 16)}


def _scripted_loop():
    """A traced MLP that calls a @torch.jit.script function with a loop whose trip count depends
    on tensor values (the trace keeps the scripted call, loop included)."""
    import torch
    torch.manual_seed(0)

    # Halves each element until it is within the limit: the trip count depends on the values of
    # the whole batch, each element's result only on itself (samples stay independent).
    @torch.jit.script
    def shrink(x: torch.Tensor, limit: float) -> torch.Tensor:
        steps = 0
        while bool(x.abs().max() > limit) and steps < 8:
            x = torch.where(x.abs() > limit, x * 0.5, x)
            steps += 1
        return x

    class Shrinker(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.fc2(torch.relu(shrink(self.fc1(x), 1.0)))

    return Shrinker(), {"x": torch.randn(4, 16)}


def _scripted_no_control_flow():
    """A traced MLP that calls a @torch.jit.script function without control flow (its body is
    plain tensor math): nothing data-dependent, so it must plan and verify."""
    import torch
    torch.manual_seed(0)

    @torch.jit.script
    def quick_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * torch.sigmoid(scale * x)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 32)
            self.fc3 = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.fc3(quick_gelu(self.fc2(quick_gelu(self.fc1(x), 1.702)), 1.702))

    return Mlp(), {"x": torch.randn(4, 16)}


def _onnx_cnn():
    import torch
    from torch import nn
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                      nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    return m, {"x": torch.randn(4, 3, 16, 16)}


def _onnx_mlp():
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(24, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 64), nn.Tanh(),
                                        nn.Linear(64, 10))

        def forward(self, x):
            # A reshape by the batch size read from the shape: with a fixed-batch export this
            # becomes a constant target.
            return self.layers(x.reshape(x.shape[0], -1))

    return Mlp(), {"x": torch.randn(4, 4, 6)}


# name -> (title, builder, format, options). options: loss, train, accumulate, expect_refusal,
# onnx_dynamic, tolerance, every_cut_tolerance (check_corpus.py --every-cut), notes.
MODELS = {
    "resnet18_slim": ("torchvision resnet18 quarter width", _torchvision_resnet18_slim, "pt",
                      {"loss": "cross_entropy", "train": False, "accumulate": True,
                       "notes": "BatchNorm: with stages of 2 and 1 replicas rannc-run normalises over slices "
                                "of 1 and 2 samples, which the single-process reference cannot reproduce"}),
    "mobilenet_v3_small": ("torchvision mobilenet_v3_small", _mobilenet_v3_small, "pt",
                           {"loss": "cross_entropy", "train": False, "accumulate": True}),
    "efficientnet_b0_half": ("torchvision efficientnet_b0 half", _efficientnet_b0_half, "pt",
                             {"loss": "cross_entropy", "train": False, "accumulate": True}),
    # backbone.1's last BatchNorm bias has a gradient of 0 in exact arithmetic (the next block's
    # 1x1 convolution turns it into a per-channel constant, which its train-mode BatchNorm
    # removes); in float32 it is the rounding of a sum over 1024 positions whose terms add up to
    # 6.5e3 in magnitude, about 4e-4. A stage at every op sums in another order: up to 7.8e-4.
    "lraspp_mobilenet_v3": ("torchvision lraspp_mobilenet_v3_large", _lraspp, "pt",
                            {"loss": "cross_entropy", "train": False, "accumulate": True,
                             "every_cut_tolerance": 2e-3}),
    "r3d_18_slim": ("torchvision r3d_18 quarter width", _r3d_18_slim, "pt",
                    {"loss": "cross_entropy", "train": False, "accumulate": True}),
    "swin_small": ("torchvision SwinTransformer small", _swin_small, "pt",
                   {"loss": "cross_entropy", "train": False}),
    "wav2vec2_group_norm": ("wav2vec2 group_norm", lambda: _wav2vec2("group_norm", False, False), "pt",
                            {"loss": "cross_entropy", "train": False,
                             "notes": "torch 1.13's gelu_backward on a transposed gradient returns stale memory "
                                      "(docs/user-guide.md, Known problems): rannc's tools mend it and verify checks it against "
                                      "float64, but the Python training reference runs unmended torch"}),
    "wav2vec2_layer_norm": ("wav2vec2 layer_norm", lambda: _wav2vec2("layer_norm", True, True), "pt",
                            {"loss": "cross_entropy", "train": True, "tolerance": 1e-4,
                             "notes": "attention k_proj.bias gradients are 0 in exact arithmetic (softmax is "
                                      "invariant to it), ~3e-8 in float: relative differences of them are noise"}),
    "hubert_large_like": ("hubert large-like", lambda: _wav2vec2("layer_norm", True, False), "pt",
                          {"loss": "cross_entropy", "train": False, "tolerance": 1e-4,
                           "notes": "hubert_pretrain_large's encoder config (layer_norm extractor without conv "
                                    "bias, layer norm first) scaled down; HuBERTPretrainModel itself masks "
                                    "randomly in training mode"}),
    # The depthwise convolution's bias feeds BatchNorm, which removes it: its gradient is 0 in
    # exact arithmetic and rounding noise of 1e-5 in float (outputs agree to 3e-7).
    "conformer": ("torchaudio Conformer", _conformer, "pt", {"loss": "mse", "train": False, "tolerance": 1e-2}),
    "conformer_full_length": ("torchaudio Conformer full length", _conformer_full_length, "pt",
                              {"loss": "mse", "train": False, "tolerance": 1e-2}),
    "emformer": ("torchaudio Emformer", _emformer, "pt",
                 {"loss": "mse", "train": False,
                  # A shorter utterance's output changes with the other utterances of its batch
                  # (eager torchaudio too: 0.98 at frames past its length), so microbatches and
                  # replicas would train another model.
                  "expect_refusal": r"^rannc-partition: error: .*samples interact along dim 0"}),
    "roberta": ("torchtext RoBERTa encoder", _roberta, "pt",
                {"loss": "mse", "train": False,
                 "notes": "output is T x B x C (torchtext transposes back to sequence first)"}),
    "nn_transformer": ("nn.Transformer batch_first", _nn_transformer, "pt", {"loss": "cross_entropy", "train": True}),
    "nn_transformer_encoder": ("nn.TransformerEncoder seq first", _nn_transformer_encoder_seq_first, "pt",
                               {"loss": "cross_entropy", "train": True}),
    "lstm": ("nn.LSTM tagger", _lstm, "pt", {"loss": "cross_entropy", "train": True, "lr": 5.0}),
    "gru": ("nn.GRU bidirectional", _gru, "pt", {"loss": "cross_entropy", "train": True}),
    "scripted_loop": ("jit.script function with a data-dependent loop", _scripted_loop, "pt",
                      {"loss": "cross_entropy", "train": True,
                       "plan_args": {"2": ["--input", "x:64x16", "--batch", "64", "--microbatches", "2"],
                                     "4": ["--input", "x:64x16", "--batch", "64", "--microbatches", "2"]},
                       "notes": "the scripted function is one opaque op of its stage"}),
    "scripted_function": ("jit.script function without control flow", _scripted_no_control_flow, "pt",
                          {"loss": "cross_entropy", "train": True,
                           # At 2-sample microbatches no stage gains from a second replica.
                           "plan_args": {"2": ["--input", "x:16x16", "--batch", "16", "--microbatches", "2"]}}),
    # The first convolution's bias gradient is a sum over 2 x 16 x 16 positions whose terms cancel
    # to about 1e-3 of their size: with stage 1 on 2 replicas the sum runs in another order and
    # moves by 2e-7, 1.3e-4 of the result (outputs agree to 1.4e-7).
    "onnx_cnn_dynamic": ("ONNX CNN dynamic batch", _onnx_cnn, "onnx",
                         {"loss": "cross_entropy", "train": False, "onnx_dynamic": True, "tolerance": 1e-3}),
    "onnx_cnn_fixed": ("ONNX CNN fixed batch", _onnx_cnn, "onnx",
                       {"loss": "cross_entropy", "train": False, "onnx_dynamic": False,
                        "plan_args": {"2": ["--input", "x:4x3x16x16", "--batch", "8", "--microbatches", "2"],
                                      "4": ["--input", "x:4x3x16x16", "--batch", "8", "--microbatches", "2"]},
                        "one_replica": "a fixed-batch export runs its batch as one microbatch on one replica"}),
    # At batch 4 in 2 microbatches of 2 on 3 devices the planner leaves one device unused for this
    # tiny MLP; batch 64 (dynamic) or 1 microbatch of 4 (fixed) makes it replicate a stage.
    "onnx_mlp_dynamic": ("ONNX MLP dynamic batch", _onnx_mlp, "onnx",
                         {"loss": "cross_entropy", "train": False, "onnx_dynamic": True,
                          "plan_args": {"2": ["--input", "x:64x4x6", "--batch", "64", "--microbatches", "2"]}}),
    "onnx_mlp_fixed": ("ONNX MLP fixed batch", _onnx_mlp, "onnx",
                       {"loss": "cross_entropy", "train": False, "onnx_dynamic": False,
                        "plan_args": {"2": ["--input", "x:4x4x6", "--batch", "8", "--microbatches", "2"],
                                      "4": ["--input", "x:4x4x6", "--batch", "8", "--microbatches", "2"]},
                        "one_replica": "a fixed-batch export runs its batch as one microbatch on one replica",
                        "notes": "exported without dynamic_axes: the Reshape target is the constant (4, -1)"}),
}


def _input_arg(name, tensor):
    dims = "x".join(str(d) for d in tensor.shape)
    dtype = str(tensor.dtype).replace("torch.", "")
    return f"{name}:{dims}" if dtype == "float32" else f"{name}:{dims}:{dtype}"


def _disable_dropout(module):
    import torch
    for sub in module.modules():
        if isinstance(sub, torch.nn.Dropout) and sub.p != 0:
            raise SystemExit(f"error: {type(module).__name__}: a Dropout with p={sub.p} is left")


def _double_batch(inputs):
    import torch
    return {k: torch.cat([v, v]) for k, v in inputs.items()}


def build(name, out_dir):
    import torch
    title, builder, fmt, options = MODELS[name]
    model, inputs = builder()
    model.train()
    _disable_dropout(model)
    path = os.path.join(out_dir, f"{name}.{fmt}")
    names = list(inputs)
    values = tuple(inputs.values())
    tmp = path + ".tmp"
    if fmt == "pt":
        with torch.no_grad():
            traced = torch.jit.trace(model, values, check_trace=False)
        traced.save(tmp)
        loaded = torch.jit.load(tmp)
        loaded.train()
        out = loaded(*_double_batch(inputs).values())  # runs at another batch
        forward_args = [a.name for a in loaded.forward.schema.arguments][1:]
        if forward_args != names:
            raise SystemExit(f"error: {name}: forward arguments {forward_args}, expected {names}")
    else:
        import onnx
        dynamic = options.get("onnx_dynamic", True)
        probe = model(*values)
        outputs = ["out"]
        kwargs = {}
        if dynamic:
            kwargs["dynamic_axes"] = {n: {0: "batch"} for n in names + outputs}
        torch.onnx.export(model, values, tmp, input_names=names, output_names=outputs, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, **kwargs)
        onnx.checker.check_model(onnx.load(tmp))
        out = probe
    os.replace(tmp, path)
    size = os.path.getsize(path)
    if size > 20 * 2 ** 20:
        raise SystemExit(f"error: {path}: {size} bytes, over the corpus' 20 MiB per model")
    first = out
    while isinstance(first, (tuple, list)):
        first = first[0]
    entry = {
        "title": title,
        "file": os.path.basename(path),
        "format": fmt,
        "inputs": [_input_arg(n, v) for n, v in inputs.items()],
        "batch": int(values[0].shape[0]),
        "output_shape_at_double_batch": list(first.shape),
        "params": sum(p.numel() for p in model.parameters()),
        "bytes": size,
        "loss": options["loss"],
        "train": options.get("train", False),
        "accumulate": options.get("accumulate", False),
        "expect_refusal": options.get("expect_refusal"),
        "notes": options.get("notes", ""),
        "plan_args": options.get("plan_args", {}),
        "lr": options.get("lr", 0.5),
        "tolerance": options.get("tolerance", 1e-5),
        "every_cut_tolerance": options.get("every_cut_tolerance", options.get("tolerance", 1e-5)),
        "one_replica": options.get("one_replica"),
    }
    print(f"{name}: {entry['file']} {size / 2 ** 20:.1f} MiB, {entry['params']} params, inputs "
          f"{' '.join(entry['inputs'])}", flush=True)
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", help="comma-separated model names (default: all)")
    args = parser.parse_args()
    names = list(MODELS) if not args.only else args.only.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"error: unknown model(s) {', '.join(unknown)} (known: {', '.join(MODELS)})")
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest = {"generator_sha256": "", "models": {}}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    digest = _script_hash()
    if manifest.get("generator_sha256") != digest:
        manifest = {"generator_sha256": digest, "models": {}}
    todo = [n for n in names if n not in manifest["models"]
            or not os.path.exists(os.path.join(args.out, manifest["models"][n]["file"]))]
    if not todo:
        print(f"corpus in {args.out} is up to date ({len(names)} models)")
        return
    import torch
    torch.set_num_threads(1)
    for name in todo:
        manifest["models"][name] = build(name, args.out)
        tmp = manifest_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        os.replace(tmp, manifest_path)


if __name__ == "__main__":
    main()
