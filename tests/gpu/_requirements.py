"""What the GPU suites need, said once: a CUDA GPU and the cuDNN backend (``backend_info().reason is None``)."""

from __future__ import annotations

import importlib.util
import os

import torch

import cudnn_gnn


def cudnn_skip_reason() -> str | None:
    """``None`` where the cuDNN GNN backend runs, else why not (the module-level skip reason)."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    info = cudnn_gnn.backend_info()
    return None if info.reason is None else f"cuDNN backend unavailable: {info.reason}"


def compiled_triton_skip_reason() -> str | None:
    """``None`` where the compiled Triton kernels can run (a CUDA GPU, the triton package, no interpreter), else
    why not (the module-level skip reason of the suites that need them)."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 runs the kernels on the interpreter; this suite is for the compiled kernels"
    if importlib.util.find_spec("triton") is None:
        return "the triton backend needs the triton package: pip install triton"
    return None


DRY_RUN = os.environ.get("CUDNN_GNN_GPU_TESTS_ON_CPU") == "1"
"""``CUDNN_GNN_GPU_TESTS_ON_CPU=1``: suites that support it run their harness on the CPU (the reference backend
where they would run the kernels), to check the tests themselves on a machine without a GPU."""
