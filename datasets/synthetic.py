"""Seeded synthetic graphs shaped like the OGB node datasets, for benchmarks and smoke tests.

:func:`synthetic_ogbn` matches a dataset's node count, the edge count its OGB loader returns, feature width,
class/task count and split sizes, with a power-law degree distribution from a Chung-Lu style model. Nothing is
read from disk, so the big presets (ogbn-products at full size: 2.4M nodes, 124M edges) can be benchmarked on
machines that do not hold the real data. Generation is vectorised torch, O(E) time and memory, chunked over
edges; pass ``device="cuda"`` to generate on the GPU.

The model: node ``r`` (after a random relabelling) gets weight ``(r + r0) ** -a`` with ``a = 1 / (gamma - 1)``,
so expected degrees follow a power law with exponent ``gamma``; ``r0`` is solved so that the heaviest node's
expected degree equals a target maximum. Edge endpoints are drawn by inverting the weights' continuous CDF in
closed form (no O(N) search per edge). Self-loops are moved to the next node; multi-edges are kept (rare except
between hubs).

Labels are learnable: every node has a hidden vector ``h`` (16 dims); ``x = h A + noise`` with a random
``A``; proteins' ``edge_attr`` is ``sigmoid(h[src] + h[dst] + noise)`` (first 8 dims); the label is a random
linear function of ``h`` averaged with the mean ``h`` of its in-neighbours (over a uniform sample of at most
4M raw edges, to bound the cost), so neighbourhood information helps predict it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Data

from cudnn_gnn.datasets._meta import OgbnMeta, ogbn_meta
from cudnn_gnn.datasets.ogb_node import add_inverse_edges

__all__ = ["synthetic_ogbn", "degree_stats", "SYNTHETIC_DEGREE_MODEL", "MEMORY_WARN_BYTES"]

#: A warning is issued when the estimated size of the generated tensors exceeds this many bytes.
MEMORY_WARN_BYTES = 16 * 2**30
_HIDDEN = 16
_CHUNK = 1 << 22
_SMOOTH_EDGES = 1 << 22


@dataclass(frozen=True)
class _DegreeModel:
    gamma_in: float  # power-law exponent of in-degree (of degree, for undirected graphs)
    gamma_out: float  # of out-degree (ignored for undirected graphs)
    max_in: float  # target expected maximum in-degree at scale 1 (degree for undirected)
    max_out: float


#: Chung-Lu parameters per dataset. The exponents and maximum degrees are our modelling choices (heavy-tailed
#: in-degree for citation graphs, a lighter tail for the dense protein graph), not figures fitted to the data.
SYNTHETIC_DEGREE_MODEL: dict[str, _DegreeModel] = {
    "ogbn-arxiv": _DegreeModel(gamma_in=2.4, gamma_out=3.2, max_in=13_000, max_out=500),
    "ogbn-products": _DegreeModel(gamma_in=2.4, gamma_out=2.4, max_in=17_000, max_out=17_000),
    "ogbn-proteins": _DegreeModel(gamma_in=3.0, gamma_out=3.0, max_in=7_750, max_out=7_750),
    "ogbn-papers100M": _DegreeModel(gamma_in=2.4, gamma_out=3.2, max_in=200_000, max_out=5_000),
}


def _share_of_top(a: float, r0: float, n: int) -> float:
    """Probability mass of rank 0 (the interval [0, 1)) under weights (r + r0) ** -a on [0, n)."""
    b = 1.0 - a
    return ((1.0 + r0) ** b - r0**b) / ((n + r0) ** b - r0**b)


def _solve_offset(a: float, n: int, num_draws: int, max_degree: float) -> float:
    """Find r0 so that rank 0 gets ``max_degree`` of ``num_draws`` draws in expectation (bisection in log r0)."""
    target = min(max_degree, num_draws) / max(num_draws, 1)
    if _share_of_top(a, 1e-12, n) <= target:  # even the sharpest law cannot reach the target: take it
        return 1e-12
    lo, hi = math.log(1e-12), math.log(float(n) * 1e6)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _share_of_top(a, math.exp(mid), n) > target:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


class _PowerLawSampler:
    """Draws node ids with P(id = perm[r]) proportional to the integral of (t + r0) ** -a over [r, r + 1)."""

    def __init__(self, n: int, gamma: float, num_draws: int, max_degree: float, gen: torch.Generator) -> None:
        self.n = n
        self.a = 1.0 / (gamma - 1.0)
        self.r0 = _solve_offset(self.a, n, num_draws, max_degree)
        b = 1.0 - self.a
        self.g0 = self.r0**b
        self.gn = (n + self.r0) ** b
        self.gen = gen
        self.perm = torch.randperm(n, generator=gen, device=gen.device)

    def sample(self, count: int) -> torch.Tensor:
        u = torch.rand(count, generator=self.gen, device=self.gen.device, dtype=torch.float64)
        r = (self.g0 + u * (self.gn - self.g0)).pow_(1.0 / (1.0 - self.a)).sub_(self.r0)
        ranks = r.floor_().clamp_(0, self.n - 1).to(torch.int64)
        return self.perm[ranks]


def _check_args(scale: object, seed: object, num_features: object) -> None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"`scale` must be a float, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"`scale` must be a finite number > 0, got {scale}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"`seed` must be an int, got {type(seed).__name__}")
    if num_features is not None:
        if isinstance(num_features, bool) or not isinstance(num_features, int):
            raise TypeError(f"`num_features` must be an int or None, got {type(num_features).__name__}")
        if num_features < 0:
            raise ValueError(f"`num_features` must be >= 0, got {num_features}")


def _sizes(meta: OgbnMeta, scale: float) -> tuple[int, int, tuple[int, int, int]]:
    n = max(2, round(meta.num_nodes * scale))
    raw_edges = max(1, round(meta.num_raw_edges * scale))
    fraction = n / meta.num_nodes
    train, valid, test = (max(1, round(s * fraction)) for s in meta.split_sizes)
    while train + valid + test > n:  # tiny graphs: shrink the largest part
        if test >= max(train, valid):
            test -= 1
        elif train >= valid:
            train -= 1
        else:
            valid -= 1
    return n, raw_edges, (train, valid, test)


def _estimate_bytes(meta: OgbnMeta, n: int, raw_edges: int, width: int) -> int:
    edges = raw_edges * (2 if meta.add_inverse_edge else 1)
    total = 16 * edges + 4 * n * width + 4 * n * _HIDDEN + 8 * n * meta.num_tasks
    if meta.num_edge_features:
        total += 4 * edges * meta.num_edge_features
    return total


def _mean_in(h: torch.Tensor, edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of ``h`` over in-neighbours (messages flow edge_index[0] -> edge_index[1]); 0 where none."""
    acc = torch.zeros(n, h.size(1), dtype=h.dtype, device=h.device)
    for start in range(0, edge_index.size(1), _CHUNK):
        chunk = edge_index[:, start : start + _CHUNK]
        acc.index_add_(0, chunk[1], h[chunk[0]])
    count = torch.bincount(edge_index[1], minlength=n).to(h.dtype).unsqueeze(1)
    return acc / count.clamp(min=1.0)


