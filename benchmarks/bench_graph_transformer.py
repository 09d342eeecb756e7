"""GPS layer on packed graphs (cudnn_gnn, cuDNN SDPA) vs PyG's GPSConv (padded nn.MultiheadAttention).

Both layers share one state_dict. For each shape preset, dtype and variant it times forward and forward+backward
(CUDA events after warm-up, median of ``--reps``) and the peak memory above the inputs, baseline and ours in the
same run, and reports ratios (PyG / ours: > 1 means we are faster or leaner).

Presets (``--preset``, default all):
  ragged     128 graphs of 10-500 nodes (uniform), C=128, 4 heads
  molecules  512 graphs of 15-35 nodes, C=128, 4 heads

Variants: ``transformer`` (conv=None: global attention + MLP + norms) and ``gps_gat`` (PyG GATConv as the local
conv in both, so the difference is the global branch). PyG's attention runs under
``sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH])``: torch's cuDNN attention backend is kept out of this
process because it breaks later cuDNN calls on the project's H200 (``shared/device/README.md``).

    python benchmarks/bench_graph_transformer.py --out out/gt.json        # GPU, ~1-2 min on an H200
    python benchmarks/bench_graph_transformer.py --quick --out /tmp/q.json  # CPU smoke, tiny, no timing claims
"""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import os

