"""How fast is GAT's node-score fold (the scores' gradients into ``d_x`` and the head vectors') by the Triton kernel
(``cudnn_gnn.backends.triton._fold_node_scores``, ``launch_node_scores_backward``) and by the GEMMs
(``_fold_node_scores_gemm``), at the shapes our GAT steps run?

For each case (homogeneous arxiv 8 x 32 in fp32 and bf16, sampled-shape bipartite blocks 4 x 128 bf16, Cora 8 x 8
fp32) it times one call of each, CUDA events around the call (host time included, as a step sees it), and the
kernel at several ``SCORE_BWD_PROGRAMS``; it checks the two agree (relative norm of the difference). Needs a CUDA GPU
with Triton; no cuDNN.

Usage (from the repository root)::

    python benchmarks/investigations/node_score_fold.py [--repeats 50] [--out node_score_fold.json]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, write_json  # noqa: E402

CASES = [  # (source rows, destination rows or None for homogeneous, heads, head width, dtype)
    (169_343, None, 8, 32, "fp32"), (169_343, None, 8, 32, "bf16"),
    (600_000, 120_000, 4, 128, "bf16"), (120_000, 12_000, 4, 128, "bf16"), (2_708, None, 8, 8, "fp32"),
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def median_us(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--programs", default="1024,4096,16384", help="SCORE_BWD_PROGRAMS values to time the kernel at")
    ap.add_argument("--out", default="node_score_fold.json")
    args = ap.parse_args(argv)
    from cudnn_gnn import CscGraph
    from cudnn_gnn.backends import _triton_kernels as kernels
    from cudnn_gnn.backends import triton as tb

    dev = torch.device("cuda")
    default = kernels.SCORE_BWD_PROGRAMS
    rows = []
    for ns, nd, heads, c, dt in CASES:
        d, dtype = heads * c, DTYPES[dt]
        x = torch.randn(ns, d, device=dev).to(dtype)
        xd = None if nd is None else torch.randn(nd, d, device=dev).to(dtype)
        w = torch.randn(2 * d, device=dev)
        gs = torch.randn(ns, heads, device=dev)
        gd = torch.randn(ns if nd is None else nd, heads, device=dev)
        graph = CscGraph.from_edge_index(torch.empty(2, 0, dtype=torch.long, device=dev), size=(ns, nd or ns))
        call = tb.build_call(graph, x, x if xd is None else xd, w, None, None, v2=False, heads=heads, concat=True,
                             activation_name="leaky_relu", activation_alpha=0.2, return_attention=False,
                             needs_grad=True)
        base = torch.randn(ns, d, device=dev).to(dtype)
        got = {name: fold(call, base.clone(), gs, gd)
               for name, fold in (("kernel", tb._fold_node_scores), ("gemm", tb._fold_node_scores_gemm))}
        diff = [float((a.double() - b.double()).norm() / b.double().norm())
                for a, b in zip(got["kernel"], got["gemm"], strict=True) if b.numel()]
        dx = base.clone()
        gemm = functools.partial(tb._fold_node_scores_gemm, call, dx, gs, gd)
        kernel = functools.partial(tb._fold_node_scores, call, dx, gs, gd)
        row = dict(num_src=ns, num_dst=nd, heads=heads, c=c, dtype=dt, rel_diff_kernel_gemm=diff,
                   gemm_us=median_us(gemm, args.repeats))
        for programs in (int(p) for p in args.programs.split(",")):
            kernels.SCORE_BWD_PROGRAMS = programs
            row[f"kernel_us_{programs}"] = median_us(kernel, args.repeats)
        kernels.SCORE_BWD_PROGRAMS = default
        print(row, flush=True)
        rows.append(row)
    write_json(args.out, {"schema": "cudnn-gnn/node_score_fold/1", "environment": environment(dev), "rows": rows})


if __name__ == "__main__":
    main()
