"""GATv2 attention (Brody et al., ICLR 2022) on a CSC graph."""

from __future__ import annotations

from torch import Tensor

from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops.plan import plan_call
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
    lin_edge_weight: Tensor | None = None,
    concat: bool = True,
    activation: str = "leaky_relu",
    activation_alpha: float | None = None,
    dropout: float = 0.0,
    training: bool = False,
    dropout_mask: Tensor | None = None,
    dropout_seed: int | Tensor | None = None,
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
        graph, x, heads, concat, activation, activation_alpha, dropout, training, dropout_mask, dropout_seed,
        return_attention, deterministic, grad_precision, backend: as in :func:`cudnn_gnn.gat`.
        attn_weights: ``[H*C]``, the flattened ``att [H, C]``.
        edge_attr: edge features in COO order: ``[E, H*C]`` projected (PyG's ``lin_edge(edge_attr)``), or with
            ``lin_edge_weight`` the raw ``[E, De]`` ones (PyG's ``edge_attr``, self-loop features included), any
            floating dtype.
        lin_edge_weight: ``[H*C, De]``, PyG's ``lin_edge.weight`` (no bias), any floating dtype, or None. With it
            ``f_e = edge_attr_e @ lin_edge_weight^T``: exactly the projected call on ``edge_attr @
            lin_edge_weight.T``, differentiable in both. The Triton backend projects inside its kernels (no
            ``[E, H*C]`` tensor forward or backward; the backward returns both gradients, the weight's as a
            fixed-order sum of per-program partials) where ``cudnn_gnn.backends.triton.tuning.fuse_edge_projection`` allows:
            ``De <= 16``, all heads in one ``[next_pow2(De), W]`` tile of at most 4096 with ``W = next_pow2(H) *
            next_pow2(C) <= 1024``, and with gradients the partials at most a quarter of the ``[E, H*C]`` buffer they
            replace; else, and on the reference and cuDNN backends, torch projects first (``[E, H*C]`` as in the
            projected call).
        max_degree: as in :func:`cudnn_gnn.gat` (default ``"auto"``: hubs of skewed graphs split on cuDNN). The
            exact merge needs the logits of the split destinations' edges, computed in ``[block, H, C]`` pieces
            that the backward recomputes.

    Shapes: ``out`` ``[Nd, H*C]`` or ``[Nd, C]``; ``alpha`` ``[E, H]`` float32, COO order.

    Cost: the cuDNN backward keeps an ``[E, H*C]`` activation buffer from the forward (PyG keeps three). Projected
    edge features are an ``[E, H*C]`` input and, in the backward, an ``[E, H*C]`` gradient; the fused projection
    (Triton) replaces both by ``De`` extra multiply-adds per edge and channel in each pass, one more backward pass
    over the edges (``[P, H*C, De]`` float32 partials, ``P <= 2048``), and the ``[E, De]`` gradient of
    ``edge_attr`` where it requires grad.

    Example:
        >>> import torch, cudnn_gnn
        >>> g = cudnn_gnn.CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
        >>> cudnn_gnn.gatv2(g, torch.randn(3, 8), torch.randn(8), heads=2, concat=False).shape
        torch.Size([3, 4])
    """
    spec = attention_spec(
        v2=True, graph=graph, x=x, attn_weights=attn_weights, heads=heads, edge_attr=edge_attr,
        lin_edge_weight=lin_edge_weight, concat=concat,
        activation=activation, activation_alpha=activation_alpha, dropout=dropout, training=training,
        dropout_mask=dropout_mask, dropout_seed=dropout_seed, return_attention=return_attention,
        deterministic=deterministic,
        grad_precision=grad_precision, backend=backend, max_degree=max_degree,
    )
    return run(plan_call(spec))
