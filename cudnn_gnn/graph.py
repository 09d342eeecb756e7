"""The CSC graph container every op and layer of cudnn-gnn consumes.

A :class:`CscGraph` holds a directed (possibly bipartite) graph in compressed sparse column form, that is,
destination-major: the incoming edges of destination ``i`` are the CSC positions ``offsets[i]:offsets[i+1]``
and their sources are ``indices[offsets[i]:offsets[i+1]]``. It also keeps ``map_csc_to_coo``, the caller's
COO edge id of every CSC position, so that edge features, dropout masks and returned attention are always in
the caller's own edge order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_index, check_int, check_tensor

__all__ = ["CscGraph", "INT32_MAX", "storage_index_dtype", "adj_t_to_coo", "csc_offsets"]

INT32_MAX = 2**31 - 1


def storage_index_dtype(*sizes: int) -> torch.dtype:
    """int32 where every index and count fits, int64 otherwise."""
    return torch.int32 if max(0, *sizes) < INT32_MAX else torch.int64  # max(0, ...): traceable with symbolic sizes


def adj_t_to_coo(adj_t: Tensor) -> Tensor:
    """``[2, nnz]`` (source, destination) of a torch sparse CSR or CSC ``adj_t`` (rows are destinations, PyG's
    convention), in the tensor's own element order. No host sync."""
    if adj_t.layout == torch.sparse_csr:
        ptr, other = adj_t.crow_indices(), adj_t.col_indices()
        rows = torch.repeat_interleave(torch.arange(adj_t.shape[0], device=ptr.device, dtype=ptr.dtype), ptr.diff(),
                                       output_size=other.numel())
        return torch.stack([other, rows.to(other.dtype)])
    if adj_t.layout == torch.sparse_csc:
        ptr, other = adj_t.ccol_indices(), adj_t.row_indices()
        cols = torch.repeat_interleave(torch.arange(adj_t.shape[1], device=ptr.device, dtype=ptr.dtype), ptr.diff(),
                                       output_size=other.numel())
        return torch.stack([cols.to(other.dtype), other])
    raise TypeError(f"adj_t must be a sparse CSR or CSC tensor, got layout {adj_t.layout}")


def csc_offsets(sorted_dst: Tensor, num_dst: int, dtype: torch.dtype) -> Tensor:
    """``[num_dst + 1]`` CSC offsets of edges whose destinations ``sorted_dst`` are sorted: ``offsets[i]`` is the
    number of edges with destination ``< i``, found by a binary search per destination (``searchsorted``).

    Fixed-shape ops only: no host sync on CUDA (``torch.bincount`` syncs there to learn its output length) and
    traceable by ``torch.compile``. Destinations ``>= num_dst`` are not counted; the caller has checked them.
    """
    bounds = torch.arange(num_dst + 1, device=sorted_dst.device, dtype=sorted_dst.dtype)
    return torch.searchsorted(sorted_dst, bounds, out_int32=dtype == torch.int32).to(dtype)


def csc_value_bounds(offsets: Tensor, indices: Tensor) -> tuple[int, int, int, int, int]:
    """What a CSC's value checks read, in one host read: ``(offsets[0], offsets[-1], the offsets' decreasing
    steps, min(indices), max(indices))``, the last two 0 where there are no edges."""
    zero = offsets.new_zeros((), dtype=torch.int64)
    decreasing = (offsets.diff() < 0).sum() if offsets.numel() > 1 else zero
    lo, hi = (indices.min().long(), indices.max().long()) if indices.numel() else (zero, zero)
    first, last, drops, lo_v, hi_v = torch.stack([offsets[0].long(), offsets[-1].long(), decreasing, lo, hi]).tolist()
    return first, last, drops, lo_v, hi_v


