"""CiteSeer GAT-paper model on CUDA for one library tree: eager and captured losses per step, version-robust.
usage: python cs.py MODE SEEDS STEPS   (MODE: eager | captured | ref | eval_cmp)"""
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import cudnn_gnn
from cudnn_gnn.layers import GATConv

mode, seeds, steps = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
tree = os.path.dirname(os.path.dirname(cudnn_gnn.__file__))
dev = torch.device("cuda")
z = np.load(os.environ.get("CS_NPZ", "datasets/data/planetoid/citeseer.npz"))
n, f = (int(v) for v in z["x_shape"])
x = torch.zeros(n, f)
x[torch.as_tensor(z["x_index"][0]).long(), torch.as_tensor(z["x_index"][1]).long()] = torch.as_tensor(z["x_value"])
x = x / x.sum(1, keepdim=True).clamp(min=1)
x, ei, y = x.to(dev), torch.as_tensor(z["edge_index"]).to(dev), torch.as_tensor(z["y"]).to(dev)
tr, te = (torch.as_tensor(z[k]).to(dev).nonzero().view(-1) for k in ("train_mask", "test_mask"))


class Net(torch.nn.Module):
    def __init__(self, backend):
        super().__init__()
        ap = float(os.environ.get("ATT_P", "0.6"))
        self.c1 = GATConv(f, 8, heads=8, dropout=ap, backend=backend)
        self.c2 = GATConv(64, 6, heads=1, concat=False, dropout=ap, backend=backend)

    def forward(self, x, g):
        x = F.dropout(x, 0.6, self.training)
        x = F.elu(self.c1(x, g))
        x = F.dropout(x, 0.6, self.training)
        return self.c2(x, g)


def run(seed):
    torch.manual_seed(seed)
    backend = "reference" if mode == "ref" else "auto"
    m = Net(backend).to(dev)
    losses, t0 = [], time.time()
    if mode == "captured":
        from cudnn_gnn.apps.capture import CapturedStep
        opt = torch.optim.Adam(m.parameters(), lr=0.005, weight_decay=5e-4, capturable=True, fused=True)
        m.train()
        step = CapturedStep(lambda x, y, graph: F.cross_entropy(m(x, graph)[tr], y[tr]), optimizer=opt,
                            inputs={"x": x, "y": y, "graph": ei}, model=m)
        for _ in range(steps):
            out = step()
            losses.append(float(out) if isinstance(out, torch.Tensor) else float("nan"))
    else:
        opt = torch.optim.Adam(m.parameters(), lr=0.005, weight_decay=5e-4)
        for i in range(steps):
            m.train()
            opt.zero_grad()
            loss = F.cross_entropy(m(x, ei)[tr], y[tr])
            loss.backward()
            opt.step()
            losses.append(float(loss))
            if mode == "eval_cmp" and i % 10 == 0:  # eval-mode forward+grads against the reference on the same params
                r = Net("reference").to(dev)
                r.load_state_dict(m.state_dict())
                m.eval()
                r.eval()
                outs = []
                for mm in (m, r):
                    mm.zero_grad()
                    o = mm(x, ei)
                    F.cross_entropy(o[tr], y[tr]).backward()
                    outs.append((o.detach(), {k: p.grad.clone() for k, p in mm.named_parameters()}))
                d = float((outs[0][0] - outs[1][0]).abs().max())
                gd = {k: float((outs[0][1][k] - outs[1][1][k]).abs().max() / outs[1][1][k].abs().max().clamp(min=1e-30))
                      for k in outs[1][1]}
                print(json.dumps({"step": i, "out_diff": d, "grad_rel": {k: round(v, 6) for k, v in gd.items()}}), flush=True)
    m.eval()
    with torch.no_grad():
        acc = float((m(x, ei)[te].argmax(1) == y[te]).float().mean())
    nan = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    pick = {str(i): round(losses[i - 1], 4) for i in (1, 2, 3, 5, 10, 20, 50, 100, 200, 400) if i <= len(losses)}
    return {"seed": seed, "first_nan": nan, "loss": pick, "test_acc": round(acc, 4), "s": round(time.time() - t0, 1)}


res = []
for s in seeds:
    try:
        res.append(run(s))
    except Exception as e:  # noqa: BLE001
        res.append({"seed": s, "error": f"{type(e).__name__}: {str(e)[:300]}"})
print("RESULT", json.dumps({"tree": tree, "mode": mode, "att_p": os.environ.get("ATT_P", "0.6"), "runs": res}), flush=True)
