"""What torch's ``register_autograd`` wrapper costs per call of the Triton forward op, and what the op's argument
count does to a small graph's step.

On every forward of an op with a ``setup_context``, torch's wrapper runs ``torch._library.utils.fill_defaults``,
which reads ``schema.arguments`` twice per argument; torch rebuilds that list on each access, so the cost grows with
the square of the argument count. Prints and writes (JSON):

* ``fill_defaults`` per call on ``cudnn_gnn::triton_gat_fwd``'s schema, and on a schema with one argument per
  :class:`~cudnn_gnn.backends.triton.TritonCall` field (the unpacked layout the op had before ``c31984e``);
* the forward op alone on Cora's graph with its launches stubbed: without grad, with grad, and with its backward;
* host time of a Cora-sized ``GATConv(1433, 8, heads=8, backend="triton")`` fwd+bwd step (2,708 nodes, 10,556
  edges, a ``CscGraph``) with the Triton launches stubbed out (so on the CPU it times Python and torch, not the
  interpreter), and ``fill_defaults``'s share of it from cProfile.

Usage (from the repository root; CPU by default, where it sets ``TRITON_INTERPRET=1`` itself)::

    python benchmarks/investigations/op_schema_overhead.py [--warmup 20] [--steps 200] [--out op_schema.json]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402

CORA = GraphSpec(2_708, 10_556, exponent=0.5)
_PROBE: list[torch.library.Library] = []  # keeps the probe namespace's definitions alive


def fill_defaults_us(schema: Any, calls: int) -> float:
    """Microseconds per ``fill_defaults(schema, args, {})`` with every positional argument given."""
    from torch._library.utils import fill_defaults

    args = tuple(range(len(schema.arguments)))
    for _ in range(calls // 10):
        fill_defaults(schema, args, {})
    t0 = time.perf_counter()
    for _ in range(calls):
        fill_defaults(schema, args, {})
    return (time.perf_counter() - t0) / calls * 1e6


def one_arg_per_field_schema() -> Any:
    """A schema with one argument per ``TritonCall`` field plus ``return_attention``, defined (once) in a probe
    namespace: the forward op's layout before its tensors were packed into one list."""
    from cudnn_gnn.backends import triton as tb

    if not _PROBE:
        fields = ", ".join(f"{tb._SCHEMA_TYPES[t]} {name}" for name, t in tb._FIELD_TYPES.items())
        lib = torch.library.Library("cudnn_gnn_probe", "FRAGMENT")
        lib.define(f"unpacked_gat_fwd({fields}, bool return_attention) -> (Tensor, Tensor, Tensor)")
        _PROBE.append(lib)
    return torch.ops.cudnn_gnn_probe.unpacked_gat_fwd.default._schema


@contextlib.contextmanager
def stubbed_launches() -> Iterator[None]:
    """Every Triton kernel launch (``kernel[grid](...)`` of each ``*_kernel`` of the kernel module) replaced by a
    no-op, restored afterwards: the launchers still run their own torch ops (allocations, partial sums), as on a
    GPU; outputs stay uninitialised."""
    from cudnn_gnn.backends import triton as tb

    kernels = tb._kernels()

    class _NoLaunch:
        def __getitem__(self, grid: Any) -> Any:
            return lambda *args, **kwargs: None

    saved = {name: fn for name, fn in vars(kernels).items() if name.endswith("_kernel") and hasattr(fn, "__getitem__")}
    try:
        for name in saved:
            setattr(kernels, name, _NoLaunch())
        yield
    finally:
        for name, fn in saved.items():
            setattr(kernels, name, fn)