def _free_bytes(device: torch.device) -> int | None:
    """Memory that can still be allocated on ``device``: free GPU memory (``torch.cuda.mem_get_info``), or the
    host's available memory (psutil, else ``/proc/meminfo``-backed sysconf); ``None`` where unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX
        return None


def _check_offsets_fit(arg: str, num_nodes: int, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse, before allocating, a node count whose ``num_nodes + 1`` offsets (plus the int64 search bounds that
    build them, :func:`csc_offsets`) cannot fit in the memory ``device`` has free, with the figures."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    offsets = (num_nodes + 1) * itemsize
    need = offsets + (num_nodes + 1) * 8  # the arange of search bounds (int64 at most)
    if need < 1 << 30:  # under 1 GiB: never worth a probe
        return
    free = _free_bytes(device)
    if free is not None and need > free:
        gib = 2.0**30
        raise ValueError(
            f"{arg} must fit in memory, got {arg}={num_nodes:,}: its offsets alone need {offsets / gib:.1f} GiB "
            f"({need / gib:.1f} GiB while being built), more than the {free / gib:.1f} GiB free on {device}; "
            "pass the real node count (a few edges do not need 2**31 nodes) or relabel the nodes"
        )


@dataclass(frozen=True, eq=False)
class CscGraph:
    """A graph in destination-major CSC form, with the CSC -> COO edge permutation kept.

    Build one with :meth:`from_edge_index` (PyG COO), :meth:`from_data` (PyG ``Data``), :meth:`from_sparse`
    (``torch.sparse`` CSC/CSR/COO, ``torch_sparse.SparseTensor``, PyG ``EdgeIndex``) or :meth:`from_csc`.
    The object is immutable; conversions (:meth:`to`, :meth:`to_index_dtype`) return new graphs, and derived
    structures (reverse CSC, the int64 copy, the per-edge destination) are built once and cached, outside
    ``torch.compile`` (see :meth:`derived`).

    Attributes:
        offsets: ``[num_dst_nodes + 1]`` int32/int64, non-decreasing, ``offsets[0] == 0``,
            ``offsets[-1] == num_edges``.
        indices: ``[num_edges]`` source node of each CSC edge, same dtype as ``offsets``.
        num_src_nodes: number of source nodes (rows of ``x_src``).
        map_csc_to_coo: ``[num_edges]`` COO edge id of each CSC position, or ``None`` when the caller's edge
            order already is the CSC order.
        rebuilt_every_call: the graph is rebuilt on every forward (the layers' static plans under
            ``torch.compile``, the blocks of a sampled batch): :meth:`max_degrees` returns ``None`` instead of
            syncing, so nothing that would pay off only across calls (the hub split) is derived for it, and the
            layers apply their self-loop rule to it with fixed-shape ops (no host sync), once: the plan is kept on
            the graph for its other layers (a sort-free one where ``map_csc_to_coo`` is ``None``). A graph built
            every step inside a captured or compiled step comes from ``from_csc(..., validate=False)`` (the check
            reads values back: a host sync).
        short_rows: (with ``rebuilt_every_call``) the caller knows that its destinations have few in-edges and its
            sources few out-edges: a hint, not a checked property. Kernels may then walk every destination's
            in-edges and every source's out-edges whole (one program each, in row order) instead of cutting long
            ones into chunks: right for any lengths, fast only while they are short, and no work list is built (the
            offsets serve as one) where a chunked list takes about seventy host ops (a sampled step is host-bound).
            A sampled block qualifies on both sides: a destination has at most a fan-out's in-edges (a few more
            where duplicates were sampled), a source's out-degree is how many of the block's destinations sampled
            it, a few in papers100M-shaped batches, far below a chunk (measured in docs/scale.md).

    The two modes are fields, set when the graph is built (:meth:`from_csc`, :meth:`as_rebuilt_every_call`) and
    kept by :meth:`to` and :meth:`to_index_dtype`; the cache holds derived data only.

    Example:
        >>> import torch
        >>> from cudnn_gnn import CscGraph
        >>> g = CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [2, 0, 0]]), num_nodes=3)
        >>> g.offsets.tolist(), g.indices.tolist(), g.map_csc_to_coo.tolist()
        ([0, 2, 2, 3], [1, 2, 0], [1, 2, 0])
    """

    offsets: Tensor
    indices: Tensor
    num_src_nodes: int
    map_csc_to_coo: Tensor | None = None
    rebuilt_every_call: bool = False
    short_rows: bool = False
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ invariants (cheap, no host sync)
    def __post_init__(self) -> None:
        offsets = check_index("offsets", self.offsets)
        indices = check_index("indices", self.indices)
        check_int("num_src_nodes", self.num_src_nodes)
        if offsets.dim() != 1 or offsets.numel() == 0:
            raise ValueError(f"offsets must have shape (num_dst_nodes + 1,), got {tuple(offsets.shape)}")
        if indices.dim() != 1:
            raise ValueError(f"indices must have shape (num_edges,), got {tuple(indices.shape)}")
        if indices.dtype != offsets.dtype:
            raise TypeError(f"indices must have the dtype of offsets ({offsets.dtype}), got {indices.dtype}")
        if indices.device != offsets.device:
            raise ValueError(f"indices must be on the device of offsets ({offsets.device}), got {indices.device}")
        if self.map_csc_to_coo is not None:
            m = check_index("map_csc_to_coo", self.map_csc_to_coo)
            if m.shape != indices.shape:
                raise ValueError(f"map_csc_to_coo must have shape ({indices.numel()},), got {tuple(m.shape)}")
            if m.dtype != offsets.dtype:
                raise TypeError(f"map_csc_to_coo must have the dtype of offsets ({offsets.dtype}), got {m.dtype}")
            if m.device != offsets.device:
                raise ValueError(f"map_csc_to_coo must be on {offsets.device}, got {m.device}")
        check_bool("rebuilt_every_call", self.rebuilt_every_call)
        check_bool("short_rows", self.short_rows)
        if self.short_rows and not self.rebuilt_every_call:
            raise ValueError("short_rows must be False unless rebuilt_every_call is True (a hint for graphs rebuilt "
                             "every call, such as sampled blocks), got short_rows=True")
        if indices.numel() > 0 and self.num_src_nodes == 0:
            raise ValueError(f"num_src_nodes must be > 0 for a graph with edges, got {self.num_src_nodes}")

    # ------------------------------------------------------------------ sizes
    @property
    def num_dst_nodes(self) -> int:
        return self.offsets.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def device(self) -> torch.device:
        return self.offsets.device

    @property
    def index_dtype(self) -> torch.dtype:
        return self.offsets.dtype

    @property
    def is_bipartite(self) -> bool:
        """True when the source and destination node sets differ in size."""
        return self.num_src_nodes != self.num_dst_nodes

    def __repr__(self) -> str:
        return (
            f"CscGraph(num_src_nodes={self.num_src_nodes}, num_dst_nodes={self.num_dst_nodes}, "
            f"num_edges={self.num_edges}, index_dtype={self.index_dtype}, device={self.device})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # Caches are rebuilt on demand; they are not part of the pickled state.
        return {"offsets": self.offsets, "indices": self.indices, "num_src_nodes": self.num_src_nodes,
                "map_csc_to_coo": self.map_csc_to_coo, "rebuilt_every_call": self.rebuilt_every_call,
                "short_rows": self.short_rows}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {"rebuilt_every_call": False, "short_rows": False, **state}  # pickles from before the modes
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_cache", {})

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_csc(
        cls,
        offsets: Tensor,
        indices: Tensor,
        num_src_nodes: int,
        map_csc_to_coo: Tensor | None = None,
        *,
        dst_index: Tensor | None = None,
        edge_index: Tensor | None = None,
        rebuilt_every_call: bool = False,
        short_rows: bool = False,
        validate: bool = True,
    ) -> CscGraph:
        """Wrap existing CSC tensors (no copy). ``map_csc_to_coo=None`` means COO order is CSC order.
        ``rebuilt_every_call``, ``short_rows``: the graph's modes (see the class docstring).
        ``dst_index``: the ``[num_edges]`` destination of each CSC edge where the caller has it already (a sort's
        keys), kept instead of being rebuilt from ``offsets``. ``edge_index``: the ``[2, num_edges]`` int64 COO
        edges this CSC was sorted from (``map_csc_to_coo`` numbers them), kept for :meth:`edge_index` instead of
        being scattered back (a sampled block's slice of its batch; a layer adding self-loops to a block rebuilt
        every call reads it every call).
        ``validate``: check every value invariant (:meth:`validate`: a few host reads, ``ValueError`` naming the
        first broken one) before the graph is used; an offset or index out of range would make the kernels, or
        the graph's own ``repeat_interleave``, read and write out of bounds. ``False`` trusts the caller: for
        tensors a checked graph was built from (the library's own sampled blocks, packed batches and self-loop
        plans), where a check would cost a host sync every step."""
        graph = cls(offsets, indices, num_src_nodes, map_csc_to_coo, rebuilt_every_call, short_rows)
        if dst_index is not None:
            graph._cache["dst_index"] = dst_index
        if edge_index is not None:
            graph._cache["edge_index"] = edge_index
        return graph.validate() if check_bool("validate", validate) else graph

    @classmethod
    def from_edge_index(
        cls,
        edge_index: Tensor,
        num_nodes: int | None = None,
        *,
        size: tuple[int, int] | None = None,
        index_dtype: torch.dtype | None = None,
        validate: bool = True,
        rebuilt_every_call: bool = False,
    ) -> CscGraph:
        """Convert PyG COO edges to CSC, keeping the CSC -> COO permutation.

        Args:
            edge_index: ``[2, E]`` int32/int64; row 0 holds sources, row 1 destinations (PyG's
                ``source_to_target`` flow). Any edge order, duplicates and self-loops are kept as given.
                A PyG ``EdgeIndex`` is accepted too; when it is sorted by column (``sort_order='col'``) the sort
                is skipped, its claim checked with ``validate`` (else trusted; :meth:`validate` catches a false
                one). The graph holds copies, never views of the caller's tensor.
            num_nodes: node count of a homogeneous graph (``num_src_nodes == num_dst_nodes``); inferred as
                ``edge_index.max() + 1`` when neither it nor ``size`` is given (one host sync).
            size: ``(num_src_nodes, num_dst_nodes)`` of a bipartite graph. Exclusive with ``num_nodes``.
            index_dtype: int32 or int64 for the stored indices; default int32 where every count fits, else
                int64. The ops promote to int64 on their own where the cuDNN kernels need it.
            validate: check that every index is in range (one host sync). Turn off only for trusted input.
            rebuilt_every_call: the graph's mode (see the class docstring): a graph built for one call.

        The sort is stable, so edges of one destination keep their COO order. Cost: one stable sort of ``E``
        keys on the edges' device plus a binary search per destination (:func:`csc_offsets`); no host sync unless
        sizes are inferred or ``validate``.
        """
        ei = check_tensor("edge_index", edge_index)
        sorted_by_col = False
        try:  # PyG EdgeIndex: take its sizes and sort state, then drop to its plain data tensor
            from torch_geometric import EdgeIndex

            if isinstance(ei, EdgeIndex):
                sparse_size = ei.sparse_size()
                sorted_by_col = ei.is_sorted_by_col
                if size is None and num_nodes is None and None not in sparse_size:
                    size = (int(sparse_size[0]), int(sparse_size[1]))
                # as_tensor(), not as_subclass(Tensor): the wrapper (and the Index its rows are) has no storage of
                # its own, so a kernel reading a data pointer from it fails.
                ei = ei.as_tensor()
        except ImportError:  # pragma: no cover - torch_geometric is a dependency
            pass
        check_index("edge_index", ei)
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, num_edges), got {tuple(ei.shape)}")
        if num_nodes is not None and size is not None:
            raise ValueError(f"num_nodes and size must not both be given, got num_nodes={num_nodes}, size={size}")
        src, dst = ei[0], ei[1]
        num_edges = ei.shape[1]
        if size is not None:
            if not (isinstance(size, (tuple, list)) and len(size) == 2):
                raise TypeError(f"size must be a (num_src_nodes, num_dst_nodes) tuple, got {size!r}")
            num_src, num_dst = check_int("size[0]", size[0]), check_int("size[1]", size[1])
        elif num_nodes is not None:
            num_src = num_dst = check_int("num_nodes", num_nodes)
        else:
            num_src = num_dst = int(ei.max()) + 1 if num_edges > 0 else 0
        if validate and num_edges > 0:
            # an EdgeIndex's sort claim is checked in the same host sync (one O(E) compare): a false claim would
            # give offsets that are silently wrong
            unsorted = (dst[1:] < dst[:-1]).sum() if sorted_by_col else dst.new_zeros(())
            lo, hi_src, hi_dst, n_unsorted = torch.stack([ei.min(), src.max(), dst.max(), unsorted]).tolist()
            if n_unsorted:
                bad = int(torch.nonzero(dst[1:] < dst[:-1])[0, 0])
                raise ValueError(
                    "edge_index must be sorted by destination (row 1) where its EdgeIndex sort_order says 'col', got "
                    f"edge_index[1, {bad}]={int(dst[bad])} > edge_index[1, {bad + 1}]={int(dst[bad + 1])}; "
                    "build the EdgeIndex without sort_order or call .sort_by('col') on it"
                )
            if lo < 0:
                raise ValueError(f"edge_index must hold non-negative node ids, got minimum {lo}")
            if hi_src >= num_src:
                raise ValueError(f"edge_index[0] (sources) must be < num_src_nodes={num_src}, got maximum {hi_src}")
            if hi_dst >= num_dst:
                raise ValueError(f"edge_index[1] (destinations) must be < num_dst_nodes={num_dst}, got maximum {hi_dst}")
        dtype = index_dtype or storage_index_dtype(num_edges, num_src, num_dst)
        if dtype not in (torch.int32, torch.int64):
            raise TypeError(f"index_dtype must be torch.int32 or torch.int64, got {dtype}")
        if dtype == torch.int32 and max(num_edges, num_src, num_dst) >= INT32_MAX:
            raise ValueError(
                f"index_dtype must be torch.int64 for a graph of {num_edges} edges and "
                f"{max(num_src, num_dst)} nodes, got torch.int32"
            )
        if sorted_by_col:  # trusted without validate (then graph.validate() catches a false claim)
            perm = None
            sorted_dst = dst.to(dtype, copy=True)  # copies: the graph never shares the caller's buffers
            indices = src.to(dtype, copy=True)
        else:
            # Sorting 32-bit keys is about twice as fast as 64-bit ones on GPUs.
            key = dst.to(torch.int32) if num_dst < INT32_MAX else dst
            sorted_dst, perm = torch.sort(key, stable=True)
            indices = src[perm].to(dtype)
        _check_offsets_fit("num_dst_nodes" if size is not None else "num_nodes", num_dst, dtype, ei.device)
        offsets = csc_offsets(sorted_dst, num_dst, dtype)
        graph = cls(offsets, indices, num_src, None if perm is None else perm.to(dtype), rebuilt_every_call)
        graph._cache["dst_index"] = sorted_dst.to(dtype)
        return graph

    @classmethod
    def from_sparse(cls, adj_t: Any, *, index_dtype: torch.dtype | None = None, validate: bool = True) -> CscGraph:
        """Build from a sparse adjacency in PyG's ``adj_t`` convention: entry ``(i, j)`` is the edge ``j -> i``.

        This is how PyG's ``MessagePassing`` reads every sparse ``edge_index`` (rows are destinations, columns
        sources), so a ``torch.sparse_csr`` ``adj_t`` *is* our CSC layout and is wrapped without a sort.
        Accepts ``torch.sparse`` CSR/CSC/COO tensors, ``torch_sparse.SparseTensor`` and, as a convenience, a
        PyG ``EdgeIndex`` (which is COO ``[2, E]``, handled by :meth:`from_edge_index`). The caller's edge
        order is the sparse tensor's own element order (row-major for CSR/COO, column-major for CSC). The graph
        holds copies of the index tensors, never views of the caller's buffers (an in-place write to them after
        the call does not change it). ``validate``: as :meth:`from_edge_index`'s (the value checks, by default; a
        sparse tensor's constructor checks nothing by default).
        """
        validate = check_bool("validate", validate)
        try:
            from torch_geometric import EdgeIndex

            if isinstance(adj_t, EdgeIndex):
                return cls.from_edge_index(adj_t, index_dtype=index_dtype, validate=validate)
        except ImportError:  # pragma: no cover
            pass
        if type(adj_t).__name__ == "SparseTensor":  # torch_sparse.SparseTensor
            rowptr, col, _ = adj_t.csr()
            num_dst, num_src = adj_t.sparse_sizes()
            dtype = index_dtype or storage_index_dtype(col.numel(), num_src, num_dst)
            return cls.from_csc(rowptr.to(dtype, copy=True), col.to(dtype, copy=True), int(num_src), validate=validate)
        t = check_tensor("adj_t", adj_t)
        num_dst, num_src = int(t.shape[0]), int(t.shape[1])
        if t.layout == torch.sparse_csr:
            rowptr, col = t.crow_indices(), t.col_indices()
            dtype = index_dtype or storage_index_dtype(col.numel(), num_src, num_dst)
            return cls.from_csc(rowptr.to(dtype, copy=True), col.to(dtype, copy=True), num_src,  # never the caller's
                                validate=validate)                                            # buffers
        if t.layout == torch.sparse_csc:
            _check_offsets_fit("num_src_nodes", num_src, torch.int64, t.device)  # adj_t_to_coo's arange
            ei = adj_t_to_coo(t)
        elif t.layout == torch.sparse_coo:
            idx = t.coalesce().indices()
            ei = torch.stack([idx[1], idx[0]])
        else:
            raise TypeError(f"adj_t must be a sparse tensor (CSR, CSC or COO), SparseTensor or EdgeIndex, got {t.layout}")
        return cls.from_edge_index(ei, size=(num_src, num_dst), index_dtype=index_dtype, validate=validate)

    @classmethod
    def from_data(cls, data: Any, *, index_dtype: torch.dtype | None = None) -> CscGraph:
        """Build from a PyG ``Data`` (its ``edge_index`` or ``adj_t`` and ``num_nodes``).

        An attached ``data.csc_graph`` (:class:`~cudnn_gnn.ToCscGraph`'s) is returned as it is while it was built
        from the data's current ``edge_index``/``adj_t``: the very object, not modified in place since (its version
        counter; no device read). One built from a tensor since replaced or modified is stale, and a fresh graph is
        built instead. A ``csc_graph`` attached by hand (not built here) is returned as it is."""
        source = _data_graph_source(data)
        attached = getattr(data, "csc_graph", None)
        if attached is not None:
            built_from = attached._cache.get("data_source")
            if built_from is None or source is None or (built_from[0] is source and built_from[1] == _version(source)):
                return attached
        if source is None:
            raise ValueError(f"data must have an edge_index or adj_t attribute, got keys {list(data.keys())}")
        if getattr(data, "edge_index", None) is not None:
            graph = cls.from_edge_index(data.edge_index, num_nodes=int(data.num_nodes), index_dtype=index_dtype)
        else:
            graph = cls.from_sparse(data.adj_t, index_dtype=index_dtype)
        graph._keep("data_source", (source, _version(source)))  # what it was built from, and that object's version
        return graph

    # ------------------------------------------------------------------ conversions
    def to(self, device: torch.device | str) -> CscGraph:
        """The same graph on ``device`` (``self`` if already there); caches are moved lazily."""
        device = torch.device(device)
        if device == self.device or (device.index is None and device.type == self.device.type):
            return self
        m = None if self.map_csc_to_coo is None else self.map_csc_to_coo.to(device)
        return CscGraph(self.offsets.to(device), self.indices.to(device), self.num_src_nodes, m,
                        self.rebuilt_every_call, self.short_rows)

    def to_index_dtype(self, dtype: torch.dtype) -> CscGraph:
        """The same graph with int32 or int64 indices; the int64 copy of an int32 graph is cached."""
        if dtype == self.index_dtype:
            return self
        if dtype not in (torch.int32, torch.int64):
            raise TypeError(f"dtype must be torch.int32 or torch.int64, got {dtype}")
        key = f"as_{dtype}"
        g = self._cache.get(key)
        if g is None:
            if dtype == torch.int32 and max(self.num_edges, self.num_src_nodes, self.num_dst_nodes) >= INT32_MAX:
                raise ValueError(f"dtype must be torch.int64 for a graph of {self.num_edges} edges, got torch.int32")
            m = None if self.map_csc_to_coo is None else self.map_csc_to_coo.to(dtype)
            g = CscGraph(self.offsets.to(dtype), self.indices.to(dtype), self.num_src_nodes, m, self.rebuilt_every_call,
                         self.short_rows)
            for name in ("dst_index", "csc_rev_offsets", "rev_to_csc", "rev_dst", "map_rev_to_coo"):
                if name in self._cache:
                    g._cache[name] = self._cache[name].to(dtype)
            if "edge_index" in self._cache:  # int64 whatever the index dtype
                g._cache["edge_index"] = self._cache["edge_index"]
            self._keep(key, g)
        return g

    # ------------------------------------------------------------------ derived structures (cached)
    @property
    def dst_index(self) -> Tensor:
        """``[num_edges]`` destination of each CSC edge (non-decreasing)."""
        d = self._cache.get("dst_index")
        if d is None:
            d = torch.repeat_interleave(
                torch.arange(self.num_dst_nodes, device=self.device, dtype=self.index_dtype),
                self.offsets.diff(),
                output_size=self.num_edges,
            )
            self._keep("dst_index", d)
        return d

    @property
    def edge_ids(self) -> Tensor:
        """``[num_edges]`` COO edge id of each CSC position (``map_csc_to_coo`` or ``arange``)."""
        if self.map_csc_to_coo is not None:
            return self.map_csc_to_coo
        ids = self._cache.get("edge_ids")
        if ids is None:
            ids = torch.arange(self.num_edges, device=self.device, dtype=self.index_dtype)
            self._keep("edge_ids", ids)
        return ids

    def derived(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The structure derived from this graph under ``key``, built by ``build()`` on first use and kept.

        The one way for code outside this module to cache per-graph data (a hub split, a layer's self-loop
        plan, a backend's index layout): the graph is immutable, so what is derived from it stays valid for its
        lifetime. Keys are namespaced by their users, e.g. ``("hub_split", 256)``. ``None`` results are kept too.

        While ``torch.compile`` traces a call, a missing structure is built inside the traced graph and not kept:
        a tensor made there can live in the CUDA-graph pool of ``mode="reduce-overhead"``, which the next replay
        overwrites, so a kept one would be stale on the graph's next use. Build a static graph's structures
        eagerly (one eager call) before compiling to have them read instead of rebuilt in every compiled step.
        """
        if key in self._cache:
            return self._cache[key]
        return self._keep(key, build())

    def _keep(self, key: Hashable, value: Any) -> Any:
        """Cache ``value`` under ``key`` unless ``torch.compile`` is tracing (see :meth:`derived`); returns it."""
        if not torch.compiler.is_compiling():
            self._cache[key] = value
        return value

    def derived_if_built(self, key: Hashable) -> Any:
        """What :meth:`derived` holds under ``key``, or ``None`` if nothing was built for it yet."""
        return self._cache.get(key)

    def as_rebuilt_every_call(self, *, short_rows: bool = False) -> CscGraph:
        """This graph (the same tensors) marked ``rebuilt_every_call`` (and ``short_rows``): a new graph, carrying
        over what the caller gave :meth:`from_csc` (``dst_index``, ``edge_index``) and nothing derived from the old
        mode (degrees, work lists)."""
        graph = replace(self, rebuilt_every_call=True, short_rows=short_rows, _cache={})
        for name in ("dst_index", "edge_index"):
            if name in self._cache:
                graph._cache[name] = self._cache[name]
        return graph

    def max_degrees(self) -> tuple[int, int] | None:
        """``(largest in-degree, largest out-degree)``, or ``None`` for a graph marked rebuilt every call.

        One host sync the first time (two reductions), then kept.
        """
        if self.rebuilt_every_call:
            return None
        if "max_degrees" not in self._cache:
            self.set_max_degrees(*self._degree_maxima())
        return self._cache["max_degrees"]

    def _degree_maxima(self) -> tuple[int, int]:
        if self.num_edges == 0:
            return 0, 0
        return int(self.offsets.diff().max()), int(torch.bincount(self.indices, minlength=1).max())

    def set_max_degrees(self, largest_in: int, largest_out: int) -> None:
        """Record degree maxima that a caller computed anyway (the hub split reads the degrees it builds from),
        so :meth:`max_degrees` does not sync for them again. Ignored for a graph marked rebuilt every call."""
        if not self.rebuilt_every_call:
            self._cache.setdefault("max_degrees", (int(largest_in), int(largest_out)))

    @property
    def has_reverse_csc(self) -> bool:
        return "map_rev_to_coo" in self._cache

    @property
    def csc_rev_offsets(self) -> Tensor | None:
        """``[num_src_nodes + 1]`` source-major offsets, once :meth:`with_reverse_csc` has run."""
        return self._cache.get("csc_rev_offsets")

    @property
    def map_rev_to_coo(self) -> Tensor | None:
        """``[num_edges]`` COO edge id of each reverse-CSC position, once :meth:`with_reverse_csc` has run."""
        return self._cache.get("map_rev_to_coo")

    def reverse_csc(self) -> tuple[Tensor, Tensor]:
        """``(rev_offsets [num_src_nodes + 1], rev_to_csc [num_edges])``: the source-major order of the edges,
        as offsets per source and the CSC position of each reverse position (built once, in the graph's index
        dtype). Source ``j``'s outgoing edges are the CSC positions ``rev_to_csc[rev_offsets[j]:rev_offsets[j+1]]``,
        in CSC order. One stable sort of the sources and a binary search per source, fixed-shape ops only (no
        host sync, traceable by ``torch.compile``); what a source-major pass (a backward without atomics) walks."""
        if "rev_to_csc" in self._cache:
            return self._cache["csc_rev_offsets"], self._cache["rev_to_csc"]
        _check_offsets_fit("num_src_nodes", self.num_src_nodes, self.index_dtype, self.device)
        sorted_src, order = torch.sort(self.indices, stable=True)
        rev_offsets = self._keep("csc_rev_offsets", csc_offsets(sorted_src, self.num_src_nodes, self.index_dtype))
        return rev_offsets, self._keep("rev_to_csc", order.to(self.index_dtype))

    def reverse_dst(self) -> Tensor:
        """``[num_edges]`` destination of each reverse-CSC position, ``dst_index[rev_to_csc]`` (the column indices of
        the graph's CSR), built once in the graph's index dtype. A source-major pass reads an out-edge's destination
        from it directly instead of through the edge's CSC position: one dependent load fewer per edge."""
        d = self._cache.get("rev_dst")
        if d is None:
            _, rev_to_csc = self.reverse_csc()
            d = self._keep("rev_dst", self.dst_index.index_select(0, rev_to_csc))
        return d

    def reverse_coo_map(self) -> tuple[Tensor, Tensor]:
        """``(csc_rev_offsets [num_src_nodes + 1], map_rev_to_coo [num_edges])``: the reverse CSC as the
        deterministic cuDNN backward takes it, each reverse position's COO edge id; built once (see
        :meth:`derived` for calls traced by ``torch.compile``)."""
        rev_offsets, rev_to_csc = self.reverse_csc()
        m = self._cache.get("map_rev_to_coo")
        if m is None:
            m = self._keep("map_rev_to_coo", self.edge_ids[rev_to_csc.long()].to(self.index_dtype))
        return rev_offsets, m

    def with_reverse_csc(self) -> CscGraph:
        """Build (once) the source-major reverse CSC the deterministic backward needs; returns ``self``.

        Works on CPU and CUDA: one stable sort of the sources plus a histogram.
        """
        self.reverse_coo_map()
        return self

    def edge_index(self) -> Tensor:
        """``[2, num_edges]`` int64 COO edges in the caller's original order (inverse of the conversion; the
        tensor given to :meth:`from_csc` as ``edge_index`` where there was one)."""
        kept = self._cache.get("edge_index")
        if kept is not None:
            return kept
        ei = torch.empty(2, self.num_edges, dtype=torch.long, device=self.device)
        ids = self.edge_ids.long()
        ei[0, ids] = self.indices.long()
        ei[1, ids] = self.dst_index.long()
        return ei

    # ------------------------------------------------------------------ validation (O(E), host sync)
    def validate(self) -> CscGraph:
        """Check every value invariant; raises ValueError naming the first broken one. Returns ``self``.

        Checks: ``offsets[0] == 0``, ``offsets`` non-decreasing, ``offsets[-1] == num_edges``, every source
        index in ``[0, num_src_nodes)``, ``map_csc_to_coo`` a permutation of ``[0, num_edges)``, and that the
        per-edge destinations and COO edges a constructor kept (a sort's keys, :meth:`from_csc`'s ``dst_index`` and
        ``edge_index``) are the ones ``offsets`` and ``indices`` describe: a trusted input that is not (an
        ``EdgeIndex`` claiming a column sort it lacks, built with ``validate=False``) is caught here.
        """
        o, e = self.offsets, self.num_edges
        first, last, drops, lo, hi = csc_value_bounds(o, self.indices)  # the messages' details read more on failure
        if first != 0:
            raise ValueError(f"offsets[0] must be 0, got {first}")
        if last != e:
            raise ValueError(f"offsets[-1] must equal num_edges={e}, got {last}")
        if drops:
            bad = int(torch.nonzero(o.diff() < 0)[0, 0])
            raise ValueError(
                f"offsets must be non-decreasing, got offsets[{bad}]={int(o[bad])} > offsets[{bad + 1}]={int(o[bad + 1])}"
            )
        if e > 0 and (lo < 0 or hi >= self.num_src_nodes):
            raise ValueError(f"indices must be in [0, num_src_nodes={self.num_src_nodes}), got range [{lo}, {hi}]")
        if self.map_csc_to_coo is not None and e > 0:
            seen = torch.zeros(e, dtype=torch.bool, device=self.device)
            m = self.map_csc_to_coo.long()
            if int(m.min()) < 0 or int(m.max()) >= e:
                raise ValueError(f"map_csc_to_coo must hold edge ids in [0, {e}), got range [{int(m.min())}, {int(m.max())}]")
            seen[m] = True
            if not bool(seen.all()):
                raise ValueError("map_csc_to_coo must be a permutation of range(num_edges), got repeated edge ids")
        self._validate_kept()
        return self

    def _validate_kept(self) -> None:
        """The kept ``dst_index`` and ``edge_index`` must agree with ``offsets``, ``indices`` and the edge ids."""
        kept_dst, kept_ei = self._cache.get("dst_index"), self._cache.get("edge_index")
        if kept_dst is None and kept_ei is None:
            return
        dst = torch.repeat_interleave(torch.arange(self.num_dst_nodes, device=self.device), self.offsets.diff().long(),
                                      output_size=self.num_edges)
        if kept_dst is not None and not torch.equal(kept_dst.long(), dst):
            bad = int(torch.nonzero(kept_dst.long() != dst)[0, 0])
            raise ValueError(
                f"dst_index must be the destinations offsets describe, got dst_index[{bad}]={int(kept_dst[bad])} where "
                f"offsets place CSC edge {bad} in destination {int(dst[bad])} (edges not sorted by destination, "
                "e.g. an EdgeIndex whose sort_order='col' is false)"
            )
        if kept_ei is not None:
            ids = self.edge_ids.long()
            if tuple(kept_ei.shape) != (2, self.num_edges):
                raise ValueError(f"edge_index must have shape (2, {self.num_edges}), got {tuple(kept_ei.shape)}")
            if not (torch.equal(kept_ei[0, ids].long(), self.indices.long()) and torch.equal(kept_ei[1, ids].long(), dst)):
                raise ValueError("edge_index must hold the edges that offsets, indices and map_csc_to_coo describe, "
                                 "got different ones")

    def replace(self, **changes: Any) -> CscGraph:
        """A new graph with fields replaced (caches are not carried over)."""
        return replace(self, **changes, _cache={})


def _data_graph_source(data: Any) -> Any:
    """The ``edge_index`` (else ``adj_t``) of a PyG ``Data``: what :meth:`CscGraph.from_data` builds from; None if
    it has neither."""
    for name in ("edge_index", "adj_t"):
        value = getattr(data, name, None)
        if value is not None:
            return value
    return None


def _version(obj: Any) -> int | None:
    """A tensor's version counter (bumped by every in-place write; read on the host, no device sync); None for
    objects without one (a ``SparseTensor``: its identity alone is compared)."""
    return obj._version if isinstance(obj, Tensor) else None
