"""One Triton call, in two halves: :class:`TritonGraph`, the graph as the kernels walk it (its arrays and work lists;
for the backward the reverse CSC, ``rev_dst`` and the source work list), built by :func:`kernel_graph` once per graph
and kept on it, what the planner hands the backend; and the call records :class:`GatCall` / :class:`Gatv2Call` (and
the backward's :class:`SourceWalk`), the validated spec's inputs as the kernels take them next to that graph's arrays
(GAT's edge scores, the options), built by :func:`build_call`. A record is its op's argument list (the schema is
derived from its fields, :func:`op_schema`) and what the launchers read, by field name: one call, written once, from
the spec down to the launch."""


from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_gnn._philox import keep_threshold
from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.backends.triton.worklists import WorkList, work_list
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.spec import AttentionSpec, gat_attention_parts

__all__ = ["DEFAULT_OPTIONS", "GatCall", "Gatv2Call", "KernelDropout", "SourceWalk", "TritonBackward", "TritonGraph",
           "TritonOptions", "build_call", "built_kernel_graph", "gatv2_edge_inputs", "kernel_graph", "offset_shapes",
           "op_schema", "scoped_options", "tensor_fields", "use_options"]


class KernelDropout(NamedTuple):
    """The kernels' dropout argument group (``drop_ptr, drop_thr`` in their signatures): ``tensor``, the int64 seed
    ``[1]`` of counter-based dropout, the uint8 keep flags ``[E, H]`` (CSC order) its forward drew, which the
    backward reads in place of the seed, or explicit float32 factors ``[E, H]`` in CSC order; ``threshold``, the keep
    threshold (:func:`cudnn_gnn._philox.keep_threshold`; the kernels derive the scale from it,
    :func:`cudnn_gnn._philox.keep_scale`), 0 and unread with explicit factors."""

    tensor: Tensor
    threshold: int


def _kernel_dropout(spec: AttentionSpec, graph: TritonGraph) -> KernelDropout | None:
    """``spec``'s dropout as the kernels take it: the seed (counter-based), or the explicit mask gathered once into
    CSC order (contiguous ``[E, H]`` float32, so each program reads its row's factors as one run, not one scattered
    COO row per edge), or None."""
    if spec.dropout_seed is not None:
        return KernelDropout(spec.dropout_seed, keep_threshold(spec.dropout))
    mask = spec.dropout_mask
    if mask is None:
        return None
    mask = mask.float()
    if graph.map_csc_to_coo is not None:
        mask = mask.index_select(0, graph.map_csc_to_coo)
    return KernelDropout(mask.contiguous(), 0)


class TritonBackward(NamedTuple):
    """What the backward's source pass walks, over the reverse CSC of a :class:`TritonGraph`'s graph.

    ``rev_offsets [Ns+1]``, ``rev_to_csc [E]`` (:meth:`~cudnn_gnn.CscGraph.reverse_csc`), ``dst_index [E]``, the
    source work list ``src`` over ``rev_offsets`` (:class:`WorkList`), and ``rev_dst [E]``, the destination of each
    reverse-CSC position (:meth:`~cudnn_gnn.CscGraph.reverse_dst`), for a static graph only: a graph rebuilt every
    call (a sampled block) gets None, and its source pass reads ``dst_index[rev_to_csc[k]]`` (one dependent load
    more per edge, but no launch a step to build it)."""

    rev_offsets: Tensor
    rev_to_csc: Tensor
    dst_index: Tensor
    rev_dst: Tensor | None
    src: WorkList


