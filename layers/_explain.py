"""``torch_geometric.explain`` on our layers: PyG's edge masks and message hooks mapped onto the fused op.

PyG's ``MessagePassing.propagate`` explains a layer in two places, and both have an exact image here:

* **edge masks** (``set_masks``: GNNExplainer, PGExplainer, Captum, ``Explainer.get_masked_prediction``): with
  ``explain`` on, ``explain_message`` multiplies each message by ``edge_mask[e]`` (sigmoid'ed when
  ``_apply_sigmoid``); when the layer added self-loops the mask is ``edge_mask[_loop_mask]`` (the caller's edges
  without their self-loops) followed by ones for the appended loops. A factor on the message
  ``alpha_e * x_j`` is the same factor on ``alpha_e``, which is what the op's ``dropout_mask`` is: the mask goes
  in there (times the training dropout factors), in the plan's COO order. It requires grad, so the op runs the
  reference backend, which differentiates through it.
* **message forward hooks** (``AttentionExplainer``): called with ``({"x_j": [E', H, C], "alpha": [E', H]},)`` and
  the messages ``alpha * x_j``, in PyG's edge order, ``alpha`` before the edge mask (as PyG's ``message`` sees it).

As in PyG, a mask as long as the layer's messages (no self-loops added, or as many removed as added) is applied
position by position. ``return_attention_weights`` under a mask returns the coefficients before it, as PyG does
(one more op call, explain path only). Hooks that need a separate message or aggregate step, and a replaced
``explain_message`` (GraphMaskExplainer), are refused rather than silently ignored. Nothing here runs unless
explain is on or a message hook is registered; the layers' plain forward is untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing

from cudnn_gnn._philox import draw_seed
from cudnn_gnn.spec import attention_dropout_mask

from ._graph_plan import GraphPlan
from ._pyg_outputs import attention_result

__all__ = ["explained", "run_explained"]

# the MessagePassing hooks that would need the separate message / aggregate steps our op fuses
_FUSED_HOOKS = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
                "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
                "_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks",
                "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks")


def explained(conv: MessagePassing) -> bool:
    """Whether this forward needs the explain path: explain on, or a message forward hook registered. Refuses
    the hooks that only a separate message / aggregate step could honour (no silent no-op)."""
    for name in _FUSED_HOOKS:
        if getattr(conv, name):
            raise NotImplementedError(
                f"{name[1:-1].replace('_', ' ')}s must not be registered on cudnn_gnn's {type(conv).__name__}, whose "
                "op fuses message and aggregation (message forward hooks are supported), got one; convert with "
                "to_pyg() to use them"
            )
    if not conv.explain:
        return bool(conv._message_forward_hooks)
    if type(conv).explain_message is not MessagePassing.explain_message or "explain_message" in conv.__dict__:
        raise NotImplementedError(
            f"explain_message must be MessagePassing's on cudnn_gnn's {type(conv).__name__} (its edge mask is applied "
            "inside the fused op), got a replaced one; convert with to_pyg() to use it"
        )
    return True


def _num_messages(plan: GraphPlan) -> int:
    """PyG's message count ``E'`` (one host sync for static plans, on the explain path only)."""
    return plan.graph.num_edges if plan.keep is None else int(plan.keep.sum())


def edge_factor(conv: MessagePassing, plan: GraphPlan, edge_index: Any) -> Tensor:
    """``[E_plan]`` per-edge message factors in the plan's COO order, exactly as ``explain_message`` forms them."""
    if plan.form not in ("coo", "edge_index"):
        raise NotImplementedError(
            f"edge_index must be a [2, E] Tensor or EdgeIndex to explain cudnn_gnn's {type(conv).__name__} (PyG's edge "
            f"masks are over COO edges), got the {plan.form!r} form"
        )
    mask = conv._edge_mask
    if mask is None:
        raise ValueError(f"_edge_mask must be set on {type(conv).__name__} when explain is on (PyG's set_masks sets "
                         "it), got None")
    if conv._apply_sigmoid:
        mask = mask.sigmoid()
    n = _num_messages(plan)
    if mask.size(0) != n:  # the layer added self-loops: the caller's edges without theirs, then ones for the loops
        loop_mask = conv._loop_mask
        if loop_mask is None:
            loop_mask = edge_index[0] != edge_index[1]
        if loop_mask.size(0) == mask.size(0):
            mask = torch.cat([mask[loop_mask], mask.new_ones(plan.num_loops)])
        if mask.size(0) != n:
            raise ValueError(f"_edge_mask must have one entry per edge of edge_index ({n} messages with self-loops), "
                             f"got {conv._edge_mask.size(0)} entries")
    if plan.keep is not None:  # static plan: PyG's edges are the kept ones; the redirected loops are discarded
        mask = mask.new_ones(plan.graph.num_edges).masked_scatter(plan.keep, mask)
    return mask


