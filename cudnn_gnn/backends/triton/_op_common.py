"""What the GAT and GATv2 ops share: the ``torch.library`` fragment they register in, their sizes, and how their
autograd Functions take a call record in and keep it for the backward.

``Function.apply(return_attention, call, walk, layout, *inputs)``: the call record and its
:class:`~cudnn_gnn.backends.triton.call.SourceWalk` as they are, and the call's differentiable tensors again as
``inputs``, each distinct tensor once (:func:`grad_inputs`), which autograd tracks. Once: ``torch.compile`` refuses
an ``apply`` given one tensor twice, and GATv2's ``x_src`` and ``x_dst`` are one tensor on a homogeneous graph; the
gradients of two fields that share a tensor are summed into it (:func:`input_grads`). The Function keeps the call's
tensors with ``save_for_backward`` (autograd checks their versions) and its other fields on the context
(:func:`keep`, :func:`kept`)."""


from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from cudnn_gnn.backends.triton.call import GatCall, Gatv2Call, SourceWalk, op_schema, tensor_fields

__all__ = ["LIB", "Fields", "define", "fields_of", "grad_inputs", "input_grads", "keep", "keep_flags", "kept", "like",
           "returned", "run", "saved_call", "sizes", "statistics", "writes_keep_flags"]

LIB = torch.library.Library("cudnn_gnn", "FRAGMENT")


def define(name: str, leading: str, records: tuple[type, ...], trailing: str, returns: str,
           impl: Callable[..., Any], fake: Callable[..., Any]) -> None:
    """Define ``cudnn_gnn::<name>(<leading>, <records' fields>, <trailing>) -> <returns>`` (:func:`op_schema`), its
    CPU and CUDA implementation ``impl`` (CPU: Triton's interpreter) and its shape-only ``fake``."""
    args = ", ".join(part for part in (leading, op_schema(*records), trailing) if part)
    LIB.define(f"{name}({args}) -> {returns}")
    for key in ("CPU", "CUDA"):
        LIB.impl(name, impl, key)
    torch.library.register_fake(f"cudnn_gnn::{name}", fake, lib=LIB)


def run(op: Any, impl: Callable[..., Any], *args: Any) -> Any:
    """The registered ``op`` under ``torch.compile`` (which traces it through its fake), its implementation ``impl``
    itself in eager calls: the same code without the dispatcher's parsing of ~30 arguments, which cost ~40 us of
    host time a GAT step (forward and backward; measured on the CPU with the kernels stubbed, docs/performance.md,
    "Small graphs: host time"): most of the op's own host time on a small graph."""
    if torch.compiler.is_compiling():
        return op(*args)
    return impl(*args)


def sizes(c: GatCall | Gatv2Call) -> tuple[int, int, int, int]:
    """``(Nd, E, H, C)``."""
    return c.offsets.shape[0] - 1, c.indices.shape[0], c.heads, c.x_src.shape[1] // c.heads


def like(t: Tensor | None, fallback: Tensor) -> Tensor:
    """A fresh contiguous tensor shaped like ``t``, in its dtype, or an empty stand-in for None."""
    if t is None:
        return fallback.new_empty(0)
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def statistics(c: GatCall | Gatv2Call, return_attention: bool) -> tuple[Tensor, Tensor]:
    """A forward op's softmax outputs, fresh float32: ``lse [Nd, H]`` and the attention ``[E, H]``, or an empty
    stand-in ``[0]`` without ``return_attention`` (what the op returns in its place; the kernels get None)."""
    nd, e, h, _ = sizes(c)
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    return torch.empty(nd, h, **f32), torch.empty((e, h) if return_attention else (0,), **f32)


def writes_keep_flags(c: GatCall | Gatv2Call, walk: SourceWalk | None) -> bool:
    """Whether the forward of ``c`` writes the keep flags of its dropout for the backward: counter-based dropout (an
    int64 seed) in a call with a backward (``walk``: built where an input requires grad). Inference writes none."""
    return walk is not None and c.dropout is not None and c.dropout.dtype == torch.int64


def keep_flags(c: GatCall | Gatv2Call, write: bool) -> Tensor:
    """A forward op's keep flags, fresh: ``[E, H]`` uint8 (CSC order, 1 = kept) that the kernels fill where ``write``
    (:func:`writes_keep_flags`), else an empty stand-in ``[0]`` (nothing allocated of size ``E``). ``E * H`` bytes
    kept until the backward: there its passes read a flag an edge and head instead of evaluating Philox again."""
    _, e, h, _ = sizes(c)
    return torch.empty((e, h) if write else (0,), device=c.x_src.device, dtype=torch.uint8)


_Call = TypeVar("_Call", GatCall, Gatv2Call)


def saved_call(c: _Call, flags: Tensor, write: bool) -> _Call:
    """The call an autograd Function keeps for its backward: ``c`` with the forward's keep ``flags`` in place of
    the seed where it wrote them (``write``), so that every backward pass reads them (the kernels' ``DROP == 3``);
    ``c`` itself otherwise."""
    return c._replace(dropout=flags) if write else c


