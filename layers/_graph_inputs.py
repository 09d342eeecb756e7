"""Every ``edge_index`` form a PyG layer accepts, turned into a :class:`~._graph_plan.GraphPlan`.

The forms: a ``[2, E]`` Tensor or PyG ``EdgeIndex`` (COO, row 0 sources), a ``torch_sparse.SparseTensor`` or a
torch sparse COO / CSR / CSC ``adj_t`` (rows are destinations, PyG's convention), or a :class:`~cudnn_gnn.CscGraph`.
A sparse form's offsets and indices are checked before any op reads them (an eager plan; one host read) or made
well-formed with the plan's NaN ``poison`` (a static plan), as a raw ``edge_index``'s node ids are.

With self-loops, a torch sparse COO or CSR ``adj_t`` runs on the structure PyG's ``remove_self_loops`` /
``add_self_loops`` leave it: diagonal entries removed, the loops ``i -> i`` for ``i < min(size)`` added, and the
whole coalesced (sorted by destination, then source; duplicate entries one edge). It is built here
(:func:`_pyg_self_loop_plan`), not by calling them: they hand a sparse tensor's ``values()`` (a view whose base is
the sparse tensor) to helpers that dynamo traces inside a compiled layer, and torch 2.13's dynamo raises
``IndexError`` on such a view.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_gnn.graph import CscGraph, adj_t_to_coo, csc_offsets, csc_value_bounds, storage_index_dtype

from ._graph_plan import GraphPlan, clamped_ids, compressed_ids, eager_plan, pair_order, static_plan

__all__ = ["FORMS", "build_plan", "graph_sizes", "is_sparse_form", "is_sparse_tensor", "plain"]

FORMS = "a [2, E] Tensor, EdgeIndex, SparseTensor, torch sparse COO/CSR/CSC adj_t tensor or CscGraph"


def is_sparse_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch_sparse.SparseTensor`` (False where torch_sparse is not installed)."""
    from torch_geometric.typing import SparseTensor

    return isinstance(obj, SparseTensor)


def is_sparse_form(edge_index: Any) -> bool:
    return is_sparse_tensor(edge_index) or (isinstance(edge_index, Tensor) and edge_index.layout != torch.strided)


def plain(ei: Tensor) -> Tensor:
    """``ei`` as a plain Tensor: a PyG ``EdgeIndex`` (or ``Index``) drops to its data tensor. ``as_tensor()``, not
    ``as_subclass(Tensor)``: these are wrapper subclasses with no storage of their own, and ``as_subclass`` keeps
    the wrapper, whose rows are ``Index`` wrappers again; a kernel reading their data pointer fails."""
    from torch_geometric import EdgeIndex, Index

    return ei.as_tensor() if isinstance(ei, (EdgeIndex, Index)) else ei


def graph_sizes(edge_index: Any) -> tuple[int | None, int | None]:
    """(num_src, num_dst) an edge_index form fixes by itself, as PyG's ``_check_input`` reads them."""
    if isinstance(edge_index, CscGraph):
        return edge_index.num_src_nodes, edge_index.num_dst_nodes
    if is_sparse_tensor(edge_index):  # pragma: no cover - needs torch_sparse
        n_dst, n_src = edge_index.sparse_sizes()
        return int(n_src), int(n_dst)
    if isinstance(edge_index, Tensor) and edge_index.layout in (torch.sparse_csr, torch.sparse_csc):
        return int(edge_index.shape[1]), int(edge_index.shape[0])
    if isinstance(edge_index, Tensor) and edge_index.layout == torch.sparse_coo:
        n_dst, n_src = _coo_sizes(edge_index)
        return n_src, n_dst
    return None, None


