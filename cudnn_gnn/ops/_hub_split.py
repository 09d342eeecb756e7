"""Exact GAT / GATv2 on a degree-bounded rewrite of the graph (``gat(..., max_degree=B)``, default ``"auto"``).

Why: the cuDNN GAT kernels' time follows the graph's largest degree, not its edge count (docs/performance.md,
"hubs"). The rewrite gives the kernels rows of at most ``B`` edges:

* every destination with more than ``B`` incoming edges becomes ``ceil(deg / B)`` *virtual destinations*, one per
  run of ``B`` consecutive CSC edges (the edges keep their CSC order, so edge features, masks and the CSC->COO
  map are untouched);
* every source with more than ``B`` outgoing edges becomes ``ceil(outdeg / B)`` *virtual sources* (copies of
  its features), its edges dealt to the copies in blocks of ``B``.

The kernels then compute, per virtual destination ``r`` of destination ``i`` and head ``h``, the softmax over its
own edges only. The exact answer is recovered with the per-row log-normaliser ``L_r = logsumexp_{e in r} s_e``
of the logits ``s_e`` of the split destinations' edges (:func:`merge_rows`): for GAT from per-node scores (the
logit is a sum of per-node terms), for GATv2 from ``[block, H, C]`` pieces recomputed in the backward. With
``w_r = exp(L_r - logsumexp_{r' of i} L_r')``, the output is ``out_i = sum_r w_r out_r``, and the attention of an
edge in row ``r`` is ``w_r`` times what the kernel returned. Autograd differentiates through ``w`` and through
the kernel's own backward on the bounded graph. The runner (:mod:`cudnn_gnn.ops.run`) drives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._segment import activation as apply_activation
from cudnn_gnn._segment import segment_logsumexp
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.spec import gat_attention_parts

__all__ = ["HubSplit", "hub_split", "merge_rows"]


@dataclass(frozen=True)
class HubSplit:
    """The degree-bounded rewrite of one graph, built once per ``(graph, max_degree)`` and cached on the graph.

    Only destinations with more than ``B`` edges (*hub destinations*) get more than one row, and only their
    edges need the log-normaliser merge; every other row is its destination's whole softmax. So the merge
    works on the hub edges alone (the ``hub_*`` fields), not on all ``E``.
    """

    graph: CscGraph  # rows: virtual destinations; sources: virtual sources; same CSC edge order and map
    dst_of_row: Tensor  # [num_rows] long: the real destination of each row
    row_of_dst: Tensor  # [Nd] long: the first row of each destination (its only row unless it is a hub)
    src_of_vsrc: Tensor  # [num_vsrc] long: the real source of each virtual source
    hub_row: Tensor  # [R] long: the rows of hub destinations (ascending)
    hub_group: Tensor  # [R] long: per hub row, its hub destination's rank among hub destinations
    num_hub_dst: int
    hub_dst: Tensor  # [num_hub_dst] long: the hub destinations (ascending)
    hub_first: Tensor  # [num_hub_dst] long: the position in hub_row of each hub destination's first row
    hub_edge_row: Tensor  # [E_h] long: per hub edge, its row's position in hub_row
    hub_edge_src: Tensor  # [E_h] long: per hub edge, its real source
    hub_edge_dst: Tensor  # [E_h] long: per hub edge, its real destination
    hub_edge_hub: Tensor  # [E_h] long: per hub edge, its destination's rank among hub destinations
    hub_edge_coo: Tensor  # [E_h] long: per hub edge, its COO edge id (for edge features)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def row_of_coo_edge(self) -> Tensor:
        """``[E]`` long: the row of each COO edge (built on first use: only returned attention needs it)."""
        r = self._cache.get("row_of_coo_edge")
        if r is None:
            g = self.graph
            row_of_edge = g.dst_index.long()  # the split graph's destinations are the rows
            if g.map_csc_to_coo is None:
                r = row_of_edge
            else:
                r = torch.empty_like(row_of_edge).scatter_(0, g.map_csc_to_coo.long(), row_of_edge)
            self._cache["row_of_coo_edge"] = r
        return r


def hub_split(graph: CscGraph, max_degree: int) -> HubSplit | None:
    """The rewrite of ``graph`` with at most ``max_degree`` edges per destination and per source row, or ``None``
    when no node has more (then the plain call is already bounded). One host sync per new graph; kept on the
    graph (:meth:`CscGraph.derived`)."""
    return graph.derived(("hub_split", max_degree), lambda: _build_split(graph, max_degree))


def _build_split(graph: CscGraph, b: int) -> HubSplit | None:
    dev = graph.device
    offsets = graph.offsets.long()
    src = graph.indices.long()
    e = src.numel()
    deg = offsets[1:] - offsets[:-1]
    out_deg = torch.bincount(src, minlength=graph.num_src_nodes)
    if e == 0:
        return None
    # the degree maxima from what is built here anyway (graph.max_degrees() would recompute both and sync twice)
    largest = graph.derived_if_built("max_degrees") or (int(deg.max()), int(out_deg.max()))
    graph.set_max_degrees(*largest)
    if max(largest) <= b:
        return None
    n_dst = deg.numel()
    # Destinations: ceil(deg / B) rows each (one row for a destination without edges).
    rows_per_dst = torch.clamp((deg + b - 1) // b, min=1)
    first_row = torch.cumsum(rows_per_dst, 0) - rows_per_dst
    num_rows = int(rows_per_dst.sum())
    dst_of_row = torch.repeat_interleave(torch.arange(n_dst, device=dev), rows_per_dst, output_size=num_rows)
    local = torch.arange(num_rows, device=dev) - first_row[dst_of_row]
    row_start = offsets[:-1][dst_of_row] + local * b
    row_end = torch.minimum(row_start + b, offsets[1:][dst_of_row])
    row_end = torch.maximum(row_end, row_start)  # the single row of a destination without edges is empty
    new_offsets = torch.cat([row_start, row_end[-1:]])
    # Hub destinations (more than one row) and their edges: the only ones the merge touches. A hub's edges are
    # one CSC range, and every one of its rows holds at least one edge.
    is_hub = rows_per_dst > 1
    hub_rank = torch.cumsum(is_hub, 0) - 1
    hub_row = torch.nonzero(is_hub[dst_of_row]).view(-1)
    hub_group = hub_rank[dst_of_row[hub_row]]
    num_hub_dst = int(is_hub.sum())
    hub_dst = torch.nonzero(is_hub).view(-1)
    hub_deg = deg[hub_dst]
    e_h = int(hub_deg.sum())
    hub_edge_dst = torch.repeat_interleave(hub_dst, hub_deg, output_size=e_h)
    first_hub_edge = torch.cumsum(hub_deg, 0) - hub_deg
    hub_local = torch.arange(e_h, device=dev) - torch.repeat_interleave(first_hub_edge, hub_deg, output_size=e_h)
    hub_edge_pos = offsets[:-1][hub_edge_dst] + hub_local  # CSC position
    row_pos_in_hub = torch.full((num_rows,), -1, dtype=torch.long, device=dev)
    row_pos_in_hub[hub_row] = torch.arange(hub_row.numel(), device=dev)
    hub_edge_row = row_pos_in_hub[first_row[hub_edge_dst] + hub_local // b]
    hub_edge_src = src[hub_edge_pos]
    hub_edge_coo = hub_edge_pos if graph.map_csc_to_coo is None else graph.map_csc_to_coo.long()[hub_edge_pos]
    # Sources: ceil(outdeg / B) copies each; an edge goes to copy (its rank among the source's edges) // B.
    copies = torch.clamp((out_deg + b - 1) // b, min=1)
    first_copy = torch.cumsum(copies, 0) - copies
    num_vsrc = int(copies.sum())
    src_of_vsrc = torch.repeat_interleave(torch.arange(graph.num_src_nodes, device=dev), copies, output_size=num_vsrc)
    if num_vsrc == graph.num_src_nodes:
        vsrc = src  # no source hub: the sources stay as they are
    else:
        order = torch.sort(src, stable=True)[1]
        start_of_src = torch.cumsum(out_deg, 0) - out_deg
        rank = torch.empty_like(src)
        rank[order] = torch.arange(e, device=dev) - start_of_src[src[order]]
        vsrc = first_copy[src] + rank // b
    idx_dtype = graph.index_dtype if max(num_vsrc, e, num_rows) < 2**31 - 1 else torch.int64
    split_graph = CscGraph(new_offsets.to(idx_dtype), vsrc.to(idx_dtype), num_vsrc, graph.map_csc_to_coo)
    hub_edge_hub = torch.repeat_interleave(torch.arange(num_hub_dst, device=dev), hub_deg, output_size=e_h)
    hub_first = row_pos_in_hub[first_row[hub_dst]]
    return HubSplit(split_graph, dst_of_row, first_row, src_of_vsrc, hub_row, hub_group, num_hub_dst, hub_dst,
                    hub_first, hub_edge_row, hub_edge_src, hub_edge_dst, hub_edge_hub, hub_edge_coo)


class _SortedGather(torch.autograd.Function):
    """``src.index_select(0, index)`` whose backward sums the gradient rows per index with a sorted segment sum
    instead of ``index_add``'s atomics, so that it repeats bitwise (on CUDA the determinism rests on
    ``torch.segment_reduce``'s per-segment loop; tests/gpu checks bitwise repeats of the split layer)."""

    @staticmethod
    def forward(ctx: Any, src: Tensor, index: Tensor, order: Tensor, targets: Tensor, lengths: Tensor) -> Tensor:
        ctx.save_for_backward(order, targets, lengths)
        ctx.n = src.shape[0]
        return src.index_select(0, index)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        order, targets, lengths = ctx.saved_tensors
        return _sorted_sum(ctx.n, (order, targets, lengths), grad), None, None, None, None


