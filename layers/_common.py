"""Pieces shared by :class:`~cudnn_gnn.layers.GATConv` and :class:`~cudnn_gnn.layers.GATv2Conv`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_choice
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops._attention import GRAD_PRECISIONS

from ._graph_cache import GraphPlan, _is_sparse_tensor, attention_result, loop_edge_attr

__all__: list[str] = []

BACKENDS = ("auto", "cudnn", "reference")


def check_knobs(backend: str, deterministic: bool, grad_precision: str, cache_graph: bool) -> None:
    check_choice("backend", backend, BACKENDS)
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


def graph_sizes(edge_index: Any) -> tuple[int | None, int | None]:
    """(num_src, num_dst) an edge_index form fixes by itself, as PyG's ``_check_input`` reads them."""
    if isinstance(edge_index, CscGraph):
        return edge_index.num_src_nodes, edge_index.num_dst_nodes
    if _is_sparse_tensor(edge_index):  # pragma: no cover - needs torch_sparse
        n_dst, n_src = edge_index.sparse_sizes()
        return int(n_src), int(n_dst)
    if isinstance(edge_index, Tensor) and edge_index.layout in (torch.sparse_csr, torch.sparse_csc):
        return int(edge_index.shape[1]), int(edge_index.shape[0])
    return None, None


def is_sparse_form(edge_index: Any) -> bool:
    return _is_sparse_tensor(edge_index) or (isinstance(edge_index, Tensor) and edge_index.layout != torch.strided)


def check_sparse_loop_edge_attr(edge_index: Any, has_edge_attr: bool) -> None:
    """PyG cannot fill self-loop edge features into a sparse ``edge_index``; refuse it the same way."""
    if has_edge_attr and is_sparse_form(edge_index):
        raise NotImplementedError(
            "edge_attr must be None with add_self_loops=True when edge_index is a sparse tensor (as in PyG), "
            "got edge features; pass a [2, E] edge_index or a CscGraph instead"
        )


def project_edge_attr(plan: GraphPlan, edge_attr: Tensor | None, fill_value: Any,
                      project: Callable[[Tensor], Tensor] | None) -> Tensor | None:
    """Edge features in the plan's edge order (self-loops filled with ``fill_value``, 1-D as one column),
    through ``project`` (a layer's ``lin_edge``, or GAT's folded edge logits)."""
    if edge_attr is None or project is None:
        return None
    ea = loop_edge_attr(plan, edge_attr, fill_value)
    return project(ea.view(-1, 1) if ea.dim() == 1 else ea)


def finish(
    plan: GraphPlan,
    edge_index: Any,
    result: Tensor | tuple[Tensor, Tensor],
    res: Tensor | None,
    bias: Tensor | None,
    want_attention: bool,
    alpha_dtype: torch.dtype,
) -> Any:
    """Drop the dummy row, add residual and bias, and shape the attention return as PyG does."""
    out: Tensor
    alpha: Tensor | None
    if isinstance(result, tuple):
        out, alpha = result
    else:
        out, alpha = result, None
    if plan.pad_dst:
        out = out[: plan.num_dst]
    if res is not None:
        out = out + res
    if bias is not None:
        out = out + bias
    if alpha is None:
        return out
    second = attention_result(plan, alpha.to(alpha_dtype), edge_index)
    return out, second