def _coo_sizes(adj_t: Tensor) -> tuple[int, int]:
    """``(num_dst, num_src)`` of a torch sparse COO ``adj_t``, refusing one that is not a matrix: its indices
    ``[2, nnz]``, trailing dense dims (``[nnz, D]`` values) allowed. (Torch stores COO indices as int64 whatever
    dtype they were given in, so their dtype needs no check.)"""
    if adj_t.sparse_dim() != 2:
        raise ValueError(f"edge_index must be a sparse adjacency of 2 sparse dims (indices of shape (2, nnz)) when a "
                         f"torch sparse COO tensor, got {adj_t.sparse_dim()} sparse dims (shape {tuple(adj_t.shape)})")
    return int(adj_t.shape[0]), int(adj_t.shape[1])


# a sparse form's index tensors as messages name them: (offsets, indices, the nodes the indices number, what the
# offsets count)
_PARTS = {"csr": ("crow_indices", "col_indices", "source", "rows"),
          "csc": ("ccol_indices", "row_indices", "destination", "columns"),
          "sparse_tensor": ("rowptr", "col", "source", "rows")}


def _check_compressed(form: str, offsets: Tensor, indices: Tensor, num_rows: int, num_indexed: int, *,
                      values: bool) -> None:
    """Refuse a sparse form's ``offsets`` (``[num_rows + 1]``) and ``indices`` (``[nnz]``, into ``[0,
    num_indexed)``) that would make its conversion index out of bounds: the shape always (a host fact); with
    ``values`` (eager plans; one host read) also offsets that do not rise from 0 to ``nnz`` without decreasing
    (``repeat_interleave`` and torch_sparse's ``ptr2ind`` write where they point) and indices outside the nodes.
    A static plan makes those well-formed instead (:func:`~._graph_plan.compressed_ids`)."""
    ptr_name, idx_name, nodes, rows = _PARTS[form]
    if offsets.dim() != 1 or offsets.numel() != num_rows + 1:
        raise ValueError(f"edge_index's {ptr_name} must have shape ({num_rows + 1},), one more than the adjacency's "
                         f"{num_rows} {rows}, got {tuple(offsets.shape)}")
    if not values:
        return
    first, last, drops, lo, hi = csc_value_bounds(offsets, indices)
    nnz = indices.numel()
    if first != 0 or last != nnz or drops:
        raise ValueError(f"edge_index's {ptr_name} must rise from 0 to nnz={nnz} without decreasing, got first "
                         f"{first}, last {last} and {drops} decreasing steps")
    if nnz and (lo < 0 or hi >= num_indexed):
        raise ValueError(f"edge_index's {idx_name} ({nodes} node ids) must be in [0, {num_indexed}), got range "
                         f"[{lo}, {hi}]")


def _check_coo(ei: Tensor) -> None:
    if ei.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"edge_index must have dtype int32 or int64, got {ei.dtype}")
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, num_edges), got {tuple(ei.shape)}")


def build_plan(edge_index: Any, num_src: int, num_dst: int, num_loops: int | None, static: bool) -> GraphPlan:
    """The plan of one ``edge_index`` in any accepted form (``static``: fixed-shape ops only)."""
    make = static_plan if static else eager_plan
    if isinstance(edge_index, CscGraph):
        g = edge_index
        if num_loops is None:  # already CSC: nothing to rewrite, eager or static
            return GraphPlan(g, g.num_dst_nodes, form="csc_graph")
        if static:  # a graph whose COO order is its CSC order needs no sort (its offsets give the plan's)
            offsets = g.offsets if g.map_csc_to_coo is None else None
            plan = static_plan(g.edge_index(), g.num_src_nodes, g.num_dst_nodes, num_loops, "csc_graph", None,
                               offsets=offsets)
        else:
            plan = eager_plan(g.edge_index(), g.num_src_nodes, g.num_dst_nodes, num_loops, "csc_graph", None)
        if static and g.short_rows:  # one self-loop more a row (the padding row's length does not matter)
            plan.graph = plan.graph.as_rebuilt_every_call(short_rows=True)
        return plan
    if is_sparse_tensor(edge_index):
        return _sparse_tensor_plan(edge_index, num_loops, static)
    if isinstance(edge_index, Tensor) and edge_index.layout in (torch.sparse_csr, torch.sparse_csc):
        return _compressed_plan(edge_index, num_loops, static)
    if isinstance(edge_index, Tensor) and edge_index.layout == torch.sparse_coo:
        return _coo_plan(edge_index, num_loops, static)
    if isinstance(edge_index, Tensor):
        if edge_index.layout != torch.strided:
            raise ValueError(f"edge_index must be a sparse COO, CSR or CSC tensor when sparse, got layout "
                             f"{edge_index.layout}")
        ei = plain(edge_index)
        _check_coo(ei)
        from torch_geometric import EdgeIndex

        form = "edge_index" if isinstance(edge_index, EdgeIndex) else "coo"
        return make(ei, num_src, num_dst, num_loops, form, None)
    raise TypeError(f"edge_index must be {FORMS}, got {type(edge_index).__name__}")


