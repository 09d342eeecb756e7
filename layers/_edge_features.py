"""Edge features in the plan's edge order: the caller's order, with PyG's self-loop features appended."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._graph_plan import GraphPlan

__all__ = ["loop_edge_attr", "plan_edge_attr", "project_edge_attr"]


def loop_edge_attr(plan: GraphPlan, edge_attr: Tensor, fill_value: Any) -> Tensor:
    """``edge_attr`` (caller's order) laid out in the plan's COO order, self-loop features appended exactly
    as PyG's ``add_self_loops(..., fill_value=...)`` computes them (over the edges left after removal)."""
    if plan.loop_index is None:
        return edge_attr
    n = plan.num_loops
    tail = tuple(edge_attr.shape[1:])
    if fill_value is None:
        loop_attr = edge_attr.new_ones((n, *tail))
    elif isinstance(fill_value, (int, float)) and not isinstance(fill_value, bool):
        loop_attr = edge_attr.new_full((n, *tail), float(fill_value))
    elif isinstance(fill_value, Tensor):
        v = fill_value.to(edge_attr.device, edge_attr.dtype)
        if v.dim() != edge_attr.dim():
            v = v.unsqueeze(0)
        loop_attr = v.expand((n, *tail)).contiguous()
    elif isinstance(fill_value, str):
        from torch_geometric.utils import scatter

        loop_attr = scatter(edge_attr, plan.loop_index.long(), 0, n + 1, fill_value)[:n]
    else:
        raise TypeError(f"fill_value must be a float, a Tensor or one of 'add', 'mean', 'max', 'min', 'mul', got {fill_value!r}")
    base = edge_attr if plan.kept is None else edge_attr.index_select(0, plan.kept)
    return torch.cat([base, loop_attr], dim=0)


def plan_edge_attr(plan: GraphPlan, edge_attr: Tensor | None, fill_value: Any) -> Tensor | None:
    """``[E_plan, De]`` edge features in the plan's edge order (self-loops filled with ``fill_value``, 1-D as one
    column), or None."""
    if edge_attr is None:
        return None
    ea = loop_edge_attr(plan, edge_attr, fill_value)
    return ea.view(-1, 1) if ea.dim() == 1 else ea


def project_edge_attr(plan: GraphPlan, edge_attr: Tensor | None, fill_value: Any,
                      project: Callable[[Tensor], Tensor] | None) -> Tensor | None:
    """:func:`plan_edge_attr` through ``project`` (GAT's folded edge logits), or None."""
    ea = plan_edge_attr(plan, edge_attr, fill_value)
    return None if ea is None or project is None else project(ea)
