"""Where the time goes: torch.profiler on one arxiv-shape case, cuDNN GNN kernels against everything else.

Runs ``--steps`` profiled steps of one case from ``bench_layers.py`` (default: arxiv shape, GAT, fp32,
forward+backward, our layer if ``cudnn_gnn.layers`` provides it, else the op-level ``Linear + cudnn_gnn.gat``
model) after warm-up, then prints

* the top kernels by self CUDA time, each with its class;
* total self CUDA time split into ``cudnn gnn kernels`` and ``other``, with ``other`` broken down into glue
  kernels launched inside our ops (casts, fills, index copies), the linear layers, and the rest;
* the step time from CUDA events, and the gap between it and the summed kernel time (GPU idle: host overhead,
  launch latency, syncs);
* with ``--gaps N``: where the GPU waits within a step, from N more profiled steps each followed by a device sync as
  in ``bench_layers.py``'s timing (see :func:`step_gaps`): every kernel of the step in launch order with the op
  that launched it, the GPU's idle gap before it and its time, the span from the first kernel to the last, and the
  CUDA-event step time outside that span (the host's time before the first launch, and the launch latency);
* the achieved bandwidth of the cuDNN kernels under a simple traffic model (see :func:`traffic_model`) against
  the H200's ~4.3 TB/s measured copy bandwidth;
* with ``--backend triton``: the same split for our Triton kernels (``triton gnn``), and the Triton forward
  kernel's time against its gather-bound floor (:func:`triton_forward_efficiency`: the source rows gathered once
  per edge plus the output, at 4.3 TB/s), the issue's kernel-efficiency target being >= 50% of that floor.

Kernel classes: a CUDA kernel is attributed to the innermost PyTorch op that launched it (kineto's correlation
id), then up that op's parents. It is a ``cudnn gnn`` kernel when its name matches ``--cudnn-pattern`` and is not one of
PyTorch's own (``at::native`` etc.), or when that chain holds a ``cudnn_gnn::``/``cudnn::`` op and the kernel is
not one of PyTorch's own. Check the printed kernel names once on the device and adjust the
pattern if cuDNN's kernel names are not caught.

Usage::

    python benchmarks/profile_layers.py [--layer GAT|GATv2] [--dtype fp32|bf16] [--pass fwd|fwd+bwd]
        [--impl layer_cudnn|cudnn|cudnn_det|pyg|...] [--steps 5] [--out profile.json] [--trace trace.json]
    python benchmarks/profile_layers.py --backend triton --pass fwd     # Triton forward against its floor
    python benchmarks/profile_layers.py --quick      # CPU smoke test (reference backend, CPU ops only)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_layers as bl  # noqa: E402
from _bench_common import H200_BYTES_PER_S, environment, gather_floor_bytes, synchronize, time_fn, write_json  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_device, check_outputs  # noqa: E402

H200_COPY_BW = H200_BYTES_PER_S  # bytes/s, measured device-to-device copy bandwidth (issue 5)
TRITON_TARGET = 0.5  # the Triton forward's target: at least half the speed of its gather-bound floor
OUR_OPS = re.compile(r"^(cudnn_gnn::|cudnn::)")
TORCH_KERNEL = re.compile(
    r"at::native|at::cuda|at_cuda_detail|cub::|^void at::|elementwise|reduce_kernel|memset|memcpy", re.I
)
LINEAR_OPS = re.compile(r"^aten::(linear|addmm|mm|matmul|bmm)")


def short_name(name: str, width: int = 90) -> str:
    """A kernel name cut to ``width`` characters, ``...`` marking the cut."""
    return name if len(name) <= width else name[:width - 3] + "..."


def launching_op(kernel: Any, cpu_by_id: dict[int, Any]) -> str:
    """The innermost op that launched ``kernel`` and its nearest parent that is an op of ours or a torch op (not
    the launch call itself), e.g. ``cudnn_gnn::... < aten::empty``; ``?`` where kineto linked none."""
    op = cpu_by_id.get(getattr(kernel, "linked_correlation_id", 0))
    names = []
    while op is not None and len(names) < 3:
        if not op.name.startswith(("cuda", "cu", "Activity")):
            names.append(op.name)
        op = op.cpu_parent
    return " < ".join(names) if names else "?"


def step_gaps(fn: Any, pre: Any, steps: int, device: torch.device) -> dict[str, Any]:
    """``steps`` steps, each synchronised after (``bench_layers.py``'s timing), profiled twice: with CUDA activity
    only (the gaps: no per-op host overhead of the profiler's own), and with CPU activity too (which op launched each
    kernel). Per kernel position of the step: its name, launching op, the GPU idle before it (after the previous
    kernel's end) and its own time, medians over the steps; and per step the span from the first kernel's start
    to the last one's end. Steps are told apart by their kernel count (every step launches the same kernels)."""
    def run(activities: list[Any]) -> list[Any]:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                if pre is not None:
                    pre()
                synchronize(device)
                fn()
                synchronize(device)
        return list(prof.events())

    def kernels_of(events: list[Any]) -> list[Any]:
        return sorted((e for e in events if e.device_type == DeviceType.CUDA and not e.name.startswith("ProfilerStep")),
                      key=lambda e: e.time_range.start)

    timed = kernels_of(run([ProfilerActivity.CUDA]))
    events = run([ProfilerActivity.CPU, ProfilerActivity.CUDA])
    cpu_by_id = {e.id: e for e in events if e.device_type == DeviceType.CPU}
    named = kernels_of(events)
    if not timed or len(timed) % steps or len(named) != len(timed):
        return {"error": f"{len(timed)} / {len(named)} kernels over {steps} steps: not the same kernels each step"}
    n = len(timed) // steps
    per_step = [timed[i * n:(i + 1) * n] for i in range(steps)]
    rows = []
    for j in range(n):
        gaps = [max(s[j].time_range.start - s[j - 1].time_range.end, 0.0) if j else 0.0 for s in per_step]
        rows.append({"kernel": short_name(named[j].name),
                     "op": launching_op(named[j], cpu_by_id),
                     "gap_before_us": statistics.median(gaps),
                     "kernel_us": statistics.median(s[j].time_range.end - s[j].time_range.start for s in per_step)})
    span = statistics.median(s[-1].time_range.end - s[0].time_range.start for s in per_step)
    return {"kernels_per_step": n, "steps": steps, "span_us": span, "kernels": rows,
            "idle_in_span_us": sum(r["gap_before_us"] for r in rows),
            "kernel_sum_us": sum(r["kernel_us"] for r in rows)}


def classify(kernel: Any, cpu_by_id: dict[int, Any], pattern: re.Pattern[str], ours: str = "cudnn gnn") -> str:
    """``ours`` (``cudnn gnn``, ``triton gnn``) / ``glue in our ops`` / ``linear`` / ``other`` for one device event."""
    op = cpu_by_id.get(getattr(kernel, "linked_correlation_id", 0))
    chain = []
    while op is not None:
        chain.append(op.name)
        op = op.cpu_parent
    # By name first: on the H200 the cuDNN GNN kernels (launched through the driver API, named like
    # cudnn_mha_gat_bwd_fp32_fp32_fp32_i32_v1_ker8_nd) came back attributed to no op of ours.
    if pattern.search(kernel.name) and not TORCH_KERNEL.search(kernel.name):
        return ours
    if any(OUR_OPS.match(n) for n in chain):
        return "glue in our ops" if TORCH_KERNEL.search(kernel.name) else ours
    if any(LINEAR_OPS.match(n) for n in chain) or re.search(r"gemm|cutlass|xmma|sm90_", kernel.name, re.I):
        return "linear"
    return "other"


def traffic_model(inp: bl.Inputs, layer: str, dtype: str, pass_: str) -> dict[str, float]:
    """Bytes the GNN kernels must move at least, per step (a lower bound; gathers that miss cache move more).

    Forward: read ``x`` once (``N*D``), write ``out`` (``N*D``), read the CSC graph (offsets, indices and the
    CSC -> COO map: ``E*(idx+idx) + N*idx``) and write the attention ``[H, E]`` fp32; GATv2 also writes its
    ``[E, D]`` activation buffer. Backward: about twice the forward (read ``x``, ``out`` grads, attention; write
    ``x`` grads). A second, gather-bound figure counts ``E*D`` element reads (no reuse of ``x`` rows).
    """
    n, e = inp.graph.num_nodes, inp.graph.num_edges
    d = inp.preset.heads * inp.preset.channels
    h = inp.preset.heads
    s = 4 if dtype == "fp32" else 2
    idx = 4 if inp.csc.index_dtype == torch.int32 else 8
    fwd = 2 * n * d * s + e * 2 * idx + n * idx + 4 * e * h + (e * d * s if layer == "GATv2" else 0)
    gather = e * d * s + n * d * s + e * 2 * idx
    mult = 3.0 if pass_ == "fwd+bwd" else 1.0
    return {"min_bytes": fwd * mult, "gather_bytes": gather * mult}


def gather_efficiency(inp: bl.Inputs, dtype: str, kernel_us: float) -> dict[str, Any]:
    """A Triton kernel's ``kernel_us`` per step against the gather-bound floor of one row gathered per edge.

    Floor: per attention layer of the preset, one ``[H*C]`` row gathered per edge plus an ``[N, H*C]`` output
    (:func:`gather_floor_bytes`; bf16/fp16 rows under autocast are 2 bytes an element), moved at
    ``H200_BYTES_PER_S``: the forward gathers source rows, the backward's destination pass source rows again and its
    source pass output-gradient rows. ``fraction_of_floor`` = floor time / kernel time = achieved / 4.3 TB/s."""
    elem = 4 if dtype == "fp32" else 2
    floor = sum(gather_floor_bytes(inp.graph.num_edges, inp.graph.num_nodes, h * c, elem) for c, h, _ in inp.preset.stack)
    floor_us = floor / H200_BYTES_PER_S * 1e6
    return {"kernel_us_per_step": kernel_us, "gather_floor_bytes": floor, "gather_floor_us": floor_us,
            "achieved_bytes_per_s": floor / (kernel_us * 1e-6) if kernel_us > 0 else None,
            "h200_bytes_per_s": H200_BYTES_PER_S, "fraction_of_floor": floor_us / kernel_us if kernel_us > 0 else None}


def triton_forward_efficiency(inp: bl.Inputs, dtype: str, fwd_us: float) -> dict[str, Any]:
    """The Triton forward kernel's ``fwd_us`` per step against its gather-bound floor (:func:`gather_efficiency`),
    and whether it reaches the target ``TRITON_TARGET``."""
    eff = gather_efficiency(inp, dtype, fwd_us)
    fraction = eff["fraction_of_floor"]
    return {"fwd_kernel_us_per_step": eff.pop("kernel_us_per_step"), **eff, "target_fraction": TRITON_TARGET,
            "meets_target": None if fraction is None else fraction >= TRITON_TARGET}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(prog="profile_layers.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default=None, help="bench_layers preset (default arxiv; quick: tiny)")
    ap.add_argument("--layer", default="GAT", choices=bl.LAYERS)
    ap.add_argument("--dtype", default="fp32", choices=sorted(bl.DTYPES))
    ap.add_argument("--pass", dest="pass_", default="fwd+bwd", choices=bl.PASSES)
    ap.add_argument("--backend", default=None, choices=bl.GPU_BACKENDS,
                    help="our layer's GPU backend (default cudnn; quick: the reference unless given)")
    ap.add_argument("--impl", default=None,
                    help="default: layer_<backend> if the layers are available, else <backend> (quick: reference)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--cudnn-pattern", default=r"cudnn|gnn|mha_?gat", help="regex for unattributed cuDNN kernels")
    ap.add_argument("--triton-pattern", default=r"^_(fwd|bwd_dst|bwd_src|bwd_gat_delta|bwd_gat_src|bwd_gat_dst)_kernel",
                    help="regex for our Triton kernels (cudnn_gnn/backends/triton/kernels/); the forward is the "
                         "one matching _fwd_")
    ap.add_argument("--out", default=None, help="JSON path (default profile_layers.json)")
    ap.add_argument("--trace", default=None, help="also export a Chrome trace here")
    ap.add_argument("--gaps", type=int, default=0, metavar="N",
                    help="also profile N steps, each synchronised, for where the GPU waits within a step (CUDA)")
    ap.add_argument("--quick", action="store_true", help="CPU smoke test")
    ap.add_argument("--device", default=None, help="default: cuda if available (cpu with --quick)")
    ap.add_argument("--no-ogbn", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out = args.out or "profile_layers.json"
    device = check_device(ap, args.device or ("cpu" if args.quick else "auto"))
    check_outputs(ap, {"--out": args.out, "--trace": args.trace})
    preset = bl.resolve_presets([args.preset or ("tiny" if args.quick else "arxiv")], args.quick)[0]
    backend = args.backend or "cudnn"
    if args.impl is not None:
        impl = args.impl
    elif device.type == "cpu" and args.backend is None:
        impl = "reference"
    else:
        impl = f"layer_{backend}" if bl.layer_classes() else backend
    ours = "triton gnn" if bl.impl_backend(impl) == "triton" else "cudnn gnn"

    inp, _ = bl.build_inputs(preset, device, argparse.Namespace(seed=args.seed, no_ogbn=args.no_ogbn))
    model, graph_arg, kind = bl.build_model(impl, args.layer, inp, args.seed)
    fn, pre = bl.make_step(model, graph_arg, inp, args.dtype, args.pass_)
    timing = time_fn(fn, device=device, warmup=3, repeats=max(args.steps, 3), pre=pre)
    print(f"# profile: {preset.name} ({inp.graph.num_nodes:,} nodes, {inp.graph.num_edges:,} edges), {args.layer}, "
          f"{impl} (graph input: {kind}), {args.dtype}, {args.pass_}: median step {timing['median_ms']:.3f} ms", flush=True)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            if pre is not None:
                pre()
            fn()
        synchronize(device)
    if args.trace:
        prof.export_chrome_trace(args.trace)

    events = prof.events()
    cpu_by_id = {e.id: e for e in events if e.device_type == DeviceType.CPU}
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    pattern = re.compile(args.triton_pattern if ours == "triton gnn" else args.cudnn_pattern, re.I)
    per_kernel: dict[str, dict[str, Any]] = {}
    per_class: dict[str, float] = {}
    for k in kernels:
        us = k.time_range.end - k.time_range.start
        cls = classify(k, cpu_by_id, pattern, ours)
        row = per_kernel.setdefault(k.name, {"kernel": k.name, "class": cls, "calls": 0, "self_cuda_us": 0.0})
        row["calls"] += 1
        row["self_cuda_us"] += us
        per_class[cls] = per_class.get(cls, 0.0) + us
    total_us = sum(per_class.values())
    steps = max(args.steps, 1)
    top = sorted(per_kernel.values(), key=lambda r: -r["self_cuda_us"])[: args.top]
    result: dict[str, Any] = {
        "schema": "cudnn-gnn/profile_layers/1", "quick": args.quick, "environment": environment(device),
        "case": {"preset": preset.name, "layer": args.layer, "impl": impl, "dtype": args.dtype, "pass": args.pass_,
                 "graph_input": kind,
                 "num_nodes": inp.graph.num_nodes, "num_edges": inp.graph.num_edges, "steps": steps,
                 "graph_source": inp.graph.source},
        "step_ms_cuda_events": timing,
        "top_kernels": top,
        "per_class_us_per_step": {k: v / steps for k, v in per_class.items()},
    }
    if kernels:
        cudnn_us = per_class.get(ours, 0.0) / steps  # our kernels: cuDNN's, or our Triton ones
        other_us = (total_us / steps) - cudnn_us
        step_us = timing["median_ms"] * 1e3
        result["split_us_per_step"] = {f"{ours} kernels": cudnn_us, "other": other_us, "total_kernel": total_us / steps,
                                       "step (cuda events)": step_us, "gpu idle in step": max(step_us - total_us / steps, 0)}
        print("\n| kernel | class | calls/step | self CUDA us/step | share |\n|---|---|---:|---:|---:|")
        for r in top:
            name = short_name(r["kernel"])
            print(f"| `{name}` | {r['class']} | {r['calls'] / steps:g} | {r['self_cuda_us'] / steps:,.1f} "
                  f"| {100 * r['self_cuda_us'] / total_us:.1f}% |")
        print("\n| split | us/step | share of kernel time |\n|---|---:|---:|")
        print(f"| {ours} kernels | {cudnn_us:,.1f} | {100 * cudnn_us * steps / total_us:.1f}% |")
        print(f"| other | {other_us:,.1f} | {100 * other_us * steps / total_us:.1f}% |")
        for cls in ("glue in our ops", "linear", "other"):
            if cls in per_class:
                print(f"| &nbsp;&nbsp;of which {cls} | {per_class[cls] / steps:,.1f} | {100 * per_class[cls] / total_us:.1f}% |")
        print(f"| total kernel time | {total_us / steps:,.1f} | 100% |")
        idle = max(step_us - total_us / steps, 0)
        print(f"| step time (CUDA events, median) | {step_us:,.1f} | GPU idle in step: {idle:,.1f} us |")
        if ours == "triton gnn":
            fwd_us = sum(r["self_cuda_us"] for r in per_kernel.values()
                         if r["class"] == ours and "_fwd_" in r["kernel"]) / steps
            eff = result["triton_forward_efficiency"] = triton_forward_efficiency(inp, args.dtype, fwd_us)
            if fwd_us > 0:
                print(f"\nTriton forward kernel: {fwd_us:,.1f} us/step; gather-bound floor "
                      f"{eff['gather_floor_us']:,.1f} us ({eff['gather_floor_bytes'] / 1e9:.3f} GB at "
                      f"{H200_BYTES_PER_S / 1e12:.1f} TB/s); achieved {eff['achieved_bytes_per_s'] / 1e12:.2f} TB/s = "
                      f"{100 * eff['fraction_of_floor']:.0f}% of the floor's bandwidth (target >= "
                      f"{100 * TRITON_TARGET:.0f}%: {'met' if eff['meets_target'] else 'NOT met'})")
            else:
                print("\nTriton forward kernel not found among the profiled kernels: check --triton-pattern against "
                      "the kernel names above")
            if args.pass_ == "fwd+bwd":  # the backward passes that gather one row per edge, and GAT's light ones
                result["triton_backward_efficiency"] = {}
                passes = (("destination pass", "_bwd_dst_", True), ("source pass", "_bwd_src_", True),
                          ("GAT source pass", "_bwd_gat_src_", True), ("GAT delta pass", "_bwd_gat_delta_", False),
                          ("GAT destination sum", "_bwd_gat_dst_", False))
                for name, pattern, gathers in passes:
                    us = sum(r["self_cuda_us"] for r in per_kernel.values()
                             if r["class"] == ours and pattern in r["kernel"]) / steps
                    e = result["triton_backward_efficiency"][name] = gather_efficiency(inp, args.dtype, us)
                    if us > 0:
                        share = f", {100 * e['fraction_of_floor']:.0f}% of the same gather-bound floor" if gathers \
                            else " (no feature rows)"
                        print(f"Triton {name}: {us:,.1f} us/step{share}")
        elif cudnn_us > 0 and impl not in ("pyg", "pyg_compile", "reference", "layer_reference"):
            model_bytes = traffic_model(inp, args.layer, args.dtype, args.pass_)
            bw = {k: v / (cudnn_us * 1e-6) for k, v in model_bytes.items()}
            result["cudnn_bandwidth"] = {**model_bytes, **{f"{k}_per_s": v for k, v in bw.items()},
                                         "h200_copy_bytes_per_s": H200_COPY_BW}
            print(f"\ncuDNN kernels' achieved bandwidth (traffic_model): lower bound {bw['min_bytes'] / 1e12:.2f} TB/s, "
                  f"gather-bound {bw['gather_bytes'] / 1e12:.2f} TB/s, against ~{H200_COPY_BW / 1e12:.1f} TB/s copy")
        if args.gaps > 0:
            gaps = result["step_gaps"] = step_gaps(fn, pre, args.gaps, device)
            if "error" in gaps:
                print(f"\nstep gaps: {gaps['error']}")
            else:
                print("\n| # | kernel | launched by | GPU idle before us | kernel us |\n|---:|---|---|---:|---:|")
                for j, r in enumerate(gaps["kernels"]):
                    print(f"| {j} | `{r['kernel'][:60]}` | {r['op'][:70]} | {r['gap_before_us']:,.1f} | {r['kernel_us']:,.1f} |")
                print(f"| | first kernel's start to last one's end: {gaps['span_us']:,.1f} us | | "
                      f"{gaps['idle_in_span_us']:,.1f} | {gaps['kernel_sum_us']:,.1f} |")
                print(f"step (CUDA events, median) {step_us:,.1f} us: {step_us - gaps['span_us']:,.1f} us outside the span")
    else:
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top)
        print(table)
        result["cpu_table"] = table
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
