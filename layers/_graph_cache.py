"""From whatever ``edge_index`` a PyG layer accepts to the :class:`~cudnn_gnn.CscGraph` the op runs on.

A :class:`GraphPlan` is the graph after PyG's self-loop rule (existing self-loops removed, ``num_loops``
loops ``i -> i`` appended at the end of the COO numbering) plus what a forward needs to lay out edge
features and returned attention in PyG's order. Plans are built in one of two ways:

* **eager, cached** (:func:`resolve`): self-loops are dropped exactly (one boolean mask, one host sync)
  and the result is converted to CSC once. Plans of raw tensors live in a small bounded LRU keyed by the
  tensor's identity, ``_version``, data pointer, shape, stride, dtype and device plus the node counts and
  self-loop config; the entry holds only a weak reference to the tensor and is dropped when it dies. Plans of
  a :class:`CscGraph` are kept in the graph's own derived-structure cache. A cache hit costs a dict lookup:
  no conversion and no host sync.
* **static** (under ``torch.compile``, or ``cache_graph=False`` eagerly if you want no sync at all): only
  fixed-shape ops (``sort``, ``searchsorted``, ``where``, ``cat``), so dynamo traces it without a graph
  break. Existing self-loops cannot be dropped without a data-dependent shape, so they are *redirected* to
  one extra dummy destination (row ``num_dst``) whose output row is discarded: real destinations see exactly
  PyG's edge set. ``x_dst`` gets one zero row appended per forward for it.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn.graph import INT32_MAX, CscGraph

__all__ = ["GraphPlan", "resolve", "loop_edge_attr", "clear_cache", "prepare_graph", "FORMS"]

FORMS = "a [2, E] Tensor, EdgeIndex, SparseTensor, torch sparse CSR/CSC adj_t tensor or CscGraph"
_CACHE_SIZE = 16
_PLAN_KEY = "cudnn_gnn.layers.plan"


@dataclass(eq=False)
class GraphPlan:
    """The graph one layer call runs on, and how to map PyG's edge order onto it.

    Attributes:
        graph: the CSC graph for the op; its COO numbering is PyG's post-self-loop edge order (eager plans)
            or ``[caller's E edges, num_loops loops]`` (static plans, see ``keep``).
        num_dst: real destination count (``graph.num_dst_nodes`` minus the dummy row of static plans).
        pad_dst: the graph has one dummy destination, row ``num_dst``, holding redirected self-loops.
        num_loops: self-loops appended (0 when the layer adds none).
        kept: ``[E']`` ids of the caller's edges that survive self-loop removal; None when all do or for
            static plans.
        loop_index: ``[E]`` per caller edge, the self-loop slot that its features feed for ``fill_value``
            reductions, ``num_loops`` (a discarded slot) for self-loops and destinations without a loop.
        keep: static plans only: ``[E + num_loops]`` bool, which of the graph's COO edges PyG has.
        form: how the caller gave the graph: "coo", "edge_index", "csr", "csc", "sparse_tensor", "csc_graph".
        source: the structure PyG returns attention on when it is not the caller's own object (the
            self-loop form of a sparse input); None otherwise. Plans never hold the caller's tensor, so a
            cache entry dies with it.
    """

    graph: CscGraph
    num_dst: int
    pad_dst: bool = False
    num_loops: int = 0
    kept: Tensor | None = None
    loop_index: Tensor | None = None
    keep: Tensor | None = None
    form: str = "coo"
    source: Any = None
    _returned: dict[str, Any] = field(default_factory=dict, repr=False)


# ---------------------------------------------------------------------------------------------- builders
def _index_dtype(*sizes: int) -> torch.dtype:
    return torch.int32 if max(0, *sizes) < INT32_MAX else torch.int64


def _static_csc(src: Tensor, dst: Tensor, num_src: int, num_dst: int) -> CscGraph:
    """COO -> CSC with fixed-shape ops only (no bincount, no host sync): traceable by dynamo."""
    dtype = _index_dtype(src.shape[0], num_src, num_dst + 1)
    sorted_dst, perm = torch.sort(dst.to(dtype), stable=True)
    bounds = torch.arange(num_dst + 1, device=dst.device, dtype=dtype)
    offsets = torch.searchsorted(sorted_dst, bounds, out_int32=dtype == torch.int32)
    graph = CscGraph(offsets.to(dtype), src.index_select(0, perm).to(dtype), num_src, perm.to(dtype))
    graph._cache["dst_index"] = sorted_dst
    graph._cache["max_degrees"] = None  # rebuilt every call: no degree sync, so no automatic hub split
    return graph


def _loops(n: int, like: Tensor) -> Tensor:
    return torch.arange(n, device=like.device, dtype=like.dtype)


def _loop_index(src: Tensor, dst: Tensor, num_loops: int) -> Tensor:
    drop = (src == dst) | (dst >= num_loops)
    return torch.where(drop, torch.full_like(dst, num_loops), dst)


def static_plan(ei: Tensor, num_src: int, num_dst: int, num_loops: int | None, form: str, source: Any) -> GraphPlan:
    """A plan from fixed-shape ops only (see the module docstring); ``num_loops=None``: no self-loop rule."""
    src, dst = ei[0], ei[1]
    if num_loops is None:
        return GraphPlan(_static_csc(src, dst, num_src, num_dst), num_dst, form=form, source=source)
    is_loop = src == dst
    dst_pad = torch.where(is_loop, torch.full_like(dst, num_dst), dst)
    ar = _loops(num_loops, src)
    graph = _static_csc(torch.cat([src, ar]), torch.cat([dst_pad, ar]), num_src, num_dst + 1)
    keep = torch.cat([~is_loop, torch.ones(num_loops, dtype=torch.bool, device=src.device)])
    return GraphPlan(graph, num_dst, pad_dst=True, num_loops=num_loops, loop_index=_loop_index(src, dst, num_loops),
                     keep=keep, form=form, source=source)


def eager_plan(ei: Tensor, num_src: int, num_dst: int, num_loops: int | None, form: str, source: Any) -> GraphPlan:
    """A plan with self-loops dropped exactly (one host sync) and an index-range check (one more)."""
    if num_loops is None:
        graph = CscGraph.from_edge_index(ei, size=(num_src, num_dst))
        return GraphPlan(graph, num_dst, form=form, source=source)
    src, dst = ei[0], ei[1]
    keep = torch.nonzero(src != dst).view(-1)
    kept: Tensor | None = keep
    base = ei
    if keep.numel() == src.numel():
        kept = None
    else:
        base = ei.index_select(1, keep)
    ar = _loops(num_loops, ei)
    final = torch.cat([base, torch.stack([ar, ar])], dim=1)
    graph = CscGraph.from_edge_index(final, size=(num_src, num_dst))
    return GraphPlan(graph, num_dst, num_loops=num_loops, kept=kept, loop_index=_loop_index(src, dst, num_loops),
                     form=form, source=source)


# ---------------------------------------------------------------------------------------------- inputs
def _is_sparse_tensor(obj: Any) -> bool:
    from torch_geometric.typing import SparseTensor

    return isinstance(obj, SparseTensor)


def _plain(ei: Tensor) -> Tensor:
    from torch_geometric import EdgeIndex

    return ei.as_subclass(Tensor) if isinstance(ei, EdgeIndex) else ei


def _check_coo(ei: Tensor) -> None:
    if ei.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"edge_index must have dtype int32 or int64, got {ei.dtype}")
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, num_edges), got {tuple(ei.shape)}")


def _sparse_to_coo(adj: Tensor) -> Tensor:
    """``[2, nnz]`` (source, destination) of an ``adj_t`` (rows = destinations) in element order."""
    if adj.layout == torch.sparse_csr:
        rowptr, col = adj.crow_indices(), adj.col_indices()
        row = torch.repeat_interleave(_loops(adj.shape[0], rowptr), rowptr.diff(), output_size=col.numel())
        return torch.stack([col, row])
    ccol, row = adj.ccol_indices(), adj.row_indices()
    col = torch.repeat_interleave(_loops(adj.shape[1], ccol), ccol.diff(), output_size=row.numel())
    return torch.stack([col, row])


def _build(edge_index: Any, num_src: int, num_dst: int, num_loops: int | None, static: bool) -> GraphPlan:
    make = static_plan if static else eager_plan
    if isinstance(edge_index, CscGraph):
        g = edge_index
        if num_loops is None and not static:
            return GraphPlan(g, g.num_dst_nodes, form="csc_graph")
        return make(g.edge_index(), g.num_src_nodes, g.num_dst_nodes, num_loops, "csc_graph", None)
    if _is_sparse_tensor(edge_index):
        return _sparse_tensor_plan(edge_index, num_loops)
    if isinstance(edge_index, Tensor) and edge_index.layout in (torch.sparse_csr, torch.sparse_csc):
        n_dst, n_src = int(edge_index.shape[0]), int(edge_index.shape[1])
        form = "csr" if edge_index.layout == torch.sparse_csr else "csc"
        if form == "csr" and num_loops is None and not static:  # adj_t in CSR is our CSC: no sort
            rowptr, col = edge_index.crow_indices(), edge_index.col_indices()
            dtype = _index_dtype(col.numel(), n_src, n_dst)
            graph = CscGraph.from_csc(rowptr.to(dtype), col.to(dtype), n_src).validate()
            return GraphPlan(graph, n_dst, form=form)
        if form == "csr" and num_loops is not None and not static:
            from torch_geometric.utils import add_self_loops, remove_self_loops

            adj = add_self_loops(remove_self_loops(edge_index)[0])[0]  # PyG's own structure and element order
            plan = _build(adj, num_src, num_dst, None, False)
            plan.num_loops, plan.source = min(n_src, n_dst), adj
            return plan
        return make(_sparse_to_coo(edge_index), n_src, n_dst, num_loops, form, None)
    if isinstance(edge_index, Tensor):
        if edge_index.layout != torch.strided:
            raise ValueError(f"edge_index must be a sparse CSR or CSC tensor when sparse, got layout {edge_index.layout}")
        ei = _plain(edge_index)
        _check_coo(ei)
        from torch_geometric import EdgeIndex

        form = "edge_index" if isinstance(edge_index, EdgeIndex) else "coo"
        return make(ei, num_src, num_dst, num_loops, form, None)
    raise TypeError(f"edge_index must be {FORMS}, got {type(edge_index).__name__}")


def _sparse_tensor_plan(adj: Any, num_loops: int | None) -> GraphPlan:  # pragma: no cover - needs torch_sparse
    from torch_geometric.typing import torch_sparse

    if num_loops is not None:
        adj = torch_sparse.set_diag(adj)
    rowptr, col, _ = adj.csr()
    n_dst, n_src = adj.sparse_sizes()
    dtype = _index_dtype(col.numel(), n_src, n_dst)
    graph = CscGraph.from_csc(rowptr.to(dtype), col.to(dtype), int(n_src))
    return GraphPlan(graph, int(n_dst), num_loops=0 if num_loops is None else min(n_src, n_dst),
                     form="sparse_tensor", source=adj)


# ---------------------------------------------------------------------------------------------- cache
class _PlanCache:
    """Bounded LRU of plans for raw tensors, weakly keyed by the tensor (an entry dies with its tensor)."""

    def __init__(self, maxsize: int = _CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple, tuple[weakref.ref, GraphPlan]] = OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0

    def get(self, owner: Any, key: tuple) -> GraphPlan | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0]() is not owner:
                return None
            self._entries.move_to_end(key)
            return hit[1]

    def put(self, owner: Any, key: tuple, plan: GraphPlan) -> None:
        entries = self._entries

        def drop(_: weakref.ref, key: tuple = key) -> None:
            entries.pop(key, None)

        with self._lock:
            self.misses += 1
            entries[key] = (weakref.ref(owner, drop), plan)
            while len(entries) > self.maxsize:
                entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_CACHE = _PlanCache()


def clear_cache() -> None:
    """Forget every cached plan of raw ``edge_index`` tensors."""
    _CACHE.clear()


def _fingerprint(t: Any) -> tuple:
    if isinstance(t, Tensor):
        parts: tuple[Tensor, ...]
        if t.layout == torch.sparse_csr:
            parts = (t.crow_indices(), t.col_indices())
        elif t.layout == torch.sparse_csc:
            parts = (t.ccol_indices(), t.row_indices())
        else:
            data: Tensor = t._data if type(t) is not Tensor and hasattr(t, "_data") else t  # EdgeIndex wraps _data
            parts = (data,)
        out: list[Any] = [id(t), t.layout, tuple(t.shape), t.device]
        for p in parts:
            out += [p._version, p.data_ptr(), tuple(p.stride()), p.dtype]
        return tuple(out)
    return (id(t),)


def resolve(
    edge_index: Any, *, num_src: int, num_dst: int, num_loops: int | None, device: torch.device, cache: bool
) -> GraphPlan:
    """The plan for one layer call: cached eagerly, built with fixed-shape ops under ``torch.compile``."""
    if isinstance(edge_index, CscGraph) and edge_index.device != device:
        edge_index = _moved(edge_index, device)
    if torch.compiler.is_compiling():
        if isinstance(edge_index, CscGraph):
            plan = edge_index._cache.get((_PLAN_KEY, num_loops))
            if plan is not None:
                return plan
            if num_loops is None:
                return GraphPlan(edge_index, edge_index.num_dst_nodes, form="csc_graph")
        return _build(edge_index, num_src, num_dst, num_loops, static=True)
    if isinstance(edge_index, CscGraph):
        key = (_PLAN_KEY, num_loops)
        plan = edge_index._cache.get(key)
        if plan is None:
            plan = _build(edge_index, num_src, num_dst, num_loops, static=False)
            edge_index._cache[key] = plan
        return plan
    if not cache:
        return _build(edge_index, num_src, num_dst, num_loops, static=False)
    key = (*_fingerprint(edge_index), num_src, num_dst, num_loops)
    plan = _CACHE.get(edge_index, key)
    if plan is None:
        plan = _build(edge_index, num_src, num_dst, num_loops, static=False)
        _CACHE.put(edge_index, key, plan)
    return plan


def _moved(graph: CscGraph, device: torch.device) -> CscGraph:
    key = ("cudnn_gnn.layers.to", str(device))
    moved = graph._cache.get(key)
    if moved is None:
        moved = graph.to(device)
        graph._cache[key] = moved
    return moved


def prepare_graph(graph: CscGraph, *, add_self_loops: bool = True) -> CscGraph:
    """Build and keep on ``graph`` the plans a layer needs (with and without self-loops), so later forwards,
    compiled ones included, find them. Returns ``graph``."""
    n = min(graph.num_src_nodes, graph.num_dst_nodes)
    for loops in ((None, n) if add_self_loops else (None,)):
        key = (_PLAN_KEY, loops)
        if key not in graph._cache:
            graph._cache[key] = _build(graph, graph.num_src_nodes, graph.num_dst_nodes, loops, static=False)
    return graph


# ---------------------------------------------------------------------------------------------- features
def loop_edge_attr(plan: GraphPlan, edge_attr: Tensor, fill_value: Any) -> Tensor:
    """``edge_attr`` (caller's order) laid out in the plan's COO order, self-loop features appended exactly
    as PyG's ``add_self_loops(..., fill_value=...)`` computes them (over the edges left after removal)."""
    if plan.loop_index is None:
        return edge_attr
    n = plan.num_loops
    tail = tuple(edge_attr.shape[1:])
    if fill_value is None:
        loop_attr = edge_attr.new_ones((n, *tail))
    elif isinstance(fill_value, (int, float)) and not isinstance(fill_value, bool):
        loop_attr = edge_attr.new_full((n, *tail), float(fill_value))
    elif isinstance(fill_value, Tensor):
        v = fill_value.to(edge_attr.device, edge_attr.dtype)
        if v.dim() != edge_attr.dim():
            v = v.unsqueeze(0)
        loop_attr = v.expand((n, *tail)).contiguous()
    elif isinstance(fill_value, str):
        from torch_geometric.utils import scatter

        assert plan.loop_index is not None
        loop_attr = scatter(edge_attr, plan.loop_index.long(), 0, n + 1, fill_value)[:n]
    else:
        raise TypeError(f"fill_value must be a float, a Tensor or one of 'add', 'mean', 'max', 'min', 'mul', got {fill_value!r}")
    base = edge_attr if plan.kept is None else edge_attr.index_select(0, plan.kept)
    return torch.cat([base, loop_attr], dim=0)


def attention_result(plan: GraphPlan, alpha: Tensor, edge_index: Any) -> Any:
    """PyG's second return value for ``return_attention_weights``: ``(edge_index, alpha)``, or the sparse
    forms for sparse inputs, in PyG's edge order (self-loops appended last). ``edge_index`` is the caller's."""
    if plan.keep is not None:  # static plan: the graph also holds redirected self-loops
        src = edge_index if not isinstance(edge_index, CscGraph) else edge_index.edge_index()
        ei = _sparse_to_coo(src) if plan.form in ("csr", "csc") else _plain(src)
        ar = _loops(plan.num_loops, ei)
        full = torch.cat([ei, torch.stack([ar, ar])], dim=1)
        return full[:, plan.keep], alpha[plan.keep]
    if plan.form == "sparse_tensor":  # pragma: no cover - needs torch_sparse
        return plan.source.set_value(alpha, layout="coo")
    if plan.form == "csr":
        from torch_geometric.utils.sparse import set_sparse_value

        return set_sparse_value(edge_index if plan.source is None else plan.source, alpha), alpha
    if plan.form == "csc":
        cached = plan._returned.get("ei")
        ei = cached if cached is not None else plan._returned.setdefault("ei", plan.graph.edge_index())
        num_dst, num_src = plan.num_dst, plan.graph.num_src_nodes
        perm = torch.sort(ei[0] * max(num_dst, 1) + ei[1], stable=True)[1]
        counts = torch.bincount(ei[0], minlength=num_src)
        ccol = torch.zeros(num_src + 1, dtype=torch.long, device=ei.device)
        ccol[1:] = counts.cumsum(0)
        a = alpha.index_select(0, perm)
        adj = torch.sparse_csc_tensor(ccol, ei[1, perm], a, size=(num_dst, num_src, *alpha.shape[1:]))
        return adj, a
    if plan.form != "csc_graph" and plan.loop_index is None:
        return edge_index, alpha
    cached = plan._returned.get("ei")
    ei = cached if cached is not None else plan._returned.setdefault("ei", _returned_edge_index(plan, edge_index))
    return ei, alpha


def _returned_edge_index(plan: GraphPlan, edge_index: Any) -> Tensor:
    if plan.form == "csc_graph":
        return plan.graph.edge_index()
    from torch_geometric.utils import add_self_loops, remove_self_loops

    # PyG's own functions, so the returned type (Tensor or EdgeIndex, sizes, flags) is exactly PyG's.
    return add_self_loops(remove_self_loops(edge_index)[0], num_nodes=plan.num_loops)[0]
