"""Argument checks shared by :class:`~cudnn_gnn.layers.GATConv` and :class:`~cudnn_gnn.layers.GATv2Conv`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn.parameter import UninitializedParameter

from cudnn_gnn._validation import check_bool, check_choice, check_int
from cudnn_gnn.backends import GAT_BACKENDS
from cudnn_gnn.spec import GRAD_PRECISIONS

from ._graph_inputs import graph_sizes, is_sparse_form, is_sparse_tensor

__all__: list[str] = []


def check_knobs(backend: str, deterministic: bool, grad_precision: str, cache_graph: bool) -> None:
    check_choice("backend", backend, GAT_BACKENDS)
    check_bool("deterministic", deterministic)
    check_choice("grad_precision", grad_precision, GRAD_PRECISIONS)
    check_bool("cache_graph", cache_graph)


#: ``fill_value`` reductions PyG's ``add_self_loops`` takes (``torch_geometric.utils.scatter``'s).
FILL_REDUCTIONS = ("add", "sum", "mean", "min", "max", "mul")


def check_layer_args(in_channels: object, out_channels: object, heads: object, edge_dim: object,
                     fill_value: object) -> None:
    """The constructor arguments PyG's layers take unchecked and fail on deep in a later forward (or never):
    widths ints >= 1 (``in_channels`` also ``-1``, lazy, or a ``(src, dst)`` pair of them), ``heads >= 1``,
    ``edge_dim`` None or >= 1, ``fill_value`` None, a number, one of :data:`FILL_REDUCTIONS` or a Tensor of one
    value or ``edge_dim`` values."""
    pair = in_channels if isinstance(in_channels, (tuple, list)) else None
    if pair is not None and len(pair) != 2:
        raise ValueError(f"in_channels must be an int or a (src, dst) pair of ints, got {in_channels!r}")
    for i, value in enumerate(pair if pair is not None else (in_channels,)):
        name = "in_channels" if pair is None else f"in_channels[{i}]"
        if check_int(name, value, minimum=-1) == 0:
            raise ValueError(f"{name} must be >= 1 (or -1: lazy, read from the first input), got 0")
    check_int("out_channels", out_channels, minimum=1)
    check_int("heads", heads, minimum=1)
    if edge_dim is not None:
        check_int("edge_dim", edge_dim, minimum=1)
    if fill_value is None or isinstance(fill_value, str) and fill_value in FILL_REDUCTIONS:
        return
    if isinstance(fill_value, str):
        raise ValueError(f"fill_value must be a float, a Tensor or one of {', '.join(map(repr, FILL_REDUCTIONS))}, "
                         f"got {fill_value!r}")
    if isinstance(fill_value, Tensor):
        if edge_dim is not None and (fill_value.numel() not in (1, edge_dim) or fill_value.dim() > 2
                                     or fill_value.dim() == 2 and fill_value.shape[0] != 1):
            raise ValueError(f"fill_value must hold one value or edge_dim={edge_dim} values (shape ({edge_dim},)), "
                             f"got shape {tuple(fill_value.shape)}")
        return
    if isinstance(fill_value, bool) or not isinstance(fill_value, (int, float)):
        raise TypeError(f"fill_value must be a float, a Tensor or one of {', '.join(map(repr, FILL_REDUCTIONS))}, "
                        f"got {type(fill_value).__name__}")


def check_message_passing_kwargs(name: str, kwargs: dict[str, Any]) -> None:
    """Refuse the ``MessagePassing`` options that change the math our op computes."""
    aggr = kwargs.get("aggr", "add")
    if aggr not in ("add", "sum"):
        raise NotImplementedError(f"aggr must be 'add' for {name} on the cuDNN ops (PyG's default), got {aggr!r}")
    flow = kwargs.get("flow", "source_to_target")
    if flow != "source_to_target":
        raise NotImplementedError(
            f"flow must be 'source_to_target' for {name} on the cuDNN ops, got {flow!r}; pass edge_index.flip(0) instead"
        )


def check_node_features(name: str, x: object, lin: Any = None) -> Tensor:
    """``x`` a ``[num_nodes, in_channels]`` floating Tensor; with ``lin`` (the projection it feeds), its width
    ``lin``'s ``in_channels`` and, outside autocast, its dtype ``lin``'s weight dtype: a TypeError/ValueError naming
    ``name`` before any kernel, instead of the matmul's message. A lazy ``lin`` (weights not made yet) takes any
    width and dtype."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (num_nodes, in_channels) (static graphs are not supported), "
                         f"got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point Tensor (node features), got {x.dtype}; convert it with "
                        f"{name}.float()")
    weight = None if lin is None else getattr(lin, "weight", None)
    if not isinstance(weight, Tensor) or isinstance(weight, UninitializedParameter):
        return x
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"{name} must have shape (num_nodes, in_channels={weight.shape[1]}), got {tuple(x.shape)}")
    # autocast casts float32/bfloat16/float16 operands to one dtype, never float64 ones
    autocast = torch.is_autocast_enabled(x.device.type) and torch.float64 not in (x.dtype, weight.dtype)
    if x.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the layer's weight dtype {weight.dtype} (or, in float32/bfloat16/float16, "
                        f"run under torch.autocast), got {x.dtype}; convert {name} with .to({weight.dtype}) or the "
                        f"layer with .to({x.dtype})")
    return x


