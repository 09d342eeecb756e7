"""The backward's source pass over the reverse CSC (GATv2, and GAT's two-gather backward): per source, ``dx_j``
and, for GAT, the source-score gradient; hub sources in chunks merged in slot order."""


from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import GatCall, Gatv2Call, SourceWalk
from cudnn_gnn.backends.triton.kernels.common import (
    ACTIVATION_CODES,
    _act_grad,
    _coo_ids,
    _edge_rows,
    _fused_dim,
    _head_group,
    _idx,
    _item,
    _merge_sum,
    _or,
    _partial,
    _sum,
    edge_inputs,
    n_items,
)
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["launch_backward_src"]


@triton.jit
def _out_edges(k, k_mask, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, REV_DST: tl.constexpr, I64: tl.constexpr):
    """``(e_pos, i)`` (:func:`_idx`'s width) of the reverse-CSC positions ``k``: each out-edge's CSC position and destination.
    ``REV_DST``: the destination read from ``rev_dst [E]`` beside the position (both loads depend on ``k`` only),
    else ``dst_index[e_pos]`` (a load that waits for the first)."""
    e_pos = _idx(tl.load(rev_to_csc_ptr + k, mask=k_mask, other=0), I64)
    if REV_DST:
        i = _idx(tl.load(rev_dst_ptr + k, mask=k_mask, other=0), I64)
    else:
        i = _idx(tl.load(dst_index_ptr + e_pos, mask=k_mask, other=0), I64)
    return e_pos, i


@triton.jit
def _bwd_src_block(k0, end, xj, aw, h_off, hm, hc, hc_mask, dx, dss,
                   rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, x_dst_ptr, edge_ptr, ew_ptr, dout_ptr, alpha_buf_ptr,
                   ds_buf_ptr, H, D, alpha,
                   V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
                   ACT: tl.constexpr, REV_DST: tl.constexpr, BLOCK: tl.constexpr, I64: tl.constexpr):
    """One block of a source's out-edges (reverse-CSC positions ``k0 .. k0 + BLOCK``)."""
    k = k0 + tl.arange(0, BLOCK)
    k_mask = k < end
    kh_mask = k_mask[:, None] & hm[None, :]
    e_pos, i = _out_edges(k, k_mask, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, REV_DST, I64)
    tile_mask = k_mask[:, None, None] & hc_mask[None, :, :]
    buf_off = e_pos[:, None] * H + h_off[None, :]
    a = tl.load(alpha_buf_ptr + buf_off, mask=kh_mask, other=0.0)
    row_off = i[:, None, None] * D + hc[None, :, :]
    g = tl.load(dout_ptr + row_off, mask=tile_mask, other=0.0).to(tl.float32)
    dx += _sum(a[:, :, None] * g, 0)
    ds = tl.load(ds_buf_ptr + buf_off, mask=kh_mask, other=0.0)
    if V2:
        z = tl.load(x_dst_ptr + row_off, mask=tile_mask, other=0.0).to(tl.float32) + xj[None, :, :]
        if HAS_EDGE:
            coo = _coo_ids(map_ptr, e_pos, k_mask, HAS_MAP, I64)
            z += _edge_rows(coo, k_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE)
        dz = ds[:, :, None] * aw[None, :, :] * _act_grad(z, ACT, alpha)
        dx += _sum(tl.where(tile_mask, dz, 0.0), 0)
    else:
        dss += _sum(ds, 0)
    return dx, dss


@cached_launch
@triton.jit
def _bwd_src_kernel(
    work_ptr, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, ew_ptr, attw_ptr,
    dout_ptr, alpha_buf_ptr, ds_buf_ptr,
    dx_src_ptr, dssrc_ptr, dx_part_ptr, dss_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, ACT: tl.constexpr,
    REV_DST: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """Source pass over the reverse CSC: for source ``j`` (a work item over reverse-CSC positions) and each head
    ``h`` of the program's group, ``dx_j = sum_e alpha_e dout_i`` plus, for GATv2, ``sum_e ds_e a act'(x_j + x_i +
    f_e)``; for GAT the score gradient ``dscore_src_j = sum_e dz_e``. A chunk of a hub source writes its sums to its
    partial slot (merged in a fixed order afterwards)."""
    j, start, end, slot = _item(work_ptr, WHOLE, I64)
    ps = tl.maximum(slot, 0)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    D = H * C
    if V2:
        xj = tl.load(x_src_ptr + j * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
        aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    else:
        xj = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        aw = xj
    dx = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    dss = tl.full([HG], 0.0, tl.float32)
    for k0 in range(start, end, BLOCK_E):
        dx, dss = _bwd_src_block(k0, end, xj, aw, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, x_dst_ptr, edge_ptr, ew_ptr,
                                 dout_ptr, alpha_buf_ptr, ds_buf_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE, ACT,
                                 REV_DST, BLOCK_E, I64)
    tl.store(dx_src_ptr + j * D + hc, dx, mask=hc_mask & whole[:, None])
    tl.store(dx_part_ptr + ps * D + hc, dx, mask=hc_mask & part[:, None])
    if not V2:
        tl.store(dssrc_ptr + j * H + h_off, dss, mask=hm & whole)
        tl.store(dss_part_ptr + ps * H + h_off, dss, mask=hm & part)


def launch_backward_src(call: GatCall | Gatv2Call, walk: SourceWalk, dout: Tensor, alpha_buf: Tensor,
                        ds_buf: Tensor, dx_src: Tensor, dscore_src: Tensor | None) -> None:
    """Source pass of ``call`` (GAT's two-gather backward, or GATv2's) over ``walk``'s source work list (items over
    reverse-CSC positions); fills ``dx_src [Ns, H*C]`` and, for GAT, ``dscore_src [Ns, H]`` fp32; hub sources' chunk
    sums merged in slot order. Without ``walk.rev_dst`` it reads ``dst_index[rev_to_csc[k]]``."""
    work, hub_work, hubs = walk.src_work, walk.src_hub_work, walk.src_hubs
    if n_items(work) == 0:
        return
    v2, heads, x_src, map_ = isinstance(call, Gatv2Call), call.heads, call.x_src, call.map_csc_to_coo
    c, groups, cfg = tuning.launch_config(x_src, heads, v2, "src", dout, call.launch)
    n_slots = hub_work.shape[0]
    dx_part = _partial(n_slots, heads * c, alpha_buf)
    dss_part = _partial(0 if v2 else n_slots, heads, alpha_buf)
    rows, edge, edge_weight, _ = edge_inputs(call, None, alpha_buf)
    _bwd_src_kernel[(n_items(work), groups)](
        work, walk.rev_to_csc, walk.dst_index, _or(walk.rev_dst, walk.dst_index), _or(map_, walk.rev_to_csc),
        x_src, *rows[:4],
        dout, alpha_buf, ds_buf,
        dx_src, _or(dscore_src, alpha_buf), dx_part, dss_part,
        heads, c, call.activation_alpha,
        V2=v2, HAS_MAP=map_ is not None, HAS_EDGE=edge is not None, DE=_fused_dim(edge, edge_weight),
        ACT=ACTIVATION_CODES[call.activation], REV_DST=walk.rev_dst is not None, WHOLE=work.dim() == 1, I64=call.i64,
        **cfg,
    )
    _merge_sum(hubs, dx_part, dx_src, heads * c, call.i64)
    if not v2 and dscore_src is not None:
        _merge_sum(hubs, dss_part, dscore_src, heads, call.i64)
