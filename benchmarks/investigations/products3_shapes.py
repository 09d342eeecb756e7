"""The 3-layer products training step (``bench_layers.py``'s ``products3``) under three launch-shape tables, in one
process, alternating: which of the 256-wide-tile shapes swept on arxiv hold on products.

Variants (each clears :func:`~cudnn_gnn.backends._triton_kernels.launch_shape`'s cache):

* ``head``: the tables as they stand (:data:`TUNED_SHAPES`, :data:`FULL_TILE_SHAPES`);
* ``two_edge_everywhere``: GAT's float32 one-gather source pass on two-edge, two-warp blocks on every tile at most
  256 wide (the tables of ``6748c5e``), which includes products' last layer (4 heads x 47, padded to 4 x 64, whose
  output gradient is float32 because its heads are averaged);
* ``cf3caab``: the tables before the two-edge shapes (GATv2's and the 16-bit source pass's entries too, and no
  delta-pass entry).

Usage (from the repository root, on a CUDA machine with Triton)::

    python benchmarks/investigations/products3_shapes.py [--rounds 2] [--repeats 8] [--out products3_shapes.json]
"""

from __future__ import annotations

import argparse
import os
import sys
from types import MappingProxyType

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_layers as bl  # noqa: E402
from _bench_common import environment, time_fn, write_json  # noqa: E402

from cudnn_gnn.backends import _triton_kernels as tk  # noqa: E402


def variants() -> dict[str, tuple[dict, dict]]:
    """name -> (TUNED_SHAPES, FULL_TILE_SHAPES)."""
    head = dict(tk.TUNED_SHAPES), dict(tk.FULL_TILE_SHAPES)
    everywhere = {**head[0], **head[1]}, {}
    old = dict(head[0])
    old.update({("fwd", True, 4): (8, 1), ("fwd", True, 2): (2, 1), ("dst", True, 2): (2, 2), ("src", True, 2): (2, 2),
                ("gat_src", False, 4): (16, 1), ("gat_src", False, 2): (2, 2)})
    old.pop(("gat_delta", False, 4), None)
    return {"head": head, "two_edge_everywhere": everywhere, "cf3caab": (old, {})}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--out", default="products3_shapes.json")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    preset = bl.resolve_presets(["products3"], False)[0]
    inp, _ = bl.build_inputs(preset, device, argparse.Namespace(seed=0, no_ogbn=True))
    model, graph, _ = bl.build_model("layer_triton", "GAT", inp, 0)
    fn, pre = bl.make_step(model, graph, inp, "bf16", "fwd+bwd")
    tables = variants()
    saved = tk.TUNED_SHAPES, tk.FULL_TILE_SHAPES
    medians: dict[str, list[float]] = {}
    try:
        for r in range(args.rounds):
            for name, (tuned, full) in tables.items():
                tk.TUNED_SHAPES, tk.FULL_TILE_SHAPES = MappingProxyType(tuned), MappingProxyType(full)
                tk.launch_shape.cache_clear()
                ms = time_fn(fn, device=device, warmup=2, repeats=args.repeats, pre=pre)["median_ms"]
                medians.setdefault(name, []).append(ms)
                print(f"round {r} {name:20s} {ms:8.2f} ms", flush=True)
    finally:
        tk.TUNED_SHAPES, tk.FULL_TILE_SHAPES = saved
        tk.launch_shape.cache_clear()
    result = {"schema": "cudnn-gnn/products3_shapes/1", "environment": environment(device), "step_ms": medians}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
