"""What the GPU suites need, said once: a CUDA GPU and the cuDNN backend (``backend_info().reason is None``)."""

from __future__ import annotations

import torch

import cudnn_gnn


def cudnn_skip_reason() -> str | None:
    """``None`` where the cuDNN GNN backend runs, else why not (the module-level skip reason)."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    info = cudnn_gnn.backend_info()
    return None if info.reason is None else f"cuDNN backend unavailable: {info.reason}"
