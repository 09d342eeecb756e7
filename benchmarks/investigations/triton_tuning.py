"""Two questions about the Triton backend's speed that the layer profile left open (issue #15).

1. **Host overhead on small graphs.** On Cora's shape our layer's fwd+bwd kept the GPU busy 0.19 of 3.97 ms
   (``profile_layers.py --backend triton --preset cora``): the step is host-bound. Where does the host time go?
   Measures host wall time per step (steps queued back to back, one synchronize at the end) for our layer on a
   ``CscGraph``, on a raw ``edge_index``, and PyG's ``GATConv``; counts the host syncs of one step
   (``torch.cuda.set_sync_debug_mode``), and writes cProfile's top functions of our step.
2. **Launch shape.** The arxiv forward kernel reached 27% (fp32) and 11% (bf16) of its gather-bound floor. Times
   the op for every ``(BLOCK_E, num_warps)`` of a small grid against the default: the forward (no grad) with
   :func:`cudnn_gnn.backends.triton.tuning.launch_shape`'s shape replaced (``TritonOptions(launch=...)``), or
   (``--passes dst,src``) forward+backward with one backward kernel's shape replaced; GAT and GATv2; on arxiv's
   graph or (``--preset products``, ``proteins``) another preset's graph and first layer's heads x width, since a
   block size chosen on arxiv's short rows (mean degree 14) need not suit products' (50) or proteins' (597); or
   (``--dataset Cora``) a bundled graph, where one long row among short ones may set a kernel's time. GAT's
   light passes too (``--passes gat_dst,scores,scores_bwd``): the destination sum's edges a block and warps, the
   node-score kernels' rows a block and warps (each on a grid of its own unless ``--grid`` names one).

Usage (from the repository root, on a CUDA GPU with Triton)::

    python benchmarks/investigations/triton_tuning.py --out triton_tuning.json [--ops gat,gatv2]
        [--passes fwd,dst,src,bwd,gat_src,gat_delta,gat_dst,scores,scores_bwd]
        [--grid 4,8,16,32x1,2,4] [--skip-host] [--preset arxiv|products|proteins] [--dtypes fp32,bf16]
        [--heads H --channels C] [--dropout P] [--dataset Cora|CiteSeer]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
import warnings
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, gather_floor_bytes, kernel_times, time_fn, triton_spec, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402
from bench_layers import PRESETS  # noqa: E402

import cudnn_gnn  # noqa: E402

CORA = GraphSpec(2_708, 10_556, exponent=0.5)
ARXIV = PRESETS["arxiv"].graph


def host_overhead(device: torch.device, steps: int) -> dict[str, Any]:
    """Question 1: per-step host time of our Triton layer and PyG's on Cora's shape (1433 -> 8 heads x 8)."""
    from torch_geometric.nn import GATConv as PygGAT

    g = make_graph(CORA, seed=0, device=device)
    ei = g.edge_index
    x = torch.randn(CORA.num_nodes, 1433, device=device)
    ours = cudnn_gnn.GATConv(1433, 8, heads=8, backend="triton").to(device)
    pyg = PygGAT(1433, 8, heads=8).to(device)
    csc = cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=CORA.num_nodes)

    def step(model: torch.nn.Module, edges: Any) -> None:
        model(x, edges).sum().backward()

    out: dict[str, Any] = {}
    for name, model, edges in (("ours_csc", ours, csc), ("ours_raw", ours, ei), ("pyg", pyg, ei)):
        for _ in range(10):
            step(model, edges)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(model, edges)
        host = (time.perf_counter() - t0) / steps
        torch.cuda.synchronize(device)
        wall = (time.perf_counter() - t0) / steps
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step(model, edges)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [str(w.message).splitlines()[0] for w in caught  # not torch's notice that the mode is a prototype
                 if "synchronizing" in str(w.message).lower() and "prototype" not in str(w.message)]
        out[name] = {"host_ms_per_step": host * 1e3, "wall_ms_per_step": wall * 1e3, "syncs_per_step": len(syncs),
                     "sync_messages": syncs[:5]}
        print(f"{name:9s} host {host * 1e3:.3f} ms/step, wall {wall * 1e3:.3f} ms/step, {len(syncs)} syncs", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step(ours, csc)
    torch.cuda.synchronize(device)
    prof.disable()
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
        out[f"cprofile_{key}"] = s.getvalue()
    print(out["cprofile_tottime"][:6000], flush=True)
    return out


GRID = tuple((be, nw) for be in (4, 8, 16, 32) for nw in (1, 2, 4, 8))
LIGHT_GRIDS = {"gat_dst": tuple((b, nw) for b in (64, 128, 256, 512, 1024, 2048, 4096) for nw in (1, 2, 4, 8)),
               "scores": tuple((b, nw) for b in (8, 16, 32, 64, 128, 256) for nw in (1, 2, 4, 8)),
               "scores_bwd": tuple((b, nw) for b in (8, 16, 32, 64, 128, 256) for nw in (1, 2, 4, 8))}
"""The light passes' own default grids, ``(edges or rows a block, num_warps)`` around their rules' shapes
(:func:`~cudnn_gnn.backends.triton.tuning.dst_sum_shape`: 256 edges at 8 heads, 2048 at one;
:func:`~cudnn_gnn.backends.triton.tuning.node_score_shape`: the forward 64 rows at 8 x 8 and 1 x 40, its backward 8);
``--grid`` replaces them too."""
KERNEL_NAMES = {"fwd": ("_fwd_kernel",), "dst": ("_bwd_dst_kernel",), "src": ("_bwd_src_kernel",),
                "bwd": ("_bwd_dst_kernel", "_bwd_src_kernel"), "gat_src": ("_bwd_gat_src_kernel",),
                "gat_delta": ("_bwd_gat_delta_kernel",),
                "gat_dst": ("_bwd_gat_dst_kernel", "_node_scores_bwd_kernel"),
                "scores": ("_node_scores_kernel",), "scores_bwd": ("_node_scores_bwd_kernel",)}
"""Pass -> the Triton kernels whose own GPU time ``kernel_ms`` sums (the swept ones; the op's time adds the rest).
``gat_dst``: the destination sum and its reader, the node scores' backward, which joins the rows that cross the
sum's blocks (the block size moves work between the two)."""
PASSES = ("fwd", "dst", "src", "bwd", "gat_src", "gat_delta", "gat_dst", "scores", "scores_bwd")
GAT_ONLY = ("gat_src", "gat_delta", "gat_dst", "scores", "scores_bwd")
"""Passes of GAT's kernels alone: a GATv2 row of them would time a call that never launches the swept kernel."""
NO_GRAD = ("fwd", "scores")
"""Passes timed as the forward alone (no grad); the others as forward + backward."""


def default_shape(pass_: str, heads: int, c: int, v2: bool, elem: int) -> tuple[int, int, int | None]:
    """``(BLOCK_E, num_warps, HG)`` that the pass's swept kernels take by default (for ``bwd``: the destination
    pass's); ``HG`` None for ``gat_dst``, whose programs take every head (nothing to sweep)."""
    from cudnn_gnn.backends.triton import tuning as tk
    if pass_ == "gat_dst":
        block, _, warps = tk.dst_sum_shape(heads)
        return block, warps, None
    if pass_ in ("scores", "scores_bwd"):
        block_n, hg, _, _, warps = tk.node_score_shape(pass_, heads, c)
        return block_n, warps, hg
    block_e, hg, _, warps = tk.launch_shape("dst" if pass_ == "bwd" else pass_, heads, c, v2, elem)
    return block_e, warps, hg


def dataset_graph(name: str, device: torch.device) -> cudnn_gnn.CscGraph:
    """The bundled Planetoid graph ``name`` (offline) with one self-loop a node, as ``GATConv`` runs it."""
    from torch_geometric.utils import add_self_loops, remove_self_loops

    from cudnn_gnn.datasets import load_planetoid

    data = load_planetoid(name, None)[0]
    edge_index, _ = add_self_loops(remove_self_loops(data.edge_index)[0], num_nodes=data.num_nodes)
    return cudnn_gnn.CscGraph.from_edge_index(edge_index.to(device), num_nodes=data.num_nodes)


def _parse_grid(text: str) -> tuple[tuple[int, int], ...]:
    """``"4,8,16x1,2"`` -> every ``(BLOCK_E, num_warps)`` of the two lists."""
    edges, warps = text.split("x")
    return tuple((int(b), int(w)) for b in edges.split(",") for w in warps.split(","))


def launch_sweep(device: torch.device, repeats: int, ops: list[str], passes: list[str], *,
                 graph: GraphSpec | cudnn_gnn.CscGraph = ARXIV,
                 heads: int = 8, c: int = 32,
                 grid: tuple[tuple[int, int], ...] | None = None,
                 dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
                 head_groups: tuple[int, ...] | None = None, dropout: float = 0.0) -> list[dict[str, Any]]:
    """Question 2: the op's time per launch shape ``(BLOCK_E, num_warps)`` on ``graph`` (a synthetic graph's spec,
    or a :class:`~cudnn_gnn.CscGraph` on ``device``) with ``heads`` x ``c`` (arxiv's, 8 x 32, by default), fp32 and
    bf16, and the swept kernels' own GPU time (``kernel_ms``, from ``torch.profiler`` over three more calls: the op's
    time adds every other kernel and the host).

    ``fwd``: the forward (no grad), its shape (:func:`launch_shape` of ``"fwd"``) swept; ``dst`` / ``src``:
    forward + backward with that backward kernel's shape swept and every other kernel at its default; ``bwd``: both
    backward kernels swept together (for GAT: its two-gather backward, run with
    ``TritonOptions(gat_backward="two_gather")`` for those rows); ``gat_src`` / ``gat_delta``: GAT's
    one-gather backward's source pass or delta pass; ``gat_dst``: its destination sum (``BLOCK_E``: edges a block of
    the segmented scan and its join; forward + backward); ``scores`` / ``scores_bwd``: its node-score kernel (the
    forward, no grad) and that kernel's backward (forward + backward), ``BLOCK_E`` being rows a block. The GAT-only
    passes take no GATv2 rows. Each row says which shape is the default (for ``bwd``: the destination pass's).
    ``grid``: the ``(BLOCK_E, num_warps)`` shapes; None: :data:`GRID`, or the light passes' :data:`LIGHT_GRIDS`.
    ``head_groups``: the heads a program takes (``HG``, a power of two; ``H / HG`` programs a row or source, each
    gathering its heads' slice of the rows) swept too, every ``(BLOCK_E, num_warps)`` with each; None keeps the
    default's (``gat_dst`` has none: its rows say ``HG`` None). ``dropout``: attention dropout drawn in the kernels
    (a training step's layer: the forward and the source pass draw a Philox number an edge and head group)."""
    from cudnn_gnn.backends import triton as tb
    if isinstance(graph, cudnn_gnn.CscGraph):
        csc = graph
    else:
        g = make_graph(graph, seed=0, device=device)
        csc = cudnn_gnn.CscGraph.from_edge_index(g.edge_index, num_nodes=graph.num_nodes)
    rows: list[dict[str, Any]] = []
    for op, pass_, dtype in ((o, p, d) for o in ops for p in passes for d in dtypes):
        v2 = op == "gatv2"
        if v2 and pass_ in GAT_ONLY:
            continue
        # dst / src / bwd sweep the two-gather backward's kernels; the others, the one-gather backward's
        gat_backward = "two_gather" if pass_ in ("dst", "src", "bwd") else "one_gather"
        elem = torch.empty((), dtype=dtype).element_size()
        first = default_shape(pass_, heads, c, v2, elem)
        swept = ("dst", "src") if pass_ == "bwd" else (pass_,)
        x = torch.randn(csc.num_src_nodes, heads * c, device=device, dtype=dtype, requires_grad=pass_ not in NO_GRAD)
        att = torch.randn((1 if v2 else 2) * heads * c, device=device, dtype=dtype) * 0.1
        floor = gather_floor_bytes(csc.num_edges, csc.num_dst_nodes, heads * c, x.element_size()) / 4.3e12 * 1e3
        groups = (first[2],) if first[2] is None or not head_groups else head_groups
        shapes = [first] + [s for s in ((b, w, hg) for hg in groups for b, w in (grid or LIGHT_GRIDS.get(pass_, GRID)))
                            if s != first]
        for block_e, num_warps, hg in shapes:
            # the swept kernels take the shape, every other kernel its default
            shape = (block_e, num_warps) if hg is None else (block_e, num_warps, hg)
            options = tb.TritonOptions(gat_backward=gat_backward, launch={k: shape for k in swept})

            def call(x: torch.Tensor = x, att: torch.Tensor = att, v2: bool = v2, pass_: str = pass_,
                     options: Any = options) -> None:
                def run() -> torch.Tensor:  # the backend's entry: it takes the options
                    return tb.triton_gat(triton_spec(csc, x, att, v2=v2, heads=heads, dropout=dropout),
                                        options=options)[0]

                if pass_ in NO_GRAD:
                    with torch.no_grad():
                        run()
                else:
                    run().sum().backward()

            try:
                rec = time_fn(call, device=device, warmup=2, repeats=repeats)
                # the swept kernels' own time (the op's median adds every other kernel and the host)
                per, _ = kernel_times(lambda call=call: [call() for _ in range(3)], 3, device)
                rec["kernel_ms"] = sum(us for name, us in per.items()
                                       if name.startswith(KERNEL_NAMES[pass_])) / 1e3
            except Exception as exc:  # a shape Triton cannot compile is a finding, not a crash
                rec = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            rec.update({"op": op, "pass": pass_, "dtype": str(dtype).removeprefix("torch."), "BLOCK_E": block_e,
                        "num_warps": num_warps, "HG": hg,
                        "default": (block_e, num_warps, hg) == first})
            if pass_ == "fwd":
                rec["floor_ms"] = floor
                if "median_ms" in rec:
                    rec["fraction_of_floor"] = floor / rec["median_ms"]
            rows.append(rec)
            print(f"{op:5s} {pass_:3s} {rec['dtype']:8s} BLOCK_E {block_e:2d} warps {num_warps} HG {hg or '-'} "
                  f"{rec.get('median_ms', float('nan')):.3f} ms, kernel {rec.get('kernel_ms', float('nan')):.3f} ms"
                  f"{' (default)' if rec['default'] else ''}"
                  f"{'  ' + rec['error'] if 'error' in rec else ''}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="triton_tuning.json")
    ap.add_argument("--steps", type=int, default=50, help="host-overhead steps")
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats per launch shape")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--skip-host", action="store_true", help="no host-overhead measurement")
    ap.add_argument("--ops", default="gat", help="comma list of gat, gatv2 for the sweep")
    ap.add_argument("--passes", default="fwd", help="comma list of " + ", ".join(PASSES) + " (see launch_sweep)")
    ap.add_argument("--grid", default=None, help="BLOCK_E list x num_warps list, e.g. 4,8,16,32x1,2,4 "
                    "(default: 4,8,16,32 x 1,2,4,8; the light passes: gat_dst 64..4096, scores and scores_bwd "
                    "8..256, x 1,2,4,8)")
    ap.add_argument("--head-groups", default=None,
                    help="comma list of heads a program (HG, powers of two), each swept with the whole grid "
                         "(default: the kernel's own)")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16 for the sweep")
    ap.add_argument("--preset", default="arxiv",
                    help="bench_layers preset whose graph and first layer's heads x width the sweep takes (arxiv, "
                         "proteins, products; edge features are not passed)")
    ap.add_argument("--dataset", default=None, choices=("Cora", "CiteSeer"),
                    help="sweep on this bundled graph with a self-loop a node (as GATConv adds them) instead of the "
                         "preset's synthetic one: on small graphs one long row sets a kernel's time")
    ap.add_argument("--heads", type=int, default=None, help="heads of the swept layer (default: the preset's)")
    ap.add_argument("--channels", type=int, default=None, help="a head's width (default: the preset's)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="attention dropout drawn in the kernels (0.6: the GAT paper's training step)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("triton_tuning.py needs a CUDA GPU (Triton kernels; the interpreter would time Python)")
    device = torch.device("cuda")
    payload: dict[str, Any] = {"schema": "cudnn-gnn/triton_tuning/1", "environment": environment(device)}
    if not args.skip_host:
        payload["host_overhead"] = host_overhead(device, args.steps)
    write_json(args.out, payload)
    if not args.skip_sweep:
        grid = None if args.grid is None else _parse_grid(args.grid)
        dtypes = tuple({"fp32": torch.float32, "bf16": torch.bfloat16}[d] for d in args.dtypes.split(","))
        preset = PRESETS[args.preset]
        payload["preset"] = args.preset
        graph: GraphSpec | cudnn_gnn.CscGraph = preset.graph
        if args.dataset is not None:
            graph = dataset_graph(args.dataset, device)
            payload["dataset"] = args.dataset
        payload["launch_sweep"] = launch_sweep(device, args.repeats, args.ops.split(","), args.passes.split(","),
                                               grid=grid, dtypes=dtypes, graph=graph,
                                               heads=args.heads or preset.heads, c=args.channels or preset.channels,
                                               head_groups=None if args.head_groups is None else
                                               tuple(int(v) for v in args.head_groups.split(",")),
                                               dropout=args.dropout)
        payload["dropout"] = args.dropout
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
