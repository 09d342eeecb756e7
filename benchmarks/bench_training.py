"""Whole training steps, PyG against ours: eager, compiled, and (ours) captured in one CUDA graph.

    python benchmarks/bench_training.py                                   # CUDA: Cora and arxiv-shaped steps
    python benchmarks/bench_training.py --out out/training.json --md out/training.md --plot out/training.png
    python benchmarks/bench_training.py --device cpu                      # a seconds-long smoke run

One step is the GAT paper's model (2 layers, 8 heads x 8 and ELU, 1 output head, dropout 0.6 on the inputs and the
attention), cross-entropy on the train index, backward and a fused Adam step (``capturable=True`` where captured).
Workloads: **cora**, the real Cora graph (bundled) with its public split; **arxiv**, an ogbn-arxiv-shaped synthetic
power-law graph (169,343 nodes, ~2.3M symmetric edges, 128 features, 40 classes, every tenth node a train node;
benchmarks/_graphs.py). Variants, all in one process on the same tensors:

- ``pyg-eager``: PyG's ``GATConv`` fed the way a PyG user tuning for speed would: the self-loops added to the
  ``edge_index`` once before training and ``add_self_loops=False`` in the layers (so no per-step self-loop work, and
  ``torch.compile`` traces it: on the raw ``edge_index`` Inductor failed on the arxiv-shaped step);
- ``pyg-compiled``: the same model through ``torch.compile``;
- ``ours-eager``: our ``GATConv`` on a :class:`~cudnn_gnn.CscGraph` prepared once (``ToCscGraph``);
- ``ours-compiled``: that model through ``torch.compile``;
- ``ours-captured``: that step captured whole by :class:`cudnn_gnn.apps.capture.CapturedStep` and replayed.

Each step is timed with CUDA events after warm-up (median, p10, p90 of ``--repeats`` steps); the peak memory is the
variant's whole run above the shared input tensors (model, optimizer state, activations and, for the captured step,
the graph's private pool). On CPU the run is a smoke test: a tiny graph, the eager
variants and the captured one (which runs eagerly there, with its warning), a few steps.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import environment, free_memory, time_fn, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402

VARIANTS = ("pyg-eager", "pyg-compiled", "ours-eager", "ours-compiled", "ours-captured")
WORKLOADS = ("cora", "arxiv")
ARXIV = GraphSpec(169_343, 2_315_598, exponent=0.6, ogbn="ogbn-arxiv")
TINY = GraphSpec(300, 3_000, exponent=0.6)


def load_workload(name: str, device: torch.device, smoke: bool) -> dict[str, Any]:
    """``{"x", "y", "idx", "edge_index", "num_nodes", "classes", "source"}`` on ``device`` (same tensors for every
    variant)."""
    gen = torch.Generator().manual_seed(0)
    if name == "cora" and not smoke:
        from cudnn_gnn.datasets import load_planetoid

        data = load_planetoid("Cora", None, normalize_features=True)
        idx = data.train_mask.nonzero().view(-1)
        return {"x": data.x.to(device), "y": data.y.to(device), "idx": idx.to(device),
                "edge_index": data.edge_index.to(device), "num_nodes": data.num_nodes,
                "classes": int(data.y.max()) + 1, "source": "Cora (public split)"}
    spec = TINY if smoke else ARXIV
    g = make_graph(spec, seed=0, device=device)
    n, f_in, classes = g.num_nodes, (16 if smoke else 128), (4 if smoke else 40)
    return {"x": torch.randn(n, f_in, generator=gen).to(device), "y": torch.randint(0, classes, (n,), generator=gen).to(device),
            "idx": torch.arange(0, n, 10, device=device), "edge_index": g.edge_index, "num_nodes": n,
            "classes": classes, "source": g.source}


def with_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``edge_index [2, E]`` with its self-loops replaced by one per node ``[2, E' + N]``: PyG's own self-loop rule,
    applied once before training instead of in every forward."""
    from torch_geometric.utils import add_self_loops, remove_self_loops

    return add_self_loops(remove_self_loops(edge_index)[0], num_nodes=num_nodes)[0]


