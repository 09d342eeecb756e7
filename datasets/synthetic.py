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

import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cudnn_gnn.datasets._io import as_folder, folder_lock, remove_stale_temps, temp_path
from cudnn_gnn.datasets._meta import OGBN_META, OgbnMeta, ogbn_meta
from cudnn_gnn.datasets.node_dataset import NodeDataset
from cudnn_gnn.datasets.ogb_node import OgbnData, add_inverse_edges, ogbn_dataset

__all__ = ["synthetic_ogbn", "synthetic_ogbn_mmap", "load_mapped", "MappedGraph", "degree_stats", "SYNTHETIC_DEGREE_MODEL",
           "MEMORY_WARN_BYTES"]

#: A warning is issued when the estimated size of the generated tensors exceeds this many bytes.
MEMORY_WARN_BYTES = 16 * 2**30
_HIDDEN = 16
_CHUNK = 1 << 22
_SMOOTH_EDGES = 1 << 22
_LABEL_ROWS = 1 << 20


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

    def sample(self, count: int, gen: torch.Generator | None = None) -> torch.Tensor:
        gen = self.gen if gen is None else gen
        u = torch.rand(count, generator=gen, device=gen.device, dtype=torch.float64)
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


def _edge_laws(meta: OgbnMeta, n: int, raw_edges: int, scale: float,
               gen: torch.Generator) -> tuple[_PowerLawSampler, _PowerLawSampler]:
    """The (source, destination) degree laws of a preset; one shared law for undirected graphs."""
    model = SYNTHETIC_DEGREE_MODEL[meta.name]
    undirected = meta.add_inverse_edge
    # Undirected: both endpoints from one law; each node's degree counts both ends of its edges.
    draws_in = 2 * raw_edges if undirected else raw_edges
    # The largest degree of a power law grows like N ** (1 / (gamma - 1)); shrink the target with the graph.
    max_in = model.max_in * scale ** (1.0 / (model.gamma_in - 1.0))
    max_out = model.max_out * scale ** (1.0 / (model.gamma_out - 1.0))
    dst_law = _PowerLawSampler(n, model.gamma_in, draws_in, max_in, gen)
    src_law = dst_law if undirected else _PowerLawSampler(n, model.gamma_out, raw_edges, max_out, gen)
    return src_law, dst_law


def _labels_and_split(meta: OgbnMeta, h: torch.Tensor, sample: torch.Tensor, sizes: tuple[int, int, int],
                      gen: torch.Generator) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Labels from the hidden vectors smoothed over the in-neighbours of ``sample`` edges, and a random split;
    papers100M's labels are float with NaN off the split, as in OGB."""
    n, device = h.size(0), h.device
    n_train, n_valid, n_test = sizes
    smooth = 0.5 * h + 0.5 * _mean_in(h, sample, n)
    outputs = meta.num_tasks if meta.num_tasks > 1 else meta.num_classes
    weight = torch.randn(_HIDDEN, outputs, generator=gen, device=device)
    parts = []
    for start in range(0, n, _LABEL_ROWS):  # [rows, outputs] logits at a time (papers100M's whole: 76 GB)
        logits = smooth[start : start + _LABEL_ROWS] @ weight
        if meta.num_tasks > 1:  # binary tasks (proteins)
            parts.append((logits > 0).to(torch.int64))
        else:
            parts.append(logits.argmax(dim=1, keepdim=True))
    y = torch.cat(parts) if len(parts) > 1 else parts[0]

    order = torch.randperm(n, generator=gen, device=device)
    split = (order[:n_train], order[n_train : n_train + n_valid], order[n_train + n_valid : n_train + n_valid + n_test])
    if meta.binary:  # papers100M: only split nodes are labelled, the rest are NaN as in OGB
        labelled = torch.zeros(n, dtype=torch.bool, device=device)
        labelled[order[: n_train + n_valid + n_test]] = True
        nan = torch.full(y.shape, float("nan"), device=device)
        y = torch.where(labelled.unsqueeze(1), y.to(torch.float32), nan)
    return y, split


