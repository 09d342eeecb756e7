"""Cora's two GAT layers (8 x 8 float32, 1 x 7), training with dropout drawn in-kernel, on a graph with one long row."""
import torch

import cudnn_gnn


def _graph(n=120, long=90):
    g = torch.Generator().manual_seed(0)
    others = torch.arange(1, n).repeat_interleave(2)
    src = torch.cat([torch.randint(1, n, (long,), generator=g), torch.zeros(long, dtype=torch.long),
                     torch.randint(0, n, (others.numel(),), generator=g), torch.arange(n)])
    dst = torch.cat([torch.zeros(long, dtype=torch.long), torch.randint(1, n, (long,), generator=g), others,
                     torch.arange(n)])
    return cudnn_gnn.CscGraph.from_edge_index(torch.stack([src, dst]), num_nodes=n), n


def step(v2, dtype):
    graph, n = _graph()
    torch.manual_seed(0)
    conv = (cudnn_gnn.GATv2Conv if v2 else cudnn_gnn.GATConv)(16, 8, heads=8, dropout=0.6, backend="triton",
                                                                add_self_loops=False).to(dtype)
    out = (cudnn_gnn.GATv2Conv if v2 else cudnn_gnn.GATConv)(64, 7, heads=1, concat=False, dropout=0.6,
                                                               backend="triton", add_self_loops=False).to(dtype)
    x = torch.randn(n, 16, dtype=dtype, requires_grad=True)
    out(conv(x, graph), graph).float().sum().backward()


WORKLOADS = {f"{'gatv2' if v2 else 'gat'}/{d}": (lambda v2=v2, d=d: step(v2, getattr(torch, d)))
             for v2 in (False, True) for d in ("float32", "bfloat16")}
