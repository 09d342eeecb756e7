"""GAT on the Triton kernels: the ops ``cudnn_gnn::triton_gat_fwd`` and ``cudnn_gnn::triton_gat_bwd`` (arguments: a
:class:`~cudnn_gnn.backends.triton.call.GatCall`'s fields, and for the backward a
:class:`~cudnn_gnn.backends.triton.call.SourceWalk`'s), their shape-only fakes, and :class:`GatAttention`, the one
autograd Function over them, which eager calls and ``torch.compile`` take alike.

GAT's logit is a sum of per-node and per-edge scores, ``act(a_src . x_j + a_dst . x_i + a_edge . f_e)``, so the
forward computes the node scores once per node ``[N, H]`` in float32 (one small kernel launch, kept for the
backward) and gathers only one source row per edge; the backward folds the node scores' gradients into those of
``x_src``, ``x_dst`` and ``att_node`` itself (:func:`_fold_node_scores`), so a GAT call is one autograd node. The
edge scores ``[E, H]`` come in computed by torch (``edge_attr`` is the caller's, of any width), and their gradient
goes out. The backward gathers one feature row per edge (:func:`_gat_backward`: ``dout_i`` in the source pass,
which also forms ``<dout_i, x_j>``; the softmax row sums from the saved output, FlashAttention's ``rowsum(dO * O)``)
where :func:`gat_one_gather` says so, else two, with GATv2's destination and source passes.

Everything here trusts its caller: :mod:`cudnn_gnn.ops` validates shapes, dtypes and devices first.
"""


from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from cudnn_gnn.backends._autograd import refuse_create_graph
from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton._op_common import (
    define,
    fields_of,
    keep,
    keep_flags,
    kept,
    like,
    returned,
    run,
    saved_call,
    sizes,
    statistics,
    writes_keep_flags,
)
from cudnn_gnn.backends.triton._runtime import check_runnable, kernels
from cudnn_gnn.backends.triton.call import GatCall, SourceWalk

if TYPE_CHECKING:  # the kernel package is imported at first use (Triton reads TRITON_INTERPRET when it decorates)
    from cudnn_gnn.backends.triton.kernels.gat_backward import DstScoreGrad

__all__ = ["GatAttention", "gat_one_gather"]


def out_spec(c: GatCall) -> tuple[tuple[int, int], torch.dtype]:
    """The shape and dtype of the forward op's output: per head ``[Nd, H*C]``, in the input dtype with ``concat``,
    else in float32, whose mean :func:`~cudnn_gnn.backends.triton.op.triton_gat` takes: autograd can then keep it for
    the backward (:class:`GatAttention`)."""
    nd, _, h, ch = sizes(c)
    return (nd, h * ch), (c.x_src.dtype if c.concat else torch.float32)


def _scores_shape(c: GatCall) -> tuple[int, int]:
    """The node scores, one float32 tensor ``[Ns + Nd, H]`` (``score_src`` rows, then ``score_dst`` rows)."""
    nd = c.offsets.shape[0] - 1
    return c.x_src.shape[0] + nd, c.heads


def _split_scores(c: GatCall, scores: Tensor) -> tuple[Tensor, Tensor]:
    """``(score_src [Ns, H], score_dst [Nd, H])``, contiguous views of :func:`_scores_shape`'s tensor."""
    ns = c.x_src.shape[0]
    return scores[:ns], scores[ns:]


