"""GAT's backward with one feature-row gather per edge: a delta pass over the destinations, the source pass (the
only one that gathers rows: ``dout_i`` per out-edge), and a destination sum over the ``[E, H]`` buffer it wrote. No
program reads back what it stored itself: no barriers needed."""


from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import KernelDropout
from cudnn_gnn.backends.triton.kernels.backward_src import _out_edges
from cudnn_gnn.backends.triton.kernels.common import (
    ACTIVATION_CODES,
    _act,
    _act_grad,
    _coo_ids,
    _drop_factor,
    _head_group,
    _item,
    _logits,
    _merge_sum,
    _or,
    _partial,
    _sum,
    drop_args,
    drop_mode,
    n_items,
)
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["launch_gat_backward"]


@triton.jit
def _gat_delta_block(e0, end, h_off, hm, hc, hc_mask, sd, lse, acc,
                     indices_ptr, map_ptr, ssrc_ptr, sedge_ptr, drop_ptr, drop_thr, datt_ptr,
                     H, alpha,
                     HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, ACT: tl.constexpr,
                     BLOCK: tl.constexpr):
    """``acc += sum_e alpha_e datt_e`` over the CSC positions ``e0 .. e0 + BLOCK`` (clipped to ``end``) of a row."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, sd, sd, sd, sd,
                     map_ptr, ssrc_ptr, ssrc_ptr, ssrc_ptr, sedge_ptr, H, 0, alpha, False, HAS_MAP, HAS_EDGE, 0, ACT)
    a = tl.where(eh_mask, tl.exp(s - lse[None, :]), 0.0)
    if DROP != 0:
        a = a * _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP)
    return acc + _sum(a * tl.load(datt_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0), 0)


@cached_launch
@triton.jit
def _bwd_gat_delta_kernel(
    work_ptr, offsets_ptr, indices_ptr, map_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    drop_ptr, drop_thr, lse_ptr, dout_ptr, out_ptr, datt_ptr,
    delta_ptr, delta_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, HAS_DATT: tl.constexpr,
    ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """``delta_i = sum_e alpha_e (g_e + datt_e)`` per destination ``i`` and head, the softmax backward's row sum
    (FlashAttention's ``D = rowsum(dO * O)``): ``sum_e alpha_e g_e = <dout_i, out_i>`` per head, with ``out_i =
    sum_e alpha_e x_j`` the forward's per-head output (``out [Nd, H*C]``, any float dtype; dropout inside
    ``alpha``), so no source row is read. With ``HAS_DATT`` (a gradient on the returned attention) the row's edges
    add ``sum_e alpha_e datt_e``, from the per-node scores, ``lse`` and ``[E, H]`` data only.

    A whole row writes ``delta [Nd, H]``; a chunk of a hub row writes its edges' sum (plus the dot product if it is
    the row's first chunk) to its partial slot, merged in slot order afterwards."""
    row, start, end, slot = _item(work_ptr, WHOLE)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    first = (h_off * 0 + start) == tl.load(offsets_ptr + row).to(tl.int64)  # the dot product: once per row
    D = H * C
    dmask = hc_mask & first[:, None]
    g = tl.load(dout_ptr + row * D + hc, mask=dmask, other=0.0).to(tl.float32)
    delta = _sum(g * tl.load(out_ptr + row * D + hc, mask=dmask, other=0.0).to(tl.float32), 1)
    if HAS_DATT:
        sd = tl.load(sdst_ptr + row * H + h_off, mask=hm, other=0.0)
        lse = tl.load(lse_ptr + row * H + h_off, mask=hm, other=0.0)
        for e0 in range(start, end, BLOCK_E):
            delta = _gat_delta_block(e0, end, h_off, hm, hc, hc_mask, sd, lse, delta,
                                     indices_ptr, map_ptr, ssrc_ptr, sedge_ptr, drop_ptr, drop_thr,
                                     datt_ptr, H, alpha, HAS_MAP, HAS_EDGE, DROP, ACT, BLOCK_E)
    tl.store(delta_ptr + row * H + h_off, delta, mask=hm & whole)
    tl.store(delta_part_ptr + tl.maximum(slot, 0) * H + h_off, delta, mask=hm & part)


