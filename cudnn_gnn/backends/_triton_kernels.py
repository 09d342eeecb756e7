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

Hub rows are cut into chunks: the programs take the items of a per-graph work list (built once by
:func:`cudnn_gnn.backends.triton.work_list`), a whole row or a chunk of at most ``B`` edges of a longer one, heaviest
first (a sampled block's short rows: whole, in row order). A chunk writes a partial state to its slot (forward:
per-head max, sum of exponentials and unnormalised accumulator; backward: per-head ``delta`` and the destination- or
source-side sums), and one merge program per hub row combines the slots in their fixed order (log-sum-exp for the
forward, plain sums for the backward).

A program walks its row (or chunk) in blocks of ``BLOCK_E`` edges, one block size for every row: a kernel's
registers are allocated for its largest tile, so a bigger block that only long rows used would cost every program
(mostly light rows) its occupancy (measured: docs/performance.md, "One block size"). GAT's destination sum, over
``[E, H]`` floats only, walks long rows in blocks of ``BIG_E`` first (:func:`block_sizes`' pair).

Softmax statistics are kept per (destination, head) as a log-sum-exp ``[Nd, H]`` float32; the backward recomputes
the logits from it and never stores anything of size ``[E, H*C]``. GAT's backward (:func:`launch_gat_backward`)
gathers one feature row per edge, in its source pass; its delta pass and destination sum read per-edge ``[E, H]``
data only. GATv2's (:func:`launch_backward_dst`, :func:`launch_backward_src`) gathers rows in both passes.

Node-sized gradients are written by exactly one program each (destinations in a destination pass, sources in the
source pass over the reverse CSC; for a hub, its merge program), per-edge gradients once per edge (GAT's by the
edge's source program), and GATv2's attention-vector gradient as per-row and per-chunk partial sums reduced in a
fixed order by the caller: no atomics anywhere, so every result is bitwise repeatable.

Where a program stores values (a reduction's layout) and reads them back in another layout, a ``tl.debug_barrier()``
separates the write from the read and the read from the next overwrite (threads of other warps hold the other
layout; the sequential interpreter cannot show such races).

All pointer offsets are computed in int64 (``N * H * C`` and ``E * H * C`` may pass 2**31 with int32 indices);
arithmetic is float32 whatever the storage dtype; stores cast to the destination tensor's dtype.

The heads ``H`` and the head width ``C`` are constexprs of the row kernels (the forward, the destination and source
passes, GAT's delta and source passes; one compiled variant per model shape, as ``HG`` and ``BLOCK_C`` already
were): with them known, a thread's offsets ``h * C + c``
inside a row are constants added to one row address per edge instead of 64-bit addresses computed and held per
element: fewer registers a thread, more warps resident (measured: docs/performance.md, "Heads and
width as constants").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends._triton_launch import cached_launch

__all__ = ["ACTIVATION_CODES", "MAX_TILE_D", "TUNED_SHAPES", "WIDE_TUNED_SHAPES", "block_sizes", "edge_kernel_shape",
           "launch_shape", "launch_forward", "launch_backward_dst", "launch_backward_src", "launch_backward_edge",
           "launch_gat_backward", "launch_node_scores",
           "launch_node_scores_backward"]


def _cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` on the host. ``triton.cdiv`` (and ``triton.next_power_of_2``) are Triton constexpr functions:
    a host call goes through their Python wrapper (argument unwrapping, an import), and the launchers make several
    a step."""
    return -(-a // b)


def _next_pow2(n: int) -> int:
    """The smallest power of two at least ``n >= 1`` on the host (``triton.next_power_of_2``, see :func:`_cdiv`)."""
    return 1 << (n - 1).bit_length()


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
    ``BIG_E = clamp(budget / W, BLOCK_E, 64)`` (the long-row block of GAT's destination sum; the warps rule below
    reads it for every kernel), with a register budget of 8192 tile elements (GAT, one
    live feature tile) or 4096 (GATv2, whose backward holds several); ``num_warps = clamp(min(BIG_E * W, 4096) / 1024,
    2, 8)``: about 32 float32 registers a thread per GATv2 big tile, 64 for GAT's. GAT used to take 8 warps at 8 x 32
    (twice GATv2's 4): a light row's ``[8, 8, 32]`` tile is then 8 elements a thread and every reduction over the edge
    axis crosses 8 warps through shared memory, and half as many programs fit on an SM, in a kernel whose programs are
    mostly light rows (arxiv: 14 edges a row on average, 10 the median). Independent of the storage dtype: tiles are float32 in
    registers."""
    block_c = _next_pow2(max(c, 1))
    hg = min(_next_pow2(max(heads, 1)), max(1, max_tile_d // block_c))
    width = hg * block_c
    block_e = max(2, min(16, 2048 // width))
    big_e = max(block_e, min(64, (4096 if v2 else 8192) // width))
    num_warps = max(2, min(8, min(big_e * width, 4096) // 1024))
    return block_e, big_e, hg, block_c, num_warps


TUNED_SHAPES: Mapping[tuple[str, bool, int], tuple[int, int]] = MappingProxyType({
    ("fwd", False, 4): (8, 1), ("fwd", False, 2): (2, 1),
    ("dst", False, 4): (8, 1), ("dst", False, 2): (8, 1),
    ("src", False, 4): (16, 1), ("src", False, 2): (16, 1),
    ("fwd", True, 4): (2, 2), ("fwd", True, 2): (1, 2),
    ("dst", True, 4): (8, 1), ("dst", True, 2): (1, 2),
    ("src", True, 4): (8, 1), ("src", True, 2): (1, 2),
    ("gat_src", False, 4): (16, 1), ("gat_src", False, 2): (1, 2),
    ("gat_delta", False, 4): (2, 1),
})
"""Launch shapes measured faster than :func:`block_sizes` for tiles at most 256 wide: ``(kernel, v2, element bytes
of the rows the kernel gathers per edge)`` -> ``(KiB of gathered rows a block, num_warps)``. Kernels: ``"fwd"``
(forward, gathers ``x_src``), ``"dst"`` (backward destination pass, ``x_src``), ``"src"`` (backward source pass,
the output gradient), ``"gat_src"`` (GAT's one-gather source pass, the output gradient), ``"gat_delta"`` (its delta
pass, keyed by the output gradient's element size). From the H200 sweeps of
``benchmarks/investigations/triton_tuning.py`` on the arxiv shape, 8 heads x 32 (figures in docs/performance.md); the
kernels with the most live tiles (GAT's one-gather source pass, GATv2's forward and its 16-bit backward) run two
warps on blocks of two edges at 8 x 32: few registers a thread, so many programs resident, each with its gathers in
flight. Read-only: :func:`launch_shape` caches what it derives from it."""


FULL_TILE_SHAPES: Mapping[tuple[str, bool, int], tuple[int, int]] = MappingProxyType({
    ("gat_src", False, 4): (2, 2),
})
"""Entries of :data:`TUNED_SHAPES`' form that hold only for full tiles exactly 256 wide (the head width a power of
two, no padded lanes: 8 x 32, where they were swept), taking precedence there: GAT's float32 one-gather source
pass, two warps on blocks of two edges. Where it was also measured, on products' last layer (4 heads x 47, padded to
4 x 64; a float32 output gradient, the heads averaged; sources of about 50 out-edges, arxiv's 14), it was slower
than :data:`TUNED_SHAPES`' 16 KiB block, which holds there and on every other tile. Which of the two differences
decides was not measured. Figures: docs/performance.md."""


WIDE_TUNED_SHAPES: Mapping[tuple[str, bool, int], tuple[int, int]] = MappingProxyType({
    ("fwd", False, 2): (8, 1), ("src", False, 2): (2, 1),
})
"""Launch shapes measured faster than :func:`block_sizes` for tiles wider than 256 and at most 512: ``(kernel, v2,
element bytes of the gathered rows)`` -> ``(BLOCK_E, num_warps)``. From the H200 sweep of ``bench_sampled.py
--sweep`` on papers100M-shaped sampled blocks, GAT, 4 heads x 128, bfloat16 (figures in docs/performance.md). One
warp a program, as at 256 and below; the source pass takes the smallest block because a sampled block's sources
have one or two out-edges. A combination not listed
(float32, GATv2, the destination pass: not swept at this width) keeps :func:`block_sizes`."""


@functools.cache
def launch_shape(kernel: str, heads: int, c: int, v2: bool, elem_bytes: int,
                 max_tile_d: int = MAX_TILE_D) -> tuple[int, int, int, int, int]:
    """``(BLOCK_E, HG, BLOCK_C, num_warps)`` of ``kernel`` (a :data:`TUNED_SHAPES` kernel name) for ``heads``
    heads of width ``c`` gathering rows of ``elem_bytes`` bytes an element: :func:`block_sizes`, except for a tile
    ``W = HG * BLOCK_C`` at most 256 wide with an entry ``(KiB, warps)`` in :data:`TUNED_SHAPES` (a full tile 256
    wide: :data:`FULL_TILE_SHAPES` first; wider, up to 512,
    with an entry ``(BLOCK_E, warps)`` in :data:`WIDE_TUNED_SHAPES`, which it runs as it stands), which runs
    ``warps`` warps a program and blocks of ``KiB`` of gathered rows (``BLOCK_E = KiB * 1024 / (W * elem_bytes)``,
    clamped to 2..32; 8 in float32 and 16 in bfloat16 at 8 KiB and 8 x 32).

    Why few warps: more programs resident, more gathers in flight, no cross-warp reductions, in kernels whose
    programs are mostly light rows (arxiv: 14 edges a row on average, 10 the median)."""
    block_e, _, hg, block_c, num_warps = block_sizes(heads, c, v2, max_tile_d)
    width = hg * block_c
    wide = WIDE_TUNED_SHAPES.get((kernel, v2, min(elem_bytes, 4))) if 256 < width <= 512 else None
    if wide is not None:
        return wide[0], hg, block_c, wide[1]
    key = (kernel, v2, min(elem_bytes, 4))
    tuned = FULL_TILE_SHAPES.get(key) if width == 256 and c == block_c else None
    tuned = tuned or TUNED_SHAPES.get(key)
    if tuned is None or width > 256:
        return block_e, hg, block_c, num_warps
    kib, num_warps = tuned
    block_e = max(2, min(32, kib * 1024 // (width * elem_bytes)))
    return block_e, hg, block_c, num_warps


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
def _edge_rows(coo, e_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE: tl.constexpr):
    """GATv2's edge term ``f [BLOCK, HG, BLOCK_C]`` (float32) of the COO edges ``coo [BLOCK]`` for the feature offsets
    ``hc [HG, BLOCK_C]``. ``DE == 0``: rows of projected features ``edge [E, H*C]``. ``DE > 0`` (the fused
    projection): ``f = edge_attr[coo] @ W^T`` from raw features ``edge [E, DE]`` and the weight ``W [H*C, DE]`` (PyG's
    ``lin_edge.weight``) at ``ew_ptr``, an unrolled loop over ``DE``: per step one element a row of ``edge_attr`` and a
    ``[HG, BLOCK_C]`` slice of a column of ``W`` (cached), one multiply-add over the tile. Masked lanes are 0."""
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    if DE == 0:
        f = tl.load(edge_ptr + coo[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    else:
        f = tl.where(tile_mask, 0.0, 0.0)
        for k in tl.static_range(DE):
            col = tl.load(edge_ptr + coo * DE + k, mask=e_mask, other=0.0).to(tl.float32)
            wk = tl.load(ew_ptr + hc * DE + k, mask=hc_mask, other=0.0).to(tl.float32)
            f += col[:, None, None] * wk[None, :, :]
    return f


@triton.jit
def _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, xj, xi, aw, sd,
            map_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
            H, D, alpha,
            V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, ACT: tl.constexpr):
    """Logits ``s [BLOCK, HG]`` (float32) of a block of CSC positions ``e_pos [BLOCK]`` with sources ``src`` for the
    heads ``h_off [HG]``, and ``coo``, their COO ids (int64).

    GAT: ``act(score_src[j, h] + sd[h] + score_edge[coo, h])`` with ``sd`` the destination's scores (loaded once per
    program, not per block). GATv2: ``sum_c a[h, c] act(z[h, c])`` with ``z = x_j + x_i + f_coo``;
    ``xj [BLOCK, HG, BLOCK_C]`` is the gathered source tile, ``xi [HG, BLOCK_C]`` the destination's slice,
    ``aw [HG, BLOCK_C]`` the attention vector; ``hc [HG, BLOCK_C]`` the offsets ``h * C + c`` inside a feature row;
    ``f`` from :func:`_edge_rows` (``DE > 0``: projected on the fly)."""
    if HAS_MAP:
        coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    else:
        coo = e_pos
    if V2:
        z = xj + xi[None, :, :]
        if HAS_EDGE:
            z += _edge_rows(coo, e_mask, hc, hc_mask, edge_ptr, ew_ptr, D, DE)
        s = _sum(_act(z, ACT, alpha) * aw[None, :, :], 2)
    else:
        eh_mask = e_mask[:, None] & hm[None, :]
        t = tl.load(ssrc_ptr + src[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0) + sd[None, :]
        if HAS_EDGE:
            t += tl.load(sedge_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0)
        s = _act(t, ACT, alpha)
    return s, coo


@triton.jit
def _item(work_ptr, WHOLE: tl.constexpr):
    """A work item ``(row, start, end, slot)`` (int64): the row's CSC positions ``start .. end`` and where its
    results go, ``slot == -1``: the row itself (the whole row), ``slot >= 0``: partial slot ``slot`` (one chunk of a
    hub row, merged later), ``slot == -2``: nothing (padding of the fixed-size work list). ``WHOLE``: the work list
    is the offsets ``[N+1]`` themselves (see :func:`n_items`): program ``i`` takes row ``i`` whole."""
    pid = tl.program_id(0).to(tl.int64)
    if WHOLE:
        row, start, end, slot = pid, tl.load(work_ptr + pid).to(tl.int64), tl.load(work_ptr + pid + 1).to(tl.int64), \
            pid * 0 - 1
    else:
        item = work_ptr + pid * 4
        row, start, end, slot = tl.load(item).to(tl.int64), tl.load(item + 1).to(tl.int64), \
            tl.load(item + 2).to(tl.int64), tl.load(item + 3).to(tl.int64)
    return row, start, end, slot


@triton.jit
def _normalise_att(start, end, lse, h_off, hm, map_ptr, mask_ptr, mask_s0, mask_s1, att_ptr, H,
                   HAS_MAP: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """Turn the raw logits stored in ``att`` for the CSC positions ``start .. end`` into ``exp(s - lse) * mask``."""
    for e0 in range(start, end, BLOCK):
        e_pos = e0 + tl.arange(0, BLOCK)
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


# ---------------------------------------------------------------------------------------------------- forward
@triton.jit
def _fwd_block(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, m_run, l_run, acc,
               indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
               mask_ptr, mask_s0, mask_s1, att_ptr,
               H, D, alpha,
               V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
               HAS_MASK: tl.constexpr, RETURN_ATT: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """One online-softmax step over the edges ``e0 .. e0 + BLOCK`` (clipped to ``end``) of a row."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    xj = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, xj, xi, aw, sd,
                     map_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE, ACT)
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


@cached_launch
@triton.jit
def _fwd_kernel(
    work_ptr, indices_ptr, map_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, ew_ptr, attw_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    mask_ptr, mask_s0, mask_s1,
    out_ptr, lse_ptr, att_ptr, m_part_ptr, l_part_ptr, acc_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, HAS_MASK: tl.constexpr,
    RETURN_ATT: tl.constexpr, ACT: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """One work item: a whole row writes ``out`` and ``lse`` (and normalises its attention); a chunk of a hub row
    writes its unnormalised state ``(max, sumexp, acc)`` per head to its partial slot, for :func:`_fwd_merge_kernel`.
    """
    row, start, end, slot = _item(work_ptr, WHOLE)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
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
                                       mask_ptr, mask_s0, mask_s1, att_ptr, H, D, alpha,
                                       V2, HAS_MAP, HAS_EDGE, DE, HAS_MASK, RETURN_ATT, ACT, BLOCK_E)

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
        _normalise_att(start, tl.where(slot == -1, end, start), lse, h_off, hm, map_ptr, mask_ptr, mask_s0, mask_s1,
                       att_ptr, H, HAS_MAP, HAS_MASK, BLOCK_E)


@cached_launch
@triton.jit
def _fwd_merge_kernel(
    hubs_ptr, offsets_ptr, map_ptr, mask_ptr, mask_s0, mask_s1,
    m_part_ptr, l_part_ptr, acc_part_ptr, out_ptr, lse_ptr, att_ptr,
    H, C,
    HAS_MAP: tl.constexpr, HAS_MASK: tl.constexpr, RETURN_ATT: tl.constexpr,
    BLOCK_E: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """One hub row (``hubs[pid] = (row, first slot, chunk count)``, count 0 = padding): the chunks' partial states
    combined in slot order by log-sum-exp into ``out`` and ``lse``; then the row's attention normalised."""
    hub = hubs_ptr + tl.program_id(0).to(tl.int64) * 3
    row = tl.load(hub).to(tl.int64)
    slot0 = tl.load(hub + 1).to(tl.int64)
    n = tl.load(hub + 2).to(tl.int64)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    valid = (h_off * 0 + n) > 0
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
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
        start = tl.load(offsets_ptr + row).to(tl.int64)
        end = tl.load(offsets_ptr + row + 1).to(tl.int64)
        _normalise_att(start, tl.where(n > 0, end, start), lse, h_off, hm, map_ptr, mask_ptr, mask_s0, mask_s1,
                       att_ptr, H, HAS_MAP, HAS_MASK, BLOCK_E)


@cached_launch
@triton.jit
def _merge_sum_kernel(hubs_ptr, part_ptr, out_ptr, W, BLOCK_W: tl.constexpr):
    """``out[row, :W] = sum_k part[slot0 + k, :W]`` for the hub ``hubs[pid0] = (row, slot0, n)``, in slot order
    (float32 sums, stored in ``out``'s dtype); padding entries (``n == 0``) write nothing."""
    hub = hubs_ptr + tl.program_id(0).to(tl.int64) * 3
    row = tl.load(hub).to(tl.int64)
    slot0 = tl.load(hub + 1).to(tl.int64)
    n = tl.load(hub + 2).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    cm = cols < W
    acc = tl.full([BLOCK_W], 0.0, tl.float32)
    for k in range(0, n):
        acc += tl.load(part_ptr + (slot0 + k) * W + cols, mask=cm, other=0.0)
    tl.store(out_ptr + row * W + cols, acc, mask=cm & ((cols * 0 + n) > 0))


# ---------------------------------------------------------------------------------------------------- backward
@triton.jit
def _bwd_dst_block1(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, dout, lse, delta,
                    indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
                    mask_ptr, mask_s0, mask_s1, datt_ptr, alpha_buf_ptr, ds_buf_ptr,
                    H, D, alpha,
                    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
                    HAS_MASK: tl.constexpr, HAS_DATT: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """Pass 1 over one block: ``p`` and ``g`` per (edge, head) into the buffers, ``delta`` accumulated."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
    xj = tl.load(x_src_ptr + src[:, None, None] * D + hc[None, :, :], mask=tile_mask, other=0.0).to(tl.float32)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, xj, xi, aw, sd,
                     map_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE, ACT)
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
def _bwd_dst_block2(e0, end, h_off, hm, hc, hc_mask, xi, aw, sd, delta, dxi, datt_w, dsd,
                    indices_ptr, map_ptr, x_src_ptr, edge_ptr, ew_ptr, ssrc_ptr, sedge_ptr,
                    mask_ptr, mask_s0, mask_s1, alpha_buf_ptr, ds_buf_ptr, dedge_ptr, dsedge_ptr,
                    H, D, alpha,
                    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
                    HAS_MASK: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """Pass 2 over one block: ``ds``, the per-edge gradients, the destination-side sums accumulated. With the fused
    projection (``DE > 0``) the edge gradients are left to :func:`_bwd_edge_kernel`, which reads ``ds``."""
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
    mask_ptr, mask_s0, mask_s1,
    lse_ptr, dout_ptr, datt_ptr,
    alpha_buf_ptr, ds_buf_ptr, delta_part_ptr, delta_rows_ptr,
    dx_dst_ptr, dedge_ptr, dattw_ptr, dsdst_ptr, dsedge_ptr,
    dxd_part_ptr, dattw_part_ptr, dsd_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_DATT: tl.constexpr, ACT: tl.constexpr, ONLY_DELTA: tl.constexpr,
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
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
    row, start, end, slot = _item(work_ptr, WHOLE)
    ps = tl.maximum(slot, 0)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
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
                                mask_ptr, mask_s0, mask_s1, datt_ptr, alpha_buf_ptr, ds_buf_ptr, H, D, alpha,
                                V2, HAS_MAP, HAS_EDGE, DE, HAS_MASK, HAS_DATT, ACT, BLOCK_E)
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
                                               sedge_ptr, mask_ptr, mask_s0, mask_s1, alpha_buf_ptr, ds_buf_ptr,
                                               dedge_ptr, dsedge_ptr, H, D, alpha, V2, HAS_MAP, HAS_EDGE, DE,
                                               HAS_MASK, ACT, BLOCK_E)
        if V2:
            tl.store(dx_dst_ptr + row * D + hc, dxi, mask=hc_mask & whole[:, None])
            tl.store(dattw_ptr + row * D + hc, datt_w, mask=hc_mask & whole[:, None])
            tl.store(dxd_part_ptr + ps * D + hc, dxi, mask=hc_mask & part[:, None])
            tl.store(dattw_part_ptr + ps * D + hc, datt_w, mask=hc_mask & part[:, None])
        else:
            tl.store(dsdst_ptr + row * H + h_off, dsd, mask=hm & whole)
            tl.store(dsd_part_ptr + ps * H + h_off, dsd, mask=hm & part)


@triton.jit
def _out_edges(k, k_mask, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, REV_DST: tl.constexpr):
    """``(e_pos, i)`` (int64) of the reverse-CSC positions ``k``: each out-edge's CSC position and destination.
    ``REV_DST``: the destination read from ``rev_dst [E]`` beside the position (both loads depend on ``k`` only),
    else ``dst_index[e_pos]`` (a load that waits for the first)."""
    e_pos = tl.load(rev_to_csc_ptr + k, mask=k_mask, other=0).to(tl.int64)
    if REV_DST:
        i = tl.load(rev_dst_ptr + k, mask=k_mask, other=0).to(tl.int64)
    else:
        i = tl.load(dst_index_ptr + e_pos, mask=k_mask, other=0).to(tl.int64)
    return e_pos, i


@triton.jit
def _bwd_src_block(k0, end, xj, aw, h_off, hm, hc, hc_mask, dx, dss,
                   rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, x_dst_ptr, edge_ptr, ew_ptr, dout_ptr, alpha_buf_ptr,
                   ds_buf_ptr, H, D, alpha,
                   V2: tl.constexpr, HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, DE: tl.constexpr,
                   ACT: tl.constexpr, REV_DST: tl.constexpr, BLOCK: tl.constexpr):
    """One block of a source's out-edges (reverse-CSC positions ``k0 .. k0 + BLOCK``)."""
    k = k0 + tl.arange(0, BLOCK)
    k_mask = k < end
    kh_mask = k_mask[:, None] & hm[None, :]
    e_pos, i = _out_edges(k, k_mask, rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, REV_DST)
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
    BLOCK_E: tl.constexpr, WHOLE: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Source pass over the reverse CSC: for source ``j`` (a work item over reverse-CSC positions) and each head
    ``h`` of the program's group, ``dx_j = sum_e alpha_e dout_i`` plus, for GATv2, ``sum_e ds_e a act'(x_j + x_i +
    f_e)``; for GAT the score gradient ``dscore_src_j = sum_e dz_e``. A chunk of a hub source writes its sums to its
    partial slot (merged in a fixed order afterwards)."""
    j, start, end, slot = _item(work_ptr, WHOLE)
    ps = tl.maximum(slot, 0)
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    whole = (h_off * 0 + slot) == -1  # per head (the same for all): masks combine with block masks of any shape
    part = (h_off * 0 + slot) >= 0
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
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
                                 REV_DST, BLOCK_E)
    tl.store(dx_src_ptr + j * D + hc, dx, mask=hc_mask & whole[:, None])
    tl.store(dx_part_ptr + ps * D + hc, dx, mask=hc_mask & part[:, None])
    if not V2:
        tl.store(dssrc_ptr + j * H + h_off, dss, mask=hm & whole)
        tl.store(dss_part_ptr + ps * H + h_off, dss, mask=hm & part)


@cached_launch
@triton.jit
def _bwd_edge_kernel(
    indices_ptr, dst_index_ptr, map_ptr,
    x_src_ptr, x_dst_ptr, edge_ptr, ew_ptr, attw_ptr, ds_buf_ptr,
    dedge_ptr, dew_part_ptr,
    E, SPAN, H, C, alpha,
    HAS_MAP: tl.constexpr, DEDGE: tl.constexpr, DEW: tl.constexpr, ACT: tl.constexpr, DE: tl.constexpr,
    DE_PAD: tl.constexpr, BLOCK: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """GATv2's fused edge projection, backward: program ``p`` takes the CSC positions ``p * SPAN .. (p + 1) * SPAN``
    (all heads, ``HG >= H``), recomputes ``dz_e = ds_e a act'(x_j + x_i + edge_attr_e W^T)`` per edge (``ds`` from
    the destination pass's buffer, dropout inside) and writes ``d edge_attr_e = dz_e W`` (``[DE]`` per edge, each
    edge once: ``DEDGE``) and its partial ``sum_e edge_attr_e^T dz_e`` of ``dW`` to row ``p`` of
    ``dew_part [P, H*C, DE]`` (``DEW``), which the caller sums over ``p`` in a fixed order. The ``[DE_PAD, HG,
    BLOCK_C]`` partial lives in registers (the caller bounds ``DE_PAD * HG * BLOCK_C``)."""
    p = tl.program_id(0).to(tl.int64)
    start = p * SPAN
    end = tl.minimum(start + SPAN, E)
    h_off = tl.arange(0, HG).to(tl.int64)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    hc = h_off[:, None] * C + c_off[None, :]
    hc_mask = hm[:, None] & (c_off < C)[None, :]
    D = H * C
    aw = tl.load(attw_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    k_off = tl.arange(0, DE_PAD).to(tl.int64)
    dew = tl.full([DE_PAD, HG, BLOCK_C], 0.0, tl.float32)
    for e0 in range(start, end, BLOCK):
        e_pos = e0 + tl.arange(0, BLOCK)
        e_mask = e_pos < end
        eh_mask = e_mask[:, None] & hm[None, :]
        tile_mask = e_mask[:, None, None] & hc_mask[None, :, :]
        src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
        dst = tl.load(dst_index_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
        if HAS_MAP:
            coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
        else:
            coo = e_pos
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


# ---------------------------------------------------------------------------------------------------- GAT backward
# GAT's backward with one row gather per edge (see launch_gat_backward): a delta pass over the destinations (the
# rows of dout and out once per node; per edge only [E, H] data, and only for a gradient on the attention), the
# source pass (dout_i gathered per out-edge, x_j loaded once per source), and a destination sum over the [E, H]
# buffer the source pass wrote. No program reads back what it stored itself: no barriers needed.
@triton.jit
def _head_group(H, C, HG: tl.constexpr, BLOCK_C: tl.constexpr):
    """The program's head group (axis 1 of the grid): ``h_off [HG]`` (int64), its mask, the feature offsets
    ``hc [HG, BLOCK_C] = h * C + c`` and their mask."""
    h_off = tl.program_id(1).to(tl.int64) * HG + tl.arange(0, HG)
    hm = h_off < H
    c_off = tl.arange(0, BLOCK_C)
    return h_off, hm, h_off[:, None] * C + c_off[None, :], hm[:, None] & (c_off < C)[None, :]


@triton.jit
def _coo_ids(map_ptr, e_pos, e_mask, HAS_MAP: tl.constexpr):
    """The COO ids (int64) of the CSC positions ``e_pos``: through the CSC -> COO map, or the positions themselves
    where no edge tensor is read or written (no map)."""
    if HAS_MAP:
        coo = tl.load(map_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    else:
        coo = e_pos
    return coo


@triton.jit
def _gat_delta_block(e0, end, h_off, hm, hc, hc_mask, sd, lse, acc,
                     indices_ptr, map_ptr, ssrc_ptr, sedge_ptr, mask_ptr, mask_s0, mask_s1, datt_ptr,
                     H, alpha,
                     HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr, ACT: tl.constexpr,
                     BLOCK: tl.constexpr):
    """``acc += sum_e alpha_e datt_e`` over the CSC positions ``e0 .. e0 + BLOCK`` (clipped to ``end``) of a row."""
    e_pos = e0 + tl.arange(0, BLOCK)
    e_mask = e_pos < end
    eh_mask = e_mask[:, None] & hm[None, :]
    src = tl.load(indices_ptr + e_pos, mask=e_mask, other=0).to(tl.int64)
    s, coo = _logits(e_pos, e_mask, src, h_off, hm, hc, hc_mask, sd, sd, sd, sd,
                     map_ptr, ssrc_ptr, ssrc_ptr, ssrc_ptr, sedge_ptr, H, 0, alpha, False, HAS_MAP, HAS_EDGE, 0, ACT)
    a = tl.where(eh_mask, tl.exp(s - lse[None, :]), 0.0)
    if HAS_MASK:
        a = a * tl.load(mask_ptr + coo[:, None] * mask_s0 + h_off[None, :] * mask_s1, mask=eh_mask, other=0.0)
    return acc + _sum(a * tl.load(datt_ptr + coo[:, None] * H + h_off[None, :], mask=eh_mask, other=0.0), 0)


@cached_launch
@triton.jit
def _bwd_gat_delta_kernel(
    work_ptr, offsets_ptr, indices_ptr, map_ptr, ssrc_ptr, sdst_ptr, sedge_ptr,
    mask_ptr, mask_s0, mask_s1, lse_ptr, dout_ptr, out_ptr, datt_ptr,
    delta_ptr, delta_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr, HAS_DATT: tl.constexpr,
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
                                     indices_ptr, map_ptr, ssrc_ptr, sedge_ptr, mask_ptr, mask_s0, mask_s1,
                                     datt_ptr, H, alpha, HAS_MAP, HAS_EDGE, HAS_MASK, ACT, BLOCK_E)
    tl.store(delta_ptr + row * H + h_off, delta, mask=hm & whole)
    tl.store(delta_part_ptr + tl.maximum(slot, 0) * H + h_off, delta, mask=hm & part)


@triton.jit
def _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                   rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, mask_ptr, mask_s0, mask_s1,
                   lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                   H, D, alpha,
                   HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr, HAS_DATT: tl.constexpr,
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
    if HAS_MASK:
        mk = tl.load(mask_ptr + coo[:, None] * mask_s0 + h_off[None, :] * mask_s1, mask=kh_mask, other=0.0)
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
    x_src_ptr, ssrc_ptr, sdst_ptr, sedge_ptr, mask_ptr, mask_s0, mask_s1,
    lse_ptr, delta_ptr, dout_ptr, datt_ptr,
    dz_buf_ptr, dx_src_ptr, dssrc_ptr, dsedge_ptr, dx_part_ptr, dss_part_ptr,
    H: tl.constexpr, C: tl.constexpr, alpha,
    HAS_MAP: tl.constexpr, HAS_EDGE: tl.constexpr, HAS_MASK: tl.constexpr, HAS_DATT: tl.constexpr,
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
    for k0 in range(start, end, BLOCK_E):
        dx, dss = _gat_src_block(k0, end, xj, ssj, h_off, hm, hc, hc_mask, dx, dss,
                                 rev_to_csc_ptr, dst_index_ptr, rev_dst_ptr, map_ptr, sdst_ptr, sedge_ptr, mask_ptr,
                                 mask_s0, mask_s1, lse_ptr, delta_ptr, dout_ptr, datt_ptr, dz_buf_ptr, dsedge_ptr,
                                 H, D, alpha, HAS_MAP, HAS_EDGE, HAS_MASK, HAS_DATT, ACT, REV_DST, BLOCK_E)
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


# ---------------------------------------------------------------------------------------------------- launchers
def _or(t: Tensor | None, fallback: Tensor) -> Tensor:
    """Triton needs a pointer for every argument; unused optional inputs get a harmless stand-in."""
    return fallback if t is None else t


def _fused_dim(edge: Tensor | None, edge_weight: Tensor | None) -> int:
    """The kernels' ``DE``: the raw edge width where GATv2's edge projection is fused (``edge_weight`` given), else
    0 (projected rows, or no edge features)."""
    return 0 if edge is None or edge_weight is None else edge.shape[1]


def edge_kernel_shape(heads: int, c: int, dim_edge: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK, HG, BLOCK_C, DE_PAD, num_warps)`` of :func:`_bwd_edge_kernel`: all heads in one program
    (``HG = next_pow2(H)``), ``BLOCK = clamp(2048 / (HG * BLOCK_C), 2, 32)`` edges a block (the GATv2 tiles'
    budget), 8 warps where the ``[DE_PAD, HG, BLOCK_C]`` gradient partial passes 2048 registers' worth, else 4."""
    block_c = _next_pow2(max(c, 1))
    hg = _next_pow2(max(heads, 1))
    de_pad = _next_pow2(max(dim_edge, 1))
    width = hg * block_c
    block = max(2, min(32, 2048 // width))
    return block, hg, block_c, de_pad, 8 if de_pad * width > 2048 else 4


def _config(x_src: Tensor, heads: int, v2: bool, kernel: str, gathered: Tensor) -> tuple[int, int, dict[str, int]]:
    """``(C, head groups, launch keywords)`` for a call of ``kernel`` (see :func:`launch_shape`); ``gathered`` is the
    tensor whose rows it gathers per edge."""
    c = x_src.shape[1] // heads
    # launch_shape looked up per call, so that the tuning sweep can swap it
    block_e, hg, block_c, num_warps = launch_shape(kernel, heads, c, v2, gathered.element_size(), MAX_TILE_D)
    return c, _cdiv(heads, hg), dict(BLOCK_E=block_e, HG=hg, BLOCK_C=block_c, num_warps=num_warps)


def _partial(rows: int, width: int, like: Tensor) -> Tensor:
    """A float32 ``[rows, width]`` partial buffer; with no rows, ``like`` (a float32 tensor of the call) stands in
    as the pointer and nothing is allocated: a work list without chunk items has no program that touches a partial
    (every access is masked by ``slot >= 0``, and the merges launch only for hub rows). A small graph's step is host
    time, of which every allocation is a part."""
    if rows == 0:
        return like
    return torch.empty(rows, width, device=like.device, dtype=torch.float32)


def _merge_sum(hubs: Tensor, part: Tensor, out: Tensor, width: int) -> None:
    """``out[row] = sum of the row's partial slots`` for every hub row, in slot order (see :func:`_merge_sum_kernel`)."""
    if hubs.shape[0] == 0:
        return
    block_w = min(1024, _next_pow2(max(width, 1)))
    _merge_sum_kernel[(hubs.shape[0], _cdiv(width, block_w))](hubs, part, out, width, BLOCK_W=block_w, num_warps=4)


def n_items(work: Tensor) -> int:
    """The programs of a work list: ``work [P, 4]`` (items of :func:`cudnn_gnn.backends.triton.work_list`), or
    offsets ``[N+1]`` themselves for every row whole in row order (``N``; the kernels' ``WHOLE``)."""
    return work.shape[0] - 1 if work.dim() == 1 else work.shape[0]


def launch_forward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, work: Tensor, hub_work: Tensor,
                   hubs: Tensor, x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None, attw: Tensor | None,
                   score_src: Tensor | None, score_dst: Tensor | None, score_edge: Tensor | None,
                   mask: Tensor | None, out: Tensor, lse: Tensor, att: Tensor | None, *,
                   v2: bool, heads: int, act: str, alpha: float, edge_weight: Tensor | None = None) -> None:
    """Fill ``out [Nd, H*C]`` (any float dtype), ``lse [Nd, H]`` fp32 and, if given, ``att [E, H]`` fp32 (COO).

    ``work [P, 4]``, ``hub_work [S, 4]`` and ``hubs [R, 3]`` are the row work list of
    :func:`cudnn_gnn.backends.triton.work_list`: one launch over every item, then one merge program per hub row.
    GATv2's ``edge`` is ``[E, H*C]`` projected features, or with ``edge_weight [H*C, De]`` the raw ``[E, De]`` ones,
    projected in the kernel (see :func:`_edge_rows`)."""
    if n_items(work) == 0:
        return
    c, groups, cfg = _config(x_src, heads, v2, "fwd", x_src)
    has_edge = (edge if v2 else score_edge) is not None
    n_slots = hub_work.shape[0]
    m_part, l_part, acc_part = _partial(n_slots, heads, lse), _partial(n_slots, heads, lse), \
        _partial(n_slots, heads * c, lse)
    mask_args = (_or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1))
    _fwd_kernel[(n_items(work), groups)](
        work, indices, _or(map_csc_to_coo, indices),
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(edge_weight, x_src), _or(attw, x_src),
        _or(score_src, lse), _or(score_dst, lse), _or(score_edge, lse),
        *mask_args,
        out, lse, _or(att, lse), m_part, l_part, acc_part,
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=has_edge, DE=_fused_dim(edge, edge_weight),
        HAS_MASK=mask is not None,
        RETURN_ATT=att is not None, ACT=ACTIVATION_CODES[act], WHOLE=work.dim() == 1, **cfg,
    )
    if hubs.shape[0]:
        _fwd_merge_kernel[(hubs.shape[0], groups)](
            hubs, offsets, _or(map_csc_to_coo, indices), *mask_args,
            m_part, l_part, acc_part, out, lse, _or(att, lse),
            heads, c,
            HAS_MAP=map_csc_to_coo is not None, HAS_MASK=mask is not None, RETURN_ATT=att is not None,
            BLOCK_E=cfg["BLOCK_E"], HG=cfg["HG"], BLOCK_C=cfg["BLOCK_C"], num_warps=cfg["num_warps"],
        )


def launch_backward_dst(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, work: Tensor,
                        hub_work: Tensor, hubs: Tensor,
                        x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None, attw: Tensor | None,
                        score_src: Tensor | None, score_dst: Tensor | None, score_edge: Tensor | None,
                        mask: Tensor | None, lse: Tensor, dout: Tensor, datt: Tensor | None,
                        alpha_buf: Tensor, ds_buf: Tensor, dx_dst: Tensor | None, dedge: Tensor | None,
                        dattw_part: Tensor | None, dscore_dst: Tensor | None, dscore_edge: Tensor | None, *,
                        v2: bool, heads: int, act: str, alpha: float, edge_weight: Tensor | None = None) -> None:
    """Destination pass; fills ``alpha_buf``/``ds_buf`` ``[E, H]`` fp32 (CSC order) for the source pass and the
    destination-side outputs (GATv2: ``dx_dst``, ``dedge`` (projected edges only: with ``edge_weight`` the edge
    gradients come from :func:`launch_backward_edge`), ``dattw_part [Nd + S, H*C]`` fp32 zeros on entry,
    whose rows sum to the attention-vector gradient; GAT: ``dscore_dst``, ``dscore_edge``).

    With hub rows: a pass-1 launch over the chunks (``hub_work``), their ``delta`` merged per row, then the main
    launch over every item and the merges of the chunks' destination-side sums."""
    if n_items(work) == 0:
        return
    nd = offsets.shape[0] - 1
    c, groups, cfg = _config(x_src, heads, v2, "dst", x_src)
    d = heads * c
    has_edge = (edge if v2 else score_edge) is not None
    n_slots, n_hubs = hub_work.shape[0], hubs.shape[0]
    delta_part = _partial(n_slots, heads, lse)
    delta_rows = _partial(nd if n_hubs else 0, heads, lse)
    dxd_part = _partial(n_slots if v2 else 0, d, lse)
    dsd_part = _partial(0 if v2 else n_slots, heads, lse)
    if dattw_part is None:
        dattw_rows = dattw_slots = lse
    else:
        dattw_rows, dattw_slots = dattw_part[:nd], dattw_part[nd:]
    common = (
        indices, _or(map_csc_to_coo, indices),
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(edge_weight, x_src), _or(attw, x_src),
        _or(score_src, lse), _or(score_dst, lse), _or(score_edge, lse),
        _or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1),
        lse, dout, _or(datt, lse),
        alpha_buf, ds_buf, delta_part, delta_rows,
        _or(dx_dst, lse), _or(dedge, lse), dattw_rows, _or(dscore_dst, lse), _or(dscore_edge, lse),
        dxd_part, dattw_slots, dsd_part,
        heads, c, alpha,
    )
    flags = dict(V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=has_edge, DE=_fused_dim(edge, edge_weight),
                 HAS_MASK=mask is not None, HAS_DATT=datt is not None, ACT=ACTIVATION_CODES[act], **cfg)
    if n_hubs:
        _bwd_dst_kernel[(n_slots, groups)](hub_work, *common, ONLY_DELTA=True, WHOLE=False, **flags)
        _merge_sum(hubs, delta_part, delta_rows, heads)
    _bwd_dst_kernel[(n_items(work), groups)](work, *common, ONLY_DELTA=False, WHOLE=work.dim() == 1,
                                             **flags)
    if v2 and dx_dst is not None:
        _merge_sum(hubs, dxd_part, dx_dst, d)
    if not v2 and dscore_dst is not None:
        _merge_sum(hubs, dsd_part, dscore_dst, heads)


def launch_backward_src(rev_to_csc: Tensor, dst_index: Tensor, rev_dst: Tensor | None,
                        map_csc_to_coo: Tensor | None, work: Tensor,
                        hub_work: Tensor, hubs: Tensor, x_src: Tensor, x_dst: Tensor | None, edge: Tensor | None,
                        attw: Tensor | None, dout: Tensor, alpha_buf: Tensor, ds_buf: Tensor, dx_src: Tensor,
                        dscore_src: Tensor | None, *, v2: bool, heads: int, act: str, alpha: float,
                        edge_weight: Tensor | None = None) -> None:
    """Source pass over the source work list (items over reverse-CSC positions); fills ``dx_src [Ns, H*C]`` and, for
    GAT, ``dscore_src [Ns, H]`` fp32; hub sources' chunk sums merged in slot order. ``rev_dst [E]``: the destination
    of each reverse-CSC position, or None (read as ``dst_index[rev_to_csc[k]]``)."""
    if n_items(work) == 0:
        return
    c, groups, cfg = _config(x_src, heads, v2, "src", dout)
    n_slots = hub_work.shape[0]
    dx_part = _partial(n_slots, heads * c, alpha_buf)
    dss_part = _partial(0 if v2 else n_slots, heads, alpha_buf)
    _bwd_src_kernel[(n_items(work), groups)](
        work, rev_to_csc, dst_index, _or(rev_dst, dst_index), _or(map_csc_to_coo, rev_to_csc),
        x_src, _or(x_dst, x_src), _or(edge, x_src), _or(edge_weight, x_src), _or(attw, x_src),
        dout, alpha_buf, ds_buf,
        dx_src, _or(dscore_src, alpha_buf), dx_part, dss_part,
        heads, c, alpha,
        V2=v2, HAS_MAP=map_csc_to_coo is not None, HAS_EDGE=edge is not None, DE=_fused_dim(edge, edge_weight),
        ACT=ACTIVATION_CODES[act], REV_DST=rev_dst is not None, WHOLE=work.dim() == 1, **cfg,
    )
    _merge_sum(hubs, dx_part, dx_src, heads * c)
    if not v2 and dscore_src is not None:
        _merge_sum(hubs, dss_part, dscore_src, heads)


def launch_backward_edge(indices: Tensor, dst_index: Tensor, map_csc_to_coo: Tensor | None, x_src: Tensor,
                         x_dst: Tensor, edge_attr: Tensor, edge_weight: Tensor, attw: Tensor, ds_buf: Tensor,
                         dedge: Tensor | None, dew_part: Tensor | None, span: int, *, heads: int, act: str,
                         alpha: float) -> None:
    """GATv2's fused edge projection after the destination pass (``ds_buf [E, H]`` fp32 holds ``ds``, CSC order):
    ``dedge [E, De]`` (COO order, ``edge_attr``'s gradient) and ``dew_part [P, H*C, De]`` fp32, whose sum over its
    first axis is ``edge_weight``'s gradient; either may be None (not needed). One program per ``span`` CSC
    positions, ``P = cdiv(E, span)`` (see :func:`cudnn_gnn.backends.triton.edge_span`)."""
    e = indices.shape[0]
    if e == 0 or (dedge is None and dew_part is None):
        return
    de = edge_attr.shape[1]
    c = x_src.shape[1] // heads
    block, hg, block_c, de_pad, num_warps = edge_kernel_shape(heads, c, de)
    _bwd_edge_kernel[(_cdiv(e, span),)](
        indices, dst_index, _or(map_csc_to_coo, indices),
        x_src, x_dst, edge_attr, edge_weight, attw, ds_buf,
        _or(dedge, ds_buf), _or(dew_part, ds_buf),
        e, span, heads, c, alpha,
        HAS_MAP=map_csc_to_coo is not None, DEDGE=dedge is not None, DEW=dew_part is not None,
        ACT=ACTIVATION_CODES[act], DE=de, DE_PAD=de_pad, BLOCK=block, HG=hg, BLOCK_C=block_c, num_warps=num_warps,
    )


def launch_gat_backward(offsets: Tensor, indices: Tensor, map_csc_to_coo: Tensor | None, row_work: Tensor,
                        row_hub_work: Tensor, row_hubs: Tensor, rev_to_csc: Tensor, dst_index: Tensor,
                        rev_dst: Tensor | None, src_work: Tensor, src_hub_work: Tensor, src_hubs: Tensor,
                        x_src: Tensor, score_src: Tensor, score_dst: Tensor, score_edge: Tensor | None,
                        mask: Tensor | None, lse: Tensor, out: Tensor, dout: Tensor, datt: Tensor | None,
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
    one float a head, :func:`block_sizes` of heads of width 1 (8 heads: blocks of 16 and 64 edges, 2 warps)."""
    nd, e, n_src, n_rows = offsets.shape[0] - 1, indices.shape[0], n_items(src_work), n_items(row_work)
    c, groups, cfg = _config(x_src, heads, False, "gat_src", dout)
    d = heads * c
    f32: dict[str, Any] = dict(device=x_src.device, dtype=torch.float32)
    delta = torch.empty(nd, heads, **f32)
    dz_buf = torch.empty(e, heads, **f32)
    has_map, has_edge, has_mask = map_csc_to_coo is not None, score_edge is not None, mask is not None
    mask_args = (_or(mask, lse), 0 if mask is None else mask.stride(0), 0 if mask is None else mask.stride(1))
    flags = dict(HAS_MAP=has_map, HAS_EDGE=has_edge, HAS_MASK=has_mask, HAS_DATT=datt is not None,
                 ACT=ACTIVATION_CODES[act])
    if n_rows:  # whole rows and hub chunks in one launch; the chunks' sums merged per row in slot order
        _, delta_groups, delta_cfg = _config(x_src, heads, False, "gat_delta", dout)
        delta_part = _partial(row_hub_work.shape[0], heads, lse)
        _bwd_gat_delta_kernel[(n_rows, delta_groups)](
            row_work, offsets, indices, _or(map_csc_to_coo, indices), score_src, score_dst, _or(score_edge, lse),
            *mask_args, lse, dout, out, _or(datt, lse), delta, delta_part,
            heads, c, alpha, WHOLE=row_work.dim() == 1, **flags, **delta_cfg)
        _merge_sum(row_hubs, delta_part, delta, heads)
    if n_src:
        dx_part = _partial(src_hub_work.shape[0], d, lse)
        dss_part = _partial(src_hub_work.shape[0], heads, lse)
        _bwd_gat_src_kernel[(n_src, groups)](
            src_work, rev_to_csc, dst_index, _or(rev_dst, dst_index), _or(map_csc_to_coo, rev_to_csc),
            x_src, score_src, score_dst, _or(score_edge, lse), *mask_args,
            lse, delta, dout, _or(datt, lse), dz_buf, dx_src, dscore_src, _or(dscore_edge, lse), dx_part, dss_part,
            heads, c, alpha, REV_DST=rev_dst is not None, WHOLE=src_work.dim() == 1, **flags, **cfg)
        _merge_sum(src_hubs, dx_part, dx_src, d)
        _merge_sum(src_hubs, dss_part, dscore_src, heads)
    if n_rows:
        block_e, big_e, hg, _, num_warps = block_sizes(heads, 1, False, MAX_TILE_D)
        dsd_part = _partial(row_hub_work.shape[0], heads, lse)
        _bwd_gat_dst_kernel[(n_rows, _cdiv(heads, hg))](
            row_work, dz_buf, dscore_dst, dsd_part, heads, BLOCK_E=block_e, BIG_E=big_e, WHOLE=row_work.dim() == 1,
            HG=hg, num_warps=num_warps)
        _merge_sum(row_hubs, dsd_part, dscore_dst, heads)


# ---------------------------------------------------------------------------------------------------- node scores
@cached_launch
@triton.jit(do_not_specialize=["N0", "N1"])
def _node_scores_kernel(x0_ptr, x1_ptr, a_ptr, s0_ptr, s1_ptr, N0, N1, H, C,
                        SEPARATE: tl.constexpr, BLOCK_N: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr):
    """GAT's per-node scores for ``BLOCK_N`` rows and the program's head group, float32: ``s0[n, h] = sum_c x0[n,
    h*C + c] a[h*C + c]`` for ``n < N0`` and ``s1[n, h] = sum_c x1[n, h*C + c] a[H*C + h*C + c]`` for ``n < N1``;
    ``SEPARATE`` False: ``x1`` is ``x0`` (a homogeneous graph, ``N1 <= N0``), read once for both. Each feature row
    read once, in its own dtype; the row counts are not specialised on (a sampled batch's vary)."""
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C)
    D = H * C
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m0, m1 = rows < N0, rows < N1
    x0 = tl.load(x0_ptr + rows[:, None, None] * D + hc[None, :, :], mask=m0[:, None, None] & hc_mask[None, :, :],
                 other=0.0).to(tl.float32)
    x1 = x0
    if SEPARATE:
        x1 = tl.load(x1_ptr + rows[:, None, None] * D + hc[None, :, :],
                     mask=m1[:, None, None] & hc_mask[None, :, :], other=0.0).to(tl.float32)
    a0 = tl.load(a_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    a1 = tl.load(a_ptr + D + hc, mask=hc_mask, other=0.0).to(tl.float32)
    out = rows[:, None] * H + h_off[None, :]
    tl.store(s0_ptr + out, _sum(x0 * a0[None, :, :], 2), mask=m0[:, None] & hm[None, :])
    tl.store(s1_ptr + out, _sum(x1 * a1[None, :, :], 2), mask=m1[:, None] & hm[None, :])


@cached_launch
@triton.jit(do_not_specialize=["N0", "N1", "ROWS"])
def _node_scores_bwd_kernel(x0_ptr, x1_ptr, a_ptr, g0_ptr, g1_ptr, dx0_ptr, dx1_ptr, part_ptr, N0, N1, H, C, ROWS,
                            SEPARATE: tl.constexpr, BLOCK_N: tl.constexpr, HG: tl.constexpr,
                            BLOCK_C: tl.constexpr):
    """The backward of :func:`_node_scores_kernel` for the rows ``p * ROWS .. (p + 1) * ROWS`` of program ``p`` (in
    blocks of ``BLOCK_N``) and the program's head group, from the float32 score gradients ``g0 [N0, H]``, ``g1 [N1,
    H]``: the features' share, ``dx0[n, h*C + c] += g0[n, h] a0[h*C + c]`` (a read-modify-write of the buffer the
    attention kernels wrote, in its dtype, float32 arithmetic) and ``dx1[n, :] = g1[n, h] a1`` (``SEPARATE``: a
    write of its own); with ``SEPARATE`` False (``x1`` is ``x0``, ``dx1`` is ``dx0``) both terms in the one
    read-modify-write of ``dx0``. The head vectors' share, as the program's partial sums ``part[p, 0, h*C + c] =
    sum_n g0[n, h] x0[n, h*C + c]`` and ``part[p, 1, :]`` likewise for ``x1`` (``part [P, 2, H*C]`` float32, summed
    over ``P`` by the caller in a fixed order). Every ``[N, H*C]`` tensor is read (or written) once."""
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C)
    D = H * C
    a0 = tl.load(a_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    a1 = tl.load(a_ptr + D + hc, mask=hc_mask, other=0.0).to(tl.float32)
    p0 = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    p1 = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    first = tl.program_id(0).to(tl.int64) * ROWS
    for r0 in range(0, ROWS, BLOCK_N):
        rows = first + r0 + tl.arange(0, BLOCK_N)
        m0, m1 = rows < N0, rows < N1
        nh = rows[:, None] * H + h_off[None, :]
        at = rows[:, None, None] * D + hc[None, :, :]
        t0 = m0[:, None, None] & hc_mask[None, :, :]
        t1 = m1[:, None, None] & hc_mask[None, :, :]
        g0 = tl.load(g0_ptr + nh, mask=m0[:, None] & hm[None, :], other=0.0)
        g1 = tl.load(g1_ptr + nh, mask=m1[:, None] & hm[None, :], other=0.0)
        x0 = tl.load(x0_ptr + at, mask=t0, other=0.0).to(tl.float32)
        p0 += _sum(g0[:, :, None] * x0, 0)
        d0 = g0[:, :, None] * a0[None, :, :]
        if SEPARATE:
            x1 = tl.load(x1_ptr + at, mask=t1, other=0.0).to(tl.float32)
            p1 += _sum(g1[:, :, None] * x1, 0)
            tl.store(dx1_ptr + at, g1[:, :, None] * a1[None, :, :], mask=t1)
        else:
            p1 += _sum(g1[:, :, None] * x0, 0)
            d0 += g1[:, :, None] * a1[None, :, :]
        dx = tl.load(dx0_ptr + at, mask=t0, other=0.0).to(tl.float32)
        tl.store(dx0_ptr + at, dx + d0, mask=t0)
    out = tl.program_id(0).to(tl.int64) * 2 * D + hc
    tl.store(part_ptr + out, p0, mask=hc_mask)
    tl.store(part_ptr + out + D, p1, mask=hc_mask)


SCORE_TILE = 4096
"""The node-score kernel's rows a program: ``BLOCK_N = clamp(SCORE_TILE / (HG * BLOCK_C), 1, 64)`` (a feature tile of
at most ~32 float32 registers a thread at 4 warps; two tiles where ``x_dst`` is its own tensor)."""


def _score_shape(heads: int, c: int) -> tuple[int, int, int, int]:
    """``(BLOCK_N, HG, BLOCK_C, head groups)`` of the node-score kernel (:func:`block_sizes`' head groups)."""
    _, _, hg, block_c, _ = block_sizes(heads, c, False, MAX_TILE_D)
    return max(1, min(64, SCORE_TILE // (hg * block_c))), hg, block_c, _cdiv(heads, hg)


def launch_node_scores(x_src: Tensor, x_dst: Tensor | None, a: Tensor, heads: int,
                       out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """``(score_src [Ns, H], score_dst [Nd, H])`` float32 of ``x_src [Ns, H*C]`` and ``x_dst [Nd, H*C]`` (None:
    ``x_src`` itself, ``Nd = Ns``), contiguous, against ``a = att_src | att_dst`` (``[2*H*C]``), in one launch (see
    :func:`_node_scores_kernel`); written into ``out``, two contiguous float32 tensors of those shapes, where
    given."""
    n, d = x_src.shape
    n_dst = n if x_dst is None else x_dst.shape[0]
    c = d // max(heads, 1)
    f32: dict[str, Any] = dict(device=x_src.device, dtype=torch.float32)
    s0, s1 = out if out is not None else (torch.empty(n, heads, **f32), torch.empty(n_dst, heads, **f32))
    rows = max(n, n_dst)
    if rows == 0 or heads == 0:
        return s0, s1
    block_n, hg, block_c, groups = _score_shape(heads, c)
    _node_scores_kernel[(_cdiv(rows, block_n), groups)](
        x_src, _or(x_dst, x_src), a, s0, s1, n, n_dst, heads, c, SEPARATE=x_dst is not None, BLOCK_N=block_n, HG=hg,
        BLOCK_C=block_c, num_warps=4)
    return s0, s1


SCORE_BWD_PROGRAMS = 4096
"""About how many programs (per head group) :func:`launch_node_scores_backward` launches: each walks
``ROWS = BLOCK_N * ceil(blocks / SCORE_BWD_PROGRAMS)`` rows, so the head vectors' partials stay ``[<= 4096, 2, H*C]``
(8 MiB at 8 x 32) however many rows there are, and a small graph still gets one block of rows a program. Measured
against 1,024 and 16,384: docs/performance.md, "The fold as a kernel"."""


def launch_node_scores_backward(x_src: Tensor, x_dst: Tensor | None, a: Tensor, heads: int, g_src: Tensor,
                                g_dst: Tensor, dx_src: Tensor, dx_dst: Tensor | None) -> Tensor:
    """The node scores' backward (see :func:`_node_scores_kernel`), in one launch of
    :func:`_node_scores_bwd_kernel`: adds ``g_src a_src`` to ``dx_src [Ns, H*C]`` in place (and, with ``x_dst``
    None, ``g_dst a_dst`` too: ``dx_src`` is then the one feature gradient), writes ``dx_dst [Nd, H*C] = g_dst
    a_dst`` where ``x_dst`` is its own tensor, and returns the head vectors' gradient ``[2*H*C]`` float32 (``d
    a_src | d a_dst``: ``sum_n g[n, h] x[n, h*C + c]``, per-program partials summed in a fixed order). ``g_src [Ns,
    H]``, ``g_dst [Nd, H]``: float32, contiguous; ``dx_src`` contiguous, written by this call's kernels."""
    n, d = x_src.shape
    n_dst = n if x_dst is None else x_dst.shape[0]
    c = d // max(heads, 1)
    rows = max(n, n_dst)
    if rows == 0 or heads == 0 or d == 0:
        return torch.zeros(2 * d, device=x_src.device, dtype=torch.float32)
    block_n, hg, block_c, groups = _score_shape(heads, c)
    blocks = _cdiv(rows, block_n)
    per = _cdiv(blocks, SCORE_BWD_PROGRAMS)
    programs = _cdiv(blocks, per)
    part = torch.empty(programs, 2, d, device=x_src.device, dtype=torch.float32)
    _node_scores_bwd_kernel[(programs, groups)](
        x_src, _or(x_dst, x_src), a, g_src, g_dst, dx_src, _or(dx_dst, dx_src), part, n, n_dst, heads, c,
        per * block_n, SEPARATE=x_dst is not None, BLOCK_N=block_n, HG=hg, BLOCK_C=block_c, num_warps=4)
    return part.view(programs, 2 * d).sum(0)