def grad_inputs(call: GatCall | Gatv2Call, fields: tuple[int, ...]) -> tuple[tuple[int, ...], list[Tensor]]:
    """``(layout, inputs)``: the distinct tensors of ``call``'s differentiable ``fields`` (positions), in order, and
    per field its index in ``inputs`` (-1 for None)."""
    inputs: list[Tensor] = []
    layout: list[int] = []
    for i in fields:
        t: Tensor | None = call[i]  # type: ignore[assignment]  # fields: tensor fields
        if t is None:
            layout.append(-1)
            continue
        for k, u in enumerate(inputs):
            if u is t:
                layout.append(k)
                break
        else:
            layout.append(len(inputs))
            inputs.append(t)
    return tuple(layout), inputs


def input_grads(layout: tuple[int, ...], n_inputs: int, grads: Sequence[Tensor]) -> list[Tensor | None]:
    """The gradients of :func:`grad_inputs`' ``inputs`` from the backward op's ``grads`` of the same fields: summed
    where fields share a tensor; None for an input no gradient reaches. An empty gradient (a fused edge gradient the
    call did not ask for) gives none."""
    out: list[Tensor | None] = [None] * n_inputs
    for k, g in zip(layout, grads, strict=True):
        if k < 0 or g.dim() == 1 and g.numel() == 0:
            continue
        prev = out[k]
        out[k] = g if prev is None else prev + g
    return out


def keep(ctx: Any, fields: Fields, call: GatCall | Gatv2Call, walk: SourceWalk | None, layout: tuple[int, ...],
         n_inputs: int, return_attention: bool, att: Tensor, *extra: Tensor | None) -> None:
    """An autograd Function's forward bookkeeping after its op ran: ``call``, ``walk`` (None: no backward) and
    ``extra`` kept for :func:`kept` (the tensors through ``save_for_backward``, the call's other fields on ``ctx``),
    the inputs' ``layout`` (:func:`grad_inputs`), and the attention ``att`` marked non-differentiable where it was
    not asked for (an empty stand-in). ``fields``: the record's :func:`fields_of`."""
    positions, others = fields
    ctx.scalars = tuple(call[i] for i in others)
    ctx.save_for_backward(*(call[i] for i in positions), *(walk if walk is not None else _NO_WALK), *extra)
    ctx.layout, ctx.n_inputs, ctx.return_attention = layout, n_inputs, return_attention
    ctx.set_materialize_grads(False)
    if not return_attention:
        ctx.mark_non_differentiable(att)


def kept(ctx: Any, record: type, fields: Fields, grad_out: Tensor | None, grad_att: Tensor | None,
         out_spec: Callable[[Any], tuple[tuple[int, ...], torch.dtype]]
         ) -> tuple[Any, SourceWalk, tuple[Tensor | None, ...], Tensor, Tensor | None]:
    """``(call, walk, extra, grad_out, grad_att)`` in an autograd Function's backward: what :func:`keep` kept, the
    output's gradient (zeros shaped by ``out_spec(call)`` where only the returned attention was used) and the
    attention's (None where it was not returned). A call that ran without its backward structures (no input required
    grad when it was built) is refused. ``fields``: ``record``'s :func:`fields_of`."""
    positions, others = fields
    values = ctx.saved_tensors
    args: list[Any] = [None] * (len(positions) + len(others))
    for i, t in zip(positions, values):
        args[i] = t
    for i, v in zip(others, ctx.scalars, strict=True):
        args[i] = v
    n = len(positions) + len(_NO_WALK)
    walk = values[len(positions):n]
    if walk[0] is None:
        raise RuntimeError("the triton backward needs the reverse CSC and the source work list, got a call built "
                           "without them: an input must require grad when the forward runs")
    call = record(*args)
    if grad_out is None:
        shape, dtype = out_spec(call)
        grad_out = call.x_src.new_zeros(shape, dtype=dtype)
    return call, SourceWalk(*walk), tuple(values[n:]), grad_out, grad_att if ctx.return_attention else None


def returned(ctx: Any, grads: Sequence[Tensor]) -> tuple[Tensor | None, ...]:
    """An autograd Function's backward result: None for ``return_attention``, the call, the walk and the layout,
    then :func:`input_grads` of the backward op's ``grads``."""
    return (None, None, None, None, *input_grads(ctx.layout, ctx.n_inputs, grads))


_NO_WALK = (None,) * len(SourceWalk._fields)


Fields = tuple[tuple[int, ...], tuple[int, ...]]


def fields_of(record: type) -> Fields:
    """The positions of ``record``'s tensor fields and of its other fields: computed once, at import, by each op's
    module (``torch.compile`` traces :func:`keep` and :func:`kept`, and reads a constant where it cannot read a
    class's annotations)."""
    positions = tensor_fields(record)
    return positions, tuple(i for i in range(len(record._fields)) if i not in positions)  # type: ignore[attr-defined]
