"""Shared front half of :func:`cudnn_gnn.gat` and :func:`cudnn_gnn.gatv2`: host-side validation, the
int32 guard, dropout-mask drawing, backend choice, and the COO-order layout of everything users see.

Nothing here reads tensor values: no ``.item()``, ``.any()`` or host sync on the forward path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cudnn_gnn._validation import (
    check_bool,
    check_choice,
    check_device,
    check_float,
    check_int,
    check_probability,
    check_shape,
)
from cudnn_gnn.backends import reference, resolve_backend
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops._hub_split import HubSplit, gather, hub_split, merge_rows

__all__ = ["attention", "make_dropout_mask", "kernel_index_dtype", "GRAD_PRECISIONS"]

GRAD_PRECISIONS = ("auto", "fp32", "input")

# The cuDNN GNN kernels compute some element offsets in 32-bit arithmetic when the graph indices are int32.
# Measured on an H200 (cuDNN 9.28.1, benchmarks/probe_int32_boundary.py, bf16, D=256, int32 against int64):
# * N*D = 2**31 + 2**16: GAT runs without an error and returns wrong numbers (output off by 87% of its scale);
#   N*D = 2**31 - 2**16 and 1.5 * 2**30 match int64 exactly.
# * E*D = 2**31 + 2**20: GATv2 and the deterministic GAT backward crash with an illegal memory access (which
#   kills the CUDA context); the non-deterministic GAT still matches int64 exactly up to E*D = 2**32 + 2**20.
# We promote to int64 one power of two below each boundary.
NODE_ELEMS_LIMIT = 2**30
EDGE_ELEMS_LIMIT = 2**30

# Automatic hub splitting (``max_degree="auto"``, GAT and GATv2 on cuDNN only): the kernels' time grows with the largest
# degree, not the edge count. H200, Linear + GAT fp32 at the ogbn-arxiv size (benchmarks/diag_degree_skew.py):
# uniform edges (max degree 33) 4.1 / 11.6 ms forward / forward+backward; power-law edges (max degree 12,214, 880x
# the mean) 12.5 / 137 ms plain, 6.4 / 16.8 ms split at B = 256 (16 gave 8.7 / 20.4, 1024 gave 6.7 / 18.6).
# The merge costs work per edge of a split destination, so the split pays off only where the degrees are skewed:
# on the ogbn-proteins shape (mean degree 597, largest 5,515: 9x the mean) the forward took 259 ms split against
# 134 ms plain; on the products shape (largest ~124x the mean at 1/4 scale) forward+backward went from 1,519 to
# 875 ms. A graph is split when a node has more than AUTO_SPLIT_TRIGGER edges in (out) and more than
# AUTO_SPLIT_SKEW times the mean in (out) degree, into rows of at most AUTO_SPLIT_DEGREE edges.
AUTO_SPLIT_TRIGGER = 1024
AUTO_SPLIT_SKEW = 32
AUTO_SPLIT_DEGREE = 256
AUTO_SPLIT_DETERMINISTIC = True  # deterministic calls split too, merged by sorted segment sums (no atomics)
AUTO_SPLIT_GATV2 = True  # arxiv shape, GATv2 fp32 fwd+bwd: 19.0 ms split, PyG 50.5 ms; plain 156 ms (earlier run)


def kernel_index_dtype(graph: CscGraph, dim_node: int, dim_edge: int) -> torch.dtype:
    """The index dtype the kernels must see for this graph and feature width (int64 past the int32 limits)."""
    if graph.index_dtype == torch.int64:
        return torch.int64
    nodes = max(graph.num_src_nodes, graph.num_dst_nodes)
    width = max(dim_node, dim_edge)
    if nodes * width >= NODE_ELEMS_LIMIT or graph.num_edges * width >= EDGE_ELEMS_LIMIT:
        return torch.int64
    return torch.int32


ALPHA_DEFAULTS = {"leaky_relu": 0.2, "scalar": 1.0}  # activations that take a parameter, and its default


def auto_max_degree(graph: CscGraph, which: str, v2: bool, deterministic: bool) -> int | None:
    """The ``max_degree`` that ``max_degree="auto"`` uses for this call: ``AUTO_SPLIT_DEGREE`` for a GAT or GATv2
    on cuDNN whose graph has a hub (a node with more than ``AUTO_SPLIT_TRIGGER`` edges in or out, and more than
    ``AUTO_SPLIT_SKEW`` times the mean degree on that side), else ``None`` (the plain call).

    A deterministic call splits too; its merge sums sorted segments instead of using atomics, so it stays bitwise
    repeatable. Never splits on the reference backend (its time does not depend on the degree),
    under ``torch.compile`` (the rewrite has data-dependent sizes), or a graph marked as rebuilt every call (no
    degree sync there). The degree check syncs once per graph.
    """
    if (v2 and not AUTO_SPLIT_GATV2) or (deterministic and not AUTO_SPLIT_DETERMINISTIC):
        return None
    if which != "cudnn" or torch.compiler.is_compiling():
        return None
    degrees = graph.max_degrees()
    if degrees is None:
        return None
    e = graph.num_edges
    for largest, count in zip(degrees, (graph.num_dst_nodes, graph.num_src_nodes)):
        if largest > AUTO_SPLIT_TRIGGER and largest * count > AUTO_SPLIT_SKEW * e:
            return AUTO_SPLIT_DEGREE
    return None


def resolve_activation_alpha(activation: str, alpha: float | None) -> float:
    """The parameter the kernels get for ``activation``: the default for ``None``; only leaky_relu (slope) and
    scalar (factor) take one. cuDNN's ELU is ``exp(x) - 1`` for ``x < 0`` (alpha fixed at 1), so
    ``activation_alpha`` other than 1 with ``"elu"`` is refused rather than silently ignored."""
    if alpha is None:
        return ALPHA_DEFAULTS.get(activation, 1.0 if activation == "elu" else 0.0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"activation_alpha must be a float or None, got {type(alpha).__name__}")
    if activation == "elu" and float(alpha) != 1.0:
        raise ValueError(f"activation_alpha must be None or 1.0 for activation='elu' (cuDNN's ELU is exp(x) - 1 for "
                         f"x < 0, with alpha fixed at 1), got {alpha}")
    if activation not in ALPHA_DEFAULTS and activation != "elu":
        raise ValueError(f"activation_alpha must be None for activation={activation!r}, which takes no parameter, "
                         f"got {alpha}")
    return float(alpha)


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
    are ``0`` with probability ``p`` and ``1 / (1 - p)`` otherwise. It is stored head-major (a transposed
    view of an ``[heads, num_edges]`` buffer), which is the layout the cuDNN kernels read, so passing it as
    ``dropout_mask`` costs no copy. Uses torch's RNG: ``torch.manual_seed`` (or ``generator``) makes it
    reproducible.
    """
    check_int("num_edges", num_edges)
    check_int("heads", heads, minimum=1)
    p = check_probability("p", p)
    keep = torch.rand(heads, num_edges, device=device, generator=generator) >= p
    return (keep.to(torch.float32) * (1.0 / (1.0 - p))).t()