@dataclass(frozen=True, eq=False)
class TritonGraph:
    """A graph as the Triton kernels walk it: what :meth:`TritonBackend.kernel_graph
    <cudnn_gnn.backends.triton.TritonBackend.kernel_graph>` returns and the run path reads, so that a call asks the
    graph for nothing more (built by :func:`kernel_graph`, kept on the graph).

    Attributes:
        source: a weak reference to the CSC graph it was built from (int32 or int64 indices: the kernels compute
            offsets in the width each call's sizes need, :func:`~cudnn_gnn.backends.triton.tuning.int64_offsets`),
            which keeps it: a strong one would make the two a reference cycle, and a sampled block's tensors would
            then outlive its step until Python's cycle collector ran.
        chunk: the most edges a program walks (:func:`~cudnn_gnn.backends.triton.tuning.chunk_size`).
        offsets, indices, map_csc_to_coo, num_src_nodes: the graph's, as the kernels read them.
        rows: the forward's (and the backward's destination pass') work list over ``offsets``.
    """

    source: weakref.ReferenceType[CscGraph]
    chunk: int
    offsets: Tensor
    indices: Tensor
    map_csc_to_coo: Tensor | None
    num_src_nodes: int
    rows: WorkList

    @property
    def num_edges(self) -> int:
        return self.indices.shape[0]

    @property
    def graph(self) -> CscGraph:
        """The graph this was built from (alive while anything reads this: the graph keeps it)."""
        graph = self.source()
        if graph is None:
            raise RuntimeError("graph must be alive to build a kernel graph's backward structures, got a TritonGraph "
                               "whose CscGraph was freed: keep the graph, or call kernel_graph(graph) again")
        return graph

    def backward(self) -> TritonBackward:
        """The reverse CSC and the source work list (:class:`TritonBackward`), built the first time a backward
        needs them and kept on the graph (through :meth:`~cudnn_gnn.CscGraph.derived`, so a call traced by
        ``torch.compile`` keeps nothing)."""
        return self.graph.derived(("triton", "backward", self.chunk), self._build_backward)

    def backward_if_built(self) -> TritonBackward | None:
        """What :meth:`backward` returns, or None where no backward has built it yet."""
        return self.graph.derived_if_built(("triton", "backward", self.chunk))

    def _build_backward(self) -> TritonBackward:
        g = self.graph
        rev_offsets, rev_to_csc = g.reverse_csc()
        src = work_list(rev_offsets, g.num_edges, self.chunk, _largest_degree(g, 1), whole_rows=g.short_rows)
        # a static graph's source pass reads each out-edge's destination from rev_dst (E indices more, once)
        rev_dst = None if g.rebuilt_every_call else g.reverse_dst()
        return TritonBackward(rev_offsets, rev_to_csc, g.dst_index, rev_dst, src)

    @classmethod
    def build(cls, graph: CscGraph, chunk: int) -> TritonGraph:
        """The graph's arrays and its row work list with chunks of ``chunk`` edges (see :func:`kernel_graph`)."""
        rows = work_list(graph.offsets, graph.num_edges, chunk, _largest_degree(graph, 0),
                         whole_rows=graph.short_rows)
        return cls(weakref.ref(graph), chunk, graph.offsets, graph.indices, graph.map_csc_to_coo, graph.num_src_nodes,
                   rows)


def _largest_degree(graph: CscGraph, side: int) -> int | None:
    """A static graph's largest in- (0) or out-degree (1), so that its work lists can drop the hub launches where no
    row is longer than a chunk: one sync the first time, cached on the graph, and asked only when a list is built.
    None for a graph rebuilt every call (sampled blocks) or while tracing."""
    degrees = None if torch.compiler.is_compiling() else graph.max_degrees()
    return None if degrees is None else degrees[side]


def kernel_graph(graph: CscGraph) -> TritonGraph:
    """``graph`` as the Triton kernels walk it (:class:`TritonGraph`), built on first use and kept on the graph
    (:meth:`~cudnn_gnn.CscGraph.derived`: nothing is kept from a call traced by ``torch.compile``), per chunk size."""
    chunk = tuning.chunk_size(graph.num_edges)
    return graph.derived(("triton", "graph", chunk), lambda: TritonGraph.build(graph, chunk))


def built_kernel_graph(graph: CscGraph) -> TritonGraph | None:
    """The :class:`TritonGraph` that :func:`kernel_graph` keeps on ``graph``, or None where none was built yet."""
    return graph.derived_if_built(("triton", "graph", tuning.chunk_size(graph.num_edges)))


