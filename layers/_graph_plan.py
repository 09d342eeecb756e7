"""PyG's self-loop rule applied to a graph: :class:`GraphPlan` and its two builders.

A plan is the graph after PyG's self-loop rule (existing self-loops removed, ``num_loops`` loops ``i -> i``
appended at the end of the COO numbering) plus what a forward needs to lay out edge features and returned
attention in PyG's order. Two builders:

* :func:`eager_plan`: self-loops dropped exactly (one boolean mask, one host sync), converted to CSC once; the
  layers keep it between forwards (:mod:`._plan_cache`).
* :func:`static_plan` (under ``torch.compile``, or for a CscGraph marked rebuilt every call, such as the blocks of
  :func:`cudnn_gnn.sampled_blocks`): fixed-shape ops only (``sort``, ``searchsorted``, ``where``, ``cat``), so
  dynamo traces it without a graph break and CUDA never waits for the host. Existing
  self-loops cannot be dropped without a data-dependent shape, so they are *redirected* to one extra dummy
  destination (row ``num_dst``) whose output row is discarded: real destinations see exactly PyG's edge set.
  ``x_dst`` gets one zero row appended per forward for it. Node ids of a raw ``edge_index`` outside
  ``[0, num_src)`` / ``[0, num_dst)`` cannot be refused without a host read either: they are clamped into range
  (no kernel indexes out of bounds) and the plan's ``poison`` makes the layer's output NaN (never wrong numbers).
  A sparse adjacency's offsets (a CSR's ``crow_indices``, a CSC's ``ccol_indices``, a ``SparseTensor``'s
  ``rowptr``) are made well-formed the same way before they are expanded into per-edge ids (:func:`compressed_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn.graph import CscGraph, csc_offsets, storage_index_dtype

__all__ = ["GraphPlan", "clamped_ids", "compressed_ids", "eager_plan", "pair_order", "static_plan"]


@dataclass(eq=False)
class GraphPlan:
    """The graph one layer call runs on, and how to map PyG's edge order onto it.

    Attributes:
        graph: the CSC graph for the op; its COO numbering is PyG's post-self-loop edge order (eager plans)
            or ``[caller's E edges, num_loops loops]`` (static plans, see ``keep``).
        num_dst: real destination count (``graph.num_dst_nodes`` minus the dummy row of static plans).
        pad_dst: the graph has one dummy destination, row ``num_dst``, holding redirected self-loops.
        num_loops: self-loops appended (0 when the layer adds none).
        kept: ``[E']`` ids of the caller's edges that survive self-loop removal; None when all do or for
            static plans.
        loop_index: ``[E]`` per caller edge, the self-loop slot that its features feed for ``fill_value``
            reductions, ``num_loops`` (a discarded slot) for self-loops and destinations without a loop; None
            without the self-loop rule. Static plans build it on first read (edge features with a reducing
            ``fill_value``), from ``coo``.
        keep: static plans only: ``[E + num_loops]`` bool, which of the graph's COO edges PyG has; built on first
            read (returned attention, explanations), from ``coo``.
        coo: static plans with the self-loop rule: the caller's ``(src, dst)``, what ``loop_index`` and ``keep``
            are built from when read. A sampled step reads neither and skips their eight launches a layer.
        poison: static plans of a raw ``edge_index``: a float ``[]`` tensor, NaN where a node id was out of range
            (clamped into range for the graph) or a sparse adjacency's offsets were malformed (made well-formed),
            else 0; the layer adds it to its outputs. None: nothing to add.
        form: how the caller gave the graph: "coo", "edge_index", "csr", "csc", "sparse_coo" (a torch sparse COO
            adj_t), "sparse_tensor", "csc_graph".
        source: the structure PyG returns attention on when it is not the caller's own object (the
            self-loop form of a sparse input); None otherwise. Eager plans, the ones kept between calls, never
            hold the caller's tensor, so a cache entry dies with it; a static plan (built for one call, never
            kept) holds views of it in ``coo``.
    """

    graph: CscGraph
    num_dst: int
    pad_dst: bool = False
    num_loops: int = 0
    kept: Tensor | None = None
    loop_index_: Tensor | None = field(default=None, repr=False)
    form: str = "coo"
    source: Any = None
    coo: tuple[Tensor, Tensor] | None = field(default=None, repr=False)
    keep_: Tensor | None = field(default=None, repr=False)
    poison: Tensor | None = field(default=None, repr=False)
    _returned: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def loop_index(self) -> Tensor | None:
        """See the class docstring (``loop_index_`` holds it once built)."""
        if self.loop_index_ is None and self.coo is not None:
            self.loop_index_ = _loop_index(*self.coo, self.num_loops)
        return self.loop_index_

    @property
    def keep(self) -> Tensor | None:
        """See the class docstring (``keep_`` holds it once built)."""
        if self.keep_ is None and self.pad_dst and self.coo is not None:
            src, dst = self.coo
            self.keep_ = torch.cat([src != dst, torch.ones(self.num_loops, dtype=torch.bool, device=src.device)])
        return self.keep_


def loops(n: int, like: Tensor) -> Tensor:
    """``[n]`` node ids ``0..n-1`` in ``like``'s dtype and device (the self-loops' endpoints)."""
    return torch.arange(n, device=like.device, dtype=like.dtype)


def _static_csc(src: Tensor, dst: Tensor, num_src: int, num_dst: int) -> CscGraph:
    """COO -> CSC with fixed-shape ops only (no bincount, no host sync): traceable by dynamo."""
    dtype = storage_index_dtype(src.shape[0], num_src, num_dst + 1)
    sorted_dst, perm = torch.sort(dst.to(dtype), stable=True)
    offsets = csc_offsets(sorted_dst, num_dst, dtype)
    # rebuilt every call: no degree sync, so no automatic hub split
    return CscGraph.from_csc(offsets, src.index_select(0, perm).to(dtype), num_src, perm.to(dtype),
                             dst_index=sorted_dst, rebuilt_every_call=True, validate=False)


def _static_csc_in_order(src: Tensor, dst: Tensor, offsets: Tensor, num_src: int, num_dst: int,
                         num_loops: int) -> CscGraph:
    """What :func:`_static_csc` builds from ``[src, loops]`` and ``[dst_pad, loops]`` (self-loops redirected to row
    ``num_dst``, ``num_loops`` loops appended), the same tensors bitwise, for a ``(src, dst)`` ``[E]`` already in CSC
    order (``dst`` non-decreasing, ``offsets [num_dst + 1]`` its CSC offsets): one cumulative sum instead of a sort.

    A stable sort by destination keeps, per row ``d``, its edges that are not self-loops in their order, then its
    loop ``E + d`` (``d < num_loops``); row ``num_dst`` holds the self-loops in their order. With ``before[i]``
    the self-loops among the first ``i`` edges, edge ``i`` lands at ``i - before[i] + min(d, num_loops)`` (a
    self-loop at ``E - before[E] + num_loops + before[i]``), loop ``d`` at ``offsets[d + 1] - before[offsets[d +
    1]] + d``, and row ``d`` starts at ``offsets[d] - before[offsets[d]] + min(d, num_loops)``. Fixed-shape ops."""
    e = src.shape[0]
    dtype = storage_index_dtype(e + num_loops, num_src, num_dst + 2)
    is_loop = src == dst
    before = torch.cat([is_loop.new_zeros(1, dtype=torch.int64), torch.cumsum(is_loop, 0)])  # [E + 1]
    off = offsets.long()
    ar = loops(num_loops, dst)
    row_start = off - before.index_select(0, off) + loops(num_dst + 1, off).clamp(max=num_loops)
    edge_ids = loops(e, dst)
    self_loop_pos = before[:e] + (e + num_loops - before[e])
    edge_pos = torch.where(is_loop, self_loop_pos, edge_ids - before[:e] + dst.clamp(max=num_loops))
    loop_end = off[1:num_loops + 1]
    loop_pos = loop_end - before.index_select(0, loop_end) + ar
    pos = torch.cat([edge_pos, loop_pos])
    perm = torch.empty_like(pos).scatter_(0, pos, loops(e + num_loops, pos))  # the stable sort's permutation
    new_offsets = torch.cat([row_start, row_start.new_full((1,), e + num_loops)]).to(dtype)
    dst_pad = torch.where(is_loop, num_dst, dst)
    sorted_dst = torch.cat([dst_pad, ar]).to(dtype).index_select(0, perm)
    return CscGraph.from_csc(new_offsets, torch.cat([src, ar]).index_select(0, perm).to(dtype), num_src,
                             perm.to(dtype), dst_index=sorted_dst, rebuilt_every_call=True, validate=False)


def _loop_index(src: Tensor, dst: Tensor, num_loops: int) -> Tensor:
    drop = (src == dst) | (dst >= num_loops)
    return torch.where(drop, torch.full_like(dst, num_loops), dst)


def static_plan(ei: Tensor, num_src: int, num_dst: int, num_loops: int | None, form: str, source: Any, *,
                offsets: Tensor | None = None, poison: Tensor | None = None) -> GraphPlan:
    """A plan from fixed-shape ops only (see the module docstring); ``num_loops=None``: no self-loop rule.
    ``offsets``: ``[num_dst + 1]`` CSC offsets of ``ei`` where ``ei`` is already in CSC order (a CscGraph whose
    COO order is its CSC order): the plan's CSC then comes from a cumulative sum instead of a sort. A raw
    ``edge_index`` (any ``form`` but ``"csc_graph"``, whose graph was checked when built or trusted on the caller's
    word) has its node ids clamped into range and the plan a ``poison`` (see :class:`GraphPlan`); ``poison``: what
    the caller's conversion found already (a sparse adjacency's offsets, :func:`compressed_ids`), added to it."""
    src, dst = ei[0], ei[1]
    if form != "csc_graph":
        src, dst, clamp_poison = clamped_ids(src, dst, num_src, num_dst)
        poison = clamp_poison if poison is None else poison + clamp_poison
    if num_loops is None:
        return GraphPlan(_static_csc(src, dst, num_src, num_dst), num_dst, form=form, source=source, poison=poison)
    if offsets is not None:
        graph = _static_csc_in_order(src, dst, offsets, num_src, num_dst, num_loops)
        return GraphPlan(graph, num_dst, pad_dst=True, num_loops=num_loops, form=form, source=source, coo=(src, dst),
                         poison=poison)
    dst_pad = torch.where(src == dst, num_dst, dst)
    ar = loops(num_loops, src)
    graph = _static_csc(torch.cat([src, ar]), torch.cat([dst_pad, ar]), num_src, num_dst + 1)
    return GraphPlan(graph, num_dst, pad_dst=True, num_loops=num_loops, form=form, source=source, coo=(src, dst),
                     poison=poison)


def pair_order(major: Tensor, minor: Tensor, num_minor: int) -> tuple[Tensor, Tensor]:
    """``(key, perm)``: the pairs ``(major, minor)`` ``[n]`` (ids in range) sorted by ``major``, then ``minor``,
    equal pairs in their given order (a stable sort of one int64 key ``major * num_minor + minor``, which cannot
    overflow for ids below 2^31); ``key`` is the sorted key, so equal neighbours are repeated pairs."""
    key = major.long() * max(num_minor, 1) + minor.long()
    return torch.sort(key, stable=True)


def clamped_ids(src: Tensor, dst: Tensor, num_src: int, num_dst: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, dst)`` clamped into ``[0, num_src)`` / ``[0, num_dst)`` and a float ``[]`` tensor, NaN where any id
    was outside (fixed-shape ops, no host read). Edges with no node to point at are refused here (a shape fact)."""
    if src.numel() and (num_src == 0 or num_dst == 0):
        raise ValueError(f"edge_index must be empty for a graph of {num_src} source and {num_dst} destination nodes, "
                         f"got {src.numel()} edges")
    outside = (src < 0) | (src >= num_src) | (dst < 0) | (dst >= num_dst)
    poison = torch.where(outside.any(), float("nan"), 0.0)
    return src.clamp(0, max(num_src - 1, 0)), dst.clamp(0, max(num_dst - 1, 0)), poison


