"""What a layer returns, shaped as PyG returns it: the output rows, residual and bias, and the attention weights
in PyG's edge order (self-loops appended last) or the sparse forms PyG gives for sparse inputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._bias import bias_add
from cudnn_gnn.graph import CscGraph, csc_offsets

from ._graph_inputs import plain
from ._graph_plan import GraphPlan, loops, pair_order

__all__ = ["finish", "attention_result"]


def finish(
    plan: GraphPlan,
    edge_index: Any,
    result: Tensor | tuple[Tensor, Tensor],
    res: Tensor | None,
    bias: Tensor | None,
    want_attention: bool,
    alpha_dtype: torch.dtype,
) -> Any:
    """Drop the dummy row, add residual and bias, and shape the attention return as PyG does."""
    out: Tensor
    alpha: Tensor | None
    if isinstance(result, tuple):
        out, alpha = result
    else:
        out, alpha = result, None
    if plan.pad_dst:
        out = out[: plan.num_dst]
    if plan.poison is not None:  # a raw edge_index with node ids out of range, under fixed-shape ops: NaN
        out = out + plan.poison.to(out.dtype)
        alpha = None if alpha is None else alpha + plan.poison.to(alpha.dtype)
    if res is not None:
        out = out + res
    out = bias_add(out, bias)  # the bias's gradient a column sum (cudnn_gnn._bias), torch's promotion kept
    if alpha is None:
        return out
    second = attention_result(plan, alpha.to(alpha_dtype), edge_index)
    return out, second


def attention_result(plan: GraphPlan, alpha: Tensor, edge_index: Any) -> Any:
    """PyG's second return value for ``return_attention_weights``: ``(edge_index, alpha)``, or the sparse
    forms for sparse inputs, in PyG's edge order (self-loops appended last; for a torch sparse adjacency with them,
    the coalesced order). ``edge_index`` is the caller's."""
    if plan.keep is not None:  # static plan: the graph also holds redirected self-loops
        if (plan.form in _LAYOUTS or plan.form == "sparse_tensor") and plan.coo is not None:
            # a sparse input's COO as the plan converted it (the caller's offsets may be malformed, made
            # well-formed there), its own edges where they were in range
            ei = torch.stack(plan.coo)
        else:
            ei = plain(edge_index if not isinstance(edge_index, CscGraph) else edge_index.edge_index())
        ar = loops(plan.num_loops, ei)
        full = torch.cat([ei, torch.stack([ar, ar])], dim=1)
        kept, a = full[:, plan.keep], alpha[plan.keep]
        if plan.form == "sparse_tensor":  # pragma: no cover - needs torch_sparse
            return _as_sparse_tensor(kept, a, plan.num_dst, plan.graph.num_src_nodes)
        if plan.form in _LAYOUTS:  # PyG's coalesced self-loop form (the eager plan's order; CSC: column-major)
            return _sorted_sparse(_LAYOUTS[plan.form], kept[0], kept[1], a, plan.num_dst, plan.graph.num_src_nodes)
        return kept, a
    if plan.form == "sparse_tensor":  # pragma: no cover - needs torch_sparse
        return plan.source.set_value(alpha, layout="coo")
    if plan.form == "csr":
        from torch_geometric.utils.sparse import set_sparse_value

        # plan.source (the self-loop form, kept with the plan) is cloned: the returned tensor shares its indices
        return set_sparse_value(edge_index if plan.source is None else plan.source.clone(), alpha), alpha
    if plan.form == "sparse_coo":
        indices = (edge_index if plan.source is None else plan.source)._indices()
        # PyG's set_sparse_value: a new tensor, coalesced (a fresh copy of the indices). These indices are
        # coalesced already: the self-loop form's are sorted and unique (_pyg_self_loop_plan), and without
        # self-loops the caller's tensor is marked coalesced (its plan refuses one that is not; torch's invariant
        # check refuses a false mark), so the tensor is marked so, not sorted again (coalesce(): a sort, and on
        # CUDA a host read). Its size in PyG is the adjacency's (dense dims of [E, D] values too) + alpha's, an
        # invalid one for [E, D] values, where PyG raises; alpha's trailing dims alone here
        size = (plan.num_dst, plan.graph.num_src_nodes, *alpha.shape[1:])
        return torch.sparse_coo_tensor(indices.clone(), alpha, size, is_coalesced=True), alpha
    if plan.form == "csc":
        cached = plan._returned.get("ei")
        ei = cached if cached is not None else plan._returned.setdefault("ei", plan.graph.edge_index())
        return _sorted_sparse(torch.sparse_csc, ei[0], ei[1], alpha, plan.num_dst, plan.graph.num_src_nodes)
    if plan.form != "csc_graph" and plan.loop_index is None:
        return edge_index, alpha
    cached = plan._returned.get("ei")
    ei = cached if cached is not None else plan._returned.setdefault("ei", _returned_edge_index(plan, edge_index))
    # a fresh tensor every call, as PyG's: the kept one must not change under a caller's in-place write
    return ei.clone(), alpha


