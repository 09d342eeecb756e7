"""Fused Triton kernels for GAT / GATv2 attention over a CSC graph, and their launchers.

Imported lazily by :mod:`cudnn_gnn.backends.triton` (Triton reads ``TRITON_INTERPRET`` when it decorates the
kernels, so the interpreter can be switched on any time before the first call).

Layout: one program per (destination row, head group) for the forward and the destination pass of the backward,
one per (source row, head group) for the source pass. A head group is ``HG`` consecutive heads (a power of two),
normally all of them: the program then gathers each edge's whole source feature row once, contiguously, as a
``[BLOCK_E, HG, BLOCK_C]`` tile (``BLOCK_C`` = the head width rounded up to a power of two; padded heads and
channels are masked), reduces over channels for the per-head logits ``[BLOCK_E, HG]`` and keeps the online-softmax
state per head (``[HG]``). Only where ``HG * BLOCK_C`` would pass :data:`MAX_TILE_D` (wide rows: 8 x 256, 3 x 1000)
are the heads split over several programs, down to one head per program. See :func:`block_sizes` for the rules.

A program walks its row in blocks of ``BIG_E`` edges while at least that many remain, then in blocks of ``BLOCK_E``
(small, for the many light rows of a power-law graph): a hub of thousands of edges takes few long iterations, a
row of three edges loads a small masked tile. Rows are launched heaviest first (a degree-sorted order cached on
the graph), so a hub starts at once instead of setting the kernel's tail.

Softmax statistics are kept per (destination, head) as a log-sum-exp ``[Nd, H]`` float32; the backward recomputes
the logits from it and never stores anything of size ``[E, H*C]``. Node-sized gradients are written by exactly one
program each (destinations in the destination pass, sources in the source pass over the reverse CSC), per-edge
gradients once per edge, and GATv2's attention-vector gradient as per-row partial sums reduced in a fixed order by
the caller: no atomics anywhere, so every result is bitwise repeatable.

Where a program stores values (a reduction's layout) and reads them back in another layout, a ``tl.debug_barrier()``
separates the write from the read and the read from the next overwrite (threads of other warps hold the other
layout; the sequential interpreter cannot show such races).

All pointer offsets are computed in int64 (``N * H * C`` and ``E * H * C`` may pass 2**31 with int32 indices);
arithmetic is float32 whatever the storage dtype; stores cast to the destination tensor's dtype.
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from torch import Tensor

__all__ = ["ACTIVATION_CODES", "MAX_TILE_D", "block_sizes", "launch_forward", "launch_backward_dst",
           "launch_backward_src"]

ACTIVATION_CODES = {"linear": 0, "leaky_relu": 1, "relu": 2, "sigmoid": 3, "tanh": 4, "elu": 5, "scalar": 6}

MAX_TILE_D = 1024
"""The widest padded feature slice ``HG * BLOCK_C`` one program holds: 8 x 32 and 3 x 250 (4 x 256) take all heads
in one program, 8 x 256 two programs of 4 heads, a head wider than this one program per head."""


@functools.cache
def block_sizes(heads: int, c: int, v2: bool, max_tile_d: int = MAX_TILE_D) -> tuple[int, int, int, int, int]:
    """``(BLOCK_E, BIG_E, HG, BLOCK_C, num_warps)`` for ``heads`` heads of width ``c``.

    ``BLOCK_C`` = ``c`` rounded up to a power of two; ``HG`` (heads per program) = ``heads`` rounded up to a power of
    two, halved until ``HG * BLOCK_C <= max_tile_d`` (at least 1). With the tile width ``W = HG * BLOCK_C``:
    ``BLOCK_E = clamp(2048 / W, 2, 16)`` edges for light rows (16 x 128 ... 8 x 256 ... 2 x 1024) and
    ``BIG_E = clamp(budget / W, BLOCK_E, 64)`` for long rows, with a register budget of 8192 tile elements (GAT, one
    live feature tile) or 4096 (GATv2, whose backward holds several); ``num_warps = clamp(BIG_E * W / 1024, 2, 8)``,
    about 32 float32 registers a thread per big tile. Independent of the storage dtype: tiles are float32 in
    registers."""
    block_c = triton.next_power_of_2(max(c, 1))
    hg = min(triton.next_power_of_2(max(heads, 1)), max(1, max_tile_d // block_c))
    width = hg * block_c
    block_e = max(2, min(16, 2048 // width))
    big_e = max(block_e, min(64, (4096 if v2 else 8192) // width))
    num_warps = max(2, min(8, big_e * width // 1024))
    return block_e, big_e, hg, block_c, num_warps


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
def _logits(e_pos, e_mask, src, row, h_off, hm, hc, hc_mask, xj, xi, aw,
            map_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
            H, D, alpha,
            V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, ACT: tl.constexpr):
    """Logits ``s [BLOCK, HG]`` (float32) of a block of CSC positions ``e_pos [BLOCK]`` with sources ``src`` for the
    heads ``h_off [HG]``, and ``coo``, their COO ids (int64).

    GAT: ``act(score_src[j, h] + score_dst[i, h] + score_edge[coo, h])``. GATv2: ``sum_c a[h, c] act(z[h, c])`` with
    ``z = x_j + x_i + f_coo``; ``xj [BLOCK, HG, BLOCK_C]`` is the gathered source tile, ``xi [HG, BLOCK_C]`` the
    destination's slice, ``aw [HG, BLOCK_C]`` the attention vector; ``hc [HG, BLOCK_C]`` the offsets ``h * C + c``
    inside a feature row."""
    if HAS_MAP:
        coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    else:
        coo = e_pos
    if V2:
        z = xj + xi[None, :, :]
        if HAS_EDGE:
            f_off = coo[:, None, None] * D + hc[None, :, :]
            z += tl.load(edge_ptr + f_off, mask=e_mask[:, None, None] & hc_mask[None, :, :], other=0.0).to(tl.float32)
        s = _sum(_act(z, ACT, alpha) * aw[None, :, :], 2)
    else:
        eh_mask = e_mask[:, None] & hm[None, :]
        t = tl.load(ssrc_ptr + src[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        t += tl.load(sdst_ptr + row * H + h_off, mask=hm, other=0.0)[None, :]
        if HAS_EDGE:
            t += tl.load(sedge_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        s = _act(t, ACT, alpha)
    return s, coo


# ---------------------------------------------------------------------------------------------------- forward
@triton.jit
def _fwd_block(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, m_run, l_run, acc,
               indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
               mask_ptr, mask_s0, mask_s1, att_ptr,
               H, D, alpha,
               V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr,
               RETURN_ATT: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """One online-softmax step over the edges ``e0 .. e0 + BLOCK`` (clipped to ``end``) of a row."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    xj = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    s, coo = _logits(e_pos, e_mask, src, row, h_off, hm, hc, hc_mask, xj, xi, aw,
                     map_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, ACT)
    s = tl.where(eh_mask, s, float("-inf"))
    if RETURN_ATT:  # raw logits for now; normalised once the row's statistics are known
        tl.store(att_ptr + coo[:, None] * H + h_off[None, :], s, mask=eh_mask)
    m_new = tl.maximum(m_run, _max(s, 0))
    scale = tl.exp(m_run - m_new)
    p = tl.exp(s - m_new[None, :])
    l_run = l_run * scale + _sum(p, 0)
    if HAS_MASK:
        p = p * tl.load(mask_ptr + coo[:, None] * mask_s0 + h_off[None, :] * mask_s1, mask=eh_mask, other=0.0)
    acc = acc * scale[:, None] + _sum(p[:, :, None] * xj, 0)
    return m_new, l_run, acc


