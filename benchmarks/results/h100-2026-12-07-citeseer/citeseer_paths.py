"""Which part of train_planetoid's path turns CiteSeer NaN on CUDA. env: DATA=lib|mine GRAPH=csc|raw EVAL=0|1
MODEL=lib|mine BACKEND=triton|reference; argv: seeds steps"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric import seed_everything
from torch_geometric.data import Data

from cudnn_gnn.apps.train import build_gat
from cudnn_gnn.datasets import load_planetoid
from cudnn_gnn.layers import GATConv, ToCscGraph

E = {k: os.environ.get(k, d)
     for k, d in (("DATA", "lib"), ("GRAPH", "csc"), ("EVAL", "1"), ("MODEL", "lib"), ("BACKEND", "triton"))}
seeds, steps = [int(s) for s in sys.argv[1].split(",")], int(sys.argv[2])
dev = torch.device("cuda")
if E["DATA"] == "lib":
    d = load_planetoid("CiteSeer", None, normalize_features=True)[0]
    x, ei, y = d.x, d.edge_index, d.y
    tr, va, te = (m.nonzero().view(-1) for m in (d.train_mask, d.val_mask, d.test_mask))
else:
    z = np.load("datasets/data/planetoid/citeseer.npz")
    n, f = (int(v) for v in z["x_shape"])
    x = torch.zeros(n, f)
    x[torch.as_tensor(z["x_index"][0]).long(), torch.as_tensor(z["x_index"][1]).long()] = torch.as_tensor(z["x_value"])
    x = x / x.sum(1, keepdim=True).clamp(min=1)
    ei, y = torch.as_tensor(z["edge_index"]), torch.as_tensor(z["y"])
    tr, va, te = (torch.as_tensor(z[k]).nonzero().view(-1) for k in ("train_mask", "val_mask", "test_mask"))
x, ei, y, tr, va, te = (t.to(dev) for t in (x, ei, y, tr, va, te))
g = ToCscGraph()(Data(edge_index=ei, num_nodes=x.shape[0])).csc_graph if E["GRAPH"] == "csc" else ei


class Net(torch.nn.Module):
    def __init__(self, backend):
        super().__init__()
        self.c1 = GATConv(x.shape[1], 8, heads=8, dropout=0.6, backend=backend)
        self.c2 = GATConv(64, 6, heads=1, concat=False, dropout=0.6, backend=backend)

    def forward(self, x, g):
        x = F.dropout(x, 0.6, self.training)
        x = F.elu(self.c1(x, g))
        x = F.dropout(x, 0.6, self.training)
        return self.c2(x, g)


def run(seed):
    seed_everything(seed)
    m = (build_gat("gat", x.shape[1], 6, backend=E["BACKEND"]) if E["MODEL"] == "lib" else Net(E["BACKEND"])).to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=0.005, weight_decay=5e-4)
    losses, vls = [], []
    for _ in range(steps):
        m.train()
        opt.zero_grad()
        loss = F.cross_entropy(m(x, g)[tr], y[tr])
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if E["EVAL"] == "1":
            m.eval()
            with torch.no_grad():
                vls.append(float(F.cross_entropy(m(x, g)[va], y[va])))
    m.eval()
    with torch.no_grad():
        acc = float((m(x, g)[te].argmax(1) == y[te]).float().mean())
    nan = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    pick = {str(i): round(losses[i - 1], 4) for i in (1, 2, 3, 5, 10, 20, 50, 100, 200) if i <= len(losses)}
    return {"seed": seed, "first_nan": nan, "loss": pick, "val_loss_last": vls[-1] if vls else None, "test_acc": round(acc, 4)}


print("RESULT", json.dumps({**E, "runs": [run(s) for s in seeds]}), flush=True)
