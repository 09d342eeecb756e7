"""The second step of a GAT / GATv2 call: :func:`plan_call` decides how a validated spec runs.

One place decides, in this order (``docs/design.md`` draws it):

1. **the backend**: the requested one, or for ``"auto"`` the rule of :func:`choose_backend`;
2. **the hub split**: a degree-bounded rewrite of the graph (:mod:`cudnn_gnn.ops._hub_split`) for an explicit
   ``max_degree``, or by the ``"auto"`` rule of :func:`auto_max_degree` for backends whose time follows the
   largest degree;
3. **the kernel graph**: the (split) graph as the backend's kernels take it (its index dtype; Triton: the arrays
   and work lists its kernels walk), kept on the graph;
4. **the launch fallback**: a call whose kernel shape failed to launch earlier in the process (cuDNN) goes to
   the fallback backend instead: Triton on CUDA where it runs, else the reference (deterministic calls stay on
   the backend's own fallback math, which the failing call ran, so that they repeat bitwise).

No tensor is computed here except, once per graph, its degree maxima and its split (kept on the graph).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import torch

from cudnn_gnn.backends import AUTO_ORDER, GatBackend, gat_backend, registered
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops._hub_split import HubSplit, hub_split
from cudnn_gnn.spec import AttentionSpec

__all__ = ["AttentionPlan", "plan_call", "choose_backend", "auto_max_degree", "AUTO_SPLIT_TRIGGER", "AUTO_SPLIT_SKEW",
           "AUTO_SPLIT_DEGREE", "AUTO_ORDER"]

# `max_degree="auto"` splits a graph when a node has more than AUTO_SPLIT_TRIGGER edges in (out) and more than
# AUTO_SPLIT_SKEW times the mean in (out) degree, into rows of at most AUTO_SPLIT_DEGREE edges. The merge costs
# work per edge of a split destination, so it pays off only on skewed graphs (docs/performance.md, "hubs").
AUTO_SPLIT_TRIGGER = 1024
AUTO_SPLIT_SKEW = 32
AUTO_SPLIT_DEGREE = 256



@dataclass(frozen=True, eq=False)
class AttentionPlan:
    """How one call runs.

    Attributes:
        spec: the validated call.
        backend: the resolved backend (never ``"auto"``).
        graph: what the backend's kernels run on, its ``kernel_graph`` of ``spec.graph`` or of the split's bounded
            graph (a :class:`~cudnn_gnn.CscGraph` in the backend's index dtype, or the backend's own view of one:
            Triton's arrays and work lists), kept on that graph.
        split: the hub split whose rows ``graph`` holds, or None.
        fallback_from: the backend this call was routed away from after a launch failure, or None.
    """

    spec: AttentionSpec
    backend: GatBackend[Any]
    graph: Any
    split: HubSplit | None = None
    fallback_from: str | None = None


_warned_reference_on_gpu = False


def _warn_reference_on(device: torch.device, why: str) -> None:
    global _warned_reference_on_gpu
    if not _warned_reference_on_gpu:
        _warned_reference_on_gpu = True
        warnings.warn(f"cudnn_gnn: running the reference backend on {device} because {why}. Run `python -m cudnn_gnn "
                      "info` for details.", RuntimeWarning, stacklevel=4)


def choose_backend(spec: AttentionSpec) -> GatBackend[Any]:
    """The backend that runs ``spec`` (requested, or resolved from ``"auto"``).

    ``"auto"``: CPU tensors -> reference; CUDA -> the first of ``AUTO_ORDER`` that runs here and supports the call,
    else the reference (with one warning per process). A call without edges runs the reference whatever was asked:
    the answer is zeros and no kernel is worth launching. A dropout mask that requires grad (an explainer's edge
    mask; explanation is not a hot path) runs the reference, the backend that differentiates through it (the spec
    refused any other explicit backend). An explicit backend that cannot run raises
    RuntimeError (why, and the fix); one that cannot compute this call raises NotImplementedError.
    """
    device = spec.graph.device
    if spec.graph.num_edges == 0 or spec.mask_requires_grad:
        return gat_backend("reference")
    if spec.backend != "auto":
        chosen = gat_backend(spec.backend)
        missing = chosen.unavailable(device)
        if missing is not None:
            raise RuntimeError(f"backend={spec.backend!r} is unavailable: {missing[0]}. Fix: {missing[1]}")
        unsupported = chosen.unsupported(spec)
        if unsupported is not None:
            raise NotImplementedError(f"{spec.name}: {unsupported}")
        return chosen
    if device.type != "cuda":
        return gat_backend("reference")
    reasons = []
    for name in AUTO_ORDER:
        candidate = gat_backend(name)
        missing = candidate.unavailable(device)
        why_not = f"{missing[0]} (fix: {missing[1]})" if missing else candidate.unsupported(spec)
        if why_not is None:
            return candidate
        reasons.append(f"{name}: {why_not}")
    if spec.dtype != torch.float64:  # float64 on the reference is the caller's choice, not a missing install
        _warn_reference_on(device, "; ".join(reasons))
    return gat_backend("reference")


def _launch_fallback(spec: AttentionSpec) -> GatBackend[Any]:
    """Where a call goes after its cuDNN kernel failed to launch: Triton where it runs, else the reference."""
    if registered("triton"):
        triton = gat_backend("triton")
        if triton.unavailable(spec.graph.device) is None and triton.unsupported(spec) is None:
            return triton
    return gat_backend("reference")


def auto_max_degree(graph: CscGraph) -> int | None:
    """The hub bound ``max_degree="auto"`` uses on a backend that splits hubs: ``AUTO_SPLIT_DEGREE`` where a node
    has more than ``AUTO_SPLIT_TRIGGER`` edges in or out and more than ``AUTO_SPLIT_SKEW`` times the mean degree on
    that side, else ``None`` (the plain call). Never under ``torch.compile`` (the rewrite has data-dependent
    sizes) or for a graph marked rebuilt every call; the degree check syncs once per graph."""
    if torch.compiler.is_compiling():
        return None
    degrees = graph.max_degrees()
    if degrees is None:
        return None
    e = graph.num_edges
    for largest, count in zip(degrees, (graph.num_dst_nodes, graph.num_src_nodes)):
        if largest > AUTO_SPLIT_TRIGGER and largest * count > AUTO_SPLIT_SKEW * e:
            return AUTO_SPLIT_DEGREE
    return None


def _bounded(backend: GatBackend[Any], spec: AttentionSpec) -> tuple[HubSplit | None, Any]:
    """The hub split ``backend`` runs ``spec`` on (None: the plain graph) and the kernel graph."""
    bound = spec.max_degree
    if bound == "auto":
        bound = auto_max_degree(spec.graph) if backend.splits_hubs else None
    split = hub_split(spec.graph, bound) if isinstance(bound, int) else None
    return split, backend.kernel_graph(spec, spec.graph if split is None else split.graph)


def plan_call(spec: AttentionSpec) -> AttentionPlan:
    """Decide backend, hub split, kernel graph and launch fallback for ``spec`` (see the module docstring)."""
    backend = choose_backend(spec)
    split, graph = _bounded(backend, spec)
    # the split runs its rows with concat=True (the merge needs every head), so its kernels have that shape
    kernel_spec = spec if split is None else replace(spec, concat=True)
    # A deterministic call stays where the failing call ran (the backend's own fallback math), so that it repeats
    # bitwise from its first call on; the others go to the fallback backend, which is faster.
    if spec.deterministic or not backend.failed_to_launch_before(kernel_spec, graph):
        return AttentionPlan(spec, backend, graph, split)
    fallback = _launch_fallback(spec)
    split, graph = _bounded(fallback, spec)
    return AttentionPlan(spec, fallback, graph, split, fallback_from=backend.name)
