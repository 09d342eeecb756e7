"""Fused Triton kernels for GAT / GATv2 attention over a CSC graph, and their launchers.

Imported lazily by :mod:`cudnn_gnn.backends.triton` (Triton reads ``TRITON_INTERPRET`` when it decorates the
kernels, so the interpreter can be switched on any time before the first call).

Layout: one program per (destination row, head) for the forward and the destination pass of the backward, one per
(source row, head) for the source pass. A program loops over its row's edges in blocks of ``BLOCK_E`` with a
``[BLOCK_E, BLOCK_C]`` tile (``BLOCK_C`` = the head width rounded up to a power of two), so the only large gather
per edge is one head's slice of a feature row. Rows are launched heaviest first (a degree-sorted order cached on
the graph), so a hub starts at once instead of setting the kernel's tail.

Softmax statistics are kept per (destination, head) as a log-sum-exp ``[Nd, H]`` float32; the backward recomputes
the logits from it and never stores anything of size ``[E, H*C]``. Node-sized gradients are written by exactly one
program each (destinations in the destination pass, sources in the source pass over the reverse CSC), per-edge
gradients once per edge, and GATv2's attention-vector gradient as per-row partial sums reduced in a fixed order by
the caller: no atomics anywhere, so every result is bitwise repeatable.

All pointer offsets are computed in int64 (``N * H * C`` and ``E * H * C`` may pass 2**31 with int32 indices);
arithmetic is float32 whatever the storage dtype; stores cast to the destination tensor's dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

__all__ = ["ACTIVATION_CODES", "block_sizes", "launch_forward", "launch_backward_dst", "launch_backward_src"]

ACTIVATION_CODES = {"linear": 0, "leaky_relu": 1, "relu": 2, "sigmoid": 3, "tanh": 4, "elu": 5, "scalar": 6}


def block_sizes(c: int) -> tuple[int, int, int]:
    """``(BLOCK_E, BLOCK_C, num_warps)`` for head width ``c``: the width rounded up to a power of two, enough edges
    per block for a tile of about 4k elements (16 to 64 edges), and 4 warps for such a tile (32 float32 registers
    a thread per tile), 8 for the wider tiles of C > 256."""
    block_c = triton.next_power_of_2(max(c, 1))
    block_e = max(16, min(64, 4096 // block_c))
    return block_e, block_c, 4 if block_e * block_c <= 4096 else 8


# ---------------------------------------------------------------------------------------------------- reductions
# tl.sum / tl.max / tl.zeros are themselves @triton.jit functions of triton.language.standard, decorated when triton
# is first imported; if that happened before TRITON_INTERPRET=1 was set (torch_geometric imports triton), the
# interpreter cannot call them. The builtins below work either way, compile to the same reductions, and the
# interpreter recognises the standard combine functions and reduces with numpy.
@triton.jit
def _sum(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _max(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._elementwise_max)


# ---------------------------------------------------------------------------------------------------- activations
@triton.jit
def _act(z, ACT: tl.constexpr, alpha):
    if ACT == 1:
        y = tl.where(z > 0, z, z * alpha)
    elif ACT == 2:
        y = tl.maximum(z, 0.0)
    elif ACT == 3:
        y = 1.0 / (1.0 + tl.exp(-z))
    elif ACT == 4:
        y = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
    elif ACT == 5:
        y = tl.where(z > 0, z, tl.exp(tl.minimum(z, 0.0)) - 1.0)
    elif ACT == 6:
        y = z * alpha
    else:
        y = z
    return y


@triton.jit
def _act_grad(z, ACT: tl.constexpr, alpha):
    """d act(z) / dz, with torch's choice at the kinks (leaky_relu and relu: the negative side at 0)."""
    if ACT == 1:
        d = tl.where(z > 0, 1.0, alpha)
    elif ACT == 2:
        d = tl.where(z > 0, 1.0, 0.0)
    elif ACT == 3:
        s = 1.0 / (1.0 + tl.exp(-z))
        d = s * (1.0 - s)
    elif ACT == 4:
        t = 2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0
        d = 1.0 - t * t
    elif ACT == 5:
        d = tl.where(z > 0, 1.0, tl.exp(tl.minimum(z, 0.0)))
    elif ACT == 6:
        d = alpha + 0.0 * z
    else:
        d = 1.0 + 0.0 * z
    return d


