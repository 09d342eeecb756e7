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

import torch
from torch import Tensor

from cudnn_gnn._segment import ACTIVATIONS, activation, segment_softmax
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.spec import AttentionSpec, gat_attention_parts

__all__ = ["ACTIVATIONS", "mha_gat", "BACKEND"]


def mha_gat(spec: AttentionSpec, graph: CscGraph | None = None) -> tuple[Tensor, Tensor]:
    """GAT / GATv2 attention on a CSC graph, for the call ``spec`` (its tensors, shapes and knobs as
    :class:`~cudnn_gnn.spec.AttentionSpec` documents them; ``spec.return_attention`` is not read: ``alpha`` always
    comes back).

    Args:
        spec: the call: ``x_src [Ns, H*C]``, ``x_dst [Nd, H*C]``; ``attn_weights`` GAT ``[2*H*C + De]`` (the layout of
            :func:`~cudnn_gnn.spec.gat_attention_vector`), GATv2 ``[H*C]``; ``edge_attr`` ``[E, De]`` (GAT) or
            ``[E, H*C]`` (GATv2) in COO order, or None; GATv2 with ``lin_edge_weight [H*C, De]``: raw ``[E, De]``,
            projected here in the computation dtype; the dropout factors ``[E, H]``
            (:meth:`~cudnn_gnn.spec.AttentionSpec.dropout_factors`: the explicit mask or the seed's), or none.
        graph: the graph to run on (any index dtype, same device as the features): ``spec.graph`` where None (the
            planner's kernel graph otherwise: the same edges, possibly in another index dtype).

    Returns:
        ``(out, alpha)``: ``out`` ``[Nd, H*C]`` (concat) or ``[Nd, C]`` (mean over heads) in the input dtype,
        ``alpha`` ``[E, H]`` float32 post-softmax, post-dropout coefficients in COO order.
    """
    graph = spec.graph if graph is None else graph
    x_src, x_dst, attn_weights, edge_attr, h = spec.x_src, spec.x_dst, spec.attn_weights, spec.edge_attr, spec.heads
    lin_edge_weight, dropout_mask, v2 = spec.lin_edge_weight, spec.dropout_factors(), spec.v2
    out_dtype = x_src.dtype
    cdt = torch.float64 if out_dtype == torch.float64 else torch.float32
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
        att_node, att_edge = gat_attention_parts(w, d)
        a_src, a_dst = att_node.view(2, h, c)
        logits = (xs * a_src).sum(-1).index_select(0, src) + (xd * a_dst).sum(-1).index_select(0, dst)
        if e_csc is not None and att_edge is not None:
            logits = logits + (e_csc * att_edge.view(h, -1)).sum(-1)
        logits = activation(logits, spec.activation, spec.activation_alpha)
    else:
        z = xs.index_select(0, src) + xd.index_select(0, dst)
        if e_csc is not None:
            z = z + e_csc
        logits = (activation(z, spec.activation, spec.activation_alpha) * w.view(h, c)).sum(-1)
    alpha = segment_softmax(logits, dst, n_dst)
    if dropout_mask is not None:
        alpha = alpha * dropout_mask.to(cdt).index_select(0, eid)
    msg = alpha.unsqueeze(-1) * xs.index_select(0, src)
    out = msg.new_zeros(n_dst, h, c).index_add(0, dst, msg)
    out = out.reshape(n_dst, d) if spec.concat else out.mean(dim=1)
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
        out, att = mha_gat(spec, graph)
        return out, att if spec.return_attention else None


BACKEND = ReferenceBackend()