def _compressed_plan(adj_t: Tensor, num_loops: int | None, static: bool) -> GraphPlan:
    """A torch sparse CSR / CSC ``adj_t``'s plan, its offsets and indices checked first (see the module docstring).
    With self-loops, ``min(adj_t.shape)`` of them whatever the layer's count (``num_loops``, from ``x`` or ``size``),
    as PyG's ``add_self_loops`` adds to a sparse tensor; with them a static CSR plan drops repeated entries as it
    drops self-loops (the eager plan's coalescing, :func:`_pyg_self_loop_plan`)."""
    n_dst, n_src = int(adj_t.shape[0]), int(adj_t.shape[1])
    num_loops = None if num_loops is None else min(n_src, n_dst)
    form = "csr" if adj_t.layout == torch.sparse_csr else "csc"
    if form == "csr":
        offsets, indices, num_rows, num_indexed = adj_t.crow_indices(), adj_t.col_indices(), n_dst, n_src
    else:
        offsets, indices, num_rows, num_indexed = adj_t.ccol_indices(), adj_t.row_indices(), n_src, n_dst
    _check_compressed(form, offsets, indices, num_rows, num_indexed, values=not static)
    if static:
        ids, poison = compressed_ids(offsets, indices.numel())
        src, dst = (indices, ids.to(indices.dtype)) if form == "csr" else (ids.to(indices.dtype), indices)
        if form == "csr" and num_loops is not None:
            src, dst, poison = _coalesced_with_loops(src, dst, n_src, n_dst, poison)
        return static_plan(torch.stack([src, dst]), n_src, n_dst, num_loops, form, None, poison=poison)
    if form == "csc":
        return eager_plan(adj_t_to_coo(adj_t), n_src, n_dst, num_loops, form, None)
    if num_loops is not None:
        src, dst = adj_t_to_coo(adj_t)
        return _pyg_self_loop_plan(src, dst, n_src, n_dst, form)
    rowptr, col = adj_t.crow_indices(), adj_t.col_indices()  # adj_t in CSR is our CSC: no sort
    dtype = storage_index_dtype(col.numel(), n_src, n_dst)
    # copies: a plan kept between calls never holds views of the caller's buffers; checked above
    graph = CscGraph.from_csc(rowptr.to(dtype, copy=True), col.to(dtype, copy=True), n_src, validate=False)
    return GraphPlan(graph, n_dst, form=form)