def build_step(variant: str, w: dict[str, Any], device: torch.device) -> Callable[[], Any]:
    """One training step of ``variant`` on workload ``w`` (a fresh model with seed 0's weights)."""
    from torch_geometric.data import Data

    from cudnn_gnn.apps.capture import CapturedStep
    from cudnn_gnn.apps.train import build_gat
    from cudnn_gnn.layers import ToCscGraph

    ours = variant.startswith("ours")
    torch.manual_seed(0)
    model = build_gat("gat" if ours else "pyg-gat", w["x"].shape[1], w["classes"]).to(device)
    graph: Any = w["edge_index"]
    if ours:
        graph = ToCscGraph()(Data(edge_index=graph, num_nodes=w["num_nodes"])).csc_graph
    else:  # the self-loops once, as ToCscGraph does for ours
        from torch_geometric.nn import GATConv as PygGATConv

        graph = with_self_loops(graph, w["num_nodes"])
        for m in model.modules():
            if isinstance(m, PygGATConv):
                m.add_self_loops = False
    cuda = device.type == "cuda"
    captured = variant == "ours-captured"
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4, fused=True if cuda else None,
                           capturable=captured and cuda)
    x, y, idx = w["x"], w["y"], w["idx"]
    if captured:
        return CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[idx], y[idx]), optimizer=opt,
                            inputs={"x": x, "y": y, "graph": graph}, model=model)
    forward: Callable[..., Tensor] = torch.compile(model) if variant.endswith("compiled") else model

    def step() -> Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x, graph)[idx], y[idx])
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def memory_mark(device: torch.device) -> int | None:
    """Reset the peak statistics and return the bytes allocated now (None on CPU)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    smoke = device.type != "cuda"
    records: list[dict[str, Any]] = []
    for name in args.workloads:
        w = load_workload(name, device, smoke)
        for variant in args.variants:
            rec: dict[str, Any] = {"workload": name, "variant": variant, "graph": w["source"],
                                   "num_nodes": w["num_nodes"], "num_edges": int(w["edge_index"].shape[1])}
            try:
                base = memory_mark(device)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", RuntimeWarning)
                    step = build_step(variant, w, device)
                    rec.update(time_fn(step, device=device, warmup=args.warmup, repeats=args.repeats))
                # the whole variant's peak: model, optimizer state, activations and, captured, the graph's pool
                # (a replay allocates nothing, so one step's own peak would miss it)
                rec["peak_memory_bytes"] = None if base is None else torch.cuda.max_memory_allocated(device) - base
                notes = [str(c.message) for c in caught if "not captured" in str(c.message)]
                rec["captured"] = bool(getattr(step, "captured", False))
                if notes:
                    rec["note"] = notes[0]
            except Exception as exc:  # noqa: BLE001 - one failing variant is a result, not the end of the run
                rec["error"] = " ".join(str(exc).split())[:300]
            records.append(rec)
            print(f"{name:6s} {variant:14s} " + (f"{rec['median_ms']:8.3f} ms" if "median_ms" in rec else rec.get("error", "")),
                  flush=True)
            step = None  # type: ignore[assignment]
            free_memory(device)
    return {"environment": environment(device), "records": records}


def markdown(result: dict[str, Any]) -> str:
    """One row per workload: each variant's median step time (and its ratio to PyG eager), peak memory."""
    lines = ["| workload | variant | step (ms, median) | p10-p90 | vs pyg-eager | peak memory (MiB) | captured |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    base = {r["workload"]: r.get("median_ms") for r in result["records"] if r["variant"] == "pyg-eager"}
    for r in result["records"]:
        if "median_ms" not in r:
            lines.append(f"| {r['workload']} | {r['variant']} | error: {r.get('error', '?')} | | | | |")
            continue
        b = base.get(r["workload"])
        ratio = f"{b / r['median_ms']:.2f}x" if b else "-"
        mem = "-" if r.get("peak_memory_bytes") is None else f"{r['peak_memory_bytes'] / 2**20:.1f}"
        lines.append(f"| {r['workload']} | {r['variant']} | {r['median_ms']:.3f} | {r['p10_ms']:.3f}-{r['p90_ms']:.3f} "
                     f"| {ratio} | {mem} | {'yes' if r.get('captured') else 'no'} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in result["records"]))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), squeeze=False)
    for ax, name in zip(axes[0], workloads):
        rows = [r for r in result["records"] if r["workload"] == name and "median_ms" in r]
        ax.bar([r["variant"] for r in rows], [r["median_ms"] for r in rows], color="tab:blue")
        ax.set_title(f"{name}: one training step")
        ax.set_ylabel("ms (median)")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=None,
                    help="default: all on CUDA; on CPU the eager ones and the captured one (which runs eagerly)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default: 10 on CUDA, 4 on CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="timed steps (default: 50 on CUDA, 3 on CPU)")
    ap.add_argument("--out", default="bench_training.json", help="JSON output path")
    ap.add_argument("--md", default=None, help="also write the markdown table here")
    ap.add_argument("--plot", default=None, help="also draw a bar chart here (needs matplotlib)")
    args = ap.parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    if args.variants is None:
        args.variants = list(VARIANTS) if cuda else ["pyg-eager", "ours-eager", "ours-captured"]
    args.warmup = args.warmup if args.warmup is not None else (10 if cuda else 4)  # > CapturedStep's warm-up + 1
    args.repeats = args.repeats if args.repeats is not None else (50 if cuda else 3)
    if args.warmup < 4:
        ap.error(f"--warmup must be >= 4 (the captured step warms up 3 steps and captures on the 4th), got {args.warmup}")
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run(args)
    write_json(args.out, result)
    table = markdown(result)
    print(table)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table)
    if args.plot:
        plot(result, args.plot)
    return result


if __name__ == "__main__":
    main()