def compressed_ids(offsets: Tensor, num_entries: int) -> tuple[Tensor, Tensor]:
    """``[num_entries]`` the compressed-dimension id of each entry of a sparse adjacency (``offsets [n + 1]``: a
    CSR's rows, a CSC's columns) and a float ``[]`` tensor, NaN where ``offsets`` do not rise from 0 to
    ``num_entries`` without decreasing, else 0. Fixed-shape ops, no host read.

    Malformed offsets are first made well-formed (clamped into ``[0, num_entries]``, a running maximum, 0 first and
    ``num_entries`` last; well-formed ones are left as they are), so that the rows' spans tile the entries:
    ``repeat_interleave`` then writes exactly ``num_entries`` ids in ``[0, n)`` (given other spans it raises on a
    CPU, and on CUDA its kernel's device-side assert ends the process's CUDA context). The entries' other ids
    are not read here: the plan clamps them with these (:func:`static_plan`)."""
    n = offsets.numel() - 1  # the caller has checked the shape: n + 1 offsets for n >= 0 rows
    if num_entries and n == 0:  # no row to give an entry (a shape fact)
        raise ValueError(f"edge_index must be empty for a sparse adjacency whose offsets have 0 rows, got "
                         f"{num_entries} entries")
    pos = loops(n + 1, offsets)
    fixed = torch.cummax(offsets.clamp(0, num_entries), 0).values
    fixed = torch.where(pos == n, num_entries, torch.where(pos == 0, 0, fixed))
    poison = torch.where((fixed != offsets).any(), float("nan"), 0.0)
    ids = torch.repeat_interleave(loops(n, offsets), fixed.diff(), output_size=num_entries)
    return ids, poison


def eager_plan(ei: Tensor, num_src: int, num_dst: int, num_loops: int | None, form: str, source: Any) -> GraphPlan:
    """A plan with self-loops dropped exactly (one host sync) and an index-range check (one more)."""
    if num_loops is None:
        graph = CscGraph.from_edge_index(ei, size=(num_src, num_dst))
        return GraphPlan(graph, num_dst, form=form, source=source)
    src, dst = ei[0], ei[1]
    keep = torch.nonzero(src != dst).view(-1)
    kept: Tensor | None = keep
    base = ei
    if keep.numel() == src.numel():
        kept = None
    else:
        base = ei.index_select(1, keep)
    ar = loops(num_loops, ei)
    final = torch.cat([base, torch.stack([ar, ar])], dim=1)
    graph = CscGraph.from_edge_index(final, size=(num_src, num_dst))
    return GraphPlan(graph, num_dst, num_loops=num_loops, kept=kept, loop_index_=_loop_index(src, dst, num_loops),
                     form=form, source=source)
