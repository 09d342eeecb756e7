"""cuDNN's GNN kernels behind the backend interface: the index dtype they need, and one call's arguments.

The kernels themselves are wrapped as ``torch.library`` ops in :mod:`cudnn_gnn.backends._cudnn`; this module
turns a validated :class:`~cudnn_gnn.spec.AttentionSpec` into their argument list (:class:`~._cudnn.GatCall`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from cudnn_gnn.backends.info import backend_info, cudnn_available
from cudnn_gnn.graph import CscGraph

if TYPE_CHECKING:
    from cudnn_gnn.spec import AttentionSpec

__all__ = ["BACKEND", "kernel_index_dtype", "NODE_ELEMS_LIMIT", "EDGE_ELEMS_LIMIT"]

# With int32 graph indices the kernels compute some element offsets in 32 bits: past 2^31 node elements (N*D) GAT
# returns wrong numbers and past 2^31 edge elements (E*D) GATv2 crashes the CUDA context (docs/performance.md,
# "int32 limits"). Graphs are promoted to int64 one power of two below each boundary.
NODE_ELEMS_LIMIT = 2**30
EDGE_ELEMS_LIMIT = 2**30


def kernel_index_dtype(graph: CscGraph, dim_node: int, dim_edge: int) -> torch.dtype:
    """The index dtype the kernels must see for this graph and feature width (int64 past the int32 limits)."""
    if graph.index_dtype == torch.int64:
        return torch.int64
    nodes = max(graph.num_src_nodes, graph.num_dst_nodes)
    width = max(dim_node, dim_edge)
    if nodes * width >= NODE_ELEMS_LIMIT or graph.num_edges * width >= EDGE_ELEMS_LIMIT:
        return torch.int64
    return torch.int32


def _needs_map(spec: AttentionSpec) -> bool:
    """Whether the kernels need the CSC->COO map: only to order edge tensors (edge features, the dropout mask,
    returned attention) and for the deterministic backward (its reverse map is in COO ids). Without any, passing
    it costs time: a kernel with the map is a build of its own (docs/performance.md, "First-call kernel build")."""
    return (spec.edge_attr is not None or spec.has_dropout or spec.return_attention
            or spec.deterministic)


class CudnnBackend:
    name = "cudnn"
    splits_hubs = True  # the kernels' time follows the largest degree (docs/performance.md, "hubs")

    def unavailable(self, device: torch.device) -> tuple[str, str] | None:
        if device.type != "cuda":
            return (f"cuDNN's GNN kernels need CUDA tensors, got tensors on {device}",
                    "move the graph and features to a CUDA device, or use backend='reference'")
        if cudnn_available():
            return None
        info = backend_info()
        return info.reason or "cuDNN is unavailable", info.fix or "run `python -m cudnn_gnn info`"

    def unsupported(self, spec: AttentionSpec) -> str | None:
        if spec.dtype == torch.float64:
            return f"backend='cudnn' supports float32, float16 and bfloat16, got {spec.dtype}"
        return None

    def kernel_graph(self, spec: AttentionSpec, graph: CscGraph) -> CscGraph:
        return graph.to_index_dtype(kernel_index_dtype(graph, spec.dim, spec.dim_edge))

    def failed_to_launch_before(self, spec: AttentionSpec, graph: CscGraph) -> bool:
        """Whether a kernel of this call's shape failed to launch earlier in this process (cuDNN 9.28.1 fails so
        for some shapes; :mod:`._cudnn` then ran that call on the fallback math)."""
        from cudnn_gnn.backends import _cudnn

        return _cudnn.launch_failed(_cudnn.shape_key(
            v2=spec.v2, heads=spec.heads, dim=spec.dim, dtype=spec.dtype, has_map=_needs_map(spec),
            dim_edge=spec.dim_edge if spec.edge_attr is not None else None, has_mask=spec.has_dropout,
            concat=spec.concat, deterministic=spec.deterministic, grad_fp32=spec.grad_fp32,
            activation=spec.activation, num_src=graph.num_src_nodes, num_dst=graph.num_dst_nodes,
            num_edges=graph.num_edges, index_dtype=graph.index_dtype))

    def run(self, spec: AttentionSpec, graph: CscGraph) -> tuple[Tensor, Tensor | None]:
        from cudnn_gnn.backends import _cudnn

        dtype = spec.dtype
        det = spec.deterministic
        edge_attr = spec.projected_edge_attr()  # GATv2 with lin_edge_weight: projected by torch first
        rev_offsets, rev_map = graph.reverse_coo_map() if det else (None, None)
        mask = spec.dropout_factors()  # the explicit mask, or the seed's (the Triton kernels' draws, materialised)
        call = _cudnn.GatCall(
            graph.offsets, graph.indices, graph.map_csc_to_coo if _needs_map(spec) else None, rev_offsets, rev_map,
            graph.num_src_nodes, spec.x_src, spec.x_dst,
            None if edge_attr is None else edge_attr.to(dtype),
            spec.attn_weights.to(dtype),
            None if mask is None else mask.t().to(torch.float32).contiguous(),
            spec.v2, spec.heads, spec.concat, spec.activation, spec.activation_alpha, det, spec.grad_fp32,
        )
        out, att = _cudnn.cudnn_gat(call, spec.return_attention)
        # [H, E] -> PyG's [E, H], contiguous like PyG's (a view would surprise .view() callers)
        return out, att.t().contiguous() if spec.return_attention else None


BACKEND = CudnnBackend()