def _split_features(graph: CscGraph, x: object) -> tuple[Tensor, Tensor]:
    if isinstance(x, Tensor):
        x_src = check_float("x", x)
        check_shape("x", x_src, (graph.num_src_nodes, None), f"(num_src_nodes={graph.num_src_nodes}, dim)")
        if graph.num_dst_nodes > graph.num_src_nodes:
            raise ValueError(
                f"x must be a (x_src, x_dst) tuple for a graph with more destinations ({graph.num_dst_nodes}) "
                f"than sources ({graph.num_src_nodes}), got one tensor"
            )
        return x_src, x_src[: graph.num_dst_nodes]
    if isinstance(x, (tuple, list)) and len(x) == 2:
        x_src = check_float("x[0]", x[0])
        x_dst = check_float("x[1]", x[1])
        check_shape("x[0]", x_src, (graph.num_src_nodes, None), f"(num_src_nodes={graph.num_src_nodes}, dim)")
        check_shape("x[1]", x_dst, (graph.num_dst_nodes, x_src.shape[1]),
                    f"(num_dst_nodes={graph.num_dst_nodes}, {x_src.shape[1]})")
        if x_dst.dtype != x_src.dtype:
            raise TypeError(f"x[1] must have the dtype of x[0] ({x_src.dtype}), got {x_dst.dtype}")
        return x_src, x_dst
    raise TypeError(f"x must be a Tensor or a (x_src, x_dst) tuple of Tensors, got {type(x).__name__}")


