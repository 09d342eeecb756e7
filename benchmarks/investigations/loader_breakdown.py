"""Where a sampled batch's host time goes: the question behind #16's sampler-bound epochs.

On the H200 the sampled products epoch kept the GPU busy 23% of the time for our model and PyG's alike
(``benchmarks/results/h200x2-2026-11-30-15c6555/``): the loader workers set the pace. This times, per batch and in
one process (no workers), the parts of what a ``NeighborLoader`` worker does for the examples' batches over a
memory-mapped synthetic graph (``synthetic_ogbn_mmap``):

* ``sample``: PyG's ``NeighborSampler`` on the CSC (torch-sparse's or pyg-lib's kernel), node ids and local edges;
* ``gather_x``: ``x[n_id]`` from the memory-mapped features (float32 and, for comparison, float16 copies);
* ``loader``: a whole ``NeighborLoader`` batch (sampling, gathering ``x`` and ``y``, building the ``Data``);

and prints the batch sizes. Figures are this machine's; their proportions say what more workers, half-precision
features or a faster sampler would buy.

Usage (from the repository root; needs pyg-lib or torch-sparse)::

    python benchmarks/investigations/loader_breakdown.py --scale 0.25 --batches 10 --out loader_breakdown.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, write_json  # noqa: E402


def _ms(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median wall milliseconds of ``fn()`` over ``repeats`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ogbn-products")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--root", default=None, help="data folder (default ~/.cache/cudnn_gnn/synthetic/...)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanout", default="10,10,5")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a loader worker uses 1)")
    ap.add_argument("--out", default="loader_breakdown.json")
    args = ap.parse_args(argv)

    from torch_geometric.sampler import NodeSamplerInput

    from cudnn_gnn.apps.distributed import mapped_neighbor_loader, sampler_available
    from cudnn_gnn.datasets.synthetic import load_mapped, synthetic_ogbn_mmap

    if not sampler_available():
        raise SystemExit("loader_breakdown.py needs pyg-lib or torch-sparse for PyG's NeighborLoader")
    torch.set_num_threads(args.threads)
    fanout = [int(f) for f in args.fanout.split(",")]
    root = args.root or os.path.expanduser(f"~/.cache/cudnn_gnn/synthetic/{args.dataset}-s{args.scale:g}-seed0-float32")
    t0 = time.perf_counter()
    synthetic_ogbn_mmap(args.dataset, root, scale=args.scale, seed=0)
    g = load_mapped(root)
    print(f"{g.name} scale {args.scale:g}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, ready in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    gen = torch.Generator().manual_seed(0)
    seeds = g.train_idx[torch.randperm(g.train_idx.numel(), generator=gen)[: args.batch_size * args.batches]]
    loader = mapped_neighbor_loader(g.colptr, g.row, node_attrs={"x": g.x, "y": g.y}, input_nodes=seeds,
                                    fanout=fanout, batch_size=args.batch_size, num_workers=0)
    sampler = loader.node_sampler
    x16 = g.x.to(torch.float16)  # an in-memory half-precision copy, for the gather comparison
    rows: list[dict[str, Any]] = []
    it = iter(loader)
    for b in range(args.batches):
        batch_seeds = seeds[b * args.batch_size:(b + 1) * args.batch_size]
        inp = NodeSamplerInput(input_id=None, node=batch_seeds)
        sample_ms, out = _ms(lambda inp=inp: sampler.sample_from_nodes(inp), 1)
        n_id = out.node
        gather_ms, _ = _ms(lambda n_id=n_id: g.x[n_id], 3)
        gather16_ms, _ = _ms(lambda n_id=n_id: x16[n_id], 3)
        t0 = time.perf_counter()
        batch = next(it)
        loader_ms = (time.perf_counter() - t0) * 1e3
        rec = {"batch": b, "nodes": int(n_id.numel()), "edges": int(out.row.numel()), "sample_ms": sample_ms,
               "gather_x_fp32_ms": gather_ms, "gather_x_fp16_ms": gather16_ms, "loader_batch_ms": loader_ms,
               "loader_nodes": int(batch.n_id.numel())}
        rows.append(rec)
        print(f"batch {b}: {rec['nodes']:,} nodes, {rec['edges']:,} edges; sample {sample_ms:.0f} ms, x[n_id] "
              f"{gather_ms:.0f} ms fp32 / {gather16_ms:.0f} ms fp16, whole loader batch {loader_ms:.0f} ms", flush=True)
    later = rows[1:] or rows
    summary = {k: statistics.median(r[k] for r in later)
               for k in ("nodes", "edges", "sample_ms", "gather_x_fp32_ms", "gather_x_fp16_ms", "loader_batch_ms")}
    print("median (batches after the first): " + ", ".join(f"{k} {v:,.0f}" for k, v in summary.items()), flush=True)
    payload = {"schema": "cudnn-gnn/loader_breakdown/1", "environment": environment(torch.device("cpu")),
               "args": vars(args), "batches": rows, "median_after_first": summary}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
