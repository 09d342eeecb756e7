"""The backend names: the one vocabulary that callers, the spec's validation and the planner read.

A module of constants that imports no backend, so that :mod:`cudnn_gnn.spec` can check ``backend=`` against it
without importing the backends (which import the spec's helpers). :mod:`cudnn_gnn.backends` re-exports them.
"""

from __future__ import annotations

__all__ = ["ATTENTION_BACKENDS", "AUTO_ORDER", "GAT_BACKENDS"]

GAT_BACKENDS = ("auto", "cudnn", "triton", "reference")
"""The names a caller may pass as ``backend=`` to GAT / GATv2 (layers, CLI and examples read these)."""

ATTENTION_BACKENDS = ("auto", "cudnn", "flash", "reference")
"""The names a caller may pass as ``backend=`` to global attention (:func:`cudnn_gnn.graph_attention`)."""

AUTO_ORDER = ("triton", "cudnn")
"""What ``backend="auto"`` tries on CUDA for GAT / GATv2, in order: the first that runs here and supports the call
(the reference backend otherwise; the planner, :mod:`cudnn_gnn.ops.plan`, applies it per call, and
:func:`~cudnn_gnn.backends.backend_info` prints it). Triton first: in ``bench_layers.py``'s table its layer was
faster than cuDNN's on every graph but Cora-sized ones, where cuDNN's lead per step is smaller than one of its NVRTC
kernel builds (docs/performance.md, "Which backend auto takes")."""
