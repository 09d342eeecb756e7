"""Sampled training steps of the papers100M example's GAT, ours against PyG's layer, on the SAME device-sampled
batches: per-batch step time (forward, backward, optimizer), and variants of ours for A/B in one process.

The sampled step decides #16's "our epoch against PyG's" once the sampler is not the bottleneck: the example's
epochs (``examples/papers100m.py --sampler device``) mix sampling, evaluation and warm-up with it. Here a synthetic
OGB-shaped graph is generated on the device (``synthetic_ogbn``, seconds on a GPU), ``--batches`` batches are drawn
once by :class:`cudnn_gnn.apps.sampler.DeviceNeighborLoader`, and every variant trains on exactly those batches
(same initial weights, Adam), each step timed with CUDA events after ``--warmup`` steps:

* ``pyg``: PyG's ``GATConv`` (``cudnn_gnn.apps.models.OgbGAT("pyg-gat", ...)``, trimmed ``edge_index`` slices);
* ``ours``: our ``GATConv`` on ``--backend`` (blocks from ``cudnn_gnn.sampled_blocks``);
* ``ours_compiled``, ``pyg_compiled``: the model under ``torch.compile(dynamic=True)`` (one graph for every batch
  size; its build time is in ``warmup_s``, the graphs it built in ``compiled_graphs``), the loss and the optimizer
  step eager as in the others;
* ``ours_<kernel>_<BLOCK_E>x<warps>`` (``--sweep``, not in the defaults): ours with one Triton kernel's launch shape
  (``fwd``, ``dst`` or ``src``: the forward, the backward's destination or source pass) set to ``BLOCK_E`` edges a
  block and ``warps`` warps a program, every other kernel at its default: a launch-shape sweep on sampled blocks
  (4 heads x 128, a tile 512 wide: the sweep behind ``TUNED_SHAPES``' ``"wide_512"`` entries).

Per variant: median / mean step ms, total, the ratio to ``pyg``, peak memory; the host's share (``host_ms_median``:
the Python call of a step without waiting for the GPU, so a step whose host time is close to its step time is
host-bound); and over ``--profile-steps`` more steps under ``torch.profiler``, the GPU's kernel time and kernel
count per step and the kernels that take most of it. ``--quick``: a CPU smoke run (tiny
graph, two batches, ``reference`` backend unless ``--backend`` says otherwise (``triton`` wants
``TRITON_INTERPRET=1``), no timing claims).

    python benchmarks/bench_sampled.py [--scale 0.05] [--batches 32] [--precision bf16] [--out bench_sampled.json]
    python benchmarks/bench_sampled.py --quick --out /tmp/bench_sampled_quick.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from _bench_common import environment, kernel_times, synchronize, write_json  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_device, check_outputs  # noqa: E402

VARIANTS = ("pyg", "ours", "ours_compiled",
            "pyg_compiled")


def sweep_variant(name: str) -> tuple[str, int, int] | None:
    """``(kernel, BLOCK_E, warps)`` of a variant ``ours_<kernel>_<BLOCK_E>x<warps>`` (``--sweep``), else None."""
    parts = name.split("_")
    if len(parts) != 3 or parts[0] != "ours" or parts[1] not in ("fwd", "dst", "src"):
        return None
    block_e, warps = (int(v) for v in parts[2].split("x"))
    return parts[1], block_e, warps


@contextlib.contextmanager
def variant_switches(name: str) -> Iterator[None]:
    """The Triton options a variant runs under (a ``--sweep`` variant's launch shape for its kernel, through
    ``TritonOptions(launch=...)``); the defaults otherwise."""
    from cudnn_gnn.backends import triton as tb
    swept = sweep_variant(name)
    if swept is None:
        yield
        return
    kernel, block_e, warps = swept
    with tb.use_options(tb.TritonOptions(launch={kernel: (block_e, warps)})):
        yield


def draw_batches(args: argparse.Namespace, device: torch.device) -> tuple[list[Any], int, int]:
    """``(batches, in_channels, num_classes)``: ``--batches + --warmup`` device-sampled batches, drawn once."""
    from cudnn_gnn import CscGraph
    from cudnn_gnn.apps.sampler import DeviceNeighborLoader
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn

    data = synthetic_ogbn(args.dataset, scale=args.scale, seed=args.seed, device=device)[0]
    n = data.num_nodes
    csc = CscGraph.from_edge_index(data.edge_index, num_nodes=n)  # the sampler's colptr / row
    classes = int(data.num_classes)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    y = torch.randint(0, classes, (n,), device=device, generator=gen)  # speed only: any labels do
    loader = DeviceNeighborLoader(csc.offsets, csc.indices, node_attrs={"x": data.x, "y": y}, input_nodes=data.train_idx,
                                  fanout=args.fanout, batch_size=args.batch_size, shuffle=True, device=device,
                                  seed=args.seed)
    batches: list[Any] = []
    while len(batches) < args.batches + args.warmup:
        for batch in loader:
            batches.append(batch)
            if len(batches) == args.batches + args.warmup:
                break
    return batches, data.x.size(1), classes


def run_variant(name: str, batches: list[Any], in_channels: int, classes: int, args: argparse.Namespace,
                device: torch.device) -> dict[str, Any]:
    from _common import OgbGAT, grad_scaler, optimizer_step
    from torch._dynamo.utils import counters

    from cudnn_gnn.apps.train import autocast

    torch.manual_seed(args.seed)
    model = OgbGAT("pyg-gat" if name.startswith("pyg") else "gat", in_channels, args.hidden, classes, layers=len(args.fanout),
                   heads=args.heads, out_heads=args.heads, dropout=0.5, norm=False, activation="elu",
                   backend=args.backend).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = grad_scaler(args.precision, device)
    forward = torch.compile(model, dynamic=True) if name.endswith("_compiled") else model
    graphs0 = counters["stats"]["unique_graphs"]

    def step(batch: Any) -> None:
        opt.zero_grad(set_to_none=True)
        with autocast(device, args.precision):
            out = forward(batch.x.float(), batch.edge_index, None, batch.num_sampled_nodes, batch.num_sampled_edges,
                        sampled=True)
        loss = F.cross_entropy(out[: batch.batch_size].float(), batch.y[: batch.batch_size])
        optimizer_step(loss, opt, scaler)

    rec: dict[str, Any] = {"variant": name, "status": "ok"}
    try:
        with variant_switches(name):
            t0 = time.perf_counter()
            for batch in batches[: args.warmup]:
                step(batch)
            synchronize(device)
            rec["warmup_s"] = time.perf_counter() - t0
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            times, host = [], []
            wall0 = time.perf_counter()
            for batch in batches[args.warmup:]:
                if device.type == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    t = time.perf_counter()
                    step(batch)
                    host.append((time.perf_counter() - t) * 1e3)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                else:
                    t = time.perf_counter()
                    step(batch)
                    times.append((time.perf_counter() - t) * 1e3)
                    host.append(times[-1])
            synchronize(device)
            rec.update(step_ms_median=statistics.median(times), step_ms_mean=statistics.fmean(times),
                       host_ms_median=statistics.median(host), total_s=time.perf_counter() - wall0, steps=len(times),
                       peak_gpu_bytes=int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
                       compiled_graphs=counters["stats"]["unique_graphs"] - graphs0)
            if args.profile_steps > 0 and device.type == "cuda":
                rec.update(kernel_profile(step, batches[args.warmup:][: args.profile_steps], device))
            if args.cprofile_steps > 0:
                rec.update(host_profile(step, batches[args.warmup:][: args.cprofile_steps], device))
    except Exception as exc:  # noqa: BLE001 - a failed variant is a result; the others still run
        rec.update(status="error", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return rec


def kernel_profile(step: Any, batches: list[Any], device: torch.device, top: int = 8) -> dict[str, Any]:
    """GPU kernel time and kernel count per step over ``batches`` under ``torch.profiler``, and the ``top`` kernels
    by time (name cut to 90 characters, us per step)."""
    per, count = kernel_times(lambda: [step(batch) for batch in batches], len(batches), device)
    ranked = sorted(per.items(), key=lambda kv: -kv[1])[:top]
    return {"kernel_ms_per_step": sum(per.values()) / 1e3, "kernels_per_step": count,
            "top_kernels_us_per_step": [{"kernel": k, "us": v} for k, v in ranked]}


def host_profile(step: Any, batches: list[Any], device: torch.device, top: int = 40) -> dict[str, Any]:
    """Where a step's host time goes: ``cProfile`` over ``batches`` (the GPU waited for at the end only), the
    ``top`` functions by own time and by cumulative time, ms per step (cProfile's overhead inflates both)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for batch in batches:
        step(batch)
    prof.disable()
    synchronize(device)
    n = max(len(batches), 1)
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]  # undocumented, not in typeshed

    def name(key: tuple[str, int, str]) -> str:
        path, line, fn = key
        return f"{os.path.relpath(path) if path.startswith(os.getcwd()) else os.path.basename(path)}:{line}:{fn}"

    rows = [(name(k), v[2] * 1e3 / n, v[3] * 1e3 / n, v[1] / n) for k, v in stats.items()]
    own = sorted(rows, key=lambda r: -r[1])[:top]
    cum = sorted(rows, key=lambda r: -r[2])[:top]
    return {"host_profile_own_ms": [{"fn": f, "own_ms": o, "calls": c} for f, o, _, c in own],
            "host_profile_cum_ms": [{"fn": f, "cum_ms": t, "calls": c} for f, _, t, c in cum]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(prog="bench_sampled.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ogbn-papers100M")
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--fanout", default="10,10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batches", type=int, default=32, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--precision", default="bf16", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--backend", default=None, help="default: triton (reference with --quick)")
    ap.add_argument("--variants", default=None, help=f"comma-separated, among {', '.join(VARIANTS)} (default: all; "
                    "with --quick: pyg,ours)")
    ap.add_argument("--sweep", default=None,
                    help="KERNEL:BLOCK_Es x warps, e.g. src:2,4,8x1,2,4: adds ours_src_2x1 ... (see the variants)")
    ap.add_argument("--profile-steps", type=int, default=6, help="steps under torch.profiler per variant (GPU; 0: none)")
    ap.add_argument("--cprofile-steps", type=int, default=0, help="steps under cProfile per variant (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="default: cuda if available (cpu with --quick)")
    ap.add_argument("--quick", action="store_true", help="CPU smoke run: tiny graph, 2 batches, reference backend")
    ap.add_argument("--out", default="bench_sampled.json")
    args = ap.parse_args(argv)
    device = check_device(ap, args.device or ("cpu" if args.quick else "auto"))
    check_outputs(ap, {"--out": args.out})
    if args.quick:
        args.scale, args.batches, args.warmup, args.precision = 0.0002, 2, 1, "fp32"
        args.backend = args.backend or "reference"
        args.variants = args.variants or "pyg,ours"
    args.variants = args.variants or ",".join(VARIANTS)
    args.backend = args.backend or "triton"
    args.fanout = [int(f) for f in args.fanout.split(",")]
    variants = args.variants.split(",")
    if args.sweep:  # "src:2,4,8x1,2,4" -> ours_src_2x1, ...
        kernel, grid = args.sweep.split(":")
        edges, warps = grid.split("x")
        variants += [f"ours_{kernel}_{b}x{w}" for b in edges.split(",") for w in warps.split(",")]
    unknown = sorted(v for v in set(variants) - set(VARIANTS) if sweep_variant(v) is None)
    if unknown:
        ap.error(f"--variants must be among {', '.join(VARIANTS)}, got {', '.join(unknown)}")
    t0 = time.perf_counter()
    batches, in_channels, classes = draw_batches(args, device)
    nodes = statistics.fmean(int(b.num_nodes) for b in batches)
    edges = statistics.fmean(int(b.edge_index.shape[1]) for b in batches)
    print(f"{args.dataset} x{args.scale:g}: {len(batches)} batches drawn in {time.perf_counter() - t0:.1f} s "
          f"({nodes:,.0f} nodes, {edges:,.0f} edges on average)", flush=True)
    payload: dict[str, Any] = {"schema": "cudnn-gnn/bench_sampled/1", "environment": environment(device),
                               "args": dict(vars(args)), "quick": args.quick,
                               "batch_mean": {"nodes": nodes, "edges": edges}, "records": []}
    for name in variants:
        rec = run_variant(name, batches, in_channels, classes, args, device)
        payload["records"].append(rec)
    base = next((r for r in payload["records"] if r["variant"] == "pyg" and r["status"] == "ok"), None)
    for rec in payload["records"]:
        if rec["status"] != "ok":
            print(f"{rec['variant']:18s} {rec['error']}", flush=True)
            continue
        if base is not None:
            rec["speedup_vs_pyg"] = base["step_ms_median"] / rec["step_ms_median"]
        peak = "" if rec["peak_gpu_bytes"] is None else f", peak {rec['peak_gpu_bytes'] / 2**30:.2f} GiB"
        ratio = f", {rec['speedup_vs_pyg']:.2f}x PyG" if "speedup_vs_pyg" in rec else ""
        kern = "" if "kernel_ms_per_step" not in rec else \
            f"; GPU kernels {rec['kernel_ms_per_step']:.2f} ms ({rec['kernels_per_step']:.0f} a step)"
        print(f"{rec['variant']:18s} step {rec['step_ms_median']:.2f} ms median ({rec['step_ms_mean']:.2f} mean, "
              f"{rec['steps']} steps){ratio}{peak}; host {rec['host_ms_median']:.2f} ms{kern}", flush=True)
    if args.quick:
        print("(--quick: a CPU smoke run; its times are no claims)", flush=True)
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