import torch
import torch_geometric.nn as pyg_nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import cudnn_gnn
from cudnn_gnn.backends import _cudnn_sdpa
from cudnn_gnn.layers.gps_conv import GPSConv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import peak_memory, time_fn, write_json  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    "ragged": {"graphs": 128, "min_nodes": 10, "max_nodes": 500, "channels": 128, "heads": 4, "edges_per_node": 4},
    "molecules": {"graphs": 512, "min_nodes": 15, "max_nodes": 35, "channels": 128, "heads": 4, "edges_per_node": 2},
    "quick": {"graphs": 6, "min_nodes": 1, "max_nodes": 20, "channels": 16, "heads": 2, "edges_per_node": 2},
}
VARIANTS = ("transformer", "gps_gat")
SAFE_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def make_batch(p: dict[str, Any], device: torch.device, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(p["min_nodes"], p["max_nodes"] + 1, (p["graphs"],), generator=g)
    n = int(sizes.sum())
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    batch = torch.repeat_interleave(torch.arange(p["graphs"]), sizes)
    src = torch.randint(0, n, (p["edges_per_node"] * n,), generator=g)
    dst = ptr[batch[src]] + torch.randint(0, 1 << 30, src.shape, generator=g) % sizes[batch[src]]
    return {
        "x": torch.randn(n, p["channels"], generator=g).to(device),
        "edge_index": torch.stack([src, dst]).to(device),
        "batch": batch.to(device),
        "ptr": ptr.to(device),
        "max_num_nodes": int(sizes.max()),
        "num_nodes": n,
        "padded_nodes": p["graphs"] * int(sizes.max()),
    }


def make_layers(p: dict[str, Any], variant: str, device: torch.device, dtype: torch.dtype):
    c, h = p["channels"], p["heads"]
    torch.manual_seed(0)
    conv = (lambda: pyg_nn.GATConv(c, c // h, heads=h)) if variant == "gps_gat" else (lambda: None)
    pyg = pyg_nn.GPSConv(c, conv(), heads=h).to(device, dtype)
    ours = GPSConv(c, conv(), heads=h).to(device, dtype)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return pyg, ours


def time_it(fn: Callable[[], Any], device: torch.device, warmup: int, reps: int) -> tuple[float, float | None]:
    """(median ms, peak MiB of one call above the memory allocated before it; None on CPU)."""
    median = time_fn(fn, device=device, warmup=warmup, repeats=reps)["median_ms"]
    peak = peak_memory(fn, device=device)
    return median, None if peak is None else peak / 2**20


def run_case(preset: str, variant: str, dtype: torch.dtype, device: torch.device, warmup: int, reps: int) -> dict[str, Any]:
    p = PRESETS[preset]
    data = make_batch(p, device)
    x = data["x"].to(dtype)
    pyg, ours = make_layers(p, variant, device, dtype)
    pyg.train()
    ours.train()  # dropout 0: train mode only switches BatchNorm to batch statistics, alike in both

    def safe() -> Any:  # a fresh context each call: sdpa_kernel's context manager is single-use
        return sdpa_kernel(SAFE_SDPA) if device.type == "cuda" else nullcontext()

    def pyg_call(xi: torch.Tensor) -> torch.Tensor:
        with safe():
            return pyg(xi, data["edge_index"], data["batch"])

    def ours_call(xi: torch.Tensor) -> torch.Tensor:
        return ours(xi, data["edge_index"], data["batch"], ptr=data["ptr"], max_num_nodes=data["max_num_nodes"])

    def fwd(call: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], Any]:
        return lambda: torch.no_grad()(call)(x)

    def fwd_bwd(call: Callable[[torch.Tensor], torch.Tensor], module: torch.nn.Module) -> Callable[[], Any]:
        def step() -> None:
            module.zero_grad(set_to_none=True)
            call(x.detach().requires_grad_()).float().square().mean().backward()

        return step

    with torch.no_grad():
        want, got = pyg_call(x).float(), ours_call(x).float()
    rel_err = float((got - want).norm() / want.norm().clamp_min(1e-12))
    row: dict[str, Any] = {
        "preset": preset,
        "variant": variant,
        "dtype": str(dtype).replace("torch.", ""),
        "num_graphs": p["graphs"],
        "num_nodes": data["num_nodes"],
        "padded_nodes": data["padded_nodes"],
        "max_num_nodes": data["max_num_nodes"],
        "channels": p["channels"],
        "heads": p["heads"],
        "rel_err_vs_pyg": rel_err,
    }
    for label, fn_pyg, fn_ours in (
        ("fwd", fwd(pyg_call), fwd(ours_call)),
        ("fwd_bwd", fwd_bwd(pyg_call, pyg), fwd_bwd(ours_call, ours)),
    ):
        t_p, m_p = time_it(fn_pyg, device, warmup, reps)
        t_o, m_o = time_it(fn_ours, device, warmup, reps)
        row[f"{label}_ms_pyg"], row[f"{label}_ms_ours"] = t_p, t_o
        row[f"{label}_mib_pyg"], row[f"{label}_mib_ours"] = m_p, m_o
        row[f"{label}_speedup"] = t_p / t_o
        row[f"{label}_mem_ratio"] = m_p / m_o if m_p is not None and m_o else None
    return row


def _mib(v: float | None) -> str:
    return "       -" if v is None else f"{v:8.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--preset", choices=["ragged", "molecules"], action="append", help="default: both")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], action="append", help="default: both")
    ap.add_argument("--variant", choices=VARIANTS, action="append", help="default: both")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="CPU smoke run on a tiny batch; no timing claims")
    args = ap.parse_args(argv)

    if args.quick:
        device, presets, dtypes, warmup, reps = torch.device("cpu"), ["quick"], [torch.float32], 1, 1
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU: use --quick for a CPU smoke run", file=sys.stderr)
            return 2
        device = torch.device("cuda")
        presets = args.preset or ["ragged", "molecules"]
        dtypes = [{"bf16": torch.bfloat16, "fp32": torch.float32}[d] for d in (args.dtype or ["bf16", "fp32"])]
        warmup, reps = args.warmup, args.reps
    variants = args.variant or list(VARIANTS)
    info = cudnn_gnn.backend_info()
    attention_backend = "reference" if device.type != "cuda" else ("cudnn" if info.sdpa_available else "flash")
    rows = []
    t0 = time.perf_counter()
    for preset in presets:
        for dtype in dtypes:
            for variant in variants:
                row = run_case(preset, variant, dtype, device, warmup, reps)
                rows.append(row)
                print(
                    f"{preset:9s} {row['dtype']:8s} {variant:11s} N={row['num_nodes']:6d} "
                    f"fwd {row['fwd_ms_pyg']:8.2f} / {row['fwd_ms_ours']:8.2f} ms (x{row['fwd_speedup']:.2f})  "
                    f"fwd+bwd {row['fwd_bwd_ms_pyg']:8.2f} / {row['fwd_bwd_ms_ours']:8.2f} ms (x{row['fwd_bwd_speedup']:.2f})  "
                    f"peak {_mib(row['fwd_bwd_mib_pyg'])} / {_mib(row['fwd_bwd_mib_ours'])} MiB  err {row['rel_err_vs_pyg']:.1e}",
                    flush=True,
                )
    result = {
        "what": "PyG GPSConv (padded nn.MultiheadAttention) vs cudnn_gnn GPSConv (packed graph_attention); ratios are PyG / ours",
        "quick": args.quick,
        "timing_claims": not args.quick,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "attention_backend": attention_backend,
        "backend_info": {k: (list(v) if isinstance(v, tuple) else v) for k, v in info.as_dict().items()},
        "sdpa_plan_ledger": _cudnn_sdpa.plan_cache_info()._asdict(),
        "fp32_note": "on the cuDNN backend fp32 inputs run the attention kernel in bf16 (cast inside)",
        "seconds": time.perf_counter() - t0,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
