"""Graph conversion: ``cudnn_gnn.CscGraph.from_edge_index`` against PyG's ``EdgeIndex(...).sort_by("col")``.

Both turn the same COO ``edge_index`` (on the same GPU) into destination-sorted form. Cases:

* ``cudnn_gnn.from_edge_index``             the default call (``validate=True``: one range check, a host sync)
* ``cudnn_gnn.from_edge_index(validate=False)``  trusted input, no host sync
* ``pyg.EdgeIndex.sort_by('col')``          PyG's own sort (no validation: ``EdgeIndex`` does not check ranges
                                            unless ``validate()`` is called)
* ``pyg.EdgeIndex.validate().sort_by('col')``  the same with PyG's validation, the fair partner of our default
* ``torch.sort(dst, stable=True)``          the floor: one stable sort of the destination ids, nothing else

Our conversion also keeps the CSC -> COO permutation and builds offsets; PyG's sort returns the sorted
``EdgeIndex`` and the permutation. Times are CUDA-event medians after one warm-up; peak memory as in
``bench_layers.py`` (above what existed before the call, the input edges excluded).

Usage::

    python benchmarks/bench_conversion.py                     # products shape, 123.7M edges, on the GPU
    python benchmarks/bench_conversion.py --preset arxiv --repeats 10
    python benchmarks/bench_conversion.py --quick             # CPU smoke test
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import environment, free_memory, is_oom, peak_memory, time_fn, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402

import cudnn_gnn  # noqa: E402
from cudnn_gnn.apps._cli import ArgumentParser, check_device, check_outputs  # noqa: E402

SPECS: dict[str, GraphSpec] = {
    "products": GraphSpec(2_449_029, 123_718_280, exponent=0.5, ogbn="ogbn-products"),
    "arxiv": GraphSpec(169_343, 2_315_598, exponent=0.6, ogbn="ogbn-arxiv"),
    "proteins": GraphSpec(66_267, 39_561_252, exponent=0.3, ogbn="ogbn-proteins", ogbn_scale=0.5),
    "tiny": GraphSpec(300, 2_400, exponent=0.5),
}


def cases(edge_index: torch.Tensor, n: int) -> dict[str, Callable[[], Any]]:
    from torch_geometric import EdgeIndex

    dst = edge_index[1]
    return {
        "cudnn_gnn.from_edge_index": lambda: cudnn_gnn.CscGraph.from_edge_index(edge_index, num_nodes=n),
        "cudnn_gnn.from_edge_index(validate=False)":
            lambda: cudnn_gnn.CscGraph.from_edge_index(edge_index, num_nodes=n, validate=False),
        "pyg.EdgeIndex.sort_by('col')": lambda: EdgeIndex(edge_index, sparse_size=(n, n)).sort_by("col"),
        "pyg.EdgeIndex.validate().sort_by('col')":
            lambda: EdgeIndex(edge_index, sparse_size=(n, n)).validate().sort_by("col"),
        "torch.sort(dst, stable=True)": lambda: torch.sort(dst, stable=True),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(prog="bench_conversion.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default=None, choices=sorted(SPECS), help="graph shape (default products; quick: tiny)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="JSON path (default bench_conversion.json)")
    ap.add_argument("--quick", action="store_true", help="CPU smoke test on a tiny graph")
    ap.add_argument("--device", default=None, help="default: cuda if available (cpu with --quick)")
    ap.add_argument("--no-ogbn", action="store_true", help="always use benchmarks/_graphs.py's generator")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out = args.out or "bench_conversion.json"
    device = check_device(ap, args.device or ("cpu" if args.quick else "auto"))
    check_outputs(ap, {"--out": args.out})
    preset = args.preset or ("tiny" if args.quick else "products")
    graph = make_graph(SPECS[preset], seed=args.seed, device=device, prefer_ogbn=not args.no_ogbn)
    ei, n = graph.edge_index, graph.num_nodes
    print(f"# conversion on {device}: {preset}, {n:,} nodes, {graph.num_edges:,} edges ({graph.source})", flush=True)
    records = []
    for impl, fn in cases(ei, n).items():
        rec: dict[str, Any] = {"preset": preset, "impl": impl, "num_nodes": n, "num_edges": graph.num_edges, "status": "ok"}
        try:
            rec.update(time_fn(fn, device=device, warmup=1, repeats=args.repeats))
            rec["peak_mem_bytes"] = peak_memory(fn, device=device)
        except Exception as exc:  # noqa: BLE001 - reported per case
            rec.update(status="oom" if is_oom(exc) else "error", error=f"{type(exc).__name__}: {exc}"[:1500])
        free_memory(device)
        records.append(rec)
        mem = "" if rec.get("peak_mem_bytes") is None else f"  peak {rec['peak_mem_bytes'] / 2**20:,.0f} MiB"
        ms = f"{rec['median_ms']:.2f} ms" if rec["status"] == "ok" else rec["status"].upper() + " " + rec.get("error", "")
        print(f"   {impl:45s} {ms}{mem}", flush=True)
    by = {r["impl"]: r for r in records if r["status"] == "ok"}
    ratios = {}
    for ours, theirs in (("cudnn_gnn.from_edge_index", "pyg.EdgeIndex.validate().sort_by('col')"),
                         ("cudnn_gnn.from_edge_index(validate=False)", "pyg.EdgeIndex.sort_by('col')")):
        if ours in by and theirs in by:
            ratios[f"{theirs} / {ours}"] = by[theirs]["median_ms"] / by[ours]["median_ms"]
    for k, v in ratios.items():
        print(f"   ratio {k}: {v:.2f}x (>1: ours faster)", flush=True)
    payload = {"schema": "cudnn-gnn/bench_conversion/1", "quick": args.quick, "environment": environment(device),
               "graph_source": graph.source, "records": records, "ratios": ratios}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
