"""The graph offsets of a packed batch checked and made safe on the device in one launch, for attention calls
that must not sync (:func:`cudnn_gnn.graph_attention` on CUDA with ``max_num_nodes`` given).

The torch ops that did this (comparisons, a reduction, a clamp, a cumulative maximum, a concatenation, a select
of NaN) were seventeen kernel launches a call, most of an eager layer's host time for the check and, captured,
seventeen launches of a few microseconds each on the GPU."""


from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from cudnn_gnn.backends.triton.kernels.common import _max
from cudnn_gnn.backends.triton.launch import cached_launch

__all__ = ["OFFSETS_BLOCK", "launch_checked_offsets"]

OFFSETS_BLOCK = 1024
"""Offsets a step of the one program (a batch of up to 1,023 graphs in one step)."""


@triton.jit
def _running_max(a, b):
    return tl.maximum(a, b)


@cached_launch
@triton.jit(do_not_specialize=["NUM", "N", "MAX_NODES"])
def _checked_offsets_kernel(ptr_ptr, out_ptr, flag_ptr, NUM, N, MAX_NODES, BLOCK: tl.constexpr):
    """One program over ``ptr [NUM]`` (int64 graph offsets, ``NUM = B + 1 >= 2``) in blocks of ``BLOCK``.

    ``out [NUM]`` int64: a valid layout whatever ``ptr`` held: 0 first, ``N`` last, between them ``ptr`` clamped to
    ``[0, N]`` and made non-decreasing (a running maximum carried from block to block), so no graph reaches outside
    the ``N`` rows. ``flag [1]`` (the attention's dtype): 0 where ``ptr`` already was such a layout and no graph
    holds more than ``MAX_NODES`` nodes, else NaN (added to the output, it turns a bad batch's every entry into NaN
    instead of wrong numbers)."""
    run = tl.full([BLOCK], 0, tl.int64)  # every lane holds the running maximum of the blocks before
    bad = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, NUM, BLOCK):
        i = start + tl.arange(0, BLOCK)
        m = i < NUM
        p = tl.load(ptr_ptr + i, mask=m, other=0)
        prev = tl.load(ptr_ptr + i - 1, mask=m & (i > 0), other=0)
        size = p - prev
        wrong = tl.where(i == 0, p != 0, (size < 0) | (size > MAX_NODES)) | ((i == NUM - 1) & (p != N))
        bad = bad | (m & wrong).to(tl.int32)
        c = tl.where(m, tl.minimum(tl.maximum(p, 0), N), 0)
        c = tl.maximum(tl.associative_scan(c, 0, _running_max), run)
        run = tl.full([BLOCK], 0, tl.int64) + _max(c, 0)
        c = tl.where(i == 0, 0, tl.where(i == NUM - 1, N, c))
        tl.store(out_ptr + i, c, mask=m)
    is_bad = _max(bad, 0)
    tl.store(flag_ptr, tl.where(is_bad != 0, float("nan"), 0.0))


def launch_checked_offsets(ptr: Tensor, out: Tensor, flag: Tensor, n: int, max_nodes: int) -> None:
    """Fill ``out`` (int64, like ``ptr [B + 1]``, ``B >= 1``) and ``flag`` (``[1]``) from ``ptr``: see
    :func:`_checked_offsets_kernel`."""
    _checked_offsets_kernel[(1,)](ptr, out, flag, ptr.numel(), n, max_nodes, BLOCK=OFFSETS_BLOCK, num_warps=4)
