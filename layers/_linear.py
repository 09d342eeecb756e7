"""A PyG ``Linear`` applied by :func:`cudnn_gnn._bias.linear`.

``GATv2Conv``'s ``lin_l`` and ``lin_r`` carry biases (PyG's defaults); ``F.linear(x, W, b)`` leaves their gradient
to autograd's ``grad.sum(0)`` over every node, which on a large graph costs more than the GEMM's share of it should
(see :mod:`cudnn_gnn._bias`). Same parameters, same forward (the bias added inside the GEMM, ``F.linear``'s
autocast rule, no separate ``[N, H*C]`` add), the bias's gradient a column sum."""

from __future__ import annotations

from torch import Tensor
from torch.nn import Module
from torch.nn.modules.module import (
    _global_backward_hooks,
    _global_backward_pre_hooks,
    _global_forward_hooks,
    _global_forward_pre_hooks,
)
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn.dense.linear import Linear

from cudnn_gnn._bias import linear

__all__ = ["project"]


def _hooked(lin: Module) -> bool:
    """Whether calling ``lin`` would run a hook (its own or a global one): then it must be called, not bypassed."""
    return bool(lin._forward_hooks or lin._forward_pre_hooks or lin._backward_hooks or lin._backward_pre_hooks
                or _global_forward_hooks or _global_forward_pre_hooks or _global_backward_hooks
                or _global_backward_pre_hooks)


def project(lin: Linear, x: Tensor) -> Tensor:
    """``lin(x)``: PyG's module itself while its weight is lazy (``in_channels=-1`` before the first call: the module
    initialises it), where it has no bias or where a hook watches it (a forward hook on ``lin_l`` runs as in PyG);
    else :func:`~cudnn_gnn._bias.linear`."""
    if lin.bias is None or isinstance(lin.weight, UninitializedParameter) or _hooked(lin):
        return lin(x)
    return linear(x, lin.weight, lin.bias)