def run_explained(
    conv: MessagePassing,
    plan: GraphPlan,
    edge_index: Any,
    op: Callable[..., Any],
    x_src: Tensor,
    want_attention: bool,
    alpha_dtype: torch.dtype,
) -> Tensor | tuple[Tensor, Tensor]:
    """Run ``op`` (the layer's ``gat`` / ``gatv2`` call, missing ``dropout``, ``training``, ``dropout_mask`` and
    ``return_attention``) with the edge mask as its dropout mask and the message hooks called; returns what the
    op returns for ``want_attention`` (attention without the edge mask, as PyG returns it)."""
    heads, p, training = conv.heads, conv.dropout, conv.training
    hooks = list(conv._message_forward_hooks.values())
    need_alpha = want_attention or bool(hooks)
    alpha: Tensor | None = None
    if not conv.explain:
        result = op(dropout=p, training=training, dropout_mask=None, return_attention=need_alpha)
        out, alpha = result if need_alpha else (result, None)
    else:
        e = plan.graph.num_edges
        drop = None  # the counter-based mask the kernels would draw, materialised for one seed (both calls share it)
        if training and p > 0.0:
            drop = attention_dropout_mask(plan.graph, heads, p, draw_seed(x_src.device))
        factor = edge_factor(conv, plan, edge_index).to(torch.float32).unsqueeze(1).expand(e, heads)
        out = op(dropout=0.0, training=training, dropout_mask=factor if drop is None else factor * drop,
                 return_attention=False)
        if need_alpha:  # PyG's alpha is the coefficients before the edge mask: one more call, explain path only
            alpha = op(dropout=0.0, training=training, dropout_mask=drop, return_attention=True)[1]
    if hooks and alpha is not None:
        if plan.form not in ("coo", "edge_index", "csc_graph"):
            raise NotImplementedError(
                f"edge_index must be a [2, E] Tensor, EdgeIndex or CscGraph for message forward hooks on cudnn_gnn's "
                f"{type(conv).__name__}, got the {plan.form!r} form"
            )
        ei, a = attention_result(plan, alpha.to(alpha_dtype), edge_index)
        src = ei[0]
        if plan.poison is not None:  # a compiled call on a raw edge_index: its ids clamped as the plan's, NaN messages
            src, a = src.clamp(0, max(x_src.shape[0] - 1, 0)), a + plan.poison.to(a.dtype)
        x_j = x_src.view(x_src.shape[0], heads, -1).index_select(0, src)
        messages = a.unsqueeze(-1) * x_j
        for hook in hooks:
            if hook(conv, ({"x_j": x_j, "alpha": a},), messages) is not None:
                raise NotImplementedError(
                    f"message forward hooks on cudnn_gnn's {type(conv).__name__} must return None (its op fuses "
                    "message and aggregation, so messages cannot be replaced), got a value; convert with to_pyg()"
                )
    if want_attention and alpha is not None:
        return out, alpha
    return out