@triton.jit
def _fwd_kernel(
    offsets_ptr, indices_ptr, map_ptr, order_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    mask_ptr, mask_s0, mask_s1,
    out_ptr, lse_ptr, att_ptr,
    H, C, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr,
    RETURN_ATT: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, BIG_E: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    row = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
    start = tl.load(offsets_ptr + row).to(tl.int64)
    end = tl.load(offsets_ptr + row + 1).to(tl.int64)
    D = H * C
    if V2:
        xi = tl.load(x_dst_ptr + row * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
        aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    else:
        xi = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        aw = xi

    m_run = tl.full([HG], -1.0e30, tl.float32)
    l_run = tl.full([HG], 0.0, tl.float32)
    acc = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    big_end = start + (end - start) // BIG_E * BIG_E
    for e0 in range(start, big_end, BIG_E):  # long rows: full big blocks
        m_run, l_run, acc = _fwd_block(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, m_run, l_run, acc,
                                       indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                                       mask_ptr, mask_s0, mask_s1, att_ptr, H, D, alpha,
                                       V2, HAS_MAP, HAS_EDGE, HAS_MASK, RETURN_ATT, ACT, BIG_E)
    for e0 in range(big_end, end, BLOCK_E):  # light rows and the rest: small blocks
        m_run, l_run, acc = _fwd_block(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, m_run, l_run, acc,
                                       indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                                       mask_ptr, mask_s0, mask_s1, att_ptr, H, D, alpha,
                                       V2, HAS_MAP, HAS_EDGE, HAS_MASK, RETURN_ATT, ACT, BLOCK_E)

    has_edges = l_run > 0
    inv = tl.where(has_edges, 1.0 / tl.where(has_edges, l_run, 1.0), 0.0)
    tl.store(out_ptr + row * D + hc, acc * inv[:, None], mask=hc_mask)
    lse = tl.where(has_edges, m_run + tl.log(tl.where(has_edges, l_run, 1.0)), 0.0)
    tl.store(lse_ptr + row * H + h_off, lse, mask=hm)
    if RETURN_ATT:
        tl.debug_barrier()  # the raw logits stored above, by other threads of this program, are read below
        for e0 in range(start, end, BIG_E):
            e_pos = e0 + tl.arange(0, BIG_E)
            e_mask = e_pos < end
            eh_mask = e_mask[:, None] & hm[None, :]
            if HAS_MAP:
                coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
            else:
                coo = e_pos
            att_off = coo[:, None] * H + h_off[None, :]
            s = tl.load(att_ptr + att_off, mask=eh_mask, other=0.0)
            tl.debug_barrier()  # the slots read above are overwritten below, possibly by other threads
            a = tl.exp(s - lse[None, :])
            if HAS_MASK:
                a = a * tl.load(mask_ptr + coo[:, None] * mask_s0 + h_off[None, :] * mask_s1, mask=eh_mask, other=0.0)
            tl.store(att_ptr + att_off, a, mask=eh_mask)


# ---------------------------------------------------------------------------------------------------- backward
@triton.jit
def _bwd_dst_block1(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, dout, lse, delta,
                    indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                    mask_ptr, mask_s0, mask_s1, datt_ptr, alpha_buf_ptr, ds_buf_ptr,
                    H, D, alpha,
                    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr,
                    HAS_DATT: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """Pass 1 over one block: ``p`` and ``g`` per (edge, head) into the buffers, ``delta`` accumulated."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    xj = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    s, coo = _logits(e_pos, e_mask, src, row, h_off, hm, hc, hc_mask, xj, xi, aw,
                     map_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, ACT)
    p = tl.where(eh_mask, tl.exp(s - lse[None, :]), 0.0)
    g = _sum(xj * dout[None, :, :], 2)
    if HAS_DATT:
        g += tl.load(datt_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
    a = p
    if HAS_MASK:
        a = p * tl.load(mask_ptr + coo[:, None] * mask_s0 + h_off[None, :] * mask_s1, mask=eh_mask, other=0.0)
    delta += _sum(a * g, 0)
    buf_off = e_pos[:, None] * H + h_off[None, :]
    tl.store(alpha_buf_ptr + buf_off, p, mask=eh_mask)
    tl.store(ds_buf_ptr + buf_off, g, mask=eh_mask)
    return delta


@triton.jit
def _bwd_dst_block2(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, delta, dxi, datt_w, dsd,
                    indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                    mask_ptr, mask_s0, mask_s1, alpha_buf_ptr, ds_buf_ptr, dedge_ptr, dsedge_ptr,
                    H, D, alpha,
                    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr,
                    ACT: tl.constexpr, BLOCK: tl.constexpr):
    """Pass 2 over one block: ``ds``, the per-edge gradients, the destination-side sums accumulated."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    if HAS_MAP:
        coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    else:
        coo = e_pos
    buf_off = e_pos[:, None] * H + h_off[None, :]
    p = tl.load(alpha_buf_ptr + buf_off, mask=eh_mask, other=0.0)
    g = tl.load(ds_buf_ptr + buf_off, mask=eh_mask, other=0.0)
    # this block overwrites the slots it just read, possibly from other threads (the stores below may take another
    # layout): every read lands before any of those writes
    tl.debug_barrier()
    if HAS_MASK:
        mk = tl.load(mask_ptr + coo[:, None] * mask_s0 + h_off[None, :] * mask_s1, mask=eh_mask, other=0.0)
    else:
        mk = tl.where(eh_mask, 1.0, 0.0)
    ds = p * (mk * g - delta[None, :])
    tl.store(alpha_buf_ptr + buf_off, p * mk, mask=eh_mask)
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    if V2:
        tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
        z = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask,
                    other=0.0).to(tl.float32) + xi[None, :, :]
        f_off = coo[:, None, None] * D + hc[None, :, :]
        if HAS_EDGE:
            z += tl.load(edge_ptr + f_off, mask=tile_mask, other=0.0).to(tl.float32)
        dz = ds[:, :, None] * aw[None, :, :] * _act_grad(z, ACT, alpha)
        dz = tl.where(tile_mask, dz, 0.0)
        dxi += _sum(dz, 0)
        datt_w += _sum(ds[:, :, None] * tl.where(tile_mask, _act(z, ACT, alpha), 0.0), 0)
        if HAS_EDGE:
            tl.store(dedge_ptr + f_off, dz, mask=tile_mask)
        tl.store(ds_buf_ptr + buf_off, ds, mask=eh_mask)
    else:
        t = tl.load(ssrc_ptr + src[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        t += tl.load(sdst_ptr + row * H + h_off, mask=hm, other=0.0)[None, :]
        if HAS_EDGE:
            t += tl.load(sedge_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        dz = tl.where(eh_mask, ds * _act_grad(t, ACT, alpha), 0.0)
        dsd += _sum(dz, 0)
        if HAS_EDGE:
            tl.store(dsedge_ptr + coo[:, None] * H + h_off[None, :], dz, mask=eh_mask)
        tl.store(ds_buf_ptr + buf_off, dz, mask=eh_mask)
    return dxi, datt_w, dsd


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
    HAS_DATT: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, BIG_E: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Destination pass: for destination ``i`` and each head ``h`` of the program's group, recompute
    ``p_e = exp(s_e - lse_i)`` and ``alpha_e = p_e m_e``; ``g_e = <dout_i, x_j> + datt_e``;
    ``delta_i = sum_e alpha_e g_e``; ``ds_e = p_e (m_e g_e - delta_i)`` (the softmax backward with the dropout
    factor inside). Writes ``alpha`` and the logit gradient to ``[E, H]`` CSC buffers for the source pass (GAT:
    ``dz = ds act'(z)``; GATv2: ``ds``), and the destination-side and per-edge gradients."""
    row = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
    start = tl.load(offsets_ptr + row).to(tl.int64)
    end = tl.load(offsets_ptr + row + 1).to(tl.int64)
    D = H * C
    lse = tl.load(lse_ptr + row * H + h_off, mask=hm, other=0.0)
    dout = tl.load(dout_ptr + row * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
    if V2:
        xi = tl.load(x_dst_ptr + row * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
        aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    else:
        xi = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        aw = xi
    big_end = start + (end - start) // BIG_E * BIG_E

    # pass 1: p and g per edge (kept in the [E, H] buffers), delta of the row
    delta = tl.full([HG], 0.0, tl.float32)
    for e0 in range(start, big_end, BIG_E):
        delta = _bwd_dst_block1(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, dout, lse, delta,
                                indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                                mask_ptr, mask_s0, mask_s1, datt_ptr, alpha_buf_ptr, ds_buf_ptr, H, D, alpha,
                                V2, HAS_MAP, HAS_EDGE, HAS_MASK, HAS_DATT, ACT, BIG_E)
    for e0 in range(big_end, end, BLOCK_E):
        delta = _bwd_dst_block1(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, dout, lse, delta,
                                indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                                mask_ptr, mask_s0, mask_s1, datt_ptr, alpha_buf_ptr, ds_buf_ptr, H, D, alpha,
                                V2, HAS_MAP, HAS_EDGE, HAS_MASK, HAS_DATT, ACT, BLOCK_E)

    # pass 2: ds, then the destination-side and per-edge gradients. p and g were stored in pass 1 in the layout of
    # a reduction and are read back here in another: without the barrier a thread can read them before another
    # thread's store lands (a race the sequential interpreter cannot show)
    tl.debug_barrier()
    dxi = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    datt_w = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    dsd = tl.full([HG], 0.0, tl.float32)
    for e0 in range(start, big_end, BIG_E):
        dxi, datt_w, dsd = _bwd_dst_block2(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, delta, dxi, datt_w, dsd,
                                           indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                                           mask_ptr, mask_s0, mask_s1, alpha_buf_ptr, ds_buf_ptr, dedge_ptr,
                                           dsedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, HAS_MASK, ACT, BIG_E)
    for e0 in range(big_end, end, BLOCK_E):
        dxi, datt_w, dsd = _bwd_dst_block2(e0, end, row, h_off, hm, hc, hc_mask, xi, aw, delta, dxi, datt_w, dsd,
                                           indices_ptr, map_ptr, x_src_ptr, edge_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
                                           mask_ptr, mask_s0, mask_s1, alpha_buf_ptr, ds_buf_ptr, dedge_ptr,
                                           dsedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, HAS_MASK, ACT, BLOCK_E)
    if V2:
        tl.store(dx_dst_ptr + row * D + hc, dxi, mask=hc_mask)
        tl.store(dattw_part_ptr + row * D + hc, datt_w, mask=hc_mask)
    else:
        tl.store(dsdst_ptr + row * H + h_off, dsd, mask=hm)


@triton.jit
def _bwd_src_block(k0, end, xj, aw, h_off, hm, hc, hc_mask, dx, dss,
                   rev_to_csc_ptr, dst_index_ptr, map_ptr, x_dst_ptr, edge_ptr, dout_ptr, alpha_buf_ptr, ds_buf_ptr,
                   H, D, alpha,
                   V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, ACT: tl.constexpr,
                   BLOCK: tl.constexpr):
    """One block of a source's out-edges (reverse-CSC positions ``k0 .. k0 + BLOCK``)."""
    k = k0 + tl.arange(0, BLOCK)
    k_mask = k < end
    kh_mask = k_mask[:, None] & hm[None, :]
    e_pos = tl.load(rev_to_csc_ptr + k, mask=k_mask, other=0).to(tl.int64)
    i = tl.load(dst_index_ptr + e_pos, mask=k_mask, other=0).to(tl.int64)
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
            if HAS_MAP:
                coo = tl.load(map_ptr + e_pos, mask=k_mask, other=0).to(tl.int64)
            else:
                coo = e_pos
            z += tl.load(edge_ptr + coo[:, None, None] * D + hc[None, :, :], mask=tile_mask,
                         other=0.0).to(tl.float32)
        dz = ds[:, :, None] * aw[None, :, :] * _act_grad(z, ACT, alpha)
        dx += _sum(tl.where(tile_mask, dz, 0.0), 0)
    else:
        dss += _sum(ds, 0)
    return dx, dss


@triton.jit
def _bwd_src_kernel(
    rev_offsets_ptr, rev_to_csc_ptr, dst_index_ptr, map_ptr, order_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, attw_ptr,
    dout_ptr, alpha_buf_ptr, ds_buf_ptr,
    dx_src_ptr, dssrc_ptr,
    H, C, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, BIG_E: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Source pass over the reverse CSC: for source ``j`` and each head ``h`` of the program's group,
    ``dx_j = sum_e alpha_e dout_i`` plus, for GATv2, ``sum_e ds_e a act'(x_j + x_i + f_e)``; for GAT the score
    gradient ``dscore_src_j = sum_e dz_e``."""
    j = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
    start = tl.load(rev_offsets_ptr + j).to(tl.int64)
    end = tl.load(rev_offsets_ptr + j + 1).to(tl.int64)
    D = H * C
    if V2:
        xj = tl.load(x_src_ptr + j * D + hc, mask=hc_mask, other=0.0).to(tl.float32)
        aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    else:
        xj = tl.full([HG, BLOCK_C], 0.0, tl.float32)
        aw = xj
    dx = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    dss = tl.full([HG], 0.0, tl.float32)
    big_end = start + (end - start) // BIG_E * BIG_E
    for k0 in range(start, big_end, BIG_E):
        dx, dss = _bwd_src_block(k0, end, xj, aw, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, map_ptr, x_dst_ptr, edge_ptr, dout_ptr,
                                 alpha_buf_ptr, ds_buf_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, ACT, BIG_E)
    for k0 in range(big_end, end, BLOCK_E):
        dx, dss = _bwd_src_block(k0, end, xj, aw, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, map_ptr, x_dst_ptr, edge_ptr, dout_ptr,
                                 alpha_buf_ptr, ds_buf_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, ACT, BLOCK_E)
    tl.store(dx_src_ptr + j * D + hc, dx, mask=hc_mask)
    if not V2:
        tl.store(dssrc_ptr + j * H + h_off, dss, mask=hm)


# ---------------------------------------------------------------------------------------------------- launchers
def _or(t: Tensor | None, fallback: Tensor) -> Tensor:
    """Triton needs a pointer for every argument; unused optional inputs get a harmless stand-in."""
    return fallback if t is None else t


def _config(x_src: Tensor, heads: int, v2: bool) -> tuple[int, int, dict[str, int]]:
    """``(C, head groups, launch keywords)`` for a call."""
    c = x_src.shape[1] // heads
    block_e, big_e, hg, block_c, num_warps = block_sizes(heads, c, v2, MAX_TILE_D)  # the global read per call
    return c, triton.cdiv(heads, hg), dict(BLOCK_E=block_e, BIG_E=big_e, HG=hg, BLOCK_C=block_c,
                                           num_warps=num_warps)


def launch_forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, row_order: Tensor,
                   x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None, attw: Tensor | None,
                   score_src: Tensor | None, score_dst: Tensor | None, score_edge: Tensor | None,
                   mask: Tensor | None, out: Tensor, lse: Tensor, att: Tensor | None, *,
                   v2: bool, heads: int, act: str, alpha: float) -> None:
    """Fill ``out [Nd, H*C]`` (any float dtype), ``lse [Nd, H]`` fp32 and, if given, ``att [E, H]`` fp32 (COO)."""
    nd = offsets.shape[0] - 1
    if nd == 0:
        return
    c, groups, cfg = _config(x_src, heads, v2)
    has_edge = (edge if v2 else score_edge) is not None
    _fwd_kernel[(nd, groups)](
        offsets, indices, _or(map_csc_to_coo, indices), row_order,
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(attw, x_src),
        _or(score_src, lse), _or(score_dst, lse), _or(score_edge, lse),
        _or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1),
        out, lse, _or(att, lse),
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=has_edge, HAS_MASK=mask is not None,
        RETURN_ATT=att is not None, ACT=ACTIVATION_CODES[act], **cfg,
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
    c, groups, cfg = _config(x_src, heads, v2)
    has_edge = (edge if v2 else score_edge) is not None
    _bwd_dst_kernel[(nd, groups)](
        offsets, indices, _or(map_csc_to_coo, indices), row_order,
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(attw, x_src),
        _or(score_src, lse), _or(score_dst, lse), _or(score_edge, lse),
        _or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1),
        lse, dout, _or(datt, lse),
        alpha_buf, ds_buf,
        _or(dx_dst, lse), _or(dedge, lse), _or(dattw_part, lse), _or(dscore_dst, lse), _or(dscore_edge, lse),
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=has_edge, HAS_MASK=mask is not None,
        HAS_DATT=datt is not None, ACT=ACTIVATION_CODES[act], **cfg,
    )


def launch_backward_src(rev_offsets: Tensor, rev_to_csc: Tensor, dst_index: Tensor, map_csc_to_coo: Tensor | None,
                        src_order: Tensor, x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None,
                        attw: Tensor | None, dout: Tensor, alpha_buf: Tensor, ds_buf: Tensor, dx_src: Tensor,
                        dscore_src: Tensor | None, *, v2: bool, heads: int, act: str, alpha: float) -> None:
    """Source pass; fills ``dx_src [Ns, H*C]`` and, for GAT, ``dscore_src [Ns, H]`` fp32."""
    ns = rev_offsets.shape[0] - 1
    if ns == 0:
        return
    c, groups, cfg = _config(x_src, heads, v2)
    _bwd_src_kernel[(ns, groups)](
        rev_offsets, rev_to_csc, dst_index, _or(map_csc_to_coo, rev_to_csc), src_order,
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(attw, x_src),
        dout, alpha_buf, ds_buf,
        dx_src, _or(dscore_src, alpha_buf),
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=edge is not None, ACT=ACTIVATION_CODES[act], **cfg,
    )
