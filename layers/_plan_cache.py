"""Where a layer gets its :class:`~._graph_plan.GraphPlan`: :func:`resolve`, with the plans of raw ``edge_index``
tensors kept between forwards.

A :class:`~cudnn_gnn.CscGraph` keeps its own plans (:meth:`~cudnn_gnn.CscGraph.derived`): it is immutable, so
they stay valid, and a cache hit costs a dict lookup. A raw tensor can change under the cache in ways torch does
not see: its version counter misses writes through ``.data``, through a numpy array sharing its memory
(``torch.from_numpy`` buffers refilled per batch) or through DLPack, and inference tensors have no version
counter at all. So a raw tensor's plan is kept with a private copy of its index values, and a hit is taken only
where the values are still equal (``torch.equal``: one pass over ``E`` indices and one host sync per forward;
``docs/performance.md`` has its cost). Pass a ``CscGraph`` (or use ``ToCscGraph``) to skip the check.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn.graph import CscGraph

from ._graph_inputs import build_plan
from ._graph_plan import GraphPlan

__all__ = ["resolve", "clear_cache", "prepare_graph"]

_CACHE_SIZE = 16
_PLAN_KEY = "cudnn_gnn.layers.plan"


def _index_parts(t: Any) -> tuple[Tensor, ...]:
    """The tensors that hold a raw ``edge_index``'s values: what a cached plan is checked against."""
    if t.layout == torch.sparse_csr:
        return t.crow_indices(), t.col_indices()
    if t.layout == torch.sparse_csc:
        return t.ccol_indices(), t.row_indices()
    if t.layout == torch.sparse_coo:
        return (t._indices(),)  # [2, nnz] as stored: indices() refuses an uncoalesced tensor
    data: Tensor = t._data if type(t) is not Tensor and hasattr(t, "_data") else t  # EdgeIndex wraps _data
    return (data,)


def _key(t: Tensor, parts: tuple[Tensor, ...]) -> tuple:
    """What a plan is looked up by (identity, layout, shape, memory, a COO tensor's coalesced flag: what its plan
    reads it by); its values are checked on a hit."""
    out: list[Any] = [id(t), t.layout, tuple(t.shape), t.device, torch.is_inference_mode_enabled(),
                      t.layout == torch.sparse_coo and t.is_coalesced()]
    for p in parts:
        out += [p.data_ptr(), tuple(p.stride()), p.dtype]
    return tuple(out)


class _PlanCache:
    """Bounded LRU of plans for raw tensors, weakly keyed by the tensor (an entry dies with its tensor), each
    with a copy of the tensor's index values to check a hit against."""

    def __init__(self, maxsize: int = _CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple, tuple[weakref.ref, tuple[Tensor, ...], GraphPlan]] = OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0
        self.stale = 0  # hits refused because the values changed under the same tensor

    def get(self, owner: Any, key: tuple, parts: tuple[Tensor, ...]) -> GraphPlan | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0]() is not owner:
                return None
            if not all(torch.equal(p, s) for p, s in zip(parts, hit[1])):
                self.stale += 1
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return hit[2]

    def put(self, owner: Any, key: tuple, parts: tuple[Tensor, ...], plan: GraphPlan) -> None:
        entries = self._entries

        def drop(_: weakref.ref, key: tuple = key) -> None:
            entries.pop(key, None)

        snapshot = tuple(p.clone() for p in parts)
        with self._lock:
            self.misses += 1
            entries[key] = (weakref.ref(owner, drop), snapshot, plan)
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


def resolve(
    edge_index: Any, *, num_src: int, num_dst: int, num_loops: int | None, device: torch.device, cache: bool
) -> GraphPlan:
    """The plan for one layer call: kept between calls eagerly, built with fixed-shape ops under
    ``torch.compile`` (where a CscGraph's prepared plans are still used) and for a CscGraph marked rebuilt every
    call (:attr:`~cudnn_gnn.CscGraph.rebuilt_every_call`, e.g. :func:`cudnn_gnn.sampled_blocks` or a packed
    batch's graph), whose eager self-loop removal would sync. Such a graph keeps its fixed-shape self-loop plan
    for its own life, so that the layers of one step (a GPS model's, on one batch's graph) build it once and share
    it, with what the backends derive from the plan's graph (the Triton backward's reverse CSC); without the
    self-loop rule the plan is the graph itself, kept nowhere (it would be a reference cycle through the graph)."""
    if isinstance(edge_index, CscGraph) and edge_index.device != device:
        edge_index = _moved(edge_index, device)
    if torch.compiler.is_compiling():
        if isinstance(edge_index, CscGraph):
            # a graph rebuilt every call keeps no plan; not looking saves hashing num_loops, which for a sampled
            # block under dynamic shapes is symbolic (a hash would pin it, one graph per batch size)
            plan = None if edge_index.rebuilt_every_call else edge_index.derived_if_built((_PLAN_KEY, num_loops))
            if plan is not None:
                return plan
            if num_loops is None:
                return GraphPlan(edge_index, edge_index.num_dst_nodes, form="csc_graph")
        return build_plan(edge_index, num_src, num_dst, num_loops, static=True)
    if isinstance(edge_index, CscGraph):
        graph = edge_index
        static = graph.rebuilt_every_call  # fixed-shape ops; the self-loop plan kept for the graph's other layers
        if static and num_loops is None:  # the plan is the graph itself: kept nowhere
            return build_plan(graph, num_src, num_dst, None, static=True)
        return graph.derived((_PLAN_KEY, num_loops),
                             lambda: build_plan(graph, num_src, num_dst, num_loops, static=static))
    if not cache or not isinstance(edge_index, Tensor):
        return build_plan(edge_index, num_src, num_dst, num_loops, static=False)
    parts = _index_parts(edge_index)
    key = (*_key(edge_index, parts), num_src, num_dst, num_loops)
    plan = _CACHE.get(edge_index, key, parts)
    if plan is None:
        plan = build_plan(edge_index, num_src, num_dst, num_loops, static=False)
        _CACHE.put(edge_index, key, parts, plan)
    return plan


def _moved(graph: CscGraph, device: torch.device) -> CscGraph:
    return graph.derived(("cudnn_gnn.layers.to", str(device)), lambda: graph.to(device))


def prepare_graph(graph: CscGraph, *, add_self_loops: bool = True) -> CscGraph:
    """Build and keep on ``graph`` the plans a layer needs (with and without self-loops), so later forwards,
    compiled ones included, find them. Returns ``graph``."""
    n = min(graph.num_src_nodes, graph.num_dst_nodes)
    for num_loops in ((None, n) if add_self_loops else (None,)):
        resolve(graph, num_src=graph.num_src_nodes, num_dst=graph.num_dst_nodes, num_loops=num_loops,
                device=graph.device, cache=True)
    return graph
