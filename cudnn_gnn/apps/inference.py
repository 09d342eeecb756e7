"""Layer-wise inference over full in-neighbourhoods, in chunks of destinations, for graphs too large for one pass.

Sampled training evaluates on sampled neighbourhoods; the exact output of a GNN needs every in-edge. PyG's
``inference`` does that layer by layer (layer ``i`` for every node from layer ``i - 1``'s output for every node),
which holds ``N`` rows per layer: papers100M with 4 x 128 hidden is 111M x 512, 114 GB even in 16 bits, more than
the host of a one-GPU machine holds next to the graph. :func:`layerwise_inference` computes each layer only where
the next one reads it: the targets' receptive field, found backwards from the targets through the CSC
(``D[L-1]`` = the targets, ``D[i-1] = D[i]`` and their in-neighbours), and layer ``i`` in chunks of ``D[i]`` cut
so that a chunk's in-edges stay within ``max_edges`` (a node with more in-edges is a chunk of its own). A chunk is a
bipartite block as a sampler makes one: its destinations first (so that PyG's self-loops ``i -> i`` join a node to
itself), then its other sources, every in-edge relabelled to them; only two layers' rows exist at a time, each as
``[len(D[i]), C]`` in ``store_dtype`` on ``store_device``.

The graph is a CSC (``colptr`` ``[N + 1]``, ``row`` ``[E]``; on the host, e.g. memory-mapped, or on the GPU, e.g. the
device sampler's copy) and ``x`` ``[N, F]`` (host or GPU); per chunk the rows it needs are gathered where they live
and moved to ``device``. Host syncs: a few per chunk (sizes of the unique sources), none per edge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._validation import check_index, check_int, check_tensor
from cudnn_gnn.apps.sampler import _check_csc

__all__ = ["layerwise_inference", "receptive_fields"]

#: ``layer(i, (x_src, x_dst), edge_index, size) -> [n_dst, C]``: layer ``i`` of the model on one bipartite block
#: (``edge_index`` ``[2, e]``: row 0 local sources into ``x_src``, row 1 local destinations into ``x_dst``;
#: ``x_dst = x_src[:n_dst]``; ``size = (n_src, n_dst)``).
Layer = Callable[[int, tuple[Tensor, Tensor], Tensor, tuple[int, int]], Tensor]


def _ranges(colptr: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """The in-edge positions of ``nodes`` in CSC order, and each one's destination index into ``nodes``."""
    lo = colptr[nodes].long()
    deg = colptr[nodes + 1].long() - lo
    total = int(deg.sum())
    owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), deg, output_size=total)
    pos = lo[owner] + torch.arange(total, device=nodes.device) - (torch.cumsum(deg, 0) - deg)[owner]
    return pos, owner


def _chunks(colptr: Tensor, nodes: Tensor, max_edges: int) -> list[tuple[int, int]]:
    """``[a, b)`` slices of ``nodes`` whose in-edges sum to at most ``max_edges`` (one node alone may exceed it)."""
    deg = (colptr[nodes + 1] - colptr[nodes]).long().cpu()
    ends = torch.cumsum(deg, 0)
    out, a, base = [], 0, 0
    n = nodes.numel()
    while a < n:
        b = int(torch.searchsorted(ends, base + max_edges, right=True))  # the first node past the budget
        b = max(b, a + 1)
        out.append((a, b))
        base, a = int(ends[b - 1]), b
    return out


def _checked(colptr: Tensor, row: Tensor, targets: Tensor | None, num_layers: int,
             max_edges: int) -> tuple[Tensor, Tensor, Tensor]:
    """The CSC checked, and the targets as int64 on its device (every node for ``None``), before any work."""
    check_int("num_layers", num_layers, minimum=1)
    check_int("max_edges", max_edges, minimum=1)
    colptr, row = check_index("colptr", colptr), check_index("row", row)
    if colptr.dim() != 1 or colptr.numel() < 1 or row.dim() != 1:
        raise ValueError(f"colptr and row must have shapes (num_nodes + 1,) and (num_edges,), got "
                         f"{tuple(colptr.shape)} and {tuple(row.shape)}")
    n = colptr.numel() - 1
    _check_csc(colptr, row, n)  # one host read, once: a bad colptr or row would index out of bounds on the device
    if targets is None:
        return colptr, row, torch.arange(n, device=colptr.device)
    wanted = check_index("targets", targets).to(colptr.device).long()
    if wanted.dim() != 1 or wanted.numel() == 0:
        raise ValueError(f"targets must have shape (num_targets,) with num_targets >= 1, got {tuple(wanted.shape)}")
    lo, hi = int(wanted.min()), int(wanted.max())
    if lo < 0 or hi >= n:
        raise ValueError(f"targets must be node ids in [0, num_nodes={n}), got values in [{lo}, {hi}]")
    return colptr, row, wanted


