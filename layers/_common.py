"""Argument checks shared by :class:`~cudnn_gnn.layers.GATConv` and :class:`~cudnn_gnn.layers.GATv2Conv`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_choice
from cudnn_gnn.backends import GAT_BACKENDS
from cudnn_gnn.spec import GRAD_PRECISIONS

from ._graph_inputs import is_sparse_form, is_sparse_tensor

__all__: list[str] = []


def check_knobs(backend: str, deterministic: bool, grad_precision: str, cache_graph: bool) -> None:
    check_choice("backend", backend, GAT_BACKENDS)
    check_bool("deterministic", deterministic)
    check_choice("grad_precision", grad_precision, GRAD_PRECISIONS)
    check_bool("cache_graph", cache_graph)


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


def check_node_features(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (num_nodes, in_channels) (static graphs are not supported), "
                         f"got {tuple(x.shape)}")
    return x


def check_sparse_loop_edge_attr(edge_index: Any, has_edge_attr: bool) -> None:
    """PyG cannot fill self-loop edge features into a sparse ``edge_index``; refuse it the same way."""
    if has_edge_attr and is_sparse_form(edge_index):
        raise NotImplementedError(
            "edge_attr must be None with add_self_loops=True when edge_index is a sparse tensor (as in PyG), "
            "got edge features; pass a [2, E] edge_index or a CscGraph instead"
        )


def sparse_tensor_edge_attr(name: str, edge_index: Any, edge_attr: Tensor | None, edge_dim: int | None,
                            add_self_loops: bool) -> Tensor | None:
    """The edge features a layer with ``edge_dim`` uses when ``edge_index`` carries values PyG reads as
    ``edge_attr`` (:func:`sparse_tensor_edge_attr_rule` decides): a ``torch_sparse.SparseTensor``'s values, or the
    ``[E, D]`` values of a torch sparse CSR / CSC tensor (PyG's ``MessagePassing`` takes 2-D values of one as
    ``edge_attr`` and 1-D ones as edge weights, which GAT ignores). ``edge_attr`` for any other form."""
    if edge_dim is None:
        return edge_attr
    if is_sparse_tensor(edge_index):
        return sparse_tensor_edge_attr_rule(name, edge_attr, edge_index.storage.value(), edge_dim=edge_dim,
                                            add_self_loops=add_self_loops, form="SparseTensor")
    if (isinstance(edge_index, Tensor) and edge_index.layout in (torch.sparse_csr, torch.sparse_csc)
            and edge_index.dense_dim() > 0 and edge_attr is None):
        return sparse_tensor_edge_attr_rule(name, None, edge_index.values(), edge_dim=edge_dim,
                                            add_self_loops=add_self_loops, form="torch_sparse_values")
    return edge_attr


def sparse_tensor_edge_attr_rule(name: str, edge_attr: Tensor | None, values: Tensor | None, *, edge_dim: int,
                                 add_self_loops: bool, form: str = "SparseTensor") -> Tensor | None:
    """What a ``GATConv`` / ``GATv2Conv`` with ``edge_dim`` does with a sparse ``edge_index``'s values
    (``values``: ``[E]`` or ``[E, edge_dim]`` in the sparse tensor's element order, the edge order the layer's graph
    keeps for these forms, or None), as a decision on plain tensors. ``form``: ``"SparseTensor"`` (a
    ``torch_sparse.SparseTensor``) or ``"torch_sparse_values"`` (a torch sparse CSR / CSC tensor with ``[E, D]``
    values and no ``edge_attr`` given).

    * ``add_self_loops=True``: refused (NotImplementedError), edge features given or not. PyG raises the same
      way for a SparseTensor (it cannot fill self-loop features into one); for a torch sparse tensor PyG fills
      them into the values, which the layers here do not do.
    * otherwise ``edge_attr`` where given, else the values (PyG's ``MessagePassing`` reads them as ``edge_attr``).
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
    return values if edge_attr is None else edge_attr