def synthetic_ogbn(
    name: str,
    *,
    scale: float = 1.0,
    seed: int = 0,
    device: str | torch.device = "cpu",
    num_features: int | None = None,
) -> NodeDataset:
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
        A :class:`~cudnn_gnn.datasets.NodeDataset` like :func:`load_ogbn`'s (``len`` 1, ``num_classes``,
        ``num_features``, ``get_idx_split()``), whose ``[0]`` is the graph: ``x``, ``edge_index`` int64, ``y``,
        ``edge_attr`` (proteins), ``train_idx``/``valid_idx``/``test_idx``, ``num_classes``, ``num_tasks``,
        ``task_type``, ``eval_metric``.

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: Unknown ``name``, ``scale <= 0`` or ``num_features < 0``.

    Warns:
        UserWarning: When the tensors would take more than 16 GiB (ogbn-papers100M at ``scale`` >= ~0.2).

    Example:
        >>> data = synthetic_ogbn("ogbn-products", scale=0.001)[0]
        >>> data.num_nodes, data.edge_index.shape[1], data.x.shape[1]
        (2449, 123718, 100)
    """
    meta = ogbn_meta(name)
    _check_args(scale, seed, num_features)
    device = torch.device(device)
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
    src_law, dst_law = _edge_laws(meta, n, raw_edges, float(scale), gen)
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

    data = OgbnData(num_nodes=n, edge_index=edge_index)
    if width:
        mix = torch.randn(_HIDDEN, width, generator=gen, device=device) / math.sqrt(_HIDDEN)
        data.x = h @ mix + 0.5 * torch.randn(n, width, generator=gen, device=device)
    if edge_attr is not None:
        data.edge_attr = edge_attr

    # Raw edges are i.i.d. draws, so a prefix is a uniform sample of them: smoothing over at most
    # _SMOOTH_EDGES of them keeps label generation O(min(E, 4M)) while labels still depend on neighbours.
    sample = edge_index[:, : _SMOOTH_EDGES * (2 if undirected else 1)]
    y, (data.train_idx, data.valid_idx, data.test_idx) = _labels_and_split(meta, h, sample, (n_train, n_valid, n_test),
                                                                            gen)
    data.y = y
    return ogbn_dataset(meta, data, args=f"{meta.name!r}, scale={scale}, seed={seed}")


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


# ------------------------------------------------------------------------------------ memory-mapped layout

_MMAP_FORMAT = 2  # 2: labels in node chunks (n > 2**20), the generating device in the manifest
_MMAP_DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class MappedGraph:
    """A node dataset laid out for sampled training on a large graph: every array a ``.npy`` file in ``root``,
    memory-mapped read-only, so all processes of a host (DDP ranks, loader workers) share one copy in the page
    cache. Writing to these tensors is an error (the pages are read-only); gather rows (``x[n_id]``) instead.

    Attributes:
        root: The folder holding ``manifest.json`` and the arrays.
        name: The OGB preset.
        num_nodes, num_edges: ``N`` and ``E`` (directed edges, after the inverse edges of undirected presets).
        x: ``[N, F]`` float32 or float16 features.
        y: ``[N, 1]``: int64 classes, or float32 with NaN off the split (papers100M, as in OGB).
        colptr: ``[N + 1]`` int64 CSC offsets (the in-edges of node ``v`` are ``colptr[v]:colptr[v + 1]``).
        row: ``[E]`` int64 sources of the edges in CSC order (destination-major).
        train_idx, valid_idx, test_idx: int64 node ids.
        num_classes: Classes of ``y``.
        files: The ``.npy`` path of each array.
    """

    root: Path
    name: str
    num_nodes: int
    num_edges: int
    x: torch.Tensor
    y: torch.Tensor
    colptr: torch.Tensor
    row: torch.Tensor
    train_idx: torch.Tensor
    valid_idx: torch.Tensor
    test_idx: torch.Tensor
    num_classes: int
    files: dict[str, Path]

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` int64 COO in CSC order, materialised in memory (16 bytes per edge: small scales only)."""
        dst = torch.repeat_interleave(torch.arange(self.num_nodes), self.colptr.diff())
        return torch.stack([self.row.clone(), dst])


