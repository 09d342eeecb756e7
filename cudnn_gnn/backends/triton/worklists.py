"""Work lists: which programs a pass over a CSC (or the reverse CSC) launches, hub rows cut into chunks."""


from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

__all__ = ["WorkList", "work_list"]


class WorkList(NamedTuple):
    """The programs of one pass over a CSC (or reverse CSC) ``offsets [N+1]``, with rows of more than ``B`` edges
    cut into chunks of ``B`` (the last one shorter). All int64, fixed shapes (from ``N``, ``E`` and ``B`` alone,
    unless :func:`work_list` is told that no row is longer than ``B``: then ``P = N`` and ``S = R = 0``). Every row
    whole in row order (``whole_rows``): ``work`` is ``offsets`` itself, 1-D in its own dtype (item ``i`` is row
    ``i``, no list built; the kernels' ``WHOLE``, see :func:`~cudnn_gnn.backends.triton.kernels.n_items`), and
    ``S = R = 0``.

    ``work [P, 4]`` (``P = N + E // B``): ``(row, start, end, slot)``, heaviest first (by ``end - start``; ties in
    row order); ``slot == -1``: the whole row, its results written in place;
    ``slot >= 0``: a chunk of a hub row, its partial results in slot ``slot``; ``slot == -2``: padding (empty,
    writes nothing). A row with no edges is one empty whole item (it writes zeros). ``hub_work [S, 4]`` (``S = E //
    B + R``): the chunk items in slot order, then padding. ``hubs [R, 3]`` (``R = min(N, E // (B + 1))``): ``(row,
    first slot, chunk count)`` per hub row in row order, then padding rows with count 0. A hub row's slots are
    consecutive, in the order of its edges."""

    work: Tensor
    hub_work: Tensor
    hubs: Tensor


def work_list(offsets: Tensor, num_edges: int, chunk: int, max_degree: int | None = None, *,
              whole_rows: bool = False) -> WorkList:
    """Build the :class:`WorkList` of ``offsets`` with chunks of at most ``chunk`` edges; fixed-shape torch ops only
    (no host sync, traceable by ``torch.compile``).

    ``max_degree``, the largest row length where the caller knows it (a static graph's cached
    :meth:`~cudnn_gnn.CscGraph.max_degrees`): with no row longer than ``chunk`` the lists hold no chunk, padding or
    hub entries (``P = N``, ``S = R = 0``), so the launchers skip every hub launch (merges, the backward's pass-1
    launch): on a small graph, six of a step's nine launches; heaviest row first (one sort). ``whole_rows``: every
    row one item whatever its length, in row order (a long row walked whole by one program: right for any lengths,
    fast while rows are short, and then their order hardly matters): a graph marked ``short_rows``, such as a
    sampled block, for its destinations and its sources, rebuilt every call: the offsets are the list, no op at all.
    The known-degree list takes about ten small ops, the chunked list about seventy (sixty of them kernel
    launches), which counts on a host-bound sampled step. Unknown (``None``): the upper bounds above."""
    n = offsets.shape[0] - 1
    dev = offsets.device
    i64: dict[str, Any] = dict(device=dev, dtype=torch.int64)
    no_hubs = torch.empty(0, 4, **i64), torch.empty(0, 3, **i64)  # empty: nothing to fill, no kernel
    if whole_rows:  # rows in row order: the offsets are the list (a graph rebuilt every call builds nothing)
        return WorkList(offsets, *no_hubs)
    if n == 0:
        return WorkList(torch.empty(0, 4, **i64), *no_hubs)
    off = offsets.long()
    if max_degree is not None and max_degree <= chunk:
        row = torch.argsort(off.diff(), descending=True, stable=True)  # heaviest first, ties in row order
        work = torch.stack([row, off[row], off[row + 1], torch.full_like(row, -1)], 1)
        return WorkList(work, *no_hubs)
    r_max = min(n, num_edges // (chunk + 1))
    s_max = num_edges // chunk + r_max
    n_chunks = ((off.diff() + (chunk - 1)) // chunk).clamp_min(1)
    cum = n_chunks.cumsum(0)
    hub_slots = n_chunks * (n_chunks > 1)  # a hub row's chunk count, 0 for a whole row
    slot0 = hub_slots.cumsum(0) - hub_slots
    # per row: first item, first and last edge, first slot (-1: a whole row); one gather per item below
    table = torch.stack([cum - n_chunks, off[:-1], off[1:], torch.where(hub_slots > 0, slot0, -1)])
    p = torch.arange(n + num_edges // chunk, **i64)
    row = torch.searchsorted(cum, p, right=True).clamp_max(n - 1)
    first, lo, hi, s0 = table[:, row].unbind(0)
    k = p - first
    start = lo + k * chunk
    end = torch.minimum(start + chunk, hi)
    valid = p < cum[-1]
    padding = torch.where(torch.arange(4, **i64) == 3, -2, 0)  # (0, 0, 0, -2), made on the device: no copy, no sync
    items = torch.where(valid[:, None], torch.stack([row, start, end, torch.where(s0 >= 0, s0 + k, -1)], 1), padding)
    work = items[torch.argsort(torch.where(valid, end - start, -1), descending=True, stable=True)]
    hub_work = items[torch.argsort((items[:, 3] < 0).to(torch.int8), stable=True)[:s_max]]
    hub_work = torch.where(hub_work[:, 3:] >= 0, hub_work, padding)  # empty ranges: the padding does no work
    hub_rows = torch.argsort((hub_slots == 0).to(torch.int8), stable=True)[:r_max]
    hubs = torch.stack([hub_rows, slot0[hub_rows], hub_slots[hub_rows]], 1)
    return WorkList(work, hub_work, hubs)
