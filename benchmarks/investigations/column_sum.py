"""How fast is a column sum of a tall tensor (a bias's gradient over every node) on this GPU, by each strategy of
``cudnn_gnn._bias.COLUMN_SUM``?

Times ``cudnn_gnn._bias.column_sum`` (CUDA events, median) for ``"sum"`` (torch's ``x.sum(0)``), ``"split"`` and
``"mv"`` on ``[N, D]`` float32 and bfloat16 tensors of arxiv's and products' node counts, and the bytes read over
that time; a strategy is worth its place where it beats ``"sum"`` in the same run.

Usage (from the repository root, on a CUDA machine)::

    python benchmarks/investigations/column_sum.py [--rows 169343,2449029] [--cols 256] [--out column_sum.json]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _bench_common import environment, time_fn, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from cudnn_gnn import _bias

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="169343,2449029")
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--out", default="column_sum.json")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    rows: list[dict[str, Any]] = []
    saved = _bias.COLUMN_SUM
    try:
        for n in (int(r) for r in args.rows.split(",")):
            for dtype in (torch.float32, torch.bfloat16):
                x = torch.randn(n, args.cols, device=device).to(dtype)
                for strategy in ("sum", "split", "mv"):
                    _bias.COLUMN_SUM = strategy
                    t = time_fn(lambda x=x: _bias.column_sum(x), device=device, warmup=5, repeats=args.repeats)
                    gbs = x.numel() * x.element_size() / (t["median_ms"] * 1e-3) / 1e9
                    rows.append({"rows": n, "cols": args.cols, "dtype": str(dtype).removeprefix("torch."),
                                 "strategy": strategy, "median_us": t["median_ms"] * 1e3, "read_gb_s": gbs})
                    print(f"{n:>9} x {args.cols} {rows[-1]['dtype']:8s} {strategy:5s} {t['median_ms'] * 1e3:8.1f} us "
                          f"{gbs:7.0f} GB/s", flush=True)
    finally:
        _bias.COLUMN_SUM = saved
    payload = {"schema": "cudnn-gnn/column_sum/1", "environment": environment(device), "rows": rows}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
