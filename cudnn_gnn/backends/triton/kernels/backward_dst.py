"""The backward's destination pass (GATv2, and GAT's two-gather backward): per destination, the softmax backward
(``delta``, ``ds``) and the destination-side gradients; hub rows in a pass-1 launch over their chunks, then merges."""


from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import GatCall, Gatv2Call
from cudnn_gnn.backends.triton.kernels.common import (
    ACTIVATION_CODES,
    _act,
    _act_grad,
    _coo_ids,
    _drop_factor,
    _edge_rows,
    _fused_dim,
    _head_group,
    _idx,
    _item,
    _logits,
    _merge_sum,
    _or,
    _partial,
    _sum,
    drop_args,
    drop_mode,
    edge_inputs,
    n_items,
)
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["launch_backward_dst"]


@triton.jit
def _bwd_dst_block1(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, dout, lse, delta,
                    indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
                    drop_ptr, drop_thr, datt_ptr, alpha_buf_ptr, ds_buf_ptr,
                    H, D, alpha,
                    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
                    DROP: tl.constexpr, HAS_DATT: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr,
                    I64: tl.constexpr):
    """Pass 1 over one block: ``p`` and ``g`` per (edge, head) into the buffers, ``delta`` accumulated."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = _idx(tl.load(indices_ptr + e_pos, mask=e_mask, other=0), I64)
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    xj = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, xj, xi, aw, sd,
                     map_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE, ACT, I64)
    p = tl.where(eh_mask, tl.exp(s - lse[None, :]), 0.0)
    g = _sum(xj * dout[None, :, :], 2)
    if HAS_DATT:
        g += tl.load(datt_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
    a = p
    if DROP != 0:
        a = p * _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP, I64)
    delta += _sum(a * g, 0)
    buf_off = e_pos[:, None] * H + h_off[None, :]
    tl.store(alpha_buf_ptr + buf_off, p, mask=eh_mask)
    tl.store(ds_buf_ptr + buf_off, g, mask=eh_mask)
    return delta


@triton.jit
def _bwd_dst_block2(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, delta, dxi, datt_w, dsd,
                    indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
                    drop_ptr, drop_thr, alpha_buf_ptr, ds_buf_ptr, dedge_ptr, dsedge_ptr,
                    H, D, alpha,
                    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
                    DROP: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr, I64: tl.constexpr):
    """Pass 2 over one block: ``ds``, the per-edge gradients, the destination-side sums accumulated. With the fused
    projection (``DE > 0``) the edge gradients are left to :func:`_bwd_edge_kernel`, which reads ``ds``."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    coo = _coo_ids(map_ptr, e_pos, e_mask, HAS_MAP, I64)
    buf_off = e_pos[:, None] * H + h_off[None, :]
    p = tl.load(alpha_buf_ptr + buf_off, mask=eh_mask, other=0.0)
    g = tl.load(ds_buf_ptr + buf_off, mask=eh_mask, other=0.0)
    # this block overwrites the slots it just read, possibly from other threads (the stores below may take another
    # layout): every read lands before any of those writes
    tl.debug_barrier()
    if DROP != 0:
        mk = _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP, I64)
    else:
        mk = tl.where(eh_mask, 1.0, 0.0)
    ds = p * (mk * g - delta[None, :])
    tl.store(alpha_buf_ptr + buf_off, p * mk, mask=eh_mask)
    src = _idx(tl.load(indices_ptr + e_pos, mask=e_mask, other=0), I64)
    if V2:
        tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
        z = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask,
                    other=0.0).to(tl.float32) + xi[None, :, :]
        if HAS_EDGE:
            z += _edge_rows(coo, e_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE)
        dz = ds[:, :, None] * aw[None, :, :] * _act_grad(z, ACT, alpha)
        dz = tl.where(tile_mask, dz, 0.0)
        dxi += _sum(dz, 0)
        datt_w += _sum(ds[:, :, None] * tl.where(tile_mask, _act(z, ACT, alpha), 0.0), 0)
        if HAS_EDGE:
            if DE == 0:
                tl.store(dedge_ptr + coo[:, None, None] * D + hc[None, :, :], dz, mask=tile_mask)
        tl.store(ds_buf_ptr + buf_off, ds, mask=eh_mask)
    else:
        t = tl.load(ssrc_ptr + src[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0) + sd[None, :]
        if HAS_EDGE:
            t += tl.load(sedge_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        dz = tl.where(eh_mask, ds * _act_grad(t, ACT, alpha), 0.0)
        dsd += _sum(dz, 0)
        if HAS_EDGE:
            tl.store(dsedge_ptr + coo[:, None] * H + h_off[None, :], dz, mask=eh_mask)
        tl.store(ds_buf_ptr + buf_off, dz, mask=eh_mask)
    return dxi, datt_w, dsd


@cached_launch
@triton.jit
def _bwd_dst_kernel(
    work_ptr, indices_ptr, map_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, ew_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    drop_ptr, drop_thr,
    lse_ptr, dout_ptr, datt_ptr,
    alpha_buf_ptr, ds_buf_ptr, delta_part_ptr, delta_rows_ptr,
    dx_dst_ptr, dedge_ptr, dattw_ptr, dsdst_ptr, dsedge_ptr,
    dxd_part_ptr, dattw_part_ptr, dsd_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, DROP: tl.constexpr,
    HAS_DATT: tl.constexpr, ACT: tl.constexpr, ONLY_DELTA: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """Destination pass: for destination ``i`` and each head ``h`` of the program's group, recompute
    ``p_e = exp(s_e - lse_i)`` and ``alpha_e = p_e m_e``; ``g_e = <dout_i, x_j> + datt_e``;
    ``delta_i = sum_e alpha_e g_e``; ``ds_e = p_e (m_e g_e - delta_i)`` (the softmax backward with the dropout
    factor inside). Writes ``alpha`` and the logit gradient to ``[E, H]`` CSC buffers for the source pass (GAT:
    ``dz = ds act'(z)``; GATv2: ``ds``), and the destination-side and per-edge gradients.

    A whole row (``slot == -1``) does both passes itself. A hub row's chunks need the row's ``delta`` first: a
    launch with ``ONLY_DELTA`` runs pass 1 over each chunk (``p``, ``g`` into the buffers, the chunk's ``delta`` to
    its slot), the slots are summed per row in a fixed order into ``delta_rows``, and the main launch then runs only
    pass 2 over each chunk, writing its destination-side sums (GATv2 ``dx_dst`` and the attention-vector partial,
    GAT ``d score_dst``) to its slot, merged in a fixed order afterwards."""
    row, start, end, slot = _item(work_ptr, WHOLE, I64)
    ps = tl.maximum(slot, 0)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    D = H * C
    lse = tl.load(lse_ptr + row * H + h_off, mask=hm, other=0.0)
    dout = tl.load(dout_ptr + row * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
    if V2:
        xi = tl.load(x_dst_ptr + row * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
        aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
        sd = tl.full([HG], 0.0, tl.float32)
    else:
        xi = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        aw = xi
        sd = tl.load(sdst_ptr + row * H + h_off, mask=hm, other=0.0)

    # pass 1: p and g per edge (kept in the [E, H] buffers), delta of the row; in the main launch, a hub's chunk
    # skips it (done by the ONLY_DELTA launch) and reads its row's merged delta
    p1_end = end
    if not ONLY_DELTA:
        p1_end = tl.where(slot >= 0, start, end)
    delta = tl.full([HG], 0.0, tl.float32)
    for e0 in range(start, p1_end, BLOCK_E):
        delta = _bwd_dst_block1(e0, p1_end, h_off, hm, hc, hc_mask, xi, aw, sd, dout, lse, delta,
                                indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
                                drop_ptr, drop_thr, datt_ptr, alpha_buf_ptr, ds_buf_ptr, H, D, alpha,
                                V2, HAS_MAP, HAS_EDGE, DE, DROP, HAS_DATT, ACT, BLOCK_E, I64)
    if ONLY_DELTA:
        tl.store(delta_part_ptr + ps * H + h_off, delta, mask=hm & part)
    else:
        delta = tl.where(part, tl.load(delta_rows_ptr + row * H + h_off, mask=hm & part, other=0.0), delta)
        # pass 2: ds, then the destination-side and per-edge gradients. p and g were stored in pass 1 in the layout
        # of a reduction and are read back here in another: without the barrier a thread can read them before
        # another thread's store lands (a race the sequential interpreter cannot show)
        tl.debug_barrier()
        dxi = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        datt_w = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        dsd = tl.full([HG], 0.0, tl.float32)
        for e0 in range(start, end, BLOCK_E):
            dxi, datt_w, dsd = _bwd_dst_block2(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, delta, dxi, datt_w, dsd,
                                               indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr,
                                               sedge_ptr, drop_ptr, drop_thr, alpha_buf_ptr, ds_buf_ptr,
                                               dedge_ptr, dsedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE,
                                               DROP, ACT, BLOCK_E, I64)
        if V2:
            tl.store(dx_dst_ptr + row * D + hc, dxi, mask=hc_mask & whole[:, None])
            tl.store(dattw_ptr + row * D + hc, datt_w, mask=hc_mask & whole[:, None])
            tl.store(dxd_part_ptr + ps * D + hc, dxi, mask=hc_mask & part[:, None])
            tl.store(dattw_part_ptr + ps * D + hc, datt_w, mask=hc_mask & part[:, None])
        else:
            tl.store(dsdst_ptr + row * H + h_off, dsd, mask=hm & whole)
            tl.store(dsd_part_ptr + ps * H + h_off, dsd, mask=hm & part)


def launch_backward_dst(call: GatCall | Gatv2Call, scores: tuple[Tensor, Tensor] | None, lse: Tensor, dout: Tensor,
                        datt: Tensor | None, alpha_buf: Tensor, ds_buf: Tensor, dx_dst: Tensor | None,
                        dedge: Tensor | None, dattw_part: Tensor | None, dscore_dst: Tensor | None,
                        dscore_edge: Tensor | None) -> None:
    """Destination pass of ``call`` (GAT's two-gather backward with its node ``scores``, or GATv2's); fills
    ``alpha_buf``/``ds_buf`` ``[E, H]`` fp32 (CSC order) for the source pass and the destination-side outputs
    (GATv2: ``dx_dst``, ``dedge`` (projected edges only: with ``lin_edge_weight`` the edge gradients come from
    :func:`launch_backward_edge`), ``dattw_part [Nd + S, H*C]`` fp32, whose rows sum to the attention-vector
    gradient (every whole row's and used chunk slot's written here; zeros on entry where ``S > 0``: the hub rows' own
    rows and the unused slots are not); GAT: ``dscore_dst``, ``dscore_edge``).

    With hub rows: a pass-1 launch over the chunks (``row_hub_work``), their ``delta`` merged per row, then the main
    launch over every item and the merges of the chunks' destination-side sums."""
    work, hub_work, hubs = call.row_work, call.row_hub_work, call.row_hubs
    if n_items(work) == 0:
        return
    v2, heads, x_src, map_ = isinstance(call, Gatv2Call), call.heads, call.x_src, call.map_csc_to_coo
    nd = call.offsets.shape[0] - 1
    c, groups, cfg = tuning.launch_config(x_src, heads, v2, "dst", x_src, call.launch)
    d = heads * c
    n_slots, n_hubs = hub_work.shape[0], hubs.shape[0]
    delta_part = _partial(n_slots, heads, lse)
    delta_rows = _partial(nd if n_hubs else 0, heads, lse)
    dxd_part = _partial(n_slots if v2 else 0, d, lse)
    dsd_part = _partial(0 if v2 else n_slots, heads, lse)
    if dattw_part is None:
        dattw_rows = dattw_slots = lse
    else:
        dattw_rows, dattw_slots = dattw_part[:nd], dattw_part[nd:]
    rows, edge, edge_weight, has_edge = edge_inputs(call, scores, lse)
    drop = call.kernel_dropout
    common = (
        call.indices, _or(map_, call.indices), x_src, *rows, *drop_args(drop, lse),
        lse, dout, _or(datt, lse),
        alpha_buf, ds_buf, delta_part, delta_rows,
        _or(dx_dst, lse), _or(dedge, lse), dattw_rows, _or(dscore_dst, lse), _or(dscore_edge, lse),
        dxd_part, dattw_slots, dsd_part,
        heads, c, call.activation_alpha,
    )
    flags = dict(V2=v2, HAS_MAP=map_ is not None, HAS_EDGE=has_edge, DE=_fused_dim(edge, edge_weight),
                 DROP=drop_mode(drop), HAS_DATT=datt is not None, ACT=ACTIVATION_CODES[call.activation], I64=call.i64,
                 **cfg)
    if n_hubs:
        _bwd_dst_kernel[(n_slots, groups)](hub_work, *common, ONLY_DELTA=True, WHOLE=False, **flags)
        _merge_sum(hubs, delta_part, delta_rows, heads, call.i64)
    _bwd_dst_kernel[(n_items(work), groups)](work, *common, ONLY_DELTA=False, WHOLE=work.dim() == 1,
                                             **flags)
    if v2 and dx_dst is not None:
        _merge_sum(hubs, dxd_part, dx_dst, d, call.i64)
    if not v2 and dscore_dst is not None:
        _merge_sum(hubs, dsd_part, dscore_dst, heads, call.i64)
