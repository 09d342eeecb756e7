"""Whole training steps, PyG against ours: eager, compiled, and (ours) captured in one CUDA graph.

    python benchmarks/bench_training.py                                   # CUDA: Cora and arxiv-shaped steps
    python benchmarks/bench_training.py --out out/training.json --md out/training.md --plot out/training.png
    python benchmarks/bench_training.py --device cpu                      # a seconds-long smoke run
    python benchmarks/bench_training.py --workloads products-sampled papers100m-sampled --papers-scale 0.1

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

Sampled workloads (one step = one batch), every variant fed by the same
:class:`cudnn_gnn.apps.static_sampler.StaticNeighborSampler` (tree sampling with fixed shapes, on the GPU):
**products-sampled**, an ogbn-products-shaped synthetic graph at full size (``--scale`` shrinks it), 512 seeds a
batch, fan-out 10, 10, 5, the products GAT (3 layers, 4 heads x 128); **papers100m-sampled**, an
ogbn-papers100M-shaped one at ``--papers-scale`` (default 0.1), 1024 seeds a batch, fan-out 10, 10, 5, the same
model. PyG's layers get each block's ``edge_index`` with the self-loops in it and ``add_self_loops=False``; the
``*-compiled`` variants compile the model's part of the step (static shapes), sampling eager; ``*-captured`` replay
the whole step, sampling and gather included (``pyg-captured`` too: the static shapes make PyG's step capturable).
A sampled row reports the per-batch times, the epoch extrapolated from the median (``batches_per_epoch`` x median:
no whole epoch is run) and ``kernel_share``, the share of 5 steps' wall time in which the GPU ran kernels
(``torch.profiler``), and ``kernel_share_of_median``, their kernel time per step over the unprofiled median step
(the profiler adds host time to every launch).

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

VARIANTS = ("pyg-eager", "pyg-compiled", "pyg-captured", "ours-eager", "ours-compiled", "ours-captured")
FULL_GRAPH = ("cora", "arxiv")
SAMPLED = ("products-sampled", "papers100m-sampled")
WORKLOADS = FULL_GRAPH + SAMPLED
# (nodes, directed edges, features, classes, train share, batch size, fan-out, symmetric) of the real graphs
SAMPLED_SHAPES = {
    "products-sampled": ("ogbn-products", 2_449_029, 123_718_280, 100, 47, 196_615 / 2_449_029, 512, [10, 10, 5], True),
    "papers100m-sampled": ("ogbn-papers100M", 111_059_956, 1_615_685_872, 128, 172, 1_207_179 / 111_059_956, 1024,
                           [10, 10, 5], False),
}
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


def load_sampled(name: str, device: torch.device, smoke: bool, scale: float) -> dict[str, Any]:
    """A sampled workload: the synthetic graph (``scale`` of the real sizes; a tiny one on CPU), random features and
    labels, a train split of the real share, and the :class:`StaticNeighborSampler` every variant is fed by."""
    from cudnn_gnn import CscGraph
    from cudnn_gnn.apps.static_sampler import StaticNeighborSampler

    ogbn, n, e, f_in, classes, share, batch, fanout, symmetric = SAMPLED_SHAPES[name]
    if smoke:
        spec, f_in, classes, batch, fanout, share = TINY, 16, 4, 16, [3, 2, 2], 0.2
    else:
        spec = GraphSpec(int(n * scale), int(e * scale), symmetric=symmetric, exponent=0.5, ogbn=ogbn,
                         ogbn_scale=scale)
    g = make_graph(spec, seed=0, device=device)
    n = g.num_nodes
    csc = CscGraph.from_edge_index(g.edge_index, num_nodes=n)
    num_edges = int(g.edge_index.shape[1])
    del g
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, f_in, generator=gen, device=device)
    y = torch.randint(0, classes, (n,), generator=gen, device=device)
    train = torch.randperm(n, generator=gen, device=device)[: max(1, int(n * share))]
    sampler = StaticNeighborSampler(csc.offsets, csc.indices, fanout=fanout, batch_size=batch,
                                    node_attrs={"x": x, "y": y}, device=device)
    source = f"{ogbn}-shaped synthetic graph, scale {scale:g}" if not smoke else "tiny power-law graph"
    return {"sampler": sampler, "train": train, "classes": classes, "num_nodes": n, "num_edges": num_edges,
            "source": source, "batches_per_epoch": sampler.num_batches(train.numel()), "in_channels": f_in}


def build_sampled_step(variant: str, w: dict[str, Any], device: torch.device) -> Callable[[], Any]:
    """One training step of ``variant`` on a sampled workload: the next batch of a device permutation of the train
    seeds (cycled), tree-sampled with fixed shapes, the products GAT (3 layers, 4 heads x 128, ELU, dropout 0.5;
    ``cudnn_gnn.apps.models.OgbGAT``), masked cross-entropy, fused Adam. PyG's layers get each block's ``edge_index``
    with its self-loops in it and ``add_self_loops=False``; ours the block's CSC graph. ``*-compiled``: the model's
    part of the step (blocks to loss) through ``torch.compile`` with static shapes, sampling eager; ``*-captured``:
    the whole step, sampling and gather included, one :class:`CapturedStep` replay."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from _common import OgbGAT

    from cudnn_gnn.apps.capture import CapturedStep
    from cudnn_gnn.apps.static_sampler import sampled_loss

    sampler, cuda = w["sampler"], device.type == "cuda"
    pyg = variant.startswith("pyg")
    torch.manual_seed(0)
    model = OgbGAT("pyg-gat" if pyg else "gat", w["in_channels"], 128 if cuda else 8, w["classes"],
                   layers=len(sampler.fanout), heads=4 if cuda else 2, out_heads=4 if cuda else 2, dropout=0.5,
                   norm=False, activation="elu").to(device)
    captured = variant.endswith("captured")
    opt = torch.optim.Adam(model.parameters(), lr=0.001, fused=True if cuda else None, capturable=captured and cuda)

    def batches() -> Any:
        while True:
            yield from sampler.epoch(w["train"])

    it = batches()
    if captured:
        B = sampler.batch_size
        cs = CapturedStep(sampled_loss(model, sampler, pyg=pyg), optimizer=opt, model=model,
                          inputs={"seeds": torch.zeros(B, dtype=torch.int64, device=device),
                                  "seed_valid": torch.ones(B, dtype=torch.bool, device=device)})

        def replay() -> Tensor:
            seeds, valid = next(it)
            return cs(seeds=seeds, seed_valid=valid)

        replay.captured = lambda: cs.captured  # type: ignore[attr-defined]
        return replay

    loss_fn = sampled_loss(model, sampler, pyg=pyg, compile=variant.endswith("compiled"))

    def step() -> Tensor:
        seeds, valid = next(it)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(seeds, valid)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def kernel_share(step: Callable[[], Any], device: torch.device, batches: int = 5) -> dict[str, Any]:
    """The share of ``batches`` steps' wall time in which the GPU ran kernels (``torch.profiler``, CUDA activity:
    the union of kernel, copy and memset intervals over the window between two synchronises), and the kernel time
    per batch. None on a CPU."""
    from cudnn_gnn.apps.distributed import KernelBusyWindow

    if device.type != "cuda":
        return {"kernel_share": None, "kernel_ms_per_batch": None}
    window = KernelBusyWindow(device, start=0, count=batches)
    for i in range(batches):
        window.before(i)
        step()
        window.after(i)
    if window.fraction is None or window.busy_seconds is None:
        return {"kernel_share": None, "kernel_ms_per_batch": None}
    return {"kernel_share": window.fraction, "kernel_ms_per_batch": 1e3 * window.busy_seconds / batches}


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
        sampled = name in SAMPLED
        scale = args.papers_scale if name == "papers100m-sampled" else args.scale
        w = load_sampled(name, device, smoke, scale) if sampled else load_workload(name, device, smoke)
        for variant in args.variants:
            if variant == "pyg-captured" and not sampled:
                continue  # full graph: PyG's step is the edge_index one above; captured rows are ours
            rec: dict[str, Any] = {"workload": name, "variant": variant, "graph": w["source"],
                                   "num_nodes": w["num_nodes"],
                                   "num_edges": w["num_edges"] if sampled else int(w["edge_index"].shape[1])}
            try:
                base = memory_mark(device)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", RuntimeWarning)
                    step = build_sampled_step(variant, w, device) if sampled else build_step(variant, w, device)
                    rec.update(time_fn(step, device=device, warmup=args.warmup, repeats=args.repeats))
                    if sampled:
                        sampler = w["sampler"]
                        rec.update(kernel_share(step, device), batch_size=sampler.batch_size,
                                   fanout=sampler.fanout, slots_per_batch=sampler.num_slots,
                                   batches_per_epoch=w["batches_per_epoch"],
                                   epoch_seconds_extrapolated=rec["median_ms"] * w["batches_per_epoch"] / 1e3)
                        if rec["kernel_ms_per_batch"] is not None:  # the profiler slows the host: also per timed step
                            rec["kernel_share_of_median"] = min(1.0, rec["kernel_ms_per_batch"] / rec["median_ms"])
                # the whole variant's peak: model, optimizer state, activations and, captured, the graph's pool
                # (a replay allocates nothing, so one step's own peak would miss it)
                rec["peak_memory_bytes"] = None if base is None else torch.cuda.max_memory_allocated(device) - base
                notes = [str(c.message) for c in caught if "not captured" in str(c.message)]
                done = getattr(step, "captured", False)
                rec["captured"] = bool(done() if callable(done) else done)
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
    lines = ["| workload | variant | step (ms, median) | p10-p90 | vs pyg-eager | peak memory (MiB) | captured | "
             "kernels / wall | epoch (s, extrapolated) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {r["workload"]: r.get("median_ms") for r in result["records"] if r["variant"] == "pyg-eager"}
    for r in result["records"]:
        if "median_ms" not in r:
            lines.append(f"| {r['workload']} | {r['variant']} | error: {r.get('error', '?')} | | | | | | |")
            continue
        b = base.get(r["workload"])
        ratio = f"{b / r['median_ms']:.2f}x" if b else "-"
        mem = "-" if r.get("peak_memory_bytes") is None else f"{r['peak_memory_bytes'] / 2**20:.1f}"
        lines.append(f"| {r['workload']} | {r['variant']} | {r['median_ms']:.3f} | {r['p10_ms']:.3f}-{r['p90_ms']:.3f} "
                     f"| {ratio} | {mem} | {'yes' if r.get('captured') else 'no'} | "
                     + ("-" if r.get("kernel_share") is None else f"{100 * r['kernel_share']:.0f}%") + " | "
                     + ("-" if r.get("epoch_seconds_extrapolated") is None
                        else f"{r['epoch_seconds_extrapolated']:.2f}") + " |")
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
    ap.add_argument("--scale", type=float, default=1.0, help="products-sampled: fraction of the real graph's size")
    ap.add_argument("--papers-scale", type=float, default=0.1,
                    help="papers100m-sampled: fraction of the real graph's size (0.1: 11.1M nodes, 162M edges)")
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
    for flag, value in (("--scale", args.scale), ("--papers-scale", args.papers_scale)):
        if not 0 < value <= 1:
            ap.error(f"{flag} must be in (0, 1], got {value}")
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
