"""What a Triton launch costs the host, and what ``CachedLaunch``'s shortcut saves a layer step (A/B in one process).

Two parts, on a CUDA machine:

* ``launch``: host microseconds per launch of a 30-argument kernel (our kernels' argument count; 7 constexprs)
  and of a 4-argument one, through Triton's own dispatch (``kernel[grid](...)``) against the ``CompiledKernel``'s
  launcher called directly, plus the pieces the shortcut pays itself (its key of 23 arguments, ``torch.empty``);
* ``steps``: PyG's layer and ours (``backend="triton"``), GAT and GATv2 fp32, on the ``cora`` and ``arxiv``
  shapes of ``bench_layers.py``, with the shortcut off (every kernel through Triton's own dispatch) and on in
  alternation
  (three rounds): wall ms a step over steps queued back to back (``host``) and CUDA-event ms a step with a sync
  after each (``event``, ``bench_layers.py``'s timing); on arxiv GAT also our layer and PyG's under
  ``torch.compile``; whether one step's output and parameter gradients are bitwise equal off and on; and a
  cProfile of our Cora steps with the shortcut on.

Usage (from the repository root)::

    python benchmarks/investigations/cached_launch.py [--out cached_launch.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import environment, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402

PRESETS = (("cora", GraphSpec(2_708, 10_556, exponent=0.5), 1433, 8, 8, 200),
           ("arxiv", GraphSpec(169_343, 2_315_598, exponent=0.6, ogbn="ogbn-arxiv"), 128, 8, 32, 50))
N = 3000  # launches a measurement


def launch_costs() -> dict[str, float]:
    import triton
    import triton.language as tl
    from cora_host import per_call_us
    from triton.runtime import driver

    from cudnn_gnn.backends.triton.launch import args_key

    @triton.jit
    def k30(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
            n0, n1, alpha, C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr, C3: tl.constexpr,
            C4: tl.constexpr, C5: tl.constexpr, C6: tl.constexpr):
        pid = tl.program_id(0)
        if pid < 0:  # never: the launch is what is measured
            tl.store(a0 + pid, tl.load(a1) * alpha + n0 + n1 + C0 + C1 + C2 + C3 + C4 + C5 + C6)

    @triton.jit
    def k4(a0, a1, n0, B: tl.constexpr):
        pid = tl.program_id(0)
        if pid < 0:
            tl.store(a0 + pid, tl.load(a1) + n0 + B)

    t = [torch.empty(64, device="cuda") for _ in range(20)]
    kw: dict[str, Any] = dict(C0=1, C1=2, C2=3, C3=4, C4=5, C5=6, C6=7, num_warps=4)
    args30 = (*t, 100, 2708, 0.2)
    full30 = (*args30, 1, 2, 3, 4, 5, 6, 7)
    stream = driver.active.get_current_stream(driver.active.get_current_device())
    c30 = k30[(100, 1)](*args30, **kw)
    c4 = k4[(100,)](t[0], t[1], 5, B=3)
    r30, f30, m30 = c30.run, c30.function, c30.packed_metadata
    r4, f4, m4 = c4.run, c4.function, c4.packed_metadata
    return {
        "triton_dispatch_30_args_us": per_call_us(lambda: k30[(100, 1)](*args30, **kw), N),
        "compiled_run_30_args_us": per_call_us(lambda: r30(100, 1, 1, stream, f30, m30, None, None, None, *full30), N),
        "triton_dispatch_4_args_us": per_call_us(lambda: k4[(100,)](t[0], t[1], 5, B=3), N),
        "compiled_run_4_args_us": per_call_us(lambda: r4(100, 1, 1, stream, f4, m4, None, None, None, t[0], t[1], 5, 3),
                                              N),
        "args_key_23_args_us": per_call_us(lambda: args_key(args30), N),
        "torch_empty_us": per_call_us(lambda: torch.empty(2708, 8, device="cuda"), N),
    }


_CACHED: dict[tuple[Any, str], Any] = {}


def _shortcut(on: bool) -> None:
    """Launch the Triton kernels through :class:`CachedLaunch` (``on``) or through Triton's own dispatch: the kernel
    modules' ``CachedLaunch`` objects swapped for the ``JITFunction`` each wraps (the launchers look them up by
    name on every call)."""
    from cudnn_gnn.backends.triton import kernels
    from cudnn_gnn.backends.triton.launch import CachedLaunch

    if not _CACHED:
        _CACHED.update({(module, name): k for module in kernels.KERNEL_MODULES
                        for name, k in vars(module).items() if isinstance(k, CachedLaunch)})
    for (module, name), k in _CACHED.items():
        setattr(module, name, k if on else k.fn)


def steps(out: dict[str, Any]) -> None:
    from cora_host import event_ms, host_ms, step_fn
    from torch_geometric.nn import GATConv, GATv2Conv

    import cudnn_gnn

    dev = torch.device("cuda")
    for preset, spec, fin, heads, c, n_steps in PRESETS:
        g = make_graph(spec, seed=0, device=dev, prefer_ogbn=False)
        x = torch.randn(spec.num_nodes, fin, device=dev)
        grad = torch.randn(spec.num_nodes, heads * c, device=dev)
        for layer in ("GAT", "GATv2"):
            torch.manual_seed(0)
            pyg = (GATConv if layer == "GAT" else GATv2Conv)(fin, c, heads=heads, add_self_loops=False).to(dev)
            ours = (cudnn_gnn.GATConv if layer == "GAT" else cudnn_gnn.GATv2Conv)(
                fin, c, heads=heads, add_self_loops=False, backend="triton").to(dev)
            ours.load_state_dict(pyg.state_dict())
            graph = cudnn_gnn.CscGraph.from_edge_index(g.edge_index, num_nodes=spec.num_nodes)
            sp, so = step_fn(pyg, g.edge_index, x, grad), step_fn(ours, graph, x, grad)
            for s in (sp, so):
                for _ in range(10):
                    s()
            row: dict[str, Any] = {"preset": preset, "layer": layer}
            for _ in range(3):
                row.setdefault("pyg_host_ms", []).append(host_ms(sp, n_steps, collect=True))
                row.setdefault("pyg_event_ms", []).append(event_ms(sp, 30))
                for mode in ("off", "on"):
                    _shortcut(mode == "on")
                    for _ in range(3):
                        so()
                    row.setdefault(f"{mode}_host_ms", []).append(host_ms(so, n_steps, collect=True))
                    row.setdefault(f"{mode}_event_ms", []).append(event_ms(so, 30))
            results = {}
            for mode in ("off", "on"):
                _shortcut(mode == "on")
                for p in ours.parameters():
                    p.grad = None
                y = ours(x, graph)
                y.backward(grad)
                results[mode] = [y.detach().clone()] + [p.grad.clone() for p in ours.parameters()]
            row["bitwise_equal"] = all(torch.equal(a, b) for a, b in zip(results["off"], results["on"], strict=True))
            if preset == "arxiv" and layer == "GAT":
                for mode in ("off", "on", "off", "on"):
                    _shortcut(mode == "on")
                    torch._dynamo.reset()
                    sc = step_fn(torch.compile(ours), graph, x, grad)
                    for _ in range(5):
                        sc()
                    row.setdefault(f"compiled_{mode}_host_ms", []).append(host_ms(sc, n_steps, collect=True))
                    row.setdefault(f"compiled_{mode}_event_ms", []).append(event_ms(sc, 30))
                torch._dynamo.reset()
                scp = step_fn(torch.compile(pyg), g.edge_index, x, grad)
                for _ in range(5):
                    scp()
                row["compiled_pyg_host_ms"] = [host_ms(scp, n_steps, collect=True)]
                row["compiled_pyg_event_ms"] = [event_ms(scp, 30)]
                torch._dynamo.reset()
            _shortcut(True)
            if preset == "cora":
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(300):
                    so()
                torch.cuda.synchronize()
                prof.disable()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("cumtime").print_stats(45)
                row["cprofile_cumtime"] = text.getvalue()
            out["rows"].append(row)
            print({k: round(statistics.median(v), 3) if isinstance(v, list) else v for k, v in row.items()
                   if not k.startswith("cprofile")}, flush=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="cached_launch.json")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"schema": "cudnn-gnn/cached_launch/1", "environment": environment(torch.device("cuda")),
                           "launch": launch_costs(), "rows": []}
    for k, v in out["launch"].items():
        print(f"{k:32s} {v:8.2f}", flush=True)
    steps(out)
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
