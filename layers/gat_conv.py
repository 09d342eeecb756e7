"""``GATConv``: PyG's graph attention layer on :func:`cudnn_gnn.gat`."""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import torch
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.inits import glorot, zeros

from cudnn_gnn._validation import check_edge_attr, check_probability
from cudnn_gnn.ops.gat import gat
from cudnn_gnn.spec import gat_attention_vector

from ._common import (
    check_graph_rows,
    check_knobs,
    check_layer_args,
    check_message_passing_kwargs,
    check_node_features,
    check_sparse_loop_edge_attr,
    sparse_tensor_edge_attr,
)
from ._edge_features import project_edge_attr
from ._explain import explained, run_explained
from ._graph_inputs import graph_sizes
from ._plan_cache import resolve
from ._pyg_outputs import finish

__all__ = ["GATConv"]


class GATConv(MessagePassing):
    r"""The graph attention operator of `"Graph Attention Networks" <https://arxiv.org/abs/1710.10903>`_
    (Velickovic et al., ICLR 2018), a drop-in for :class:`torch_geometric.nn.GATConv` (PyG 2.8) whose
    attention runs fused: by default on our Triton kernels on CUDA (``backend="auto"``), on cuDNN's GNN kernels
    when asked (``backend="cudnn"``, optional, cuDNN >= 9.28), and on the pure-PyTorch reference backend on CPU.

    .. math::
        \mathbf{x}^{\prime}_i = \sum_{j \in \mathcal{N}(i) \cup \{ i \}} \alpha_{i,j}\mathbf{\Theta}_s\mathbf{x}_{j},
        \qquad
        \alpha_{i,j} = \operatorname{softmax}_j\Big(\mathrm{LeakyReLU}\big(\mathbf{a}_s^{\top}\mathbf{\Theta}_s
        \mathbf{x}_j + \mathbf{a}_t^{\top}\mathbf{\Theta}_t\mathbf{x}_i + \mathbf{a}_e^{\top}\mathbf{\Theta}_e
        \mathbf{e}_{j,i}\big)\Big)

    per head, heads concatenated or averaged, then the optional residual ``res(x_dst)`` and ``bias`` added.

    Constructor, parameters (names, shapes, initialisation), ``reset_parameters()``, ``__repr__``, forward
    signature and return values are PyG's, so ``load_state_dict(pyg_conv.state_dict(), strict=True)`` works
    both ways. Self-loops are removed and then appended at the end (``fill_value`` gives their edge
    features), as PyG does.

    Args:
        in_channels: input size, a ``(src, dst)`` tuple for bipartite graphs, or ``-1`` (lazy).
        out_channels, heads, concat, negative_slope, dropout, add_self_loops, edge_dim, fill_value, bias,
            residual, **kwargs: as in PyG (``aggr`` must stay ``'add'`` and ``flow`` ``'source_to_target'``).
        backend: ``"auto"`` (on CUDA the first of Triton and cuDNN that runs, else the reference; see
            :func:`cudnn_gnn.gat`), ``"triton"``, ``"cudnn"`` or ``"reference"``.
        deterministic: bitwise-repeatable cuDNN backward (builds the graph's reverse CSC once; the automatic
            hub splitting below then merges rows with sorted segment sums instead of atomics). The Triton
            backward uses no atomics and repeats bitwise either way.
        grad_precision: ``"auto"`` (float32 gradient arithmetic for half inputs), ``"fp32"`` or ``"input"``.
        cache_graph: keep the CSC form of a raw ``edge_index`` between forwards (keyed by the tensor's identity
            and version). Off: convert on every forward (and no hub splitting, which needs the graph's degrees).

    On cuDNN, graphs with strongly skewed degrees are run with their hubs split into bounded rows and the rows
    merged exactly (:func:`cudnn_gnn.gat`'s ``max_degree="auto"``); the split is built once per cached graph.

    ``torch_geometric.explain`` works as on PyG's layer: edge masks (GNNExplainer, PGExplainer, Captum) enter the
    op as its dropout mask on the reference backend, and message forward hooks (AttentionExplainer) see ``alpha``.

    Edge features cost ``[E, H]`` here, not PyG's ``[E, H, C]``: they enter GAT only through the logit
    ``att_edge . lin_edge(e)``, so ``att_edge`` is folded into ``lin_edge.weight`` first (same parameters, same
    gradients). On the full ogbn-proteins graph (79M edges, last layer 4 heads x 112) PyG's projection alone
    would be a 132 GiB float32 tensor (docs/performance.md, "edge features").

    Shapes:
        - **input:** node features ``(|V|, F_in)`` or ``((|V_s|, F_s), (|V_t|, F_t))`` (``x_dst`` may be None);
          ``edge_index`` ``(2, |E|)`` (Tensor or EdgeIndex), a ``SparseTensor`` / torch sparse COO, CSR or CSC
          ``adj_t`` (rows are destinations), or a :class:`~cudnn_gnn.CscGraph`; edge features ``(|E|, D)``
          *(optional)* in the caller's edge order.
        - **output:** ``(|V_t|, H * F_out)`` (``concat``) or ``(|V_t|, F_out)``. With
          ``return_attention_weights=True``: ``(out, (edge_index, alpha))``, ``edge_index`` ``(2, |E'|)`` in
          PyG's order (self-loops appended) and ``alpha`` ``(|E'|, H)``; for sparse inputs the sparse forms PyG
          returns.

    Example:
        >>> import torch
        >>> from cudnn_gnn import GATConv
        >>> conv = GATConv(16, 8, heads=2)
        >>> conv(torch.randn(4, 16), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([4, 16])
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
        residual: bool = False,
        *,
        backend: str = "auto",
        deterministic: bool = False,
        grad_precision: str = "auto",
        cache_graph: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("aggr", "add")
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
        self.backend = backend
        self.deterministic = deterministic
        self.grad_precision = grad_precision
        self.cache_graph = cache_graph

        self.lin: Linear | None = None
        self.lin_src: Linear | None = None
        self.lin_dst: Linear | None = None
        if isinstance(in_channels, int):
            self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="glorot")
        else:
            self.lin_src = Linear(in_channels[0], heads * out_channels, False, weight_initializer="glorot")
            self.lin_dst = Linear(in_channels[1], heads * out_channels, False, weight_initializer="glorot")

        self.att_src = Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = Parameter(torch.empty(1, heads, out_channels))

        if edge_dim is not None:
            self.lin_edge = Linear(edge_dim, heads * out_channels, bias=False, weight_initializer="glorot")
            self.att_edge = Parameter(torch.empty(1, heads, out_channels))
        else:
            self.lin_edge = None
            self.register_parameter("att_edge", None)

        total_out_channels = out_channels * (heads if concat else 1)
        if residual:
            self.res = Linear(
                in_channels if isinstance(in_channels, int) else in_channels[1],
                total_out_channels,
                bias=False,
                weight_initializer="glorot",
            )
        else:
            self.register_parameter("res", None)

        if bias:
            self.bias = Parameter(torch.empty(total_out_channels))
        else:
            self.register_parameter("bias", None)

        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                lin.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
        glorot(self.att_edge)
        zeros(self.bias)

    def _projections(self) -> tuple[Linear, Linear]:
        """``(source, destination)`` projections: ``lin`` for both, or ``lin_src`` / ``lin_dst``."""
        if self.lin is not None:
            return self.lin, self.lin
        return cast(Linear, self.lin_src), cast(Linear, self.lin_dst)  # __init__ builds these where lin is None

    def forward(
        self,
        x: Tensor | tuple[Tensor, Tensor | None],
        edge_index: Any,
        edge_attr: Tensor | None = None,
        size: tuple[int, int] | None = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        """Same arguments and returns as PyG's ``GATConv.forward``; ``edge_index`` may also be a CscGraph.

        As in PyG 2.8, attention is returned when ``return_attention_weights`` is truthy (``False`` returns
        ``out`` only).
        """
        H, C = self.heads, self.out_channels
        res: Tensor | None = None
        x_dst: Tensor | None
        lin_s, lin_d = self._projections()
        if isinstance(x, Tensor):
            check_node_features("x", x, lin_s)
            check_graph_rows(edge_index, x, x, x)
            if self.res is not None:
                res = self.res(x)
            x_src = lin_s(x)
            x_dst = x_src if lin_d is lin_s else lin_d(x)
        elif isinstance(x, (tuple, list)) and len(x) == 2:
            x_src, x_dst = check_node_features("x[0]", x[0], lin_s), x[1]
            if x_dst is not None:
                check_node_features("x[1]", x_dst, lin_d)
            check_graph_rows(edge_index, x, x_src, x_dst)
            if x_dst is not None and self.res is not None:
                res = self.res(x_dst)
            x_src = lin_s(x_src)
            x_dst = None if x_dst is None else lin_d(x_dst)
        else:
            raise TypeError(f"x must be a Tensor or an (x_src, x_dst) tuple, got {type(x).__name__}")

        num_src = x_src.size(0)
        _, g_dst = graph_sizes(edge_index)
        if size is not None:
            if not (isinstance(size, (tuple, list)) and len(size) == 2):
                raise TypeError(f"size must be a (num_src_nodes, num_dst_nodes) tuple, got {size!r}")
            if size[0] is not None and size[0] != num_src:
                raise ValueError(f"size[0] must equal the number of source nodes in x ({num_src}), got {size[0]}")
            # destination rows: x itself for one Tensor x (PyG's x_dst is x_src then), x[1] when given
            dst_rows, dst_name = (num_src, "x") if isinstance(x, Tensor) else (None if x_dst is None else x_dst.size(0), "x[1]")
            if size[1] is not None and dst_rows is not None and size[1] != dst_rows:
                raise ValueError(f"size[1] must equal the number of destination nodes in {dst_name} ({dst_rows}), "
                                 f"got {size[1]}")
        if x_dst is not None:
            num_dst = x_dst.size(0)
        elif size is not None and size[1] is not None:
            num_dst = size[1]
        else:
            num_dst = g_dst if g_dst is not None else num_src

        edge_attr = sparse_tensor_edge_attr(type(self).__name__, edge_index, edge_attr, self.edge_dim,
                                            self.add_self_loops)
        if edge_attr is not None and self.edge_dim is not None:
            check_edge_attr(edge_attr, self.edge_dim, edge_index)  # the user's shape, before any projection
        num_loops: int | None = None
        if self.add_self_loops:
            check_sparse_loop_edge_attr(edge_index, edge_attr is not None and self.edge_dim is not None)
            num_loops = num_src if x_dst is None else min(num_src, x_dst.size(0))
            if size is not None:  # PyG's min(size), a None entry read as the size x gives
                num_loops = min(num_src if size[0] is None else size[0], num_dst if size[1] is None else size[1])

        plan = resolve(edge_index, num_src=num_src, num_dst=num_dst, num_loops=num_loops, device=x_src.device,
                       cache=self.cache_graph)
        x_dst_full = x_src.new_zeros(plan.num_dst, H * C) if x_dst is None else x_dst
        if plan.pad_dst:
            x_dst_full = torch.cat([x_dst_full, x_dst_full.new_zeros(1, H * C)])

        ea = None
        att_dst = self.att_dst if x_dst is not None else torch.zeros_like(self.att_dst)
        att_edge = None
        # PyG's edge_update returns before the edge term when the graph (with its self-loops) has no edge, so
        # lin_edge and att_edge then get no gradient (None, not zeros): the same here
        if edge_attr is not None and self.lin_edge is not None and plan.graph.num_edges > 0:
            # Edge features enter GAT only through the per-head logit att_edge . lin_edge(e): fold att_edge into
            # lin_edge's weight, [H, edge_dim], so each edge carries H numbers instead of PyG's [H, C] (on the
            # ogbn-proteins graph with 4 heads x 112 that projection alone is 132 GiB in float32).
            weight = self.lin_edge.weight
            folded = (weight.view(H, C, -1) * self.att_edge.view(H, C, 1).to(weight.dtype)).sum(1)
            ea = project_edge_attr(plan, edge_attr, self.fill_value, lambda e: torch.nn.functional.linear(e, folded))
            att_edge = self.att_src.new_ones(H)
        want = bool(return_attention_weights)
        alpha_dtype = torch.promote_types(x_src.dtype, self.att_src.dtype)
        attn_weights = gat_attention_vector(self.att_src, att_dst, att_edge)
        op = partial(gat, plan.graph, (x_src, x_dst_full), attn_weights, heads=H, edge_attr=ea, concat=self.concat,
                     activation="leaky_relu", activation_alpha=self.negative_slope,
                     deterministic=self.deterministic, grad_precision=self.grad_precision, backend=self.backend)
        if explained(self):  # torch_geometric.explain: edge masks and message hooks (layers/_explain.py)
            result = run_explained(self, plan, edge_index, op, x_src, want, alpha_dtype)
        else:
            result = op(dropout=self.dropout, training=self.training, return_attention=want)
        return finish(plan, edge_index, result, res, self.bias, want, alpha_dtype)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
