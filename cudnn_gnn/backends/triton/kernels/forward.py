"""The forward pass: one program per work item (a destination row, or a chunk of a hub row) and head group,
online softmax over the row's edges, and the log-sum-exp merge of a hub row's chunks."""


from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.call import GatCall, Gatv2Call
from cudnn_gnn.backends.triton.kernels.common import (
    ACTIVATION_CODES,
    _drop_factor,
    _fused_dim,
    _head_group,
    _idx,
    _item,
    _logits,
    _max,
    _normalise_att,
    _or,
    _partial,
    _store_keep,
    _sum,
    drop_args,
    drop_mode,
    edge_inputs,
    n_items,
)
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["launch_forward"]


@triton.jit
def _fwd_block(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, m_run, l_run, acc,
               indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
               drop_ptr, drop_thr, att_ptr, keep_ptr,
               H, D, alpha,
               V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
               DROP: tl.constexpr, RETURN_ATT: tl.constexpr, KEEP_OUT: tl.constexpr, ACT: tl.constexpr,
               BLOCK: tl.constexpr, I64: tl.constexpr):
    """One online-softmax step over the edges ``e0 .. e0 + BLOCK`` (clipped to ``end``) of a row; with ``KEEP_OUT``
    the dropout's keep flags of these edges written to ``keep_ptr`` (:func:`_store_keep`)."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = _idx(tl.load(indices_ptr + e_pos, mask=e_mask, other=0), I64)
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    xj = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, xj, xi, aw, sd,
                     map_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE, ACT, I64)
    s = tl.where(eh_mask, s, float("-inf"))
    if RETURN_ATT:  # raw logits for now; normalised once the row's statistics are known
        tl.store(att_ptr + coo[:, None] * H + h_off[None, :], s, mask=eh_mask)
    m_new = tl.maximum(m_run, _max(s, 0))
    scale = tl.exp(m_run - m_new)
    p = tl.exp(s - m_new[None, :])
    l_run = l_run * scale + _sum(p, 0)
    if DROP != 0:
        f = _drop_factor(e_pos, h_off, eh_mask, drop_ptr, drop_thr, H, DROP, I64)
        if KEEP_OUT:
            _store_keep(keep_ptr, e_pos, h_off, eh_mask, f, H, I64)
        p = p * f
    acc = acc * scale[:, None] + _sum(p[:, :, None] * xj, 0)
    return m_new, l_run, acc


@cached_launch
@triton.jit
def _fwd_kernel(
    work_ptr, indices_ptr, map_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, ew_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    drop_ptr, drop_thr,
    out_ptr, lse_ptr, att_ptr, keep_ptr, m_part_ptr, l_part_ptr, acc_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, DROP: tl.constexpr,
    RETURN_ATT: tl.constexpr, KEEP_OUT: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """One work item: a whole row writes ``out`` and ``lse`` (and normalises its attention); a chunk of a hub row
    writes its unnormalised state ``(max, sumexp, acc)`` per head to its partial slot, for :func:`_fwd_merge_kernel`.
    With ``KEEP_OUT`` (counter-based dropout, ``DROP == 2``, where a backward follows) every item writes the keep
    flags it drew for its edges and its heads to ``keep [E, H]`` uint8 (CSC order), which the backward reads in place
    of Philox."""
    row, start, end, slot = _item(work_ptr, WHOLE, I64)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    D = H * C
    if V2:
        xi = tl.load(x_dst_ptr + row * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
        aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
        sd = tl.full([HG], 0.0, tl.float32)
    else:
        xi = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        aw = xi
        sd = tl.load(sdst_ptr + row * H + h_off, mask=hm, other=0.0)

    m_run = tl.full([HG], -1.0e30, tl.float32)
    l_run = tl.full([HG], 0.0, tl.float32)
    acc = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    for e0 in range(start, end, BLOCK_E):  # light rows and the rest: small blocks
        m_run, l_run, acc = _fwd_block(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, m_run, l_run, acc,
                                       indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
                                       drop_ptr, drop_thr, att_ptr, keep_ptr, H, D, alpha,
                                       V2, HAS_MAP, HAS_EDGE, DE, DROP, RETURN_ATT, KEEP_OUT, ACT, BLOCK_E, I64)

    # a chunk of a hub row: its partial state (no normalisation; the merge kernel combines the chunks)
    ps = tl.maximum(slot, 0)
    tl.store(m_part_ptr + ps * H + h_off, m_run, mask=hm & part)
    tl.store(l_part_ptr + ps * H + h_off, l_run, mask=hm & part)
    tl.store(acc_part_ptr + ps * D + hc, acc, mask=hc_mask & part[:, None])
    # a whole row
    has_edges = l_run > 0
    inv = tl.where(has_edges, 1.0 / tl.where(has_edges, l_run, 1.0), 0.0)
    tl.store(out_ptr + row * D + hc, acc * inv[:, None], mask=hc_mask & whole[:, None])
    lse = tl.where(has_edges, m_run + tl.log(tl.where(has_edges, l_run, 1.0)), 0.0)
    tl.store(lse_ptr + row * H + h_off, lse, mask=hm & whole)
    if RETURN_ATT:
        tl.debug_barrier()  # the raw logits stored above, by other threads of this program, are read below
        _normalise_att(start, tl.where(slot == -1, end, start), lse, h_off, hm, map_ptr, drop_ptr, drop_thr,
                       att_ptr, H, HAS_MAP, DROP, BLOCK_E, I64)


@cached_launch
@triton.jit
def _fwd_merge_kernel(
    hubs_ptr, offsets_ptr, map_ptr, drop_ptr, drop_thr,
    m_part_ptr, l_part_ptr, acc_part_ptr, out_ptr, lse_ptr, att_ptr,
    H, C,
    HAS_MAP: tl.constexpr, DROP: tl.constexpr, RETURN_ATT: tl.constexpr,
    BLOCK_E: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr, I64: tl.constexpr,
):
    """One hub row (``hubs[pid] = (row, first slot, chunk count)``, count 0 = padding): the chunks' partial states
    combined in slot order by log-sum-exp into ``out`` and ``lse``; then the row's attention normalised."""
    hub = hubs_ptr + _idx(tl.program_id(0), I64) * 3
    row = _idx(tl.load(hub), I64)
    slot0 = _idx(tl.load(hub + 1), I64)
    n = _idx(tl.load(hub + 2), I64)
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    valid = (h_off * 0 + n) > 0
    D = H * C
    m = tl.full([HG], -1.0e30, tl.float32)
    ell = tl.full([HG], 0.0, tl.float32)
    acc = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    for k in range(0, n):  # fixed order: the chunks in row order
        s = slot0 + k
        mk = tl.load(m_part_ptr + s * H + h_off, mask=hm, other=-1.0e30)
        lk = tl.load(l_part_ptr + s * H + h_off, mask=hm, other=0.0)
        ak = tl.load(acc_part_ptr + s * D + hc, mask=hc_mask, other=0.0)
        m_new = tl.maximum(m, mk)
        a = tl.exp(m - m_new)
        b = tl.exp(mk - m_new)
        ell = ell * a + lk * b
        acc = acc * a[:, None] + ak * b[:, None]
        m = m_new
    has_edges = ell > 0
    inv = tl.where(has_edges, 1.0 / tl.where(has_edges, ell, 1.0), 0.0)
    tl.store(out_ptr + row * D + hc, acc * inv[:, None], mask=hc_mask & valid[:, None])
    lse = tl.where(has_edges, m + tl.log(tl.where(has_edges, ell, 1.0)), 0.0)
    tl.store(lse_ptr + row * H + h_off, lse, mask=hm & valid)
    if RETURN_ATT:  # the raw logits were stored by the chunk programs (an earlier launch)
        start = _idx(tl.load(offsets_ptr + row), I64)
        end = _idx(tl.load(offsets_ptr + row + 1), I64)
        _normalise_att(start, tl.where(n > 0, end, start), lse, h_off, hm, map_ptr, drop_ptr, drop_thr,
                       att_ptr, H, HAS_MAP, DROP, BLOCK_E, I64)