def op_boundary_us(device: torch.device, repeats: int = 300, rounds: int = 7) -> dict[str, float]:
    """Microseconds per call of the forward op alone on Cora's graph (GAT, 8 heads x 8, launches stubbed), median of
    ``rounds``: without grad (no autograd wrapper), with grad (the wrapper: ``fill_defaults``, and for list arguments
    torch's ``supports_tensorlist`` pytree flattening), and forward + ``autograd.grad``."""
    import cudnn_gnn
    from cudnn_gnn.backends import triton as tb

    g = make_graph(CORA, seed=0, device=device, prefer_ogbn=False)
    csc = cudnn_gnn.CscGraph.from_edge_index(g.edge_index, num_nodes=CORA.num_nodes)
    x = torch.randn(CORA.num_nodes, 64, device=device, requires_grad=True)
    w = torch.randn(128, device=device, requires_grad=True)
    call = tb.build_call(csc, x, x, w, None, None, v2=False, heads=8, concat=True, activation_name="leaky_relu",
                         activation_alpha=0.2, return_attention=False, needs_grad=True)
    pack = getattr(tb, "pack", tuple)  # tuple: the op before c31984e took the TritonCall's fields one by one
    args = (*pack(call), False)
    leaves = [x, w]  # GAT's op takes the features and head vectors (its node scores are computed inside it)
    op = torch.ops.cudnn_gnn.triton_gat_fwd

    def fwd_bwd() -> None:
        out = op(*args)[0]
        torch.autograd.grad(out, leaves, torch.ones_like(out))

    def per_call(fn: Any) -> float:
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(repeats):
                fn()
            times.append((time.perf_counter() - t0) / repeats * 1e6)
        return statistics.median(times)

    with stubbed_launches():
        for _ in range(repeats // 3):
            fwd_bwd()
        with torch.no_grad():
            no_grad = per_call(lambda: op(*args))
        return {"fwd_no_grad_us": no_grad, "fwd_grad_us": per_call(lambda: op(*args)), "fwd_bwd_us": per_call(fwd_bwd)}


def step_host_time(device: torch.device, warmup: int, steps: int, in_channels: int = 1433) -> dict[str, Any]:
    """Host ms of a fwd+bwd step (median and mean over ``steps``) of the Triton ``GATConv(in_channels, 8, heads=8)``
    on Cora's shape, launches stubbed; fill_defaults' share from cProfile over as many more steps."""
    import cudnn_gnn

    g = make_graph(CORA, seed=0, device=device, prefer_ogbn=False)
    csc = cudnn_gnn.CscGraph.from_edge_index(g.edge_index, num_nodes=CORA.num_nodes)
    x = torch.randn(CORA.num_nodes, in_channels, device=device)
    model = cudnn_gnn.GATConv(in_channels, 8, heads=8, backend="triton").to(device)

    def step() -> None:
        model(x, csc).sum().backward()

    with stubbed_launches():
        for _ in range(warmup):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            step()
        prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    fd = sum(v[2] for k, v in stats.items() if k[2] == "fill_defaults")  # tottime, s
    return {"num_nodes": CORA.num_nodes, "num_edges": g.num_edges, "warmup": warmup, "steps": steps,
            "in_channels": in_channels, "host_ms_per_step_median": statistics.median(times) * 1e3,
            "host_ms_per_step_mean": statistics.fmean(times) * 1e3,
            "fill_defaults_ms_per_step_cprofile": fd / steps * 1e3}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (Triton's interpreter, launches stubbed) or cuda")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--in-channels", type=int, nargs="+", default=[1433, 64],
                    help="GATConv input widths; on the CPU 1433 is mostly the projection's GEMM, 64 mostly host work")
    ap.add_argument("--calls", type=int, default=5000, help="fill_defaults calls timed per schema")
    ap.add_argument("--out", default="op_schema_overhead.json")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernel module is first imported (stubbed here anyway)
    from cudnn_gnn.backends import triton  # noqa: F401 - defines the ops

    op_schema = torch.ops.cudnn_gnn.triton_gat_fwd.default._schema
    unpacked = one_arg_per_field_schema()
    payload: dict[str, Any] = {"schema": "cudnn-gnn/op_schema_overhead/1", "environment": environment(device)}
    payload["fill_defaults"] = {
        "op": {"arguments": len(op_schema.arguments), "us_per_call": fill_defaults_us(op_schema, args.calls)},
        "one_arg_per_field": {"arguments": len(unpacked.arguments),
                              "us_per_call": fill_defaults_us(unpacked, args.calls)},
    }
    for name, row in payload["fill_defaults"].items():
        print(f"fill_defaults {name:17s} {row['arguments']:2d} arguments: {row['us_per_call']:7.1f} us/call",
              flush=True)
    b = payload["op_boundary"] = op_boundary_us(device)
    print(f"forward op alone: {b['fwd_no_grad_us']:.1f} us without grad, {b['fwd_grad_us']:.1f} us with grad, "
          f"{b['fwd_bwd_us']:.1f} us fwd+bwd", flush=True)
    payload["steps"] = []
    for in_channels in args.in_channels:
        step = step_host_time(device, args.warmup, args.steps, in_channels)
        payload["steps"].append(step)
        print(f"GATConv({in_channels}, 8, heads=8) fwd+bwd, {CORA.num_nodes} nodes / {step['num_edges']} edges, "
              f"launches stubbed: {step['host_ms_per_step_median']:.3f} ms/step host median "
              f"({step['host_ms_per_step_mean']:.3f} mean; {step['fill_defaults_ms_per_step_cprofile']:.3f} ms in "
              f"fill_defaults, cProfile)", flush=True)
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
