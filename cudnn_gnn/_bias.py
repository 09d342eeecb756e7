"""Column sums of tall ``[N, D]`` tensors, and the bias add whose gradient is one.

A bias added to ``N`` rows has the gradient ``grad.sum(0)``, a reduction over the long axis into a few hundred sums,
for which torch's reduction kernel reads the tensor well below the memory bandwidth; a GATv2 layer's step runs four
(its bias, ``lin_l``'s and ``lin_r``'s, and the Triton backend's attention-vector partials). :func:`column_sum` is
the one place that chooses how such a sum runs (:data:`COLUMN_SUM`); :func:`bias_add` adds a bias with it as the
gradient. Small tensors, CPU tensors and ``torch.compile`` (whose generated reduction is its own) keep ``x.sum(0)``
and a plain add: on a host-bound small graph one more Python autograd node costs more than it saves.

Measured: docs/performance.md, "Column sums".
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["COLUMN_SUM", "COLUMN_SUM_MIN_ROWS", "bias_add", "column_sum"]

COLUMN_SUM = "split"
"""How :func:`column_sum` sums a tall CUDA tensor: ``"split"`` (the rows in blocks of :data:`SPLIT_ROWS`, each
block summed in float32 by one reduction with many outputs, then the ``[N / SPLIT_ROWS, D]`` partials: two
launches, every sum in a fixed order), ``"mv"`` (a matrix-vector product with ones: cuBLAS, the same dtype
rules as a GEMM) or ``"sum"`` (torch's ``x.sum(0)``). A module global so that the three can be measured against each
other in one process (``benchmarks/investigations/column_sum.py``)."""

COLUMN_SUM_MIN_ROWS = 1 << 14
"""Tensors with fewer rows take ``x.sum(0)`` (and :func:`bias_add` a plain add)."""

SPLIT_ROWS = 128
"""The rows one partial sum of ``"split"`` takes."""


def _tall_cuda(x: Tensor) -> bool:
    """Whether ``x`` takes :data:`COLUMN_SUM`'s way: a 2-D CUDA tensor of at least :data:`COLUMN_SUM_MIN_ROWS` rows,
    outside ``torch.compile``."""
    return (x.dim() == 2 and x.device.type == "cuda" and x.shape[0] >= COLUMN_SUM_MIN_ROWS
            and not torch.compiler.is_compiling())


def column_sum(x: Tensor) -> Tensor:
    """``x [N, D] -> [D]``, the sum over rows, in ``x``'s dtype (float32 accumulation), deterministic."""
    if not _tall_cuda(x) or COLUMN_SUM == "sum":
        return x.sum(0)
    if COLUMN_SUM == "mv":
        return torch.mv(x.t(), x.new_ones(x.shape[0]))
    n = x.shape[0]
    blocks = n // SPLIT_ROWS
    head = x[: blocks * SPLIT_ROWS].view(blocks, SPLIT_ROWS, x.shape[1]).sum(1, dtype=torch.float32).sum(0)
    if blocks * SPLIT_ROWS < n:
        head = head + x[blocks * SPLIT_ROWS:].sum(0, dtype=torch.float32)
    return head.to(x.dtype)


def _add(x: Tensor, bias: Tensor, cast: bool) -> Tensor:
    """``x + bias``: with ``cast`` the bias in ``x``'s dtype first, else torch's promotion."""
    return x + (bias.to(x.dtype) if cast else bias)


class _BiasAdd(torch.autograd.Function):
    """``x + bias``, the bias gradient by :func:`column_sum`; ``cast``: the bias cast to ``x``'s dtype first (as
    ``F.linear`` casts it under autocast), else torch's promotion (as a plain ``x + bias``)."""

    @staticmethod
    def forward(ctx, x: Tensor, bias: Tensor, cast: bool) -> Tensor:  # type: ignore[override]
        ctx.dtypes = x.dtype, bias.dtype
        return _add(x, bias, cast)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:  # type: ignore[override]
        x_dtype, bias_dtype = ctx.dtypes
        d_x = grad.to(x_dtype) if ctx.needs_input_grad[0] else None
        d_bias = column_sum(grad).to(bias_dtype) if ctx.needs_input_grad[1] else None
        return d_x, d_bias, None


def bias_add(x: Tensor, bias: Tensor | None, *, cast: bool = False) -> Tensor:
    """``x [N, D] + bias [D]`` (``x`` itself for no bias): with ``cast`` the bias in ``x``'s dtype (``F.linear``'s
    rule under autocast), else torch's promotion (a float32 bias on a 16-bit ``x`` gives float32, as a plain ``x +
    bias``). For a tall CUDA ``x`` the bias's gradient is :func:`column_sum`'s, elsewhere autograd's own add."""
    if bias is None:
        return x
    if _tall_cuda(x) and COLUMN_SUM != "sum" and torch.is_grad_enabled() and bias.requires_grad:
        return _BiasAdd.apply(x, bias, cast)
    return _add(x, bias, cast)
