"""Pick the op defaults from measurements: gradient precision, determinism and index dtype (run on a GPU).

The arxiv shape (169,343 nodes, ~2.3M edges, Linear(128->256) + 8-head GAT/GATv2), forward+backward, median of
CUDA-event timings after warm-up, for each combination of dtype, ``grad_precision``, ``deterministic`` and index
dtype. JSON records on stdout and in ``--out``.

    python benchmarks/investigations/bench_policies.py --out policies.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import cudnn_gnn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, for _bench_common
from _bench_common import time_fn, write_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=2_315_598)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n, e = args.nodes, args.edges
    ei = torch.randint(0, n, (2, e), device=dev)
    g32 = cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n)
    g64 = g32.to_index_dtype(torch.int64)
    x = torch.randn(n, 128, device=dev)
    lin = torch.nn.Linear(128, 256).to(dev)
    records = []
    for op_name, op, nw in (("gat", cudnn_gnn.gat, 512), ("gatv2", cudnn_gnn.gatv2, 256)):
        w = torch.nn.Parameter(torch.randn(nw, device=dev) * 0.1)
        for dtype in ("fp32", "bf16", "fp16"):
            for gp in ("input", "fp32"):
                if dtype == "fp32" and gp == "fp32":
                    continue
                for det in (False, True):
                    for graph, idx in ((g32, "int32"), (g64, "int64")):
                        if idx == "int64" and (det or gp == "input"):
                            continue

                        amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)

                        def step(op=op, graph=graph, w=w, det=det, gp=gp, amp=amp):
                            with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
                                out = op(graph, lin(x), w, heads=8, deterministic=det, grad_precision=gp, backend="cudnn")
                            out.float().sum().backward()

                        torch.cuda.reset_peak_memory_stats()
                        ms = time_fn(step, device=dev, warmup=3, repeats=10)["median_ms"]
                        rec = dict(op=op_name, dtype=dtype, grad_precision=gp, deterministic=det, index=idx,
                                   fwd_bwd_ms=round(ms, 3), peak_gb=round(torch.cuda.max_memory_allocated() / 2**30, 2))
                        print(json.dumps(rec), flush=True)
                        records.append(rec)
    if args.out:
        write_json(args.out, {"records": records})


if __name__ == "__main__":
    main()
