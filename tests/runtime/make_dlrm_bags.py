"""Writes OUT/dlrm_bags.trace.pt: a DLRM whose 8 embedding tables (50 to 400 rows of 8 columns, the
last of 256, wide enough to cut in columns) pool bags of 3 ids, 5 summed and 3 averaged, beside a
bottom MLP of 13 dense features; their concatenation goes
through a top MLP to one output per sample. nn.Embedding pooled by sum or mean traces at any batch
(nn.EmbeddingBag's trace keeps the offsets of the batch it was traced at), so one trace serves every
plan. The sharded training test plans it on 4 ranks.

Also OUT/dlrm_mixed.trace.pt, whose 6 tables of 3 lookups per sample mix pooled bags (a sum and a
mean) with unpooled lookups, whose rows the model takes one by one (sequence features): two
flattened into the top MLP's input (one of 256 columns, to cut in columns) and one weighted by a
learnt weight per position before its sum.

usage: make_dlrm_bags.py OUT
"""
import os
import sys

import torch
import torch.nn as nn

ROWS = [50, 400, 120, 300, 80, 250, 60, 200]
DIMS = [8, 8, 8, 8, 8, 8, 8, 256]
MEAN = {2, 5, 7}


class DlrmBags(nn.Module):
    def __init__(self):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 8), nn.ReLU())
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for rows, dim in zip(ROWS, DIMS))
        self.top = nn.Sequential(nn.Linear(8 + sum(DIMS), 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense, sparse):
        features = [self.bottom(dense)]
        for t, table in enumerate(self.tables):
            rows = table(sparse[:, t, :])
            features.append(rows.mean(1) if t in MEAN else rows.sum(1))
        return self.top(torch.cat(features, dim=1))


MIXED_ROWS = [50, 400, 120, 300, 80, 250]
MIXED_DIMS = [8, 8, 256, 8, 8, 8]
LOOKUPS = 3


class DlrmMixed(nn.Module):
    """Tables 0 and 1 pooled (sum, mean); 2, 3 and 5 unpooled, flattened; 4 unpooled, weighted per position."""

    def __init__(self):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 8), nn.ReLU())
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for rows, dim in zip(MIXED_ROWS, MIXED_DIMS))
        self.position = nn.Parameter(torch.linspace(0.5, 1.5, LOOKUPS).unsqueeze(1))
        features = 8 + 8 + 8 + LOOKUPS * (256 + 8 + 8) + 8
        self.top = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense, sparse):
        rows = [table(sparse[:, t, :]) for t, table in enumerate(self.tables)]
        features = [self.bottom(dense), rows[0].sum(1), rows[1].mean(1), rows[2].flatten(1), rows[3].flatten(1),
                    (rows[4] * self.position).sum(1), rows[5].flatten(1)]
        return self.top(torch.cat(features, dim=1))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = DlrmBags().train()
    dense = torch.randn(4, 13)
    sparse = torch.randint(0, min(ROWS), (4, len(ROWS), 3))
    torch.jit.trace(model, (dense, sparse)).save(os.path.join(out, "dlrm_bags.trace.pt"))
    mixed = DlrmMixed().train()
    sparse = torch.randint(0, min(MIXED_ROWS), (4, len(MIXED_ROWS), LOOKUPS))
    torch.jit.trace(mixed, (dense, sparse)).save(os.path.join(out, "dlrm_mixed.trace.pt"))


if __name__ == "__main__":
    main()