# the torch sparse adj_t forms and their layouts
_LAYOUTS = {"csr": torch.sparse_csr, "csc": torch.sparse_csc, "sparse_coo": torch.sparse_coo}


def _sorted_sparse(layout: torch.layout, src: Tensor, dst: Tensor, alpha: Tensor, num_dst: int,
                   num_src: int) -> tuple[Tensor, Tensor]:
    """``(adj_t, alpha)``: the edges ``(src, dst)`` ``[E']`` with ``alpha [E', H]`` as a new torch sparse ``layout``
    tensor of size ``(num_dst, num_src, H)``, entries and ``alpha`` sorted into its order (by destination, then
    source; CSC by source, then destination; equal pairs stable), int64 indices. For COO no pair may come twice
    (the tensor is marked coalesced), but where a NaN plan's clamped ids made one, whose values are NaN anyway."""
    row_major = layout != torch.sparse_csc
    major, minor, n_major, n_minor = (dst, src, num_dst, num_src) if row_major else (src, dst, num_src, num_dst)
    perm = pair_order(major, minor, n_minor)[1]
    major, minor, a = major.long().index_select(0, perm), minor.long().index_select(0, perm), alpha.index_select(0, perm)
    size = (num_dst, num_src, *alpha.shape[1:])
    if layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(torch.stack([major, minor]), a, size, is_coalesced=True), a
    make = torch.sparse_csr_tensor if row_major else torch.sparse_csc_tensor
    return make(csc_offsets(major, n_major, torch.int64), minor, a, size), a


def _as_sparse_tensor(ei: Tensor, alpha: Tensor, num_dst: int, num_src: int) -> Any:  # pragma: no cover - torch_sparse
    """PyG's return for a ``SparseTensor`` input, ``set_diag(adj).set_value(alpha, layout="coo")``, from a static
    plan's kept edges ``ei [2, E']`` (the caller's in CSR order, then the loops) and their ``alpha [E', H]``:
    set_diag's entries are in (row, column) order, equal pairs in the caller's order, so a stable sort gives them."""
    from torch_geometric.typing import SparseTensor

    col, row = ei[0], ei[1]
    perm = pair_order(row, col, num_src)[1]
    return SparseTensor(row=row[perm], col=col[perm], value=alpha[perm], sparse_sizes=(num_dst, num_src),
                        is_sorted=True, trust_data=True)


def _returned_edge_index(plan: GraphPlan, edge_index: Any) -> Tensor:
    if plan.form == "csc_graph":
        return plan.graph.edge_index()
    from torch_geometric.utils import add_self_loops, remove_self_loops

    # PyG's own functions, so the returned type (Tensor or EdgeIndex, sizes, flags) is exactly PyG's.
    return add_self_loops(remove_self_loops(edge_index)[0], num_nodes=plan.num_loops)[0]
