"""How large are the batches that ``examples/papers100m.py`` really samples, and what does the memory model predict
at them?

The memory model's default batch is the fan-out's upper bound (no two sampled neighbours coinciding); real batches
of a power-law graph are smaller. A GPU run's batches are drawn in loader workers, so this measures their
distribution on the CPU instead: the training loader built as the example builds it for one rank (one shuffled
``NeighborLoader`` over the memory-mapped graph, seed ``--seed``, no workers), ``--batches`` batches, their node
and edge counts (``x.size(0)``, ``edge_index.size(1)``; with torch-sparse there are no per-hop counts and every
layer runs on the whole batch), then ``estimate_memory(trimmed=False)`` at the mean batch for ours and PyG's model
with the run's ``--ranks``, ``--num-workers`` and bf16 activations. Needs torch-sparse or pyg-lib.

``--sampler device``: the same with the example's ``--sampler device`` loader (``DeviceNeighborLoader`` on the CPU,
seed ``--seed``), whose batches should come from the same distribution as PyG's; it reports per-hop counts, so the
model is also evaluated on trimmed blocks at the mean per-hop counts, with the graph resident on the GPU
(``sampler="device"``, no workers).

Usage (from the repository root; the data folder as the example writes it, e.g. with ``--plan-only``)::

    python examples/papers100m.py --scale 0.1 --root R --plan-only --device cpu
    python benchmarks/investigations/sampled_batch_sizes.py --root R --num-workers 20 [--out sizes.json]
    python benchmarks/investigations/sampled_batch_sizes.py --root R --sampler device [--out sizes-device.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from _bench_common import environment, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from _common import OgbGAT, count_params, seed_everything

    from cudnn_gnn.apps.distributed import estimate_memory, mapped_neighbor_loader, shard_seeds
    from cudnn_gnn.apps.sampler import DeviceNeighborLoader
    from cudnn_gnn.datasets.synthetic import load_mapped

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the example's data folder")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanout", default="10,10,5")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=1, help="of the run the model is evaluated for")
    ap.add_argument("--num-workers", type=int, default=4, help="of the run the model is evaluated for")
    ap.add_argument("--sampler", choices=("pyg", "device"), default="pyg", help="the example's --sampler")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    fanout = [int(f) for f in args.fanout.split(",")]
    g = load_mapped(args.root)
    seed_everything(args.seed)
    params = count_params(OgbGAT("gat", g.x.size(1), args.hidden, g.num_classes, layers=len(fanout), heads=args.heads,
                                 out_heads=args.heads, dropout=0.5, norm=False, activation="elu"))
    seeds = shard_seeds(g.train_idx, epoch=0, seed=args.seed, rank=0, world_size=1)
    node_attrs = {"x": g.x, "y": g.y}
    loader: Any
    if args.sampler == "device":
        loader = DeviceNeighborLoader(g.colptr, g.row, node_attrs=node_attrs, input_nodes=seeds, fanout=fanout,
                                      batch_size=args.batch_size, shuffle=True, device="cpu", seed=args.seed)
        args.num_workers = 0
    else:
        loader = mapped_neighbor_loader(g.colptr, g.row, node_attrs=node_attrs, input_nodes=seeds, fanout=fanout,
                                        batch_size=args.batch_size, shuffle=True, num_workers=0, pin_memory=False,
                                        persistent_workers=False)
    nodes: list[int] = []
    edges: list[int] = []
    hops: list[tuple[list[int], list[int]]] = []
    t0 = time.perf_counter()
    for batch in loader:
        nodes.append(int(batch.x.size(0)))
        edges.append(int(batch.edge_index.size(1)))
        if getattr(batch, "num_sampled_nodes", None) is not None:
            hops.append((list(batch.num_sampled_nodes), list(batch.num_sampled_edges)))
        if len(nodes) == args.batches:
            break
    hop_counts = bool(hops)
    seconds = time.perf_counter() - t0

    def stats(v: list[int]) -> dict[str, float]:
        return {"mean": statistics.fmean(v), "median": statistics.median(v), "min": min(v), "max": max(v),
                "stdev": statistics.stdev(v) if len(v) > 1 else 0.0}

    mean_n, mean_e = round(statistics.fmean(nodes)), round(statistics.fmean(edges))
    payload: dict[str, Any] = {
        "schema": "cudnn-gnn/sampled_batch_sizes/1", "environment": environment(torch.device("cpu")),
        "args": vars(args), "num_nodes": g.num_nodes, "num_edges": g.num_edges, "num_features": g.x.size(1),
        "num_classes": g.num_classes, "params": params, "batches": len(nodes), "sampling_seconds": seconds,
        "sampler_reports_hops": hop_counts, "nodes": stats(nodes), "edges": stats(edges), "per_batch": {
            "nodes": nodes, "edges": edges}, "memory_model_at_mean_batch": {}}
    mean_hops = None
    if hops:  # the mean count of each hop (their sums are the mean batch, to rounding)
        mean_hops = ([round(statistics.fmean(h[0][k] for h in hops)) for k in range(len(fanout) + 1)],
                     [round(statistics.fmean(h[1][k] for h in hops)) for k in range(len(fanout))])
        payload.update(per_batch_hops=hops, mean_hops={"nodes": mean_hops[0], "edges": mean_hops[1]},
                       memory_model_at_mean_hops={})
    print(f"{g.num_nodes:,} nodes, {g.num_edges:,} edges; {len(nodes)} batches of {args.batch_size} seeds in "
          f"{seconds:.1f} s: nodes {payload['nodes']['mean']:,.0f} on average ({min(nodes):,}-{max(nodes):,}), "
          f"edges {payload['edges']['mean']:,.0f} ({min(edges):,}-{max(edges):,}); per-hop counts: {hop_counts}")
    if mean_hops:
        print(f"mean per-hop counts: nodes {mean_hops[0]}, edges {mean_hops[1]}")
    common = dict(num_nodes=g.num_nodes, num_edges=g.num_edges, num_features=g.x.size(1), num_classes=g.num_classes,
                  batch_size=args.batch_size, fanout=fanout, hidden=args.hidden, heads=args.heads,
                  feature_bytes=g.x.element_size(), label_bytes=g.y.element_size(), act_bytes=2, ranks=args.ranks,
                  num_workers=args.num_workers, params=params, sampler=args.sampler)
    for model in ("gat", "pyg-gat"):
        est = estimate_memory(**common, model=model, hop_nodes=[mean_n], hop_edges=[mean_e], trimmed=False)
        payload["memory_model_at_mean_batch"][model] = est.as_dict()
        print(f"{model:8s} untrimmed: {est.summary()}", flush=True)
        if mean_hops:
            est = estimate_memory(**common, model=model, hop_nodes=mean_hops[0], hop_edges=mean_hops[1])
            payload["memory_model_at_mean_hops"][model] = est.as_dict()
            print(f"{model:8s} trimmed:   {est.summary()}", flush=True)
    if args.out:
        write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