class GatCall(NamedTuple):
    """One GAT call as its ops take it (``cudnn_gnn::triton_gat_fwd`` / ``_bwd``: their schemas are these fields, in
    this order, :func:`op_schema`) and the launchers read it, by field name.

    Graph (the :class:`TritonGraph`'s): ``offsets [Nd+1]``, ``indices [E]``, ``map_csc_to_coo [E]`` or None (read
    only where an edge tensor is read or written: edge scores, returned attention), the row work list ``row_work
    [P, 4]``, ``row_hub_work [S, 4]``, ``row_hubs [R, 3]`` (:func:`work_list`).
    Inputs: ``x_src [Ns, H*C]``, ``x_dst [Nd, H*C]`` or None (``x_src`` itself, a homogeneous graph: both node
    scores from one read, one gradient), ``att_node [2*H*C] = att_src | att_dst`` (the caller's ``att_edge`` went
    into the edge scores in :func:`build_call`), the float32 edge scores ``score_edge [E, H]`` (COO) or None.
    Dropout: ``dropout``, the int64 seed ``[1]`` of counter-based dropout (drawn in-kernel by the forward, with
    ``dropout_threshold``: :mod:`cudnn_gnn._philox`; in the call its autograd Function keeps for the backward, the
    uint8 keep flags ``[E, H]`` in CSC order the forward wrote, which every backward pass reads instead of drawing
    again) or explicit float32 factors ``[E, H]`` in CSC order (the caller's mask, permuted once per call), or None
    (:attr:`kernel_dropout`).
    Knobs: ``heads``, ``concat``, ``activation`` (a name of :data:`~cudnn_gnn.backends.triton.kernels.ACTIVATION_CODES`)
    and ``activation_alpha``; ``gat_backward`` and ``launch``, :class:`TritonOptions`' (see there); ``i64``, whether
    the call's sizes need int64 offsets (every kernel's ``I64``; int32 otherwise), decided once a call by
    :func:`~cudnn_gnn.backends.triton.tuning.int64_offsets` (:func:`build_call`); where False, GAT's one-gather
    source pass and node-score backward still take int64 on the tiles where it measured faster
    (:func:`~cudnn_gnn.backends.triton.tuning.kernel_int64_offsets`, in their launchers)."""

    offsets: Tensor
    indices: Tensor
    map_csc_to_coo: Tensor | None
    row_work: Tensor
    row_hub_work: Tensor
    row_hubs: Tensor
    x_src: Tensor
    x_dst: Tensor | None
    att_node: Tensor
    score_edge: Tensor | None
    dropout: Tensor | None
    heads: int
    concat: bool
    activation: str
    activation_alpha: float
    dropout_threshold: int
    gat_backward: str
    launch: list[int]
    i64: bool

    @property
    def kernel_dropout(self) -> KernelDropout | None:
        """The dropout argument group the kernels take, or None without dropout."""
        return None if self.dropout is None else KernelDropout(self.dropout, self.dropout_threshold)


class Gatv2Call(NamedTuple):
    """One GATv2 call as its ops take it (``cudnn_gnn::triton_gatv2_fwd`` / ``_bwd``, :func:`op_schema`) and the
    launchers read it. Graph, dropout and knobs as :class:`GatCall`'s. Inputs: ``x_src [Ns, H*C]``, ``x_dst [Nd,
    H*C]``, ``edge_attr [E, H*C]`` (COO, projected) or None, ``attn_weights [H*C]``; or, with the edge projection fused
    (:func:`gatv2_edge_inputs`), the raw ``edge_attr [E, De]`` and ``lin_edge_weight [H*C, De]``, projected inside the
    kernels (None otherwise). ``edge_grads``: on the fused path, which edge gradients the backward computes (bit 0:
    ``edge_attr``'s, bit 1: ``lin_edge_weight``'s; the others come back empty); 0 otherwise. ``i64`` as
    :class:`GatCall`'s."""

    offsets: Tensor
    indices: Tensor
    map_csc_to_coo: Tensor | None
    row_work: Tensor
    row_hub_work: Tensor
    row_hubs: Tensor
    x_src: Tensor
    x_dst: Tensor
    edge_attr: Tensor | None
    lin_edge_weight: Tensor | None
    attn_weights: Tensor
    dropout: Tensor | None
    heads: int
    concat: bool
    activation: str
    activation_alpha: float
    dropout_threshold: int
    edge_grads: int
    launch: list[int]
    i64: bool

    @property
    def kernel_dropout(self) -> KernelDropout | None:
        """The dropout argument group the kernels take, or None without dropout."""
        return None if self.dropout is None else KernelDropout(self.dropout, self.dropout_threshold)


class SourceWalk(NamedTuple):
    """What a backward's source pass walks (the backward ops' last arguments): the :class:`TritonBackward` arrays
    the kernels read, ``rev_to_csc [E]``, ``dst_index [E]``, ``rev_dst [E]`` or None (a graph rebuilt every call:
    the pass reads ``dst_index[rev_to_csc[k]]``) and the source work list ``src_work``, ``src_hub_work``,
    ``src_hubs`` over the reverse CSC."""

    rev_to_csc: Tensor
    dst_index: Tensor
    rev_dst: Tensor | None
    src_work: Tensor
    src_hub_work: Tensor
    src_hubs: Tensor


