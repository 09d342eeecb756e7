"""GAT's per-node scores ``[N, H]`` (``a_src . x_j``, ``a_dst . x_i``) in one launch, and their backward folded into
the feature and head-vector gradients (which also completes ``d score_dst`` as GAT's destination sum leaves it)."""


from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.kernels.common import (
    _head_group,
    _idx,
    _or,
    _sum,
)
from cudnn_gnn.backends.triton.kernels.gat_backward import DstScoreGrad, _dst_score_rows
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["launch_node_scores", "launch_node_scores_backward"]


@cached_launch
@triton.jit(do_not_specialize=["N0", "N1"])
def _node_scores_kernel(x0_ptr, x1_ptr, a_ptr, s0_ptr, s1_ptr, N0, N1, H, C,
                        SEPARATE: tl.constexpr, BLOCK_N: tl.constexpr, HG: tl.constexpr, BLOCK_C: tl.constexpr,
                        I64: tl.constexpr):
    """GAT's per-node scores for ``BLOCK_N`` rows and the program's head group, float32: ``s0[n, h] = sum_c x0[n,
    h*C + c] a[h*C + c]`` for ``n < N0`` and ``s1[n, h] = sum_c x1[n, h*C + c] a[H*C + h*C + c]`` for ``n < N1``;
    ``SEPARATE`` False: ``x1`` is ``x0`` (a homogeneous graph, ``N1 <= N0``), read once for both. Each feature row
    read once, in its own dtype; the row counts are not specialised on (a sampled batch's vary)."""
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    D = H * C
    rows = _idx(tl.program_id(0), I64) * BLOCK_N + tl.arange(0, BLOCK_N)
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
def _node_scores_bwd_kernel(x0_ptr, x1_ptr, a_ptr, g0_ptr, g1_ptr, g1_part_ptr, offsets_ptr, dx0_ptr, dx1_ptr, part_ptr,
                            N0, N1, H, C, ROWS,
                            SEPARATE: tl.constexpr, BLOCK_N: tl.constexpr, HG: tl.constexpr,
                            BLOCK_C: tl.constexpr, G1_BLOCK: tl.constexpr, I64: tl.constexpr):
    """The backward of :func:`_node_scores_kernel` for the rows ``p * ROWS .. (p + 1) * ROWS`` of program ``p`` (in
    blocks of ``BLOCK_N``) and the program's head group, from the float32 score gradients ``g0 [N0, H]`` and ``g1
    [N1, H]``, the latter as GAT's destination sum leaves it (``g1``, ``g1_part`` and the graph's ``offsets``, its
    blocks of ``G1_BLOCK`` edges: :class:`~cudnn_gnn.backends.triton.kernels.gat_backward.DstScoreGrad`, completed
    per row here): the features' share, ``dx0[n, h*C + c] += g0[n, h] a0[h*C + c]`` (a read-modify-write of the buffer the
    attention kernels wrote, in its dtype, float32 arithmetic) and ``dx1[n, :] = g1[n, h] a1`` (``SEPARATE``: a
    write of its own); with ``SEPARATE`` False (``x1`` is ``x0``, ``dx1`` is ``dx0``) both terms in the one
    read-modify-write of ``dx0``. The head vectors' share, as the program's partial sums ``part[p, 0, h*C + c] =
    sum_n g0[n, h] x0[n, h*C + c]`` and ``part[p, 1, :]`` likewise for ``x1`` (``part [P, 2, H*C]`` float32, summed
    over ``P`` by the caller in a fixed order). Every ``[N, H*C]`` tensor is read (or written) once."""
    h_off, hm, hc, hc_mask = _head_group(H, C, HG, BLOCK_C, I64)
    D = H * C
    a0 = tl.load(a_ptr + hc, mask=hc_mask, other=0.0).to(tl.float32)
    a1 = tl.load(a_ptr + D + hc, mask=hc_mask, other=0.0).to(tl.float32)
    p0 = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    p1 = tl.full([HG, BLOCK_C], 0.0, tl.float32)
    first = _idx(tl.program_id(0), I64) * ROWS
    for r0 in range(0, ROWS, BLOCK_N):
        rows = first + r0 + tl.arange(0, BLOCK_N)
        m0, m1 = rows < N0, rows < N1
        nh = rows[:, None] * H + h_off[None, :]
        at = rows[:, None, None] * D + hc[None, :, :]
        t0 = m0[:, None, None] & hc_mask[None, :, :]
        t1 = m1[:, None, None] & hc_mask[None, :, :]
        g0 = tl.load(g0_ptr + nh, mask=m0[:, None] & hm[None, :], other=0.0)
        g1 = _dst_score_rows(rows, m1, h_off, hm, g1_ptr, g1_part_ptr, offsets_ptr, H, G1_BLOCK, I64)
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
    out = _idx(tl.program_id(0), I64) * 2 * D + hc
    tl.store(part_ptr + out, p0, mask=hc_mask)
    tl.store(part_ptr + out + D, p1, mask=hc_mask)


