"""Column sums of tall ``[N, D]`` tensors, and the bias add and linear layer whose bias gradient is one.

A bias added to ``N`` rows has the gradient ``grad.sum(0)``, a reduction over the long axis into a few hundred sums,
for which torch's reduction kernel reads the tensor well below the memory bandwidth; a GATv2 layer's step runs four
(its bias, ``lin_l``'s and ``lin_r``'s, and the Triton backend's attention-vector partials). :func:`column_sum` is
the one place that chooses how such a sum runs; :func:`bias_add` adds a bias with it as the
gradient, and :func:`linear` is ``F.linear`` with it as the bias's gradient (the bias still added inside the GEMM,
where a separate add would cost an ``[N, D]`` read and write). Small tensors, CPU tensors and ``torch.compile``
(whose generated reduction is its own) keep ``x.sum(0)``, a plain add and ``F.linear``: on a host-bound small graph
one more Python autograd node costs more than it saves.

Measured: docs/performance.md, "Column sums".
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["COLUMN_SUM_MIN_ROWS", "bias_add", "column_sum", "linear"]

COLUMN_SUM_MIN_ROWS = 1 << 14
"""Tensors with fewer rows take ``x.sum(0)`` (and :func:`bias_add` a plain add)."""

SPLIT_ROWS = 128
"""The rows one partial sum of :func:`column_sum`'s split sum takes."""


def _tall_cuda(x: Tensor) -> bool:
    """Whether ``x`` takes :func:`column_sum`'s split sum: a 2-D CUDA tensor of at least :data:`COLUMN_SUM_MIN_ROWS` rows,
    outside ``torch.compile``."""
    return (x.dim() == 2 and x.device.type == "cuda" and x.shape[0] >= COLUMN_SUM_MIN_ROWS
            and not torch.compiler.is_compiling())


def column_sum(x: Tensor) -> Tensor:
    """``x [N, D] -> [D]``, the sum over rows, in ``x``'s dtype (float32 accumulation), deterministic.

    A tall CUDA tensor (:func:`_tall_cuda`) is summed split: the rows in blocks of :data:`SPLIT_ROWS`, each block
    summed in float32 by one reduction with many outputs, then the ``[N / SPLIT_ROWS, D]`` partials (two launches,
    every sum in a fixed order), measured faster than torch's ``x.sum(0)`` and than a matrix-vector product with
    ones (docs/performance.md, "Column sums"); anything else takes ``x.sum(0)``."""
    if not _tall_cuda(x):
        return x.sum(0)
    n = x.shape[0]
    blocks = n // SPLIT_ROWS
    head = x[: blocks * SPLIT_ROWS].view(blocks, SPLIT_ROWS, x.shape[1]).sum(1, dtype=torch.float32).sum(0)
    if blocks * SPLIT_ROWS < n:
        head = head + x[blocks * SPLIT_ROWS:].sum(0, dtype=torch.float32)
    return head.to(x.dtype)


class _BiasAdd(torch.autograd.Function):
    """``x + bias`` (torch's promotion), the bias gradient by :func:`column_sum`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, bias: Tensor) -> Tensor:
        ctx.dtypes = x.dtype, bias.dtype
        return x + bias

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x_dtype, bias_dtype = ctx.dtypes
        d_x = grad.to(x_dtype) if ctx.needs_input_grad[0] else None
        d_bias = column_sum(grad).to(bias_dtype) if ctx.needs_input_grad[1] else None
        return d_x, d_bias


def bias_add(x: Tensor, bias: Tensor | None) -> Tensor:
    """``x [N, D] + bias [D]`` (``x`` itself for no bias) with torch's promotion (a float32 bias on a 16-bit ``x``
    gives float32, as a plain ``x + bias``). For a tall CUDA ``x`` the bias's gradient is :func:`column_sum`'s,
    elsewhere autograd's own add."""
    if bias is None:
        return x
    if _tall_cuda(x) and torch.is_grad_enabled() and bias.requires_grad:
        return _BiasAdd.apply(x, bias)
    return x + bias


class _Linear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` (the bias added in the GEMM's epilogue, as torch does), with the bias's gradient
    by :func:`column_sum` where autograd's would be ``grad.sum(0)``. Under autocast the three inputs are cast to the
    autocast dtype first and the product runs in it, as ``F.linear``'s autocast rule does; the backward's GEMMs run
    in that dtype and each gradient returns in its input's dtype (what autograd through the casts gives)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        ctx.dtypes = x.dtype, weight.dtype, bias.dtype
        if dtype is not None:
            x, weight, bias = x.to(dtype), weight.to(dtype), bias.to(dtype)
        ctx.save_for_backward(x, weight)
        with torch.autocast(device, enabled=False):
            return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        grad = grad.to(x.dtype)
        d_x = (grad @ weight).to(x_dtype) if ctx.needs_input_grad[0] else None
        d_w = (grad.t() @ x).to(w_dtype) if ctx.needs_input_grad[1] else None  # x is 2-D (linear's rule)
        d_b = column_sum(grad).to(b_dtype) if ctx.needs_input_grad[2] else None
        return d_x, d_w, d_b


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)``: for a tall CUDA ``x`` whose bias needs a gradient, through :class:`_Linear`
    (the same forward, the bias's gradient by :func:`column_sum`); elsewhere ``F.linear`` itself."""
    if bias is not None and _tall_cuda(x) and torch.is_grad_enabled() and bias.requires_grad:
        return _Linear.apply(x, weight, bias)
    return F.linear(x, weight, bias)
