"""The Triton backend behind the backend interface (:class:`cudnn_gnn.backends.GatBackend`)."""


from __future__ import annotations

import torch
from torch import Tensor

from cudnn_gnn.backends.info import backend_info, triton_available
from cudnn_gnn.backends.triton._runtime import unavailable_reason
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

    def kernel_graph(self, spec: AttentionSpec, graph: CscGraph) -> CscGraph:
        return graph  # the kernels take int32 or int64 indices and compute every offset in int64

    def failed_to_launch_before(self, spec: AttentionSpec, graph: CscGraph) -> bool:
        return False

    def run(self, spec: AttentionSpec, graph: CscGraph) -> tuple[Tensor, Tensor | None]:
        return triton_gat(graph, spec.x_src, spec.x_dst, spec.attn_weights, spec.edge_attr, spec.dropout_mask,
                       v2=spec.v2, heads=spec.heads, concat=spec.concat, activation_name=spec.activation,
                       activation_alpha=spec.activation_alpha, return_attention=spec.return_attention,
                       lin_edge_weight=spec.lin_edge_weight)


BACKEND = TritonBackend()
