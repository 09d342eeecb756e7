"""The backends: one vocabulary of names, one small interface, one module each.

GAT / GATv2 (:func:`cudnn_gnn.gat`, :func:`cudnn_gnn.gatv2`), each behind :class:`GatBackend`:

* ``"cudnn"``: cuDNN's GNN kernels (:mod:`cudnn_gnn.backends.cudnn`, which calls the ``torch.library`` ops of
  :mod:`cudnn_gnn.backends._cudnn`); CUDA, cuDNN >= 9.28 and ``nvidia-cudnn-frontend`` >= 1.32.
* ``"triton"``: our fused Triton kernels (:mod:`cudnn_gnn.backends.triton`); any CUDA GPU with Triton, no cuDNN.
* ``"reference"``: plain differentiable PyTorch (:mod:`cudnn_gnn.backends.reference`); any device, the oracle.

Global attention (:func:`cudnn_gnn.graph_attention`): ``"cudnn"`` (our cuDNN SDPA graphs,
:mod:`cudnn_gnn.backends._cudnn_sdpa`; their plans: :mod:`cudnn_gnn.backends._sdpa_plans`), ``"flash"`` (torch's fused
kernels) and ``"reference"``.

``"auto"`` is resolved per call by the planner (:mod:`cudnn_gnn.ops.plan`, :mod:`cudnn_gnn.ops.global_attention`);
nothing here probes a GPU at import. What this process can run, and why not: :func:`backend_info`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch
from torch import Tensor

from cudnn_gnn._names import ATTENTION_BACKENDS, AUTO_ORDER, GAT_BACKENDS
from cudnn_gnn.backends.info import (
    CUDNN_SUBLIBRARIES,
    JIT_ONLY_NOTE,
    MIN_CUDNN_VERSION,
    MIN_FRONTEND_VERSION,
    PRECOMPILED,
    BackendInfo,
    backend_info,
    cudnn_available,
    incomplete_cudnn,
    lacking_precompiled,
    library_dirs,
    mapped_cudnn_libraries,
    precompiled_engines_everywhere,
)

if TYPE_CHECKING:
    from cudnn_gnn.graph import CscGraph
    from cudnn_gnn.spec import AttentionSpec

__all__ = [
    "GAT_BACKENDS", "ATTENTION_BACKENDS", "AUTO_ORDER", "GatBackend", "KernelGraph", "gat_backend", "registered",
    "BackendInfo", "backend_info",
    "cudnn_available", "mapped_cudnn_libraries", "MIN_CUDNN_VERSION", "MIN_FRONTEND_VERSION", "CUDNN_SUBLIBRARIES",
    "PRECOMPILED", "JIT_ONLY_NOTE", "library_dirs", "lacking_precompiled", "precompiled_engines_everywhere",
    "incomplete_cudnn",
]



KernelGraph = TypeVar("KernelGraph")
"""What a backend's :meth:`GatBackend.kernel_graph` returns and its :meth:`GatBackend.run` reads: a
:class:`~cudnn_gnn.CscGraph` (cuDNN: in the index dtype its kernels need; the reference) or the backend's own view of
one (Triton: :class:`~cudnn_gnn.backends.triton.TritonGraph`, the arrays and work lists its kernels walk)."""


class GatBackend(Protocol[KernelGraph]):
    """What the planner and the runner need of a GAT / GATv2 backend (each module exports one as ``BACKEND``).

    ``spec`` is the validated call (:class:`cudnn_gnn.spec.AttentionSpec`); ``graph`` what :meth:`kernel_graph`
    made of the graph the planner derived from ``spec.graph`` (a hub split's rows, or the graph itself), with the
    same edge order.
    """

    name: str
    splits_hubs: bool  # whether the kernels' time follows the largest degree, so that `max_degree="auto"` splits

    def unavailable(self, device: torch.device) -> tuple[str, str] | None:
        """``None`` where the backend can run on tensors of ``device``, else ``(why not, the fix)``."""

    def unsupported(self, spec: AttentionSpec) -> str | None:
        """``None`` where the backend computes this call, else why not (a dtype, a size)."""

    def kernel_graph(self, spec: AttentionSpec, graph: CscGraph) -> KernelGraph:
        """``graph`` as the kernels need it (e.g. int64 indices past 32-bit offsets, the work lists they walk),
        cached on ``graph`` (through :meth:`~cudnn_gnn.CscGraph.derived`)."""

    def failed_to_launch_before(self, spec: AttentionSpec, graph: KernelGraph) -> bool:
        """Whether a kernel of this call's shape on ``graph`` failed to launch earlier in this process."""

    def run(self, spec: AttentionSpec, graph: KernelGraph) -> tuple[Tensor, Tensor | None]:
        """``(out [Nd, H*C] or [Nd, C], attention [E, H] float32 in COO order, or None unless asked)``."""


# The modules are light: each imports its kernel library (cudnn, triton) only when it first runs or probes.
from cudnn_gnn.backends import cudnn as _cudnn_backend  # noqa: E402
from cudnn_gnn.backends import reference as _reference_backend  # noqa: E402
from cudnn_gnn.backends import triton as _triton_backend  # noqa: E402

_GAT: dict[str, GatBackend[Any]] = {
    "cudnn": _cudnn_backend.BACKEND,
    "triton": _triton_backend.BACKEND,
    "reference": _reference_backend.BACKEND,
}
assert set(_GAT) == set(GAT_BACKENDS) - {"auto"}, "every backend name has one implementation"


def registered(name: str) -> bool:
    return name in _GAT


def gat_backend(name: str) -> GatBackend[Any]:
    """The backend called ``name`` (one of ``GAT_BACKENDS`` but ``"auto"``)."""
    backend = _GAT.get(name)
    if backend is None:
        raise ValueError(f"backend must be one of {', '.join(repr(n) for n in _GAT)}, got {name!r}")
    return backend
