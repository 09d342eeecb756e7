"""A packed batch's graph offsets checked on the device without a host sync, in one Triton launch
(:func:`checked_offsets`), for :func:`cudnn_gnn.graph_attention`."""


from __future__ import annotations

import torch
from torch import Tensor

from cudnn_gnn.backends.triton._op_common import run
from cudnn_gnn.backends.triton._runtime import kernels, runnable

__all__ = ["available", "checked_offsets"]

available = runnable
"""Whether :func:`checked_offsets` runs on tensors of a device (CUDA with Triton; any device under Triton's
interpreter)."""


def _checked_offsets(ptr: Tensor, n: int, max_nodes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    out = torch.empty_like(ptr)
    flag = torch.empty(1, dtype=dtype, device=ptr.device)
    kernels().launch_checked_offsets(ptr, out, flag, n, max_nodes)
    return out, flag


@torch.library.custom_op("cudnn_gnn::checked_offsets", mutates_args=())
def _checked_offsets_op(ptr: Tensor, n: int, max_nodes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    return _checked_offsets(ptr, n, max_nodes, dtype)


@_checked_offsets_op.register_fake
def _checked_offsets_fake(ptr: Tensor, n: int, max_nodes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    return torch.empty_like(ptr), ptr.new_empty(1, dtype=dtype)


def checked_offsets(ptr: Tensor, n: int, max_nodes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``(offsets, flag)`` for ``ptr`` ``[B + 1]`` int64 (``B >= 1``) of ``n`` packed nodes: ``offsets`` ``[B + 1]``
    int64, a valid layout whatever ``ptr`` held (0 first, ``n`` last, non-decreasing), and ``flag`` ``[1]`` in
    ``dtype``, 0 where ``ptr`` was valid and no graph has more than ``max_nodes`` nodes, else NaN, for the caller to
    add to its output. One launch; the registered op under ``torch.compile``, its implementation itself in eager
    calls (no dispatcher on the host path)."""
    return run(_checked_offsets_op, _checked_offsets, ptr, n, max_nodes, dtype)
