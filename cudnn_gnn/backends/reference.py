"""Pure-PyTorch reference backend: the CPU path and the test oracle.

Written from the math, independently of the cuDNN call path: per-edge logits, a segment softmax over each
destination's incoming edges, optional multiplicative dropout factors, and a weighted sum of source features.
Everything is plain differentiable PyTorch (``index_select``/``index_add``/``scatter_reduce``), so autograd,
``gradcheck`` and ``torch.compile`` work on any device. Half-precision inputs are computed in float32 and the
output cast back, as the cuDNN kernels accumulate in float32 too.

Determinism: on CPU every reduction is deterministic. On CUDA, ``index_add`` uses atomics; call
``torch.use_deterministic_algorithms(True)`` for bitwise-repeatable reference results there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from cudnn_gnn._segment import ACTIVATIONS, activation, segment_softmax
from cudnn_gnn.graph import CscGraph

if TYPE_CHECKING:
    from cudnn_gnn.spec import AttentionSpec

__all__ = ["ACTIVATIONS", "mha_gat", "BACKEND"]


def mha_gat(
    graph: CscGraph,
    x_src: Tensor,
    x_dst: Tensor,
    attn_weights: Tensor,
    edge_attr: Tensor | None,
    dropout_mask: Tensor | None,
    *,
    v2: bool,
    heads: int,
    concat: bool,
    activation_name: str,
    activation_alpha: float,
    lin_edge_weight: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAT / GATv2 attention on a CSC graph.

    Args:
        graph: the graph (any index dtype, same device as the features).
        x_src: ``[Ns, H*C]`` projected source features; ``x_dst``: ``[Nd, H*C]``.
        attn_weights: GAT ``[2*H*C + De]`` = ``att_src | att_dst | att_edge`` (each head-major);
            GATv2 ``[H*C]``.
        edge_attr: ``[E, De]`` (GAT, ``De % H == 0``) or ``[E, H*C]`` (GATv2), COO order, or None; GATv2 with
            ``lin_edge_weight``: raw ``[E, De]``.
        dropout_mask: ``[E, H]`` multiplicative factors in COO order, or None.
        lin_edge_weight: GATv2 ``[H*C, De]`` (PyG's ``lin_edge.weight``) or None: the edge term is then
            ``edge_attr @ lin_edge_weight^T``, projected here in the computation dtype before the math below.

    Returns:
        ``(out, alpha)``: ``out`` ``[Nd, H*C]`` (concat) or ``[Nd, C]`` (mean over heads) in the input dtype,
        ``alpha`` ``[E, H]`` float32 post-softmax, post-dropout coefficients in COO order.
    """
    out_dtype = x_src.dtype
    cdt = torch.float64 if out_dtype == torch.float64 else torch.float32
    h = heads
    d = x_src.shape[1]
    c = d // h
    n_dst, n_edges = graph.num_dst_nodes, graph.num_edges
    src = graph.indices.long()
    dst = graph.dst_index.long()
    eid = graph.edge_ids.long()
    xs = x_src.to(cdt).view(-1, h, c)
    xd = x_dst.to(cdt).view(-1, h, c)
    w = attn_weights.to(cdt)
    if edge_attr is not None and lin_edge_weight is not None:
        edge_attr = torch.nn.functional.linear(edge_attr.to(cdt), lin_edge_weight.to(cdt))
    e_csc = None if edge_attr is None else edge_attr.to(cdt).index_select(0, eid).view(n_edges, h, edge_attr.shape[1] // h)
    if not v2:
        a_src, a_dst, a_edge = w[:d].view(h, c), w[d : 2 * d].view(h, c), w[2 * d :].view(h, (w.shape[0] - 2 * d) // h)
        logits = (xs * a_src).sum(-1).index_select(0, src) + (xd * a_dst).sum(-1).index_select(0, dst)
        if e_csc is not None:
            logits = logits + (e_csc * a_edge).sum(-1)
        logits = activation(logits, activation_name, activation_alpha)
    else:
        z = xs.index_select(0, src) + xd.index_select(0, dst)
        if e_csc is not None:
            z = z + e_csc
        logits = (activation(z, activation_name, activation_alpha) * w.view(h, c)).sum(-1)
    alpha = segment_softmax(logits, dst, n_dst)
    if dropout_mask is not None:
        alpha = alpha * dropout_mask.to(cdt).index_select(0, eid)
    msg = alpha.unsqueeze(-1) * xs.index_select(0, src)
    out = msg.new_zeros(n_dst, h, c).index_add(0, dst, msg)
    out = out.reshape(n_dst, d) if concat else out.mean(dim=1)
    alpha_coo = alpha.new_zeros(n_edges, h).index_copy(0, eid, alpha)
    att_dtype = torch.float64 if cdt == torch.float64 else torch.float32
    return out.to(out_dtype), alpha_coo.to(att_dtype)


class ReferenceBackend:
    """:func:`mha_gat` behind the backend interface (:class:`cudnn_gnn.backends.GatBackend`)."""

    name = "reference"
    splits_hubs = False  # its time follows the edge count, not the largest degree

    def unavailable(self, device: torch.device) -> tuple[str, str] | None:
        return None

    def unsupported(self, spec: AttentionSpec) -> str | None:
        return None

    def kernel_graph(self, spec: AttentionSpec, graph: CscGraph) -> CscGraph:
        return graph

    def failed_to_launch_before(self, spec: AttentionSpec, graph: CscGraph) -> bool:
        return False

    def run(self, spec: AttentionSpec, graph: CscGraph) -> tuple[Tensor, Tensor | None]:
        out, att = mha_gat(graph, spec.x_src, spec.x_dst, spec.attn_weights, spec.edge_attr, spec.dropout_mask,
                           v2=spec.v2, heads=spec.heads, concat=spec.concat, activation_name=spec.activation,
                           activation_alpha=spec.activation_alpha, lin_edge_weight=spec.lin_edge_weight)
        return out, att if spec.return_attention else None


BACKEND = ReferenceBackend()