@triton.jit
def _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                   rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, drop_ptr, drop_thr,
                   lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                   H, D, alpha,
                   HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DROP: tl.constexpr, HAS_DATT: tl.constexpr,
                   ACT: tl.constexpr, REV_DST: tl.constexpr, BLOCK: tl.constexpr):
    """One block of a source's out-edges (reverse-CSC positions ``k0 .. k0 + BLOCK``): the softmax and score
    gradients of each edge, and ``dx_j``'s and ``d score_src_j``'s sums."""
    k = k0 + tl.arange(0, BLOCK)
    k_mask = k < end
    kh_mask = k_mask[:, None] & hm[None, :]
    e_pos, i = _out_edges(k, k_mask, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, REV_DST)
    coo = _coo_ids(map_ptr, e_pos, k_mask, HAS_MAP)
    ih = i[:, None] * H + h_off[None, :]
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
        mk = _drop_factor(e_pos, h_off, kh_mask, drop_ptr, drop_thr, H, DROP)
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
    ACT: tl.constexpr, REV_DST: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """GAT's source pass, the one that gathers feature rows: for source ``j`` (a work item over reverse-CSC
    positions) and each head of the program's group, ``x_j`` is loaded once and each out-edge ``e = (j -> i)``
    gathers ``dout_i``; from the per-node scores, ``lse_i`` and ``delta_i`` it recomputes ``p_e = exp(act(z_e) -
    lse_i)`` (``z_e = score_src[j] + score_dst[i] + score_edge[e]``) and ``alpha_e = p_e m_e``, and forms
    ``g_e = <dout_i, x_j> + datt_e``, ``ds_e = p_e (m_e g_e - delta_i)``, ``dz_e = ds_e act'(z_e)``. Writes
    ``dx_j = sum_e alpha_e dout_i``, ``d score_src_j = sum_e dz_e``, ``dz`` to ``dz_buf [E, H]`` (CSC order) for the
    destination sum, and with edge scores ``d score_edge = dz`` (COO order: each edge once, by its source's
    program). A chunk of a hub source writes its sums to its partial slot (merged in a fixed order afterwards)."""
    j, start, end, slot = _item(work_ptr, WHOLE)
    ps = tl.maximum(slot, 0)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C)
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
                                 H, D, alpha, HAS_MAP, HAS_EDGE, DROP, HAS_DATT, ACT, REV_DST, BLOCK_E)
    for k0 in range(full_end, end, BLOCK_E):
        dx, dss = _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, drop_ptr,
                                 drop_thr, lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                                 H, D, alpha, HAS_MAP, HAS_EDGE, DROP, HAS_DATT, ACT, REV_DST, BLOCK_E)
    tl.store(dx_src_ptr + j * D + hc, dx, mask=hc_mask & whole[:, None])
    tl.store(dx_part_ptr + ps * D + hc, dx, mask=hc_mask & part[:, None])
    tl.store(dssrc_ptr + j * H + h_off, dss, mask=hm & whole)
    tl.store(dss_part_ptr + ps * H + h_off, dss, mask=hm & part)


@cached_launch
@triton.jit
def _bwd_gat_dst_kernel(work_ptr, dz_buf_ptr, dsdst_ptr, dsd_part_ptr, H,
                        BLOCK_E: tl.constexpr, BIG_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr):
    """``d score_dst_i = sum_e dz_e`` over destination ``i``'s in-edges, for the heads of the program's group: a
    contiguous range of ``dz_buf [E, H]`` (CSC order); no feature rows, no indices. A chunk of a hub row writes its
    sum to its partial slot."""
    row, start, end, slot = _item(work_ptr, WHOLE)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    hm = h_off < H
    acc = tl.full([HG], 0.0, tl.float32)
    big_end = start + (end - start) // BIG_E * BIG_E
    for e0 in range(start, big_end, BIG_E):
        e_pos = e0 + tl.arange(0, BIG_E)
        acc += _sum(tl.load(dz_buf_ptr + e_pos[:, None] * H + h_off[None, :],
                            mask=(e_pos < end)[:, None] & hm[None, :], other=0.0), 0)
    for e0 in range(big_end, end, BLOCK_E):
        e_pos = e0 + tl.arange(0, BLOCK_E)
        acc += _sum(tl.load(dz_buf_ptr + e_pos[:, None] * H + h_off[None, :],
                            mask=(e_pos < end)[:, None] & hm[None, :], other=0.0), 0)
    tl.store(dsdst_ptr + row * H + h_off, acc, mask=hm & ((h_off * 0 + slot) == -1))
    tl.store(dsd_part_ptr + tl.maximum(slot, 0) * H + h_off, acc, mask=hm & ((h_off * 0 + slot) >= 0))


