"""What the layers' value check of a raw ``edge_index`` costs per forward (layers/_plan_cache.py), against passing
a ``CscGraph`` (no check): ``torch.equal`` of the index tensors against the kept copy, one host sync.

    python benchmarks/investigations/cost_value_check.py [--backend triton] [--out cost.json]

Prints, per graph size, the check alone and a ``GATConv`` forward (no grad) with a raw edge_index and with the
same graph as a CscGraph, on CUDA where available (CUDA-event timing), else on the CPU.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    import torch

    from cudnn_gnn import CscGraph, GATConv
    from cudnn_gnn.layers import _plan_cache

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--backend", default="auto", help="the layer's GAT backend (triton: no first-call cuDNN builds)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def timed(repeats: int, fn, *args) -> float:  # ms per call of fn(*args)
        fn(*args)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(repeats):
            fn(*args)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / repeats * 1e3

    torch.manual_seed(0)
    rows = []
    sizes = ((2708, 10556), (169_343, 1_166_243), (169_343, 2_327_798))
    for n, e in sizes if dev.type == "cuda" else sizes[:1]:
        ei = torch.randint(0, n, (2, e), device=dev)
        parts = _plan_cache._index_parts(ei)
        snap = tuple(p.clone() for p in parts)
        check = timed(50, lambda a, b: all(torch.equal(p, s) for p, s in zip(a, b)), parts, snap)
        conv = GATConv(128, 32, heads=8, backend=args.backend).to(dev)
        x = torch.randn(n, 128, device=dev)
        g = CscGraph.from_edge_index(ei, num_nodes=n)
        with torch.no_grad():
            raw = timed(20, conv, x, ei)
            csc = timed(20, conv, x, g)
        rows.append(dict(device=str(dev), nodes=n, edges=e, check_ms=check, forward_raw_ms=raw, forward_csc_ms=csc))
        print(f"{dev.type}: {n:,} nodes, {e:,} edges: value check {check:.3f} ms; GATConv forward raw edge_index "
              f"{raw:.3f} ms, CscGraph {csc:.3f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
