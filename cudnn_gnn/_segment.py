"""The logit activations and the one segment softmax / log-sum-exp of the package.

Shared by the reference backend (softmax over each destination's incoming edges) and the hub split's exact merge
(log-normalisers of rows and of their destinations), so the max-shift is written once. Plain differentiable
PyTorch; ``segment`` ids are int64 ``[n]`` and need not be sorted.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["ACTIVATIONS", "activation", "segment_logsumexp", "segment_softmax", "index_add_sum"]

ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "elu", "scalar", "leaky_relu")

# (values [n, ...], index [n], num_segments) -> [num_segments, ...] sums; the hub split passes a sorted,
# atomics-free one for deterministic calls.
SegmentSum = Callable[[Tensor, Tensor, int], Tensor]


def activation(x: Tensor, name: str, alpha: float) -> Tensor:
    """The logit activations of cuDNN's GNN kernels; ``alpha`` is the leaky slope or the scalar factor. ELU is
    ``exp(x) - 1`` below zero, alpha fixed at 1."""
    if name == "leaky_relu":
        return F.leaky_relu(x, alpha)
    if name == "linear":
        return x
    if name == "relu":
        return F.relu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "tanh":
        return torch.tanh(x)
    if name == "elu":
        return F.elu(x, 1.0)
    if name == "scalar":
        return x * alpha
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {name!r}")


def index_add_sum(values: Tensor, index: Tensor, n: int) -> Tensor:
    """``zeros(n, ...).index_add(0, index, values)`` (atomics on CUDA)."""
    return values.new_zeros((n, *values.shape[1:])).index_add(0, index, values)


def segment_logsumexp(values: Tensor, segment: Tensor, num_segments: int,
                      segment_sum: SegmentSum = index_add_sum) -> Tensor:
    """``[num_segments, H]`` log-sum-exp of ``values [n, H]`` over the rows sharing a ``segment`` id; ``-inf`` for
    empty segments. The maximum is order-independent; the sum of exponentials is as ordered as ``segment_sum``."""
    h = values.shape[1]
    idx = segment.unsqueeze(1).expand(-1, h)
    m = torch.full((num_segments, h), float("-inf"), device=values.device, dtype=values.dtype)
    m = m.scatter_reduce(0, idx, values, reduce="amax", include_self=True)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    z = segment_sum(torch.exp(values - m_safe.index_select(0, segment)), segment, num_segments)
    return torch.where(z > 0, m_safe + torch.log(torch.where(z > 0, z, torch.ones_like(z))),
                       torch.full_like(z, float("-inf")))


def segment_softmax(logits: Tensor, segment: Tensor, num_segments: int) -> Tensor:
    """Softmax of ``logits [n, H]`` over the rows that share a ``segment [n]`` id."""
    return torch.exp(logits - segment_logsumexp(logits, segment, num_segments).index_select(0, segment))
