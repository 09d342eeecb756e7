"""A training epoch pays the COO -> CSC conversion once: count and time it (issue 3).

A 2-layer ``cudnn_gnn.GATConv`` model (self-loops on, as PyG's default) trains for ``--epochs`` full-graph steps
on a static ``edge_index``, three ways:

* ``cached``: the default (``cache_graph=True``): the layers key the CSC plan on the tensor's identity/version;
* ``uncached``: ``cache_graph=False``: every layer call converts again (what a naive wrapper does);
* ``csc_graph``: ``data = ToCscGraph()(data)`` once, layers receive the ``CscGraph``.

For each: conversions counted (every call of the plan builder), first-epoch and median later-epoch time, and the
standalone time of one conversion. JSON on stdout and in ``--out``.

    python benchmarks/bench_epoch_conversion.py --out conv_epoch.json                  # arxiv-sized, GPU if present
    python benchmarks/bench_epoch_conversion.py --quick                                  # CPU smoke test
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
from torch_geometric.data import Data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import environment, synchronize, write_json  # noqa: E402

import cudnn_gnn  # noqa: E402
from cudnn_gnn.apps._cli import ArgumentParser, check_device, check_outputs  # noqa: E402
from cudnn_gnn.layers import GATConv, ToCscGraph, _plan_cache  # noqa: E402


class _Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.inner = _plan_cache.build_plan

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


def _model(f_in: int, classes: int, cache: bool, device: torch.device) -> torch.nn.Module:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = GATConv(f_in, 32, heads=4, cache_graph=cache)
            self.c2 = GATConv(128, classes, heads=1, cache_graph=cache)

        def forward(self, x, ei):
            return self.c2(torch.nn.functional.elu(self.c1(x, ei)), ei)

    return Net().to(device)


def run(mode: str, x, ei, y, epochs: int, device: torch.device) -> dict:
    torch.manual_seed(0)
    _plan_cache.clear_cache()
    counter = _Counter()
    _plan_cache.build_plan = counter
    try:
        model = _model(x.shape[1], int(y.max()) + 1, mode != "uncached", device)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        graph = ToCscGraph()(Data(edge_index=ei, num_nodes=x.shape[0])).csc_graph if mode == "csc_graph" else ei
        times = []
        for _ in range(epochs):
            synchronize(device)
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x, graph), y)
            loss.backward()
            opt.step()
            synchronize(device)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        _plan_cache.build_plan = counter.inner
    return dict(mode=mode, epochs=epochs, conversions=counter.calls, first_epoch_ms=round(times[0], 3),
                median_later_epoch_ms=round(statistics.median(times[1:] or times), 3))


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="bench_epoch_conversion.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny CPU smoke test (no timing claims)")
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=2_315_598)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.edges, args.features, args.epochs = 300, 2000, 16, 4
    device = check_device(ap, args.device or ("cpu" if args.quick else "auto"))
    check_outputs(ap, {"--out": args.out})
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, args.nodes, (2, args.edges), generator=g).to(device)
    x = torch.randn(args.nodes, args.features, generator=g).to(device)
    y = torch.randint(0, 40, (args.nodes,), generator=g).to(device)
    synchronize(device)
    t0 = time.perf_counter()
    cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=args.nodes)
    synchronize(device)
    one = (time.perf_counter() - t0) * 1e3
    records = [run(m, x, ei, y, args.epochs, device) for m in ("cached", "uncached", "csc_graph")]
    for r in records:
        print(json.dumps(r))
    payload = dict(environment=environment(device), nodes=args.nodes, edges=args.edges,
                   one_conversion_ms=round(one, 3), quick=args.quick, records=records)
    if args.out:
        write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