def _outputs(c: GatCall, return_attention: bool, write_keep: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The forward op's outputs, fresh: ``out`` as :func:`out_spec` says, ``lse`` and the attention or its stand-in
    (:func:`~cudnn_gnn.backends.triton._op_common.statistics`), the node ``scores`` as :func:`_scores_shape` says,
    the dropout's keep flags or their stand-in (:func:`~cudnn_gnn.backends.triton._op_common.keep_flags`)."""
    shape, dtype = out_spec(c)
    return (torch.empty(shape, device=c.x_src.device, dtype=dtype), *statistics(c, return_attention),
            torch.empty(_scores_shape(c), device=c.x_src.device, dtype=torch.float32), keep_flags(c, write_keep))


def _forward(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The forward op: ``(out, lse, attention or empty, scores, keep flags or empty)`` (:func:`_outputs`; the scores
    and the flags kept for the backward). The node scores ``score_src[j, h] = a_src[h] . x_src[j, h]``,
    ``score_dst[i, h] = a_dst[h] . x_dst[i, h]`` in one launch (each feature row read once in its own dtype, float32
    sums; a homogeneous graph's rows once for both), then the attention, which with ``write_keep`` (counter-based
    dropout, a backward to follow) also writes the keep flags it drew."""
    c, return_attention, write_keep = GatCall(*args[:-2]), bool(args[-2]), bool(args[-1])
    check_runnable(c.x_src.device)
    out, lse, att, scores, flags = _outputs(c, return_attention, write_keep)
    parts = _split_scores(c, scores)
    k = kernels()
    k.launch_node_scores(c.x_src, c.x_dst, c.att_node, c.heads, out=parts, launch=c.launch, i64=c.i64)
    k.launch_forward(c, parts, out, lse, att if return_attention else None, flags if write_keep else None)
    return out, lse, att, scores, flags


def _forward_fake(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _outputs(GatCall(*args[:-2]), bool(args[-2]), bool(args[-1]))


def gat_one_gather(c: GatCall, static_graph: bool) -> bool:
    """Whether GAT's backward for the call ``c`` gathers one feature row per edge (:func:`_gat_backward`) or two.

    ``c.gat_backward`` (from :class:`~cudnn_gnn.backends.triton.TritonOptions`) forces either; ``"auto"`` (the
    default) takes the rule: one gather on a static graph (``static_graph``: one whose backward reads ``rev_dst``,
    see :class:`~cudnn_gnn.backends.triton.call.SourceWalk`) with a feature tile at most 256 wide (``HG * BLOCK_C``,
    :func:`~cudnn_gnn.backends.triton.tuning.default_launch_shape`: 8 x 32, 8 x 8), where its source pass has launch
    shapes tuned on the H200 and measured faster than two gathers; two gathers on a graph rebuilt every call (sampled
    blocks, whose sources have one or two out-edges: measured slower there with one) and on wider tiles. The
    measurements: docs/performance.md, "GAT's backward with one row gather"."""
    if c.gat_backward != "auto":
        return c.gat_backward == "one_gather"
    # the feature width is a layer's (static) width; int() keeps a symbolic one from reaching the cached rule
    _, _, hg, block_c, _ = tuning.default_launch_shape(c.heads, int(c.x_src.shape[1]) // max(c.heads, 1), False)
    return static_graph and hg * block_c <= 256


def _backward(grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor, out: Tensor | None, scores: Tensor,
              *args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The backward op: ``(d_x_src, d_x_dst, d_att_node, d_score_edge)`` (empty where an input has none). ``out``:
    what :class:`GatAttention` kept; given, :func:`_gat_backward`, else the two-gather backward (GATv2's passes).
    ``scores``: what the forward computed; the node-score gradients are folded into the features' and the head
    vectors': by the score kernel (:func:`_fold_node_scores`) after the one-gather backward (:func:`gat_one_gather`'s
    regime: static graphs, tiles at most 256 wide, where the kernel was measured faster), else by GEMMs
    (:func:`_fold_node_scores_gemm`, measured faster on sampled-shape bipartite blocks, 4 x 128; docs/performance.md,
    "The fold as a kernel"). ``att_node`` is ``att_src | att_dst`` (:func:`~cudnn_gnn.backends.triton.call.build_call`
    took ``att_edge`` into the edge scores, whose gradient is the op's last output)."""
    c, walk = GatCall(*args[:len(GatCall._fields)]), SourceWalk(*args[len(GatCall._fields):])
    check_runnable(c.x_src.device)
    scores2 = _split_scores(c, scores)
    empty = c.x_src.new_empty(0)
    d_x_src = like(c.x_src, empty)
    d_score_src, d_score_dst = like(scores2[0], empty), like(scores2[1], empty)
    d_score_edge = like(c.score_edge, empty)
    dout = grad_out.contiguous()
    datt = None if grad_attention is None else grad_attention.float().contiguous()
    k = kernels()
    if out is not None:
        dst = k.launch_gat_backward(c, walk, scores2, lse, out, dout, datt, d_x_src, d_score_src, d_score_dst,
                                    d_score_edge if c.score_edge is not None else None)
        d_x_src, d_x_dst, d_a = _fold_node_scores(c, d_x_src, d_score_src, dst)
    else:
        nd, e, h, _ = sizes(c)
        f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
        alpha_buf, ds_buf = torch.empty(e, h, **f32), torch.empty(e, h, **f32)
        k.launch_backward_dst(c, scores2, lse, dout, datt, alpha_buf, ds_buf, None, None, None, d_score_dst,
                              d_score_edge if c.score_edge is not None else None)
        k.launch_backward_src(c, walk, dout, alpha_buf, ds_buf, d_x_src, d_score_src)
        d_x_src, d_x_dst, d_a = _fold_node_scores_gemm(c, d_x_src, d_score_src, d_score_dst)
    return d_x_src, d_x_dst, d_a.to(c.att_node.dtype), d_score_edge


def _fold_node_scores(c: GatCall, d_x_src: Tensor, d_score_src: Tensor,
                      d_score_dst: DstScoreGrad) -> tuple[Tensor, Tensor, Tensor]:
    """``(d_x_src, d_x_dst, d_a)`` from the kernels' ``d_x_src`` (the attention's share, a buffer of this call,
    updated in place) and the float32 node-score gradients ``[Ns, H]`` and ``[Nd, H]``, the latter as the one-gather
    backward's destination sum leaves it (:class:`~cudnn_gnn.backends.triton.kernels.gat_backward.DstScoreGrad`,
    completed by the kernel that reads it); ``d_a [2*H*C]`` float32, the gradient of ``att_src | att_dst``.

    ``score_s[n, h] = a_s[h] . x_s[n, h]``, so ``d x_s[n, h, :] += d score_s[n, h] a_s[h]`` and ``d a_s[h] = sum_n
    d score_s[n, h] x_s[n, h]``: one launch of :func:`~cudnn_gnn.backends.triton.kernels.
    launch_node_scores_backward`, which reads each feature row once, adds both terms to ``d_x_src`` where it lies on a
    homogeneous graph (``x_dst`` None: no second ``[N, H*C]`` gradient, no sum of two) or writes ``d_x_dst`` where
    ``x_dst`` is its own tensor, and returns the head vectors' gradient."""
    d_x_dst = d_x_src.new_empty(0) if c.x_dst is None else like(c.x_dst, d_x_src)
    d_a = kernels().launch_node_scores_backward(
        c.x_src, c.x_dst, c.att_node, c.heads, d_score_src, d_score_dst, d_x_src,
        None if c.x_dst is None else d_x_dst, c.launch, c.i64)
    return d_x_src, d_x_dst, d_a


def _fold_node_scores_gemm(c: GatCall, d_x_src: Tensor, d_score_src: Tensor,
                           d_score_dst: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_fold_node_scores` as GEMMs with the block-diagonal ``m [H*C, 2H]`` (:func:`_pair_score_matrix`) in
    the features' dtype (the score gradients rounded to it first, float32 accumulation inside the GEMM): on a
    homogeneous graph one ``addmm_`` adds both terms to ``d_x_src`` where it lies, and the head vectors' gradient is
    the diagonal blocks of one ``x^T [d score_src | d score_dst]``; with its own ``x_dst``, ``d_x_dst = d score_dst
    a_dst`` is a GEMM of its own."""
    h, d = c.heads, c.x_src.shape[1]
    dt = c.x_src.dtype
    m = _pair_score_matrix(c.att_node, h, d).to(dt)
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


def _pair_score_matrix(att_node: Tensor, heads: int, d: int) -> Tensor:
    """``m [H*C, 2H]`` float32, ``m[h*C + c, s*H + k] = a[s, h, c]`` if ``k == h`` else 0, for ``a = att_src |
    att_dst``: both block-diagonal score matrices side by side, by one broadcast multiply
    (:func:`_fold_node_scores_gemm`' GEMMs)."""
    a = att_node.float().view(2, heads, d // heads)
    eye = torch.eye(heads, device=a.device, dtype=torch.float32)
    return (a.permute(1, 2, 0).unsqueeze(-1) * eye.view(heads, 1, 1, heads)).reshape(d, 2 * heads)


def _backward_fake(grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor, out: Tensor | None, scores: Tensor,
                   *args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    c = GatCall(*args[:len(GatCall._fields)])
    empty = c.x_src.new_empty(0)
    return like(c.x_src, empty), like(c.x_dst, empty), like(c.att_node, empty), like(c.score_edge, empty)


define("triton_gat_fwd", "", (GatCall,), "bool return_attention, bool write_keep",
       "(Tensor, Tensor, Tensor, Tensor, Tensor)", _forward, _forward_fake)
define("triton_gat_bwd", "Tensor grad_out, Tensor? grad_attention, Tensor lse, Tensor? out, Tensor scores",
       (GatCall, SourceWalk), "", "(Tensor, Tensor, Tensor, Tensor)", _backward, _backward_fake)


GRADS = tuple(GatCall._fields.index(name) for name in ("x_src", "x_dst", "att_node", "score_edge"))
"""The call fields the backward op returns gradients of, in its output order (the Function's inputs)."""


_FIELDS = fields_of(GatCall)


class GatAttention(torch.autograd.Function):
    """GAT attention over the ops: ``apply(return_attention, call, walk, layout, *inputs)``, a
    :class:`~cudnn_gnn.backends.triton.call.GatCall` and its :class:`~cudnn_gnn.backends.triton.call.SourceWalk`
    (None where no input requires grad), and the call's differentiable tensors (:data:`GRADS`) as
    :func:`~cudnn_gnn.backends.triton._op_common.grad_inputs` gives them.
    Returns ``(out, attention)``: ``out`` per head (:func:`out_spec`), the attention ``[E, H]`` float32 COO or an
    empty, non-differentiable stand-in. Differentiable in ``x_src``, ``x_dst``, ``att_node`` and ``score_edge``.

    What it keeps for the backward: the call's tensors (with counter-based dropout the keep flags ``[E, H]`` uint8
    its forward drew in place of the seed, :func:`~cudnn_gnn.backends.triton._op_common.saved_call`), the node
    scores ``[Ns + Nd, H]`` and ``lse [Nd, H]``, and where the backward gathers one row per edge
    (:func:`gat_one_gather`) the per-head output ``[Nd, H*C]`` (the input dtype with ``concat``, float32 without):
    FlashAttention's choice (``D = rowsum(dO * O)`` from the rounded ``O``; for 16-bit outputs within the bf16
    tolerances of the tests against the reference). Nothing more where the caller keeps the output anyway; an
    in-place change of it before the backward is refused by autograd's version check (as for torch's own attention
    kernels, which save their output too)."""

    @staticmethod
    def forward(ctx, return_attention: bool, call: GatCall, walk: SourceWalk | None,  # type: ignore[override]
                layout: tuple[int, ...], *inputs: Tensor) -> tuple[Tensor, Tensor]:
        write_keep = writes_keep_flags(call, walk)
        out, lse, att, scores, flags = run(torch.ops.cudnn_gnn.triton_gat_fwd, _forward, *call, return_attention,
                                           write_keep)
        one_gather = walk is not None and gat_one_gather(call, walk.rev_dst is not None)
        keep(ctx, _FIELDS, saved_call(call, flags, write_keep), walk, layout, len(inputs), return_attention, att, lse,
             out if one_gather else None, scores)
        return out, att

    @staticmethod
    def backward(ctx, grad_out: Tensor | None, grad_att: Tensor | None  # type: ignore[override]
                 ) -> tuple[Tensor | None, ...]:
        refuse_create_graph("triton")
        call, walk, (lse, out, scores,), grad_out, grad_att = kept(ctx, GatCall, _FIELDS, grad_out, grad_att, out_spec)
        return returned(ctx, run(torch.ops.cudnn_gnn.triton_gat_bwd, _backward, grad_out, grad_att, lse, out, scores,
                                 *call, *walk))
