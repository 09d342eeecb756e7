"""The one module that calls cuDNN's GNN kernels (``nvidia-cudnn-frontend`` >= 1.32, cuDNN >= 9.28).

It registers two ops in our own ``torch.library`` namespace, ``cudnn_gnn::mha_gat_fwd`` and
``cudnn_gnn::mha_gat_bwd``, serving GAT and GATv2 (flag ``v2``), with shape-only fake implementations and an
explicit autograd formula, so ``torch.compile(fullgraph=True)`` traces through them. Their CUDA kernels hand
the tensors to the frontend's own registered ops (``torch.ops.cudnn.gnn_mha_gat*``), which marshal them to
the cuDNN C API. Everything here trusts its caller: :mod:`cudnn_gnn.ops` has validated shapes, dtypes,
devices and sizes on the host, promoted indices to int64 where int32 would overflow inside the kernel, and
routed the graphs cuDNN refuses (no edges) to the reference backend.

The argument list is written once (``_GRAPH``, ``_INPUTS``, ``_KNOBS`` and :class:`GatCall`).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_gnn.backends._autograd import refuse_create_graph

__all__ = ["GatCall", "cudnn_gat"]

_GRAPH = (
    "Tensor offsets, Tensor indices, Tensor? map_csc_to_coo, Tensor? csc_rev_offsets, Tensor? map_rev_to_coo, "
    "int num_src_nodes"
)
_INPUTS = "Tensor x_src, Tensor x_dst, Tensor? edge_attr, Tensor attn_weights, Tensor? dropout_mask"
_KNOBS = "bool v2, int heads, bool concat, str activation, float activation_alpha, bool deterministic, bool grad_fp32"


class GatCall(NamedTuple):
    """One kernel call's arguments, in schema order (graph, inputs, knobs)."""

    offsets: Tensor
    indices: Tensor
    map_csc_to_coo: Tensor | None
    csc_rev_offsets: Tensor | None
    map_rev_to_coo: Tensor | None
    num_src_nodes: int
    x_src: Tensor
    x_dst: Tensor
    edge_attr: Tensor | None
    attn_weights: Tensor
    dropout_mask: Tensor | None  # [H, E] float32, COO order
    v2: bool
    heads: int
    concat: bool
    activation: str
    activation_alpha: float
    deterministic: bool
    grad_fp32: bool


_N_CALL = len(GatCall._fields)
_lib = torch.library.Library("cudnn_gnn", "DEF")
_lib.define(f"mha_gat_fwd({_GRAPH}, {_INPUTS}, {_KNOBS}, bool return_attention) -> (Tensor, Tensor, Tensor, Tensor)")
_lib.define(
    f"mha_gat_bwd(Tensor grad_out, Tensor? grad_attention, Tensor sm_scores, Tensor act_scores, "
    f"{_GRAPH}, {_INPUTS}, {_KNOBS}) -> (Tensor, Tensor, Tensor, Tensor)"
)


@functools.lru_cache(maxsize=1)
def _frontend() -> Any:
    """Import ``cudnn.gnn`` once; this registers the frontend's ``torch.ops.cudnn.gnn_*`` ops."""
    import cudnn.gnn  # type: ignore[import-not-found]  # noqa: F401

    return torch.ops.cudnn


def _out_dim(c: GatCall) -> int:
    d = c.x_src.shape[1]
    return d if c.concat else d // c.heads


def _grad_dtypes(c: GatCall) -> tuple[torch.dtype, torch.dtype]:
    return (torch.float32, torch.float32) if c.grad_fp32 else (c.x_src.dtype, c.x_src.dtype)


def _dst_with_edges(c: GatCall) -> Tensor:
    """``[Nd, 1]`` bool: destinations with at least one incoming edge."""
    return (c.offsets[1:] > c.offsets[:-1]).unsqueeze(1)


def _src_with_edges(c: GatCall) -> Tensor:
    """``[Ns, 1]`` bool: sources with at least one outgoing edge."""
    mask = torch.zeros(c.num_src_nodes, dtype=torch.bool, device=c.indices.device)
    return mask.index_fill_(0, c.indices.long(), True).unsqueeze(1)


# The kernels leave the rows of nodes without edges unwritten (output rows of destinations without incoming
# edges, gradient rows of sources without outgoing ones): they hold whatever the caching allocator handed out.
# We define them as zero, as PyG does, with one elementwise select (no host sync).


