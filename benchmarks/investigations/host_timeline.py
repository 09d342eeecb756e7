"""When the host reaches each stage of one layer step, against the GPU's time for the kernels in between.

``profile_layers.py --gaps`` shows where the GPU idles inside an arxiv step (the GPU waiting for a launch); this
says what the host was doing meanwhile. It wraps the functions of the call path (the layer's forward pieces, the
op's spec / plan / run, the Triton backend's call building and launchers, the bias add and its column sum) in
timers, runs ``--steps`` steps of one ``bench_layers.py`` case, each after a device sync as that script's timing
does, and prints each function's entry and exit after the step's start (medians over the steps), in order. The
wrappers cost well under a microsecond each. Then cProfile's functions with the most own time over the forward
and the backward separately.

Usage (from the repository root, on a CUDA machine)::

    python benchmarks/investigations/host_timeline.py [--preset arxiv] [--layer GAT] [--dtype fp32] [--steps 30]
        [--out host_timeline.json]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import os
import pstats
import statistics
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_layers as bl  # noqa: E402
from _bench_common import environment, synchronize, write_json  # noqa: E402

WRAPPED = (
    "cudnn_gnn.layers.gat_conv:check_node_features", "cudnn_gnn.layers.gat_conv:graph_sizes",
    "cudnn_gnn.layers.gat_conv:resolve", "cudnn_gnn.layers.gat_conv:gat", "cudnn_gnn.layers.gat_conv:finish",
    "cudnn_gnn.layers.gatv2_conv:resolve", "cudnn_gnn.layers.gatv2_conv:gatv2", "cudnn_gnn.layers.gatv2_conv:finish",
    "cudnn_gnn.ops.gat:attention_spec", "cudnn_gnn.ops.gat:plan_call", "cudnn_gnn.ops.gat:run",
    "cudnn_gnn.backends.triton.backend:kernel_graph", "cudnn_gnn.backends.triton.op:triton_gat",
    "cudnn_gnn.backends.triton.op:build_call",
    "cudnn_gnn.backends.triton.gat_op:_forward", "cudnn_gnn.backends.triton.gat_op:_backward",
    "cudnn_gnn.backends.triton.gat_op:_fold_node_scores", "cudnn_gnn.backends.triton.gat_op:_fold_node_scores_gemm",
    "cudnn_gnn.backends.triton.gatv2_op:_forward",
    "cudnn_gnn.backends.triton.gatv2_op:_backward", "cudnn_gnn.backends.triton.kernels.node_scores:launch_node_scores",
    "cudnn_gnn.backends.triton.kernels.forward:launch_forward",
    "cudnn_gnn.backends.triton.kernels.gat_backward:launch_gat_backward",
    "cudnn_gnn.backends.triton.kernels.node_scores:launch_node_scores_backward",
    "cudnn_gnn.backends.triton.kernels.backward_dst:launch_backward_dst",
    "cudnn_gnn.backends.triton.kernels.backward_src:launch_backward_src", "cudnn_gnn.layers._pyg_outputs:bias_add",
    "cudnn_gnn._bias:column_sum",
)

_LOG: list[tuple[str, str, float]] = []


def _wrap(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        _LOG.append((name, "enter", time.perf_counter()))
        try:
            return fn(*args, **kwargs)
        finally:
            _LOG.append((name, "exit", time.perf_counter()))
    return timed


def install(model: Any) -> list[str]:
    """Wraps :data:`WRAPPED` and the model's projections' forwards; returns what it wrapped. A name that no longer
    exists is an error (a renamed stage would otherwise drop out of the timeline unnoticed)."""
    done = []
    for path in WRAPPED:
        mod_name, attr = path.split(":")
        mod = importlib.import_module(mod_name)
        if not hasattr(mod, attr):
            raise AttributeError(f"WRAPPED names {path}, which does not exist: update the list")
        setattr(mod, attr, _wrap(f"{mod_name.rsplit('.', 1)[-1]}.{attr}", getattr(mod, attr)))
        done.append(path)
    for module in model.modules():
        for lin_name in ("lin", "lin_l", "lin_r", "lin_src"):
            lin = getattr(module, lin_name, None)
            if isinstance(lin, torch.nn.Module):
                lin.forward = _wrap(f"{lin_name}.forward", lin.forward)
                done.append(lin_name)
    return done


def timeline(fn: Any, pre: Any, steps: int, device: torch.device) -> list[dict[str, Any]]:
    """Per wrapped call of a step, in order: name, entry and exit (us after the step's start), medians."""
    runs: list[list[tuple[str, str, float]]] = []
    marks: list[float] = []
    for _ in range(steps):
        if pre is not None:
            pre()
        synchronize(device)
        _LOG.clear()
        t0 = time.perf_counter()
        fn()
        marks.append((time.perf_counter() - t0) * 1e6)
        synchronize(device)
        runs.append([(n, k, (t - t0) * 1e6) for n, k, t in _LOG])
    n = len(runs[0])
    same = [r for r in runs if [(a, b) for a, b, _ in r] == [(a, b) for a, b, _ in runs[0]]]
    rows = [{"name": runs[0][j][0], "event": runs[0][j][1], "us": statistics.median(r[j][2] for r in same)}
            for j in range(n)]
    rows.append({"name": "step returns", "event": "exit", "us": statistics.median(marks)})
    return rows


def top_own_time(fn: Any, calls: int, top: int) -> list[dict[str, Any]]:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]  # not in typeshed
        rows.append({"function": f"{os.path.basename(file)}:{line}({func})", "calls": nc / calls,
                     "own_us": tt / calls * 1e6, "cumulative_us": ct / calls * 1e6})
    return sorted(rows, key=lambda r: -r["own_us"])[:top]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="arxiv")
    ap.add_argument("--layer", default="GAT", choices=bl.LAYERS)
    ap.add_argument("--dtype", default="fp32", choices=sorted(bl.DTYPES))
    ap.add_argument("--impl", default="layer_triton")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", default="host_timeline.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    preset = bl.resolve_presets([args.preset], device.type == "cpu")[0]
    inp, _ = bl.build_inputs(preset, device, argparse.Namespace(seed=args.seed, no_ogbn=True))
    model, graph_arg, _kind = bl.build_model(args.impl, args.layer, inp, args.seed)
    fn, pre = bl.make_step(model, graph_arg, inp, args.dtype, "fwd+bwd")
    for _ in range(5):
        if pre is not None:
            pre()
        fn()
    synchronize(device)
    wrapped = install(model)
    for _ in range(3):
        fn()
    synchronize(device)
    rows = timeline(fn, pre, args.steps, device)
    print(f"# {preset.name} {args.layer} {args.dtype} {args.impl}: host timeline of a step (us after its start, "
          f"medians of {args.steps})")
    depth = 0
    for r in rows:
        if r["event"] == "exit":
            depth = max(depth - 1, 0)
        print(f"{r['us']:9.1f}  {'  ' * depth}{'>' if r['event'] == 'enter' else '<'} {r['name']}")
        if r["event"] == "enter":
            depth += 1

    fwd, _ = bl.make_step(model, graph_arg, inp, args.dtype, "fwd")
    profiles = {"forward (no grad)": top_own_time(fwd, 50, args.top), "step": top_own_time(fn, 50, args.top)}
    synchronize(device)
    for what, top in profiles.items():
        print(f"\n# cProfile, {what}: own time per call (us)")
        for r in top:
            print(f"{r['own_us']:8.1f} {r['calls']:5.1f}x  {r['function']}")
    result = {"schema": "cudnn-gnn/host_timeline/1", "environment": environment(device),
              "case": {"preset": preset.name, "layer": args.layer, "dtype": args.dtype, "impl": args.impl,
                       "steps": args.steps}, "wrapped": wrapped, "timeline": rows, "cprofile": profiles}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
