"""GATv2 attention (Brody et al., ICLR 2022) on a CSC graph."""

from __future__ import annotations

from torch import Tensor

from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops.plan import plan
from cudnn_gnn.ops.run import run
from cudnn_gnn.spec import attention_spec

__all__ = ["gatv2"]


def gatv2(
    graph: CscGraph,
    x: Tensor | tuple[Tensor, Tensor],
    attn_weights: Tensor,
    *,
    heads: int = 1,
    edge_attr: Tensor | None = None,
    concat: bool = True,
    activation: str = "leaky_relu",
    activation_alpha: float | None = None,
    dropout: float = 0.0,
    training: bool = False,
    dropout_mask: Tensor | None = None,
    return_attention: bool = False,
    deterministic: bool = False,
    grad_precision: str = "auto",
    backend: str = "auto",
    max_degree: int | str | None = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Multi-head GATv2 ("dynamic") attention over each destination's incoming edges.

    .. math::
        s_e^h = a^h \cdot \sigma\big(x_j^h + x_i^h + f_e^h\big),\quad
        \alpha_e^h = \operatorname{softmax}_{e \in \mathcal{N}(i)}(s_e^h)\, m_e^h,\quad
        out_i^h = \sum_{e=(j\to i)} \alpha_e^h x_j^h

    ``x_src`` plays PyG's ``lin_l(x)`` (messages and the source term), ``x_dst`` its ``lin_r(x)``.

    Args:
        graph, x, heads, concat, activation, activation_alpha, dropout, training, dropout_mask,
        return_attention, deterministic, grad_precision, backend: as in :func:`cudnn_gnn.gat`.
        attn_weights: ``[H*C]``, the flattened ``att [H, C]``.
        edge_attr: ``[E, H*C]`` projected edge features in COO order (PyG's ``lin_edge(edge_attr)``).
        max_degree: as in :func:`cudnn_gnn.gat` (default ``"auto"``: hubs of skewed graphs split on cuDNN). The
            exact merge needs the logits of the split destinations' edges, computed in ``[block, H, C]`` pieces
            that the backward recomputes.

    Shapes: ``out`` ``[Nd, H*C]`` or ``[Nd, C]``; ``alpha`` ``[E, H]`` float32, COO order.

    Cost: the cuDNN backward keeps an ``[E, H*C]`` activation buffer from the forward (PyG keeps three).

    Example:
        >>> import torch, cudnn_gnn
        >>> g = cudnn_gnn.CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
        >>> cudnn_gnn.gatv2(g, torch.randn(3, 8), torch.randn(8), heads=2, concat=False).shape
        torch.Size([3, 4])
    """
    spec = attention_spec(
        v2=True, graph=graph, x=x, attn_weights=attn_weights, heads=heads, edge_attr=edge_attr, concat=concat,
        activation=activation, activation_alpha=activation_alpha, dropout=dropout, training=training,
        dropout_mask=dropout_mask, return_attention=return_attention, deterministic=deterministic,
        grad_precision=grad_precision, backend=backend, max_degree=max_degree,
    )
    return run(plan(spec))