def explain_failure(exc: RuntimeError) -> RuntimeError:
    """``exc`` with the known cause and fix appended where there is one, else ``exc`` itself.

    ``CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE`` from a GAT call: a cuDNN without
    ``libcudnn_engines_precompiled`` switches itself to its GRAPH_JIT_ONLY library mode at the first graph that
    needs engines (the backward of a cuDNN SDPA graph, a torch cuDNN convolution), in which the GNN kernels are
    unavailable (``info.JIT_ONLY_NOTE``; docs/gpu-install.md).
    """
    msg = str(exc)
    if "SUBLIBRARY_UNAVAILABLE" not in msg:
        return exc
    from cudnn_gnn.backends import _cudnn_sdpa
    from cudnn_gnn.backends.info import (
        JIT_ONLY_NOTE,
        PRECOMPILED,
        lacking_precompiled,
        library_dirs,
        mapped_cudnn_libraries,
    )

    libs = mapped_cudnn_libraries()
    lacking = lacking_precompiled(libs)
    sdpa = _cudnn_sdpa.used_in_process()
    if not lacking and not sdpa:
        return exc
    dirs = library_dirs(libs)
    parts = [msg + "."]
    if sdpa:
        parts.append("cuDNN SDPA ran earlier in this process (graph_attention with backend='cudnn').")
    if lacking:
        parts.append(f"The cuDNN in {', '.join(lacking)} lacks {PRECOMPILED}: {JIT_ONLY_NOTE}.")
    else:
        parts.append("Fix: use graph_attention(..., backend='flash') (what 'auto' picks on CUDA) next to cuDNN GAT, "
                     "or install one complete cuDNN >= 9.28 for both (see `python -m cudnn_gnn info`).")
    if dirs:
        parts.append(f"This process has libcudnn files from {len(dirs)} directories: {', '.join(dirs)}.")
    return RuntimeError(" ".join(parts))


# cuDNN 9.28.1's GAT kernels fail to launch for some shapes (`cuLaunchKernel failed: invalid argument`, then
# CUDNN_STATUS_EXECUTION_FAILED; the CUDA context stays usable). Which shapes depends on the graph as well as on the
# heads and the width, so no padding rule avoids it (docs/performance.md, "head widths"). A call whose kernel fails
# to launch runs the fallback math below (the reference, float32 for half inputs, same contract and results) with
# one warning per shape; the planner then routes later calls of that shape to another backend
# (:meth:`cudnn_gnn.backends.cudnn.CudnnBackend.failed_to_launch_before`). To see the raw failure instead, turn the
# warning into an error (``warnings.filterwarnings("error", "cuDNN's .* failed to launch")``), as the head-width
# probe does.
_LAUNCH_FAILED: set[tuple[str, tuple[Any, ...]]] = set()


def shape_key(*, v2: bool, heads: int, dim: int, dtype: torch.dtype, has_map: bool, dim_edge: int | None,
              has_mask: bool, concat: bool, deterministic: bool, grad_fp32: bool, activation: str, num_src: int,
              num_dst: int, num_edges: int, index_dtype: torch.dtype) -> tuple[Any, ...]:
    """What a launch failure is remembered by: the kernel's shape, dtype and options, not the tensors' values."""
    return (v2, heads, dim, dtype, has_map, dim_edge, has_mask, concat, deterministic, grad_fp32, activation,
            num_src, num_dst, num_edges, index_dtype)


def _shape_key(c: GatCall) -> tuple[Any, ...]:
    return shape_key(
        v2=c.v2, heads=c.heads, dim=c.x_src.shape[1], dtype=c.x_src.dtype, has_map=c.map_csc_to_coo is not None,
        dim_edge=None if c.edge_attr is None else c.edge_attr.shape[1], has_mask=c.dropout_mask is not None,
        concat=c.concat, deterministic=c.deterministic, grad_fp32=c.grad_fp32, activation=c.activation,
        num_src=c.num_src_nodes, num_dst=c.offsets.shape[0] - 1, num_edges=c.indices.shape[0],
        index_dtype=c.indices.dtype)


def launch_failed(key: tuple[Any, ...]) -> bool:
    """Whether the forward or the backward kernel of shape ``key`` failed to launch in this process."""
    return ("forward", key) in _LAUNCH_FAILED or ("backward", key) in _LAUNCH_FAILED


