"""GPS layer on packed graphs (cudnn_gnn, cuDNN SDPA) vs PyG's GPSConv (padded nn.MultiheadAttention).

Both layers share one state_dict. For each shape preset, dtype and variant it times forward and forward+backward
(CUDA events after warm-up, median of ``--reps``) and the peak memory above the inputs, baseline and ours in the
same run, and reports ratios (PyG / ours: > 1 means we are faster or leaner).

Presets (``--preset``, default all):
  ragged     128 graphs of 10-500 nodes (uniform), C=128, 4 heads
  molecules  512 graphs of 15-35 nodes, C=128, 4 heads

Variants: ``transformer`` (conv=None: global attention + MLP + norms); ``gps_gat``, the GPS layer with a GATConv
local layer, each side its own: PyG's ``GATConv`` in PyG's row, ``cudnn_gnn.layers.GATConv`` in ours (the batch's
graph prepared once with ``ToCscGraph``, as a training loop over a fixed batch would); and ``gps_pyg_gat``, PyG's
``GATConv`` as the local layer on both sides, so that the difference is the global branch alone.

Each case also times our global attention alone (``cudnn_gnn.graph_attention`` on the batch, forward and
forward+backward): ``non_attention_share_*`` is the share of our layer's time spent outside it (projections, norms,
MLP, residuals, the local layer), what fusing can shorten.

``--profile`` adds, per case, a profile of our layer's forward+backward and of our attention alone
(``profile_layer`` / ``profile_attention``: kernels and GPU-busy microseconds a step against the step's time, so a
step whose time far exceeds its kernels' is host-bound, and the host ops with the most own CPU time a step).

``--compiled`` adds, per case, our layer through ``torch.compile`` (``dynamic=False``), to measure what Inductor's
fusion of the non-attention work (the projections' bias epilogues, residual adds, batch norms, the MLP's bias and
activation) saves against the eager layer (``ours_compiled`` columns, timed in the same run; a compile that fails is
recorded as the case's ``compiled_error``). ``--graphed`` adds our layer's forward+backward through
``torch.cuda.make_graphed_callables`` (its forward and its backward each one CUDA graph, replayed; the loss outside),
what taking the host away gives a layer whose step is host-bound (``ours_graphed`` columns; ``graphed_error`` where
the capture fails). PyG's ``GPSConv`` has no such column: its ``to_dense_batch`` reads the graph sizes on the host,
which a CUDA graph cannot hold. PyG's attention runs under
``sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH])``: torch's cuDNN attention backend is kept out of this
process because it breaks later cuDNN calls on the project's H200 (``shared/device/README.md``).

    python benchmarks/bench_graph_transformer.py --out out/gt.json --md out/gt.md --plot out/gt.png  # GPU
    python benchmarks/bench_graph_transformer.py --compiled --out out/gt_compiled.json   # + torch.compile of ours
    python benchmarks/bench_graph_transformer.py --graphed --out out/gt_graphed.json     # + ours in CUDA graphs
    python benchmarks/bench_graph_transformer.py --attention-backend cudnn --out out/gt_cudnn.json  # our SDPA graphs
    python benchmarks/bench_graph_transformer.py --quick --out /tmp/q.json  # CPU smoke, tiny, no timing claims

The JSON holds ``environment``, one ``rows`` entry per case (both sides' times, memory, ratios, the error against
PyG) and ``summary`` in ``benchmarks/plot.py``'s format (one row per case and pass), which ``--plot`` draws.
"""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, cast

import os

