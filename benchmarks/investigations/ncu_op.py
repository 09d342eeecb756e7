"""Run the Triton GAT / GATv2 op on arxiv's shape (8 heads x 32) for Nsight Compute to profile one kernel.

Question: why does a kernel stay far from its gather-bound floor (``profile_layers.py`` prints each pass's share)?
``profile_layers.py`` gives each kernel's time; what holds a kernel back (occupancy, registers, warp stall
reasons, bytes moved against bytes needed, L2 hit rate) takes Nsight Compute, which profiles kernel launches of a
process it starts. This script is that process: a few steps of ``cudnn_gnn.gat`` (or ``gatv2``) forward+backward on
the same graph as ``triton_tuning.py``, with the kernels' defaults, nothing else on the GPU. Example (on a CUDA
machine with ``ncu``)::

    ncu --kernel-name regex:_bwd_gat_src_kernel --launch-skip 2 --launch-count 1 --set full \\
        --export gat_src python benchmarks/investigations/ncu_op.py --op gat --dtype fp32 --steps 3

Without ``ncu`` it runs the steps and prints their median time (a check that it runs).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import time_fn  # noqa: E402
from _graphs import make_graph  # noqa: E402
from bench_layers import PRESETS  # noqa: E402

import cudnn_gnn  # noqa: E402

ARXIV = PRESETS["arxiv"].graph
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="gat", choices=("gat", "gatv2"))
    ap.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    ap.add_argument("--steps", type=int, default=3, help="forward+backward steps (ncu picks its launch among them)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--channels", type=int, default=32)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("ncu_op.py needs a CUDA GPU")
    device = torch.device("cuda")
    g = make_graph(ARXIV, seed=0, device=device)
    csc = cudnn_gnn.CscGraph.from_edge_index(g.edge_index, num_nodes=ARXIV.num_nodes)
    h, c, v2 = args.heads, args.channels, args.op == "gatv2"
    dtype = DTYPES[args.dtype]
    x = torch.randn(ARXIV.num_nodes, h * c, device=device, dtype=dtype, requires_grad=True)
    att = torch.randn((1 if v2 else 2) * h * c, device=device, dtype=dtype) * 0.1
    fn = cudnn_gnn.gatv2 if v2 else cudnn_gnn.gat

    def step() -> None:
        fn(csc, x, att, heads=h, backend="triton").sum().backward()

    rec = time_fn(step, device=device, warmup=1, repeats=max(1, args.steps - 1))
    print(f"{args.op} {args.dtype} {h} x {c} on arxiv's shape: fwd+bwd {rec['median_ms']:.3f} ms (median)")
    return float(rec["median_ms"])


if __name__ == "__main__":
    main()