def _coo_plan(adj_t: Tensor, num_loops: int | None, static: bool) -> GraphPlan:
    """A torch sparse COO ``adj_t``'s plan: its ``[2, nnz]`` indices (destination, source) checked first (see the
    module docstring). As in PyG: without self-loops its entries are the edges in their stored order, and an
    uncoalesced one is refused (PyG's ``adj_t.indices()`` raises for it); with them (``min(adj_t.shape)``, as in
    :func:`_compressed_plan`) it is coalesced on the way (:func:`_pyg_self_loop_plan`; a static plan drops the
    repeated entries with the self-loops instead, whatever the tensor's coalesced flag says, as the eager plan
    merges them whatever it says)."""
    n_dst, n_src = _coo_sizes(adj_t)
    num_loops = None if num_loops is None else min(n_src, n_dst)
    coalesced = adj_t.is_coalesced()
    if num_loops is None and not coalesced:
        raise ValueError("edge_index must be coalesced when a torch sparse COO adj_t is read without self-loops (its "
                         "entries are the edges in their stored order, as in PyG, which refuses an uncoalesced one), "
                         "got an uncoalesced tensor; pass edge_index.coalesce()")
    indices = adj_t._indices()  # the stored entries; indices() refuses an uncoalesced tensor
    dst, src = indices[0], indices[1]
    if static:
        poison = None
        if num_loops is not None:
            src, dst, poison = _coalesced_with_loops(src, dst, n_src, n_dst, None)
        return static_plan(torch.stack([src, dst]), n_src, n_dst, num_loops, "sparse_coo", None, poison=poison)
    _check_coo_ids(indices, n_dst, n_src)
    if num_loops is not None:
        return _pyg_self_loop_plan(src, dst, n_src, n_dst, "sparse_coo")
    return eager_plan(torch.stack([src, dst]), n_src, n_dst, None, "sparse_coo", None)


def _check_coo_ids(indices: Tensor, n_dst: int, n_src: int) -> None:
    """Refuse a COO ``adj_t``'s ``indices [2, nnz]`` (destination, source) outside its ``n_dst x n_src`` size, in
    one host read (torch checks no sparse invariant by default, and conversions index with them unchecked)."""
    if not indices.numel():
        return
    lo, hi = torch.aminmax(indices, dim=1)
    dst_lo, src_lo, dst_hi, src_hi = torch.cat([lo, hi]).tolist()
    for row, nodes, n, a, b in ((0, "destination", n_dst, dst_lo, dst_hi), (1, "source", n_src, src_lo, src_hi)):
        if a < 0 or b >= n:
            raise ValueError(f"edge_index's indices[{row}] ({nodes} node ids) must be in [0, {n}), got range [{a}, {b}]")


