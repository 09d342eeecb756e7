"""Triton backend: our own fused GAT / GATv2 kernels (forward and an atomic-free backward).

Two ops in our ``torch.library`` namespace, ``cudnn_gnn::triton_gat_fwd`` and ``cudnn_gnn::triton_gat_bwd``,
serve GAT and GATv2 (flag ``v2``), with shape-only fakes and an explicit autograd formula, so
``torch.compile(fullgraph=True)`` traces through them and ``torch.library.opcheck`` covers them. Eager calls run
the same two implementations through a plain autograd Function (:class:`_EagerAttention`), which skips the
dispatcher and the ``register_autograd`` wrapper: on small graphs that host time is the step's. The kernels live
in :mod:`cudnn_gnn.backends.triton.kernels`, imported on first use: they run on CUDA tensors, and on any device
under Triton's interpreter (``TRITON_INTERPRET=1``, which is how the CPU test suite runs them).

GAT's logit is a sum of per-node and per-edge scores, ``act(a_src . x_j + a_dst . x_i + a_edge . f_e)``, so the
op computes the node scores once per node ``[N, H]`` in float32 (one small kernel launch in its forward, kept for
the backward) and gathers only one source row per edge; its backward folds the node scores' gradients into those
of ``x_src``, ``x_dst`` and ``attn_weights`` itself (:func:`_fold_node_scores`), so a GAT call is one autograd
node. The edge scores ``[E, H]`` come in computed by torch (``edge_attr`` is the caller's, of any width), and their
gradient goes out. GAT's backward gathers one feature row per edge too
(:func:`_gat_backward`: ``dout_i`` in the source pass, which also forms ``<dout_i, x_j>``; the softmax row sums come
from the saved output, FlashAttention's ``rowsum(dO * O)``). GATv2's logit needs the whole feature rows, so its op
takes them directly and recomputes ``act(x_j + x_i + f_e)`` in the backward instead of saving it; its backward
gathers rows in a destination and a source pass.

Everything here trusts its caller: :mod:`cudnn_gnn.ops` validates shapes, dtypes and devices first. The argument
list is written once, in :class:`TritonCall`; the op schemas are derived from it, with its tensors packed into one
``Tensor[] tensors`` list (see :func:`pack`): torch's ``register_autograd`` wrapper costs time quadratic in the
schema's argument count on every forward.
"""


from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._bias import column_sum
from cudnn_gnn.backends._autograd import refuse_create_graph
from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton._runtime import check_runnable, kernels
from cudnn_gnn.backends.triton.call import (
    _CALL_SCHEMA,
    _INPUT_FIELDS,
    _INPUT_NAMES,
    _N_PACKED,
    _TENSOR_FIELDS,
    DEFAULT_OPTIONS,
    TritonCall,
    TritonGraph,
    TritonOptions,
    build_call,
    kernel_graph,
    pack,
    unpack,
)
from cudnn_gnn.spec import AttentionSpec

__all__ = ["gat_one_gather", "triton_gat"]


_lib = torch.library.Library("cudnn_gnn", "FRAGMENT")
_lib.define(f"triton_gat_fwd({_CALL_SCHEMA}, bool return_attention) -> (Tensor, Tensor, Tensor, Tensor)")
_lib.define(f"triton_gat_bwd(Tensor grad_out, Tensor? grad_attention, Tensor lse, Tensor? out, Tensor scores, "
            f"{_CALL_SCHEMA}) -> ({', '.join(['Tensor'] * len(_INPUT_NAMES))})")


def _sizes(c: TritonCall) -> tuple[int, int, int, int]:
    """``(Nd, E, H, C)``."""
    return c.offsets.shape[0] - 1, c.indices.shape[0], c.heads, c.x_src.shape[1] // c.heads


def _out_spec(c: TritonCall) -> tuple[tuple[int, int], torch.dtype]:
    """The shape and dtype of the op's output: ``[Nd, H*C]`` in the input dtype with ``concat``; without it GATv2's
    mean over heads ``[Nd, C]`` (input dtype), but GAT's per-head output ``[Nd, H*C]`` in float32, whose mean
    :func:`triton_gat` takes: autograd can then keep it for the backward (:func:`_delta_source`) and the forward op
    keeps three outputs."""
    nd, _, h, ch = _sizes(c)
    if c.concat:
        return (nd, h * ch), c.x_src.dtype
    return ((nd, ch), c.x_src.dtype) if c.v2 else ((nd, h * ch), torch.float32)


