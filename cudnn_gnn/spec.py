"""What one GAT / GATv2 call asks for: :class:`AttentionSpec`, built and validated once by :func:`attention_spec`.

The first of the call path's three steps (``spec -> plan -> run``, drawn in ``docs/design.md``). Everything a user
passes to :func:`cudnn_gnn.gat` / :func:`cudnn_gnn.gatv2` is checked here on the host, before any kernel can see
it, with one error grammar ("`<arg>` must `<constraint>`, got `<actual>`"), and frozen into one object that the
planner, the hub split and every backend read. Nothing here reads tensor values (no host sync).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._names import GAT_BACKENDS
from cudnn_gnn._philox import SEED_BOUND, draw_seed, draws, keep_scale, keep_threshold
from cudnn_gnn._segment import ACTIVATIONS
from cudnn_gnn._validation import (
    check_bool,
    check_choice,
    check_device,
    check_float,
    check_int,
    check_probability,
    check_shape,
    check_tensor,
)
from cudnn_gnn.graph import CscGraph

__all__ = ["AttentionSpec", "attention_dropout_mask", "attention_spec", "check_dropout_seed", "make_dropout_mask",
           "project_edges", "gat_attention_vector",
           "gat_attention_parts", "GRAD_PRECISIONS", "ALPHA_DEFAULTS"]

GRAD_PRECISIONS = ("auto", "fp32", "input")
ALPHA_DEFAULTS = {"leaky_relu": 0.2, "scalar": 1.0}  # activations that take a parameter, and its default


def project_edges(edge_attr: Tensor, lin_edge_weight: Tensor) -> Tensor:
    """GATv2's projected edge features ``edge_attr [E, De] @ lin_edge_weight^T [De, H*C]`` -> ``[E, H*C]``
    (torch's linear, differentiable), both operands in their promoted dtype: the one projection rule of every backend
    that does not fuse it."""
    dtype = torch.promote_types(edge_attr.dtype, lin_edge_weight.dtype)
    return torch.nn.functional.linear(edge_attr.to(dtype), lin_edge_weight.to(dtype))


def gat_attention_vector(att_src: Tensor, att_dst: Tensor, att_edge: Tensor | None = None) -> Tensor:
    """GAT's attention vector ``attn_weights [2*D + De] = att_src [D] | att_dst [D] | att_edge [De]`` (each head-major,
    ``[H, C]`` flattened; ``De = 0`` without edge features): the one layout every backend reads (split again by
    :func:`gat_attention_parts`). One tensor, so that a call carries one attention parameter of one dtype."""
    parts = [att_src.reshape(-1), att_dst.reshape(-1)]
    if att_edge is not None:
        parts.append(att_edge.reshape(-1))
    return torch.cat(parts)


def gat_attention_parts(attn_weights: Tensor, dim: int) -> tuple[Tensor, Tensor | None]:
    """``(att_node [2*D] = att_src | att_dst, att_edge [De] or None)`` of GAT's :func:`gat_attention_vector`
    ``attn_weights [2*D + De]``, ``dim = D = H*C``. Without an edge part (``De = 0``) ``att_node`` is ``attn_weights``
    itself, not a view: a view of a tensor that requires grad costs an autograd node (and host time) on every call."""
    if attn_weights.shape[0] == 2 * dim:
        return attn_weights, None
    return attn_weights[:2 * dim], attn_weights[2 * dim:]


@dataclass(frozen=True, eq=False)
class AttentionSpec:
    """One validated GAT / GATv2 call. Shapes: ``Ns``/``Nd`` source/destination nodes, ``E`` edges,
    ``D = H*C`` features.

    Attributes:
        v2: GATv2 (``a . act(x_j + x_i + f_e)``) instead of GAT (``act(a_s . x_j + a_d . x_i + a_e . f_e)``).
        graph: the caller's graph (the planner may run a promoted or hub-split version of it).
        x_src: ``[Ns, D]``; x_dst: ``[Nd, D]`` (the first ``Nd`` rows of ``x_src`` for one-tensor input), one
            floating dtype.
        attn_weights: GAT ``[2*D + De]`` (``att_src | att_dst | att_edge``), GATv2 ``[D]``; not yet cast.
        heads: ``H``.
        edge_attr: GAT ``[E, De]``, GATv2 ``[E, D]`` (projected) or, with ``lin_edge_weight``, ``[E, De]`` (raw),
            COO order, or None.
        lin_edge_weight: GATv2 only, ``[D, De]`` (PyG's ``lin_edge.weight``), or None: the edge term is then
            ``edge_attr @ lin_edge_weight^T`` (:meth:`projected_edge_attr`), which a backend may compute fused.
        concat: ``[Nd, D]`` output, else the mean over heads ``[Nd, C]``.
        activation / activation_alpha: the logit activation and its resolved parameter (a float for every one).
        dropout_mask: the caller's explicit ``[E, H]`` factors in COO order, or None. It may require grad (an
            explainer's edge mask): only the reference backend differentiates through it, so the planner runs such
            calls there (:attr:`mask_requires_grad`).
        dropout: the attention dropout probability in force (the caller's ``dropout`` in training, else 0).
        dropout_seed: with ``dropout > 0``, the int64 ``[1]`` seed on the graph's device of the counter-based
            dropout (:func:`attention_dropout_mask` gives its factors; the Triton kernels draw them in-kernel),
            the caller's or drawn from torch's generator; else None.
        return_attention, deterministic: as the caller gave them.
        grad_precision: ``"auto" | "fp32" | "input"``.
        backend: the *requested* backend name (``GAT_BACKENDS``); the planner resolves it.
        max_degree: the requested hub bound: ``"auto"``, None or an int >= 1.
    """

    v2: bool
    graph: CscGraph
    x_src: Tensor
    x_dst: Tensor
    attn_weights: Tensor
    heads: int
    edge_attr: Tensor | None
    lin_edge_weight: Tensor | None
    concat: bool
    activation: str
    activation_alpha: float
    dropout_mask: Tensor | None
    dropout: float
    dropout_seed: Tensor | None
    return_attention: bool
    deterministic: bool
    grad_precision: str
    backend: str
    max_degree: int | str | None

    @property
    def name(self) -> str:
        return "gatv2" if self.v2 else "gat"

    @property
    def dim(self) -> int:
        """``D = H*C``."""
        return self.x_src.shape[1]

    @property
    def dim_edge(self) -> int:
        """The width of the edge features the attention adds (0 without edge features): GAT's ``De``, GATv2's
        ``D`` (with ``lin_edge_weight`` too: the width of the projection)."""
        if self.edge_attr is None:
            return 0
        return self.edge_attr.shape[1] if self.lin_edge_weight is None else self.lin_edge_weight.shape[0]

    def projected_edge_attr(self) -> Tensor | None:
        """``edge_attr``, or ``edge_attr @ lin_edge_weight^T`` (``[E, D]``, differentiable, in the operands' promoted
        dtype) for the backends that take projected GATv2 edge features."""
        if self.edge_attr is None or self.lin_edge_weight is None:
            return self.edge_attr
        return project_edges(self.edge_attr, self.lin_edge_weight)

    @property
    def dtype(self) -> torch.dtype:
        return self.x_src.dtype

    @property
    def has_dropout(self) -> bool:
        """Whether dropout factors apply: an explicit mask, or counter-based dropout in force."""
        return self.dropout_mask is not None or self.dropout_seed is not None

    def dropout_factors(self) -> Tensor | None:
        """The ``[E, H]`` float32 dropout factors in COO order, for the backends that read a mask: the explicit
        ``dropout_mask``, or the counter-based mask of ``dropout_seed`` (:func:`attention_dropout_mask`, the
        factors the Triton kernels draw in-kernel), or None without dropout."""
        if self.dropout_mask is not None:
            return self.dropout_mask
        if self.dropout_seed is None:
            return None
        return attention_dropout_mask(self.graph, self.heads, self.dropout, self.dropout_seed)

    @property
    def mask_requires_grad(self) -> bool:
        """Whether the dropout mask takes part in autograd (e.g. GNNExplainer's edge mask): reference backend only."""
        return self.dropout_mask is not None and self.dropout_mask.requires_grad

    @property
    def grad_fp32(self) -> bool:
        """Whether gradients are computed in float32 (``"auto"``: for half-precision inputs)."""
        half = self.dtype in (torch.float16, torch.bfloat16)
        return self.grad_precision == "fp32" or (self.grad_precision == "auto" and half)

    def on(self, graph: CscGraph, x_src: Tensor, x_dst: Tensor, **changes: Any) -> AttentionSpec:
        """The same call on another graph with its features (the hub split's bounded graph); no re-validation:
        the planner guarantees the new graph's sizes match."""
        return replace(self, graph=graph, x_src=x_src, x_dst=x_dst, **changes)


def make_dropout_mask(
    num_edges: int,
    heads: int,
    p: float,
    *,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw inverted-dropout factors for attention coefficients.

    Returns an ``[num_edges, heads]`` float32 tensor (COO edge order, PyG's attention layout) whose entries
    are ``0`` with probability ``p`` and ``1 / (1 - p)`` otherwise (all ``0`` for ``p = 1``, as in torch). It is
    stored head-major (a transposed view of an ``[heads, num_edges]`` buffer), which is the layout the cuDNN
    kernels read, so passing it as ``dropout_mask`` costs no copy. Uses torch's RNG: ``torch.manual_seed`` (or
    ``generator``) makes it reproducible.
    """
    check_int("num_edges", num_edges)
    check_int("heads", heads, minimum=1)
    p = check_probability("p", p, allow_one=True)
    keep = torch.rand(heads, num_edges, device=device, generator=generator) >= p
    return (keep.to(torch.float32) * (0.0 if p == 1.0 else 1.0 / (1.0 - p))).t()


def attention_dropout_mask(graph: CscGraph, heads: int, p: float, seed: int | Tensor) -> Tensor:
    """The attention dropout factors that a call with ``dropout=p`` and ``dropout_seed=seed`` applies, on every
    backend: ``[E, H]`` float32 in COO order, ``1 / (1 - p)`` where (edge, head) is kept (to within ``2**-31``:
    :func:`~cudnn_gnn._philox.keep_scale`) and ``0`` where dropped.

    Counter-based: the draw of the edge at CSC position ``e`` and head ``h`` is output ``h % 4`` of Philox-4x32-10 of
    counters ``(e, e >> 32, h // 4)`` under key ``seed`` (:mod:`cudnn_gnn._philox`), the function the Triton kernels
    evaluate in-kernel (the forward; its backward reads the keep flags the forward wrote), so this materialises
    exactly their mask: for the reference and cuDNN backends, ``return_attention`` checks and explainers. ``seed``:
    an int in ``[0, 2**62)`` or an int64 tensor ``[1]`` on the graph's device.
    """
    if not isinstance(graph, CscGraph):
        raise TypeError(f"graph must be a cudnn_gnn.CscGraph, got {type(graph).__name__}")
    heads = check_int("heads", heads, minimum=1)
    p = check_probability("p", p, allow_one=True)
    seed = check_dropout_seed(seed, graph.device)
    threshold = keep_threshold(p)
    keep = (draws(seed, graph.num_edges, heads, graph.device) >> 1) >= threshold
    factors = torch.where(keep, keep_scale(threshold), 0.0).to(torch.float32)
    if graph.map_csc_to_coo is None:
        return factors
    return torch.empty_like(factors).index_copy_(0, graph.map_csc_to_coo.long(), factors)


def check_dropout_seed(seed: object, device: torch.device) -> Tensor:
    """``seed`` as the int64 ``[1]`` tensor on ``device`` the kernels read: an int in ``[0, 2**62)`` (copied to the
    device: not for a captured step, which takes a device tensor), or such a tensor as it is."""
    if isinstance(seed, Tensor):
        if seed.dtype != torch.int64:
            raise TypeError(f"dropout_seed must be an int or an int64 tensor, got a {seed.dtype} tensor")
        if seed.numel() != 1:
            raise ValueError(f"dropout_seed must hold one element, got shape {tuple(seed.shape)}")
        check_device("dropout_seed", seed, device)
        return seed.reshape(1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"dropout_seed must be an int or an int64 tensor, got {type(seed).__name__}")
    if not 0 <= seed < SEED_BOUND:
        raise ValueError(f"dropout_seed must be in [0, 2**62), got {seed}")
    return torch.tensor([seed], dtype=torch.int64, device=device)


def resolve_activation_alpha(activation: str, alpha: float | None) -> float:
    """The parameter the kernels get for ``activation``: the default for ``None``; only leaky_relu (slope) and
    scalar (factor) take one. ELU is ``exp(x) - 1`` for ``x < 0`` (alpha fixed at 1, as in cuDNN), so
    ``activation_alpha`` other than 1 with ``"elu"`` is refused rather than silently ignored."""
    if alpha is None:
        return ALPHA_DEFAULTS.get(activation, 1.0 if activation == "elu" else 0.0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"activation_alpha must be a float or None, got {type(alpha).__name__}")
    if activation == "elu" and float(alpha) != 1.0:
        raise ValueError(f"activation_alpha must be None or 1.0 for activation='elu' (ELU here is exp(x) - 1 for "
                         f"x < 0, with alpha fixed at 1), got {alpha}")
    if activation not in ALPHA_DEFAULTS and activation != "elu":
        raise ValueError(f"activation_alpha must be None for activation={activation!r}, which takes no parameter, "
                         f"got {alpha}")
    return float(alpha)


def _split_features(graph: CscGraph, x: object) -> tuple[Tensor, Tensor]:
    if isinstance(x, Tensor):
        x_src = check_float("x", x)
        check_shape("x", x_src, (graph.num_src_nodes, None), lambda: f"(num_src_nodes={graph.num_src_nodes}, dim)")
        if graph.num_dst_nodes > graph.num_src_nodes:
            raise ValueError(
                f"x must be a (x_src, x_dst) tuple for a graph with more destinations ({graph.num_dst_nodes}) "
                f"than sources ({graph.num_src_nodes}), got one tensor"
            )
        # the same tensor where every node is a destination (backends read one tensor once, e.g. Triton's scores)
        return x_src, x_src if graph.num_dst_nodes == graph.num_src_nodes else x_src[: graph.num_dst_nodes]
    if isinstance(x, (tuple, list)) and len(x) == 2:
        x_src = check_float("x[0]", x[0])
        x_dst = check_float("x[1]", x[1])
        check_shape("x[0]", x_src, (graph.num_src_nodes, None), lambda: f"(num_src_nodes={graph.num_src_nodes}, dim)")
        check_shape("x[1]", x_dst, (graph.num_dst_nodes, x_src.shape[1]),
                    lambda: f"(num_dst_nodes={graph.num_dst_nodes}, {x_src.shape[1]})")
        if x_dst.dtype != x_src.dtype:
            raise TypeError(f"x[1] must have the dtype of x[0] ({x_src.dtype}), got {x_dst.dtype}")
        return x_src, x_dst
    raise TypeError(f"x must be a Tensor or a (x_src, x_dst) tuple of Tensors, got {type(x).__name__}")


def _check_edge_attr(v2: bool, edge_attr: Tensor, e: int, d: int, heads: int, device: torch.device,
                     lin_edge_weight: Tensor | None) -> None:
    check_float("edge_attr", edge_attr)
    if lin_edge_weight is not None:
        check_float("lin_edge_weight", lin_edge_weight)
        check_shape("lin_edge_weight", lin_edge_weight, (d, None), lambda: f"(dim={d}, dim_edge)")
        de = lin_edge_weight.shape[1]
        if de == 0:
            raise ValueError(f"lin_edge_weight must have at least one column (dim_edge >= 1), got shape "
                             f"{tuple(lin_edge_weight.shape)}")
        check_shape("edge_attr", edge_attr, (e, de), lambda: f"(num_edges={e}, dim_edge={de}) to match lin_edge_weight")
        check_device("lin_edge_weight", lin_edge_weight, device)
    elif v2:
        check_shape("edge_attr", edge_attr, (e, d), lambda: f"(num_edges={e}, {d})")
    else:
        check_shape("edge_attr", edge_attr, (e, None), lambda: f"(num_edges={e}, dim_edge)")
        if edge_attr.shape[1] == 0 or edge_attr.shape[1] % heads != 0:
            raise ValueError(f"edge_attr must have a width divisible by heads={heads}, got {edge_attr.shape[1]}")
    check_device("edge_attr", edge_attr, device)


# backends that differentiate through a dropout mask that requires grad ("auto" routes such calls to them)
MASK_GRAD_BACKENDS = ("auto", "reference")


def _check_dropout_mask(mask: Tensor, e: int, heads: int, device: torch.device, backend: str) -> None:
    check_float("dropout_mask", mask)
    check_shape("dropout_mask", mask, (e, heads), lambda: f"(num_edges={e}, heads={heads})")
    check_device("dropout_mask", mask, device)
    if mask.requires_grad and backend not in MASK_GRAD_BACKENDS:
        raise NotImplementedError(
            f"dropout_mask must not require grad with backend={backend!r}, which cannot differentiate through it "
            "(only the reference backend can: pass backend='reference' or 'auto', or detach the mask), "
            "got a tensor with requires_grad=True"
        )


def _check_max_degree(max_degree: object) -> int | str | None:
    if max_degree is None or max_degree == "auto":
        return max_degree
    if isinstance(max_degree, str):
        raise ValueError(f"max_degree must be 'auto', None or a positive int, got {max_degree!r}")
    return check_int("max_degree", max_degree, minimum=1)


def attention_spec(
    *,
    v2: bool,
    graph: CscGraph,
    x: Tensor | tuple[Tensor, Tensor],
    attn_weights: Tensor,
    heads: int,
    edge_attr: Tensor | None,
    concat: bool,
    activation: str,
    activation_alpha: float | None,
    dropout: float,
    training: bool,
    dropout_mask: Tensor | None,
    return_attention: bool,
    deterministic: bool,
    grad_precision: str,
    backend: str,
    max_degree: int | str | None,
    lin_edge_weight: Tensor | None = None,
    dropout_seed: int | Tensor | None = None,
) -> AttentionSpec:
    """Validate one call's arguments (the public ops' keywords) and freeze them; for ``dropout > 0`` in training
    draws the dropout seed (one int64 on the device) where the caller gave none, never an ``[E, H]`` mask. Raises
    TypeError / ValueError naming the argument, before any kernel runs."""
    if not isinstance(graph, CscGraph):
        raise TypeError(f"graph must be a cudnn_gnn.CscGraph, got {type(graph).__name__}")
    x_src, x_dst = _split_features(graph, x)
    check_device("x", x_src, graph.device)
    check_device("x", x_dst, graph.device)
    heads = check_int("heads", heads, minimum=1)
    d = x_src.shape[1]
    if d == 0 or d % heads != 0:
        raise ValueError(f"x must have a feature dimension divisible by heads={heads}, got {d}")
    e = graph.num_edges
    if lin_edge_weight is not None:
        check_tensor("lin_edge_weight", lin_edge_weight)
        if not v2:
            raise ValueError("lin_edge_weight must be None for GAT (its edge features are passed as they are), "
                             "got a Tensor")
        if edge_attr is None:
            raise ValueError("lin_edge_weight must be None when edge_attr is None (it projects edge_attr), "
                             "got a Tensor")
    if edge_attr is not None:
        _check_edge_attr(v2, edge_attr, e, d, heads, graph.device, lin_edge_weight)
    de = 0 if edge_attr is None else edge_attr.shape[1]
    check_float("attn_weights", attn_weights)
    n_w = d if v2 else 2 * d + de
    layout = "(dim,)" if v2 else "(2 * dim + dim_edge,) = att_src | att_dst | att_edge"
    check_shape("attn_weights", attn_weights, (n_w,), lambda: f"{layout} = ({n_w},)")
    check_device("attn_weights", attn_weights, graph.device)
    check_bool("concat", concat)
    check_choice("activation", activation, ACTIVATIONS)
    alpha = resolve_activation_alpha(activation, activation_alpha)
    p = check_probability("dropout", dropout, allow_one=True)
    check_bool("training", training)
    check_bool("return_attention", return_attention)
    check_bool("deterministic", deterministic)
    check_choice("grad_precision", grad_precision, GRAD_PRECISIONS)
    check_choice("backend", backend, GAT_BACKENDS)
    seed: Tensor | None = None
    if dropout_mask is not None:
        if p > 0.0 and training:
            raise ValueError(f"dropout must be 0 when dropout_mask is given, got dropout={p}")
        if dropout_seed is not None:
            raise ValueError("dropout_seed must be None when dropout_mask is given (the mask is the dropout), "
                             f"got {dropout_seed!r}")
        _check_dropout_mask(dropout_mask, e, heads, graph.device, backend)
    elif p > 0.0 and training:
        seed = draw_seed(graph.device) if dropout_seed is None else check_dropout_seed(dropout_seed, graph.device)
    elif dropout_seed is not None:
        check_dropout_seed(dropout_seed, graph.device)  # checked, unused: no dropout in force
    return AttentionSpec(
        v2=v2, graph=graph, x_src=x_src, x_dst=x_dst, attn_weights=attn_weights, heads=heads, edge_attr=edge_attr,
        lin_edge_weight=lin_edge_weight, concat=concat, activation=activation, activation_alpha=alpha, dropout_mask=dropout_mask,
        dropout=p if seed is not None else 0.0, dropout_seed=seed,
        return_attention=return_attention, deterministic=deterministic, grad_precision=grad_precision,
        backend=backend, max_degree=_check_max_degree(max_degree),
    )