import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.data import Data
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudnn_gnn
from cudnn_gnn.backends import _cudnn_sdpa
from cudnn_gnn.layers import GATConv, ToCscGraph
from cudnn_gnn.layers.gps_conv import GPSConv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import environment, peak_memory, synchronize, time_fn, write_json  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_outputs  # noqa: E402
from cudnn_gnn.apps._util import write_text  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    "ragged": {"graphs": 128, "min_nodes": 10, "max_nodes": 500, "channels": 128, "heads": 4, "edges_per_node": 4},
    "molecules": {"graphs": 512, "min_nodes": 15, "max_nodes": 35, "channels": 128, "heads": 4, "edges_per_node": 2},
    "quick": {"graphs": 6, "min_nodes": 1, "max_nodes": 20, "channels": 16, "heads": 2, "edges_per_node": 2},
}
VARIANTS = ("transformer", "gps_gat", "gps_pyg_gat")
PASSES = (("fwd", "fwd"), ("fwd_bwd", "fwd+bwd"))
SAFE_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def make_batch(p: dict[str, Any], device: torch.device, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(p["min_nodes"], p["max_nodes"] + 1, (p["graphs"],), generator=g)
    n = int(sizes.sum())
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    batch = torch.repeat_interleave(torch.arange(p["graphs"]), sizes)
    src = torch.randint(0, n, (p["edges_per_node"] * n,), generator=g)
    dst = ptr[batch[src]] + torch.randint(0, 1 << 30, src.shape, generator=g) % sizes[batch[src]]
    return {
        "x": torch.randn(n, p["channels"], generator=g).to(device),
        "edge_index": torch.stack([src, dst]).to(device),
        "batch": batch.to(device),
        "ptr": ptr.to(device),
        "max_num_nodes": int(sizes.max()),
        "num_nodes": n,
        "padded_nodes": p["graphs"] * int(sizes.max()),
    }


def make_layers(p: dict[str, Any], variant: str, device: torch.device, dtype: torch.dtype,
                attention_backend: str = "auto"):
    """PyG's GPSConv and ours with one state_dict; the local GATConv of ``variant`` on each side (None for
    ``transformer``; ours for ``gps_gat``, PyG's for ``gps_pyg_gat``); ours' global attention on
    ``attention_backend``."""
    c, h = p["channels"], p["heads"]
    torch.manual_seed(0)
    pyg_conv = pyg_nn.GATConv(c, c // h, heads=h) if variant != "transformer" else None
    our_conv = GATConv(c, c // h, heads=h) if variant == "gps_gat" else \
        (pyg_nn.GATConv(c, c // h, heads=h) if variant == "gps_pyg_gat" else None)
    pyg = pyg_nn.GPSConv(c, pyg_conv, heads=h).to(device, dtype)
    ours = GPSConv(c, our_conv, heads=h, attention_backend=attention_backend).to(device, dtype)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return pyg, ours


def time_it(fn: Callable[[], Any], device: torch.device, warmup: int, reps: int) -> tuple[float, float | None]:
    """(median ms, peak MiB of one call above the memory allocated before it; None on CPU)."""
    median = time_fn(fn, device=device, warmup=warmup, repeats=reps)["median_ms"]
    peak = peak_memory(fn, device=device)
    return median, None if peak is None else peak / 2**20


def host_profile(fn: Callable[[], Any], device: torch.device, steps: int = 5, top: int = 12) -> dict[str, Any]:
    """Where one step of ``fn`` spends its time: ``kernels`` a step, ``gpu_busy_us`` (the kernels' summed time a
    step), ``aten_ops`` a step, and the ``top`` host ops by own CPU time (us a step; nested ops counted once, in
    the innermost), over ``steps`` steps after one warm-up."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        synchronize(device)
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    host = sorted((e for e in prof.key_averages() if e.self_cpu_time_total > 0),
                  key=lambda e: -e.self_cpu_time_total)
    return {
        "kernels": len(kernels) / steps,
        "gpu_busy_us": sum(e.time_range.end - e.time_range.start for e in kernels) / steps,
        "aten_ops": sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / steps,
        "top_host_ops": [{"name": e.key[:80], "self_cpu_us": e.self_cpu_time_total / steps, "calls": e.count / steps}
                         for e in host[:top]],
    }


def run_case(preset: str, variant: str, dtype: torch.dtype, device: torch.device, warmup: int, reps: int,
             compiled: bool = False, attention_backend: str = "auto", profile: bool = False,
             graphed: bool = False) -> dict[str, Any]:
    p = PRESETS[preset]
    data = make_batch(p, device)
    x = data["x"].to(dtype)
    pyg, ours = make_layers(p, variant, device, dtype, attention_backend)
    # our GATConv reads the batch's graph prepared once (self-loops included); PyG's layers the edge_index
    our_graph = data["edge_index"] if variant != "gps_gat" else \
        ToCscGraph()(Data(edge_index=data["edge_index"], num_nodes=data["num_nodes"])).csc_graph
    pyg.train()
    ours.train()  # dropout 0: train mode only switches BatchNorm to batch statistics, alike in both

    def safe() -> Any:  # a fresh context each call: sdpa_kernel's context manager is single-use
        return sdpa_kernel(SAFE_SDPA) if device.type == "cuda" else nullcontext()

    def pyg_call(xi: torch.Tensor) -> torch.Tensor:
        with safe():
            return pyg(xi, data["edge_index"], data["batch"])

    def ours_call(xi: torch.Tensor) -> torch.Tensor:
        return ours(xi, our_graph, data["batch"], ptr=data["ptr"], max_num_nodes=data["max_num_nodes"])

    def fwd(call: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], Any]:
        return lambda: torch.no_grad()(call)(x)

    def fwd_bwd(call: Callable[[torch.Tensor], torch.Tensor], module: torch.nn.Module) -> Callable[[], Any]:
        def step() -> None:
            module.zero_grad(set_to_none=True)
            call(x.detach().requires_grad_()).float().square().mean().backward()

        return step

    with torch.no_grad():
        want, got = pyg_call(x).float(), ours_call(x).float()
    rel_err = float((got - want).norm() / want.norm().clamp_min(1e-12))
    row: dict[str, Any] = {
        "preset": preset,
        "variant": variant,
        "dtype": str(dtype).replace("torch.", ""),
        "num_graphs": p["graphs"],
        "num_nodes": data["num_nodes"],
        "padded_nodes": data["padded_nodes"],
        "max_num_nodes": data["max_num_nodes"],
        "channels": p["channels"],
        "heads": p["heads"],
        "rel_err_vs_pyg": rel_err,
    }
    for label, fn_pyg, fn_ours in (
        ("fwd", fwd(pyg_call), fwd(ours_call)),
        ("fwd_bwd", fwd_bwd(pyg_call, pyg), fwd_bwd(ours_call, ours)),
    ):
        t_p, m_p = time_it(fn_pyg, device, warmup, reps)
        t_o, m_o = time_it(fn_ours, device, warmup, reps)
        row[f"{label}_ms_pyg"], row[f"{label}_ms_ours"] = t_p, t_o
        row[f"{label}_mib_pyg"], row[f"{label}_mib_ours"] = m_p, m_o
        row[f"{label}_speedup"] = t_p / t_o
        row[f"{label}_mem_ratio"] = m_p / m_o if m_p is not None and m_o else None
    row.update(attention_columns(data, x, p["heads"], ours.attention_backend, row, device, warmup, reps,
                                 profile=profile))
    if profile:
        row["profile_layer"] = host_profile(fwd_bwd(ours_call, ours), device)
    if compiled:
        row.update(compiled_columns(ours_call, ours, x, fwd, fwd_bwd, device, warmup, reps))
    if graphed and variant == "gps_pyg_gat":  # a failed capture can leave the process's CUDA state unusable
        row["graphed_error"] = "not captured: PyG's GATConv drops self-loops by boolean-mask indexing (a host sync)"
    elif graphed:
        row.update(graphed_columns(ours_call, ours, x, fwd_bwd, device, warmup, reps))
    return row


def attention_columns(data: dict[str, Any], x: torch.Tensor, heads: int, backend: str, row: dict[str, Any],
                      device: torch.device, warmup: int, reps: int, profile: bool = False) -> dict[str, Any]:
    """Our global attention alone (:func:`cudnn_gnn.graph_attention` on the batch's ``[N, H, C / H]`` q, k, v, the
    layer's backend), forward and forward+backward: ``attention_{pass}_ms``, and ``non_attention_share_{pass}``, the
    share of our layer's time that is not the attention (the projections, norms, MLP, residuals and, for the GPS
    variants, the local layer): the part that fusing (``--compiled``) can shorten."""
    n, c = x.shape
    q, k, v = (t.view(n, heads, c // heads) for t in torch.randn(3, n, c, device=x.device, dtype=x.dtype))

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cudnn_gnn.graph_attention(q, k, v, data["ptr"], max_num_nodes=data["max_num_nodes"], backend=backend)

    def fwd() -> Any:
        with torch.no_grad():
            return call(q, k, v)

    def fwd_bwd() -> None:
        qi, ki, vi = (t.detach().requires_grad_() for t in (q, k, v))
        call(qi, ki, vi).float().square().mean().backward()

    out: dict[str, Any] = {}
    for label, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        t = time_fn(fn, device=device, warmup=warmup, repeats=reps)["median_ms"]
        out[f"attention_{label}_ms"] = t
        out[f"non_attention_share_{label}"] = max(0.0, 1.0 - t / row[f"{label}_ms_ours"])
    if profile:
        out["profile_attention"] = host_profile(fwd_bwd, device)
    return out


def compiled_columns(ours_call: Callable[[torch.Tensor], torch.Tensor], ours: torch.nn.Module, x: torch.Tensor,
                     fwd: Callable[..., Callable[[], Any]], fwd_bwd: Callable[..., Callable[[], Any]],
                     device: torch.device, warmup: int, reps: int) -> dict[str, Any]:
    """Our layer through ``torch.compile(dynamic=False)``, timed as the eager one: ``{pass}_ms_ours_compiled``,
    ``{pass}_compiled_speedup`` (eager ours / compiled ours) and ``{pass}_compiled_vs_pyg`` (PyG / compiled ours),
    the compiled forward's error against our eager one; ``compiled_error`` where the compile fails."""
    torch._dynamo.reset()
    call = torch.compile(ours_call, dynamic=False)
    out: dict[str, Any] = {}
    try:
        with torch.no_grad():
            want, got = ours_call(x).float(), call(x).float()
        out["compiled_rel_err_vs_ours"] = float((got - want).norm() / want.norm().clamp_min(1e-12))
        for label, fn in (("fwd", fwd(call)), ("fwd_bwd", fwd_bwd(call, ours))):
            t, m = time_it(fn, device, max(warmup, 2), reps)  # the first call compiles
            out[f"{label}_ms_ours_compiled"], out[f"{label}_mib_ours_compiled"] = t, m
    except Exception as exc:  # noqa: BLE001 - a failed compile is a result of the case, not the end of the run
        return {"compiled_error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
    return out


class _Bound(torch.nn.Module):
    """``call(x)`` as a module over ``layer``'s parameters: what ``make_graphed_callables`` takes (tensor
    arguments only; the batch's graph, offsets and sizes stay bound)."""

    def __init__(self, call: Callable[[torch.Tensor], torch.Tensor], layer: torch.nn.Module) -> None:
        super().__init__()
        self.call, self.layer = call, layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.call(x)


def graphed_columns(ours_call: Callable[[torch.Tensor], torch.Tensor], ours: torch.nn.Module, x: torch.Tensor,
                    fwd_bwd: Callable[..., Callable[[], Any]], device: torch.device, warmup: int,
                    reps: int) -> dict[str, Any]:
    """Our layer's forward+backward through ``torch.cuda.make_graphed_callables``, timed as the eager one:
    ``fwd_bwd_ms_ours_graphed``, ``fwd_bwd_graphed_speedup`` (eager ours / graphed ours),
    ``fwd_bwd_graphed_vs_pyg`` and the graphed forward's error against our eager one; ``graphed_error`` where the
    capture fails or there is no CUDA. No memory column: the graphs' memory is their private pool, taken at capture,
    not above the inputs per call."""
    if device.type != "cuda":
        return {"graphed_error": "needs CUDA (torch.cuda.make_graphed_callables)"}
    try:
        graphed = cast(Callable[[torch.Tensor], torch.Tensor], torch.cuda.make_graphed_callables(
            _Bound(ours_call, ours), (x.detach().requires_grad_(),), allow_unused_input=True))
        with torch.no_grad():
            want = ours_call(x).float()
        got = graphed(x.detach().requires_grad_()).detach().float()
        out: dict[str, Any] = {"graphed_rel_err_vs_ours": float((got - want).norm() / want.norm().clamp_min(1e-12))}
        out["fwd_bwd_ms_ours_graphed"] = time_fn(fwd_bwd(graphed, ours), device=device, warmup=warmup,
                                                 repeats=reps)["median_ms"]
    except Exception as exc:  # noqa: BLE001 - a failed capture is a result of the case, not the end of the run
        return {"graphed_error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
    return out


def add_compiled_ratios(row: dict[str, Any]) -> None:
    """The compiled and graphed columns' ratios, from the row's eager times."""
    for label, _ in PASSES:
        for kind in ("compiled", "graphed"):
            t = row.get(f"{label}_ms_ours_{kind}")
            if t:
                row[f"{label}_{kind}_speedup"] = row[f"{label}_ms_ours"] / t
                row[f"{label}_{kind}_vs_pyg"] = row[f"{label}_ms_pyg"] / t


def summary(rows: list[dict[str, Any]], attention_backend: str) -> list[dict[str, Any]]:
    """``benchmarks/plot.py``'s rows: one per case and pass (``layer``: the variant; ``<variant> compiled`` for the
    compiled columns), speed-up and memory ratio against PyG."""
    out = []
    for r in rows:
        for label, pass_ in PASSES:
            sides = [("", r[f"{label}_ms_ours"], r[f"{label}_mib_ours"])]
            if r.get(f"{label}_ms_ours_compiled") is not None:
                sides.append((" compiled", r[f"{label}_ms_ours_compiled"], r[f"{label}_mib_ours_compiled"]))
            if r.get(f"{label}_ms_ours_graphed") is not None:
                sides.append((" graphed", r[f"{label}_ms_ours_graphed"], None))
            for suffix, ms, mib in sides:
                pyg_mib = r[f"{label}_mib_pyg"]
                out.append({"preset": r["preset"], "layer": r["variant"] + suffix, "dtype": r["dtype"],
                            "backend": attention_backend, "pass": pass_, "pyg_ms": r[f"{label}_ms_pyg"], "ours_ms": ms,
                            "ours_mem": None if mib is None else mib * 2**20, "pyg_status": "ok", "ours_status": "ok",
                            "speedup_vs_pyg": r[f"{label}_ms_pyg"] / ms,
                            "mem_ratio_pyg_over_ours": pyg_mib / mib if pyg_mib is not None and mib else None})
    return out


def markdown(result: dict[str, Any]) -> str:
    """One row per case: both sides' forward and forward+backward medians, the ratios, peak memory, the share of our
    layer's forward+backward outside the attention, and (with ``--compiled`` / ``--graphed``) our compiled layer and
    our layer in CUDA graphs."""
    lines = ["| preset | variant | dtype | nodes | fwd PyG / ours (ms) | fwd x | fwd+bwd PyG / ours (ms) | fwd+bwd x | "
             "peak PyG / ours (MiB) | not attention, ours fwd+bwd | ours compiled fwd / fwd+bwd (ms) | "
             "compiled vs eager ours (fwd+bwd) | ours graphed fwd+bwd (ms) | graphed vs PyG (fwd+bwd) | rel. err. |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        mib = "-" if r["fwd_bwd_mib_pyg"] is None else f"{r['fwd_bwd_mib_pyg']:.1f} / {r['fwd_bwd_mib_ours']:.1f}"
        if r.get("fwd_ms_ours_compiled") is not None:
            comp = f"{r['fwd_ms_ours_compiled']:.3f} / {r['fwd_bwd_ms_ours_compiled']:.3f}"
            comp_x = f"{r['fwd_bwd_compiled_speedup']:.2f}x"
        else:
            comp, comp_x = r.get("compiled_error", "-")[:60], "-"
        if r.get("fwd_bwd_ms_ours_graphed") is not None:
            graph, graph_x = f"{r['fwd_bwd_ms_ours_graphed']:.3f}", f"{r['fwd_bwd_graphed_vs_pyg']:.2f}x"
        else:
            graph, graph_x = r.get("graphed_error", "-")[:60], "-"
        share = "-" if r.get("non_attention_share_fwd_bwd") is None else f"{100 * r['non_attention_share_fwd_bwd']:.0f}%"
        lines.append(f"| {r['preset']} | {r['variant']} | {r['dtype']} | {r['num_nodes']} | {r['fwd_ms_pyg']:.3f} / "
                     f"{r['fwd_ms_ours']:.3f} | {r['fwd_speedup']:.2f}x | {r['fwd_bwd_ms_pyg']:.3f} / "
                     f"{r['fwd_bwd_ms_ours']:.3f} | {r['fwd_bwd_speedup']:.2f}x | {mib} | {share} | {comp} | {comp_x} | "
                     f"{graph} | {graph_x} | "
                     f"{r['rel_err_vs_pyg']:.1e} |")
    note = "" if result["timing_claims"] else "\n(--quick CPU smoke run: not timing claims)\n"
    return "\n".join(lines) + "\n" + note


def _mib(v: float | None) -> str:
    return "       -" if v is None else f"{v:8.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="bench_graph_transformer.py", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--preset", choices=["ragged", "molecules"], action="append", help="default: both")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], action="append", help="default: both")
    ap.add_argument("--variant", choices=VARIANTS, action="append", help="default: both")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--attention-backend", choices=["auto", "cudnn", "flash"], default="auto",
                    help="our layer's global attention (GPSConv's attention_backend): auto takes cuDNN SDPA only where "
                         "the cuDNN in use has its precompiled engines, else flash; cudnn forces our cuDNN SDPA graphs")
    ap.add_argument("--quick", action="store_true", help="CPU smoke run on a tiny batch; no timing claims")
    ap.add_argument("--compiled", action="store_true",
                    help="also time our layer through torch.compile(dynamic=False) (the non-attention work fused)")
    ap.add_argument("--graphed", action="store_true",
                    help="also time our layer's forward+backward through torch.cuda.make_graphed_callables (CUDA)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile our layer's and our attention's forward+backward (kernels, GPU-busy time, host "
                         "ops)")
    ap.add_argument("--md", help="also write the markdown table here")
    ap.add_argument("--plot", help="also draw benchmarks/plot.py's figure here (needs matplotlib)")
    args = ap.parse_args(argv)
    check_outputs(ap, {"--out": args.out, "--md": args.md, "--plot": args.plot})  # before any batch is built

    if args.quick:
        device, presets, dtypes, warmup, reps = torch.device("cpu"), ["quick"], [torch.float32], 1, 1
    else:
        if not torch.cuda.is_available():
            ap.error("a CUDA GPU is needed (or --quick for a CPU smoke run)")
        device = torch.device("cuda")
        presets = args.preset or ["ragged", "molecules"]
        dtypes = [{"bf16": torch.bfloat16, "fp32": torch.float32}[d] for d in (args.dtype or ["bf16", "fp32"])]
        warmup, reps = args.warmup, args.reps
    variants = args.variant or list(VARIANTS)
    info = cudnn_gnn.backend_info()
    rows = []
    t0 = time.perf_counter()
    for preset in presets:
        for dtype in dtypes:
            for variant in variants:
                row = run_case(preset, variant, dtype, device, warmup, reps, compiled=args.compiled,
                               attention_backend=args.attention_backend, profile=args.profile,
                               graphed=args.graphed)
                add_compiled_ratios(row)
                rows.append(row)
                print(
                    f"{preset:9s} {row['dtype']:8s} {variant:11s} N={row['num_nodes']:6d} "
                    f"fwd {row['fwd_ms_pyg']:8.2f} / {row['fwd_ms_ours']:8.2f} ms (x{row['fwd_speedup']:.2f})  "
                    f"fwd+bwd {row['fwd_bwd_ms_pyg']:8.2f} / {row['fwd_bwd_ms_ours']:8.2f} ms (x{row['fwd_bwd_speedup']:.2f})  "
                    f"peak {_mib(row['fwd_bwd_mib_pyg'])} / {_mib(row['fwd_bwd_mib_ours'])} MiB  err {row['rel_err_vs_pyg']:.1e}",
                    flush=True,
                )
                for key in ("profile_layer", "profile_attention") if args.profile else ():
                    pr = row[key]
                    print(f"  {key}: {pr['kernels']:.0f} kernels, GPU busy {pr['gpu_busy_us'] / 1e3:.3f} ms, "
                          f"{pr['aten_ops']:.0f} aten ops a step; most host time: "
                          + ", ".join(f"{o['name']} {o['self_cpu_us']:.0f} us" for o in pr["top_host_ops"][:4]),
                          flush=True)
    # what ran, not what could: ``auto`` takes cuDNN SDPA only where the cuDNN in use has its precompiled engines
    # (cudnn_gnn.ops.global_attention.choose_backend), so the plan ledger says whether our cuDNN graphs ran
    ledger = _cudnn_sdpa.plan_cache_info()
    attention_backend = ("reference" if device.type != "cuda"
                         else "cudnn" if ledger.builds + ledger.disk_loads + ledger.hits > 0 else "flash")
    result = {
        "what": "PyG GPSConv (padded nn.MultiheadAttention) vs cudnn_gnn GPSConv (packed graph_attention); ratios are PyG / ours",
        "quick": args.quick,
        "timing_claims": not args.quick,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "attention_backend": attention_backend,
        "backend_info": {k: (list(v) if isinstance(v, tuple) else v) for k, v in info.as_dict().items()},
        "sdpa_plan_ledger": ledger._asdict(),
        "fp32_note": "on the cuDNN backend fp32 inputs run the attention kernel in bf16 (cast inside)",
        "seconds": time.perf_counter() - t0,
        "environment": environment(device),
        "rows": rows,
        "summary": summary(rows, attention_backend),
    }
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    table = markdown(result)
    print(table)
    if args.md:
        write_text(args.md, table)
    if args.plot:
        from plot import plot

        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
