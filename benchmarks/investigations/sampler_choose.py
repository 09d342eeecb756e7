"""Does drawing all of Floyd's numbers at once (``7021a2a``) make the device sampler's batches faster to make?

``DeviceNeighborLoader`` draws each over-full node's ``fanout`` distinct in-edges with Floyd's algorithm. Until
``7021a2a`` every draw step made its own random tensor, remainder and bound (about 7 launching ops a step, 25 steps
a batch of fan-out 10,10,5); since, one random tensor and one remainder serve all steps and a step is a comparison,
an ``any`` and a ``where``. This times the sampler alone (inline, on the current stream, a synchronise around each
round) with the current ``_choose`` and with the earlier one, written out below, in alternating rounds on the same
loader and graph: a memory-mapped folder of ``synthetic_ogbn_mmap`` (``--root``), or one drawn on the device.

    python benchmarks/investigations/sampler_choose.py --root ~/.cache/cudnn_gnn/synthetic/ogbn-products-s1-seed0-float32-cuda
    python benchmarks/investigations/sampler_choose.py --dataset ogbn-products --scale 1 --out sampler_choose.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator

import torch
from torch import Tensor

import cudnn_gnn.apps.sampler as sampler
from cudnn_gnn.datasets.synthetic import load_mapped, synthetic_ogbn_mmap


def choose_per_step(deg: Tensor, fanout: int, generator: torch.Generator) -> Tensor:
    """``_choose`` as it was before ``7021a2a``: a random tensor, a remainder and a bound at every step."""
    n = deg.numel()
    m = deg.clamp(min=fanout)
    chosen = torch.empty(n, fanout, dtype=torch.int64, device=deg.device)
    for j in range(fanout):
        top = m - (fanout - j)
        t = torch.randint(0, 1 << 62, (n,), generator=generator, device=deg.device) % (top + 1)
        if j:
            t = torch.where((chosen[:, :j] == t[:, None]).any(1), top, t)
        chosen[:, j] = t
    return chosen.sort(1).values


def _cycle(loader: sampler.DeviceNeighborLoader) -> Iterator[object]:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=None, help="a synthetic_ogbn_mmap folder (default: draw one)")
    ap.add_argument("--dataset", default="ogbn-products")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--fanout", default="10,10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=60, help="batches a round (after 5 unmeasured)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        g = (load_mapped(args.root) if args.root else
             synthetic_ogbn_mmap(args.dataset, tmp, scale=args.scale, device=dev if dev.type == "cuda" else "cpu"))
        loader = sampler.DeviceNeighborLoader(g.colptr, g.row, node_attrs={"x": g.x, "y": g.y},
                                              input_nodes=g.train_idx, fanout=[int(f) for f in args.fanout.split(",")],
                                              batch_size=args.batch_size, shuffle=True, device=dev, seed=0)
        current, rows = sampler._choose, []
        try:
            for rnd in range(args.rounds):
                for name, fn in (("at_once", current), ("per_step", choose_per_step)):
                    sampler._choose = fn
                    it = _cycle(loader)
                    for _ in range(5):
                        next(it)
                    if dev.type == "cuda":
                        torch.cuda.synchronize(dev)
                    t0 = time.perf_counter()
                    for _ in range(args.batches):
                        next(it)
                    if dev.type == "cuda":
                        torch.cuda.synchronize(dev)
                    ms = (time.perf_counter() - t0) / args.batches * 1e3
                    rows.append({"round": rnd, "choose": name, "ms_per_batch": ms})
                    print(f"round {rnd} {name}: {ms:.2f} ms a batch", flush=True)
        finally:
            sampler._choose = current
    record = {"args": vars(args), "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    main()