def check_graph_rows(edge_index: Any, x: object, x_src: Tensor, x_dst: Tensor | None) -> None:
    """The node rows the caller gave against the node counts a graph fixes by itself (a CscGraph, a sparse
    ``adj_t``; a ``[2, E]`` edge_index fixes none), naming the caller's ``x`` / ``x[0]`` / ``x[1]`` before any
    self-loop or plan is built from them. One Tensor ``x`` feeds both sides, so its graph must be square."""
    g_src, g_dst = graph_sizes(edge_index)
    if g_src is None or g_dst is None:
        return
    if isinstance(x, Tensor):
        if not g_src == g_dst == x.shape[0]:
            bipartite = "" if g_src == g_dst else "; a bipartite graph takes x=(x_src, x_dst)"
            raise ValueError(f"x must have shape (num_nodes={g_src}, in_channels) for a graph of {g_src} source and "
                             f"{g_dst} destination nodes{bipartite}, got {tuple(x.shape)}")
        return
    if x_src.shape[0] != g_src:
        raise ValueError(f"x[0] must have shape (num_src_nodes={g_src}, in_channels) for this graph, got "
                         f"{tuple(x_src.shape)}")
    if x_dst is not None and x_dst.shape[0] != g_dst:
        raise ValueError(f"x[1] must have shape (num_dst_nodes={g_dst}, in_channels) for this graph, got "
                         f"{tuple(x_dst.shape)}")


def check_sparse_loop_edge_attr(edge_index: Any, has_edge_attr: bool) -> None:
    """PyG cannot fill self-loop edge features into a sparse ``edge_index``; refuse it the same way."""
    if has_edge_attr and is_sparse_form(edge_index):
        raise NotImplementedError(
            "edge_attr must be None with add_self_loops=True when edge_index is a sparse tensor (as in PyG), "
            "got edge features; pass a [2, E] edge_index or a CscGraph instead"
        )


def check_no_sparse_edge_features(name: str, edge_index: Any) -> None:
    """Refuse a sparse ``edge_index`` whose values are ``[E, D]`` for a layer built without ``edge_dim`` that, as
    PyG's ``GATv2Conv``, refuses edge features then: PyG's ``MessagePassing`` collect reads such values as
    ``edge_attr`` (1-D ones are edge weights, which it passes on as no edge features) and its ``edge_update`` asserts
    ``lin_edge``. Shapes only (a host fact), no values read."""
    if is_sparse_tensor(edge_index):
        value = _edge_feature_values(edge_index.storage.value())
        shape = None if value is None else tuple(value.shape)
    elif _torch_sparse_with_features(edge_index):
        shape = (edge_index._nnz(), *edge_index.shape[edge_index.sparse_dim():])
    else:
        return
    if shape is not None:
        raise ValueError(f"edge_index's values must be absent or 1-D (edge weights) for a {name} built without "
                         f"edge_dim (PyG reads [num_edges, D] values as edge_attr), got values of shape {shape}; build the "
                         f"layer with edge_dim={shape[1]} or pass values of shape ({shape[0]},)")


