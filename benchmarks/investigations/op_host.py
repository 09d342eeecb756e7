"""What the Triton op's own wiring costs the host: forward + backward of one ``triton_gat`` call with every kernel
launcher stubbed out, so what is timed is the Python and autograd path around the kernels (the call record, the
autograd Function, the ops or their implementations, the buffers), not the GPU.

A 100-node graph of 400 edges, 8 heads x 8 (GAT) or x 8 (GATv2), fp32, one input that requires grad; each of
``--rounds`` rounds times ``--steps`` steps back to back; the median and the best round are reported. On a CPU the
kernels are Triton's interpreter's, never entered here; on a GPU the stubs skip the launches the same way. Run it at
two commits to compare two wirings (the numbers depend on the machine's CPU: compare within one machine).

Usage (from the repository root)::

    python benchmarks/investigations/op_host.py [--device cpu] [--steps 200] [--rounds 7] [--out op_host.json]
    PYTHONPATH=/path/to/another/checkout python benchmarks/investigations/op_host.py   # that checkout's wiring
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, write_json  # noqa: E402


def stub_launchers() -> None:
    """Replace every launcher of the kernel package by one that launches nothing (the node-score launchers return
    tensors of their outputs' shapes)."""
    from cudnn_gnn.backends.triton import _runtime

    k = _runtime.kernels()
    for name in ("launch_forward", "launch_gat_backward", "launch_backward_dst", "launch_backward_src",
                 "launch_backward_edge"):
        setattr(k, name, lambda *a, **kw: None)
    k.launch_node_scores = lambda x, xd, a, h, out=None, launch=(), i64=True: out
    k.launch_node_scores_backward = lambda x, xd, a, h, gs, gd, dx, dxd, launch=(), i64=True: torch.zeros(
        a.shape[0], device=a.device)


def measure(v2: bool, device: torch.device, steps: int, rounds: int) -> dict[str, Any]:
    import cudnn_gnn
    from cudnn_gnn.backends import triton as tb
    from cudnn_gnn.spec import AttentionSpec

    gen = torch.Generator().manual_seed(0)
    graph = cudnn_gnn.CscGraph.from_edge_index(torch.randint(0, 100, (2, 400), generator=gen).to(device),
                                               num_nodes=100)
    x = torch.randn(100, 64, device=device, requires_grad=True)
    w = torch.randn(64 if v2 else 128, device=device, requires_grad=True)
    grad = torch.zeros(100, 64, device=device)

    def step() -> None:
        spec = AttentionSpec(v2=v2, graph=graph, x_src=x, x_dst=x, attn_weights=w, heads=8, edge_attr=None,
                             lin_edge_weight=None, concat=True, activation="leaky_relu", activation_alpha=0.2,
                             dropout_mask=None, dropout=0.0, dropout_seed=None, return_attention=False,
                             deterministic=False, grad_precision="auto", backend="triton", max_degree=None)
        out, _ = tb.triton_gat(spec)
        out.backward(grad)

    for _ in range(50):
        step()
    per = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        per.append((time.perf_counter() - t) / steps * 1e6)
    return {"op": "gatv2" if v2 else "gat", "median_us": statistics.median(per), "best_us": min(per), "rounds_us": per}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None, help="write the records as JSON here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        ap.error(f"--steps and --rounds must be at least 1, got {args.steps} and {args.rounds}")
    device = torch.device(args.device)
    if device.type != "cuda":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the backend runs on CPU tensors only under it
    stub_launchers()
    rows = [measure(v2, device, args.steps, args.rounds) for v2 in (False, True)]
    for r in rows:
        print(f"{r['op']:5s} fwd+bwd host {r['median_us']:.1f} us a call (best round {r['best_us']:.1f})", flush=True)
    result = {"environment": environment(device), "rows": rows}
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
