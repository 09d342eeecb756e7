"""The graph as the Triton kernels walk it: :class:`TritonGraph` (the CSC arrays and the forward's work list; the
backward's reverse CSC and work list, :class:`TritonBackward`, built when a backward first needs them), built by
:func:`kernel_graph` once per graph and kept on it; and the work lists themselves (:func:`work_list`): which programs
a pass over a CSC (or the reverse CSC) launches, hub rows cut into chunks."""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_gnn.backends.triton import tuning
from cudnn_gnn.graph import CscGraph

__all__ = ["TritonBackward", "TritonGraph", "WorkList", "built_kernel_graph", "kernel_graph", "work_list"]


class WorkList(NamedTuple):
    """The programs of one pass over a CSC (or reverse CSC) ``offsets [N+1]``, with rows of more than ``B`` edges
    cut into chunks of ``B`` (the last one shorter). All int64, fixed shapes (from ``N``, ``E`` and ``B`` alone,
    unless :func:`work_list` is told that no row is longer than ``B``: then ``P = N`` and ``S = R = 0``). Every row
    whole in row order (``whole_rows``): ``work`` is ``offsets`` itself, 1-D in its own dtype (item ``i`` is row
    ``i``, no list built; the kernels' ``WHOLE``, see :func:`~cudnn_gnn.backends.triton.kernels.n_items`), and
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
        graph: the CSC graph it was built from (int32 or int64 indices: the kernels compute every offset in int64).
        chunk: the most edges a program walks (:func:`~cudnn_gnn.backends.triton.tuning.chunk_size`).
        offsets, indices, map_csc_to_coo, num_src_nodes: ``graph``'s, as the kernels read them.
        rows: the forward's (and the backward's destination pass') work list over ``offsets``.
    """

    graph: CscGraph
    chunk: int
    offsets: Tensor
    indices: Tensor
    map_csc_to_coo: Tensor | None
    num_src_nodes: int
    rows: WorkList

    @property
    def num_edges(self) -> int:
        return self.indices.shape[0]

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
        return cls(graph, chunk, graph.offsets, graph.indices, graph.map_csc_to_coo, graph.num_src_nodes, rows)


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