# ---------------------------------------------------------------------------------------------------- logits
@triton.jit
def _logits(e_pos, e_mask, src, row, h, c_off, c_mask, xj, xi,
            map_ptr, edge_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
            H, C, alpha,
            V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, ACT: tl.constexpr):
    """Logits ``s [BLOCK_E]`` (float32) of one head for a block of CSC positions ``e_pos`` with sources ``src``,
    and ``coo``, their COO ids (int64).

    GAT: ``act(score_src[j, h] + score_dst[i, h] + score_edge[coo, h])``. GATv2: ``sum_c a[h, c] act(z[c])`` with
    ``z = x_j + x_i + f_coo``; ``xj`` is the gathered source tile, ``xi`` the destination's slice."""
    if HAS_MAP:
        coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    else:
        coo = e_pos
    if V2:
        z = xj + xi[None, :]
        if HAS_EDGE:
            f_off = coo[:, None] * (H * C) + h * C + c_off[None, :]
            z += tl.load(edge_ptr + f_off, mask=e_mask[:, None] & c_mask[None, :], other=0.0).to(tl.float32)
        a = tl.load(attw_ptr + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
        s = _sum(_act(z, ACT, alpha) * a[None, :], 1)
    else:
        t = tl.load(ssrc_ptr + src * H + h, mask=e_mask, other=0.0) + tl.load(sdst_ptr + row * H + h)
        if HAS_EDGE:
            t += tl.load(sedge_ptr + coo * H + h, mask=e_mask, other=0.0)
        s = _act(t, ACT, alpha)
    return s, coo


# ---------------------------------------------------------------------------------------------------- forward
@triton.jit
def _fwd_kernel(
    offsets_ptr, indices_ptr, map_ptr, order_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    mask_ptr, mask_s0, mask_s1,
    out_ptr, lse_ptr, att_ptr,
    H, C, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr,
    RETURN_ATT: tl.constexpr, ACT: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr,
):
    row = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    start = tl.load(offsets_ptr + row).to(tl.int64)
    end = tl.load(offsets_ptr + row + 1).to(tl.int64)
    c_off = tl.arange(0, BLOCK_C)
    c_mask = c_off < C
    e_ar = tl.arange(0, BLOCK_E)
    D = H * C
    if V2:
        xi = tl.load(x_dst_ptr + row * D + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
    else:
        xi = tl.full([BLOCK_C], 0.0, tl.float32)

    m_run = tl.full([], -1.0e30, tl.float32)
    l_run = tl.full([], 0.0, tl.float32)
    acc = tl.full([BLOCK_C], 0.0, tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e_pos = e0 + e_ar
        e_mask = e_pos < end
        src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
        tile_mask = e_mask[:, None] & c_mask[None, :]
        xj = tl.load(x_src_ptr + src[:, None] * D + h * C + c_off[None, :], mask=tile_mask, other=0.0).to(tl.float32)
        s, coo = _logits(e_pos, e_mask, src, row, h, c_off, c_mask, xj, xi,
                             map_ptr, edge_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                             H, C, alpha, V2, HAS_MAP, HAS_EDGE, ACT)
        s = tl.where(e_mask, s, float("-inf"))
        if RETURN_ATT:  # raw logits for now; normalised below once the row's statistics are known
            tl.store(att_ptr + coo * H + h, s, mask=e_mask)
        m_new = tl.maximum(m_run, _max(s, 0))
        scale = tl.exp(m_run - m_new)
        p = tl.exp(s - m_new)
        l_run = l_run * scale + _sum(p, 0)
        if HAS_MASK:
            p = p * tl.load(mask_ptr + coo * mask_s0 + h * mask_s1, mask=e_mask, other=0.0)
        acc = acc * scale + _sum(p[:, None] * xj, 0)
        m_run = m_new

    has_edges = l_run > 0
    inv = tl.where(has_edges, 1.0 / tl.where(has_edges, l_run, 1.0), 0.0)
    tl.store(out_ptr + row * D + h * C + c_off, acc * inv, mask=c_mask)
    lse = tl.where(has_edges, m_run + tl.log(tl.where(has_edges, l_run, 1.0)), 0.0)
    tl.store(lse_ptr + row * H + h, lse)
    if RETURN_ATT:
        tl.debug_barrier()  # the raw logits stored above, by other threads of this program, are read below
        for e0 in range(start, end, BLOCK_E):
            e_pos = e0 + e_ar
            e_mask = e_pos < end
            if HAS_MAP:
                coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
            else:
                coo = e_pos
            s = tl.load(att_ptr + coo * H + h, mask=e_mask, other=0.0)
            tl.debug_barrier()  # the slots read above are overwritten below, possibly by other threads
            a = tl.exp(s - lse)
            if HAS_MASK:
                a = a * tl.load(mask_ptr + coo * mask_s0 + h * mask_s1, mask=e_mask, other=0.0)
            tl.store(att_ptr + coo * H + h, a, mask=e_mask)


# ---------------------------------------------------------------------------------------------------- backward
@triton.jit
def _bwd_dst_kernel(
    offsets_ptr, indices_ptr, map_ptr, order_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    mask_ptr, mask_s0, mask_s1,
    lse_ptr, dout_ptr, datt_ptr,
    alpha_buf_ptr, ds_buf_ptr,
    dx_dst_ptr, dedge_ptr, dattw_part_ptr, dsdst_ptr, dsedge_ptr,
    H, C, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_DATT: tl.constexpr, ACT: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Destination pass: for destination ``i`` and head ``h``, recompute ``p_e = exp(s_e - lse_i)`` and
    ``alpha_e = p_e m_e``; ``g_e = <dout_i, x_j> + datt_e``; ``delta_i = sum_e alpha_e g_e``;
    ``ds_e = p_e (m_e g_e - delta_i)`` (the softmax backward with the dropout factor inside). Writes ``alpha``
    and the logit gradient to ``[E, H]`` CSC buffers for the source pass (GAT: ``dz = ds act'(z)``; GATv2:
    ``ds``), and the destination-side and per-edge gradients."""
    row = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    start = tl.load(offsets_ptr + row).to(tl.int64)
    end = tl.load(offsets_ptr + row + 1).to(tl.int64)
    c_off = tl.arange(0, BLOCK_C)
    c_mask = c_off < C
    e_ar = tl.arange(0, BLOCK_E)
    D = H * C
    lse = tl.load(lse_ptr + row * H + h)
    dout = tl.load(dout_ptr + row * D + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
    if V2:
        xi = tl.load(x_dst_ptr + row * D + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
    else:
        xi = tl.full([BLOCK_C], 0.0, tl.float32)

    # pass 1: p and g per edge (kept in the [E, H] buffers), delta of the row
    delta = tl.full([], 0.0, tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e_pos = e0 + e_ar
        e_mask = e_pos < end
        src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
        tile_mask = e_mask[:, None] & c_mask[None, :]
        xj = tl.load(x_src_ptr + src[:, None] * D + h * C + c_off[None, :], mask=tile_mask, other=0.0).to(tl.float32)
        s, coo = _logits(e_pos, e_mask, src, row, h, c_off, c_mask, xj, xi,
                             map_ptr, edge_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                             H, C, alpha, V2, HAS_MAP, HAS_EDGE, ACT)
        p = tl.where(e_mask, tl.exp(s - lse), 0.0)
        g = _sum(xj * dout[None, :], 1)
        if HAS_DATT:
            g += tl.load(datt_ptr + coo * H + h, mask=e_mask, other=0.0)
        a = p
        if HAS_MASK:
            a = p * tl.load(mask_ptr + coo * mask_s0 + h * mask_s1, mask=e_mask, other=0.0)
        delta += _sum(a * g, 0)
        tl.store(alpha_buf_ptr + e_pos * H + h, p, mask=e_mask)
        tl.store(ds_buf_ptr + e_pos * H + h, g, mask=e_mask)

    # pass 2: ds, then the destination-side and per-edge gradients. p and g were stored in pass 1 in the layout of
    # a reduction and are read back here in another: without the barrier a thread can read them before another
    # thread's store lands (a race the sequential interpreter cannot show)
    tl.debug_barrier()
    dxi = tl.full([BLOCK_C], 0.0, tl.float32)
    datt_w = tl.full([BLOCK_C], 0.0, tl.float32)
    dsd = tl.full([], 0.0, tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e_pos = e0 + e_ar
        e_mask = e_pos < end
        if HAS_MAP:
            coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
        else:
            coo = e_pos
        p = tl.load(alpha_buf_ptr + e_pos * H + h, mask=e_mask, other=0.0)
        g = tl.load(ds_buf_ptr + e_pos * H + h, mask=e_mask, other=0.0)
        # this iteration overwrites the slots it just read, possibly from other threads (the stores below take the
        # layout of the [BLOCK_E, BLOCK_C] tile): every read lands before any of those writes
        tl.debug_barrier()
        if HAS_MASK:
            mk = tl.load(mask_ptr + coo * mask_s0 + h * mask_s1, mask=e_mask, other=0.0)
        else:
            mk = tl.where(e_mask, 1.0, 0.0)
        ds = p * (mk * g - delta)
        tl.store(alpha_buf_ptr + e_pos * H + h, p * mk, mask=e_mask)
        if V2:
            src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
            tile_mask = e_mask[:, None] & c_mask[None, :]
            z = tl.load(x_src_ptr + src[:, None] * D + h * C + c_off[None, :], mask=tile_mask,
                        other=0.0).to(tl.float32) + xi[None, :]
            if HAS_EDGE:
                f_off = coo[:, None] * D + h * C + c_off[None, :]
                z += tl.load(edge_ptr + f_off, mask=tile_mask, other=0.0).to(tl.float32)
            a_vec = tl.load(attw_ptr + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
            dz = ds[:, None] * a_vec[None, :] * _act_grad(z, ACT, alpha)
            dz = tl.where(tile_mask, dz, 0.0)
            dxi += _sum(dz, 0)
            datt_w += _sum(ds[:, None] * tl.where(tile_mask, _act(z, ACT, alpha), 0.0), 0)
            if HAS_EDGE:
                tl.store(dedge_ptr + f_off, dz, mask=tile_mask)
            tl.store(ds_buf_ptr + e_pos * H + h, ds, mask=e_mask)
        else:
            src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
            t = tl.load(ssrc_ptr + src * H + h, mask=e_mask, other=0.0) + tl.load(sdst_ptr + row * H + h)
            if HAS_EDGE:
                t += tl.load(sedge_ptr + coo * H + h, mask=e_mask, other=0.0)
            dz = tl.where(e_mask, ds * _act_grad(t, ACT, alpha), 0.0)
            dsd += _sum(dz, 0)
            if HAS_EDGE:
                tl.store(dsedge_ptr + coo * H + h, dz, mask=e_mask)
            tl.store(ds_buf_ptr + e_pos * H + h, dz, mask=e_mask)
    if V2:
        tl.store(dx_dst_ptr + row * D + h * C + c_off, dxi, mask=c_mask)
        tl.store(dattw_part_ptr + row * D + h * C + c_off, datt_w, mask=c_mask)
    else:
        tl.store(dsdst_ptr + row * H + h, dsd)


@triton.jit
def _bwd_src_kernel(
    rev_offsets_ptr, rev_to_csc_ptr, dst_index_ptr, map_ptr, order_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, attw_ptr,
    dout_ptr, alpha_buf_ptr, ds_buf_ptr,
    dx_src_ptr, dssrc_ptr,
    H, C, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Source pass over the reverse CSC: for source ``j`` and head ``h``,
    ``dx_j = sum_e alpha_e dout_i`` plus, for GATv2, ``sum_e ds_e a act'(x_j + x_i + f_e)``; for GAT the score
    gradient ``dscore_src_j = sum_e dz_e``."""
    j = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    start = tl.load(rev_offsets_ptr + j).to(tl.int64)
    end = tl.load(rev_offsets_ptr + j + 1).to(tl.int64)
    c_off = tl.arange(0, BLOCK_C)
    c_mask = c_off < C
    e_ar = tl.arange(0, BLOCK_E)
    D = H * C
    if V2:
        xj = tl.load(x_src_ptr + j * D + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
        a_vec = tl.load(attw_ptr + h * C + c_off, mask=c_mask, other=0.0).to(tl.float32)
    dx = tl.full([BLOCK_C], 0.0, tl.float32)
    dss = tl.full([], 0.0, tl.float32)
    for k0 in range(start, end, BLOCK_E):
        k = k0 + e_ar
        k_mask = k < end
        e_pos = tl.load(rev_to_csc_ptr + k, mask=k_mask, other=0).to(tl.int64)
        i = tl.load(dst_index_ptr + e_pos, mask=k_mask, other=0).to(tl.int64)
        tile_mask = k_mask[:, None] & c_mask[None, :]
        a = tl.load(alpha_buf_ptr + e_pos * H + h, mask=k_mask, other=0.0)
        ds = tl.load(ds_buf_ptr + e_pos * H + h, mask=k_mask, other=0.0)
        row_off = i[:, None] * D + h * C + c_off[None, :]
        g = tl.load(dout_ptr + row_off, mask=tile_mask, other=0.0).to(tl.float32)
        dx += _sum(a[:, None] * g, 0)
        if V2:
            z = tl.load(x_dst_ptr + row_off, mask=tile_mask, other=0.0).to(tl.float32) + xj[None, :]
            if HAS_EDGE:
                if HAS_MAP:
                    coo = tl.load(map_ptr + e_pos, mask=k_mask, other=0).to(tl.int64)
                else:
                    coo = e_pos
                z += tl.load(edge_ptr + coo[:, None] * D + h * C + c_off[None, :], mask=tile_mask,
                             other=0.0).to(tl.float32)
            dz = ds[:, None] * a_vec[None, :] * _act_grad(z, ACT, alpha)
            dx += _sum(tl.where(tile_mask, dz, 0.0), 0)
        else:
            dss += _sum(ds, 0)
    tl.store(dx_src_ptr + j * D + h * C + c_off, dx, mask=c_mask)
    if not V2:
        tl.store(dssrc_ptr + j * H + h, dss)


# ---------------------------------------------------------------------------------------------------- launchers
def _or(t: Tensor | None, fallback: Tensor) -> Tensor:
    """Triton needs a pointer for every argument; unused optional inputs get a harmless stand-in."""
    return fallback if t is None else t


def launch_forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, row_order: Tensor,
                   x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None, attw: Tensor | None,
                   score_src: Tensor | None, score_dst: Tensor | None, score_edge: Tensor | None,
                   mask: Tensor | None, out: Tensor, lse: Tensor, att: Tensor | None, *,
                   v2: bool, heads: int, act: str, alpha: float) -> None:
    """Fill ``out [Nd, H*C]`` (any float dtype), ``lse [Nd, H]`` fp32 and, if given, ``att [E, H]`` fp32 (COO)."""
    nd = offsets.shape[0] - 1
    if nd == 0:
        return
    c = x_src.shape[1] // heads
    block_e, block_c, num_warps = block_sizes(c)
    has_edge = (edge if v2 else score_edge) is not None
    _fwd_kernel[(nd, heads)](
        offsets, indices, _or(map_csc_to_coo, indices), row_order,
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(attw, x_src),
        _or(score_src, lse), _or(score_dst, lse), _or(score_edge, lse),
        _or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1),
        out, lse, _or(att, lse),
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=has_edge, HAS_MASK=mask is not None,
        RETURN_ATT=att is not None, ACT=ACTIVATION_CODES[act], BLOCK_E=block_e, BLOCK_C=block_c,
        num_warps=num_warps,
    )


def launch_backward_dst(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, row_order: Tensor,
                        x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None, attw: Tensor | None,
                        score_src: Tensor | None, score_dst: Tensor | None, score_edge: Tensor | None,
                        mask: Tensor | None, lse: Tensor, dout: Tensor, datt: Tensor | None,
                        alpha_buf: Tensor, ds_buf: Tensor, dx_dst: Tensor | None, dedge: Tensor | None,
                        dattw_part: Tensor | None, dscore_dst: Tensor | None, dscore_edge: Tensor | None, *,
                        v2: bool, heads: int, act: str, alpha: float) -> None:
    """Destination pass; fills ``alpha_buf``/``ds_buf`` ``[E, H]`` fp32 (CSC order) for the source pass and the
    destination-side outputs (GATv2: ``dx_dst``, ``dedge``, ``dattw_part [Nd, H*C]``; GAT: ``dscore_dst``,
    ``dscore_edge``)."""
    nd = offsets.shape[0] - 1
    if nd == 0:
        return
    c = x_src.shape[1] // heads
    block_e, block_c, num_warps = block_sizes(c)
    has_edge = (edge if v2 else score_edge) is not None
    _bwd_dst_kernel[(nd, heads)](
        offsets, indices, _or(map_csc_to_coo, indices), row_order,
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(attw, x_src),
        _or(score_src, lse), _or(score_dst, lse), _or(score_edge, lse),
        _or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1),
        lse, dout, _or(datt, lse),
        alpha_buf, ds_buf,
        _or(dx_dst, lse), _or(dedge, lse), _or(dattw_part, lse), _or(dscore_dst, lse), _or(dscore_edge, lse),
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=has_edge, HAS_MASK=mask is not None,
        HAS_DATT=datt is not None, ACT=ACTIVATION_CODES[act], BLOCK_E=block_e, BLOCK_C=block_c,
        num_warps=num_warps,
    )


def launch_backward_src(rev_offsets: Tensor, rev_to_csc: Tensor, dst_index: Tensor, map_csc_to_coo: Tensor | None,
                        src_order: Tensor, x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None,
                        attw: Tensor | None, dout: Tensor, alpha_buf: Tensor, ds_buf: Tensor, dx_src: Tensor,
                        dscore_src: Tensor | None, *, v2: bool, heads: int, act: str, alpha: float) -> None:
    """Source pass; fills ``dx_src [Ns, H*C]`` and, for GAT, ``dscore_src [Ns, H]`` fp32."""
    ns = rev_offsets.shape[0] - 1
    if ns == 0:
        return
    c = x_src.shape[1] // heads
    block_e, block_c, num_warps = block_sizes(c)
    _bwd_src_kernel[(ns, heads)](
        rev_offsets, rev_to_csc, dst_index, _or(map_csc_to_coo, rev_to_csc), src_order,
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(attw, x_src),
        dout, alpha_buf, ds_buf,
        dx_src, _or(dscore_src, alpha_buf),
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=edge is not None, ACT=ACTIVATION_CODES[act],
        BLOCK_E=block_e, BLOCK_C=block_c,
        num_warps=num_warps,
    )