def _scores_shape(c: TritonCall) -> tuple[int, ...]:
    """GAT's node scores, one float32 tensor ``[Ns + Nd, H]`` (``score_src`` rows, then ``score_dst`` rows); GATv2
    has none (``[0]``)."""
    nd, _, h, _ = _sizes(c)
    return (0,) if c.v2 else (c.x_src.shape[0] + nd, h)


def _split_scores(c: TritonCall, scores: Tensor) -> tuple[Tensor | None, Tensor | None]:
    """``(score_src [Ns, H], score_dst [Nd, H])``, contiguous views of :func:`_scores_shape`'s tensor, or Nones
    (GATv2)."""
    if c.v2:
        return None, None
    ns = c.x_src.shape[0]
    return scores[:ns], scores[ns:]


def _node_scores(c: TritonCall) -> Tensor:
    """GAT's node scores ``score_src[j, h] = a_src[h] . x_src[j, h]``, ``score_dst[i, h] = a_dst[h] . x_dst[i, h]``
    as :func:`_scores_shape` lays them out, in one launch of
    :func:`~cudnn_gnn.backends.triton.kernels.launch_node_scores` (each feature row read once in its own dtype,
    float32 sums; a homogeneous graph's rows once for both); an empty tensor for GATv2."""
    scores = torch.empty(_scores_shape(c), device=c.x_src.device, dtype=torch.float32)
    if not c.v2:
        assert c.attn_weights is not None  # build_call gives GAT its head vectors
        kernels().launch_node_scores(c.x_src, c.x_dst, c.attn_weights, c.heads,
                                      out=_split_scores(c, scores))
    return scores


