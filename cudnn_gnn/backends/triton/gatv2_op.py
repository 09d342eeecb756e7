"""GATv2 on the Triton kernels: the ops ``cudnn_gnn::triton_gatv2_fwd`` and ``cudnn_gnn::triton_gatv2_bwd``
(arguments: a :class:`~cudnn_gnn.backends.triton.call.Gatv2Call`'s fields, and for the backward a
:class:`~cudnn_gnn.backends.triton.call.SourceWalk`'s), their shape-only fakes, and :class:`Gatv2Attention`, the one
autograd Function over them, which eager calls and ``torch.compile`` take alike.

GATv2's logit ``a . act(x_j + x_i + f_e)`` needs the whole feature rows, so the op takes them directly and
recomputes ``act(x_j + x_i + f_e)`` in the backward instead of saving it; its backward gathers rows in a destination
and a source pass (the kernels GAT's two-gather backward shares). With the edge projection fused (raw ``edge_attr``
and ``lin_edge_weight``), a third pass forms the edge gradients (:func:`_fused_edge_backward`).

Everything here trusts its caller: :mod:`cudnn_gnn.ops` validates shapes, dtypes and devices first.
"""


from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._bias import column_sum
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
from cudnn_gnn.backends.triton.call import Gatv2Call, SourceWalk

__all__ = ["Gatv2Attention"]


def out_spec(c: Gatv2Call) -> tuple[tuple[int, int], torch.dtype]:
    """The shape and dtype of the op's output, in the input dtype: ``[Nd, H*C]`` with ``concat``, else the mean over
    heads ``[Nd, C]``."""
    nd, _, h, ch = sizes(c)
    return ((nd, h * ch) if c.concat else (nd, ch)), c.x_src.dtype


