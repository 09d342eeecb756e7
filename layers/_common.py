"""Argument checks shared by :class:`~cudnn_gnn.layers.GATConv` and :class:`~cudnn_gnn.layers.GATv2Conv`."""

from __future__ import annotations

from typing import Any

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
    """The edge features a layer with ``edge_dim`` uses when ``edge_index`` is a ``torch_sparse.SparseTensor``:
    PyG's rule (:func:`sparse_tensor_edge_attr_rule`) on the tensor's values; ``edge_attr`` for any other form."""
    if edge_dim is None or not is_sparse_tensor(edge_index):
        return edge_attr
    return sparse_tensor_edge_attr_rule(name, edge_attr, edge_index.storage.value(), edge_dim=edge_dim,
                                        add_self_loops=add_self_loops)


def sparse_tensor_edge_attr_rule(name: str, edge_attr: Tensor | None, values: Tensor | None, *, edge_dim: int,
                                 add_self_loops: bool) -> Tensor | None:
    """PyG's ``GATConv`` / ``GATv2Conv`` with ``edge_dim`` on a ``SparseTensor`` ``edge_index`` (``values``: its
    ``[E]`` or ``[E, edge_dim]`` values in CSR order, or None), as a decision on plain tensors:

    * ``add_self_loops=True``: refused (NotImplementedError), edge features given or not: PyG cannot fill
      self-loop features into a SparseTensor and raises the same way.
    * otherwise ``edge_attr`` where given, else the SparseTensor's values (PyG's ``MessagePassing`` reads them as
      ``edge_attr``), in the CSR order the layer's graph keeps for this form.
    """
    if add_self_loops:
        raise NotImplementedError(
            f"edge_dim must be None for {name} with add_self_loops=True when edge_index is a SparseTensor (as in PyG: "
            f"self-loop edge features cannot be filled into it), got edge_dim={edge_dim}; pass add_self_loops=False, "
            "or a [2, E] edge_index or CscGraph with edge_attr"
        )
    return values if edge_attr is None else edge_attr