def _fwd_impl(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The forward op's implementation: :func:`_forward` of the packed call (:func:`pack`) and ``return_attention``."""
    return _forward(unpack(*args[:_N_PACKED]), bool(args[_N_PACKED]))


def _forward(c: TritonCall, return_attention: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(out, lse, attention or empty, scores)``; ``out`` as :func:`_out_spec` says, ``scores`` as
    :func:`_scores_shape` (kept for the backward). The registered op (:func:`_fwd_impl`) and eager calls
    (:class:`_EagerAttention`, which has the call unpacked already) run this."""
    check_runnable(c.x_src.device)
    nd, e, h, ch = _sizes(c)
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    out = c.x_src.new_empty(nd, h * ch) if c.concat else torch.empty(nd, h * ch, **f32)
    lse = torch.empty(nd, h, **f32)
    att = torch.empty(e, h, **f32) if return_attention else None
    scores = _node_scores(c)
    score_src, score_dst = _split_scores(c, scores)
    kernels().launch_forward(
        c.offsets, c.indices, c.map_csc_to_coo, c.row_work, c.row_hub_work, c.row_hubs,
        c.x_src, c.x_dst if c.v2 else None, c.edge_attr, c.attn_weights if c.v2 else None,
        score_src, score_dst, c.score_edge, c.kernel_dropout, out, lse, att,
        v2=c.v2, heads=h, act=c.activation, alpha=c.activation_alpha, edge_weight=c.lin_edge_weight)
    if c.v2 and not c.concat:
        out = out.view(nd, h, ch).mean(1).to(c.x_src.dtype)
    return out, lse, att if att is not None else lse.new_empty(0), scores


def _fwd_fake(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    c = unpack(*args[:_N_PACKED])
    return_attention = bool(args[_N_PACKED])
    nd, e, h, ch = _sizes(c)
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    shape, dtype = _out_spec(c)
    out = torch.empty(shape, device=c.x_src.device, dtype=dtype)
    return (out, torch.empty(nd, h, **f32), torch.empty((e, h) if return_attention else (0,), **f32),
            torch.empty(_scores_shape(c), **f32))


def _like(t: Tensor | None, fallback: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """A fresh contiguous tensor shaped like ``t`` (its dtype unless given), or an empty stand-in for None."""
    if t is None:
        return fallback.new_empty(0)
    return torch.empty(t.shape, dtype=dtype or t.dtype, device=t.device)


def gat_one_gather(c: TritonCall) -> bool:
    """Whether GAT's backward for the call ``c`` gathers one feature row per edge (:func:`_gat_backward`) or two.

    ``c.gat_backward`` (from :class:`TritonOptions`) forces either; ``"auto"`` (the default) takes the rule: one
    gather on a static graph (one whose call carries ``rev_dst``, see :func:`build_call`) with a feature tile at
    most 256 wide (``HG * BLOCK_C``, see :func:`~cudnn_gnn.backends.triton.tuning.default_launch_shape`: 8 x 32, 8 x 8),
    where its source pass has launch shapes
    tuned on the H200 and measured faster than two gathers; two gathers on a graph rebuilt every call (sampled
    blocks, whose sources have one or two out-edges: measured slower there with one) and on wider tiles. The
    measurements: docs/performance.md, "GAT's backward with one row gather". GATv2: always two."""
    if c.v2:
        return False
    if c.gat_backward != "auto":
        return c.gat_backward == "one_gather"
    # the feature width is a layer's (static) width; int() keeps a symbolic one from reaching the cached rule
    _, _, hg, block_c, _ = tuning.default_launch_shape(c.heads, int(c.x_src.shape[1]) // max(c.heads, 1), False)
    return c.rev_dst is not None and hg * block_c <= 256


def _delta_source(c: TritonCall, out: Tensor) -> Tensor | None:
    """What the forward keeps for :func:`_gat_backward`'s softmax row sums ``delta_i = <dout_i, out_i>`` (plus the
    attention gradient's share), or None where the backward takes the two-gather path (GATv2, or where
    :func:`gat_one_gather` says so).

    The op's output ``out``, its per-head output either way (:func:`_out_spec`). With ``concat`` in the input dtype:
    FlashAttention's choice (``D = rowsum(dO * O)`` from the rounded ``O``); for 16-bit outputs its rounding (2**-8
    relative in bfloat16) stays within the bf16 tolerances of the tests against the reference. Without ``concat``
    in float32 (the mean is taken after the op), kept rather than recomputed: recomputing it would gather ``x_j``
    per edge again, the gather this backward removes.

    Memory: the output, ``[Nd, H*C]`` in the input dtype (concat), or ``[Nd, H*C]`` float32 (mean), stays alive from
    the forward to the backward: nothing more where the caller keeps the output anyway, else that much (a layer that
    adds a bias drops it otherwise). The backward in exchange allocates one ``[E, H]`` float32 buffer instead of two,
    plus ``delta [Nd, H]``. An in-place change of the output before the backward is refused by autograd's version
    check (as for torch's own attention kernels, which save their output too)."""
    return out if gat_one_gather(c) else None


def _bwd_impl(grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor, out: Tensor | None, scores: Tensor,
              *args: Any) -> tuple[Tensor, ...]:
    """The gradients of the op's inputs (:data:`_INPUT_NAMES` order; empty where an input has none). ``out``: what
    :func:`_delta_source` kept; given (GAT), :func:`_gat_backward`, else the two-gather backward below. ``scores``:
    what the forward computed (:func:`_node_scores`); GAT's node-score gradients are folded into the features' and
    the head vectors' by :func:`_fold_node_scores`."""
    c = unpack(*args)
    check_runnable(c.x_src.device)
    if (c.rev_offsets is None or c.rev_to_csc is None or c.dst_index is None or c.src_work is None
            or c.src_hub_work is None or c.src_hubs is None):
        raise RuntimeError("triton_gat_bwd needs the reverse CSC (rev_offsets, rev_to_csc, dst_index, src_work, "
                           "src_hub_work, src_hubs), "
                           "got None: the forward was called without them")
    score_src, score_dst = _split_scores(c, scores)
    if out is not None and not c.v2:
        assert score_src is not None and score_dst is not None
        d_x_src, d_score_src, d_score_dst, d_score_edge = _gat_backward(c, grad_out, grad_attention, lse, out,
                                                                         score_src, score_dst)
        return _gat_grads(c, d_x_src, d_score_src, d_score_dst, d_score_edge, True)
    empty = c.x_src.new_empty(0)
    nd, e, h, ch = _sizes(c)
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    if c.concat or not c.v2:  # GAT's output is per head either way (_out_spec)
        dout = grad_out.contiguous()
    else:  # the mean over heads: every head gets dout / H
        dout = (grad_out.float().unsqueeze(1) / h).expand(nd, h, ch).reshape(nd, h * ch)
    alpha_buf = torch.empty(e, h, **f32)
    ds_buf = torch.empty(e, h, **f32)
    d_x_src = _like(c.x_src, c.x_src)
    fused = c.lin_edge_weight is not None
    if c.v2:
        # one row per whole destination and one per hub chunk (zeros: hub rows' own rows and unused slots add 0)
        d_w_part = torch.zeros(nd + c.row_hub_work.shape[0], h * ch, **f32)
        d_x_dst, d_edge = _like(c.x_dst, c.x_src), _edge_grad(c, 1, c.edge_attr)
        d_score_src = d_score_dst = d_score_edge = empty
    else:
        d_x_dst, d_edge, d_w_part = empty, empty, None
        d_score_src = _like(score_src, c.x_src)
        d_score_dst = _like(score_dst, c.x_src)
        d_score_edge = _like(c.score_edge, c.x_src)
    k = kernels()
    k.launch_backward_dst(
        c.offsets, c.indices, c.map_csc_to_coo, c.row_work, c.row_hub_work, c.row_hubs,
        c.x_src, c.x_dst if c.v2 else None, c.edge_attr, c.attn_weights if c.v2 else None,
        score_src, score_dst, c.score_edge, c.kernel_dropout, lse, dout,
        None if grad_attention is None else grad_attention.float().contiguous(), alpha_buf, ds_buf,
        d_x_dst if c.v2 else None, d_edge if c.v2 and c.edge_attr is not None and not fused else None, d_w_part,
        None if c.v2 else d_score_dst, None if c.v2 or c.score_edge is None else d_score_edge,
        v2=c.v2, heads=h, act=c.activation, alpha=c.activation_alpha, edge_weight=c.lin_edge_weight)
    k.launch_backward_src(
        c.rev_to_csc, c.dst_index, c.rev_dst, c.map_csc_to_coo, c.src_work, c.src_hub_work, c.src_hubs, c.x_src,
        c.x_dst if c.v2 else None, c.edge_attr, c.attn_weights if c.v2 else None, dout, alpha_buf, ds_buf, d_x_src,
        None if c.v2 else d_score_src,
        v2=c.v2, heads=h, act=c.activation, alpha=c.activation_alpha, edge_weight=c.lin_edge_weight)
    if not c.v2:
        return _gat_grads(c, d_x_src, d_score_src, d_score_dst, d_score_edge, False)
    d_edge_weight = _fused_edge_backward(c, ds_buf, d_edge) if fused else empty
    if c.attn_weights is not None and d_w_part is not None:
        d_w = column_sum(d_w_part).to(c.attn_weights.dtype)  # per-row and per-chunk partials, in a fixed order
    else:
        d_w = empty
    return d_x_src, d_x_dst, d_edge, d_edge_weight, d_w, empty.new_empty(0)


def _gat_backward(c: TritonCall, grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor, out: Tensor,
                  score_src: Tensor, score_dst: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GAT's backward with one feature-row gather per edge (:func:`~cudnn_gnn.backends.triton.kernels.
    launch_gat_backward`): a delta pass over the destinations (``delta_i = <dout_i, out_i> + sum_e alpha_e
    datt_e`` per head: dense over the rows of ``dout`` and ``out``; per edge ``[E, H]`` data only with an attention
    gradient), the source pass (``x_j`` once per source, ``dout_i`` gathered per out-edge: ``dx_j``, ``<dout_i,
    x_j>``, the softmax and score gradients, ``dz [E, H]`` written per edge), and a destination sum over ``dz`` (a
    segmented sum in CSC order and a join of the rows that cross its blocks). A static graph without hubs launches
    four kernels; with source hubs, two merges more.
    Returns ``(d_x_src, d_score_src, d_score_dst, d_score_edge)``, the attention's share of ``d_x_src`` only (see
    :func:`_fold_node_scores`)."""
    # narrowing for mypy: the caller checked the reverse CSC
    assert c.rev_to_csc is not None and c.dst_index is not None and c.src_work is not None
    assert c.src_hub_work is not None and c.src_hubs is not None
    empty = c.x_src.new_empty(0)
    d_x_src = _like(c.x_src, empty)
    d_score_src, d_score_dst = _like(score_src, empty), _like(score_dst, empty)
    d_score_edge = _like(c.score_edge, empty)
    kernels().launch_gat_backward(
        c.offsets, c.indices, c.map_csc_to_coo, c.row_work, c.row_hub_work, c.row_hubs,
        c.rev_to_csc, c.dst_index, c.rev_dst, c.src_work, c.src_hub_work, c.src_hubs,
        c.x_src, score_src, score_dst, c.score_edge, c.kernel_dropout, lse, out, grad_out.contiguous(),
        None if grad_attention is None else grad_attention.float().contiguous(),
        d_x_src, d_score_src, d_score_dst, d_score_edge if c.score_edge is not None else None,
        heads=c.heads, act=c.activation, alpha=c.activation_alpha)
    return d_x_src, d_score_src, d_score_dst, d_score_edge


def _gat_grads(c: TritonCall, d_x_src: Tensor, d_score_src: Tensor, d_score_dst: Tensor,
               d_score_edge: Tensor, one_gather: bool) -> tuple[Tensor, ...]:
    """GAT's input gradients in :data:`_INPUT_NAMES` order, the node scores' folded in: by the score kernel
    (:func:`_fold_node_scores`) after the one-gather backward (``one_gather``; :func:`gat_one_gather`'s regime:
    static graphs, tiles at most 256 wide, where the kernel was measured faster), else by GEMMs
    (:func:`_fold_node_scores_gemm`, measured faster on sampled-shape bipartite blocks, 4 x 128;
    docs/performance.md, "The fold as a kernel"). ``attn_weights`` is ``att_src | att_dst`` (:func:`build_call`
    took ``att_edge`` into the edge scores, whose gradient is the op's ``score_edge`` output)."""
    assert c.attn_weights is not None  # build_call gives GAT its head vectors
    fold = _fold_node_scores if one_gather else _fold_node_scores_gemm
    d_x_src, d_x_dst, d_a = fold(c, d_x_src, d_score_src, d_score_dst)
    d_w = d_a.to(c.attn_weights.dtype)
    empty = c.x_src.new_empty(0)
    return d_x_src, d_x_dst, empty, empty.new_empty(0), d_w, d_score_edge


def _fold_node_scores(c: TritonCall, d_x_src: Tensor, d_score_src: Tensor,
                      d_score_dst: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(d_x_src, d_x_dst, d_a)`` of GAT's op from the kernels' ``d_x_src`` (the attention's share, a buffer of this
    call, updated in place) and the float32 node-score gradients ``[Ns, H]``, ``[Nd, H]``; ``d_a [2*H*C]`` float32,
    the gradient of ``att_src | att_dst``.

    ``score_s[n, h] = a_s[h] . x_s[n, h]``, so ``d x_s[n, h, :] += d score_s[n, h] a_s[h]`` and ``d a_s[h] = sum_n
    d score_s[n, h] x_s[n, h]``: one launch of :func:`~cudnn_gnn.backends.triton.kernels.
    launch_node_scores_backward`, which reads each feature row once, adds both terms to ``d_x_src`` where it lies on a
    homogeneous graph (``x_dst`` None: no second ``[N, H*C]`` gradient, no sum of two) or writes ``d_x_dst`` where
    ``x_dst`` is its own tensor, and returns the head vectors' gradient."""
    assert c.attn_weights is not None  # build_call gives GAT its head vectors
    d_x_dst = d_x_src.new_empty(0) if c.x_dst is None else _like(c.x_dst, d_x_src)
    d_a = kernels().launch_node_scores_backward(
        c.x_src, c.x_dst, c.attn_weights, c.heads, d_score_src, d_score_dst, d_x_src,
        None if c.x_dst is None else d_x_dst)
    return d_x_src, d_x_dst, d_a


def _fold_node_scores_gemm(c: TritonCall, d_x_src: Tensor, d_score_src: Tensor,
                           d_score_dst: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_fold_node_scores` as GEMMs with the block-diagonal ``m [H*C, 2H]`` (:func:`_pair_score_matrix`) in
    the features' dtype (the score gradients rounded to it first, float32 accumulation inside the GEMM): on a
    homogeneous graph one ``addmm_`` adds both terms to ``d_x_src`` where it lies, and the head vectors' gradient is
    the diagonal blocks of one ``x^T [d score_src | d score_dst]``; with its own ``x_dst``, ``d_x_dst = d score_dst
    a_dst`` is a GEMM of its own."""
    assert c.attn_weights is not None  # build_call gives GAT its head vectors
    h, d = c.heads, c.x_src.shape[1]
    dt = c.x_src.dtype
    m = _pair_score_matrix(c.attn_weights, h, d).to(dt)
    if c.x_dst is None:
        g = torch.cat([d_score_src, d_score_dst], 1).to(dt)
        d_x_src.addmm_(g, m.t())
        d_m = c.x_src.t() @ g
        d_x_dst = d_x_src.new_empty(0)
    else:
        gs, gd = d_score_src.to(dt), d_score_dst.to(c.x_dst.dtype)
        d_x_src.addmm_(gs, m[:, :h].t())
        d_x_dst = gd @ m[:, h:].to(c.x_dst.dtype).t()
        d_m = torch.cat([c.x_src.t() @ gs, c.x_dst.t() @ gd], 1)
    # d_a[s, h, c] = d_m[h*C + c, s*H + h]: the diagonal over (h, k) of d_m viewed as [H, C, 2, H]
    d_a = torch.diagonal(d_m.float().view(h, d // h, 2, h), dim1=0, dim2=3).permute(1, 2, 0).reshape(2 * d)
    return d_x_src, d_x_dst, d_a


def _pair_score_matrix(attn_weights: Tensor, heads: int, d: int) -> Tensor:
    """``m [H*C, 2H]`` float32, ``m[h*C + c, s*H + k] = a[s, h, c]`` if ``k == h`` else 0, for ``a = att_src |
    att_dst`` (``attn_weights``, as :func:`build_call` gives it to the op): both block-diagonal score matrices side
    by side, by one broadcast multiply (:func:`_fold_node_scores_gemm`' GEMMs)."""
    a = attn_weights.float().view(2, heads, d // heads)
    eye = torch.eye(heads, device=a.device, dtype=torch.float32)
    return (a.permute(1, 2, 0).unsqueeze(-1) * eye.view(heads, 1, 1, heads)).reshape(d, 2 * heads)


def _edge_grad(c: TritonCall, bit: int, t: Tensor | None) -> Tensor:
    """The buffer for the gradient of the edge input ``t``: shaped like it, except on the fused path where
    ``edge_grads`` does not ask for it (bit ``bit``: 1 ``edge_attr``, 2 ``lin_edge_weight``): empty."""
    if c.lin_edge_weight is not None and not c.edge_grads & bit:
        return c.x_src.new_empty(0)
    return _like(t, c.x_src)


def _fused_edge_backward(c: TritonCall, ds_buf: Tensor, d_edge: Tensor) -> Tensor:
    """The fused edge projection's gradients, after the destination pass left ``ds`` in ``ds_buf``: fills ``d_edge``
    (``edge_attr``'s, where asked) and returns ``lin_edge_weight``'s, summed over per-program partials
    ``[P, H*C, De]`` in a fixed order (or an empty tensor where not asked)."""
    if c.edge_attr is None or c.lin_edge_weight is None or c.dst_index is None or c.attn_weights is None:
        raise RuntimeError("the fused edge backward needs edge_attr, lin_edge_weight, attn_weights and dst_index, "
                           "got None")
    d_edge_weight = _edge_grad(c, 2, c.lin_edge_weight)
    span = tuning.edge_span(c.indices.shape[0])
    part = None
    if d_edge_weight.numel():
        part = torch.zeros(-(-c.indices.shape[0] // span), *c.lin_edge_weight.shape, device=c.x_src.device,
                           dtype=torch.float32)
    kernels().launch_backward_edge(
        c.indices, c.dst_index, c.map_csc_to_coo, c.x_src, c.x_src if c.x_dst is None else c.x_dst, c.edge_attr,
        c.lin_edge_weight, c.attn_weights, ds_buf, d_edge if d_edge.numel() else None, part, span,
        heads=c.heads, act=c.activation, alpha=c.activation_alpha)
    if part is not None:
        d_edge_weight.copy_(part.sum(0))  # per-program partials, reduced in a fixed order
    return d_edge_weight


def _bwd_fake(grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor, out: Tensor | None, scores: Tensor,
              *args: Any) -> tuple[Tensor, ...]:
    c = unpack(*args)
    empty = c.x_src.new_empty(0)
    if c.v2:
        return (_like(c.x_src, empty), _like(c.x_dst, empty), _edge_grad(c, 1, c.edge_attr),
                _edge_grad(c, 2, c.lin_edge_weight) if c.lin_edge_weight is not None else empty.new_empty(0),
                _like(c.attn_weights, empty), empty.new_empty(0))
    return (_like(c.x_src, empty), _like(c.x_dst, empty), empty.new_empty(0), empty.new_empty(0),
            _like(c.attn_weights, empty), _like(c.score_edge, empty))


for _key in ("CPU", "CUDA"):
    _lib.impl("triton_gat_fwd", _fwd_impl, _key)
    _lib.impl("triton_gat_bwd", _bwd_impl, _key)
torch.library.register_fake("cudnn_gnn::triton_gat_fwd", _fwd_fake, lib=_lib)
torch.library.register_fake("cudnn_gnn::triton_gat_bwd", _bwd_fake, lib=_lib)


def _grad_out_or_zeros(grad_out: Tensor | None, tensors: list[Tensor], packed: list[Any], lse: Tensor) -> Tensor:
    """The output's gradient, or zeros shaped as :func:`_out_spec` says where autograd gave none (only the returned
    attention was used)."""
    if grad_out is not None:
        return grad_out
    shape, dtype = _out_spec(unpack(tensors, *packed))
    return lse.new_zeros(shape, dtype=dtype)


def _setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    out, lse, att, scores = output
    tensors, *packed = inputs[:_N_PACKED]
    ctx.packed = packed  # present and the scalar fields; the tensors are saved below
    ctx.return_attention = bool(inputs[_N_PACKED])
    ctx.save_for_backward(*tensors, lse, _delta_source(unpack(tensors, *packed), out), scores)
    ctx.mark_non_differentiable(lse, scores)
    if not ctx.return_attention:
        ctx.mark_non_differentiable(att)


def _backward(ctx, grad_out, _grad_lse, grad_att, _grad_scores):  # type: ignore[no-untyped-def]
    """Gradients in the inputs' structure: for ``tensors`` a list with one entry per tensor (None for the graph's
    and the dropout mask's), None for each scalar."""
    refuse_create_graph("triton")
    *tensors, lse, delta_out, scores = ctx.saved_tensors
    grad_out = _grad_out_or_zeros(grad_out, tensors, ctx.packed, lse)
    if not ctx.return_attention:
        grad_att = None
    grads = torch.ops.cudnn_gnn.triton_gat_bwd(grad_out, grad_att, lse, delta_out, scores, tensors, *ctx.packed)
    by_field = dict(zip(_INPUT_FIELDS, grads))
    present = ctx.packed[0]
    tensor_grads = [by_field.get(i) for bit, i in enumerate(_TENSOR_FIELDS) if present >> bit & 1]
    return (tensor_grads, *([None] * _N_PACKED))


torch.library.register_autograd("cudnn_gnn::triton_gat_fwd", _backward, setup_context=_setup_context, lib=_lib)


class _EagerAttention(torch.autograd.Function):
    """The registered op's forward and backward (:func:`_forward`, :func:`_bwd_impl`, the same code) as a plain
    autograd Function, for eager calls: no dispatcher round trip and no ``register_autograd`` wrapper (its
    ``fill_defaults`` and pytree passes), which on small graphs cost more host time than the kernels take (see
    docs/performance.md). ``torch.compile`` traces the registered op instead (:func:`triton_gat` picks).

    ``apply(call, return_attention, *inputs)``, ``inputs`` the :data:`_INPUT_NAMES` fields of ``call`` (its own
    tensors again, passed one by one so that autograd tracks them). Returns
    ``(out, attention)`` (an empty, non-differentiable stand-in without ``return_attention``)."""

    @staticmethod
    def forward(ctx, call: TritonCall, return_attention: bool, *inputs: Tensor | None  # type: ignore[override]
                ) -> tuple[Tensor, Tensor]:
        out, lse, att, scores = _forward(call, return_attention)
        tensors, *packed = pack(call)  # what the backward gets back, as the registered op's autograd saves it
        ctx.packed, ctx.return_attention = packed, return_attention
        ctx.save_for_backward(*tensors, lse, _delta_source(call, out), scores)
        ctx.set_materialize_grads(False)
        if not return_attention:
            ctx.mark_non_differentiable(att)
        return out, att

    @staticmethod
    def backward(ctx, grad_out: Tensor | None, grad_att: Tensor | None  # type: ignore[override]
                 ) -> tuple[Tensor | None, ...]:
        refuse_create_graph("triton")
        *tensors, lse, delta_out, scores = ctx.saved_tensors
        grad_out = _grad_out_or_zeros(grad_out, tensors, ctx.packed, lse)
        grads = _bwd_impl(grad_out, grad_att if ctx.return_attention else None, lse, delta_out, scores, tensors,
                          *ctx.packed)
        needs = ctx.needs_input_grad[2:]
        return (None, None, *(g if need else None for g, need in zip(grads, needs, strict=True)))


def triton_gat(spec: AttentionSpec, graph: TritonGraph | None = None, *,
               options: TritonOptions = DEFAULT_OPTIONS) -> tuple[Tensor, Tensor | None]:
    """GAT / GATv2 attention on the Triton kernels for the call ``spec``; the contract of
    :func:`cudnn_gnn.backends.reference.mha_gat`.

    Args:
        spec: the validated call (:func:`cudnn_gnn.spec.attention_spec`; :class:`~cudnn_gnn.spec.AttentionSpec` has
            every tensor's shape): float32 / float16 / bfloat16 features; GAT's ``attn_weights [2*H*C + De]`` in the
            layout of :func:`~cudnn_gnn.spec.gat_attention_vector`; GATv2 with ``lin_edge_weight [H*C, De]``: the
            edge term ``edge_attr @ lin_edge_weight^T`` projected inside the kernels where
            :func:`~cudnn_gnn.backends.triton.tuning.fuse_edge_projection` allows (no ``[E, H*C]`` tensor, forward or
            backward), else by torch before them. ``spec.return_attention``: also return the ``[E, H]`` float32
            post-softmax, post-dropout coefficients (COO order); without it they are never materialised.
        graph: ``spec.graph`` as the kernels walk it (:func:`~cudnn_gnn.backends.triton.call.kernel_graph`,
            what the planner hands the backend); built from (or found on) ``spec.graph`` where None.
        options: the variants kept for measurement (:class:`TritonOptions`); the defaults everywhere else.

    Returns:
        ``(out, attention or None)``: ``out`` ``[Nd, H*C]`` (concat) or ``[Nd, C]`` in the input dtype.
        Everything is differentiable in ``x_src``, ``x_dst``, ``attn_weights``, ``edge_attr`` and ``lin_edge_weight``.

    Cost: one kernel launch forward (plus, for GAT, the ``[N, H]`` node scores; plus a merge launch where the work
    list may hold hub rows); backward, GAT three passes (a dense delta pass, the source pass, a segmented destination sum; only
    the source pass gathers feature rows), GATv2 two (plus, where the lists may hold hub rows or sources, a pass-1
    launch over the hub chunks), and small merge launches where they may hold hubs. GAT keeps its per-head output
    ``[Nd, H*C]`` (the input dtype with ``concat``, float32 without) from the forward to the backward (see
    :func:`_delta_source`); float32 accumulation; bitwise repeatable (no atomics, every merge in a fixed
    order). A static graph's work lists know its largest degrees and hold hub entries only where a row (source) has
    more than :func:`~cudnn_gnn.backends.triton.tuning.chunk_size` edges; a graph rebuilt every call (a sampled
    block), or one traced by ``torch.compile``, gets lists sized for the worst case. Per graph, built once and kept
    on it (:class:`~cudnn_gnn.backends.triton.call.TritonGraph`): the work lists (rows, and for the backward
    sources, cut into chunks, heaviest first), its largest degrees (one host sync, the first time), and for the
    backward the reverse CSC (one sort of the sources). No host sync per call after the first.

    Raises:
        NotImplementedError: float64 inputs (use the reference backend).
        RuntimeError: the kernels cannot run on this device (see :func:`unavailable_reason`).
    """
    x_src = spec.x_src
    if x_src.dtype == torch.float64:
        raise NotImplementedError("x_src must be float32, float16 or bfloat16 for the triton backend, got float64")
    if not torch.compiler.is_compiling():
        check_runnable(x_src.device)
    e, w = spec.edge_attr, spec.lin_edge_weight
    needs_grad = torch.is_grad_enabled() and (
        x_src.requires_grad or spec.x_dst.requires_grad or spec.attn_weights.requires_grad
        or (e is not None and e.requires_grad) or (w is not None and w.requires_grad))
    call = build_call(spec, kernel_graph(spec.graph) if graph is None else graph, needs_grad=needs_grad,
                      options=options)
    if torch.compiler.is_compiling():
        out, _, att, _ = torch.ops.cudnn_gnn.triton_gat_fwd(*pack(call), spec.return_attention)
    else:
        out, att = _EagerAttention.apply(call, spec.return_attention, *(call[i] for i in _INPUT_FIELDS))
    if not spec.v2 and not spec.concat:  # GAT's op returns the float32 per-head output (_out_spec)
        out = out.view(out.shape[0], spec.heads, x_src.shape[1] // spec.heads).mean(1).to(x_src.dtype)
    return out, (att if spec.return_attention else None)
