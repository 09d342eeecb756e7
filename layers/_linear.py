"""A PyG ``Linear`` applied with its bias added by :func:`cudnn_gnn._bias.bias_add`.

``GATv2Conv``'s ``lin_l`` and ``lin_r`` carry biases (PyG's defaults); ``F.linear(x, W, b)`` leaves their gradient
to autograd's ``grad.sum(0)`` over every node, which on a large graph costs more than the GEMM's share of it should
(see :mod:`cudnn_gnn._bias`). Same parameters, same values: the product, then the bias in the product's dtype
(``F.linear``'s rule under autocast)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn.dense.linear import Linear

from cudnn_gnn._bias import bias_add

__all__ = ["project"]


def project(lin: Linear, x: Tensor) -> Tensor:
    """``lin(x)``: PyG's module itself while its weight is lazy (``in_channels=-1`` before the first call: the module
    initialises it) or where it has no bias; else ``F.linear`` without the bias, then :func:`bias_add`."""
    if lin.bias is None or isinstance(lin.weight, UninitializedParameter):
        return lin(x)
    return bias_add(F.linear(x, lin.weight), lin.bias, cast=True)