def receptive_fields(colptr: Tensor, row: Tensor, targets: Tensor, num_layers: int, *,
                     max_edges: int = 1 << 24) -> list[Tensor]:
    """The destinations of each layer: ``D[L-1]`` = ``targets`` (sorted, unique), ``D[i-1] = D[i]`` united with the
    sources of their in-edges. Returns ``[D[0], ..., D[L-1]]``, each sorted int64 on ``colptr``'s device; the
    in-edges are walked in chunks of at most ``max_edges``. ``D[i-1]`` is also where layer ``i`` reads its input.

    Raises:
        TypeError, ValueError: as :func:`layerwise_inference` for the same arguments.
    """
    return _fields(*_checked(colptr, row, targets, num_layers, max_edges), num_layers, max_edges)[0]


def _fields(colptr: Tensor, row: Tensor, targets: Tensor, num_layers: int,
            max_edges: int) -> tuple[list[Tensor], dict[int, list[tuple[int, int]]]]:
    """:func:`receptive_fields` on checked arguments, with the chunks it walked each ``D[i]`` in (``i >= 1``), the
    chunks layer ``i`` runs in."""
    n = colptr.numel() - 1
    fields, cuts = [targets.unique()], {}
    for i in range(num_layers - 1, 0, -1):
        d = fields[0]
        mask = torch.zeros(n, dtype=torch.bool, device=d.device)
        mask[d] = True
        cuts[i] = _chunks(colptr, d, max_edges)
        for a, b in cuts[i]:
            pos, _ = _ranges(colptr, d[a:b])
            mask[row[pos.to(row.device)].to(d.device).long()] = True
        fields.insert(0, mask.nonzero().view(-1))
    return fields, cuts