def _segments(split: HubSplit, name: str, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(order, targets, lengths)``: ``index`` sorted (stable), the distinct values and how often each occurs.
    Built once per split and index (one host sync), kept on the split."""
    key = ("segments", name)
    got = split._cache.get(key)
    if got is None:
        order = torch.sort(index, stable=True)[1]
        targets, lengths = torch.unique_consecutive(index.index_select(0, order), return_counts=True)
        got = split._cache[key] = (order, targets, lengths)
    return got


def _sorted_sum(n: int, segments: tuple[Tensor, Tensor, Tensor], values: Tensor) -> Tensor:
    """``zeros(n, ...).index_add(0, index, values)`` in a fixed order: a segment sum over the sorted rows, then
    one write per target (the index's ``_segments``)."""
    order, targets, lengths = segments
    sums = torch.segment_reduce(values.index_select(0, order), "sum", lengths=lengths, axis=0)
    return values.new_zeros((n, *values.shape[1:])).index_copy(0, targets, sums)


def gather(split: HubSplit, name: str, src: Tensor, index: Tensor, deterministic: bool) -> Tensor:
    """``src.index_select(0, index)``; with ``deterministic`` its backward avoids atomics (``_SortedGather``)."""
    if not deterministic or not torch.is_grad_enabled() or not src.requires_grad:
        return src.index_select(0, index)
    return _SortedGather.apply(src, index, *_segments(split, name, index))


def scatter_sum(split: HubSplit, name: str, values: Tensor, index: Tensor, n: int, deterministic: bool) -> Tensor:
    """``zeros(n, ...).index_add(0, index, values)``; with ``deterministic`` in a fixed order (``_sorted_sum``)."""
    if not deterministic:
        return values.new_zeros((n, *values.shape[1:])).index_add(0, index, values)
    return _sorted_sum(n, _segments(split, name, index), values)


def _segment_logsumexp(split: HubSplit, name: str, values: Tensor, segment: Tensor, num_segments: int,
                       deterministic: bool) -> Tensor:
    """``[num_segments, H]`` log-sum-exp per segment (:func:`cudnn_gnn._segment.segment_logsumexp`); with
    ``deterministic`` its sum of exponentials runs in a fixed order (``scatter_sum``)."""
    return segment_logsumexp(values, segment, num_segments,
                             lambda v, i, n: scatter_sum(split, name, v, i, n, deterministic))


def merge_rows(split: HubSplit, x_src: Tensor, x_dst: Tensor, attn_weights: Tensor, edge_attr: Tensor | None,
               heads: int, activation: str, activation_alpha: float, row_out: Tensor,
               row_att: Tensor | None, *, v2: bool = False, deterministic: bool = False,
               lin_edge_weight: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Combine the kernels' per-row results (``row_out [rows, H*C]`` per-head, ``row_att [E, H]`` COO order or
    None) into the exact per-destination output ``[Nd, H, C]`` (the kernels' dtype) and attention ``[E, H]``.

    A row of a destination that has only one row is that destination's softmax already (weight 1) and passes
    through. The rows of a hub destination ``i`` are summed in float32 (float64 stays) with weights
    ``w_r = exp(L_r - logsumexp_{r' of i} L_r')`` from their log-normalisers ``L_r``, computed over the hub
    edges only: for GAT from per-node scores, for GATv2 from ``[chunk, H, C]`` blocks of the hub edges, each
    recomputed in the backward instead of kept (``_gatv2_hub_logits``). Index gathers use
    ``index_select`` (its backward is an ``index_add``; advanced indexing's backward sorts the indices, which
    profiled several times slower). With ``deterministic`` every sum over a varying number of terms (the gathers'
    backward included) runs as a sorted segment sum instead of with atomics. GATv2's ``edge_attr`` is projected, or
    raw with ``lin_edge_weight`` (then only the hub edges' rows are projected, block by block).
    """
    d = x_src.shape[1]
    c = d // heads
    f32 = torch.promote_types(x_src.dtype, torch.float32)  # float32 arithmetic for half inputs, float64 stays
    num_rows = split.dst_of_row.numel()
    rows = row_out.view(num_rows, heads, c)
    if split.num_hub_dst == 0:  # only sources were split: every row is its destination's whole softmax
        return rows, row_att
    if v2:
        s = _gatv2_hub_logits(split, x_src, x_dst, attn_weights, edge_attr, heads, activation, activation_alpha, f32,
                              deterministic, lin_edge_weight)
    else:
        s = _gat_hub_logits(split, x_src, x_dst, attn_weights, edge_attr, heads, activation, activation_alpha, f32,
                            deterministic)
    num_hub_rows = split.hub_row.numel()
    l_row = _segment_logsumexp(split, "hub_edge_row", s, split.hub_edge_row, num_hub_rows, deterministic)
    l_dst = _segment_logsumexp(split, "hub_group", l_row, split.hub_group, split.num_hub_dst, deterministic)
    w_hub = torch.exp(l_row - gather(split, "hub_group", l_dst, split.hub_group, deterministic))  # [R, H]
    # Rows of other destinations pass through (one gather, in the kernels' dtype); hub destinations get the
    # weighted sum of their rows, in float32.
    out = rows.index_select(0, split.row_of_dst)  # a new tensor: the hub destinations are corrected in place
    hub_rows = rows.index_select(0, split.hub_row)
    hub_out = scatter_sum(split, "hub_group", hub_rows.to(f32) * w_hub.unsqueeze(-1), split.hub_group,
                          split.num_hub_dst, deterministic)
    # out[hub] holds the hub's first row; add the difference (index_add_'s backward passes the gradient through,
    # index_copy_'s would clone it; hub_dst is unique, so no two additions meet)
    first = hub_rows.index_select(0, split.hub_first).to(f32)
    out.index_add_(0, split.hub_dst, (hub_out - first).to(out.dtype))
    att = None
    if row_att is not None:
        w = torch.ones(num_rows, heads, device=row_out.device, dtype=f32).index_copy(0, split.hub_row, w_hub)
        att = row_att * gather(split, "row_of_coo_edge", w, split.row_of_coo_edge(), deterministic)
    return out, att


def _per_head(a: Tensor, heads: int) -> Tensor:
    """``[H*C]`` per-head attention vector -> the block-diagonal ``[H*C, H]`` matrix with ``a_h`` in column h."""
    c = a.numel() // heads
    eye = torch.eye(heads, device=a.device, dtype=a.dtype)
    return (a.view(heads, c, 1) * eye.view(heads, 1, heads)).reshape(heads * c, heads)


def _gat_hub_logits(split: HubSplit, x_src: Tensor, x_dst: Tensor, attn_weights: Tensor, edge_attr: Tensor | None,
                    heads: int, activation: str, activation_alpha: float, f32: torch.dtype,
                    deterministic: bool) -> Tensor:
    """``[E_h, H]`` GAT logits of the hub edges from per-node scores (GAT's logit is a sum of per-node terms)."""
    d = x_src.shape[1]
    # per-node scores as one matrix product with the block-diagonal [D, H] attention matrix (no [N, H, C]
    # temporary); the destination side only for the hub destinations
    att_node, att_edge = gat_attention_parts(attn_weights, d)
    a_src, a_dst = att_node.to(f32).view(2, d)
    s_src = x_src.to(f32) @ _per_head(a_src, heads)
    s_dst = x_dst.index_select(0, split.hub_dst).to(f32) @ _per_head(a_dst, heads)
    s = (gather(split, "hub_edge_src", s_src, split.hub_edge_src, deterministic)
         + gather(split, "hub_edge_hub", s_dst, split.hub_edge_hub, deterministic))
    if edge_attr is not None and att_edge is not None:
        ce = edge_attr.shape[1] // heads
        a_edge = att_edge.to(f32).view(heads, ce)
        ea = edge_attr.index_select(0, split.hub_edge_coo).to(f32)
        s = s + (ea.view(-1, heads, ce) * a_edge).sum(-1)
    return apply_activation(s, activation, activation_alpha)


HUB_CHUNK_ELEMS = 2**26  # GATv2 logits of the hub edges in blocks of at most this many [edge, H, C] elements


def _gatv2_hub_logits(split: HubSplit, x_src: Tensor, x_dst: Tensor, attn_weights: Tensor,
                      edge_attr: Tensor | None, heads: int, activation: str, activation_alpha: float,
                      f32: torch.dtype, deterministic: bool, lin_edge_weight: Tensor | None = None) -> Tensor:
    """``[E_h, H]`` GATv2 logits ``a . act(x_j + x_i (+ f_e))`` of the hub edges, in blocks whose ``[n, H, C]``
    intermediates the backward recomputes (``torch.utils.checkpoint``) rather than keeps. ``f_e`` is a row of
    ``edge_attr``, or with ``lin_edge_weight`` ``edge_attr_e @ lin_edge_weight^T`` (projected per block)."""
    from torch.utils.checkpoint import checkpoint

    d = x_src.shape[1]
    c = d // heads
    a = attn_weights.to(f32).view(heads, c)

    def block(i: int, src: Tensor, dst: Tensor, coo: Tensor, xs: Tensor, xd: Tensor, a: Tensor,
              ea: Tensor | None, ew: Tensor | None) -> Tensor:
        z = (gather(split, f"hub_edge_src:{i}", xs, src, deterministic).to(f32)
             + gather(split, f"hub_edge_dst:{i}", xd, dst, deterministic).to(f32))
        if ea is not None:
            f = ea.index_select(0, coo).to(f32)
            z = z + (f if ew is None else torch.nn.functional.linear(f, ew.to(f32)))
        return (apply_activation(z.view(-1, heads, c), activation, activation_alpha) * a).sum(-1)

    n = split.hub_edge_src.numel()
    step = max(1, HUB_CHUNK_ELEMS // d)
    parts = []
    for i in range(0, n, step):
        sl = slice(i, i + step)
        args = (i, split.hub_edge_src[sl], split.hub_edge_dst[sl], split.hub_edge_coo[sl], x_src, x_dst, a,
                edge_attr, lin_edge_weight)
        if torch.is_grad_enabled() and n > step:
            parts.append(checkpoint(block, *args, use_reentrant=False))
        else:
            parts.append(block(*args))
    return parts[0] if len(parts) == 1 else torch.cat(parts)
