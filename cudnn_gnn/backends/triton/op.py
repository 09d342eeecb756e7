"""Triton backend: our own fused GAT / GATv2 kernels (forward and an atomic-free backward), and :func:`triton_gat`,
the entry the backend calls.

A call walks: the validated spec -> :func:`~cudnn_gnn.backends.triton.call.build_call` (the call record,
:class:`~cudnn_gnn.backends.triton.call.GatCall` or :class:`~cudnn_gnn.backends.triton.call.Gatv2Call`, and the
backward's :class:`~cudnn_gnn.backends.triton.call.SourceWalk`) -> the op's autograd Function
(:class:`~cudnn_gnn.backends.triton.gat_op.GatAttention`, :class:`~cudnn_gnn.backends.triton.gatv2_op.Gatv2Attention`)
-> its ``torch.library`` ops (``cudnn_gnn::triton_gat_fwd`` / ``_bwd``, ``cudnn_gnn::triton_gatv2_fwd`` / ``_bwd``,
with shape-only fakes, so ``torch.compile(fullgraph=True)`` traces through them and ``torch.library.opcheck`` covers
them) -> the launchers, which read the record by field name. Eager calls and ``torch.compile`` take the same path.
The kernels live in :mod:`cudnn_gnn.backends.triton.kernels`, imported on first use: they run on CUDA tensors, and
on any device under Triton's interpreter (``TRITON_INTERPRET=1``, which is how the CPU test suite runs them).
"""


from __future__ import annotations

import torch
from torch import Tensor

from cudnn_gnn.backends.triton import gat_op, gatv2_op
from cudnn_gnn.backends.triton._op_common import grad_inputs
from cudnn_gnn.backends.triton._runtime import check_runnable
from cudnn_gnn.backends.triton.call import (
    DEFAULT_OPTIONS,
    Gatv2Call,
    TritonGraph,
    TritonOptions,
    build_call,
    kernel_graph,
    scoped_options,
)
from cudnn_gnn.backends.triton.gat_op import GatAttention, gat_one_gather
from cudnn_gnn.backends.triton.gatv2_op import Gatv2Attention
from cudnn_gnn.spec import AttentionSpec

__all__ = ["gat_one_gather", "triton_gat"]


def triton_gat(spec: AttentionSpec, graph: TritonGraph | None = None, *,
               options: TritonOptions | None = None) -> tuple[Tensor, Tensor | None]:
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
        options: the variants kept for measurement (:class:`TritonOptions`); None: those of the enclosing
            :func:`~cudnn_gnn.backends.triton.call.use_options` block in eager calls, else the defaults.

    Returns:
        ``(out, attention or None)``: ``out`` ``[Nd, H*C]`` (concat) or ``[Nd, C]`` in the input dtype.
        Everything is differentiable in ``x_src``, ``x_dst``, ``attn_weights``, ``edge_attr`` and ``lin_edge_weight``.

    Cost: one kernel launch forward (plus, for GAT, the ``[N, H]`` node scores; plus a merge launch where the work
    list may hold hub rows); backward, GAT three passes (a dense delta pass, the source pass, a segmented
    destination sum; only the source pass gathers feature rows), GATv2 two (plus, where the lists may hold hub rows
    or sources, a pass-1 launch over the hub chunks), and small merge launches where they may hold hubs. GAT keeps
    its per-head output ``[Nd, H*C]`` (the input dtype with ``concat``, float32 without) from the forward to the
    backward (see :class:`~cudnn_gnn.backends.triton.gat_op.GatAttention`); float32 accumulation; bitwise
    repeatable (no atomics, every merge in a fixed order). A static graph's work lists know its largest degrees and
    hold hub entries only where a row (source) has more than :func:`~cudnn_gnn.backends.triton.tuning.chunk_size`
    edges; a graph rebuilt every call (a sampled
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
    if options is None:
        options = DEFAULT_OPTIONS if torch.compiler.is_compiling() else scoped_options()
    call, walk = build_call(spec, kernel_graph(spec.graph) if graph is None else graph, needs_grad=needs_grad,
                            options=options)
    function, grads = (Gatv2Attention, gatv2_op.GRADS) if isinstance(call, Gatv2Call) else (GatAttention, gat_op.GRADS)
    layout, inputs = grad_inputs(call, grads)
    out, att = function.apply(spec.return_attention, call, walk, layout, *inputs)
    if not spec.v2 and not spec.concat:  # GAT's op returns the float32 per-head output (gat_op.out_spec)
        out = out.view(out.shape[0], spec.heads, x_src.shape[1] // spec.heads).mean(1).to(x_src.dtype)
    return out, (att if spec.return_attention else None)
