"""The third step of a GAT / GATv2 call: :func:`run` executes an :class:`~cudnn_gnn.ops.plan.AttentionPlan`.

A plain plan is one backend call. A hub-split plan is a strategy on top of it: gather the features of the virtual
sources and destinations, :func:`run` the backend on the bounded rows (every head, ``concat=True``), and merge the
rows of each split destination exactly (:func:`cudnn_gnn.ops._hub_split.merge_rows`).
"""

from __future__ import annotations

from torch import Tensor

from cudnn_gnn.ops._hub_split import HubSplit, gather, merge_rows
from cudnn_gnn.ops.plan import AttentionPlan

__all__ = ["run"]


def run(plan: AttentionPlan) -> Tensor | tuple[Tensor, Tensor]:
    """``out [Nd, H*C]`` (or ``[Nd, C]`` without ``concat``), and ``attention [E, H]`` float32 in COO order when
    the spec asks for it."""
    out, att = _run(plan)
    if not plan.spec.return_attention:
        return out
    if att is None:
        raise RuntimeError(f"backend {plan.backend.name!r} returned no attention for a call that asked for it")
    return out, att


def _run(plan: AttentionPlan) -> tuple[Tensor, Tensor | None]:
    if plan.split is None:
        return plan.backend.run(plan.spec, plan.graph)
    return _run_split(plan, plan.split)


def _run_split(plan: AttentionPlan, split: HubSplit) -> tuple[Tensor, Tensor | None]:
    spec = plan.spec
    x_src, x_dst, det = spec.x_src, spec.x_dst, spec.deterministic
    # copies only where a side was split (a graph with source hubs only keeps x_dst as it is, and vice versa)
    xs = x_src if split.src_of_vsrc.numel() == x_src.shape[0] else gather(split, "src_of_vsrc", x_src,
                                                                           split.src_of_vsrc, det)
    xd = x_dst if split.dst_of_row.numel() == x_dst.shape[0] else gather(split, "dst_of_row", x_dst,
                                                                         split.dst_of_row, det)
    rows = AttentionPlan(spec.on(split.graph, xs, xd, concat=True), plan.backend, plan.graph)
    row_out, row_att = _run(rows)
    out, att = merge_rows(split, x_src, x_dst, spec.attn_weights, spec.edge_attr, spec.heads, spec.activation,
                          spec.activation_alpha, row_out, row_att, v2=spec.v2, deterministic=det,
                          lin_edge_weight=spec.lin_edge_weight)
    out = (out.reshape(out.shape[0], -1) if spec.concat else out.mean(1)).to(x_src.dtype)
    return out, att
