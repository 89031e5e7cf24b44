#!/usr/bin/python3
"""Writes tiny_attention.pt2 beside this script: a small causal-attention LM exported by
torch.export (PyTorch 2.6, its flat layout), the seed of the .pt2 layout tests
(tests/models/make_pt2_layouts.py) and of the hostile .pt2 cases (tests/fuzz/hostile_inputs.py).

Run it with the PyTorch 2.6 of a Debian 13 root (scripts/debian13.sh makes one):
    cp tests/models/pt2/export_tiny_attention.py /srv/trixie/tmp/ &&
    chroot /srv/trixie python3 /tmp/export_tiny_attention.py --out /tmp/tiny_attention.pt2 &&
    cp /srv/trixie/tmp/tiny_attention.pt2 tests/models/pt2/

What it holds, so that every kind of entry the frontend reads is there: a tied embedding and head
(two state_dict names, one tensor), a persistent buffer (in the state_dict), a non-persistent
buffer and a lifted tensor constant (both among the constants), grouped-query attention through
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), and a dynamic batch.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, SEQ, HEADS, KV_HEADS = 50, 16, 8, 4, 2


class TinyAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(SEQ, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.q = nn.Linear(HIDDEN, HIDDEN)
        self.kv = nn.Linear(HIDDEN, 2 * KV_HEADS * (HIDDEN // HEADS))
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("gain", torch.linspace(0.5, 1.5, HIDDEN))  # persistent: in the state_dict
        self.register_buffer("positions", torch.arange(SEQ), persistent=False)  # a constant

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos(self.positions)
        h = self.norm(x) * self.gain
        b, t, _ = h.shape
        d = HIDDEN // HEADS
        q = self.q(h).view(b, t, HEADS, d).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2 * KV_HEADS, d).transpose(1, 2).chunk(2, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        a = a.transpose(1, 2).reshape(b, t, HIDDEN)
        x = x + self.out(a) * torch.tensor([0.5])  # a lifted tensor constant
        return self.head(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyAttention().train()
    tokens = torch.randint(0, VOCAB, (4, SEQ))
    program = torch.export.export(model, (tokens,), dynamic_shapes={"tokens": {0: torch.export.Dim("batch")}})
    torch.export.save(program, args.out)
    print(program.graph_signature)
    print("state_dict:", list(model.state_dict()))
    print("wrote", args.out, "with torch", torch.__version__)


if __name__ == "__main__":
    main()