def synthetic_ogbn(
    name: str,
    *,
    scale: float = 1.0,
    seed: int = 0,
    device: str | torch.device = "cpu",
    num_features: int | None = None,
) -> Data:
    """Generate a seeded graph with the shape of an OGB node dataset (see :func:`load_ogbn`).

    ============== =========== ================= ======== ===================== ==============================
    name           nodes       ``edge_index``    ``x``    ``y``                 extras
    ============== =========== ================= ======== ===================== ==============================
    ogbn-arxiv     169,343     1,166,243 (dir.)  [N, 128] [N, 1] int64, 40 cls
    ogbn-products  2,449,029   123,718,280 (1)   [N, 100] [N, 1] int64, 47 cls
    ogbn-proteins  132,534     79,122,504 (1)    [N, 8]   [N, 112] int64 0/1    ``edge_attr`` [E, 8] in (0, 1)
    ogbn-papers100M 111,059,956 1,615,685,872    [N, 128] [N, 1] float32, NaN   off-split labels are NaN
    ============== =========== ================= ======== ===================== ==============================

    (1) undirected: ``scale * <raw edges>`` pairs, each followed by its reverse, as OGB's loader returns them.
    ogbn-proteins' real data has no ``x``; here ``x`` has 8 columns, standing in for the usual mean of the
    incoming ``edge_attr``. ogbn-arxiv and papers100M are directed, as stored; symmetrise with
    ``to_undirected`` if wanted.

    Args:
        name: An ``ogbn-*`` name (case-insensitive; ``_`` accepted for ``-``).
        scale: Multiplies nodes, raw edges and split sizes (``0.001`` for smoke tests). Mean degree is kept.
        seed: Seed of the torch generator; the same seed, scale and device give the same graph.
        device: Where to generate and return tensors (``"cuda"`` is much faster for the big presets).
        num_features: Width of ``x``; ``None`` for the dataset's width, ``0`` for no ``x``.

    Returns:
        ``Data`` laid out like :func:`load_ogbn`'s: ``x``, ``edge_index`` int64, ``y``, ``edge_attr`` (proteins),
        ``train_idx``/``valid_idx``/``test_idx``, ``num_classes``, ``num_tasks``, ``task_type``,
        ``eval_metric``.

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: Unknown ``name``, ``scale <= 0`` or ``num_features < 0``.

    Warns:
        UserWarning: When the tensors would take more than 16 GiB (ogbn-papers100M at ``scale`` >= ~0.2).

    Example:
        >>> data = synthetic_ogbn("ogbn-products", scale=0.001)
        >>> data.num_nodes, data.edge_index.shape[1], data.x.shape[1]
        (2449, 123718, 100)
    """
    meta = ogbn_meta(name)
    _check_args(scale, seed, num_features)
    device = torch.device(device)
    model = SYNTHETIC_DEGREE_MODEL[meta.name]
    n, raw_edges, (n_train, n_valid, n_test) = _sizes(meta, float(scale))
    width = (meta.num_features or meta.num_edge_features) if num_features is None else num_features
    needed = _estimate_bytes(meta, n, raw_edges, width)
    if needed > MEMORY_WARN_BYTES:
        warnings.warn(
            f"synthetic {meta.name} at scale={scale} needs about {needed / 2**30:.0f} GiB on {device}; "
            "use a smaller `scale` unless the machine has that much memory",
            UserWarning,
            stacklevel=2,
        )

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    undirected = meta.add_inverse_edge
    # Undirected: both endpoints from one law; each node's degree counts both ends of its edges.
    draws_in = 2 * raw_edges if undirected else raw_edges
    # The largest degree of a power law grows like N ** (1 / (gamma - 1)); shrink the target with the graph.
    max_in = model.max_in * scale ** (1.0 / (model.gamma_in - 1.0))
    max_out = model.max_out * scale ** (1.0 / (model.gamma_out - 1.0))
    dst_law = _PowerLawSampler(n, model.gamma_in, draws_in, max_in, gen)
    src_law = dst_law if undirected else _PowerLawSampler(n, model.gamma_out, raw_edges, max_out, gen)
    edge_index = torch.empty((2, raw_edges), dtype=torch.int64, device=device)
    for start in range(0, raw_edges, _CHUNK):
        count = min(_CHUNK, raw_edges - start)
        src, dst = src_law.sample(count), dst_law.sample(count)
        dst = torch.where(src == dst, (dst + 1) % n, dst)
        edge_index[0, start : start + count] = src
        edge_index[1, start : start + count] = dst

    h = torch.randn(n, _HIDDEN, generator=gen, device=device)
    edge_attr = None
    if meta.num_edge_features:
        k = meta.num_edge_features
        edge_attr = torch.empty((raw_edges, k), dtype=torch.float32, device=device)
        for start in range(0, raw_edges, _CHUNK):
            chunk = edge_index[:, start : start + _CHUNK]
            noise = 0.5 * torch.randn(chunk.size(1), k, generator=gen, device=device)
            edge_attr[start : start + chunk.size(1)] = torch.sigmoid(h[chunk[0], :k] + h[chunk[1], :k] + noise)
    if undirected:
        edge_index, edge_attr = add_inverse_edges(edge_index, edge_attr)

    data = Data(num_nodes=n, edge_index=edge_index)
    if width:
        mix = torch.randn(_HIDDEN, width, generator=gen, device=device) / math.sqrt(_HIDDEN)
        data.x = h @ mix + 0.5 * torch.randn(n, width, generator=gen, device=device)
    if edge_attr is not None:
        data.edge_attr = edge_attr

    # Raw edges are i.i.d. draws, so a prefix is a uniform sample of them: smoothing over at most
    # _SMOOTH_EDGES of them keeps label generation O(min(E, 4M)) while labels still depend on neighbours.
    sample = edge_index[:, : _SMOOTH_EDGES * (2 if undirected else 1)]
    smooth = 0.5 * h + 0.5 * _mean_in(h, sample, n)
    outputs = meta.num_tasks if meta.num_tasks > 1 else meta.num_classes
    weight = torch.randn(_HIDDEN, outputs, generator=gen, device=device)
    logits = smooth @ weight
    if meta.num_tasks > 1:  # binary tasks (proteins)
        y = (logits > 0).to(torch.int64)
    else:
        y = logits.argmax(dim=1, keepdim=True)

    order = torch.randperm(n, generator=gen, device=device)
    data.train_idx = order[:n_train]
    data.valid_idx = order[n_train : n_train + n_valid]
    data.test_idx = order[n_train + n_valid : n_train + n_valid + n_test]
    if meta.binary:  # papers100M: only split nodes are labelled, the rest are NaN as in OGB
        labelled = torch.zeros(n, dtype=torch.bool, device=device)
        labelled[order[: n_train + n_valid + n_test]] = True
        nan = torch.full(y.shape, float("nan"), device=device)
        y = torch.where(labelled.unsqueeze(1), y.to(torch.float32), nan)
    data.y = y
    data.num_classes = meta.num_classes
    data.num_tasks = meta.num_tasks
    data.task_type = meta.task_type
    data.eval_metric = meta.eval_metric
    return data