def _coalesced_with_loops(src: Tensor, dst: Tensor, n_src: int, n_dst: int,
                          poison: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """A static plan's ``(src, dst)`` ``[nnz]`` of a sparse ``adj_t`` read with self-loops, clamped into range and
    every repeated pair made a self-loop (:func:`_duplicates_as_self_loops`), and the poison (``poison``, what the
    offsets gave, plus the clamp's). Clamped first: a repeat's source is replaced, and an id out of range (whose
    clamped pair may equal another) must still make the output NaN."""
    src, dst, clamp_poison = clamped_ids(src, dst, n_src, n_dst)
    return _duplicates_as_self_loops(src, dst, n_src), dst, clamp_poison if poison is None else poison + clamp_poison


def _duplicates_as_self_loops(src: Tensor, dst: Tensor, n_src: int) -> Tensor:
    """``src`` ``[nnz]`` with every repeat of an earlier entry's ``(src, dst)`` pair made a self-loop of its
    destination, which the static plan's self-loop rule then drops: the edges coalescing would leave, with
    fixed-shape ops (a stable sort, no ``unique``). Ids already in range."""
    sorted_key, perm = pair_order(dst, src, n_src)
    repeat = torch.cat([sorted_key.new_zeros(1, dtype=torch.bool), sorted_key[1:] == sorted_key[:-1]])
    repeat = torch.empty_like(repeat).scatter_(0, perm, repeat)  # back to the stored order
    return torch.where(repeat, dst.to(src.dtype), src)


def _pyg_self_loop_plan(src: Tensor, dst: Tensor, n_src: int, n_dst: int, form: str) -> GraphPlan:
    """An eager plan of a torch sparse COO / CSR ``adj_t``'s checked entries ``(src, dst)`` ``[nnz]`` with PyG's
    self-loop structure (module docstring): sorted by destination, so the graph needs no sort and its COO order is
    PyG's element order. ``source``: the structure as the sparse tensor PyG returns attention on (int64 indices),
    its values placeholders."""
    n = min(n_src, n_dst)
    width = max(n_src, 1)
    ar = torch.arange(n, device=src.device, dtype=torch.int64)
    off_diagonal = src != dst
    key = torch.cat([dst[off_diagonal].long() * width + src[off_diagonal].long(), ar * width + ar])
    key = torch.unique(key)  # sorted, duplicates merged: PyG's coalesce
    dst, src = key // width, key % width
    dtype = storage_index_dtype(key.numel(), n_src, n_dst)
    graph = CscGraph.from_csc(csc_offsets(dst, n_dst, dtype), src.to(dtype), n_src, validate=False)
    ones = torch.ones(key.numel(), dtype=torch.bool, device=key.device)
    if form == "csr":
        source = torch.sparse_csr_tensor(csc_offsets(dst, n_dst, torch.int64), src, ones, size=(n_dst, n_src))
    else:
        source = torch.sparse_coo_tensor(torch.stack([dst, src]), ones, (n_dst, n_src), is_coalesced=True)
    return GraphPlan(graph, n_dst, num_loops=n, form=form, source=source)


def _sparse_tensor_plan(adj: Any, num_loops: int | None, static: bool) -> GraphPlan:  # pragma: no cover - torch_sparse
    """A ``torch_sparse.SparseTensor``'s plan: its CSR is our CSC. Eager, its ``rowptr`` and ``col`` are checked
    before torch_sparse's ``set_diag`` reads them (its kernels write where they point, unchecked); a static plan
    takes PyG's self-loop rule from :func:`~._graph_plan.static_plan` (fixed-shape ops, no torch_sparse kernel)."""
    from torch_geometric.typing import torch_sparse

    n_dst, n_src = (int(n) for n in adj.sparse_sizes())
    rowptr, col = _sparse_tensor_csr(adj, n_dst)
    _check_compressed("sparse_tensor", rowptr, col, n_dst, n_src, values=not static)
    num_diag = None if num_loops is None else min(n_src, n_dst)  # the self-loops set_diag adds
    if static:
        rows, poison = compressed_ids(rowptr, col.numel())
        ei = torch.stack([col, rows.to(col.dtype)])
        return static_plan(ei, n_src, n_dst, num_diag, "sparse_tensor", adj, poison=poison)
    if num_diag is not None:
        adj = torch_sparse.set_diag(adj)
        rowptr, col, _ = adj.csr()
    dtype = storage_index_dtype(col.numel(), n_src, n_dst)
    # checked above (or set_diag's form of the checked adjacency)
    graph = CscGraph.from_csc(rowptr.to(dtype, copy=True), col.to(dtype, copy=True), n_src, validate=False)
    return GraphPlan(graph, n_dst, num_loops=0 if num_diag is None else num_diag, form="sparse_tensor", source=adj)


def _sparse_tensor_csr(adj: Any, num_rows: int) -> tuple[Tensor, Tensor]:  # pragma: no cover - needs torch_sparse
    """``(rowptr [num_rows + 1], col [nnz])`` of a ``SparseTensor``: its stored ``rowptr``, or where it stores only
    COO rows, one counted from them by binary search (:func:`~cudnn_gnn.graph.csc_offsets`), not torch_sparse's
    ``ind2ptr``, which writes at each row id unchecked. A row outside ``[0, num_rows)`` leaves offsets that do not
    rise from 0 to nnz, which the check refuses (eager) or the plan poisons (static)."""
    storage = adj.storage
    if storage.has_rowptr():
        return storage.rowptr(), storage.col()
    row = storage.row()
    return csc_offsets(row, num_rows, row.dtype), storage.col()
