"""Diagnose cuDNN GAT backward against the float64 reference: output-gradient and attention-gradient paths
separately, through cudnn-gnn's op and through the raw frontend, with first-call (JIT) timing. GPU only.

    python benchmarks/investigations/diag_grad_attention.py
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch

import cudnn_gnn
from cudnn_gnn import CscGraph


def setup() -> SimpleNamespace:
    """A 200-node bipartite-capable random graph, 2,000 edges, 4 heads x 16, with fixed inputs and upstream grads."""
    dev = torch.device("cuda")
    torch.manual_seed(0)
    ns = nd = 200
    e, h, c = 2000, 4, 16
    d = h * c
    ei = torch.stack([torch.randint(0, ns, (e,)), torch.randint(2, nd, (e,))]).to(dev)
    return SimpleNamespace(
        dev=dev, ns=ns, nd=nd, h=h, g=CscGraph.from_edge_index(ei, num_nodes=ns),
        x0=torch.randn(ns, d, device=dev), w0=torch.randn(2 * d, device=dev) * 0.3,
        go=torch.randn(nd, d, device=dev), ga=torch.randn(e, h, device=dev),
    )


def poison(dev):
    """Leave NaN in the caching allocator's free blocks, so unwritten outputs show up as NaN."""
    for mb in (1, 4, 16, 64):
        t = torch.full((mb * 2**18,), float("nan"), device=dev)
        del t


def nan_rows(t):
    t = t.reshape(t.shape[0], -1) if t.dim() > 1 else t.reshape(-1, 1)
    return int(torch.isnan(t).any(1).sum())


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-12))


def grads(s, backend, use_go, use_ga, dtype=torch.float32, bip=False):
    poison(s.dev)
    x = s.x0.to(dtype).clone().requires_grad_()
    xd = s.x0[: s.nd].to(dtype).clone().requires_grad_()
    w = s.w0.to(dtype).clone().requires_grad_()
    out, att = cudnn_gnn.gat(s.g, (x, xd) if bip else x, w, heads=s.h, return_attention=True, backend=backend)
    loss = (out.double() * s.go.double()).sum() * use_go + (att.double() * s.ga.double()).sum() * use_ga
    loss.backward()
    return [t.grad for t in ((x, xd, w) if bip else (x, w))]


def main() -> None:
    s = setup()
    g = s.g
    for bip in (False, True):
        for use_go, use_ga in ((1, 0), (0, 1), (1, 1)):
            t = time.time()
            got = grads(s, "cudnn", use_go, use_ga, bip=bip)
            torch.cuda.synchronize()
            dt = time.time() - t
            ref = grads(s, "reference", use_go, use_ga, dtype=torch.float64, bip=bip)
            print(f"bip={bip} go={use_go} ga={use_ga} first-call {dt:.2f}s rel errs",
                  [f"{rel(a, b):.2e}" for a, b in zip(got, ref)], "nan rows", [nan_rows(a) for a in got], flush=True)

    # raw frontend, attention gradient in COO vs CSC order
    import cudnn.gnn as cg

    fg = cg.CscGraph(offsets=g.offsets, indices=g.indices, num_src_nodes=s.ns, map_csc_to_coo=g.map_csc_to_coo)
    ref = grads(s, "reference", 0, 1, dtype=torch.float64)
    for order in ("coo", "csc"):
        poison(s.dev)
        x = s.x0.clone().requires_grad_()
        w = s.w0.clone().requires_grad_()
        out, att = cg.mha_gat(fg, x, w, num_heads=s.h, return_attention_weights=True)
        gah = s.ga.t().contiguous()
        if order == "csc":  # feed the gradient permuted as if the kernel read it in CSC order
            gah = gah[:, g.map_csc_to_coo.long()].contiguous()
        (att * gah).sum().backward()
        print("raw frontend ga order", order, [f"{rel(a, b):.2e}" for a, b in zip((x.grad, w.grad), ref)], "nan rows",
              nan_rows(x.grad), nan_rows(w.grad), flush=True)
    poison(s.dev)
    x = s.x0.clone().requires_grad_()
    out = cg.mha_gat(fg, x, s.w0, num_heads=s.h)
    (out * s.go).sum().backward()
    zero_in = (g.offsets[1:] == g.offsets[:-1]).nonzero().flatten().tolist()
    print("raw frontend: zero in-degree dst", zero_in, "nan out rows", nan_rows(out), "nan grad rows", nan_rows(x.grad),
          "out rows of zero in-degree", out[zero_in].abs().max().item() if zero_in else None, flush=True)
    t = time.time()
    grads(s, "cudnn", 1, 0)
    torch.cuda.synchronize()
    print("second call", f"{time.time() - t:.3f}s")


if __name__ == "__main__":
    main()
