"""Functional ops. A GAT / GATv2 call is three steps: :func:`cudnn_gnn.spec.attention_spec` validates it,
:func:`cudnn_gnn.ops.plan.plan_call` decides how it runs, :func:`cudnn_gnn.ops.run.run` runs it (docs/design.md)."""

from __future__ import annotations

from cudnn_gnn.ops.gat import gat
from cudnn_gnn.ops.gatv2 import gatv2
from cudnn_gnn.ops.global_attention import graph_attention
from cudnn_gnn.ops.precompile import AttentionShape, precompile
from cudnn_gnn.spec import attention_dropout_mask, make_dropout_mask

__all__ = ["AttentionShape", "attention_dropout_mask", "gat", "gatv2", "make_dropout_mask", "graph_attention", "precompile"]
