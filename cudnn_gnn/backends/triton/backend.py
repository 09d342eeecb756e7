"""The Triton backend behind the backend interface (:class:`cudnn_gnn.backends.GatBackend`)."""


from __future__ import annotations

import torch
from torch import Tensor

from cudnn_gnn.backends.info import backend_info, triton_available
from cudnn_gnn.backends.triton._runtime import unavailable_reason
from cudnn_gnn.backends.triton.call import TritonGraph, kernel_graph
from cudnn_gnn.backends.triton.op import triton_gat
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.spec import AttentionSpec

__all__ = ["BACKEND", "TritonBackend"]


class TritonBackend:
    """The Triton kernels behind the backend interface (:class:`cudnn_gnn.backends.GatBackend`)."""

    name = "triton"
    # hub rows are cut into chunks of at most chunk_size(E) edges inside the backend (a work list per graph,
    # partial states merged in a fixed order), so the time does not follow the largest degree: no graph rewrite
    splits_hubs = False

    def unavailable(self, device: torch.device) -> tuple[str, str] | None:
        reason: str | None
        if device.type == "cuda":
            reason = None if triton_available() else backend_info().triton_reason or "the Triton kernels do not run"
        else:
            reason = unavailable_reason(device)  # runs under TRITON_INTERPRET=1 only
        if reason is None:
            return None
        fix = "pip install triton" if "not importable" in reason else "use CUDA tensors, or backend='reference'"
        return reason, fix

    def unsupported(self, spec: AttentionSpec) -> str | None:
        if spec.dtype == torch.float64:
            return f"backend='triton' supports float32, float16 and bfloat16, got {spec.dtype}"
        return None

    def kernel_graph(self, spec: AttentionSpec, graph: CscGraph) -> TritonGraph:
        """``graph`` as the kernels walk it: its arrays (int32 or int64 indices: the kernels compute offsets in the
        width each call's sizes need, tuning.int64_offsets) and work lists, built once and kept on it (:func:`kernel_graph`)."""
        return kernel_graph(graph)

    def failed_to_launch_before(self, spec: AttentionSpec, graph: TritonGraph) -> bool:
        return False

    def run(self, spec: AttentionSpec, graph: TritonGraph) -> tuple[Tensor, Tensor | None]:
        return triton_gat(spec, graph)


BACKEND = TritonBackend()
