"""The Triton backend: our own fused GAT / GATv2 kernels (forward and an atomic-free backward).

Modules, in the order a call walks them:

* :mod:`~cudnn_gnn.backends.triton.backend`: :class:`TritonBackend`, what the planner and the runner call;
* :mod:`~cudnn_gnn.backends.triton.call`: :class:`TritonGraph`, the graph as the kernels walk it (arrays and work
  lists), what :meth:`TritonBackend.kernel_graph` builds once per graph and keeps on it; :class:`GatCall` /
  :class:`Gatv2Call` (and the backward's :class:`SourceWalk`), one call as its op takes it and the launchers read it,
  built from the validated spec and the :class:`TritonGraph` by :func:`build_call`; :class:`TritonOptions`, the
  variants kept for measurement;
* :mod:`~cudnn_gnn.backends.triton.op`: :func:`triton_gat`, the entry;
* :mod:`~cudnn_gnn.backends.triton.gat_op`, :mod:`~cudnn_gnn.backends.triton.gatv2_op`: each op's ``torch.library``
  ops (schema, fakes), their forward and backward, and the autograd Function over them;
* :mod:`~cudnn_gnn.backends.triton.worklists`: which programs a pass launches (hub rows in chunks);
* :mod:`~cudnn_gnn.backends.triton.tuning`: every launch decision (tiles, blocks, warps, chunks) in one place;
* :mod:`~cudnn_gnn.backends.triton.kernels`: the kernels and their launchers, one module per pass, imported at
  first use (this package imports no triton);
* :mod:`~cudnn_gnn.backends.triton.launch`: :class:`~cudnn_gnn.backends.triton.launch.CachedLaunch`, Triton's
  per-call dispatch cached;
* :mod:`~cudnn_gnn.backends.triton._prebuild`: :func:`prebuild`, a step's kernel variants built in parallel processes
  before its first call.
"""

from __future__ import annotations

from cudnn_gnn.backends.triton._prebuild import BuiltVariant, PrebuildReport, prebuild
from cudnn_gnn.backends.triton._runtime import unavailable_reason
from cudnn_gnn.backends.triton.backend import BACKEND, TritonBackend
from cudnn_gnn.backends.triton.call import (
    DEFAULT_OPTIONS,
    GatCall,
    Gatv2Call,
    SourceWalk,
    TritonBackward,
    TritonGraph,
    TritonOptions,
    build_call,
    built_kernel_graph,
    kernel_graph,
    use_options,
)
from cudnn_gnn.backends.triton.op import gat_one_gather, triton_gat
from cudnn_gnn.backends.triton.worklists import WorkList, work_list

__all__ = ["BACKEND", "DEFAULT_OPTIONS", "BuiltVariant", "GatCall", "Gatv2Call", "PrebuildReport", "SourceWalk",
           "TritonBackend", "TritonBackward", "TritonGraph", "TritonOptions", "WorkList", "build_call",
           "built_kernel_graph", "gat_one_gather", "kernel_graph", "prebuild", "triton_gat", "unavailable_reason",
           "use_options", "work_list"]