def _chunk_generator(seed: int, tag: int, index: int, device: torch.device | None = None) -> torch.Generator:
    """An independent generator per (seed, stream, chunk) on ``device`` (default CPU): a chunk can be drawn again,
    alone, identically (CPU and CUDA generators draw different numbers from one seed)."""
    state = np.random.SeedSequence([seed, tag, index]).generate_state(2, dtype=np.uint32)
    return torch.Generator(device=device or "cpu").manual_seed(int(state[0]) << 32 | int(state[1]))


def _raw_edge_chunk(src_law: _PowerLawSampler, dst_law: _PowerLawSampler, seed: int, index: int, start: int,
                    count: int, undirected: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk ``index`` of the raw edges (``count`` draws from edge ``start``), with reverse edges if undirected; drawn
    on the laws' device."""
    gen = _chunk_generator(seed, 1, index, src_law.perm.device)
    src, dst = src_law.sample(count, gen), dst_law.sample(count, gen)
    dst = torch.where(src == dst, (dst + 1) % src_law.n, dst)
    if undirected:
        return torch.cat([src, dst]), torch.cat([dst, src])
    return src, dst


def _open_npy(path: Path, dtype: type | np.dtype, shape: tuple[int, ...]) -> np.memmap:
    """A new ``.npy`` file at ``path`` (a temporary of this writer), memory-mapped for writing."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "xb") as f:  # a temporary of this writer: never an existing file
        np.save(f, array)


def _write_mapped(meta: OgbnMeta, paths: dict[str, Path], scale: float, seed: int, width: int, feature_dtype: str,
                  chunk: int, device: torch.device, *, staged: bool | None = None) -> None:
    """Generate into the files ``paths`` (``colptr``, ``row``, ``x`` when ``width``, ``y``, ``train_idx``, ``valid_idx``,
    ``test_idx``: this writer's temporaries) in two passes over seeded edge chunks (degrees, then a counting sort into the CSC
    ``row``): the edge list is never held in memory, not even once. On a CPU every pass writes straight into the
    memory-mapped files; on a GPU the draws, the counting sort and the features are computed there, ``row`` is
    sorted into a device buffer (``8 E`` bytes) and copied to its file in pieces, and the labels are computed on
    the host (:func:`_labels_and_split`, in node chunks). ``staged`` forces one way or the other (tests run the
    GPU's way on a CPU)."""
    n, raw_edges, sizes = _sizes(meta, scale)
    undirected = meta.add_inverse_edge
    num_edges = raw_edges * (2 if undirected else 1)
    gen = torch.Generator(device=device).manual_seed(seed)
    src_law, dst_law = _edge_laws(meta, n, raw_edges, scale, gen)
    chunks = [(i, start, min(chunk, raw_edges - start)) for i, start in enumerate(range(0, raw_edges, chunk))]

    deg = torch.zeros(n, dtype=torch.int64, device=device)
    for i, start, count in chunks:  # pass 1: in-degrees
        _, dst = _raw_edge_chunk(src_law, dst_law, seed, i, start, count, undirected)
        deg.index_add_(0, dst, torch.ones_like(dst))
    colptr_np = _open_npy(paths["colptr"], np.int64, (n + 1,))
    colptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(deg, 0, out=colptr[1:])
    del deg

    row_np = _open_npy(paths["row"], np.int64, (num_edges,))
    on_host = device.type == "cpu" if staged is None else not staged
    row = torch.from_numpy(row_np) if on_host else torch.empty(num_edges, dtype=torch.int64, device=device)
    cursor = colptr[:-1].clone()
    sample: torch.Tensor | None = None
    for i, start, count in chunks:  # pass 2: each edge to its slot; within a destination in draw order
        src, dst = _raw_edge_chunk(src_law, dst_law, seed, i, start, count, undirected)
        if sample is None:  # a uniform sample of the edges (i.i.d. draws) for the label smoothing
            sample = torch.stack([src, dst])[:, : _SMOOTH_EDGES * (2 if undirected else 1)].cpu()
        dst, order = torch.sort(dst, stable=True)
        first = torch.ones_like(dst, dtype=torch.bool)
        first[1:] = dst[1:] != dst[:-1]
        starts = first.nonzero().view(-1)
        group = torch.cumsum(first, 0) - 1
        slot = cursor[dst] + torch.arange(dst.numel(), device=device) - starts[group]
        row[slot] = src[order]
        cursor.index_add_(0, dst, torch.ones_like(dst))
    _copy_out(torch.from_numpy(colptr_np), colptr)
    if not on_host:
        _copy_out(torch.from_numpy(row_np), row)
    row_np.flush()
    colptr_np.flush()
    del row, row_np, cursor, colptr

    h = torch.randn(n, _HIDDEN, generator=gen, device=device)
    if width:
        x_np = _open_npy(paths["x"], _MMAP_DTYPES[feature_dtype], (n, width))
        x = torch.from_numpy(x_np)
        mix = torch.randn(_HIDDEN, width, generator=gen, device=device) / math.sqrt(_HIDDEN)
        for i, start in enumerate(range(0, n, chunk // max(width, 1) or 1)):
            stop = min(n, start + (chunk // max(width, 1) or 1))
            noise = torch.randn(stop - start, width, generator=_chunk_generator(seed, 2, i, device), device=device)
            x[start:stop] = (h[start:stop] @ mix + 0.5 * noise).to(x.dtype)
        x_np.flush()
        del x, x_np
    assert sample is not None  # raw_edges >= 1
    if not on_host:  # the labels on the host, from a host generator seeded by the device one
        gen = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (), generator=gen, device=device)))
    y, split = _labels_and_split(meta, h.cpu(), sample, sizes, gen)
    _save(paths["y"], y.numpy())
    for part, idx in zip(("train_idx", "valid_idx", "test_idx"), split):
        _save(paths[part], idx.numpy())


def _copy_out(dst: torch.Tensor, src: torch.Tensor, piece: int = 1 << 25) -> None:
    """``dst[:] = src`` in pieces of ``piece`` elements (a memory-mapped host tensor from a device one): no
    host copy of the whole tensor at once."""
    for start in range(0, src.numel(), piece):
        dst[start : start + piece].copy_(src[start : start + piece])


def _manifest(meta: OgbnMeta, scale: float, seed: int, width: int, feature_dtype: str, device: torch.device) -> dict:
    n, raw_edges, _ = _sizes(meta, scale)
    return {"format": _MMAP_FORMAT, "name": meta.name, "scale": scale, "seed": seed, "num_features": width,
            "feature_dtype": feature_dtype, "generated_on": device.type, "num_nodes": n,
            "num_edges": raw_edges * (2 if meta.add_inverse_edge else 1), "num_classes": meta.num_classes}


def _map(path: Path) -> torch.Tensor:
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    with warnings.catch_warnings():  # read-only pages: torch warns that writes would be undefined; we never write
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.from_numpy(array)


_MANIFEST_INTS = ("num_nodes", "num_edges", "num_features", "num_classes")


def _array_keys(width: int) -> list[str]:
    return ["colptr", "row", "y", "train_idx", "valid_idx", "test_idx"] + (["x"] if width else [])


def _read_manifest(folder: Path) -> dict:
    """The manifest of a generated folder, checked: a dict with a known preset and non-negative sizes.

    Raises:
        FileNotFoundError: No ``manifest.json`` (never generated, or generation did not finish).
        ValueError: The manifest is not such a dict (the file is named).
    """
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"root must hold a generated dataset (manifest.json), got {str(folder)!r}; "
                                "generate it with synthetic_ogbn_mmap(name, root, scale=...)")
    try:
        info = json.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged(manifest, f"not JSON: {exc}") from exc
    if not isinstance(info, dict):
        raise _damaged(manifest, f"a JSON object expected, got {type(info).__name__}")
    missing = [key for key in ("name", *_MANIFEST_INTS) if key not in info]
    if missing:
        raise _damaged(manifest, f"missing {missing}")
    bad = [key for key in _MANIFEST_INTS if isinstance(info[key], bool) or not isinstance(info[key], int)
           or info[key] < 0]
    if bad or info["name"] not in OGBN_META:
        raise _damaged(manifest, f"bad values of {bad or ['name']}")
    return info


def _damaged(path: Path, what: str) -> ValueError:
    return ValueError(f"dataset file {path} is damaged ({what[:300]}): delete the folder and generate it again with "
                      "synthetic_ogbn_mmap(name, root, ...)")


def _map_arrays(folder: Path, info: dict, files: dict[str, Path] | None = None) -> MappedGraph:
    """Memory-map the arrays ``info`` describes (``files``: where they are, default ``folder/<key>.npy``), each
    checked for its dtype and shape against the manifest. Raises FileNotFoundError or ValueError naming a file."""
    n, e, width = info["num_nodes"], info["num_edges"], info["num_features"]
    files = files or {key: folder / f"{key}.npy" for key in _array_keys(width)}
    shapes = {"colptr": (n + 1,), "row": (e,), "x": (n, width), "y": (n, 1)}
    t = {}
    for key, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(f"dataset file {path} is missing: delete the folder and generate it again with "
                                    "synthetic_ogbn_mmap(name, root, ...)")
        try:
            t[key] = _map(path)
        except (OSError, ValueError, EOFError) as exc:  # truncated (mmap longer than the file) or not .npy
            raise _damaged(path, f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
        want = shapes.get(key)
        if (tuple(t[key].shape) != want) if want else (t[key].dim() != 1 or t[key].dtype != torch.int64):
            raise _damaged(path, f"shape {tuple(t[key].shape)} and dtype {t[key].dtype}, the manifest says {want}")
    final = {key: folder / f"{key}.npy" for key in files}
    return MappedGraph(root=folder, name=info["name"], num_nodes=n, num_edges=e,
                       x=t.get("x", torch.empty(n, 0)), y=t["y"], colptr=t["colptr"], row=t["row"],
                       train_idx=t["train_idx"], valid_idx=t["valid_idx"], test_idx=t["test_idx"],
                       num_classes=info["num_classes"], files=final)


def synthetic_ogbn_mmap(
    name: str,
    root: str | os.PathLike[str],
    *,
    scale: float = 1.0,
    seed: int = 0,
    num_features: int | None = None,
    feature_dtype: str = "float32",
    chunk_edges: int = _CHUNK,
    device: str | torch.device = "cpu",
) -> MappedGraph:
    """Generate (once) and memory-map a synthetic OGB-shaped node dataset laid out for sampled training.

    The graph has the same degree model and sizes as :func:`synthetic_ogbn` (ogbn-papers100M at ``scale=1``:
    111,059,956 nodes, 1,615,685,872 directed edges, 128 float features, 172 classes), but is written to
    ``root`` as ``.npy`` files and never held in memory: edges are drawn in seeded chunks twice (in-degrees,
    then a counting sort of every chunk into the memory-mapped CSC ``row``), so peak memory is ``O(N)`` plus
    one chunk (about ``8 N`` bytes for the degrees and cursors, ``64 N`` for the hidden vectors, not the edge
    list). Files: ``colptr`` ``[N + 1]`` and ``row`` ``[E]`` int64 (the samplers' type), ``x`` ``[N, F]``, ``y``,
    ``train_idx``/``valid_idx``/``test_idx``, and ``manifest.json`` (written last). A folder whose manifest
    matches the arguments is memory-mapped without generating; call this once per host (rank 0 or the
    launcher) before the ranks load it. A folder whose manifest or arrays are damaged (not JSON, not the expected
    object, an array missing, truncated or of another shape) is generated again, with a warning.

    Concurrent calls on one folder are safe: each writer writes its own temporaries
    (``.<file>.<host>.<pid>.<random>.tmp``) and returns the graph it wrote; the finished files are renamed into place
    under an exclusive lock on ``root/.lock`` (manifest last), and :func:`load_mapped` maps under a shared one, so a
    reader sees one writer's files whole, and a process that has the old files mapped keeps them (never rewritten in
    place). A writer that is killed leaves its temporaries (a sparse file of the array's size at most); the next call
    on that folder from the same host deletes those whose process is gone (other hosts' are left alone).

    The graph is not the one :func:`synthetic_ogbn` returns for the same seed (edges come from per-chunk
    generators, so it also depends on ``chunk_edges``), but has the same sizes and degree laws.

    ``device="cuda"`` draws the edges, sorts them into the CSC and computes the features on the GPU (the host's
    passes are bound by one thread's elementwise work; docs/scale.md has both times). It needs about ``8 E + 40 N``
    bytes of GPU memory (``row`` is sorted there, then copied to its file; papers100M: 17.4 GB) and gives another
    graph than the CPU, of the same laws (CUDA generators draw other numbers), also byte-identical for the same
    arguments on one device type; the manifest records which.

    Args:
        name: An ``ogbn-*`` preset without edge features (arxiv, products, papers100M).
        root: Folder for the files (created).
        scale: Multiplies nodes, raw edges and split sizes.
        seed: Seed; the same arguments give byte-identical files.
        num_features: Width of ``x``; ``None`` for the preset's.
        feature_dtype: ``"float32"`` or ``"float16"`` (half the host memory and disk).
        chunk_edges: Raw edges drawn per chunk (memory per chunk is about 60 bytes per edge).
        device: Where to draw and sort (``"cpu"``, ``"cuda"``); the files are on the host either way.

    Returns:
        A :class:`MappedGraph` of read-only memory-mapped tensors.

    Raises:
        TypeError, ValueError: Bad arguments (``root`` a file).
        NotImplementedError: A preset with edge features (ogbn-proteins).

    Warns:
        UserWarning: The folder held these arguments' dataset damaged; it is generated again.
    """
    meta = ogbn_meta(name)
    _check_args(scale, seed, num_features)
    if meta.num_edge_features:
        raise NotImplementedError(f"name must be a preset without edge features for the memory-mapped layout, got {name!r}")
    if feature_dtype not in _MMAP_DTYPES:
        raise ValueError(f"feature_dtype must be one of {sorted(_MMAP_DTYPES)}, got {feature_dtype!r}")
    if isinstance(chunk_edges, bool) or not isinstance(chunk_edges, int) or chunk_edges < 1:
        raise ValueError(f"chunk_edges must be an int >= 1, got {chunk_edges!r}")
    width = meta.num_features if num_features is None else num_features
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or a torch.device, got {type(device).__name__}")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be a CPU or CUDA device, got {str(device)!r}")
    folder = as_folder(root, "root")
    want = {**_manifest(meta, float(scale), seed, width, feature_dtype, dev), "chunk_edges": chunk_edges}
    if folder.is_dir():
        with folder_lock(folder, exclusive=False):  # waits while a writer swaps its files in (no manifest meanwhile)
            try:
                have = _read_manifest(folder) if (folder / "manifest.json").is_file() else None
                if have == want:
                    return _map_arrays(folder, have)
            except (FileNotFoundError, ValueError) as exc:  # a damaged cache of these arguments: generate it again
                warnings.warn(f"{exc}; generating {folder} again", stacklevel=2)
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(folder)
    final = {key: folder / f"{key}.npy" for key in _array_keys(width)}
    temps = {key: temp_path(path) for key, path in final.items()}
    manifest_tmp = temp_path(folder / "manifest.json")
    try:
        _write_mapped(meta, temps, float(scale), seed, width, feature_dtype, chunk_edges, dev)
        graph = _map_arrays(folder, want, temps)  # this writer's own files, whatever another writes later
        manifest_tmp.write_text(json.dumps(want, indent=1))
        with folder_lock(folder, exclusive=True):  # readers map one writer's set, never a mix
            (folder / "manifest.json").unlink(missing_ok=True)  # a writer killed in here leaves no manifest
            for key, tmp in temps.items():
                os.replace(tmp, final[key])
            os.replace(manifest_tmp, folder / "manifest.json")  # last
    except BaseException:
        for tmp in [*temps.values(), manifest_tmp]:
            tmp.unlink(missing_ok=True)
        raise
    return graph


def load_mapped(root: str | os.PathLike[str]) -> MappedGraph:
    """Memory-map a folder written by :func:`synthetic_ogbn_mmap` (read-only; no generation, no copy).

    The manifest and the files are read under a shared lock (``root/.lock``), so a concurrent
    :func:`synthetic_ogbn_mmap` swapping in another graph is seen whole or not at all.

    Raises:
        TypeError: ``root`` is not a str or path.
        ValueError: ``root`` is a file, or the manifest or an array is damaged (truncated, another shape or dtype
            than the manifest says): the file is named.
        FileNotFoundError: ``root`` has no ``manifest.json`` (not generated, or generation did not finish), or an
            array the manifest lists is missing (named).
    """
    folder = as_folder(root, "root")
    with folder_lock(folder, exclusive=False):  # waits while a writer swaps its files in (no manifest meanwhile)
        return _map_arrays(folder, _read_manifest(folder))
