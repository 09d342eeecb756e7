"""Functional ops: validate on the host, pick a backend, keep the caller's COO edge order."""

from __future__ import annotations

from cudnn_gnn.ops._attention import make_dropout_mask
from cudnn_gnn.ops.gat import gat
from cudnn_gnn.ops.gatv2 import gatv2
from cudnn_gnn.ops.graph_attention import graph_attention
from cudnn_gnn.ops.precompile import precompile

__all__ = ["gat", "gatv2", "make_dropout_mask", "graph_attention", "precompile"]