@dataclass(frozen=True)
class TritonOptions:
    """The Triton backend's variants kept for measurement, passed explicitly to :func:`triton_gat` (the layers and the
    public ops always take the defaults).

    Attributes:
        gat_backward: GAT's backward: ``"auto"`` (the default), the rule of :func:`gat_one_gather`;
            ``"one_gather"``, :func:`_gat_backward`, one feature-row gather per edge (its source pass gathers
            ``dout_i``; the softmax row sums come from the saved per-head output); ``"two_gather"``, the backward
            GATv2 takes (the destination pass gathers ``x_j`` again for ``<dout_i, x_j>``, the source pass
            ``dout_i``). Decided when the forward runs, so a step's forward and backward agree. GATv2 ignores it.
        launch: launch shapes that replace :func:`~cudnn_gnn.backends.triton.tuning.launch_shape`'s (and, for
            ``"gat_dst"``, ``"scores"`` and ``"scores_bwd"``, :func:`~cudnn_gnn.backends.triton.tuning.dst_sum_shape`'s
            and :func:`~cudnn_gnn.backends.triton.tuning.node_score_shape`'s), per kernel (a
            :data:`~cudnn_gnn.backends.triton.tuning.KERNELS` name): ``(BLOCK_E, num_warps)`` or ``(BLOCK_E,
            num_warps, HG)`` (``BLOCK_E``: edges a block, rows for the node-score kernels; ``HG``, heads a program: a
            power of two, at most the heads rounded up to one; not for ``"gat_dst"``, whose programs take every
            head). Checked by :func:`~cudnn_gnn.backends.triton.tuning.check_launch`. What the tuning sweeps run; a
            kernel not named keeps its rule.
    """

    gat_backward: str = "auto"
    launch: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gat_backward not in _GAT_BACKWARDS:
            raise ValueError(f"gat_backward must be one of {', '.join(map(repr, _GAT_BACKWARDS))}, "
                             f"got {self.gat_backward!r}")
        object.__setattr__(self, "launch", dict(self.launch))  # a copy: the caller's mapping may change later
        for kernel, shape in self.launch.items():
            tuning.check_launch(kernel, shape)

    def launch_codes(self) -> list[int]:
        """:attr:`launch` as the ops take it: ``(kernel index in KERNELS, BLOCK_E, num_warps, HG or 0)`` per kernel,
        flat (see :func:`~cudnn_gnn.backends.triton.tuning.launch_config`)."""
        codes: list[int] = []
        for kernel, (block_e, warps, *hg) in sorted(self.launch.items()):
            codes += [tuning.KERNELS.index(kernel), block_e, warps, hg[0] if hg else 0]
        return codes


_GAT_BACKWARDS = ("auto", "one_gather", "two_gather")


DEFAULT_OPTIONS = TritonOptions()


_SCOPED_OPTIONS: contextvars.ContextVar[TritonOptions] = contextvars.ContextVar("triton_options",
                                                                                default=DEFAULT_OPTIONS)


@contextlib.contextmanager
def use_options(options: TritonOptions) -> Iterator[None]:
    """Within the block, eager Triton calls that are given no options (the layers', the public ops') take
    ``options``: how a benchmark runs a whole model on one variant (``bench_sampled.py --sweep``). Per context (a
    thread's, a task's); a call traced by ``torch.compile`` takes the defaults or its explicit options."""
    if not isinstance(options, TritonOptions):
        raise TypeError(f"options must be a TritonOptions, got {type(options).__name__}")
    token = _SCOPED_OPTIONS.set(options)
    try:
        yield
    finally:
        _SCOPED_OPTIONS.reset(token)


def scoped_options() -> TritonOptions:
    """The options :func:`use_options` set for this context (the defaults outside any block)."""
    return _SCOPED_OPTIONS.get()


_SCHEMA_TYPES = {"Tensor": "Tensor", "Tensor | None": "Tensor?", "int": "int", "bool": "bool", "str": "str",
                 "float": "float", "list[int]": "int[]"}


def _annotation(t: Any) -> str:
    """A field's annotation as written (a string, or a ForwardRef around one, depending on the Python version)."""
    return str(getattr(t, "__forward_arg__", t))


