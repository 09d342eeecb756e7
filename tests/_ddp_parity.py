"""Run by tests/test_distributed.py in a subprocess: K training steps of a small GAT (our GATConv, reference
backend, CPU), once in this process and once as 2 gloo ranks spawned by ``launch``; every run saves its final
parameters to ``<out>/<name>.pt``. A script (not test code) so that the spawned ranks can unpickle the worker.

    python tests/_ddp_parity.py OUT_DIR [STEPS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cudnn_gnn.apps.distributed import DistContext, all_reduce_counts, launch, shard_seeds, wrap_ddp

N, F_IN, CLASSES, SEEDS = 60, 12, 4, 40  # SEEDS even: both runs see the same global batch


class TinyGAT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from cudnn_gnn import GATConv

        self.conv1 = GATConv(F_IN, 8, heads=2, backend="reference", residual=True)
        self.conv2 = GATConv(16, CLASSES, heads=2, concat=False, backend="reference", residual=True)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv2(F.elu(self.conv1(x, edge_index)), edge_index)


def graph() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    edge_index = torch.randint(0, N, (2, 240), generator=gen)
    x = torch.randn(N, F_IN, generator=gen)
    y = torch.randint(0, CLASSES, (N,), generator=gen)
    return x, edge_index, y


def worker(ctx: DistContext, out: str, name: str, steps: int) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, edge_index, y = graph()
    model = TinyGAT()
    ddp = wrap_ddp(model, ctx)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seeds = torch.arange(SEEDS)
    for step in range(steps):
        local = shard_seeds(seeds, epoch=step, seed=1, rank=ctx.rank, world_size=ctx.world_size)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x, edge_index)[local], y[local])  # mean over this rank's part
        loss.backward()
        unused = [n for n, p in model.named_parameters() if p.grad is None]
        if unused:
            raise RuntimeError(f"parameters without gradient: {unused}")
        opt.step()
    with torch.no_grad():  # sharded evaluation: each rank counts its part, counts summed over ranks
        part = torch.arange(N).tensor_split(ctx.world_size)[ctx.rank]
        correct = int((model(x, edge_index)[part].argmax(-1) == y[part]).sum())
    counts = all_reduce_counts([correct, part.numel()], ctx)
    torch.save({"state": model.state_dict(), "counts": counts, "world_size": ctx.world_size},
               Path(out) / f"{name}-rank{ctx.rank}.pt")


if __name__ == "__main__":
    out_dir, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    launch(worker, nprocs=1, args=(out_dir, "single", steps), device="cpu")
    launch(worker, nprocs=2, args=(out_dir, "ddp", steps), device="cpu")
