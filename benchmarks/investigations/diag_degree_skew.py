"""Is the cuDNN GAT time set by the graph's degree skew? Same sizes, uniform vs power-law edges, one run.

Times Linear(128 -> 256) + GAT (8 heads x 32) forward and forward+backward (CUDA events, median) on two graphs of
the ogbn-arxiv size (169,343 nodes, ~2.3M edges): uniform random edges, and the power-law graph the layer
benchmark uses (``cudnn_gnn.datasets.synthetic_ogbn("ogbn-arxiv")``, symmetrised). For each graph: PyG's
``GATConv``, ``cudnn_gnn.gat`` without hub splitting (``max_degree=None``), the frontend's ``cudnn.gnn.mha_gat``
on the same CSC without the map (the call the device README timed), ``cudnn_gnn.gat`` with its default
``max_degree="auto"``, and ``cudnn_gnn.gat(..., max_degree=B)`` (hubs split into virtual nodes, merged exactly) for
B in SPLIT_DEGREES; the deterministic GAT plain and split (``max_degree=256``, the sorted-segment merge); then GATv2
(``share_weights``, one projection): PyG's ``GATv2Conv``, ``cudnn_gnn.gatv2`` plain and with its default
``max_degree="auto"``; plus the largest in- and out-degrees.

``--graphs dense`` adds the bench's ogbn-proteins graph (``synthetic_ogbn("ogbn-proteins", scale=0.5)``: 66,267
nodes, 39.6M edges, mean degree ~597, largest ~5,500: long rows everywhere, no hubs by the auto rule) with the same
layer shape, to see whether splitting rows (``max_degree=B``) helps the backward where ``auto`` does not split;
there our layer's forward+backward was 0.42x of PyG's. Use few repeats (a call takes ~1 s).

    python benchmarks/investigations/diag_degree_skew.py --out skew.json
    python benchmarks/investigations/diag_degree_skew.py --graphs dense --repeats 3 --out dense.json
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, for _bench_common

from _bench_common import environment, time_fn, write_json  # noqa: E402

import cudnn_gnn  # noqa: E402
from cudnn_gnn.datasets import synthetic_ogbn  # noqa: E402

N, E, HEADS, C, IN = 169_343, 2_315_598, 8, 32, 128
SPLIT_DEGREES = (16, 64, 256, 1024)


GRAPHS = ("uniform", "power_law", "dense")


def graphs(device: torch.device, names: list[str]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name in names:
        if name == "uniform":
            out[name] = torch.randint(0, N, (2, E), device=device, generator=torch.Generator(device=device).manual_seed(0))
        elif name == "power_law":
            from torch_geometric.utils import to_undirected

            data = synthetic_ogbn("ogbn-arxiv", seed=0, device=device)
            out[name] = to_undirected(data.edge_index, num_nodes=data.num_nodes)
        else:
            out[name] = synthetic_ogbn("ogbn-proteins", scale=0.5, seed=0, device=device).edge_index
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="diag_degree_skew.json")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--graphs", default="uniform,power_law", help=f"comma list of {', '.join(GRAPHS)}")
    args = ap.parse_args()
    names = [g for g in args.graphs.split(",") if g]
    if not names or any(g not in GRAPHS for g in names):
        ap.error(f"--graphs must list some of {', '.join(GRAPHS)}, got {args.graphs!r}")
    dev = torch.device("cuda")
    import cudnn  # type: ignore[import-not-found]
    import torch_geometric.nn as pyg_nn

    idx = (torch.int32, torch.int64) if "dense" in names else (torch.int32,)  # dense: edges x 256 >= 2**30
    cudnn_gnn.precompile(["gat", "gatv2"], [torch.float32], index_dtypes=idx)
    cudnn_gnn.precompile(["gat"], [torch.float32], deterministic=True, index_dtypes=idx)
    result: dict[str, Any] = {"environment": environment(dev), "cases": []}
    torch.manual_seed(0)
    lin = torch.nn.Linear(IN, HEADS * C).to(dev)
    w = (torch.randn(2 * HEADS * C, device=dev) * 0.1).requires_grad_()
    for name, ei in graphs(dev, names).items():
        measure(name, ei, lin, w, cudnn, pyg_nn, args.repeats, dev, result, args.out)


def measure(name: str, ei: torch.Tensor, lin: torch.nn.Module, w: torch.Tensor, cudnn: Any, pyg_nn: Any, repeats: int,
            dev: torch.device, result: dict[str, Any], out: str) -> None:
    """Time every implementation on one graph; each record goes into ``result["cases"]``, written after each."""
    n = int(ei.max()) + 1
    x = torch.randn(n, IN, device=dev)
    g = cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n)
    indeg = torch.bincount(ei[1], minlength=n)
    outdeg = torch.bincount(ei[0], minlength=n)
    raw_graph = cudnn.gnn.CscGraph(g.offsets, g.indices, n)
    pyg = pyg_nn.GATConv(IN, C, heads=HEADS, add_self_loops=False).to(dev)
    pyg2 = pyg_nn.GATv2Conv(IN, C, heads=HEADS, add_self_loops=False, share_weights=True).to(dev)
    w2 = w[: HEADS * C]
    grad = torch.randn(n, HEADS * C, device=dev)
    impls = {
        "pyg": lambda: pyg(x, ei),
        "cudnn_gnn.gat max_degree=None": lambda: cudnn_gnn.gat(g, lin(x), w, heads=HEADS, backend="cudnn",
                                                               max_degree=None),
        "cudnn.gnn.mha_gat (no map)": lambda: cudnn.gnn.mha_gat(raw_graph, lin(x), w, num_heads=HEADS),
        "cudnn_gnn.gat (auto)": lambda: cudnn_gnn.gat(g, lin(x), w, heads=HEADS, backend="cudnn"),
        **{f"cudnn_gnn.gat max_degree={b}": (lambda b=b: cudnn_gnn.gat(g, lin(x), w, heads=HEADS, backend="cudnn",
                                                                       max_degree=b))
           for b in SPLIT_DEGREES},
        "cudnn_gnn.gat deterministic": lambda: cudnn_gnn.gat(g, lin(x), w, heads=HEADS, backend="cudnn",
                                                             deterministic=True),
        "cudnn_gnn.gat deterministic max_degree=256": lambda: cudnn_gnn.gat(
            g, lin(x), w, heads=HEADS, backend="cudnn", deterministic=True, max_degree=256),
        "pyg GATv2": lambda: pyg2(x, ei),
        "cudnn_gnn.gatv2 max_degree=None": lambda: cudnn_gnn.gatv2(g, lin(x), w2, heads=HEADS, backend="cudnn",
                                                                   max_degree=None),
        "cudnn_gnn.gatv2 (auto)": lambda: cudnn_gnn.gatv2(g, lin(x), w2, heads=HEADS, backend="cudnn"),
    }
    for impl, fn in impls.items():
        for pass_ in ("fwd", "fwd+bwd"):
            def step(fn=fn, pass_=pass_):
                if pass_ == "fwd":
                    with torch.no_grad():
                        return fn()
                fn().backward(grad)
                return None

            rec: dict[str, Any] = {"graph": name, "impl": impl, "pass": pass_, "num_nodes": n,
                                   "num_edges": int(ei.shape[1]), "max_in_degree": int(indeg.max()),
                                   "max_out_degree": int(outdeg.max())}
            try:
                rec.update(time_fn(step, device=dev, warmup=2, repeats=repeats))
            except Exception as exc:  # noqa: BLE001 - record and go on
                rec["error"] = f"{type(exc).__name__}: {exc}"[:500]
            result["cases"].append(rec)
            print(f"{name:9s} {impl:44s} {pass_:8s} {rec.get('median_ms', float('nan')):9.2f} ms  "
                  f"max in/out degree {rec['max_in_degree']}/{rec['max_out_degree']} {rec.get('error', '')}", flush=True)
            write_json(out, result)


if __name__ == "__main__":
    main()
