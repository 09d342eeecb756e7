"""GAT's node scores on their Triton kernels (``_SrcDstScores``) against the GEMM form (``_SrcDstScoresGemm``), in
one process: the layer's forward+backward step time on ``bench_layers.py``'s presets, the two settings of
``cudnn_gnn.backends.triton.NODE_SCORE_KERNELS`` alternated over ``--rounds`` rounds (median of each round's median),
and per setting, from ``torch.profiler``: the GPU kernel time of a step, and that of the kernels that differ
(the score kernels, the GEMMs, casts and copies).

Usage (from the repository root, on a CUDA machine)::

    python benchmarks/investigations/node_scores_ab.py [--presets arxiv] [--dtypes fp32,bf16] [--rounds 5] \\
        [--out node_scores_ab.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_layers as bl  # noqa: E402
from _bench_common import environment, kernel_times, time_fn, write_json  # noqa: E402


def kernel_split(fn: Any, pre: Any, device: torch.device, steps: int = 5) -> dict[str, float]:
    """Per step: total GPU kernel us, and us by kernel (name cut to 70 characters), top 12."""
    def run() -> None:
        for _ in range(steps):
            if pre is not None:
                pre()
            fn()

    per, _ = kernel_times(run, steps, device, name_width=70)
    top = dict(sorted(per.items(), key=lambda kv: -kv[1])[:12])
    return {"total_us": sum(per.values()), **top}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from cudnn_gnn.backends import triton as tb

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="arxiv")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="node_scores_ab.json")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    payload: dict[str, Any] = {"schema": "cudnn-gnn/node_scores_ab/1", "environment": environment(device),
                               "cases": []}
    for preset in bl.resolve_presets(args.presets.split(","), False):
        inp, _ = bl.build_inputs(preset, device, argparse.Namespace(seed=0, no_ogbn=False))
        model, graph_arg, _ = bl.build_model("layer_triton", "GAT", inp, 0)
        for dtype in args.dtypes.split(","):
            fn, pre = bl.make_step(model, graph_arg, inp, dtype, "fwd+bwd")
            medians: dict[str, list[float]] = {"kernels": [], "gemm": []}
            for _ in range(args.rounds):
                for name in medians:
                    tb.NODE_SCORE_KERNELS = name == "kernels"
                    medians[name].append(time_fn(fn, device=device, warmup=2, repeats=args.repeats,
                                                 pre=pre)["median_ms"])
            rec: dict[str, Any] = {"preset": preset.name, "dtype": dtype}
            for name, ms in medians.items():
                tb.NODE_SCORE_KERNELS = name == "kernels"
                rec[name] = {"step_ms": statistics.median(ms), "rounds_ms": ms, "kernels_us": kernel_split(fn, pre, device)}
            tb.NODE_SCORE_KERNELS = True
            rec["gemm_over_kernels"] = rec["gemm"]["step_ms"] / rec["kernels"]["step_ms"]
            payload["cases"].append(rec)
            print(f"{preset.name} GAT {dtype} fwd+bwd: score kernels {rec['kernels']['step_ms']:.3f} ms, GEMMs "
                  f"{rec['gemm']['step_ms']:.3f} ms (GPU kernels {rec['kernels']['kernels_us']['total_us']:.0f} / "
                  f"{rec['gemm']['kernels_us']['total_us']:.0f} us)", flush=True)
            for name in ("kernels", "gemm"):
                print(f"  {name}: " + "; ".join(f"{k} {v:.0f}" for k, v in list(rec[name]["kernels_us"].items())[1:]),
                      flush=True)
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