def op_schema(*records: type) -> str:
    """The op-schema arguments of the NamedTuple classes ``records``' fields, in order (``Tensor``, ``Tensor?``,
    ``int``, ``int[]``, ...): an op's argument list is written once, as its call record's fields."""
    return ", ".join(f"{_SCHEMA_TYPES[_annotation(t)]} {name}"
                     for record in records for name, t in record.__annotations__.items())


def tensor_fields(record: type) -> tuple[int, ...]:
    """The positions of the tensor fields (``Tensor`` and ``Tensor | None``) of the NamedTuple class ``record``."""
    return tuple(i for i, t in enumerate(record.__annotations__.values()) if _annotation(t).startswith("Tensor"))


def _score_matrix(a: Tensor, heads: int) -> Tensor:
    """``[H*C, H]`` float32 block-diagonal matrix of the per-head vectors ``a [H*C]`` (column ``h`` holds head
    ``h``'s vector in rows ``h*C .. h*C+C-1``), by one broadcast multiply with the identity: cheaper on the host than
    ``torch.block_diag`` over ``H`` pieces, which counts on small, host-bound graphs
    (benchmarks/investigations/README.md, ``triton_tuning.py``)."""
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


def gatv2_edge_inputs(spec: AttentionSpec, needs_grad: bool) -> tuple[Tensor | None, Tensor | None]:
    """GATv2's ``(edge_attr, lin_edge_weight)`` for :func:`build_call`: as ``spec`` gives them where
    :func:`~cudnn_gnn.backends.triton.tuning.fuse_edge_projection` takes the fused path, else
    ``(edge_attr @ lin_edge_weight^T, None)`` (:meth:`~cudnn_gnn.spec.AttentionSpec.projected_edge_attr`). Without
    ``lin_edge_weight``, ``edge_attr`` passes as it is. The partials are the weight gradient's: the rule counts them
    only where the weight requires grad."""
    edge_attr, lin_edge_weight = spec.edge_attr, spec.lin_edge_weight
    if edge_attr is None or lin_edge_weight is None:
        return edge_attr, None
    dtype = torch.promote_types(edge_attr.dtype, lin_edge_weight.dtype)
    if tuning.fuse_edge_projection(edge_attr.shape[0], spec.heads, spec.dim, edge_attr.shape[1], dtype.itemsize,
                                   needs_grad and lin_edge_weight.requires_grad):
        return edge_attr, lin_edge_weight
    return spec.projected_edge_attr(), None


