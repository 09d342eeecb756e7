"""Where a Cora-sized layer step spends its time on a GPU machine, and what capturing it (CUDA graphs) gives.

A Cora fwd+bwd step (2,708 nodes, 10,556 edges, ``GATConv(1433, 8, heads=8)``, ``add_self_loops=False``, as the
``cora`` preset of ``bench_layers.py``) moves a few MB: its time is the host's. For PyG's layer and ours (one
backend, default ``triton``), GAT and GATv2, float32, this measures:

* ``event_ms``: CUDA-event median per step with a sync after each (``bench_layers.py``'s timing);
* ``host_ms``: wall time per step over ``--steps`` steps queued back to back (one sync at the end), with Python's
  garbage collector on and off (``host_ms_no_gc``);
* ``kernels``: CUDA kernels launched per step, and the ops with the most self CPU time (``torch.profiler``);
* ``compiled`` / ``reduce_overhead``: the same step with the module under ``torch.compile`` (default mode) and
  ``mode="reduce-overhead"`` (CUDA graphs; ``cudagraph_mark_step_begin`` before each step), with the first call's
  wall time (the compile);
* ``op_host``: host microseconds per call of the Triton op's forward and backward implementations alone on
  the same graph (real launches, queued back to back), and cProfile's functions with the most own time in them;
* ``step_cprofile_tottime`` (``--step-cprofile``): cProfile's functions with the most own time over whole eager
  steps, per layer and implementation;
* ``after_other_backend``: our eager step measured again after the other GPU backend's layer ran a few steps in
  the same process (``--other-backend``; the headline runs measured GAT's Cora rows slower in processes that
  also ran cuDNN).

Usage (from the repository root, on a CUDA machine)::

    python benchmarks/investigations/cora_host.py [--backend triton] [--other-backend cudnn] [--steps 200] \\
        [--step-cprofile] [--out cora_host.json]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, triton_spec, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402

CORA = GraphSpec(2_708, 10_556, exponent=0.5)


def build(layer: str, impl: str, edge_index: Tensor, device: torch.device) -> tuple[nn.Module, Any]:
    """``(module, graph argument)``: PyG's layer (seed 0) or ours (``impl`` = a backend) with its state_dict."""
    from torch_geometric.nn import GATConv, GATv2Conv

    import cudnn_gnn

    torch.manual_seed(0)
    pyg_cls, ours_cls = (GATConv, cudnn_gnn.GATConv) if layer == "GAT" else (GATv2Conv, cudnn_gnn.GATv2Conv)
    pyg = pyg_cls(1433, 8, heads=8, add_self_loops=False).to(device)
    if impl == "pyg":
        return pyg, edge_index
    ours = ours_cls(1433, 8, heads=8, add_self_loops=False, backend=impl).to(device)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return ours, cudnn_gnn.CscGraph.from_edge_index(edge_index, num_nodes=CORA.num_nodes)


def step_fn(model: nn.Module, graph: Any, x: Tensor, grad: Tensor, *, mark: bool = False) -> Callable[[], None]:
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        for p in params:
            p.grad = None
        if mark:
            torch.compiler.cudagraph_mark_step_begin()
        model(x, graph).backward(grad)

    return step


def event_ms(step: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_ms(step: Callable[[], None], steps: int, *, collect: bool) -> float:
    """Wall ms per step over ``steps`` steps queued back to back, median of 5 rounds."""
    rounds = []
    for _ in range(5):
        gc.collect()
        if not collect:
            gc.disable()
        try:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - t0) / steps * 1e3)
        finally:
            gc.enable()
    return statistics.median(rounds)


def profile(step: Callable[[], None], steps: int = 20, top: int = 15) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    cuda = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = sum(e.count for e in cuda)
    gpu_us = sum(e.self_device_time_total for e in cuda)
    cpu = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CPU),
                 key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {"kernels_per_step": kernels / steps, "gpu_us_per_step": gpu_us / steps,
            "top_self_cpu_us_per_step": [{"name": e.key, "us": e.self_cpu_time_total / steps, "calls": e.count / steps}
                                         for e in cpu]}


