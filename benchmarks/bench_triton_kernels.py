"""Microbenchmark of the Triton GAT / GATv2 kernels against the reference backend and PyG, on one preset graph.

For GAT and GATv2 in fp32 and bf16, per implementation (``triton``: ``cudnn_gnn.backends.triton.triton_gat``;
``reference``: ``cudnn_gnn.backends.reference.mha_gat``; ``pyg`` and ``pyg-compiled``: PyG's ``GATConv`` /
``GATv2Conv``, eager and under ``torch.compile``):

* ``fwd``: the attention op alone on projected features (PyG: the conv's forward, which includes its projection);
* ``fwd+bwd``: ``Linear(F -> H*C)`` + the op, forward and backward (PyG: the conv, which owns the same Linear);
* the median / p10 / p90 over CUDA-event timed calls after warm-up, the first call's wall time (Triton's kernel
  builds, ``torch.compile``), and the peak memory of one more call above what existed before it;
* for the triton forward, its achieved bandwidth against the gather-bound floor: the bytes of one source row
  slice gathered per edge plus the output, over 4.3 TB/s (an H200's HBM3e).

Run (GPU): ``python benchmarks/bench_triton_kernels.py --preset arxiv --out results/triton_arxiv.json``.
``--preset tiny`` with ``TRITON_INTERPRET=1`` on CPU is a smoke run of the script (figures meaningless).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import H200_BYTES_PER_S as HBM_BYTES_PER_S  # noqa: E402
from _bench_common import gather_floor_bytes, triton_spec  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_outputs  # noqa: E402


@dataclass(frozen=True)
class Preset:
    """A benchmark graph: ``synthetic_ogbn(ogbn, scale)`` (or a uniform random graph for ``ogbn=None``), the
    input width, the heads x channels of the layer and the edge-feature width (0: none)."""

    ogbn: str | None
    scale: float
    num_nodes: int
    num_edges: int
    in_dim: int
    heads: int
    channels: int
    edge_dim: int
    warmup: int
    repeats: int


PRESETS = {
    "tiny": Preset(None, 1.0, 64, 400, 16, 2, 4, 0, 1, 2),
    "cora": Preset(None, 1.0, 2708, 13264, 1433, 8, 8, 0, 10, 50),
    "arxiv": Preset("ogbn-arxiv", 1.0, 0, 0, 128, 8, 32, 0, 5, 20),
    # ogbn-proteins at half scale: 66k nodes, ~600 edges per row, 8-dim edge features; 8 heads x 8 channels
    "proteins": Preset("ogbn-proteins", 0.5, 0, 0, 8, 8, 8, 8, 3, 10),
}


def _graph(p: Preset, device: torch.device) -> tuple[torch.Tensor, int, torch.Tensor | None, str]:
    """``(edge_index [2, E], num_nodes, edge_attr [E, De] or None, description)``."""
    if p.ogbn is None:
        g = torch.Generator().manual_seed(0)
        ei = torch.randint(0, p.num_nodes, (2, p.num_edges), generator=g)
        return ei.to(device), p.num_nodes, None, f"uniform random, {p.num_nodes} nodes, {p.num_edges} edges"
    from cudnn_gnn.datasets import synthetic_ogbn

    data = synthetic_ogbn(p.ogbn, scale=p.scale, seed=0, device=device, num_features=0)[0]
    edge_attr = getattr(data, "edge_attr", None) if p.edge_dim else None
    desc = f"synthetic_ogbn({p.ogbn!r}, scale={p.scale})"
    return data.edge_index, int(data.num_nodes), None if edge_attr is None else edge_attr.float(), desc


Pair = tuple[Callable[[], Any], Callable[[], Any]]


def _implementations(p: Preset, graph: Any, ei: torch.Tensor, x_in: torch.Tensor, edge_attr: torch.Tensor | None, *,
                     v2: bool, dtype: torch.dtype, gen: torch.Generator, device: torch.device) -> dict[str, Callable[[], Pair]]:
    """Per implementation, a builder of its ``(fwd, fwd_bwd)`` closures for one op and dtype."""
    from cudnn_gnn.backends import reference
    from cudnn_gnn.backends import triton as tb
    from cudnn_gnn.spec import AttentionSpec

    h, c = p.heads, p.channels
    d = h * c
    lin = torch.nn.Linear(p.in_dim, d, bias=False, device=device, dtype=dtype)
    lin_edge = (torch.nn.Linear(p.edge_dim, d, bias=False, device=device, dtype=dtype)
                if v2 and edge_attr is not None else None)
    de = 0 if edge_attr is None else (d if v2 else edge_attr.shape[1])
    w = (torch.randn(d if v2 else 2 * d + de, device=device, generator=gen) * 0.1).to(dtype).requires_grad_()
    x = x_in.to(dtype)
    ea = None if edge_attr is None else edge_attr.to(dtype)

    def edge_input() -> torch.Tensor | None:
        return ea if lin_edge is None or ea is None else lin_edge(ea)

    def ours(fn: Callable[[AttentionSpec], Any]) -> Pair:
        with torch.no_grad():
            xp = lin(x)
            ep = edge_input()
        # validated once; each call swaps in its own features (AttentionSpec.on), as the hub split does
        spec = triton_spec(graph, xp, w, v2=v2, heads=h, edge_attr=ep)

        def fwd() -> Any:
            with torch.no_grad():
                return fn(spec)[0]

        def fwd_bwd() -> None:
            xs = lin(x)
            out = fn(spec.on(graph, xs, xs, edge_attr=edge_input()))[0]
            out.float().square().mean().backward()

        return fwd, fwd_bwd

    def pyg(compiled: bool) -> Pair:
        from torch_geometric.nn import GATConv, GATv2Conv

        cls = GATv2Conv if v2 else GATConv
        conv = cls(p.in_dim, c, heads=h, add_self_loops=False, edge_dim=p.edge_dim or None).to(device, dtype)
        call = torch.compile(conv) if compiled else conv

        def fwd() -> Any:
            with torch.no_grad():
                return call(x, ei, ea)

        def fwd_bwd() -> None:
            call(x, ei, ea).float().square().mean().backward()

        return fwd, fwd_bwd

    return {
        "triton": lambda: ours(tb.triton_gat),
        "reference": lambda: ours(reference.mha_gat),
        "pyg": lambda: pyg(False),
        "pyg-compiled": lambda: pyg(True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="bench_triton_kernels.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="arxiv")
    parser.add_argument("--ops", nargs="+", choices=["gat", "gatv2"], default=["gat", "gatv2"])
    parser.add_argument("--dtypes", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--impls", nargs="+", choices=["triton", "reference", "pyg", "pyg-compiled"],
                        default=["triton", "reference", "pyg", "pyg-compiled"])
    parser.add_argument("--out", default=None, help="write the records as JSON here")
    args = parser.parse_args(argv)
    check_outputs(parser, {"--out": args.out})

    from _bench_common import environment, free_memory, is_oom, peak_memory, time_fn, write_json

    from cudnn_gnn import CscGraph
    from cudnn_gnn.backends import triton as tb

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    p = PRESETS[args.preset]
    ei, n, edge_attr, desc = _graph(p, device)
    graph = CscGraph.from_edge_index(ei, num_nodes=n)
    e, h, c = graph.num_edges, p.heads, p.channels
    d = h * c
    print(f"{args.preset}: {desc}: {n:,} nodes, {e:,} edges, {p.in_dim} -> {h} x {c}, edge_dim {p.edge_dim}, "
          f"{device}", flush=True)
    records: list[dict[str, Any]] = []
    gen = torch.Generator(device=device).manual_seed(0)
    x_in = torch.randn(n, p.in_dim, device=device, generator=gen)

    for op in args.ops:
        v2 = op == "gatv2"
        for dt_name in args.dtypes:
            dtype = torch.float32 if dt_name == "fp32" else torch.bfloat16
            impls = _implementations(p, graph, ei, x_in, edge_attr, v2=v2, dtype=dtype, gen=gen, device=device)
            for impl in args.impls:
                if impl == "triton" and tb.unavailable_reason(device) is not None:
                    print(f"  {op} {dt_name} {impl}: skipped ({tb.unavailable_reason(device)})", flush=True)
                    continue
                fwd, fwd_bwd = impls[impl]()
                for pass_name, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                    rec: dict[str, Any] = dict(preset=args.preset, op=op, dtype=dt_name, impl=impl, **{"pass": pass_name},
                                               num_nodes=n, num_edges=e, heads=h, channels=c)
                    try:
                        rec.update(time_fn(fn, device=device, warmup=p.warmup, repeats=p.repeats))
                        rec["peak_mem_bytes"] = peak_memory(fn, device=device)
                        rec["status"] = "ok"
                    except Exception as exc:  # noqa: BLE001 - a benchmark records failures and goes on
                        rec["status"] = "oom" if is_oom(exc) else f"error: {type(exc).__name__}: {exc}"[:300]
                    if impl == "triton" and pass_name == "fwd" and rec["status"] == "ok":
                        floor = gather_floor_bytes(e, n, d, 2 if dtype == torch.bfloat16 else 4)
                        rec["gather_floor_ms"] = floor / HBM_BYTES_PER_S * 1e3
                        rec["achieved_gb_per_s"] = floor / (rec["median_ms"] * 1e-3) / 1e9
                    records.append(rec)
                    extra = ""
                    if "achieved_gb_per_s" in rec:
                        extra = f", {rec['achieved_gb_per_s']:.0f} GB/s (floor {rec['gather_floor_ms']:.3f} ms)"
                    if rec["status"] == "ok":
                        mem = rec["peak_mem_bytes"]
                        mem_s = "" if mem is None else f", peak {mem / 2**20:.0f} MiB"
                        print(f"  {op:5s} {dt_name} {impl:12s} {pass_name:7s} {rec['median_ms']:9.3f} ms "
                              f"(first call {rec['first_call_ms']:.0f} ms{mem_s}{extra})", flush=True)
                    else:
                        print(f"  {op:5s} {dt_name} {impl:12s} {pass_name:7s} {rec['status']}", flush=True)
                    free_memory(device)
    if args.out:
        write_json(args.out, {"environment": environment(device), "graph": desc, "records": records})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