def _block(colptr: Tensor, row: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """The bipartite block of ``dst`` (sorted global ids) and all their in-edges: ``(nodes, edge_index)`` with
    ``nodes`` = ``dst`` then the other sources (sorted), ``edge_index`` local (row 0 into ``nodes``, row 1 into
    ``dst``)."""
    pos, owner = _ranges(colptr, dst)
    src = row[pos.to(row.device)].to(dst.device).long()
    at = torch.searchsorted(dst, src).clamp(max=max(dst.numel() - 1, 0))
    is_dst = dst[at] == src if dst.numel() else torch.zeros_like(src, dtype=torch.bool)
    extra = src[~is_dst].unique()
    local = torch.where(is_dst, at, dst.numel() + torch.searchsorted(extra, src))
    return torch.cat([dst, extra]), torch.stack([local, owner])


@torch.no_grad()
def layerwise_inference(layer: Layer, num_layers: int, x: Tensor, colptr: Tensor, row: Tensor, *,
                        targets: Tensor | None = None, device: torch.device | str | None = None,
                        max_edges: int = 1 << 22, store_device: torch.device | str | None = None,
                        store_dtype: torch.dtype | None = None, stats: dict[str, Any] | None = None,
                        progress: Callable[[int, int, int], None] | None = None) -> Tensor:
    """The last layer's output for ``targets``, every layer over full in-neighbourhoods, in chunks.

    Args:
        layer: ``layer(i, (x_src, x_dst), edge_index, size)`` -> ``[n_dst, C_i]``: layer ``i`` on one block (see
            :data:`Layer`); called under ``torch.no_grad()``; put the model in ``eval()`` mode first.
        num_layers: ``L``.
        x: ``[N, F]`` input features (host or device).
        colptr, row: the CSC, ``[N + 1]`` and ``[E]`` int32/int64 (host or device): the in-edges of ``v`` are
            ``row[colptr[v]:colptr[v + 1]]``.
        targets: ``[T]`` node ids whose output is wanted (``None``: every node).
        device: where the layers run (default ``x``'s device).
        max_edges: in-edges per chunk (memory per chunk grows with it: 16 bytes an edge for the block, plus what
            the layer keeps per edge: nothing for ours, ``[e, H, C]`` messages for PyG's ``GATConv``).
        store_device: where each layer's rows are kept between layers (default ``device``); the host holds more.
        store_dtype: their dtype (default: the layer's output dtype); 16 bits halve the largest term. Rows are
            cast back to the dtype the layer returned when read.
        stats: filled with ``fields`` (``len(D[i])`` per layer), ``chunks`` (per layer) and ``store_bytes`` (the
            largest two consecutive layers' rows).
        progress: called as ``progress(layer, chunk, chunks)`` after each chunk.

    Returns:
        ``[T, C_{L-1}]`` on ``device`` in the last layer's output dtype, in the order of ``targets`` (repeats
        allowed).

    Raises:
        TypeError, ValueError: bad arguments (shapes, dtypes, no target or one out of range, ``num_layers < 1``).
    """
    if not callable(layer):
        raise TypeError(f"layer must be callable as layer(i, (x_src, x_dst), edge_index, size), got "
                        f"{type(layer).__name__}")
    if store_dtype is not None and not isinstance(store_dtype, torch.dtype):
        raise TypeError(f"store_dtype must be a torch.dtype or None, got {type(store_dtype).__name__}")
    if store_dtype is not None and not store_dtype.is_floating_point:
        raise TypeError(f"store_dtype must be a floating-point dtype (a layer's rows), got {store_dtype}")
    colptr, row, wanted = _checked(colptr, row, targets, num_layers, max_edges)
    x = check_tensor("x", x)
    n = colptr.numel() - 1
    if x.dim() != 2 or x.shape[0] != n:
        raise ValueError(f"x must have shape (num_nodes={n}, num_features), got {tuple(x.shape)}")
    dev = torch.device(device) if device is not None else x.device
    store = torch.device(store_device) if store_device is not None else dev
    fields, known_cuts = _fields(colptr, row, wanted, num_layers, max_edges)
    info: dict[str, Any] = {"fields": [f.numel() for f in fields], "chunks": [], "store_bytes": 0}

    h: Tensor | None = None  # layer i's input rows for fields[i - 1] (layer 0 reads x itself)
    h_dtype = x.dtype  # the dtype layer i - 1 returned: its rows go back to it (stored in store_dtype)
    for i, dst_all in enumerate(fields):
        cuts = known_cuts[i] if i in known_cuts else _chunks(colptr, dst_all, max_edges)
        info["chunks"].append(len(cuts))
        out: Tensor | None = None
        for k, (a, b) in enumerate(cuts):
            dst = dst_all[a:b]
            nodes, edge_index = _block(colptr, row, dst)
            if h is None:
                x_src = x[nodes.to(x.device)].to(dev)
            else:
                x_src = h[torch.searchsorted(fields[i - 1], nodes).to(h.device)].to(dev, h_dtype)
            res = layer(i, (x_src, x_src[: dst.numel()]), edge_index.to(dev), (nodes.numel(), dst.numel()))
            if out is None:  # the layer's width and dtype are known from its first chunk
                out = torch.empty(dst_all.numel(), res.shape[1], dtype=store_dtype or res.dtype, device=store)
                held = out.numel() * out.element_size() + (0 if h is None else h.numel() * h.element_size())
                info["store_bytes"] = max(info["store_bytes"], held)
            out[a:b] = res.to(device=store, dtype=out.dtype)
            if progress is not None:
                progress(i, k + 1, len(cuts))
        assert out is not None  # fields[i] holds at least the targets
        h, h_dtype = out, res.dtype
    if stats is not None:
        stats.update(info)
    assert h is not None
    return h[torch.searchsorted(fields[-1], wanted).to(h.device)].to(dev, h_dtype)