def attention(
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
    max_degree: int | str | None = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    name = "gatv2" if v2 else "gat"
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
    de = 0
    if edge_attr is not None:
        check_float("edge_attr", edge_attr)
        if v2:
            check_shape("edge_attr", edge_attr, (e, d), f"(num_edges={e}, {d})")
        else:
            check_shape("edge_attr", edge_attr, (e, None), f"(num_edges={e}, dim_edge)")
            if edge_attr.shape[1] == 0 or edge_attr.shape[1] % heads != 0:
                raise ValueError(f"edge_attr must have a width divisible by heads={heads}, got {edge_attr.shape[1]}")
        check_device("edge_attr", edge_attr, graph.device)
        de = edge_attr.shape[1]
    check_float("attn_weights", attn_weights)
    n_w = d if v2 else 2 * d + de
    layout = "(dim,)" if v2 else "(2 * dim + dim_edge,) = att_src | att_dst | att_edge"
    check_shape("attn_weights", attn_weights, (n_w,), f"{layout} = ({n_w},)")
    check_device("attn_weights", attn_weights, graph.device)
    check_bool("concat", concat)
    check_choice("activation", activation, reference.ACTIVATIONS)
    activation_alpha = resolve_activation_alpha(activation, activation_alpha)
    p = check_probability("dropout", dropout)
    check_bool("training", training)
    check_bool("return_attention", return_attention)
    check_bool("deterministic", deterministic)
    check_choice("grad_precision", grad_precision, GRAD_PRECISIONS)
    if dropout_mask is not None:
        if p > 0.0 and training:
            raise ValueError(f"dropout must be 0 when dropout_mask is given, got dropout={p}")
        check_float("dropout_mask", dropout_mask)
        check_shape("dropout_mask", dropout_mask, (e, heads), f"(num_edges={e}, heads={heads})")
        check_device("dropout_mask", dropout_mask, graph.device)
        if dropout_mask.requires_grad:
            raise ValueError("dropout_mask must not require grad, got a tensor with requires_grad=True")
    elif p > 0.0 and training:
        dropout_mask = make_dropout_mask(e, heads, p, device=graph.device)

    if isinstance(max_degree, str) and max_degree != "auto":
        raise ValueError(f"max_degree must be 'auto', None or a positive int, got {max_degree!r}")
    if max_degree is not None and max_degree != "auto":
        max_degree = check_int("max_degree", max_degree, minimum=1)

    which = resolve_backend(backend, graph.device)
    dtype = x_src.dtype
    if which == "cudnn" and dtype == torch.float64:
        if backend == "cudnn":
            raise NotImplementedError(f"{name}: backend='cudnn' supports float32, float16 and bfloat16, got float64")
        which = "reference"
    if which == "cudnn" and e == 0:
        which = "reference"  # cuDNN refuses a non-empty destination set with no edges; the answer is zeros

    bound = auto_max_degree(graph, which, v2, deterministic) if max_degree == "auto" else max_degree
    if isinstance(bound, int):
        split = hub_split(graph, bound)
        if split is not None:
            return _split_call(v2, split, x_src, x_dst, attn_weights, heads, edge_attr, concat, activation,
                               activation_alpha, training, dropout_mask, return_attention, deterministic,
                               grad_precision, which)

    if which == "reference":
        out, att = reference.mha_gat(
            graph, x_src, x_dst, attn_weights, edge_attr, dropout_mask, v2=v2, heads=heads, concat=concat,
            activation_name=activation, activation_alpha=float(activation_alpha),
        )
        return (out, att) if return_attention else out

    from cudnn_gnn.backends import _cudnn

    g = graph.to_index_dtype(kernel_index_dtype(graph, d, de))
    if deterministic:
        g.with_reverse_csc()
    grad_fp32 = grad_precision == "fp32" or (grad_precision == "auto" and dtype in (torch.float16, torch.bfloat16))
    # The CSC->COO map only orders edge tensors (edge features, dropout mask, returned attention). Without any,
    # the kernels do not need it, and it is not free: GAT fp32 forward+backward on an arxiv-size power-law graph
    # (max degree 12k) took 217 ms through this op with the map and 136 ms in the frontend's call without it; on
    # a uniform graph 14.6 vs 11.0 ms (H200, benchmarks/diag_degree_skew.py; our other glue is < 1% there).
    # The deterministic backward keeps it (its reverse map is in COO ids).
    needs_map = edge_attr is not None or dropout_mask is not None or return_attention or deterministic
    call = _cudnn.GatCall(
        g.offsets, g.indices, g.map_csc_to_coo if needs_map else None,
        g.csc_rev_offsets if deterministic else None, g.map_rev_to_coo if deterministic else None,
        g.num_src_nodes, x_src, x_dst,
        None if edge_attr is None else edge_attr.to(dtype),
        attn_weights.to(dtype),
        None if dropout_mask is None else dropout_mask.t().to(torch.float32).contiguous(),
        v2, heads, concat, activation, float(activation_alpha), deterministic, grad_fp32,
    )
    out, att = _cudnn.mha_gat(call, return_attention)
    # [H, E] -> PyG's [E, H], contiguous like PyG's (a view would surprise .view() callers)
    return (out, att.t().contiguous()) if return_attention else out


def _split_call(v2: bool, split: HubSplit, x_src: Tensor, x_dst: Tensor, attn_weights: Tensor, heads: int,
                edge_attr: Tensor | None, concat: bool, activation: str, activation_alpha: float, training: bool,
                dropout_mask: Tensor | None, return_attention: bool, deterministic: bool, grad_precision: str,
                backend: str) -> Tensor | tuple[Tensor, Tensor]:
    """GAT / GATv2 on the degree-bounded rewrite (``_hub_split``): per-row kernels, then the exact merge."""
    # copies only where a side was split (a graph with source hubs only keeps x_dst as it is, and vice versa)
    same_src, same_dst = split.src_of_vsrc.numel() == x_src.shape[0], split.dst_of_row.numel() == x_dst.shape[0]
    xs = x_src if same_src else gather(split, "src_of_vsrc", x_src, split.src_of_vsrc, deterministic)
    xd = x_dst if same_dst else gather(split, "dst_of_row", x_dst, split.dst_of_row, deterministic)
    rows = attention(
        v2=v2, graph=split.graph, x=(xs, xd),
        attn_weights=attn_weights, heads=heads, edge_attr=edge_attr, concat=True, activation=activation,
        activation_alpha=activation_alpha if activation in ALPHA_DEFAULTS else None, dropout=0.0, training=training,
        dropout_mask=dropout_mask,
        return_attention=return_attention, deterministic=deterministic, grad_precision=grad_precision,
        backend=backend, max_degree=None,
    )
    row_out, row_att = rows if isinstance(rows, tuple) else (rows, None)
    out, att = merge_rows(split, x_src, x_dst, attn_weights, edge_attr, heads, activation, activation_alpha,
                          row_out, row_att, v2=v2, deterministic=deterministic)
    out = (out.reshape(out.shape[0], -1) if concat else out.mean(1)).to(x_src.dtype)
    if return_attention:
        if att is None:  # unreachable: the row call was asked for attention
            raise RuntimeError("the row call returned no attention")
        return out, att
    return out
