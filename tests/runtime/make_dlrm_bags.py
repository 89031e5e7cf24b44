"""Writes OUT/dlrm_bags.trace.pt: a DLRM whose 8 embedding tables (50 to 400 rows of 8 columns, the
last of 256, wide enough to cut in columns) pool bags of 3 ids, 5 summed and 3 averaged, beside a
bottom MLP of 13 dense features; their concatenation goes
through a top MLP to one output per sample. nn.Embedding pooled by sum or mean traces at any batch
(nn.EmbeddingBag's trace keeps the offsets of the batch it was traced at), so one trace serves every
plan. The sharded training test plans it on 4 ranks.

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


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = DlrmBags().train()
    dense = torch.randn(4, 13)
    sparse = torch.randint(0, min(ROWS), (4, len(ROWS), 3))
    torch.jit.trace(model, (dense, sparse)).save(os.path.join(out, "dlrm_bags.trace.pt"))


if __name__ == "__main__":
    main()