def _forward(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The forward op: ``(out, lse [Nd, H] float32, attention [E, H] float32 COO or empty, keep flags [E, H] uint8
    CSC or empty)``; the flags (:func:`~cudnn_gnn.backends.triton._op_common.keep_flags`) written with
    ``write_keep`` (counter-based dropout, a backward to follow), for the backward."""
    c, return_attention, write_keep = Gatv2Call(*args[:-2]), bool(args[-2]), bool(args[-1])
    check_runnable(c.x_src.device)
    nd, _, h, ch = sizes(c)
    out = c.x_src.new_empty(nd, h * ch) if c.concat else c.x_src.new_empty(nd, h * ch, dtype=torch.float32)
    lse, att = statistics(c, return_attention)
    flags = keep_flags(c, write_keep)
    kernels().launch_forward(c, None, out, lse, att if return_attention else None, flags if write_keep else None)
    if not c.concat:
        out = out.view(nd, h, ch).mean(1).to(c.x_src.dtype)
    return out, lse, att, flags


def _forward_fake(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    c, return_attention, write_keep = Gatv2Call(*args[:-2]), bool(args[-2]), bool(args[-1])
    shape, dtype = out_spec(c)
    return (torch.empty(shape, device=c.x_src.device, dtype=dtype), *statistics(c, return_attention),
            keep_flags(c, write_keep))


def _backward(grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor,
              *args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The backward op: ``(d_x_src, d_x_dst, d_edge_attr, d_lin_edge_weight, d_attn_weights)`` (empty where an
    input has none, or where ``edge_grads`` does not ask for it): the destination pass, the source pass, on the
    fused path the edge pass, and the attention vector's per-row and per-chunk partials summed in a fixed order."""
    c, walk = Gatv2Call(*args[:len(Gatv2Call._fields)]), SourceWalk(*args[len(Gatv2Call._fields):])
    check_runnable(c.x_src.device)
    empty = c.x_src.new_empty(0)
    nd, e, h, ch = sizes(c)
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    if c.concat:
        dout = grad_out.contiguous()
    else:  # the mean over heads: every head gets dout / H
        dout = (grad_out.float().unsqueeze(1) / h).expand(nd, h, ch).reshape(nd, h * ch)
    alpha_buf = torch.empty(e, h, **f32)
    ds_buf = torch.empty(e, h, **f32)
    d_x_src = like(c.x_src, c.x_src)
    fused = c.lin_edge_weight is not None
    # one row per whole destination and one per hub chunk: zeros where the row list holds chunk slots (a hub row's own
    # row and the unused slots are not written, and add 0); without, every destination is a whole item, which writes
    # its row (zeros for a row with no edge), so nothing is zeroed first
    n_slots = c.row_hub_work.shape[0]
    d_w_part = (torch.zeros if n_slots else torch.empty)(nd + n_slots, h * ch, **f32)
    d_x_dst, d_edge = like(c.x_dst, c.x_src), _edge_grad(c, 1, c.edge_attr)
    k = kernels()
    k.launch_backward_dst(c, None, lse, dout, None if grad_attention is None else grad_attention.float().contiguous(),
                          alpha_buf, ds_buf, d_x_dst, d_edge if c.edge_attr is not None and not fused else None,
                          d_w_part, None, None)
    k.launch_backward_src(c, walk, dout, alpha_buf, ds_buf, d_x_src, None)
    d_edge_weight = _fused_edge_backward(c, walk, ds_buf, d_edge) if fused else empty
    d_w = column_sum(d_w_part).to(c.attn_weights.dtype)  # per-row and per-chunk partials, in a fixed order
    return d_x_src, d_x_dst, d_edge, d_edge_weight, d_w


def _edge_grad(c: Gatv2Call, bit: int, t: Tensor | None) -> Tensor:
    """The buffer for the gradient of the edge input ``t``: shaped like it, except on the fused path where
    ``edge_grads`` does not ask for it (bit ``bit``: 1 ``edge_attr``, 2 ``lin_edge_weight``): empty."""
    if c.lin_edge_weight is not None and not c.edge_grads & bit:
        return c.x_src.new_empty(0)
    return like(t, c.x_src)


def _fused_edge_backward(c: Gatv2Call, walk: SourceWalk, ds_buf: Tensor, d_edge: Tensor) -> Tensor:
    """The fused edge projection's gradients, after the destination pass left ``ds`` in ``ds_buf``: fills ``d_edge``
    (``edge_attr``'s, where asked) and returns ``lin_edge_weight``'s, summed over per-program partials
    ``[P, H*C, De]`` in a fixed order (or an empty tensor where not asked)."""
    assert c.lin_edge_weight is not None  # the fused path's
    d_edge_weight = _edge_grad(c, 2, c.lin_edge_weight)
    span = tuning.edge_span(c.indices.shape[0])
    part = None
    if d_edge_weight.numel():
        part = torch.zeros(-(-c.indices.shape[0] // span), *c.lin_edge_weight.shape, device=c.x_src.device,
                           dtype=torch.float32)
    kernels().launch_backward_edge(c, walk.dst_index, ds_buf, d_edge if d_edge.numel() else None, part, span)
    if part is not None:
        d_edge_weight.copy_(part.sum(0))  # per-program partials, reduced in a fixed order
    return d_edge_weight


def _backward_fake(grad_out: Tensor, grad_attention: Tensor | None, lse: Tensor,
                   *args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    c = Gatv2Call(*args[:len(Gatv2Call._fields)])
    empty = c.x_src.new_empty(0)
    return (like(c.x_src, empty), like(c.x_dst, empty), _edge_grad(c, 1, c.edge_attr),
            _edge_grad(c, 2, c.lin_edge_weight) if c.lin_edge_weight is not None else empty.new_empty(0),
            like(c.attn_weights, empty))


define("triton_gatv2_fwd", "", (Gatv2Call,), "bool return_attention, bool write_keep",
       "(Tensor, Tensor, Tensor, Tensor)", _forward, _forward_fake)
define("triton_gatv2_bwd", "Tensor grad_out, Tensor? grad_attention, Tensor lse", (Gatv2Call, SourceWalk), "",
       "(Tensor, Tensor, Tensor, Tensor, Tensor)", _backward, _backward_fake)


GRADS = tuple(Gatv2Call._fields.index(name) for name in ("x_src", "x_dst", "edge_attr", "lin_edge_weight", "attn_weights"))
"""The call fields the backward op returns gradients of, in its output order (the Function's inputs)."""


_FIELDS = fields_of(Gatv2Call)


class Gatv2Attention(torch.autograd.Function):
    """GATv2 attention over the ops: ``apply(return_attention, call, walk, layout, *inputs)``, a
    :class:`~cudnn_gnn.backends.triton.call.Gatv2Call` and its :class:`~cudnn_gnn.backends.triton.call.SourceWalk`
    (None where no input requires grad), and the call's differentiable tensors (:data:`GRADS`) as
    :func:`~cudnn_gnn.backends.triton._op_common.grad_inputs` gives them.
    Returns ``(out, attention)`` (:func:`out_spec`; the attention ``[E, H]`` float32 COO or an empty,
    non-differentiable stand-in). Differentiable in ``x_src``, ``x_dst``, ``edge_attr``, ``lin_edge_weight`` and
    ``attn_weights``; keeps the call's tensors (with counter-based dropout the keep flags ``[E, H]`` uint8 its forward
    drew in place of the seed, :func:`~cudnn_gnn.backends.triton._op_common.saved_call`) and ``lse [Nd, H]`` for the
    backward, nothing of size ``[E, H*C]``."""

    @staticmethod
    def forward(ctx, return_attention: bool, call: Gatv2Call, walk: SourceWalk | None,  # type: ignore[override]
                layout: tuple[int, ...], *inputs: Tensor) -> tuple[Tensor, Tensor]:
        write_keep = writes_keep_flags(call, walk)
        out, lse, att, flags = run(torch.ops.cudnn_gnn.triton_gatv2_fwd, _forward, *call, return_attention,
                                   write_keep)
        keep(ctx, _FIELDS, saved_call(call, flags, write_keep), walk, layout, len(inputs), return_attention, att,
             lse)
        return out, att

    @staticmethod
    def backward(ctx, grad_out: Tensor | None, grad_att: Tensor | None  # type: ignore[override]
                 ) -> tuple[Tensor | None, ...]:
        refuse_create_graph("triton")
        call, walk, (lse,), grad_out, grad_att = kept(ctx, Gatv2Call, _FIELDS, grad_out, grad_att, out_spec)
        return returned(ctx, run(torch.ops.cudnn_gnn.triton_gatv2_bwd, _backward, grad_out, grad_att, lse,
                                 *call, *walk))
