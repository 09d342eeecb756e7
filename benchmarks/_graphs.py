"""Seeded synthetic graphs for the benchmarks: OGB-shaped through ``cudnn_gnn.datasets.synthetic_ogbn`` where it
imports, otherwise a simple power-law generator defined here.

Only the graph's shape matters for speed and memory (node count, edge count, degree skew, edge-feature width),
so feature values are plain seeded Gaussians made by the harness, the same tensors for every implementation.

The fallback generator (:func:`power_law_edge_index`) is a Chung-Lu style model: node of rank ``r`` (after a
seeded random relabelling) is drawn as an endpoint with probability proportional to ``(r + 1) ** -exponent``,
sampled by inverting the continuous CDF in closed form, so it is O(E) vectorised torch with no O(N) search per
edge; 124M edges take well under a second of GPU time. Symmetric graphs are ``E // 2`` drawn pairs followed by
their reverses (plus one extra drawn edge when ``E`` is odd), so the edge count is exact. Self-loops and
multi-edges are rare and kept: every implementation sees exactly the same edge list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["GraphSpec", "BenchGraph", "power_law_edge_index", "make_graph"]

_CHUNK = 1 << 24


@dataclass(frozen=True)
class GraphSpec:
    """The graph of one preset.

    Attributes:
        num_nodes / num_edges: exact sizes for the fallback generator (directed edge count, both directions of
            a symmetric graph counted).
        symmetric: every edge has its reverse.
        edge_dim: width of ``edge_attr`` (0: none).
        exponent: degree skew of the fallback generator (0: uniform; ~0.6: arxiv-like hubs).
        ogbn: ``synthetic_ogbn`` name to use when available (None: always the fallback).
        ogbn_scale: ``scale=`` passed to ``synthetic_ogbn``.
    """

    num_nodes: int
    num_edges: int
    symmetric: bool = True
    edge_dim: int = 0
    exponent: float = 0.6
    ogbn: str | None = None
    ogbn_scale: float = 1.0


@dataclass
class BenchGraph:
    edge_index: Tensor  # [2, E] int64 on the target device
    num_nodes: int
    edge_attr: Tensor | None  # [E, edge_dim] float32 or None
    source: str  # "synthetic_ogbn(...)" or "power_law(...)"

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


def _ranks(u: Tensor, n: int, exponent: float) -> Tensor:
    """Inverse CDF of the density ``(t + 1) ** -exponent`` on ``[0, n)``, floored to an integer rank."""
    if exponent == 0.0:
        t = u * n
    elif exponent == 1.0:
        t = torch.exp(u * math.log(n + 1.0)) - 1.0
    else:
        b = 1.0 - exponent
        top = (n + 1.0) ** b - 1.0
        t = (1.0 + u * top).pow_(1.0 / b).sub_(1.0)
    return t.floor_().clamp_(0, n - 1).to(torch.int64)


def power_law_edge_index(
    num_nodes: int,
    num_edges: int,
    *,
    exponent: float = 0.6,
    symmetric: bool = True,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> Tensor:
    """``[2, num_edges]`` int64 edges whose endpoint degrees follow ``rank ** -exponent`` (see module doc)."""
    if num_nodes < 1 or num_edges < 0:
        raise ValueError(f"num_nodes must be >= 1 and num_edges >= 0, got {num_nodes} and {num_edges}")
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    perm = torch.randperm(num_nodes, generator=gen, device=device)
    draws = num_edges // 2 + num_edges % 2 if symmetric else num_edges
    pairs = torch.empty(2, draws, dtype=torch.int64, device=device)
    for start in range(0, draws, _CHUNK):
        count = min(_CHUNK, draws - start)
        for row in range(2):
            u = torch.rand(count, generator=gen, device=device, dtype=torch.float64)
            pairs[row, start : start + count] = perm[_ranks(u, num_nodes, exponent)]
    if not symmetric:
        return pairs
    half = num_edges // 2
    return torch.cat([pairs[:, :half], pairs[:, :half].flip(0), pairs[:, half:]], dim=1)


def _from_synthetic_ogbn(spec: GraphSpec, *, seed: int, device: torch.device) -> BenchGraph | None:
    """The graph from ``cudnn_gnn.datasets.synthetic_ogbn`` (symmetrised if asked), or None if unavailable."""
    if spec.ogbn is None:
        return None
    try:
        from cudnn_gnn.datasets import synthetic_ogbn
    except ImportError:
        try:
            from cudnn_gnn.datasets.synthetic import synthetic_ogbn
        except ImportError:
            return None
    data = synthetic_ogbn(spec.ogbn, scale=spec.ogbn_scale, seed=seed, device=device, num_features=0)[0]
    edge_index = data.edge_index
    edge_attr = getattr(data, "edge_attr", None)
    n = int(data.num_nodes)
    note = ""
    if spec.symmetric:
        from torch_geometric.utils import is_undirected, to_undirected

        if not is_undirected(edge_index, num_nodes=n):
            edge_index, edge_attr = to_undirected(edge_index, edge_attr, num_nodes=n, reduce="mean")
            note = ", to_undirected"
    if spec.edge_dim == 0:
        edge_attr = None
    elif edge_attr is None or edge_attr.shape[1] != spec.edge_dim:
        return None
    del data
    source = f"cudnn_gnn.datasets.synthetic_ogbn({spec.ogbn!r}, scale={spec.ogbn_scale}, seed={seed}{note})"
    return BenchGraph(edge_index.to(torch.int64), n, None if edge_attr is None else edge_attr.float(), source)


def make_graph(spec: GraphSpec, *, seed: int = 0, device: torch.device | str = "cpu",
               prefer_ogbn: bool = True) -> BenchGraph:
    """Build the preset's graph on ``device``: ``synthetic_ogbn`` when available and asked for, else the fallback."""
    device = torch.device(device)
    if prefer_ogbn:
        g = _from_synthetic_ogbn(spec, seed=seed, device=device)
        if g is not None:
            return g
    ei = power_law_edge_index(spec.num_nodes, spec.num_edges, exponent=spec.exponent, symmetric=spec.symmetric,
                              seed=seed, device=device)
    edge_attr = None
    if spec.edge_dim:
        gen = torch.Generator(device=device)
        gen.manual_seed(seed + 1)
        edge_attr = torch.rand(spec.num_edges, spec.edge_dim, generator=gen, device=device)
    source = (f"benchmarks/_graphs.power_law_edge_index(num_nodes={spec.num_nodes}, num_edges={spec.num_edges}, "
              f"exponent={spec.exponent}, symmetric={spec.symmetric}, seed={seed})")
    return BenchGraph(ei, spec.num_nodes, edge_attr, source)