def degree_stats(edge_index: torch.Tensor, num_nodes: int, *, xmin: int | None = None) -> dict[str, float]:
    """Summarise the in-degree distribution (messages flow ``edge_index[0] -> edge_index[1]``).

    The power-law exponent is the discrete maximum-likelihood estimate of Clauset, Shalizi and Newman (2009,
    eq. 3.7), ``1 + n / sum(ln(d_i / (xmin - 1/2)))`` over the ``n`` nodes with in-degree ``d_i >= xmin``.

    Args:
        edge_index: ``[2, E]`` integer tensor (any device).
        num_nodes: Number of nodes (isolated nodes count as zero in-degree).
        xmin: Smallest degree in the fitted tail; default ``max(2, ceil(mean in-degree))``.

    Returns:
        ``{"num_nodes", "num_edges", "mean", "median", "p99", "max", "frac_zero_in", "power_law_exponent",
        "xmin"}`` as Python floats (``power_law_exponent`` is NaN when fewer than 2 nodes reach ``xmin``).

    Raises:
        TypeError: ``edge_index`` is not an integer tensor, or ``num_nodes``/``xmin`` not an int.
        ValueError: ``edge_index`` is not ``[2, E]``, an index is outside ``[0, num_nodes)``, or ``xmin < 1``.
    """
    if not isinstance(edge_index, torch.Tensor) or edge_index.dtype not in (torch.int32, torch.int64):
        got = edge_index.dtype if isinstance(edge_index, torch.Tensor) else type(edge_index).__name__
        raise TypeError(f"`edge_index` must be an int32 or int64 tensor, got {got}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"`edge_index` must have shape [2, E], got {list(edge_index.shape)}")
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
        raise TypeError(f"`num_nodes` must be an int, got {type(num_nodes).__name__}")
    if num_nodes < 1:
        raise ValueError(f"`num_nodes` must be >= 1, got {num_nodes}")
    if xmin is not None and (isinstance(xmin, bool) or not isinstance(xmin, int)):
        raise TypeError(f"`xmin` must be an int or None, got {type(xmin).__name__}")
    if xmin is not None and xmin < 1:
        raise ValueError(f"`xmin` must be >= 1, got {xmin}")
    dst = edge_index[1]
    if dst.numel():
        lo, hi = int(dst.min()), int(dst.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(f"`edge_index` must index nodes in [0, {num_nodes}), got [{lo}, {hi}]")
    deg = torch.bincount(dst.to(torch.int64), minlength=num_nodes).cpu().numpy()
    mean = float(deg.mean())
    xmin = max(2, math.ceil(mean)) if xmin is None else xmin
    tail = deg[deg >= xmin].astype(np.float64)
    if len(tail) >= 2:
        exponent = 1.0 + len(tail) / float(np.log(tail / (xmin - 0.5)).sum())
    else:
        exponent = float("nan")
    return {
        "num_nodes": float(num_nodes),
        "num_edges": float(edge_index.size(1)),
        "mean": mean,
        "median": float(np.median(deg)),
        "p99": float(np.percentile(deg, 99)),
        "max": float(deg.max()),
        "frac_zero_in": float((deg == 0).mean()),
        "power_law_exponent": exponent,
        "xmin": float(xmin),
    }
