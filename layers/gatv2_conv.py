"""``GATv2Conv``: PyG's GATv2 layer on :func:`cudnn_gnn.gatv2`."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import glorot, zeros

from cudnn_gnn._validation import check_edge_attr, check_probability
from cudnn_gnn.ops.gatv2 import gatv2

from ._common import (
    check_graph_rows,
    check_knobs,
    check_layer_args,
    check_message_passing_kwargs,
    check_no_sparse_edge_features,
    check_node_features,
    check_sparse_loop_edge_attr,
    sparse_tensor_edge_attr,
)
from ._edge_features import plan_edge_attr
from ._explain import explained, run_explained
from ._linear import project
from ._plan_cache import resolve
from ._pyg_outputs import finish

__all__ = ["GATv2Conv"]


class GATv2Conv(MessagePassing):
    r"""The GATv2 operator of `"How Attentive are Graph Attention Networks?"
    <https://arxiv.org/abs/2105.14491>`_ (Brody et al., ICLR 2022), a drop-in for
    :class:`torch_geometric.nn.GATv2Conv` (PyG 2.8) whose attention runs fused: by default on our Triton kernels
    on CUDA (``backend="auto"``), on cuDNN's GNN kernels when asked (``backend="cudnn"``, optional, cuDNN >= 9.28),
    and on the pure-PyTorch reference backend on CPU.

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in \mathcal{N}(i) \cup \{ i \}} \alpha_{i,j}\mathbf{\Theta}_{s}\mathbf{x}_{j},
        \qquad
        \alpha_{i,j} = \operatorname{softmax}_j\Big(\mathbf{a}^{\top}\mathrm{LeakyReLU}\big(\mathbf{\Theta}_{s}
        \mathbf{x}_j + \mathbf{\Theta}_{t}\mathbf{x}_{i} + \mathbf{\Theta}_{e}\mathbf{e}_{j,i}\big)\Big)

    per head (``Theta_s`` is ``lin_l``, ``Theta_t`` is ``lin_r``, both with bias, ``Theta_e`` is ``lin_edge``),
    heads concatenated or averaged, then the optional residual ``res(x_dst)`` and ``bias`` added. The edge features
    (self-loops filled with ``fill_value``) go to :func:`cudnn_gnn.gatv2` raw with ``lin_edge.weight``, so the
    Triton backend projects them inside its kernels and no ``(|E|, H * F_out)`` tensor is made (where
    ``fuse_edge_projection`` allows; elsewhere torch projects them first, as PyG does). Parameters, initialisation,
    ``reset_parameters()``, ``__repr__``, forward and returns are PyG's (see :class:`~cudnn_gnn.layers.GATConv`
    for the extra keyword-only knobs ``backend``, ``deterministic``, ``grad_precision`` and ``cache_graph``).

    Shapes:
        - **input:** node features ``(|V|, F_in)`` or ``((|V_s|, F_s), (|V_t|, F_t))``; ``edge_index`` as for
          :class:`~cudnn_gnn.layers.GATConv`; edge features ``(|E|, D)`` *(optional)*.
        - **output:** ``(|V_t|, H * F_out)`` or ``(|V_t|, F_out)``; with ``return_attention_weights=True``
          ``(out, (edge_index, alpha))``, ``alpha`` ``(|E'|, H)`` in PyG's edge order (self-loops last).

    Example:
        >>> import torch
        >>> from cudnn_gnn import GATv2Conv
        >>> conv = GATv2Conv(16, 8, heads=2, concat=False)
        >>> conv(torch.randn(4, 16), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([4, 8])
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        fill_value: float | Tensor | str = "mean",
        bias: bool = True,
        share_weights: bool = False,
        residual: bool = False,
        *,
        backend: str = "auto",
        deterministic: bool = False,
        grad_precision: str = "auto",
        cache_graph: bool = True,
        **kwargs: Any,
    ) -> None:
        check_layer_args(in_channels, out_channels, heads, edge_dim, fill_value)
        check_message_passing_kwargs(type(self).__name__, kwargs)
        check_knobs(backend, deterministic, grad_precision, cache_graph)
        super().__init__(node_dim=0, **kwargs)

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.heads = heads
        self.concat = concat
        self.negative_slope = negative_slope
        self.dropout = check_probability("dropout", dropout, allow_one=True)  # 1.0 as in PyG: all attention dropped
        self.add_self_loops = add_self_loops
        self.edge_dim = edge_dim
        self.fill_value = fill_value
        self.residual = residual
        self.share_weights = share_weights
        self.backend = backend
        self.deterministic = deterministic
        self.grad_precision = grad_precision
        self.cache_graph = cache_graph

        in_l, in_r = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        self.lin_l = Linear(in_l, heads * out_channels, bias=bias, weight_initializer="glorot")
        if share_weights:
            self.lin_r = self.lin_l
        else:
            self.lin_r = Linear(in_r, heads * out_channels, bias=bias, weight_initializer="glorot")

        self.att = Parameter(torch.empty(1, heads, out_channels))

        if edge_dim is not None:
            self.lin_edge = Linear(edge_dim, heads * out_channels, bias=False, weight_initializer="glorot")
        else:
            self.lin_edge = None

        total_out_channels = out_channels * (heads if concat else 1)
        if residual:
            self.res = Linear(in_r, total_out_channels, bias=False, weight_initializer="glorot")
        else:
            self.register_parameter("res", None)

        if bias:
            self.bias = Parameter(torch.empty(total_out_channels))
        else:
            self.register_parameter("bias", None)

        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()
        if self.lin_edge is not None:
            self.lin_edge.reset_parameters()
        if self.res is not None:
            self.res.reset_parameters()
        glorot(self.att)
        zeros(self.bias)

    def forward(
        self,
        x: Tensor | tuple[Tensor, Tensor],
        edge_index: Any,
        edge_attr: Tensor | None = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        """Same arguments and returns as PyG's ``GATv2Conv.forward``; ``edge_index`` may also be a CscGraph."""
        H, C = self.heads, self.out_channels
        res: Tensor | None = None
        if isinstance(x, Tensor):
            check_node_features("x", x, self.lin_l)
            check_graph_rows(edge_index, x, x, x)
            if self.res is not None:
                res = self.res(x)
            x_l = project(self.lin_l, x)
            x_r = x_l if self.share_weights else project(self.lin_r, x)
        elif isinstance(x, (tuple, list)) and len(x) == 2:
            check_node_features("x[0]", x[0], self.lin_l)
            if x[1] is None:
                raise ValueError("x[1] must be a Tensor for GATv2Conv (target features enter the attention), got None")
            check_node_features("x[1]", x[1], self.lin_r)
            check_graph_rows(edge_index, x, x[0], x[1])
            if self.res is not None:
                res = self.res(x[1])
            x_l, x_r = project(self.lin_l, x[0]), project(self.lin_r, x[1])
        else:
            raise TypeError(f"x must be a Tensor or an (x_src, x_dst) tuple, got {type(x).__name__}")

        edge_attr = sparse_tensor_edge_attr(type(self).__name__, edge_index, edge_attr, self.edge_dim,
                                            self.add_self_loops)
        if edge_attr is not None and self.lin_edge is None:
            raise ValueError("edge_attr must be None for a GATv2Conv built without edge_dim, got a Tensor")
        if edge_attr is None and self.lin_edge is None:
            check_no_sparse_edge_features(type(self).__name__, edge_index)
        if edge_attr is not None and self.edge_dim is not None:
            check_edge_attr(edge_attr, self.edge_dim, edge_index)  # the user's shape, before any projection
        num_loops: int | None = None
        if self.add_self_loops:
            check_sparse_loop_edge_attr(edge_index, edge_attr is not None)
            num_loops = min(x_l.size(0), x_r.size(0))

        plan = resolve(edge_index, num_src=x_l.size(0), num_dst=x_r.size(0), num_loops=num_loops,
                       device=x_l.device, cache=self.cache_graph)
        if plan.pad_dst:
            x_r = torch.cat([x_r, x_r.new_zeros(1, H * C)])
        ea = None if self.lin_edge is None else plan_edge_attr(plan, edge_attr, self.fill_value)
        w_edge = None if ea is None or self.lin_edge is None else self.lin_edge.weight
        want = bool(return_attention_weights)
        alpha_dtype = torch.promote_types(x_l.dtype, self.att.dtype)
        op = partial(gatv2, plan.graph, (x_l, x_r), self.att.reshape(-1), heads=H, edge_attr=ea,
                     lin_edge_weight=w_edge, concat=self.concat,
                     activation="leaky_relu", activation_alpha=self.negative_slope, deterministic=self.deterministic,
                     grad_precision=self.grad_precision, backend=self.backend)
        if explained(self):  # torch_geometric.explain: edge masks and message hooks (layers/_explain.py)
            result = run_explained(self, plan, edge_index, op, x_l, want, alpha_dtype)
        else:
            result = op(dropout=self.dropout, training=self.training, return_attention=want)
        return finish(plan, edge_index, result, res, self.bias, want, alpha_dtype)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