def launch_forward(call: GatCall | Gatv2Call, scores: tuple[Tensor, Tensor] | None, out: Tensor, lse: Tensor,
                   att: Tensor | None, keep: Tensor | None = None) -> None:
    """Fill ``out [Nd, H*C]`` (any float dtype), ``lse [Nd, H]`` fp32, if given ``att [E, H]`` fp32 (COO) and, if
    given (counter-based dropout only), the keep flags ``keep [E, H]`` uint8 (CSC order) it draws, for
    ``call`` (a :class:`GatCall` with its node scores ``scores = (score_src [Ns, H], score_dst [Nd, H])``, or a
    :class:`Gatv2Call`): one launch over the row work list, then one merge program per hub row. GATv2's
    ``edge_attr`` is ``[E, H*C]`` projected features, or with ``lin_edge_weight [H*C, De]`` the raw ``[E, De]``
    ones, projected in the kernel (see :func:`_edge_rows`)."""
    work, hub_work, hubs = call.row_work, call.row_hub_work, call.row_hubs
    if n_items(work) == 0:
        return
    v2, heads, x_src, map_ = isinstance(call, Gatv2Call), call.heads, call.x_src, call.map_csc_to_coo
    c, groups, cfg = tuning.launch_config(x_src, heads, v2, "fwd", x_src, call.launch)
    n_slots = hub_work.shape[0]
    m_part, l_part, acc_part = _partial(n_slots, heads, lse), _partial(n_slots, heads, lse), \
        _partial(n_slots, heads * c, lse)
    drop = call.kernel_dropout
    dropout = drop_args(drop, lse)
    rows, edge, edge_weight, has_edge = edge_inputs(call, scores, lse)
    _fwd_kernel[(n_items(work), groups)](
        work, call.indices, _or(map_, call.indices), x_src, *rows, *dropout,
        out, lse, _or(att, lse), _or(keep, lse), m_part, l_part, acc_part,
        heads, c, call.activation_alpha,
        V2=v2, HAS_MAP=map_ is not None, HAS_EDGE=has_edge, DE=_fused_dim(edge, edge_weight),
        DROP=drop_mode(drop), RETURN_ATT=att is not None, KEEP_OUT=keep is not None,
        ACT=ACTIVATION_CODES[call.activation],
        WHOLE=work.dim() == 1, I64=call.i64, **cfg,
    )
    if hubs.shape[0]:
        _fwd_merge_kernel[(hubs.shape[0], groups)](
            hubs, call.offsets, _or(map_, call.indices), *dropout,
            m_part, l_part, acc_part, out, lse, _or(att, lse),
            heads, c,
            HAS_MAP=map_ is not None, DROP=drop_mode(drop), RETURN_ATT=att is not None,
            BLOCK_E=cfg["BLOCK_E"], HG=cfg["HG"], BLOCK_C=cfg["BLOCK_C"], I64=call.i64, num_warps=cfg["num_warps"],
        )