def launch_gat_backward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, row_work: Tensor,
                        row_hub_work: Tensor, row_hubs: Tensor, rev_to_csc: Tensor, dst_index: Tensor,
                        rev_dst: Tensor | None, src_work: Tensor, src_hub_work: Tensor, src_hubs: Tensor,
                        x_src: Tensor, score_src: Tensor, score_dst: Tensor, score_edge: Tensor | None,
                        drop: KernelDropout | None, lse: Tensor, out: Tensor, dout: Tensor, datt: Tensor | None,
                        dx_src: Tensor, dscore_src: Tensor, dscore_dst: Tensor, dscore_edge: Tensor | None, *,
                        heads: int, act: str, alpha: float) -> None:
    """GAT's backward with one feature-row gather per edge: fills ``dx_src [Ns, H*C]``, ``dscore_src [Ns, H]``,
    ``dscore_dst [Nd, H]`` and, with edge scores, ``dscore_edge [E, H]`` (COO; float32 scores).

    ``out [Nd, H*C]``: the forward's per-head output (any float dtype); ``dout [Nd, H*C]``: its gradient (any float
    dtype); ``datt [E, H]`` float32 COO, the returned attention's gradient, or None; ``rev_dst``: as for
    :func:`launch_backward_src`. Three passes, in this order:
    :func:`_bwd_gat_delta_kernel` over the destinations, :func:`_bwd_gat_src_kernel` over the sources (the only
    one that gathers feature rows: ``dout_i`` per edge), :func:`_bwd_gat_dst_kernel` over the destinations, through
    ``delta [Nd, H]`` and ``dz [E, H]`` float32 buffers allocated here (one ``[E, H]`` buffer where the two-gather
    backward takes two); where the work lists hold hubs, four ``_merge_sum`` launches more (``delta``, ``dx_src``,
    ``dscore_src``, ``dscore_dst``), each in slot order.

    Launch shapes: the source pass and the delta pass take :func:`launch_shape` of ``"gat_src"`` and
    ``"gat_delta"`` (:data:`TUNED_SHAPES` where the tile is at most 256 wide); the destination sum, whose rows are
    one float a head, :func:`default_launch_shape` of heads of width 1 (8 heads: blocks of 16 and 64 edges, 2 warps)."""
    nd, e, n_src, n_rows = offsets.shape[0] - 1, indices.shape[0], n_items(src_work), n_items(row_work)
    c, groups, cfg = tuning.launch_config(x_src, heads, False, "gat_src", dout)
    d = heads * c
    f32: dict[str, Any] = dict(device=x_src.device, dtype=torch.float32)
    delta = torch.empty(nd, heads, **f32)
    dz_buf = torch.empty(e, heads, **f32)
    has_map, has_edge = map_csc_to_coo is not None, score_edge is not None
    dropout = drop_args(drop, lse)
    flags = dict(HAS_MAP=has_map, HAS_EDGE=has_edge, DROP=drop_mode(drop), HAS_DATT=datt is not None,
                 ACT=ACTIVATION_CODES[act])
    if n_rows:  # whole rows and hub chunks in one launch; the chunks' sums merged per row in slot order
        _, delta_groups, delta_cfg = tuning.launch_config(x_src, heads, False, "gat_delta", dout)
        delta_part = _partial(row_hub_work.shape[0], heads, lse)
        _bwd_gat_delta_kernel[(n_rows, delta_groups)](
            row_work, offsets, indices, _or(map_csc_to_coo, indices), score_src, score_dst, _or(score_edge, lse),
            *dropout, lse, dout, out, _or(datt, lse), delta, delta_part,
            heads, c, alpha, WHOLE=row_work.dim() == 1, **flags, **delta_cfg)
        _merge_sum(row_hubs, delta_part, delta, heads)
    if n_src:
        dx_part = _partial(src_hub_work.shape[0], d, lse)
        dss_part = _partial(src_hub_work.shape[0], heads, lse)
        _bwd_gat_src_kernel[(n_src, groups)](
            src_work, rev_to_csc, dst_index, _or(rev_dst, dst_index), _or(map_csc_to_coo, rev_to_csc),
            x_src, score_src, score_dst, _or(score_edge, lse), *dropout,
            lse, delta, dout, _or(datt, lse), dz_buf, dx_src, dscore_src, _or(dscore_edge, lse), dx_part, dss_part,
            heads, c, alpha, REV_DST=rev_dst is not None, WHOLE=src_work.dim() == 1, **flags, **cfg)
        _merge_sum(src_hubs, dx_part, dx_src, d)
        _merge_sum(src_hubs, dss_part, dscore_src, heads)
    if n_rows:
        block_e, big_e, hg, _, num_warps = tuning.default_launch_shape(heads, 1, False, tuning.MAX_TILE_D)
        dsd_part = _partial(row_hub_work.shape[0], heads, lse)
        _bwd_gat_dst_kernel[(n_rows, tuning.cdiv(heads, hg))](
            row_work, dz_buf, dscore_dst, dsd_part, heads, BLOCK_E=block_e, BIG_E=big_e, WHOLE=row_work.dim() == 1,
            HG=hg, num_warps=num_warps)
        _merge_sum(row_hubs, dsd_part, dscore_dst, heads)
