"""GAT attention (Velickovic et al., ICLR 2018) on a CSC graph."""

from __future__ import annotations

from torch import Tensor

from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops.plan import plan_call
from cudnn_gnn.ops.run import run
from cudnn_gnn.spec import attention_spec

__all__ = ["gat"]


def gat(
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
    dropout_seed: int | Tensor | None = None,
    return_attention: bool = False,
    deterministic: bool = False,
    grad_precision: str = "auto",
    backend: str = "auto",
    max_degree: int | str | None = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Multi-head GAT attention over each destination's incoming edges.

    For destination :math:`i`, head :math:`h` and incoming edge :math:`e = (j \to i)`:

    .. math::
        s_e^h = \sigma\big(a_{src}^h \cdot x_j^h + a_{dst}^h \cdot x_i^h + a_{edge}^h \cdot f_e^h\big),\quad
        \alpha_e^h = \operatorname{softmax}_{e \in \mathcal{N}(i)}(s_e^h)\, m_e^h,\quad
        out_i^h = \sum_{e=(j\to i)} \alpha_e^h x_j^h

    with :math:`\sigma` the ``activation``, :math:`m` the dropout factors, heads concatenated (``concat``) or
    averaged. Inputs are *projected* features (apply the linear layer first, as PyG's ``GATConv`` does).
    Destinations without incoming edges get zeros.

    Args:
        graph: a :class:`~cudnn_gnn.CscGraph` on the device of ``x``.
        x: ``[num_src_nodes, H*C]`` features (sources and, for the first ``num_dst_nodes`` rows, destinations),
            or a tuple ``(x_src [num_src_nodes, H*C], x_dst [num_dst_nodes, H*C])`` for bipartite graphs.
            float32, float16, bfloat16 (float64 on the reference backend).
        attn_weights: ``[2*H*C + De]``: ``att_src [H, C]``, ``att_dst [H, C]`` and ``att_edge [H, De/H]``,
            flattened and concatenated; cast to ``x``'s dtype.
        heads: number of heads ``H``; ``H*C`` and ``De`` must be divisible by it.
        edge_attr: ``[E, De]`` edge features in the caller's COO edge order; edge ``e``'s features are split
            across heads as ``[H, De/H]``.
        concat: ``[Nd, H*C]`` output if True, else the mean over heads ``[Nd, C]``.
        activation: logit activation: ``"leaky_relu"`` (default), ``"linear"``, ``"relu"``, ``"sigmoid"``,
            ``"tanh"``, ``"elu"`` or ``"scalar"`` (multiply by ``activation_alpha``).
        activation_alpha: the leaky_relu slope (default 0.2) or the scalar factor (default 1.0); ``None``
            gives the default. The other activations take none (cuDNN's ELU is ``exp(x) - 1`` below 0, alpha 1).
        dropout: attention dropout probability in ``[0, 1]``, applied when ``training`` (inverted dropout: kept
            coefficients scaled by ``1 / (1 - p)``). Counter-based: each (edge, head) is kept or dropped by a
            Philox draw keyed by a seed and its CSC position (:func:`~cudnn_gnn.attention_dropout_mask` gives the
            factors), drawn inside the Triton kernels and again in their backward, so no ``[E, H]`` mask is made
            or kept; the reference and cuDNN backends materialise the same mask. The seed comes from torch's
            generator (one int64 on the device: ``torch.manual_seed`` makes it reproducible; inside a captured
            CUDA graph each replay draws a new one), or from ``dropout_seed``.
        training: whether ``dropout`` applies.
        dropout_mask: explicit ``[E, H]`` float factors (COO order), e.g. from
            :func:`~cudnn_gnn.make_dropout_mask`; exclusive with ``dropout > 0`` in training and with
            ``dropout_seed`` (the Triton kernels read it once per call in CSC order). Any per-edge factor
            on the messages is one on the coefficients, so this is also how an explainer's edge mask enters. A
            mask that requires grad runs on the reference backend (``"auto"``), which differentiates through it.
        dropout_seed: the seed of ``dropout``'s mask: an int in ``[0, 2**62)`` (copied to the device per call) or
            an int64 tensor ``[1]`` on the graph's device (capturable); None draws one. The same seed gives the same
            mask on every backend.
        return_attention: also return ``alpha [E, H]`` float32 (post-softmax, post-dropout, COO order);
            differentiable.
        deterministic: bitwise-repeatable backward on cuDNN (builds and caches the graph's reverse CSC once,
            and uses an ``[E, H*C]`` workspace). The reference backend is deterministic on CPU.
        grad_precision: ``"auto"`` (default: float32 gradient arithmetic for float16/bfloat16 inputs, which
            avoids cuDNN's slow half-precision atomic backward), ``"fp32"`` or ``"input"`` (gradients
            computed in the input dtype). Returned gradients always have the inputs' dtypes.
        backend: ``"auto"``, ``"cudnn"``, ``"triton"`` or ``"reference"``; ``"auto"`` takes the first GPU backend
            that runs here and supports the call (:func:`cudnn_gnn.ops.plan.choose_backend`; `python -m cudnn_gnn
            info` says which and why), the reference on CPU.
        max_degree: hub splitting for the cuDNN kernels, whose time grows with the graph's largest degree.
            An int ``B`` runs the kernels on a rewrite of the graph with at most ``B`` edges per destination and
            per source (hubs split into virtual nodes; built once per graph and cached on it) and merges the
            rows of each split destination exactly with per-row log-normalisers (:mod:`cudnn_gnn.ops._hub_split`);
            same results as the plain call up to float rounding. ``"auto"`` (default) splits at ``B = 256`` when
            a node has more than 1,024 edges in (out) and more than 32x the mean in (out) degree, on the cuDNN
            backend and outside ``torch.compile`` (one host sync per new graph to read its degrees). ``None``
            never splits. With ``deterministic=True`` the merge sums sorted segments instead of using atomics,
            so the split call stays bitwise repeatable. What it saves: docs/performance.md, "hubs".

    Returns:
        ``out`` or ``(out, alpha)``.

    Raises:
        TypeError / ValueError: a bad argument, named in the message, before any kernel runs.
        RuntimeError: an explicit ``backend`` that cannot run here (the message says why and how to fix it).
        NotImplementedError: an explicit ``backend`` that cannot compute this call (float64 on cuDNN).
        NotImplementedError: from the backward, a second-order gradient (``create_graph=True``, e.g. a gradient
            penalty) through the Triton or cuDNN kernels, whose backward is not differentiable; the reference backend
            is differentiable twice.

    Cost: the first cuDNN call per op x dtype x direction in a process compiles its kernel at run time (tens of
    seconds; :func:`cudnn_gnn.precompile` builds them in parallel up front); int32 graphs whose sizes overflow
    the kernels' 32-bit offsets are promoted to int64 once and cached on the graph, as is the hub split.
    The call path: :func:`cudnn_gnn.spec.attention_spec` -> :func:`cudnn_gnn.ops.plan.plan_call` ->
    :func:`cudnn_gnn.ops.run.run` (docs/design.md).

    Example:
        >>> import torch, cudnn_gnn
        >>> g = cudnn_gnn.CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
        >>> cudnn_gnn.gat(g, torch.randn(3, 8), torch.randn(16), heads=2).shape
        torch.Size([3, 8])
    """
    spec = attention_spec(
        v2=False, graph=graph, x=x, attn_weights=attn_weights, heads=heads, edge_attr=edge_attr, concat=concat,
        activation=activation, activation_alpha=activation_alpha, dropout=dropout, training=training,
        dropout_mask=dropout_mask, dropout_seed=dropout_seed, return_attention=return_attention,
        deterministic=deterministic,
        grad_precision=grad_precision, backend=backend, max_degree=max_degree,
    )
    return run(plan_call(spec))