def offset_shapes(spec: AttentionSpec, graph: TritonGraph, walk: SourceWalk | None, edge_attr: Tensor | None,
                  lin_edge_weight: Tensor | None, launch: list[int]) -> list[tuple[int, int]]:
    """Every tensor the kernels of a call index, as ``(rows, row width)`` in elements, for
    :func:`~cudnn_gnn.backends.triton.tuning.int64_offsets`: the node rows ``x_src [Ns, H*C]`` (and its gradient),
    ``x_dst``, the output and their gradients ``[Nd, H*C]``, GAT's destination record ``[Nd, 4H]`` (``lse`` and the
    scores ``[N, H]`` are narrower), the offsets ``[Nd+1]``; every ``[E, H]`` tensor (returned attention, keep flags,
    dropout factors, GAT's edge scores, the backward's buffers; the indices and maps ``[E]`` are narrower); GATv2's
    ``edge_attr`` (``[E, H*C]`` projected or ``[E, De]`` raw, and its gradient); the work lists (the rows' and,
    with a backward (``walk``), the sources'); the hub partial slots ``[S, H*C]`` (``S``: both lists' slots
    together, a bound) and GATv2's attention-vector partials ``[Nd + S, H*C]``; the fused edge projection's
    weight-gradient partials ``[P, H*C * De]``; GAT's node-score backward, the rows its programs walk ``[P * ROWS,
    H*C]`` and its partials ``[2P, H*C]``, and its destination sum's partials ``[2B, H]`` (``B`` blocks of edges).
    ``launch``: the call's overrides (the shapes of those kernels)."""
    heads, dim = spec.heads, spec.dim
    ns, nd, e = spec.x_src.shape[0], graph.offsets.shape[0] - 1, graph.num_edges
    lists = [*graph.rows] + ([walk.src_work, walk.src_hub_work, walk.src_hubs] if walk is not None else [])
    slots = graph.rows.hub_work.shape[0] + (walk.src_hub_work.shape[0] if walk is not None else 0)
    shapes = [(ns, dim), (nd, dim), (nd + 1, 1), (e, heads), (slots, dim)]
    shapes += [(t.shape[0], t.shape[1] if t.dim() == 2 else 1) for t in lists]
    if spec.v2:
        shapes.append((nd + slots, dim))
        if edge_attr is not None:
            shapes.append((e, edge_attr.shape[1]))
        if lin_edge_weight is not None and edge_attr is not None:
            shapes.append((tuning.cdiv(e, tuning.edge_span(e)), dim * edge_attr.shape[1]))
    else:
        rows = max(ns, nd)
        block_n = tuning.node_score_shape("scores_bwd", heads, dim // heads, launch)[0]
        programs, per = tuning.score_bwd_programs(rows, block_n)
        block = tuning.dst_sum_shape(heads, launch)[0]
        shapes += [(nd, 4 * heads), (programs * per * block_n, dim), (2 * programs, dim),
                   (2 * tuning.cdiv(e, block), heads)]
    return shapes


def build_call(spec: AttentionSpec, graph: TritonGraph, *, needs_grad: bool,
               options: TritonOptions = DEFAULT_OPTIONS) -> tuple[GatCall | Gatv2Call, SourceWalk | None]:
    """The op arguments for the validated call ``spec`` on ``graph`` (its kernel graph, :func:`kernel_graph`): the
    call record (:class:`GatCall`, GAT's edge scores computed differentiably by one GEMM; or :class:`Gatv2Call`, its
    edge projection fused or not, :func:`gatv2_edge_inputs`; its offset width by
    :func:`~cudnn_gnn.backends.triton.tuning.int64_offsets` of :func:`offset_shapes`), and the backward's
    :class:`SourceWalk` where ``needs_grad`` (the reverse CSC and source work list, :meth:`TritonGraph.backward`, built
    then the first time and kept), else None."""
    g = graph
    walk = None
    if needs_grad:
        rev = g.backward()
        walk = SourceWalk(rev.rev_to_csc, rev.dst_index, rev.rev_dst, *rev.src)
    drop = _kernel_dropout(spec, g)
    dropout, threshold = (None, 0) if drop is None else drop
    launch = options.launch_codes()
    edge_attr, lin_edge_weight = gatv2_edge_inputs(spec, needs_grad) if spec.v2 else (None, None)
    i64 = tuning.int64_offsets(offset_shapes(spec, g, walk, edge_attr, lin_edge_weight, launch), launch)
    knobs: dict[str, Any] = dict(dropout=dropout, heads=spec.heads, concat=spec.concat, activation=spec.activation,
                                 activation_alpha=spec.activation_alpha, dropout_threshold=threshold,
                                 launch=launch, i64=i64)
    rows = g.rows
    if spec.v2:
        needs_map = edge_attr is not None or spec.return_attention  # dropout is keyed by CSC position: no map
        edge_grads = 0
        if lin_edge_weight is not None and edge_attr is not None:
            edge_grads = int(edge_attr.requires_grad) | 2 * int(lin_edge_weight.requires_grad)
        return Gatv2Call(
            g.offsets, g.indices, g.map_csc_to_coo if needs_map else None, *rows,
            x_src=spec.x_src.contiguous(), x_dst=spec.x_dst.contiguous(),
            edge_attr=None if edge_attr is None else edge_attr.contiguous(),
            lin_edge_weight=None if lin_edge_weight is None else lin_edge_weight.contiguous(),
            attn_weights=spec.attn_weights.contiguous(), edge_grads=edge_grads, **knobs), walk
    # GAT's attention vector taken apart (the layout of spec.gat_attention_parts): att_edge goes into the edge
    # scores here, the op gets att_src | att_dst for the node scores (autograd gives att_edge its gradient through
    # the scores); without edge features that is the whole vector, no view
    att_node, att_edge = gat_attention_parts(spec.attn_weights, spec.dim)
    score_edge = None
    if spec.edge_attr is not None and att_edge is not None:
        score_edge = _edge_scores(spec.edge_attr, att_edge, spec.heads).contiguous()
    needs_map = spec.edge_attr is not None or spec.return_attention
    x_src, x_dst = spec.x_src, spec.x_dst
    return GatCall(
        g.offsets, g.indices, g.map_csc_to_coo if needs_map else None, *rows,
        x_src=x_src.contiguous(), x_dst=None if x_dst is x_src else x_dst.contiguous(),
        att_node=att_node.contiguous(), score_edge=score_edge, gat_backward=options.gat_backward, **knobs), walk
