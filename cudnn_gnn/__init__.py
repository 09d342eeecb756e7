"""cudnn-gnn: fused graph attention (GAT, GATv2, graph transformers), drop-in for PyTorch Geometric.

Three backends run the attention: our own fused Triton kernels (what ``backend="auto"`` takes on CUDA; any CUDA
build of torch brings Triton), NVIDIA cuDNN's GNN kernels (optional, ``backend="cudnn"``, cuDNN >= 9.28) and a
pure-PyTorch reference (the CPU path and the test oracle). The house has layers that import one way: the graph
container (:mod:`cudnn_gnn.graph`) -> functional ops (:mod:`cudnn_gnn.ops`) -> backends (:mod:`cudnn_gnn.backends`:
Triton, cuDNN adapter, reference) -> nn layers (:mod:`cudnn_gnn.layers`) -> datasets, examples and benchmarks.
Every name here is imported on first use, so ``import cudnn_gnn`` imports no torch and never probes the GPU.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the one place: pyproject.toml reads it (setuptools' dynamic version)

# Every name is imported on first use, so `import cudnn_gnn` (and `python -m cudnn_gnn --help`) does not import torch.
_LAZY = {
    "CscGraph": "cudnn_gnn.graph",
    "attention_dropout_mask": "cudnn_gnn.ops",
    "gat": "cudnn_gnn.ops",
    "gatv2": "cudnn_gnn.ops",
    "graph_attention": "cudnn_gnn.ops",
    "make_dropout_mask": "cudnn_gnn.ops",
    "precompile": "cudnn_gnn.ops",
    "sampled_blocks": "cudnn_gnn.sampled",
    "backend_info": "cudnn_gnn.backends",
    "GATConv": "cudnn_gnn.layers",
    "GATv2Conv": "cudnn_gnn.layers",
    "convert": "cudnn_gnn.layers",
    "to_pyg": "cudnn_gnn.layers",
    "ToCscGraph": "cudnn_gnn.layers",
    "GPSConv": "cudnn_gnn.layers",
    "GraphTransformerBlock": "cudnn_gnn.layers",
}
_SUBMODULES = ("apps", "backends", "datasets", "graph", "layers", "ops", "sampled", "spec")

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports these on first use
    from cudnn_gnn.backends import backend_info
    from cudnn_gnn.graph import CscGraph
    from cudnn_gnn.layers import GATConv, GATv2Conv, GPSConv, GraphTransformerBlock, ToCscGraph, convert, to_pyg
    from cudnn_gnn.ops import attention_dropout_mask, gat, gatv2, graph_attention, make_dropout_mask, precompile
    from cudnn_gnn.sampled import sampled_blocks

__all__ = [
    "CscGraph", "attention_dropout_mask", "gat", "gatv2", "graph_attention", "make_dropout_mask", "precompile",
    "sampled_blocks", "backend_info", "GATConv", "GATv2Conv", "convert", "to_pyg", "ToCscGraph", "GPSConv",
    "GraphTransformerBlock", "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"cudnn_gnn.{name}")
    raise AttributeError(f"module 'cudnn_gnn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})