def sparse_tensor_edge_attr(name: str, edge_index: Any, edge_attr: Tensor | None, edge_dim: int | None,
                            add_self_loops: bool) -> Tensor | None:
    """The edge features a layer with ``edge_dim`` uses when ``edge_index`` carries values PyG reads as
    ``edge_attr`` (:func:`sparse_tensor_edge_attr_rule` decides): the ``[E, D]`` values of a
    ``torch_sparse.SparseTensor`` or of a torch sparse COO / CSR / CSC tensor (PyG's ``MessagePassing`` takes 2-D
    values as ``edge_attr`` and 1-D ones as edge weights, which GAT ignores). ``edge_attr`` for any other form.

    A torch sparse tensor's values are passed on as an alias that is no view (:func:`_unviewed`, no copy): torch
    2.13's dynamo raises ``IndexError`` in every frame it traces that receives ``values()``, a view whose base is
    the sparse tensor (the layer's callees, in a compiled model whose layer frame runs eagerly for the sparse
    tensor). An uncoalesced COO tensor's are not read (``values()`` refuses it): its plan refuses it without
    self-loops, the rule with them."""
    if edge_dim is None:
        return edge_attr
    if is_sparse_tensor(edge_index):
        return sparse_tensor_edge_attr_rule(name, edge_attr, edge_index.storage.value(), edge_dim=edge_dim,
                                            add_self_loops=add_self_loops, form="SparseTensor")
    if edge_attr is None and _torch_sparse_with_features(edge_index):
        readable = edge_index.layout != torch.sparse_coo or edge_index.is_coalesced()
        values = _unviewed(edge_index.values()) if readable else None
        return sparse_tensor_edge_attr_rule(name, None, values, edge_dim=edge_dim, add_self_loops=add_self_loops,
                                            form="torch_sparse_values")
    return edge_attr


_TORCH_SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def _torch_sparse_with_features(edge_index: Any) -> bool:
    """Whether ``edge_index`` is a torch sparse COO / CSR / CSC tensor with ``[E, D]`` values (dense dims), the
    values PyG's ``MessagePassing`` reads as ``edge_attr``. Shapes only."""
    return isinstance(edge_index, Tensor) and edge_index.layout in _TORCH_SPARSE_LAYOUTS and edge_index.dense_dim() > 0


class _Unviewed(torch.autograd.Function):
    """``values`` unchanged as a tensor that is no view (``detach()`` shares its memory without one), its gradient
    passed back to ``values`` as it comes."""

    @staticmethod
    def forward(ctx: Any, values: Tensor) -> Tensor:
        return values.detach()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad


@torch.compiler.disable
def _unviewed(values: Tensor) -> Tensor:
    """A sparse tensor's ``values()`` ``[E, D]`` as a tensor that is no view of the sparse tensor: the same memory,
    its gradient flowing back to ``values``. Kept from dynamo (``disable``): inside a compiled model the frame
    calling this runs eagerly (it holds the sparse tensor), and dynamo would trace ``forward``, a frame receiving
    the view."""
    return _Unviewed.apply(values)


def sparse_tensor_edge_attr_rule(name: str, edge_attr: Tensor | None, values: Tensor | None, *, edge_dim: int,
                                 add_self_loops: bool, form: str = "SparseTensor") -> Tensor | None:
    """What a ``GATConv`` / ``GATv2Conv`` with ``edge_dim`` does with a sparse ``edge_index``'s values
    (``values``: ``[E]`` or ``[E, edge_dim]`` in the sparse tensor's element order, the edge order the layer's graph
    keeps for these forms, or None), as a decision on plain tensors. ``form``: ``"SparseTensor"`` (a
    ``torch_sparse.SparseTensor``) or ``"torch_sparse_values"`` (a torch sparse COO / CSR / CSC tensor with
    ``[E, D]`` values and no ``edge_attr`` given).

    * ``add_self_loops=True``: refused (NotImplementedError), edge features given or not. PyG raises the same
      way for a SparseTensor (it cannot fill self-loop features into one); for a torch sparse tensor PyG fills
      them into the values, which the layers here do not do.
    * otherwise ``edge_attr`` where given, else ``[E, D]`` values (PyG's generated ``MessagePassing`` collect
      reads 2-D values as ``edge_attr``); 1-D values are edge weights, which GAT ignores (PyG's collect passes
      ``edge_attr=None`` for them), so the layer runs without an edge term, as PyG's does.
    """
    if add_self_loops:
        if form == "SparseTensor":
            why = "as in PyG: self-loop edge features cannot be filled into a SparseTensor"
            what = "a SparseTensor"
        else:
            why = "self-loop edge features are not filled into sparse values here"
            what = "a torch sparse tensor with [num_edges, edge_dim] values"
        raise NotImplementedError(
            f"edge_dim must be None for {name} with add_self_loops=True when edge_index is {what} ({why}), got "
            f"edge_dim={edge_dim}; pass add_self_loops=False, or a [2, E] edge_index or CscGraph with edge_attr"
        )
    if edge_attr is not None:
        return edge_attr
    return _edge_feature_values(values)


def _edge_feature_values(values: Tensor | None) -> Tensor | None:
    """``values`` where they are ``[E, D]``, the sparse values PyG's generated ``MessagePassing`` collect reads as
    ``edge_attr``; None for ``[E]`` values (edge weights, passed on as no edge features) or none."""
    return values if values is not None and values.dim() > 1 else None
