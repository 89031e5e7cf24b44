#!/usr/bin/python3
"""Writes gpt3-175b.pt2: GPT-3 175B (96 layers, hidden 12288, 96 heads, sequence 2048, vocabulary
50257) exported by torch.export from the meta device, so that its archive holds the program and
no weights (every tensor of its state dict is a meta tensor: no bytes). The shape-only .pt2
counterpart of samples/make_shape_only.py's gpt3-175b.onnx, layer for layer: token and learned
position embeddings, pre-LN blocks of a fused QKV projection, attention written out (scores
scaled, a causal mask buffer, softmax), an exact-GELU MLP of 4 x hidden, a final LayerNorm and
the head tied to the token embedding; the batch dynamic.

Run it with the PyTorch 2.6 of a Debian 13 root (scripts/debian13.sh makes one); the archive is
rewritten deflated (torch.export.save stores its entries), which makes it a few hundred KB:
    cp tests/models/pt2/export_gpt3_shape_only.py /srv/trixie/tmp/ &&
    chroot /srv/trixie python3 /tmp/export_gpt3_shape_only.py --out /tmp/gpt3-175b.pt2 &&
    cp /srv/trixie/tmp/gpt3-175b.pt2 tests/models/pt2/
"""
import argparse
import io
import math
import os
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 96, 12288, 96, 2048, 50257
LN_EPS = 1e-5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.norm2 = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        self.fc1 = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc2 = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x, mask):
        b, t, _ = x.shape
        d = HIDDEN // HEADS
        q, k, v = self.qkv(self.norm1(x)).split(HIDDEN, dim=2)
        q = q.view(b, t, HEADS, d).transpose(1, 2)
        k = k.view(b, t, HEADS, d).transpose(1, 2)
        v = v.view(b, t, HEADS, d).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        context = torch.matmul(scores.softmax(dim=-1), v).transpose(1, 2).reshape(b, t, HIDDEN)
        x = x + self.out(context)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(SEQ, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.final_norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        # True where attention is allowed; not a weight.
        self.register_buffer("causal_mask", torch.ones(SEQ, SEQ, dtype=torch.bool).tril(), persistent=False)
        self.register_buffer("positions", torch.arange(SEQ), persistent=False)

    def forward(self, tokens):
        x = self.word(tokens) + self.position(self.positions)
        for layer in self.layers:
            x = layer(x, self.causal_mask)
        return torch.matmul(self.final_norm(x), self.word.weight.t())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with torch.device("meta"):
        model = Gpt().train()
        tokens = torch.zeros(4, SEQ, dtype=torch.long)
    params = sum(p.numel() for p in model.parameters())
    program = torch.export.export(model, (tokens,), dynamic_shapes={"tokens": {0: torch.export.Dim("batch", min=1)}})
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    with zipfile.ZipFile(buffer) as stored, zipfile.ZipFile(args.out + ".tmp", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for info in stored.infolist():
            entry = zipfile.ZipInfo(info.filename, (2025, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, stored.read(info.filename))
    os.replace(args.out + ".tmp", args.out)
    print("wrote %s: %d bytes, %d params (%.1fB), %d nodes, torch %s" % (
        args.out, os.path.getsize(args.out), params, params / 1e9, len(program.graph.nodes), torch.__version__))


if __name__ == "__main__":
    main()
