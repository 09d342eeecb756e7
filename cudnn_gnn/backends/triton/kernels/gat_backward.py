"""GAT's backward with one feature-row gather per edge: a delta pass over the destinations (dense over their rows),
the source pass (the only one that gathers rows: ``dout_i`` per out-edge), and a destination sum over the ``[E, H]``
buffer it wrote (a segmented sum in CSC order), which its reader completes per row (:class:`DstScoreGrad`). No
program reads back what it stored itself: no barriers needed."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import GatCall, SourceWalk
from cudnn_gnn.backends.triton.kernels.backward_src import _out_edges
from cudnn_gnn.backends.triton.kernels.common import (
    ACTIVATION_CODES,
    _act,
    _act_grad,
    _coo_ids,
    _drop_factor,
    _head_group,
    _idx,
    _item,
    _logits,
    _max,
    _merge_sum,
    _or,
    _partial,
    _sum,
    drop_args,
    drop_mode,
    n_items,
)
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["DstScoreGrad", "launch_gat_backward"]

DENSE_TILE = 4096
"""Elements of one input a program of the dense delta pass holds (its ``dout`` and ``out`` rows; the destination
sum's blocks: :func:`~cudnn_gnn.backends.triton.tuning.dst_sum_shape`)."""


@triton.jit
def _gat_delta_block(e0, end, h_off, hm, hc, hc_mask, sd, lse, acc,
                     indices_ptr, map_ptr, ssrc_ptr, sedge_ptr, drop_ptr, drop_thr, datt_ptr,
                     H, alpha,
                     HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, ACT: tl.constexpr,
                     BLOCK: tl.constexpr, I64: tl.constexpr):
    """``acc += sum_e alpha_e datt_e`` over the CSC positions ``e0 .. e0 + BLOCK`` (clipped to ``end``) of a row."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = _idx(tl.load(indices_ptr + e_pos, mask=e_mask, other=0), I64)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, sd, sd, sd, sd,
                     map_ptr, ssrc_ptr, ssrc_ptr, ssrc_ptr, sedge_ptr, H, 0, alpha, False, HAS_MAP, HAS_EDGE, 0, ACT,
                     I64)
    a = tl.where(eh_mask, tl.exp(s - lse[None, :]), 0.0)
    if DROP != 0:
        a = a * _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP, I64)
    return acc + _sum(a * tl.load(datt_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0), 0)


@cached_launch
@triton.jit
def _bwd_gat_delta_att_kernel(
    work_ptr, offsets_ptr, indices_ptr, map_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    drop_ptr, drop_thr, lse_ptr, dout_ptr, out_ptr, datt_ptr,
    delta_ptr, delta_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """The delta pass where the returned attention has a gradient ``datt [E, H]`` (COO): ``delta_i = <dout_i,
    out_i> + sum_e alpha_e datt_e`` per destination ``i`` and head (see :func:`_bwd_gat_delta_kernel`), the edge
    term from the per-node scores, ``lse`` and ``[E, H]`` data only, over the row work list.

    A whole row writes ``delta [Nd, H]``; a chunk of a hub row writes its edges' sum (plus the dot product if it is
    the row's first chunk) to its partial slot, merged in slot order afterwards."""
    row, start, end, slot = _item(work_ptr, WHOLE, I64)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    first = (h_off * 0 + start) == _idx(tl.load(offsets_ptr + row), I64)  # the dot product: once per row
    D = H * C
    dmask = hc_mask & first[:, None]
    g = tl.load(dout_ptr + row * D + hc, mask=dmask, other=0.0).to(tl.float32)
    delta = _sum(g * tl.load(out_ptr + row * D + hc, mask=dmask, other=0.0).to(tl.float32), 1)
    sd = tl.load(sdst_ptr + row * H + h_off, mask=hm, other=0.0)
    lse = tl.load(lse_ptr + row * H + h_off, mask=hm, other=0.0)
    for e0 in range(start, end, BLOCK_E):
        delta = _gat_delta_block(e0, end, h_off, hm, hc, hc_mask, sd, lse, delta,
                                 indices_ptr, map_ptr, ssrc_ptr, sedge_ptr, drop_ptr, drop_thr,
                                 datt_ptr, H, alpha, HAS_MAP, HAS_EDGE, DROP, ACT, BLOCK_E, I64)
    tl.store(delta_ptr + row * H + h_off, delta, mask=hm & whole)
    tl.store(delta_part_ptr + tl.maximum(slot, 0) * H + h_off, delta, mask=hm & part)


@cached_launch
@triton.jit
def _bwd_gat_delta_kernel(dout_ptr, out_ptr, sdst_ptr, lse_ptr, rec_ptr, N, H: tl.constexpr, C: tl.constexpr,
                          BLOCK_R: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr):
    """The delta pass, the softmax backward's row sum (FlashAttention's ``D = rowsum(dO * O)``): ``delta_i = sum_e
    alpha_e g_e = <dout_i, out_i>`` per row and head, with ``out_i = sum_e alpha_e x_j`` the forward's per-head
    output (dropout inside ``alpha``), so no source row and no edge is read. ``dout, out [N, H*C]`` (contiguous, any
    float dtype), ``score_dst, lse [N, H]`` float32 -> the destinations' record ``rec [N, 4, H] = (score_dst, lse,
    delta, unused)`` float32, what the source pass reads per out-edge in one place. A dense pass over ``BLOCK_R``
    consecutive rows and the ``HG`` heads of the program's group (axis 1 of the grid), no work list."""
    r = _idx(tl.program_id(0), I64) * BLOCK_R + tl.arange(0, BLOCK_R)
    h = _idx(tl.program_id(1), I64) * HG + tl.arange(0, HG)
    c = tl.arange(0, BLOCK_C)
    rh_mask = (r < N)[:, None] & (h < H)[None, :]
    mask = rh_mask[:, :, None] & (c < C)[None, None, :]
    at = r[:, None, None] * (H * C) + h[None, :, None] * C + c[None, None, :]
    g = tl.load(dout_ptr + at, mask=mask, other=0.0).to(tl.float32)
    o = tl.load(out_ptr + at, mask=mask, other=0.0).to(tl.float32)
    rh = r[:, None] * H + h[None, :]
    rec = rec_ptr + r[:, None] * (4 * H) + h[None, :]
    tl.store(rec, tl.load(sdst_ptr + rh, mask=rh_mask, other=0.0), mask=rh_mask)
    tl.store(rec + H, tl.load(lse_ptr + rh, mask=rh_mask, other=0.0), mask=rh_mask)
    tl.store(rec + 2 * H, _sum(g * o, 2), mask=rh_mask)


@triton.jit
def _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                   rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, drop_ptr, drop_thr,
                   lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                   H, D, alpha,
                   HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, HAS_DATT: tl.constexpr,
                   ACT: tl.constexpr, REV_DST: tl.constexpr, RS: tl.constexpr, BLOCK: tl.constexpr, I64: tl.constexpr):
    """One block of a source's out-edges (reverse-CSC positions ``k0 .. k0 + BLOCK``): the softmax and score
    gradients of each edge, and ``dx_j``'s and ``d score_src_j``'s sums. ``score_dst``, ``lse`` and ``delta`` are
    read at ``i * RS + h``: ``RS = 4H`` where they are one record a destination, ``H`` where three tensors."""
    k = k0 + tl.arange(0, BLOCK)
    k_mask = k < end
    kh_mask = k_mask[:, None] & hm[None, :]
    e_pos, i = _out_edges(k, k_mask, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, REV_DST, I64)
    coo = _coo_ids(map_ptr, e_pos, k_mask, HAS_MAP, I64)
    ih = i[:, None] * RS + h_off[None, :]
    coo_h = coo[:, None] * H + h_off[None, :]
    t = ssj[None, :] + tl.load(sdst_ptr + ih, mask=kh_mask, other=0.0)
    if HAS_EDGE:
        t += tl.load(sedge_ptr + coo_h, mask=kh_mask, other=0.0)
    p = tl.where(kh_mask, tl.exp(_act(t, ACT, alpha) - tl.load(lse_ptr + ih, mask=kh_mask, other=0.0)), 0.0)
    tile_mask = k_mask[:, None, None] & hc_mask[None, :, :]  # the one feature row gathered per edge:
    g_out = tl.load(dout_ptr + i[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    g = _sum(g_out * xj[None, :, :], 2)  # <dout_i, x_j> per head
    if HAS_DATT:
        g += tl.load(datt_ptr + coo_h, mask=kh_mask, other=0.0)
    if DROP != 0:
        mk = _drop_factor(e_pos, h_off, kh_mask, drop_ptr, drop_thr, H, DROP, I64)
        a = p * mk
        ds = p * (mk * g - tl.load(delta_ptr + ih, mask=kh_mask, other=0.0))
    else:
        a = p
        ds = p * (g - tl.load(delta_ptr + ih, mask=kh_mask, other=0.0))
    dx += _sum(a[:, :, None] * g_out, 0)
    dz = tl.where(kh_mask, ds * _act_grad(t, ACT, alpha), 0.0)
    dss += _sum(dz, 0)
    tl.store(dz_buf_ptr + e_pos[:, None] * H + h_off[None, :], dz, mask=kh_mask)
    if HAS_EDGE:
        tl.store(dsedge_ptr + coo_h, dz, mask=kh_mask)
    return dx, dss


@cached_launch
@triton.jit
def _bwd_gat_src_kernel(
    work_ptr, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr,
    x_src_ptr, ssrc_ptr, sdst_ptr, sedge_ptr, drop_ptr, drop_thr,
    lse_ptr, delta_ptr, dout_ptr, datt_ptr,
    dz_buf_ptr, dx_src_ptr, dssrc_ptr, dsedge_ptr, dx_part_ptr, dss_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, HAS_DATT: tl.constexpr,
    ACT: tl.constexpr, REV_DST: tl.constexpr, RS: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """GAT's source pass, the one that gathers feature rows: for source ``j`` (a work item over reverse-CSC
    positions) and each head of the program's group, ``x_j`` is loaded once and each out-edge ``e = (j -> i)``
    gathers ``dout_i``; from the per-node scores, ``lse_i`` and ``delta_i`` it recomputes ``p_e = exp(act(z_e) -
    lse_i)`` (``z_e = score_src[j] + score_dst[i] + score_edge[e]``) and ``alpha_e = p_e m_e``, and forms
    ``g_e = <dout_i, x_j> + datt_e``, ``ds_e = p_e (m_e g_e - delta_i)``, ``dz_e = ds_e act'(z_e)``. Writes
    ``dx_j = sum_e alpha_e dout_i``, ``d score_src_j = sum_e dz_e``, ``dz`` to ``dz_buf [E, H]`` (CSC order) for the
    destination sum, and with edge scores ``d score_edge = dz`` (COO order: each edge once, by its source's
    program). A chunk of a hub source writes its sums to its partial slot (merged in a fixed order afterwards)."""
    j, start, end, slot = _item(work_ptr, WHOLE, I64)
    ps = tl.maximum(slot, 0)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    whole = (h_off * 0 + slot) == -1
    part = (h_off * 0 + slot) >= 0
    D = H * C
    xj = tl.load(x_src_ptr + j * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
    ssj = tl.load(ssrc_ptr + j * H + h_off, mask=hm, other=0.0)
    dx = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    dss = tl.full([HG], 0.0, tl.float32)
    # The full blocks in one loop, the short last block in another: the same blocks and arithmetic as one loop, but
    # the code Triton makes of it ran the arxiv source pass (8 x 32 fp32, blocks of two edges) in 864 us against
    # 981 us for the single loop on the H200 (profile_layers.py; benchmarks/results/h200-2026-12-03-4edf7c9/).
    full_end = start + (end - start) // BLOCK_E * BLOCK_E
    for k0 in range(start, full_end, BLOCK_E):
        dx, dss = _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, drop_ptr,
                                 drop_thr, lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                                 H, D, alpha, HAS_MAP, HAS_EDGE, DROP, HAS_DATT, ACT, REV_DST, RS, BLOCK_E, I64)
    for k0 in range(full_end, end, BLOCK_E):
        dx, dss = _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, drop_ptr,
                                 drop_thr, lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                                 H, D, alpha, HAS_MAP, HAS_EDGE, DROP, HAS_DATT, ACT, REV_DST, RS, BLOCK_E, I64)
    tl.store(dx_src_ptr + j * D + hc, dx, mask=hc_mask & whole[:, None])
    tl.store(dx_part_ptr + ps * D + hc, dx, mask=hc_mask & part[:, None])
    tl.store(dssrc_ptr + j * H + h_off, dss, mask=hm & whole)
    tl.store(dss_part_ptr + ps * H + h_off, dss, mask=hm & part)


@triton.jit
def _segment_sum(row_a, sum_a, row_b, sum_b):
    """The combine of a segmented inclusive sum over edges in CSC order: ``b`` continues ``a``'s sum while both are
    edges of one destination row."""
    return row_b, tl.where(row_a == row_b, sum_a + sum_b, sum_b)


@triton.jit
def _row_at(dst_index_ptr, e, E, I64: tl.constexpr):
    """The destination row of CSC position ``e`` (a scalar), -1 outside ``0 .. E``."""
    inside = (e >= 0) & (e < E)
    return tl.where(inside, _idx(tl.load(dst_index_ptr + tl.where(inside, e, 0)), I64), -1)


@triton.jit
def _crossing_runs(dst_index_ptr, b, E, zero, BLOCK: tl.constexpr, I64: tl.constexpr):
    """Block ``b``'s runs that cross its edges, as vectors shaped like ``zero``: ``head`` (its first run's row began
    before it), ``tail`` (its last run's row began in it and goes on past it), the rows of its first and last
    edges."""
    block_end = tl.minimum(b * BLOCK + BLOCK, E)
    first = zero + _row_at(dst_index_ptr, b * BLOCK, E, I64)
    last = zero + _row_at(dst_index_ptr, block_end - 1, E, I64)
    head = first == zero + _row_at(dst_index_ptr, b * BLOCK - 1, E, I64)
    tail = (last == zero + _row_at(dst_index_ptr, block_end, E, I64)) & ((head & (first == last)) == 0)
    return head, tail, first, last


@cached_launch
@triton.jit
def _bwd_gat_dst_kernel(dz_buf_ptr, dst_index_ptr, dsdst_ptr, part_ptr, E, H: tl.constexpr, HG: tl.constexpr,
                        BLOCK: tl.constexpr, I64: tl.constexpr):
    """``d score_dst_i = sum_e dz_e`` over destination ``i``'s in-edges, as a segmented sum in CSC order: program
    ``b`` reads the ``BLOCK`` edges ``b*BLOCK ..`` of ``dz_buf [E, H]`` and ``dst_index [E]`` (both in order,
    whole sectors), sums each row's run of edges with one segmented scan, and stores a row that begins and ends in
    the block to ``dsdst [Nd, H]``. A row that crosses the block's edge leaves its run's sum in ``part [B, 2, H]``:
    slot 0 the block's first run where its row began before the block (the whole block when one row covers it),
    slot 1 its last run where its row began in the block and goes on past it; the reader adds them up
    (:func:`_dst_score_rows`). Rows with no edge are not touched (zero: the reader knows them by their offsets)."""
    b = _idx(tl.program_id(0), I64)
    e = b * BLOCK + tl.arange(0, BLOCK)
    h = tl.arange(0, HG)
    e_mask = e < E
    eh_mask = e_mask[:, None] & (h < H)[None, :]
    row = _idx(tl.load(dst_index_ptr + e, mask=e_mask, other=-1), I64)
    following = _idx(tl.load(dst_index_ptr + e + 1, mask=(e + 1) < E, other=-1), I64)
    dz = tl.load(dz_buf_ptr + e[:, None] * H + h[None, :], mask=eh_mask, other=0.0)
    rows = tl.broadcast_to(row[:, None], (BLOCK, HG))
    _, run = tl.associative_scan((rows, dz), 0, _segment_sum)
    block_end = tl.minimum(b * BLOCK + BLOCK, E)
    zero = row * 0  # the block's scalars as vectors: they combine with its masks (and Triton's interpreter takes them)
    head, tail, first, last = _crossing_runs(dst_index_ptr, b, E, zero, BLOCK, I64)
    run_end = e_mask & ((row != following) | (e == block_end - 1))  # the last edge of each run in the block
    is_head = run_end & (row == first) & head
    is_tail = run_end & (row == last) & tail & (is_head == 0)
    whole = run_end & ((is_head | is_tail) == 0)
    tl.store(dsdst_ptr + row[:, None] * H + h[None, :], run, mask=whole[:, None] & eh_mask)
    at = b * (2 * H) + h[None, :] + tl.where(is_tail, H, 0)[:, None]
    tl.store(part_ptr + at, run, mask=(is_head | is_tail)[:, None] & eh_mask)


class DstScoreGrad(NamedTuple):
    """``d score_dst [Nd, H]`` float32 as GAT's destination sum (:func:`_bwd_gat_dst_kernel`) leaves it, for a kernel
    that reads it per row to complete (:func:`_dst_score_rows`): ``rows [Nd, H]``, set for the rows whose in-edges lie
    in one block of ``block`` edges (CSC order); ``part [B, 2, H]``, the runs of the rows that cross blocks (or a
    stand-in where the graph has no edge); ``offsets [Nd+1]``, the graph's, which tell the reader a row's blocks.
    Rows with no edge are zero and written nowhere. Completed by its one reader, the node scores' backward
    (:func:`~cudnn_gnn.backends.triton.kernels.node_scores.launch_node_scores_backward`), instead of by a launch of
    its own that would first zero the empty rows and add up the crossing rows' runs."""

    rows: Tensor
    part: Tensor
    offsets: Tensor
    block: int


@triton.jit
def _dst_score_rows(rows, r_mask, h_off, hm, dsdst_ptr, part_ptr, offsets_ptr, H,
                    BLOCK: tl.constexpr, I64: tl.constexpr):
    """``d score_dst [BLOCK_N, HG]`` (float32) of the destination ``rows [BLOCK_N]`` (``r_mask``: those that exist)
    and the heads ``h_off [HG]`` (``hm``), from :class:`DstScoreGrad`'s tensors: a row whose in-edges lie in one
    block of ``BLOCK`` edges from ``dsdst``; a row that crosses blocks, its run in its first block ``b0`` (slot 1)
    plus the following blocks' first runs (slot 0) up to its last block ``b1``, added in block order (the same float32
    sums, in the same order, for every call); a row with no edge, zero."""
    start = _idx(tl.load(offsets_ptr + rows, mask=r_mask, other=0), I64)
    end = _idx(tl.load(offsets_ptr + rows + 1, mask=r_mask, other=0), I64)
    has = r_mask & (end > start)
    b0 = start // BLOCK
    b1 = tl.maximum(end - 1, start) // BLOCK
    cross = has & (b1 > b0)
    g = tl.load(dsdst_ptr + rows[:, None] * H + h_off[None, :], mask=(has & (b1 == b0))[:, None] & hm[None, :],
                other=0.0)
    acc = tl.load(part_ptr + b0[:, None] * (2 * H) + H + h_off[None, :], mask=cross[:, None] & hm[None, :], other=0.0)
    for k in range(1, _max(tl.where(cross, b1 - b0, 0), 0) + 1):
        more = cross & (b0 + k <= b1)
        run = tl.load(part_ptr + (b0 + k)[:, None] * (2 * H) + h_off[None, :], mask=more[:, None] & hm[None, :],
                      other=0.0)
        acc = tl.where(more[:, None], acc + run, acc)
    return tl.where(cross[:, None], acc, g)


def launch_gat_backward(call: GatCall, walk: SourceWalk, scores: tuple[Tensor, Tensor], lse: Tensor, out: Tensor,
                        dout: Tensor, datt: Tensor | None, dx_src: Tensor, dscore_src: Tensor, dscore_dst: Tensor,
                        dscore_edge: Tensor | None) -> DstScoreGrad:
    """GAT's backward with one feature-row gather per edge: fills ``dx_src [Ns, H*C]``, ``dscore_src [Ns, H]``
    and, with edge scores, ``dscore_edge [E, H]`` (COO; float32 scores), and returns ``d score_dst [Nd, H]`` as
    :class:`DstScoreGrad`: ``dscore_dst`` (float32, contiguous) holds the rows whose in-edges lie in one block of the
    destination sum, its reader completes the others.

    ``scores``: the forward's ``(score_src [Ns, H], score_dst [Nd, H])``; ``out [Nd, H*C]``: its per-head output (any
    float dtype); ``dout [Nd, H*C]``: its gradient (any float dtype); ``datt [E, H]`` float32 COO, the returned
    attention's gradient, or None; ``walk``: as for :func:`launch_backward_src`. Three passes, in this order,
    through ``delta`` and ``dz [E, H]`` float32 buffers allocated here (one ``[E, H]`` buffer where the two-gather
    backward takes two):

    1. the delta pass: :func:`_bwd_gat_delta_kernel`, dense over the rows' ``dout`` and ``out``, writes ``delta``
       with ``score_dst`` and ``lse`` as one ``[Nd, 4, H]`` record a destination; with ``datt``,
       :func:`_bwd_gat_delta_att_kernel` over the row work list (plus a ``_merge_sum`` of its hub chunks);
    2. the source pass: :func:`_bwd_gat_src_kernel` over the source work list, the only one that gathers feature
       rows (``dout_i`` per out-edge; a ``_merge_sum`` each for ``dx_src`` and ``dscore_src`` where it holds hubs);
    3. the destination sum: :func:`_bwd_gat_dst_kernel`, a segmented sum of ``dz`` in CSC order over blocks of
       edges; the rows that cross blocks and the rows with no edge are left to the reader (:class:`DstScoreGrad`).

    Launch shapes: the source pass and the attention-gradient delta pass take :func:`launch_shape` of
    ``"gat_src"`` and ``"gat_delta"`` (:data:`TUNED_SHAPES` where the tile is at most 256 wide; ``call.launch``
    where it names them); the dense delta pass holds :data:`DENSE_TILE` elements a program; the destination sum
    takes :func:`~cudnn_gnn.backends.triton.tuning.dst_sum_shape` (``call.launch``'s ``"gat_dst"`` where named).
    Offsets: every launch takes the call's ``I64`` but the source pass, which takes
    :func:`~cudnn_gnn.backends.triton.tuning.kernel_int64_offsets` of ``"gat_src"`` on its tile (int64 on full
    256-wide tiles)."""
    offsets, indices, map_csc_to_coo, x_src, score_edge = (call.offsets, call.indices, call.map_csc_to_coo,
                                                          call.x_src, call.score_edge)
    row_work, row_hub_work, row_hubs = call.row_work, call.row_hub_work, call.row_hubs
    rev_to_csc, dst_index, rev_dst = walk.rev_to_csc, walk.dst_index, walk.rev_dst
    src_work, src_hub_work, src_hubs = walk.src_work, walk.src_hub_work, walk.src_hubs
    score_src, score_dst = scores
    heads, alpha, drop = call.heads, call.activation_alpha, call.kernel_dropout
    nd, e, n_src, n_rows = offsets.shape[0] - 1, indices.shape[0], n_items(src_work), n_items(row_work)
    c, groups, cfg = tuning.launch_config(x_src, heads, False, "gat_src", dout, call.launch)
    src_i64 = tuning.kernel_int64_offsets("gat_src", call.i64, cfg["HG"] * cfg["BLOCK_C"], c, cfg["BLOCK_C"])
    d = heads * c
    f32: dict[str, Any] = dict(device=x_src.device, dtype=torch.float32)
    dz_buf = torch.empty(e, heads, **f32)
    has_map, has_edge = map_csc_to_coo is not None, score_edge is not None
    dropout = drop_args(drop, lse)
    flags = dict(HAS_MAP=has_map, HAS_EDGE=has_edge, DROP=drop_mode(drop), ACT=ACTIVATION_CODES[call.activation])
    # what the source pass reads per out-edge of destination i, score_dst_i, lse_i and delta_i: one record
    # [Nd, 4, H] (three used, padded to four so that a record never straddles a 32-byte sector at H = 1 or a 128-byte
    # line at H = 8) or, with datt, three [Nd, H] tensors
    if datt is None:  # delta = <dout, out> per row and head: a dense pass over the rows, which writes the record
        rec = torch.empty(nd, 4, heads, **f32)
        hg_d, block_c_d = tuning.default_launch_shape(heads, c, False, tuning.MAX_TILE_D)[2:4]
        block_r = max(1, DENSE_TILE // (hg_d * block_c_d))
        _bwd_gat_delta_kernel[(tuning.cdiv(nd, block_r), tuning.cdiv(heads, hg_d))](
            dout, out, score_dst, lse, rec, nd, heads, c, BLOCK_R=block_r, HG=hg_d, BLOCK_C=block_c_d, I64=call.i64,
            num_warps=4)
        per_dst, rs = rec.unbind(1)[:3], 4 * heads
    else:  # plus each row's sum_e alpha_e datt_e: whole rows and hub chunks, the chunks merged in slot order
        delta = torch.empty(nd, heads, **f32)
        if n_rows:
            _, delta_groups, delta_cfg = tuning.launch_config(x_src, heads, False, "gat_delta", dout, call.launch)
            delta_part = _partial(row_hub_work.shape[0], heads, lse)
            _bwd_gat_delta_att_kernel[(n_rows, delta_groups)](
                row_work, offsets, indices, _or(map_csc_to_coo, indices), score_src, score_dst,
                _or(score_edge, lse), *dropout, lse, dout, out, datt, delta, delta_part,
                heads, c, alpha, WHOLE=row_work.dim() == 1, I64=call.i64, **flags, **delta_cfg)
            _merge_sum(row_hubs, delta_part, delta, heads, call.i64)
        per_dst, rs = (score_dst, lse, delta), heads
    if n_src:
        dx_part = _partial(src_hub_work.shape[0], d, lse)
        dss_part = _partial(src_hub_work.shape[0], heads, lse)
        _bwd_gat_src_kernel[(n_src, groups)](
            src_work, rev_to_csc, dst_index, _or(rev_dst, dst_index), _or(map_csc_to_coo, rev_to_csc),
            x_src, score_src, per_dst[0], _or(score_edge, lse), *dropout,
            per_dst[1], per_dst[2], dout, _or(datt, lse), dz_buf, dx_src, dscore_src, _or(dscore_edge, lse), dx_part,
            dss_part, heads, c, alpha, REV_DST=rev_dst is not None, WHOLE=src_work.dim() == 1, HAS_DATT=datt is not None,
            RS=rs, I64=src_i64, **flags, **cfg)
        _merge_sum(src_hubs, dx_part, dx_src, d, call.i64)
        _merge_sum(src_hubs, dss_part, dscore_src, heads, call.i64)
    block, hg, num_warps = tuning.dst_sum_shape(heads, call.launch)
    part = dscore_dst  # a stand-in where the graph has no edge: every row is then empty, no part is read
    if e:  # the segmented sum over dz_buf in CSC order; the reader joins the rows that cross blocks
        n_blocks = tuning.cdiv(e, block)
        part = torch.empty(n_blocks, 2, heads, **f32)
        _bwd_gat_dst_kernel[(n_blocks,)](dz_buf, dst_index, dscore_dst, part, e, heads, HG=hg, BLOCK=block,
                                         I64=call.i64, num_warps=num_warps)
    return DstScoreGrad(dscore_dst, part, offsets, block)
