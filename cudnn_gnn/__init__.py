"""cudnn-gnn: fused graph attention (GAT, GATv2, graph transformers), drop-in for PyTorch Geometric.

Three backends run the attention: our own fused Triton kernels (what ``backend="auto"`` takes on CUDA; any CUDA
build of torch brings Triton), NVIDIA cuDNN's GNN kernels (optional, ``backend="cudnn"``, cuDNN >= 9.28) and a
pure-PyTorch reference (the CPU path and the test oracle). The house has layers that import one way: the graph
container (:mod:`cudnn_gnn.graph`) -> functional ops (:mod:`cudnn_gnn.ops`) -> backends (:mod:`cudnn_gnn.backends`:
Triton, cuDNN adapter, reference) -> nn layers (:mod:`cudnn_gnn.layers`) -> datasets, examples and benchmarks.
Layer and dataset names are re-exported here lazily, so ``import cudnn_gnn`` stays light and never probes the GPU.
"""

from __future__ import annotations

import importlib
from typing import Any

from cudnn_gnn.backends import backend_info
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops import attention_dropout_mask, gat, gatv2, graph_attention, make_dropout_mask, precompile
from cudnn_gnn.sampled import sampled_blocks

__version__ = "0.1.0"

_LAZY = {
    "GATConv": "cudnn_gnn.layers",
    "GATv2Conv": "cudnn_gnn.layers",
    "convert": "cudnn_gnn.layers",
    "to_pyg": "cudnn_gnn.layers",
    "ToCscGraph": "cudnn_gnn.layers",
    "GPSConv": "cudnn_gnn.layers",
    "GraphTransformerBlock": "cudnn_gnn.layers",
}

__all__ = [
    "CscGraph", "attention_dropout_mask", "gat", "gatv2", "graph_attention", "make_dropout_mask", "precompile",
    "sampled_blocks", "backend_info",
    "__version__", *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cudnn_gnn' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
