"""GATv2's fused edge projection in the backward: the raw edge features' and the projection weight's gradients, one
program per span of CSC positions."""


from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import Gatv2Call
from cudnn_gnn.backends.triton.kernels.common import (
    ACTIVATION_CODES,
    _act_grad,
    _coo_ids,
    _edge_rows,
    _idx,
    _or,
    _sum,
)
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["launch_backward_edge"]


@cached_launch
@triton.jit
def _bwd_edge_kernel(
    indices_ptr, dst_index_ptr, map_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, ew_ptr, attw_ptr, ds_buf_ptr,
    dedge_ptr, dew_part_ptr,
    E, SPAN, H, C, alpha,
    HAS_MAP: tl.constexpr, DEDGE: tl.constexpr, DEW: tl.constexpr, ACT: tl.constexpr, DE: tl.constexpr,
    DE_PAD: tl.constexpr, BLOCK: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """GATv2's fused edge projection, backward: program ``p`` takes the CSC positions ``p * SPAN .. (p + 1) * SPAN``
    (all heads, ``HG >= H``), recomputes ``dz_e = ds_e a act'(x_j + x_i + edge_attr_e W^T)`` per edge (``ds`` from
    the destination pass's buffer, dropout inside) and writes ``d edge_attr_e = dz_e W`` (``[DE]`` per edge, each
    edge once: ``DEDGE``) and its partial ``sum_e edge_attr_e^T dz_e`` of ``dW`` to row ``p`` of
    ``dew_part [P, H*C, DE]`` (``DEW``), which the caller sums over ``p`` in a fixed order. The ``[DE_PAD, HG,
    BLOCK_C]`` partial lives in registers (the caller bounds ``DE_PAD * HG * BLOCK_C``)."""
    p = _idx(tl.program_id(0), I64)
    start = p * SPAN
    end = start + tl.minimum(SPAN, E - start)  # start < E: no int32 wrap where (p + 1) * SPAN passes 2**31
    h_off = _idx(tl.arange(0, HG), I64)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
    D = H * C
    aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    k_off = _idx(tl.arange(0, DE_PAD), I64)
    dew = tl.full([DE_PAD, HG, BLOCK_C], 0.0, tl.float32)
    for e0 in range(start, end, BLOCK):
        e_pos = e0 + tl.arange(0, BLOCK)
        e_mask = e_pos < end
        eh_mask = e_mask[:, None] & hm[None, :]
        tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
        src = _idx(tl.load(indices_ptr + e_pos, mask=e_mask, other=0), I64)
        dst = _idx(tl.load(dst_index_ptr + e_pos, mask=e_mask, other=0), I64)
        coo = _coo_ids(map_ptr, e_pos, e_mask, HAS_MAP, I64)
        z = (tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
             + tl.load(x_dst_ptr + dst[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
             + _edge_rows(coo, e_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE))
        ds = tl.load(ds_buf_ptr + e_pos[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        dz = tl.where(tile_mask, ds[:, :, None] * aw[None, :, :] * _act_grad(z, ACT, alpha), 0.0)
        dea = tl.full([BLOCK, DE_PAD], 0.0, tl.float32)
        for k in tl.static_range(DE):
            if DEDGE:
                wk = tl.load(ew_ptr + hc * DE + k, mask=hc_mask, other=0.0).to(tl.float32)
                dea = tl.where(k_off[None, :] == k, _sum(_sum(dz * wk[None, :, :], 2), 1)[:, None], dea)
            if DEW:
                col = tl.load(edge_ptr + coo * DE + k, mask=e_mask, other=0.0).to(tl.float32)
                dew += tl.where(k_off[:, None, None] == k, _sum(dz * col[:, None, None], 0)[None, :, :], 0.0)
        if DEDGE:
            tl.store(dedge_ptr + coo[:, None] * DE + k_off[None, :], dea, mask=e_mask[:, None] & (k_off < DE)[None, :])
    if DEW:
        tl.store(dew_part_ptr + p * D * DE + hc[None, :, :] * DE + k_off[:, None, None], dew,
                 mask=(k_off < DE)[:, None, None] & hc_mask[None, :, :])


def launch_backward_edge(call: Gatv2Call, dst_index: Tensor, ds_buf: Tensor, dedge: Tensor | None,
                         dew_part: Tensor | None, span: int) -> None:
    """GATv2's fused edge projection (``call.edge_attr [E, De]`` raw, ``call.lin_edge_weight [H*C, De]``) after the
    destination pass (``ds_buf [E, H]`` fp32 holds ``ds``, CSC order; ``dst_index [E]``, each CSC position's
    destination): ``dedge [E, De]`` (COO order, ``edge_attr``'s gradient) and ``dew_part [P, H*C, De]`` fp32, whose
    sum over its first axis is ``lin_edge_weight``'s gradient; either may be None (not needed). One program per
    ``span`` CSC positions, ``P = cdiv(E, span)`` (see :func:`cudnn_gnn.backends.triton.tuning.edge_span`)."""
    indices, map_, edge_attr, edge_weight = call.indices, call.map_csc_to_coo, call.edge_attr, call.lin_edge_weight
    assert edge_attr is not None and edge_weight is not None  # the fused path's: the op checked
    e = indices.shape[0]
    if e == 0 or (dedge is None and dew_part is None):
        return
    heads, de = call.heads, edge_attr.shape[1]
    c = call.x_src.shape[1] // heads
    block, hg, block_c, de_pad, num_warps = tuning.edge_kernel_shape(heads, c, de)
    _bwd_edge_kernel[(tuning.cdiv(e, span),)](
        indices, dst_index, _or(map_, indices),
        call.x_src, call.x_dst, edge_attr, edge_weight, call.attn_weights, ds_buf,
        _or(dedge, ds_buf), _or(dew_part, ds_buf),
        e, span, heads, c, call.activation_alpha,
        HAS_MAP=map_ is not None, DEDGE=dedge is not None, DEW=dew_part is not None,
        ACT=ACTIVATION_CODES[call.activation], DE=de, DE_PAD=de_pad, BLOCK=block, HG=hg, BLOCK_C=block_c,
        I64=call.i64, num_warps=num_warps,
    )
