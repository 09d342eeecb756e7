"""Triton backend: our own fused GAT / GATv2 kernels (forward and an atomic-free backward).

Two ops in our ``torch.library`` namespace, ``cudnn_gnn::triton_gat_fwd`` and ``cudnn_gnn::triton_gat_bwd``,
serve GAT and GATv2 (flag ``v2``), with shape-only fakes and an explicit autograd formula, so
``torch.compile(fullgraph=True)`` traces through them and ``torch.library.opcheck`` covers them. Eager calls run
the same two implementations through a plain autograd Function (:class:`_EagerAttention`), which skips the
dispatcher and the ``register_autograd`` wrapper: on small graphs that host time is the step's. The kernels live
in :mod:`cudnn_gnn.backends._triton_kernels`, imported on first use: they run on CUDA tensors, and on any device
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

import functools
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from cudnn_gnn._bias import column_sum
from cudnn_gnn.backends._autograd import refuse_create_graph
from cudnn_gnn.backends.info import backend_info, triton_available
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.spec import AttentionSpec, project_edges

__all__ = ["DEFAULT_OPTIONS", "TritonCall", "TritonOptions",
           "WorkList", "build_call", "chunk_size", "edge_span", "fuse_edge_projection", "gat_one_gather",
           "gatv2_edge_inputs", "mha_gat", "pack", "unavailable_reason", "unpack", "work_list", "BACKEND"]


class TritonCall(NamedTuple):
    """One call's arguments: the graph, the inputs, the knobs (the ops take them packed by :func:`pack`: the tensors
    that are not None in one list, in this order, then the scalars).

    Graph: ``offsets [Nd+1]``, ``indices [E]``, ``map_csc_to_coo [E]`` or None (only needed where an edge tensor is
    read or written), the destination work list ``row_work [P, 4]``, ``row_hub_work [S, 4]``, ``row_hubs [R, 3]``
    (see :func:`work_list`); for the backward ``rev_offsets [Ns+1]``, ``rev_to_csc [E]``, ``dst_index [E]`` and the
    source work list over the reverse CSC (``src_work``, ``src_hub_work``, ``src_hubs``), None when no gradient is
    needed; ``rev_dst [E]``, the destination of each reverse-CSC position (a static graph's, cached on it), or None
    (a graph rebuilt every call: the source pass reads ``dst_index[rev_to_csc[k]]``). Inputs, GATv2:
    ``x_src [Ns, H*C]``, ``x_dst [Nd, H*C]``, ``edge_attr [E, H*C]`` (COO) or None, ``attn_weights [H*C]``; or,
    with the edge projection fused (:func:`fuse_edge_projection`), the raw ``edge_attr [E, De]`` and
    ``lin_edge_weight [H*C, De]``, projected inside the kernels (None otherwise).
    Inputs, GAT: ``x_src``, ``x_dst`` (None where it is ``x_src`` itself, a homogeneous graph: both node scores from
    one read, one gradient), ``attn_weights [2*H*C + De] = att_src | att_dst | att_edge`` (the op reads the first
    ``2*H*C``: the node scores are its own) and the float32 edge scores ``score_edge [E, H]`` (COO) or None.
    ``dropout_mask [E, H]`` float32 (COO, any strides) or None.
    ``edge_grads``: on the fused path, which edge gradients the backward computes (bit 0: ``edge_attr``'s, bit 1:
    ``lin_edge_weight``'s; the others come back as empty tensors); 0 otherwise. ``gat_backward``:
    :attr:`TritonOptions.gat_backward`.
    """

    offsets: Tensor
    indices: Tensor
    map_csc_to_coo: Tensor | None
    row_work: Tensor
    row_hub_work: Tensor
    row_hubs: Tensor
    rev_offsets: Tensor | None
    rev_to_csc: Tensor | None
    dst_index: Tensor | None
    rev_dst: Tensor | None
    src_work: Tensor | None
    src_hub_work: Tensor | None
    src_hubs: Tensor | None
    num_src_nodes: int
    x_src: Tensor
    x_dst: Tensor | None
    edge_attr: Tensor | None
    lin_edge_weight: Tensor | None
    attn_weights: Tensor | None
    score_edge: Tensor | None
    dropout_mask: Tensor | None
    v2: bool
    heads: int
    concat: bool
    activation: str
    activation_alpha: float
    edge_grads: int
    gat_backward: str


@dataclass(frozen=True)
class TritonOptions:
    """The Triton backend's variants kept for measurement, passed explicitly to :func:`mha_gat` (the layers and the
    public ops always take the defaults).

    Attributes:
        gat_backward: GAT's backward: ``"auto"`` (the default), the rule of :func:`gat_one_gather`;
            ``"one_gather"``, :func:`_gat_backward`, one feature-row gather per edge (its source pass gathers
            ``dout_i``; the softmax row sums come from the saved per-head output); ``"two_gather"``, the backward
            GATv2 takes (the destination pass gathers ``x_j`` again for ``<dout_i, x_j>``, the source pass
            ``dout_i``). Decided when the forward runs, so a step's forward and backward agree. GATv2 ignores it.
    """

    gat_backward: str = "auto"

    def __post_init__(self) -> None:
        if self.gat_backward not in _GAT_BACKWARDS:
            raise ValueError(f"gat_backward must be one of {', '.join(map(repr, _GAT_BACKWARDS))}, "
                             f"got {self.gat_backward!r}")


_GAT_BACKWARDS = ("auto", "one_gather", "two_gather")
DEFAULT_OPTIONS = TritonOptions()


_SCHEMA_TYPES = {"Tensor": "Tensor", "Tensor | None": "Tensor?", "int": "int", "bool": "bool", "str": "str",
                 "float": "float"}

def _annotation(t: Any) -> str:
    """A field's annotation as written (a string, or a ForwardRef around one, depending on the Python version)."""
    return str(getattr(t, "__forward_arg__", t))


_FIELD_TYPES = {name: _annotation(t) for name, t in TritonCall.__annotations__.items()}
_TENSOR_FIELDS = tuple(i for i, t in enumerate(_FIELD_TYPES.values()) if t.startswith("Tensor"))
_SCALAR_FIELDS = tuple(i for i in range(len(TritonCall._fields)) if i not in _TENSOR_FIELDS)
_N_CALL = len(TritonCall._fields)
_N_PACKED = 2 + len(_SCALAR_FIELDS)
_SYM_INT_FIELDS = frozenset({"num_src_nodes"})
"""Scalar fields that follow the batch (a sampled block's node count): ``SymInt`` in the schema, so that
``torch.compile(dynamic=True)`` keeps them symbolic instead of recompiling for every value."""
_CALL_SCHEMA = "Tensor[] tensors, int present, " + ", ".join(
    f"{'SymInt' if name in _SYM_INT_FIELDS else _SCHEMA_TYPES[_FIELD_TYPES[name]]} {name}"
    for name in (TritonCall._fields[i] for i in _SCALAR_FIELDS))
_INPUT_NAMES = ("x_src", "x_dst", "edge_attr", "lin_edge_weight", "attn_weights", "score_edge")
_INPUT_FIELDS = tuple(TritonCall._fields.index(name) for name in _INPUT_NAMES)


def pack(call: TritonCall) -> tuple[Any, ...]:
    """The op arguments of ``call``: ``(tensors, present, *scalars)``.

    ``tensors`` lists the tensor fields that are not None, in field order; bit ``k`` of ``present`` is set when the
    ``k``-th tensor field is there; the scalar fields follow as they are. Why a list: torch's ``register_autograd``
    wrapper runs ``torch._library.utils.fill_defaults`` on every forward, which reads ``schema.arguments`` (a list
    torch rebuilds on each access) twice per argument, so its cost grows with the square of the argument count
    (8x less for these 9 than for 27 separate ones; figures in docs/performance.md). Why ``Tensor[]`` and a mask
    rather than ``Tensor?[]`` with None holes: torch (2.13) passes a list holding a None to the autograd Function as
    one opaque leaf, so the tensors in it would be silently cut from the autograd graph (pytorch/pytorch#187434)."""
    tensors: list[Tensor] = []
    present = 0
    for bit, i in enumerate(_TENSOR_FIELDS):
        t = cast("Tensor | None", call[i])
        if t is not None:
            tensors.append(t)
            present |= 1 << bit
    return (tensors, present, *(call[i] for i in _SCALAR_FIELDS))


def unpack(tensors: list[Tensor] | tuple[Tensor, ...], present: int, *scalars: Any) -> TritonCall:
    """The :class:`TritonCall` that :func:`pack` packed (``unpack(*pack(call)) == call``)."""
    if len(tensors) != present.bit_count() or present >> len(_TENSOR_FIELDS):
        raise ValueError(f"tensors must hold one tensor per bit set in present ({present:#x}, "
                         f"{len(_TENSOR_FIELDS)} tensor fields), got {len(tensors)} tensors")
    fields: list[Any] = [None] * _N_CALL
    it = iter(tensors)
    for bit, i in enumerate(_TENSOR_FIELDS):
        if present >> bit & 1:
            fields[i] = next(it)
    for i, value in zip(_SCALAR_FIELDS, scalars, strict=True):
        fields[i] = value
    return TritonCall(*fields)


_lib = torch.library.Library("cudnn_gnn", "FRAGMENT")
_lib.define(f"triton_gat_fwd({_CALL_SCHEMA}, bool return_attention) -> (Tensor, Tensor, Tensor, Tensor)")
_lib.define(f"triton_gat_bwd(Tensor grad_out, Tensor? grad_attention, Tensor lse, Tensor? out, Tensor scores, "
            f"{_CALL_SCHEMA}) -> ({', '.join(['Tensor'] * len(_INPUT_NAMES))})")


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def unavailable_reason(device: torch.device) -> str | None:
    """``None`` when the Triton kernels can run on tensors of ``device``, else what is missing and how to fix it.

    They run on CUDA with the ``triton`` package importable, and on any device under ``TRITON_INTERPRET=1``
    (Triton's interpreter, slow, for tests)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "the triton backend needs the triton package, which is not importable: pip install triton"
    if _interpreting():
        return None
    if torch.device(device).type != "cuda":
        return (f"the triton backend runs on CUDA tensors (or on any device with TRITON_INTERPRET=1 set before the "
                f"first call), got device {torch.device(device)}")
    if not torch.cuda.is_available():
        return "the triton backend needs a CUDA GPU, and torch.cuda.is_available() is False"
    return None


@functools.lru_cache(maxsize=1)
def _kernels() -> ModuleType:
    """The kernel module, imported on first use (Triton reads ``TRITON_INTERPRET`` when it decorates them)."""
    from cudnn_gnn.backends import _triton_kernels

    return _triton_kernels


def _check_runnable(device: torch.device) -> None:
    """Raise :func:`unavailable_reason`'s reason, if any, for tensors of ``device`` (a tensor's). Checked on every
    call (three times a step), so the common case returns first: a CUDA tensor exists only where CUDA does, and an
    imported ``triton`` is importable, so that is :func:`unavailable_reason`'s None without its environment read,
    device parse and CUDA query."""
    if device.type == "cuda" and sys.modules.get("triton") is not None:
        return
    reason = unavailable_reason(device)
    if reason is not None:
        raise RuntimeError(reason)


# ---------------------------------------------------------------------------------------------------- op: forward
def _sizes(c: TritonCall) -> tuple[int, int, int, int]:
    """``(Nd, E, H, C)``."""
    return c.offsets.shape[0] - 1, c.indices.shape[0], c.heads, c.x_src.shape[1] // c.heads


def _out_spec(c: TritonCall) -> tuple[tuple[int, int], torch.dtype]:
    """The shape and dtype of the op's output: ``[Nd, H*C]`` in the input dtype with ``concat``; without it GATv2's
    mean over heads ``[Nd, C]`` (input dtype), but GAT's per-head output ``[Nd, H*C]`` in float32, whose mean
    :func:`mha_gat` takes: autograd can then keep it for the backward (:func:`_delta_source`) and the forward op
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
    :func:`~cudnn_gnn.backends._triton_kernels.launch_node_scores` (each feature row read once in its own dtype,
    float32 sums; a homogeneous graph's rows once for both); an empty tensor for GATv2."""
    scores = torch.empty(_scores_shape(c), device=c.x_src.device, dtype=torch.float32)
    if not c.v2:
        assert c.attn_weights is not None  # build_call gives GAT its head vectors
        d = c.x_src.shape[1]
        _kernels().launch_node_scores(c.x_src, c.x_dst, c.attn_weights[:2 * d].contiguous(), c.heads,
                                      out=_split_scores(c, scores))
    return scores


def _fwd_impl(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(out, lse, attention or empty, scores)``; ``out`` as :func:`_out_spec` says, ``scores`` as
    :func:`_scores_shape` (kept for the backward)."""
    c = unpack(*args[:_N_PACKED])
    return_attention = bool(args[_N_PACKED])
    _check_runnable(c.x_src.device)
    nd, e, h, ch = _sizes(c)
    f32: dict[str, Any] = dict(device=c.x_src.device, dtype=torch.float32)
    out = c.x_src.new_empty(nd, h * ch) if c.concat else torch.empty(nd, h * ch, **f32)
    lse = torch.empty(nd, h, **f32)
    att = torch.empty(e, h, **f32) if return_attention else None
    scores = _node_scores(c)
    score_src, score_dst = _split_scores(c, scores)
    _kernels().launch_forward(
        c.offsets, c.indices, c.map_csc_to_coo, c.row_work, c.row_hub_work, c.row_hubs,
        c.x_src, c.x_dst if c.v2 else None, c.edge_attr, c.attn_weights if c.v2 else None,
        score_src, score_dst, c.score_edge, c.dropout_mask, out, lse, att,
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


# ---------------------------------------------------------------------------------------------------- op: backward
def _like(t: Tensor | None, fallback: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """A fresh contiguous tensor shaped like ``t`` (its dtype unless given), or an empty stand-in for None."""
    if t is None:
        return fallback.new_empty(0)
    return torch.empty(t.shape, dtype=dtype or t.dtype, device=t.device)


def gat_one_gather(c: TritonCall) -> bool:
    """Whether GAT's backward for the call ``c`` gathers one feature row per edge (:func:`_gat_backward`) or two.

    ``c.gat_backward`` (from :class:`TritonOptions`) forces either; ``"auto"`` (the default) takes the rule: one
    gather on a static graph (one whose call carries ``rev_dst``, see :func:`build_call`) with a feature tile at
    most 256 wide (``HG * BLOCK_C``, see :func:`~cudnn_gnn.backends._triton_kernels.block_sizes`: 8 x 32, 8 x 8),
    where its source pass has launch shapes
    tuned on the H200 and measured faster than two gathers; two gathers on a graph rebuilt every call (sampled
    blocks, whose sources have one or two out-edges: measured slower there with one) and on wider tiles. The
    measurements: docs/performance.md, "GAT's backward with one row gather". GATv2: always two."""
    if c.v2:
        return False
    if c.gat_backward != "auto":
        return c.gat_backward == "one_gather"
    # the feature width is a layer's (static) width; int() keeps a symbolic one from reaching the cached rule
    _, _, hg, block_c, _ = _kernels().block_sizes(c.heads, int(c.x_src.shape[1]) // max(c.heads, 1), False)
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
    _check_runnable(c.x_src.device)
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
    k = _kernels()
    k.launch_backward_dst(
        c.offsets, c.indices, c.map_csc_to_coo, c.row_work, c.row_hub_work, c.row_hubs,
        c.x_src, c.x_dst if c.v2 else None, c.edge_attr, c.attn_weights if c.v2 else None,
        score_src, score_dst, c.score_edge, c.dropout_mask, lse, dout,
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
    """GAT's backward with one feature-row gather per edge (:func:`~cudnn_gnn.backends._triton_kernels.
    launch_gat_backward`): a delta pass over the destinations (``delta_i = <dout_i, out_i> + sum_e alpha_e datt_e``
    per head: the rows of ``dout`` and ``out`` once per node, per edge only ``[E, H]`` data and only with an
    attention gradient), the source pass (``x_j`` once per source, ``dout_i`` gathered per out-edge: ``dx_j``,
    ``<dout_i, x_j>``, the softmax and score gradients, ``dz [E, H]`` written per edge), and a destination sum over
    ``dz`` (no indices or rows). A static graph without hubs launches three kernels; with hubs, four merges more.
    Returns ``(d_x_src, d_score_src, d_score_dst, d_score_edge)``, the attention's share of ``d_x_src`` only (see
    :func:`_fold_node_scores`)."""
    # narrowing for mypy: the caller checked the reverse CSC
    assert c.rev_to_csc is not None and c.dst_index is not None and c.src_work is not None
    assert c.src_hub_work is not None and c.src_hubs is not None
    empty = c.x_src.new_empty(0)
    d_x_src = _like(c.x_src, empty)
    d_score_src, d_score_dst = _like(score_src, empty), _like(score_dst, empty)
    d_score_edge = _like(c.score_edge, empty)
    _kernels().launch_gat_backward(
        c.offsets, c.indices, c.map_csc_to_coo, c.row_work, c.row_hub_work, c.row_hubs,
        c.rev_to_csc, c.dst_index, c.rev_dst, c.src_work, c.src_hub_work, c.src_hubs,
        c.x_src, score_src, score_dst, c.score_edge, c.dropout_mask, lse, out, grad_out.contiguous(),
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
    docs/performance.md, "The fold as a kernel"). ``attn_weights``' edge part ``att_edge`` gets zeros here (its
    gradient flows through the edge scores, computed outside the op)."""
    assert c.attn_weights is not None  # build_call gives GAT its head vectors
    fold = _fold_node_scores if one_gather else _fold_node_scores_gemm
    d_x_src, d_x_dst, d_a = fold(c, d_x_src, d_score_src, d_score_dst)
    pad = c.attn_weights.shape[0] - d_a.shape[0]
    d_w = (torch.cat([d_a, d_a.new_zeros(pad)]) if pad else d_a).to(c.attn_weights.dtype)
    empty = c.x_src.new_empty(0)
    return d_x_src, d_x_dst, empty, empty.new_empty(0), d_w, d_score_edge


def _fold_node_scores(c: TritonCall, d_x_src: Tensor, d_score_src: Tensor,
                      d_score_dst: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(d_x_src, d_x_dst, d_a)`` of GAT's op from the kernels' ``d_x_src`` (the attention's share, a buffer of this
    call, updated in place) and the float32 node-score gradients ``[Ns, H]``, ``[Nd, H]``; ``d_a [2*H*C]`` float32,
    the gradient of ``att_src | att_dst``.

    ``score_s[n, h] = a_s[h] . x_s[n, h]``, so ``d x_s[n, h, :] += d score_s[n, h] a_s[h]`` and ``d a_s[h] = sum_n
    d score_s[n, h] x_s[n, h]``: one launch of :func:`~cudnn_gnn.backends._triton_kernels.
    launch_node_scores_backward`, which reads each feature row once, adds both terms to ``d_x_src`` where it lies on a
    homogeneous graph (``x_dst`` None: no second ``[N, H*C]`` gradient, no sum of two) or writes ``d_x_dst`` where
    ``x_dst`` is its own tensor, and returns the head vectors' gradient."""
    assert c.attn_weights is not None  # build_call gives GAT its head vectors
    d = c.x_src.shape[1]
    d_x_dst = d_x_src.new_empty(0) if c.x_dst is None else _like(c.x_dst, d_x_src)
    d_a = _kernels().launch_node_scores_backward(
        c.x_src, c.x_dst, c.attn_weights[:2 * d].contiguous(), c.heads, d_score_src, d_score_dst, d_x_src,
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
    att_dst`` (the first ``2*H*C`` entries of ``attn_weights``): both block-diagonal score matrices side by side,
    by one broadcast multiply (:func:`_fold_node_scores_gemm`' GEMMs)."""
    a = attn_weights[:2 * d].float().view(2, heads, d // heads)
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
    span = edge_span(c.indices.shape[0])
    part = None
    if d_edge_weight.numel():
        part = torch.zeros(-(-c.indices.shape[0] // span), *c.lin_edge_weight.shape, device=c.x_src.device,
                           dtype=torch.float32)
    _kernels().launch_backward_edge(
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


# ---------------------------------------------------------------------------------------------------- autograd
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
    """The registered op's forward and backward (:func:`_fwd_impl`, :func:`_bwd_impl`, the same code) as a plain
    autograd Function, for eager calls: no dispatcher round trip and no ``register_autograd`` wrapper (its
    ``fill_defaults`` and pytree passes), which on small graphs cost more host time than the kernels take (see
    docs/performance.md). ``torch.compile`` traces the registered op instead (:func:`mha_gat` picks).

    ``apply(call, return_attention, *inputs)``, ``inputs`` the :data:`_INPUT_NAMES` fields of ``call`` (its own
    tensors again, passed one by one so that autograd tracks them). Returns
    ``(out, attention)`` (an empty, non-differentiable stand-in without ``return_attention``)."""

    @staticmethod
    def forward(ctx, call: TritonCall, return_attention: bool, *inputs: Tensor | None  # type: ignore[override]
                ) -> tuple[Tensor, Tensor]:
        tensors, *packed = pack(call)
        out, lse, att, scores = _fwd_impl(tensors, *packed, return_attention)
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


# ---------------------------------------------------------------------------------------------------- entry
MIN_CHUNK_E = 256
MAX_CHUNK_E = 1024
"""Bounds of the chunk size of :func:`chunk_size` (module globals so that tests can force tiny chunks)."""


def chunk_size(num_edges: int) -> int:
    """The most edges one program walks, ``B = clamp(next_pow2(ceil(E / 4096)), MIN_CHUNK_E, MAX_CHUNK_E)``.

    Rows (and, in the backward source pass, sources) with more than ``B`` edges are cut into chunks of ``B``. Why:
    a program's time grows with its edge count, and the kernel ends with its longest program; with ``B >= E / 4096``
    there are at most ~4096 full chunks, several waves of the ~1-2k programs an H200 keeps resident, so a hub no
    longer sets the tail, while a chunk of at least 256 edges (4 to 128 big blocks) amortises its partial-state write
    and the merge. arxiv (1.17M edges): 512; Cora: 256; products-sized graphs: 1024. Depends on ``E`` only, so the
    work list built for a graph stays valid."""
    return max(MIN_CHUNK_E, min(MAX_CHUNK_E, _pow2_cover(num_edges, 4096, MAX_CHUNK_E, start=MIN_CHUNK_E)))


def _next_pow2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for ``n <= 1``), without importing triton."""
    return 1 << max(0, (n - 1).bit_length())


def _pow2_cover(total: int, per: int, cap: int | None = None, *, start: int = 1) -> int:
    """``max(s, _next_pow2(ceil(total / per)))``, or the first power of two ``>= cap`` if that is smaller, where
    ``s`` is the largest power of two ``<= start`` (callers that clamp below at ``start`` lose nothing). By
    comparisons only: with a symbolic ``total`` (a sampled block's edge count under ``torch.compile(dynamic=True)``)
    each one is a range guard that every batch of a similar size passes, where ``bit_length`` would pin the exact
    count and recompile for every batch; starting at ``s`` keeps the guards to the thresholds that matter."""
    p = 1 << max(0, start.bit_length() - 1)
    while p * per < total and (cap is None or p < cap):
        p *= 2
    return p


# ---------------------------------------------------------------------------------------------------- GATv2 edges
MAX_FUSED_EDGE_DIM = 16
MAX_FUSED_TILE = 4096
MAX_FUSED_WIDTH = 1024
FUSED_EXTRA_SHARE = 0.25
EDGE_PROGRAMS = 2048
MIN_EDGE_SPAN = 256
"""The fused GATv2 edge projection's bounds (module globals, so that tests can move them; see
:func:`fuse_edge_projection` and :func:`edge_span`)."""


def edge_span(num_edges: int) -> int:
    """The CSC positions one program of the fused edge backward takes: ``max(MIN_EDGE_SPAN, next_pow2(ceil(E /
    EDGE_PROGRAMS)))``, so ``P = ceil(E / span)`` programs, at most ``EDGE_PROGRAMS`` (a wave or two of an H200's
    resident programs) and at most one per ``MIN_EDGE_SPAN`` edges: the ``[P, H*C, De]`` gradient partials stay a
    small multiple of ``H*C*De`` and at most ``4 * De / (MIN_EDGE_SPAN * element size)`` of an ``[E, H*C]``
    buffer."""
    return max(MIN_EDGE_SPAN, _pow2_cover(num_edges, EDGE_PROGRAMS, start=MIN_EDGE_SPAN))


def fuse_edge_projection(num_edges: int, heads: int, dim: int, dim_edge: int, elem_bytes: int,
                         needs_grad: bool) -> bool:
    """Whether the Triton kernels project GATv2's raw edge features themselves (the fused path: ``edge_attr [E, De]``
    and ``lin_edge_weight [H*C, De]`` in, nothing of size ``[E, H*C]`` allocated forward or backward) rather than
    take ``edge_attr @ lin_edge_weight^T`` computed by torch first (the projected path). The one rule; all of:

    - ``De <= MAX_FUSED_EDGE_DIM`` (16): every kernel unrolls a loop of ``De`` steps per edge block, each one
      more gather of an element a row and a multiply-add over the feature tile; past 16 that arithmetic rivals the
      row gathers the kernels are bound by, and the raw rows approach the projected ones in size.
    - the edge backward's tile, all heads in one program (``W = next_pow2(H) * next_pow2(C) <= MAX_FUSED_WIDTH``,
      1024), with its ``[next_pow2(De), W]`` float32 partial of the weight gradient in registers
      (``<= MAX_FUSED_TILE``, 4096: 32 a thread at 4 warps). The edge gradient ``dz_e W`` sums over every head.
    - without gradients, nothing else (the fused forward allocates nothing); with them, the extra memory, the
      weight gradient's partials ``[P, H*C, De]`` float32 (``P`` programs, :func:`edge_span`), at most
      ``FUSED_EXTRA_SHARE`` (a quarter) of the ``[E, H*C]`` buffer of ``elem_bytes`` elements it removes (of two:
      the projection and its gradient). Only tiny graphs fail this one.
    """
    width = _next_pow2(heads) * _next_pow2(dim // max(heads, 1))
    if not 1 <= dim_edge <= MAX_FUSED_EDGE_DIM or width > MAX_FUSED_WIDTH or _next_pow2(dim_edge) * width > MAX_FUSED_TILE:
        return False
    if not needs_grad:
        return True
    partials = -(-num_edges // edge_span(num_edges)) * dim * dim_edge * 4
    return partials <= FUSED_EXTRA_SHARE * num_edges * dim * elem_bytes


def gatv2_edge_inputs(x_src: Tensor, heads: int, edge_attr: Tensor | None, lin_edge_weight: Tensor | None,
                      needs_grad: bool) -> tuple[Tensor | None, Tensor | None]:
    """GATv2's ``(edge_attr, lin_edge_weight)`` for :func:`build_call`: as given where :func:`fuse_edge_projection`
    takes the fused path, else ``(edge_attr @ lin_edge_weight^T, None)`` (torch's linear, differentiable; both
    operands in their promoted dtype). Without ``lin_edge_weight``, ``edge_attr`` passes as it is. The partials are
    the weight gradient's: the rule counts them only where the weight requires grad."""
    if edge_attr is None or lin_edge_weight is None:
        return edge_attr, None
    dtype = torch.promote_types(edge_attr.dtype, lin_edge_weight.dtype)
    if fuse_edge_projection(edge_attr.shape[0], heads, x_src.shape[1], edge_attr.shape[1], dtype.itemsize,
                            needs_grad and lin_edge_weight.requires_grad):
        return edge_attr, lin_edge_weight
    return project_edges(edge_attr, lin_edge_weight), None


class WorkList(NamedTuple):
    """The programs of one pass over a CSC (or reverse CSC) ``offsets [N+1]``, with rows of more than ``B`` edges
    cut into chunks of ``B`` (the last one shorter). All int64, fixed shapes (from ``N``, ``E`` and ``B`` alone,
    unless :func:`work_list` is told that no row is longer than ``B``: then ``P = N`` and ``S = R = 0``). Every row
    whole in row order (``whole_rows``): ``work`` is ``offsets`` itself, 1-D in its own dtype (item ``i`` is row
    ``i``, no list built; the kernels' ``WHOLE``, see :func:`~cudnn_gnn.backends._triton_kernels.n_items`), and
    ``S = R = 0``.

    ``work [P, 4]`` (``P = N + E // B``): ``(row, start, end, slot)``, heaviest first (by ``end - start``; ties in
    row order); ``slot == -1``: the whole row, its results written in place;
    ``slot >= 0``: a chunk of a hub row, its partial results in slot ``slot``; ``slot == -2``: padding (empty,
    writes nothing). A row with no edges is one empty whole item (it writes zeros). ``hub_work [S, 4]`` (``S = E //
    B + R``): the chunk items in slot order, then padding. ``hubs [R, 3]`` (``R = min(N, E // (B + 1))``): ``(row,
    first slot, chunk count)`` per hub row in row order, then padding rows with count 0. A hub row's slots are
    consecutive, in the order of its edges."""

    work: Tensor
    hub_work: Tensor
    hubs: Tensor


def work_list(offsets: Tensor, num_edges: int, chunk: int, max_degree: int | None = None, *,
              whole_rows: bool = False) -> WorkList:
    """Build the :class:`WorkList` of ``offsets`` with chunks of at most ``chunk`` edges; fixed-shape torch ops only
    (no host sync, traceable by ``torch.compile``).

    ``max_degree``, the largest row length where the caller knows it (a static graph's cached
    :meth:`~cudnn_gnn.CscGraph.max_degrees`): with no row longer than ``chunk`` the lists hold no chunk, padding or
    hub entries (``P = N``, ``S = R = 0``), so the launchers skip every hub launch (merges, the backward's pass-1
    launch): on a small graph, six of a step's nine launches; heaviest row first (one sort). ``whole_rows``: every
    row one item whatever its length, in row order (a long row walked whole by one program: right for any lengths,
    fast while rows are short, and then their order hardly matters): a graph marked ``short_rows``, such as a
    sampled block, for its destinations and its sources, rebuilt every call: the offsets are the list, no op at all.
    The known-degree list takes about ten small ops, the chunked list about seventy (sixty of them kernel
    launches), which counts on a host-bound sampled step. Unknown (``None``): the upper bounds above."""
    n = offsets.shape[0] - 1
    dev = offsets.device
    i64: dict[str, Any] = dict(device=dev, dtype=torch.int64)
    no_hubs = torch.empty(0, 4, **i64), torch.empty(0, 3, **i64)  # empty: nothing to fill, no kernel
    if whole_rows:  # rows in row order: the offsets are the list (a graph rebuilt every call builds nothing)
        return WorkList(offsets, *no_hubs)
    if n == 0:
        return WorkList(torch.empty(0, 4, **i64), *no_hubs)
    off = offsets.long()
    if max_degree is not None and max_degree <= chunk:
        row = torch.argsort(off.diff(), descending=True, stable=True)  # heaviest first, ties in row order
        work = torch.stack([row, off[row], off[row + 1], torch.full_like(row, -1)], 1)
        return WorkList(work, *no_hubs)
    r_max = min(n, num_edges // (chunk + 1))
    s_max = num_edges // chunk + r_max
    n_chunks = ((off.diff() + (chunk - 1)) // chunk).clamp_min(1)
    cum = n_chunks.cumsum(0)
    hub_slots = n_chunks * (n_chunks > 1)  # a hub row's chunk count, 0 for a whole row
    slot0 = hub_slots.cumsum(0) - hub_slots
    # per row: first item, first and last edge, first slot (-1: a whole row); one gather per item below
    table = torch.stack([cum - n_chunks, off[:-1], off[1:], torch.where(hub_slots > 0, slot0, -1)])
    p = torch.arange(n + num_edges // chunk, **i64)
    row = torch.searchsorted(cum, p, right=True).clamp_max(n - 1)
    first, lo, hi, s0 = table[:, row].unbind(0)
    k = p - first
    start = lo + k * chunk
    end = torch.minimum(start + chunk, hi)
    valid = p < cum[-1]
    padding = torch.where(torch.arange(4, **i64) == 3, -2, 0)  # (0, 0, 0, -2), made on the device: no copy, no sync
    items = torch.where(valid[:, None], torch.stack([row, start, end, torch.where(s0 >= 0, s0 + k, -1)], 1), padding)
    work = items[torch.argsort(torch.where(valid, end - start, -1), descending=True, stable=True)]
    hub_work = items[torch.argsort((items[:, 3] < 0).to(torch.int8), stable=True)[:s_max]]
    hub_work = torch.where(hub_work[:, 3:] >= 0, hub_work, padding)  # empty ranges: the padding does no work
    hub_rows = torch.argsort((hub_slots == 0).to(torch.int8), stable=True)[:r_max]
    hubs = torch.stack([hub_rows, slot0[hub_rows], hub_slots[hub_rows]], 1)
    return WorkList(work, hub_work, hubs)


def _score_matrix(a: Tensor, heads: int) -> Tensor:
    """``[H*C, H]`` float32 block-diagonal matrix of the per-head vectors ``a [H*C]`` (column ``h`` holds head
    ``h``'s vector in rows ``h*C .. h*C+C-1``), by one broadcast multiply with the identity: cheaper on the host than
    ``torch.block_diag`` over ``H`` pieces, which counts on small, host-bound graphs (docs/performance.md)."""
    width = a.shape[0] // heads
    eye = torch.eye(heads, device=a.device, dtype=torch.float32)
    return (a.float().view(heads, width, 1) * eye.view(heads, 1, heads)).reshape(heads * width, heads)


class _Scores(torch.autograd.Function):
    """``x [N, D] @ m [D, K]`` as float32 ``[N, K]``, with a backward in ``x``'s own dtype.

    Plain ``x.float() @ m`` on 16-bit ``x`` would keep the float32 copy of ``x`` for the backward (``[N, D]``, twice
    the size of ``x``) and return the gradient of ``x`` as a float32 ``[N, D]`` GEMM output cast back to ``x``'s
    dtype. Here the backward saves ``x`` itself and runs both GEMMs in ``x``'s dtype (float32 accumulation inside
    the GEMM; the ``[N, K]`` score gradient rounded to that dtype first): ``d_x = g m^T`` straight in ``x``'s dtype,
    ``d_m = x^T g`` returned in float32. For float32 ``x`` this is exactly the plain product."""

    @staticmethod
    def forward(ctx, x: Tensor, m: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, m)
        with torch.autocast(x.device.type, enabled=False):  # float32 scores under autocast too
            return x.float() @ m

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor | None]:  # type: ignore[override]
        x, m = ctx.saved_tensors
        g = g.to(x.dtype)
        d_x = g @ m.to(x.dtype).t() if ctx.needs_input_grad[0] else None
        d_m = (x.t() @ g).float() if ctx.needs_input_grad[1] else None
        return d_x, d_m


def _edge_scores(x: Tensor, a: Tensor, heads: int) -> Tensor:
    """``[E, H]`` float32 ``sum_c x[e, h, c] * a[h, c]`` (GAT's edge scores from its edge features ``[E, H*C']``),
    as one GEMM with :func:`_score_matrix`: ``x`` is read once and no ``[E, H, C']`` product is materialised (forward
    or backward; see :class:`_Scores`)."""
    return _Scores.apply(x, _score_matrix(a, heads))


def build_call(
    graph: CscGraph,
    x_src: Tensor,
    x_dst: Tensor,
    attn_weights: Tensor,
    edge_attr: Tensor | None,
    dropout_mask: Tensor | None,
    *,
    v2: bool,
    heads: int,
    concat: bool,
    activation_name: str,
    activation_alpha: float,
    return_attention: bool,
    needs_grad: bool,
    lin_edge_weight: Tensor | None = None,
    options: TritonOptions = DEFAULT_OPTIONS,
) -> TritonCall:
    """The op's arguments for :func:`mha_gat`'s inputs: GAT's node and edge scores computed (differentiably), the
    per-graph work lists taken from the graph's cache (built on first use), the reverse CSC only if ``needs_grad``.
    ``lin_edge_weight`` (GATv2): the fused path's projection weight, ``edge_attr`` then raw (see
    :func:`gatv2_edge_inputs`, which decides)."""
    g = graph
    chunk = chunk_size(g.num_edges)

    def largest_degree(side: int) -> int | None:
        """A static graph's largest in- (0) or out-degree (1), so that its work lists can drop the hub launches where
        no row is longer than a chunk: one sync the first time, cached on the graph, and asked only when a list is
        built. None for a graph rebuilt every call (sampled blocks) or while tracing."""
        degrees = None if torch.compiler.is_compiling() else g.max_degrees()
        return None if degrees is None else degrees[side]

    rows = g.derived(("triton", "row_work", chunk),
                     lambda: work_list(g.offsets, g.num_edges, chunk, largest_degree(0), whole_rows=g.short_rows))
    rev_offsets = rev_to_csc = dst_index = rev_dst = None
    src_work = src_hub_work = src_hubs = None
    if needs_grad:
        rev_offsets, rev_to_csc = g.reverse_csc()
        dst_index = g.dst_index
        # a static graph's source pass reads each out-edge's destination from rev_dst (built once, cached on the
        # graph: E indices more); a graph rebuilt every call reads dst_index[rev_to_csc[k]] (one dependent load
        # more per edge, but no launch a step to build it)
        if not g.rebuilt_every_call:
            rev_dst = g.reverse_dst()
        src_work, src_hub_work, src_hubs = g.derived(
            ("triton", "src_work", chunk),
            lambda: work_list(g.reverse_csc()[0], g.num_edges, chunk, largest_degree(1), whole_rows=g.short_rows))
    needs_map = edge_attr is not None or dropout_mask is not None or return_attention
    edge_map = g.map_csc_to_coo if needs_map else None
    d = x_src.shape[1]
    edge_grads = 0
    if v2:
        if lin_edge_weight is not None and edge_attr is not None:
            edge_grads = int(edge_attr.requires_grad) | 2 * int(lin_edge_weight.requires_grad)
        inputs: dict[str, Any] = dict(
            x_src=x_src.contiguous(), x_dst=x_dst.contiguous(),
            edge_attr=None if edge_attr is None else edge_attr.contiguous(),
            lin_edge_weight=None if lin_edge_weight is None else lin_edge_weight.contiguous(),
            attn_weights=attn_weights.contiguous(), score_edge=None)
    else:
        score_edge = None
        if edge_attr is not None:
            score_edge = _edge_scores(edge_attr, attn_weights[2 * d:], heads).contiguous()
        inputs = dict(x_src=x_src.contiguous(), x_dst=None if x_dst is x_src else x_dst.contiguous(),
                      edge_attr=None, lin_edge_weight=None, attn_weights=attn_weights.contiguous(),
                      score_edge=score_edge)
    return TritonCall(
        offsets=g.offsets, indices=g.indices, map_csc_to_coo=edge_map,
        row_work=rows.work, row_hub_work=rows.hub_work, row_hubs=rows.hubs,
        rev_offsets=rev_offsets, rev_to_csc=rev_to_csc, dst_index=dst_index, rev_dst=rev_dst,
        src_work=src_work, src_hub_work=src_hub_work, src_hubs=src_hubs,
        num_src_nodes=g.num_src_nodes, **inputs,
        dropout_mask=None if dropout_mask is None else dropout_mask.float(),
        v2=v2, heads=heads, concat=concat, activation=activation_name, activation_alpha=float(activation_alpha),
        edge_grads=edge_grads, gat_backward=options.gat_backward)


def mha_gat(
    graph: CscGraph,
    x_src: Tensor,
    x_dst: Tensor,
    attn_weights: Tensor,
    edge_attr: Tensor | None,
    dropout_mask: Tensor | None,
    *,
    v2: bool,
    heads: int,
    concat: bool,
    activation_name: str,
    activation_alpha: float,
    return_attention: bool,
    lin_edge_weight: Tensor | None = None,
    options: TritonOptions = DEFAULT_OPTIONS,
) -> tuple[Tensor, Tensor | None]:
    """GAT / GATv2 attention on the Triton kernels; the contract of :func:`cudnn_gnn.backends.reference.mha_gat`.

    Args:
        graph: destination-major CSC graph, int32 or int64 indices, on the features' device.
        x_src: ``[Ns, H*C]`` float32 / float16 / bfloat16 projected source features; ``x_dst``: ``[Nd, H*C]``
            (may be a view of ``x_src``'s first rows).
        attn_weights: GAT ``[2*H*C + De]`` = ``att_src | att_dst | att_edge``; GATv2 ``[H*C]``.
        edge_attr: ``[E, De]`` (GAT, ``De % H == 0``) or ``[E, H*C]`` (GATv2), COO order, or None; GATv2 with
            ``lin_edge_weight``: raw ``[E, De]``.
        dropout_mask: ``[E, H]`` float32 multiplicative factors in COO order (any strides), or None.
        v2, heads, concat, activation_name, activation_alpha: as in the reference backend.
        return_attention: also return the ``[E, H]`` float32 post-softmax, post-dropout coefficients (COO order);
            without it they are never materialised.
        lin_edge_weight: GATv2 ``[H*C, De]`` (PyG's ``lin_edge.weight``): the edge term is ``edge_attr @
            lin_edge_weight^T``, projected inside the kernels where :func:`fuse_edge_projection` allows (no
            ``[E, H*C]`` tensor, forward or backward), else by torch before them.
        options: the variants kept for measurement (:class:`TritonOptions`); the defaults everywhere else.

    Returns:
        ``(out, attention or None)``: ``out`` ``[Nd, H*C]`` (concat) or ``[Nd, C]`` in the input dtype.
        Everything is differentiable in ``x_src``, ``x_dst``, ``attn_weights``, ``edge_attr`` and ``lin_edge_weight``.

    Cost: one kernel launch forward (plus, for GAT, the ``[N, H]`` node scores; plus a merge launch where the work
    list may hold hub rows); backward, GAT three (a light delta pass, the source pass, a light destination sum; only
    the source pass gathers feature rows), GATv2 two (plus, where the lists may hold hub rows or sources, a pass-1
    launch over the hub chunks), and small merge launches where they may hold hubs. GAT keeps its per-head output
    ``[Nd, H*C]`` (the input dtype with ``concat``, float32 without) from the forward to the backward (see
    :func:`_delta_source`); float32 accumulation; bitwise repeatable (no atomics, every merge in a fixed
    order). A static graph's work lists know its largest degrees and hold hub entries only where a row (source) has
    more than :func:`chunk_size` edges; a graph rebuilt every call (a sampled block), or one traced by
    ``torch.compile``, gets lists sized for the worst case. Per graph, built once and cached on it: the work lists
    (rows, and for the backward sources, cut into chunks, heaviest first), its largest degrees (one host sync, the
    first time), and for the backward the reverse CSC (one sort of the sources). No host sync per call after the
    first.

    Raises:
        NotImplementedError: float64 inputs (use the reference backend).
        RuntimeError: the kernels cannot run on this device (see :func:`unavailable_reason`).
    """
    if x_src.dtype == torch.float64:
        raise NotImplementedError("x_src must be float32, float16 or bfloat16 for the triton backend, got float64")
    if not torch.compiler.is_compiling():
        _check_runnable(x_src.device)
    tensors = (x_src, x_dst, attn_weights, edge_attr, lin_edge_weight)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    edge_attr, lin_edge_weight = gatv2_edge_inputs(x_src, heads, edge_attr, lin_edge_weight, needs_grad)
    call = build_call(graph, x_src, x_dst, attn_weights, edge_attr, dropout_mask, v2=v2, heads=heads, concat=concat,
                      activation_name=activation_name, activation_alpha=activation_alpha,
                      return_attention=return_attention, needs_grad=needs_grad, lin_edge_weight=lin_edge_weight,
                      options=options)
    if torch.compiler.is_compiling():
        out, _, att, _ = torch.ops.cudnn_gnn.triton_gat_fwd(*pack(call), return_attention)
    else:
        out, att = _EagerAttention.apply(call, return_attention, *(call[i] for i in _INPUT_FIELDS))
    if not v2 and not concat:  # GAT's op returns the float32 per-head output (_out_spec)
        out = out.view(out.shape[0], heads, x_src.shape[1] // heads).mean(1).to(x_src.dtype)
    return out, (att if return_attention else None)


class TritonBackend:
    """The Triton kernels behind the backend interface (:class:`cudnn_gnn.backends.GatBackend`)."""

    name = "triton"
    # hub rows are cut into chunks of at most chunk_size(E) edges inside the backend (a work list per graph,
    # partial states merged in a fixed order), so the time does not follow the largest degree: no graph rewrite
    splits_hubs = False

    def unavailable(self, device: torch.device) -> tuple[str, str] | None:
        reason: str | None
        if device.type == "cuda":
            reason = None if triton_available() else backend_info().triton_reason or "the Triton kernels do not run"
        else:
            reason = unavailable_reason(device)  # runs under TRITON_INTERPRET=1 only
        if reason is None:
            return None
        fix = "pip install triton" if "not importable" in reason else "use CUDA tensors, or backend='reference'"
        return reason, fix

    def unsupported(self, spec: AttentionSpec) -> str | None:
        if spec.dtype == torch.float64:
            return f"backend='triton' supports float32, float16 and bfloat16, got {spec.dtype}"
        return None

    def kernel_graph(self, spec: AttentionSpec, graph: CscGraph) -> CscGraph:
        return graph  # the kernels take int32 or int64 indices and compute every offset in int64

    def failed_to_launch_before(self, spec: AttentionSpec, graph: CscGraph) -> bool:
        return False

    def run(self, spec: AttentionSpec, graph: CscGraph) -> tuple[Tensor, Tensor | None]:
        return mha_gat(graph, spec.x_src, spec.x_dst, spec.attn_weights, spec.edge_attr, spec.dropout_mask,
                       v2=spec.v2, heads=spec.heads, concat=spec.concat, activation_name=spec.activation,
                       activation_alpha=spec.activation_alpha, return_attention=spec.return_attention,
                       lin_edge_weight=spec.lin_edge_weight)


BACKEND = TritonBackend()
