"""Functional ops: validate on the host, pick a backend, keep the caller's COO edge order."""

from __future__ import annotations

import importlib
from typing import Any

from cudnn_gnn.ops._attention import make_dropout_mask
from cudnn_gnn.ops.gat import gat
from cudnn_gnn.ops.gatv2 import gatv2

__all__ = ["gat", "gatv2", "make_dropout_mask", "graph_attention"]


def __getattr__(name: str) -> Any:
    if name == "graph_attention":  # kept lazy: it imports the SDPA adapter
        return importlib.import_module("cudnn_gnn.ops.graph_attention").graph_attention
    raise AttributeError(f"module 'cudnn_gnn.ops' has no attribute {name!r}")