def launch_node_scores(x_src: Tensor, x_dst: Tensor | None, a: Tensor, heads: int,
                       out: tuple[Tensor, Tensor] | None = None, launch: Sequence[int] = (), i64: bool = True
                       ) -> tuple[Tensor, Tensor]:
    """``(score_src [Ns, H], score_dst [Nd, H])`` float32 of ``x_src [Ns, H*C]`` and ``x_dst [Nd, H*C]`` (None:
    ``x_src`` itself, ``Nd = Ns``), contiguous, against ``a = att_src | att_dst`` (``[2*H*C]``), in one launch (see
    :func:`_node_scores_kernel`); written into ``out``, two contiguous float32 tensors of those shapes, where
    given. Launch shape: :func:`~cudnn_gnn.backends.triton.tuning.node_score_shape` of ``"scores"`` (``launch``: the
    call's overrides, ``GatCall.launch``). ``i64``: the kernel's offset width, ``I64`` (the call's ``GatCall.i64``;
    int64 by default, right for any size)."""
    n, d = x_src.shape
    n_dst = n if x_dst is None else x_dst.shape[0]
    c = d // max(heads, 1)
    f32: dict[str, Any] = dict(device=x_src.device, dtype=torch.float32)
    s0, s1 = out if out is not None else (torch.empty(n, heads, **f32), torch.empty(n_dst, heads, **f32))
    rows = max(n, n_dst)
    if rows == 0 or heads == 0:
        return s0, s1
    block_n, hg, block_c, groups, num_warps = tuning.node_score_shape("scores", heads, c, launch)
    _node_scores_kernel[(tuning.cdiv(rows, block_n), groups)](
        x_src, _or(x_dst, x_src), a, s0, s1, n, n_dst, heads, c, SEPARATE=x_dst is not None, BLOCK_N=block_n, HG=hg,
        BLOCK_C=block_c, I64=i64, num_warps=num_warps)
    return s0, s1


def launch_node_scores_backward(x_src: Tensor, x_dst: Tensor | None, a: Tensor, heads: int, g_src: Tensor,
                                g_dst: DstScoreGrad, dx_src: Tensor, dx_dst: Tensor | None,
                                launch: Sequence[int] = (), i64: bool = True) -> Tensor:
    """The node scores' backward (see :func:`_node_scores_kernel`), in one launch of
    :func:`_node_scores_bwd_kernel`: adds ``g_src a_src`` to ``dx_src [Ns, H*C]`` in place (and, with ``x_dst``
    None, ``g_dst a_dst`` too: ``dx_src`` is then the one feature gradient), writes ``dx_dst [Nd, H*C] = g_dst
    a_dst`` where ``x_dst`` is its own tensor, and returns the head vectors' gradient ``[2*H*C]`` float32 (``d
    a_src | d a_dst``: ``sum_n g[n, h] x[n, h*C + c]``, per-program partials summed in a fixed order). ``g_src [Ns,
    H]``: float32, contiguous; ``g_dst``: ``d score_dst [Nd, H]`` as GAT's one-gather backward returns it
    (:class:`~cudnn_gnn.backends.triton.kernels.gat_backward.DstScoreGrad`: whole rows, the runs of rows that cross
    its blocks, empty rows), completed per row by the kernel; ``dx_src`` contiguous, written by this call's kernels.
    Launch shape: :func:`~cudnn_gnn.backends.triton.tuning.node_score_shape` of ``"scores_bwd"`` (``launch``: the
    call's overrides). ``i64``: the call's offset width (``GatCall.i64``; int64 by default, right for any size); the
    kernel's ``I64`` is :func:`~cudnn_gnn.backends.triton.tuning.kernel_int64_offsets` of ``"scores_bwd"`` on its tile
    (int64 on 64-wide tiles: 8 x 8, one head of 40)."""
    n, d = x_src.shape
    n_dst = n if x_dst is None else x_dst.shape[0]
    c = d // max(heads, 1)
    rows = max(n, n_dst)
    if rows == 0 or heads == 0 or d == 0:
        return torch.zeros(2 * d, device=x_src.device, dtype=torch.float32)
    block_n, hg, block_c, groups, num_warps = tuning.node_score_shape("scores_bwd", heads, c, launch)
    programs, per = tuning.score_bwd_programs(rows, block_n)
    part = torch.empty(programs, 2, d, device=x_src.device, dtype=torch.float32)
    _node_scores_bwd_kernel[(programs, groups)](
        x_src, _or(x_dst, x_src), a, g_src, g_dst.rows, g_dst.part, g_dst.offsets, dx_src, _or(dx_dst, dx_src), part,
        n, n_dst, heads, c, per * block_n, SEPARATE=x_dst is not None, BLOCK_N=block_n, HG=hg, BLOCK_C=block_c,
        G1_BLOCK=g_dst.block, I64=tuning.kernel_int64_offsets("scores_bwd", i64, hg * block_c, c, block_c),
        num_warps=num_warps)
    return part.view(programs, 2 * d).sum(0)
