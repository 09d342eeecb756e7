"""An obviously-correct, loop-per-destination GAT/GATv2 in float64: the oracle of the reference backend.

Written from the papers' formulas edge by edge, sharing no code with cudnn_gnn.
"""

from __future__ import annotations

import math

import torch


def act(v: float, name: str, a: float) -> float:
    if name == "leaky_relu":
        return v if v > 0 else a * v
    if name == "linear":
        return v
    if name == "relu":
        return max(v, 0.0)
    if name == "sigmoid":
        return 1.0 / (1.0 + math.exp(-v))
    if name == "tanh":
        return math.tanh(v)
    if name == "elu":
        return v if v > 0 else math.exp(v) - 1.0  # cuDNN's ELU: alpha fixed at 1
    if name == "scalar":
        return a * v
    raise AssertionError(name)


def naive_attention(v2, edge_index, num_dst, xs, xd, w, heads, edge=None, mask=None, activation="leaky_relu",
                    alpha=0.2, concat=True):
    xs, xd, w = xs.double(), xd.double(), w.double()
    src, dst = edge_index[0].tolist(), edge_index[1].tolist()
    n_e, d = len(src), xs.shape[1]
    c = d // heads
    out = torch.zeros(num_dst, heads, c, dtype=torch.float64)
    att = torch.zeros(n_e, heads, dtype=torch.float64)
    for i in range(num_dst):
        es = [e for e in range(n_e) if dst[e] == i]
        for h in range(heads):
            sl = slice(h * c, (h + 1) * c)
            scores = []
            for e in es:
                j = src[e]
                if not v2:
                    s = float(w[:d][sl] @ xs[j, sl] + w[d:2 * d][sl] @ xd[i, sl])
                    if edge is not None:
                        ce = edge.shape[1] // heads
                        s += float(w[2 * d:][h * ce:(h + 1) * ce] @ edge[e, h * ce:(h + 1) * ce].double())
                    scores.append(act(s, activation, alpha))
                else:
                    z = xs[j, sl] + xd[i, sl]
                    if edge is not None:
                        z = z + edge[e, sl].double()
                    scores.append(sum(float(w[sl][k]) * act(float(z[k]), activation, alpha) for k in range(c)))
            if not es:
                continue
            m = max(scores)
            ex = [math.exp(s - m) for s in scores]
            tot = sum(ex)
            for e, x in zip(es, ex):
                a = x / tot * (float(mask[e, h]) if mask is not None else 1.0)
                att[e, h] = a
                out[i, h] += a * xs[src[e], sl]
    return (out.reshape(num_dst, d) if concat else out.mean(1)), att