def _launch_failed(direction: str, c: GatCall, exc: RuntimeError) -> bool:
    """Whether ``exc`` is a kernel launch failure to fall back from; records the shape and warns once for it."""
    if "CUDNN_STATUS_EXECUTION_FAILED" not in str(exc):
        return False
    key = (direction, _shape_key(c))
    if key not in _LAUNCH_FAILED:
        warnings.warn(
            f"cuDNN's {'GATv2' if c.v2 else 'GAT'} {direction} kernel failed to launch ({exc}) for {c.heads} heads x "
            f"{c.x_src.shape[1] // c.heads} channels, {str(c.x_src.dtype).removeprefix('torch.')}, "
            f"{c.num_src_nodes:,} -> {c.offsets.shape[0] - 1:,} nodes, {c.indices.shape[0]:,} edges (cuDNN 9.28.1 "
            "fails so for some shapes; see docs/performance.md). This call runs the reference math instead (same "
            "results, slower, more memory); later calls of this shape run on another backend (deterministic ones "
            "on this fallback).",
            RuntimeWarning, stacklevel=2)
        _LAUNCH_FAILED.add(key)  # after the warning: where it is turned into an error, nothing is recorded
    return True


def _float_call(c: GatCall) -> GatCall:
    """``c`` with half-precision inputs in float32 (the fallback computes in float32, as the kernels accumulate)."""
    if c.x_src.dtype not in (torch.float16, torch.bfloat16):
        return c

    def up(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.float()

    xs = c.x_src.float()
    xd = xs if c.x_dst is c.x_src else c.x_dst.float()
    return c._replace(x_src=xs, x_dst=xd, edge_attr=up(c.edge_attr), attn_weights=c.attn_weights.float())


@contextlib.contextmanager
def _deterministic_if(flag: bool) -> Iterator[None]:
    """For a ``deterministic=True`` call that falls back: torch's deterministic implementations (sorted instead of
    atomic ``index_add`` in the reference's backward), ``warn_only`` for any op without one; restored after."""
    if not flag or torch.are_deterministic_algorithms_enabled():
        yield
        return
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def _fallback_fwd(c: GatCall, return_attention: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    with _deterministic_if(c.deterministic):
        out, att, sm, act = _fwd_cpu(*_float_call(c), return_attention)  # the kernels' contract in torch ops
    return out.to(c.x_src.dtype), att, sm, act.to(c.x_src.dtype) if c.v2 else act


def _fallback_bwd(grad_out: Tensor, grad_attention: Tensor | None, sm: Tensor, act: Tensor,
                  c: GatCall) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    feat_dt, w_dt = _grad_dtypes(c)
    with _deterministic_if(c.deterministic):
        gs, gd, ge, gw = _bwd_cpu(grad_out.float(), grad_attention, sm, act, *_float_call(c))
    return gs.to(feat_dt), gd.to(feat_dt), ge.to(feat_dt), gw.to(w_dt)


def _fwd_kernel(c: GatCall, return_attention: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    ops = _frontend()
    feat_dt, w_dt = _grad_dtypes(c)
    common = (
        c.offsets, c.indices, c.map_csc_to_coo, c.x_src, c.x_dst, c.edge_attr, c.attn_weights, c.dropout_mask,
        c.num_src_nodes, c.heads, c.concat, c.activation, c.activation_alpha, return_attention,
        c.csc_rev_offsets, c.map_rev_to_coo, c.deterministic,
    )
    try:
        if c.v2:
            out, att, sm, act = ops.gnn_mha_gat_v2_fwd.default(*common, feat_dt)
        else:
            out, att, sm = ops.gnn_mha_gat_fwd.default(*common, feat_dt, w_dt)
            act = sm.new_empty(0)
    except RuntimeError as exc:
        raise explain_failure(exc) from exc
    return out, att, sm, act


def _fwd_cuda(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    c = GatCall(*args[:_N_CALL])
    return_attention = bool(args[_N_CALL])
    if ("forward", _shape_key(c)) not in _LAUNCH_FAILED:
        try:
            out, att, sm, act = _fwd_kernel(c, return_attention)
            return torch.where(_dst_with_edges(c), out, 0), att, sm, act
        except RuntimeError as exc:
            if not _launch_failed("forward", c, exc):
                raise
    return _fallback_fwd(c, return_attention)


def _fwd_fake(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    c = GatCall(*args[:_N_CALL])
    return_attention = bool(args[_N_CALL])
    e, h = c.indices.shape[0], c.heads
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    out = c.x_src.new_empty(c.offsets.shape[0] - 1, _out_dim(c))
    att = torch.empty((h, e) if return_attention else (0,), **f32)
    sm = torch.empty(2, h, e, **f32)
    act = c.x_src.new_empty(e, c.x_src.shape[1]) if c.v2 else torch.empty(0, **f32)
    return out, att, sm, act


def _bwd_kernel(grad_out: Tensor, grad_attention: Tensor | None, sm: Tensor, act: Tensor, c: GatCall):
    ops = _frontend()
    feat_dt, w_dt = _grad_dtypes(c)
    head = (grad_out, grad_attention, c.offsets, c.indices, c.map_csc_to_coo, c.x_src, c.x_dst, c.edge_attr,
            c.attn_weights, sm)
    tail = (c.dropout_mask, c.num_src_nodes, c.heads, c.concat, c.activation, c.activation_alpha,
            c.csc_rev_offsets, c.map_rev_to_coo, c.deterministic)
    try:
        if c.v2:
            return ops.gnn_mha_gat_v2_bwd.default(*head, act, *tail, feat_dt)
        return ops.gnn_mha_gat_bwd.default(*head, *tail, feat_dt, w_dt)
    except RuntimeError as exc:
        raise explain_failure(exc) from exc


def _bwd_cuda(grad_out: Tensor, grad_attention: Tensor | None, sm: Tensor, act: Tensor, *args: Any):
    c = GatCall(*args)
    key = _shape_key(c)
    if ("forward", key) not in _LAUNCH_FAILED and ("backward", key) not in _LAUNCH_FAILED:
        try:
            gs, gd, ge, gw = _bwd_kernel(grad_out, grad_attention, sm, act, c)
            return torch.where(_src_with_edges(c), gs, 0), torch.where(_dst_with_edges(c), gd, 0), ge, gw
        except RuntimeError as exc:
            if not _launch_failed("backward", c, exc):
                raise
    return _fallback_bwd(grad_out, grad_attention, sm, act, c)


def _bwd_fake(grad_out: Tensor, grad_attention: Tensor | None, sm: Tensor, act: Tensor, *args: Any):
    c = GatCall(*args)
    feat_dt, w_dt = _grad_dtypes(c)
    ge = (
        torch.empty_like(c.edge_attr, dtype=feat_dt, memory_format=torch.contiguous_format)
        if c.edge_attr is not None
        else c.x_src.new_empty(0, dtype=feat_dt)
    )
    return (
        torch.empty_like(c.x_src, dtype=feat_dt, memory_format=torch.contiguous_format),
        torch.empty_like(c.x_dst, dtype=feat_dt, memory_format=torch.contiguous_format),
        ge,
        torch.empty_like(c.attn_weights, dtype=w_dt, memory_format=torch.contiguous_format),
    )


# CPU kernels: the kernels' contract emulated with the reference math, so that the op's schema, fake
# implementations and autograd formula are exercised by `torch.library.opcheck` in CI (no GPU there). They are
# never selected by `backend=...` (CPU tensors run the plain reference backend).


def _reference_call(c: GatCall, x_src: Tensor, x_dst: Tensor, w: Tensor, edge: Tensor | None):
    from cudnn_gnn.backends import reference
    from cudnn_gnn.graph import CscGraph
    from cudnn_gnn.spec import AttentionSpec

    graph = CscGraph(c.offsets, c.indices, c.num_src_nodes, c.map_csc_to_coo)
    spec = AttentionSpec(
        v2=c.v2, graph=graph, x_src=x_src, x_dst=x_dst, attn_weights=w, heads=c.heads, edge_attr=edge,
        lin_edge_weight=None, concat=c.concat, activation=c.activation, activation_alpha=c.activation_alpha,
        dropout_mask=None if c.dropout_mask is None else c.dropout_mask.t(), dropout=0.0, dropout_seed=None,
        return_attention=True,
        deterministic=c.deterministic, grad_precision="fp32" if c.grad_fp32 else "input", backend="reference",
        max_degree=None)
    return reference.mha_gat(spec)


def _fwd_cpu(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    c = GatCall(*args[:_N_CALL])
    return_attention = bool(args[_N_CALL])
    with torch.no_grad():
        out, att = _reference_call(c, c.x_src, c.x_dst, c.attn_weights, c.edge_attr)
    att = att.t().float()
    sm = torch.stack([att, att])  # stands in for the kernels' softmax statistics (unused by the CPU backward)
    act = c.x_src.new_zeros(c.indices.shape[0], c.x_src.shape[1]) if c.v2 else sm.new_empty(0)
    return out, att.contiguous() if return_attention else att.new_empty(0), sm, act


def _bwd_cpu(grad_out: Tensor, grad_attention: Tensor | None, sm: Tensor, act: Tensor, *args: Any):
    c = GatCall(*args)
    feat_dt, w_dt = _grad_dtypes(c)
    leaves = [t.detach().requires_grad_() for t in (c.x_src, c.x_dst, c.attn_weights)]
    edge = None if c.edge_attr is None else c.edge_attr.detach().requires_grad_()
    with torch.enable_grad():
        out, att = _reference_call(c, leaves[0], leaves[1], leaves[2], edge)
        outs, cots = [out], [grad_out]
        if grad_attention is not None:
            outs.append(att.t())
            cots.append(grad_attention.to(att.dtype))
        inputs = leaves + ([edge] if edge is not None else [])
        grads = torch.autograd.grad(outs, inputs, cots, allow_unused=True, materialize_grads=True)
    gs, gd, gw = grads[0], grads[1], grads[2]
    ge = grads[3] if edge is not None else c.x_src.new_empty(0)
    return gs.to(feat_dt), gd.to(feat_dt), ge.to(feat_dt), gw.to(w_dt)


_lib.impl("mha_gat_fwd", _fwd_cuda, "CUDA")
_lib.impl("mha_gat_bwd", _bwd_cuda, "CUDA")
_lib.impl("mha_gat_fwd", _fwd_cpu, "CPU")
_lib.impl("mha_gat_bwd", _bwd_cpu, "CPU")
torch.library.register_fake("cudnn_gnn::mha_gat_fwd", _fwd_fake, lib=_lib)
torch.library.register_fake("cudnn_gnn::mha_gat_bwd", _bwd_fake, lib=_lib)

# Positions of the differentiable inputs inside the forward schema.
_DIFF = {name: GatCall._fields.index(name) for name in ("x_src", "x_dst", "edge_attr", "attn_weights")}


_TENSORS = ("offsets", "indices", "map_csc_to_coo", "csc_rev_offsets", "map_rev_to_coo",
            "x_src", "x_dst", "edge_attr", "attn_weights", "dropout_mask")


def _setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _, att, sm, act = output
    c = GatCall(*inputs[:_N_CALL])
    blank: dict[str, Any] = dict.fromkeys(_TENSORS)
    ctx.call = c._replace(**blank)  # the non-tensor fields; tensors go through save_for_backward
    ctx.return_attention = bool(inputs[_N_CALL])
    ctx.save_for_backward(*(getattr(c, name) for name in _TENSORS), sm, act)
    ctx.mark_non_differentiable(sm, act)
    if not ctx.return_attention:
        ctx.mark_non_differentiable(att)


def _backward(ctx, grad_out, grad_att, _grad_sm, _grad_act):  # type: ignore[no-untyped-def]
    refuse_create_graph("cudnn")
    *tensors, sm, act = ctx.saved_tensors
    c: GatCall = ctx.call._replace(**dict(zip(_TENSORS, tensors)))
    x_src, x_dst, edge_attr, w = c.x_src, c.x_dst, c.edge_attr, c.attn_weights
    if grad_out is None:
        grad_out = x_src.new_zeros(c.offsets.shape[0] - 1, _out_dim(c))
    grad_out = grad_out.to(x_src.dtype).contiguous()
    if not ctx.return_attention or grad_att is None:
        grad_att = None
    else:
        grad_att = grad_att.to(torch.float32).contiguous()
    gs, gd, ge, gw = torch.ops.cudnn_gnn.mha_gat_bwd(grad_out, grad_att, sm, act, *c)
    grads: list[Tensor | None] = [None] * (_N_CALL + 1)
    grads[_DIFF["x_src"]] = gs.to(x_src.dtype)
    grads[_DIFF["x_dst"]] = gd.to(x_dst.dtype)
    grads[_DIFF["edge_attr"]] = ge.to(edge_attr.dtype) if edge_attr is not None else None
    grads[_DIFF["attn_weights"]] = gw.to(w.dtype)
    return tuple(grads)


torch.library.register_autograd("cudnn_gnn::mha_gat_fwd", _backward, setup_context=_setup_context, lib=_lib)


def cudnn_gat(call: GatCall, return_attention: bool) -> tuple[Tensor, Tensor]:
    """Run the kernel; returns ``(out [Nd, D or D/H], attention [H, E] fp32 or [0])``."""
    out, att, _, _ = torch.ops.cudnn_gnn.mha_gat_fwd(*call, return_attention)
    return out, att