def measure(model: nn.Module, graph: Any, x: Tensor, grad: Tensor, args: argparse.Namespace, *,
            with_profile: bool = True) -> dict[str, Any]:
    step = step_fn(model, graph, x, grad)
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    rec: dict[str, Any] = {"event_ms": event_ms(step, args.repeats),
                           "host_ms": host_ms(step, args.steps, collect=True),
                           "host_ms_no_gc": host_ms(step, args.steps, collect=False)}
    if with_profile:
        rec.update(profile(step))
    return rec


def first_call_then_warm(step: Callable[[], None], warmup: int = 10) -> float:
    """Wall seconds of ``step``'s first call (the compile), then ``warmup`` more calls; synchronised."""
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    return first


def measure_compiled(model: nn.Module, graph: Any, x: Tensor, grad: Tensor, args: argparse.Namespace,
                     mode: str | None) -> dict[str, Any]:
    torch._dynamo.reset()
    compiled = torch.compile(model, mode=mode)
    step = step_fn(compiled, graph, x, grad, mark=mode == "reduce-overhead")
    try:
        first = first_call_then_warm(step)
        return {"status": "ok", "first_call_s": first, "event_ms": event_ms(step, args.repeats),
                "host_ms": host_ms(step, args.steps, collect=True), **profile(step, top=5)}
    except Exception as exc:  # noqa: BLE001 - a failure is a result here
        return {"status": "error", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    finally:
        torch._dynamo.reset()


def per_call_us(fn: Callable[[], Any], calls: int, warmup: int = 20) -> float:
    """Host microseconds a call of ``fn`` over ``calls`` calls queued back to back (one sync at the end)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def step_cprofile(step: Callable[[], None], calls: int = 300, top: int = 30) -> str:
    """cProfile's functions with the most own time over ``calls`` eager steps queued back to back (after 30 warm-up
    steps): where the host's time of a whole step goes, the autograd engine's C++ (``run_backward``) included."""
    for _ in range(30):
        step()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def op_host(layer: str, edge_index: Tensor, device: torch.device, calls: int = 300) -> dict[str, Any]:
    """Host us per call of the Triton ops' forward and backward implementations (Cora, 8 heads x 8; no dispatcher,
    no autograd), and cProfile's top functions by own time over ``calls`` backward calls."""
    import cudnn_gnn
    from cudnn_gnn.backends import triton as tb
    from cudnn_gnn.backends.triton import gat_op, gatv2_op

    csc = cudnn_gnn.CscGraph.from_edge_index(edge_index, num_nodes=CORA.num_nodes)
    v2 = layer == "GATv2"
    x = torch.randn(CORA.num_nodes, 64, device=device, requires_grad=True)
    w = torch.randn(64 if v2 else 128, device=device, requires_grad=True)
    call, walk = tb.build_call(triton_spec(csc, x, w, v2=v2, heads=8), tb.kernel_graph(csc), needs_grad=True)
    assert walk is not None  # needs_grad
    op = gatv2_op if v2 else gat_op
    out, lse, *rest = op._forward(*call, False)
    grad = torch.randn_like(out)
    if v2:
        lead: tuple[Any, ...] = (grad, None, lse)
    else:  # what GatAttention keeps for the backward: the output where it gathers one row an edge
        kept = out if gat_op.gat_one_gather(call, walk.rev_dst is not None) else None
        lead = (grad, None, lse, kept, rest[1])

    with torch.no_grad():
        fwd = per_call_us(lambda: op._forward(*call, False), calls)
        bwd = per_call_us(lambda: op._backward(*lead, *call, *walk), calls)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            op._backward(*lead, *call, *walk)
        torch.cuda.synchronize()
        prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    return {"fwd_impl_us": fwd, "bwd_impl_us": bwd, "bwd_cprofile_tottime": text.getvalue()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="triton", help="our backend: triton or cudnn")
    ap.add_argument("--other-backend", default="cudnn", help="run this backend's layer, then ours again ('' skips)")
    ap.add_argument("--layers", default="GAT,GATv2")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--step-cprofile", action="store_true",
                    help="also cProfile whole eager steps of each layer (the JSON's step_cprofile_tottime)")
    ap.add_argument("--out", default="cora_host.json")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    g = make_graph(CORA, seed=0, device=device, prefer_ogbn=False)
    torch.manual_seed(0)
    x = torch.randn(CORA.num_nodes, 1433, device=device)
    grad = torch.randn(CORA.num_nodes, 64, device=device)
    payload: dict[str, Any] = {"schema": "cudnn-gnn/cora_host/1", "environment": environment(device),
                               "num_nodes": CORA.num_nodes, "num_edges": g.num_edges, "backend": args.backend,
                               "rows": []}
    for layer in args.layers.split(","):
        if args.backend == "triton":
            host = payload.setdefault("op_host", {})[layer] = op_host(layer, g.edge_index, device)
            print(f"{layer:5s} triton op alone: _fwd_impl {host['fwd_impl_us']:.1f} us, _bwd_impl "
                  f"{host['bwd_impl_us']:.1f} us a call", flush=True)
            print("\n".join(host["bwd_cprofile_tottime"].splitlines()[6:22]), flush=True)
        for impl in ("pyg", args.backend):
            model, graph = build(layer, impl, g.edge_index, device)
            rec: dict[str, Any] = {"layer": layer, "impl": impl, **measure(model, graph, x, grad, args)}
            if args.step_cprofile:
                rec["step_cprofile_tottime"] = step_cprofile(step_fn(model, graph, x, grad))
            if not args.no_compile:
                rec["compiled"] = measure_compiled(model, graph, x, grad, args, None)
                rec["reduce_overhead"] = measure_compiled(model, graph, x, grad, args, "reduce-overhead")
            payload["rows"].append(rec)
            line = (f"{layer:5s} {impl:7s} event {rec['event_ms']:.3f} ms, host {rec['host_ms']:.3f} ms "
                    f"(no gc {rec['host_ms_no_gc']:.3f}), {rec['kernels_per_step']:.0f} kernels/step, "
                    f"{rec['gpu_us_per_step']:.0f} us GPU/step")
            for key in ("compiled", "reduce_overhead"):
                c = rec.get(key)
                if c is not None:
                    line += (f"; {key} " + (f"event {c['event_ms']:.3f} ms host {c['host_ms']:.3f} ms "
                                            f"{c['kernels_per_step']:.0f} kernels {c['gpu_us_per_step']:.0f} us "
                                            f"GPU (first {c['first_call_s']:.1f} s)" if c["status"] == "ok"
                                            else c["error"][:120]))
            print(line, flush=True)
            for op in rec["top_self_cpu_us_per_step"][:8]:
                print(f"    {op['us']:8.1f} us  {op['calls']:4.1f}x  {op['name']}", flush=True)
        if args.other_backend:
            try:
                other, other_graph = build(layer, args.other_backend, g.edge_index, device)
                measure(other, other_graph, x, grad, args, with_profile=False)
                model, graph = build(layer, args.backend, g.edge_index, device)
                again = {"layer": layer, "impl": args.backend, "after": args.other_backend,
                         **measure(model, graph, x, grad, args, with_profile=False)}
            except Exception as exc:  # noqa: BLE001 - the other backend may be missing here
                again = {"layer": layer, "after": args.other_backend, "status": "error",
                         "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            payload.setdefault("after_other_backend", []).append(again)
            if "event_ms" in again:
                print(f"{layer:5s} {args.backend} after {args.other_backend}: event {again['event_ms']:.3f} ms, "
                      f"host {again['host_ms']:.3f} ms (no gc {again['host_ms_no_gc']:.3f})", flush=True)
            else:
                print(f"{layer:5s} after {args.other_backend}: {again['error']}", flush=True)
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
