"""GATConv parity with PyG 2.8 on the reference backend: outputs, returned attention, gradients, state_dict.

The harness (``run_parity`` and the graph catalogue) is shared with test_gatv2_conv.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.typing import WITH_TORCH_SPARSE
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

import cudnn_gnn
from cudnn_gnn import CscGraph
from cudnn_gnn.layers import GATConv, _plan_cache

DT = torch.float64
TOL = {"rtol": 1e-9, "atol": 1e-10}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_graph(n: int, e: int, seed: int) -> Tensor:
    g = _gen(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei[:, :3] = torch.tensor([[1, 2, 2], [1, 2, 0]])  # self-loops and a duplicate-prone pair
    ei = torch.cat([ei, ei[:, 3:6]], dim=1)  # duplicate edges
    return ei[:, torch.randperm(ei.shape[1], generator=g)]  # shuffled


# name -> (edge_index, num_src, num_dst); homogeneous graphs have num_src == num_dst
GRAPHS: dict[str, Callable[[], tuple[Tensor, int, int]]] = {
    "shuffled_dup_loops": lambda: (_random_graph(7, 20, 0), 7, 7),
    "isolated_nodes": lambda: (torch.tensor([[0, 1, 2, 2], [1, 0, 1, 1]]), 6, 6),
    "empty": lambda: (torch.empty(2, 0, dtype=torch.long), 4, 4),
    "bipartite": lambda: (torch.tensor([[0, 4, 2, 5, 1, 3, 6, 2], [0, 1, 1, 2, 0, 2, 1, 2]]), 7, 3),
}


def grads_of(module: torch.nn.Module, tensors: dict[str, Tensor]) -> dict[str, Tensor | None]:
    out = {f"param:{k}": p.grad for k, p in module.named_parameters()}
    out.update({k: t.grad for k, t in tensors.items()})
    return out


def _is_sparse_tensor(t: Any) -> bool:
    return type(t).__name__ == "SparseTensor"  # torch_sparse's: no .shape or .layout; PyG returns it for such input


def attention_values(att: Any) -> Tensor:
    """The ``[E, H]`` coefficients of a layer's attention return: ``(edge_index, alpha)``, a torch sparse tensor,
    or a ``torch_sparse.SparseTensor`` whose values they are."""
    if isinstance(att, tuple):
        return att[1]
    return att.storage.value() if _is_sparse_tensor(att) else att


def assert_close_tree(a: Any, b: Any, what: str, **tol: float) -> None:
    tol = tol or TOL
    if _is_sparse_tensor(a):
        assert _is_sparse_tensor(b), f"{what}: {type(b).__name__} != SparseTensor"
        a, b = a.coo(), b.coo()  # (row, col, value): indices must be equal, values close
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), f"{what}: structure differs"
        for i, (u, v) in enumerate(zip(a, b)):
            assert_close_tree(u, v, f"{what}[{i}]", **tol)
        return
    if isinstance(a, Tensor) and a.layout != torch.strided:  # a torch sparse adjacency: same entries in one order
        assert b.layout == a.layout and b.shape == a.shape, f"{what}: {b.layout} {b.shape} != {a.layout} {a.shape}"
        for i, (u, v) in enumerate(zip(_sparse_structure(a), _sparse_structure(b))):
            assert torch.equal(u, v), f"{what}: sparse index tensor {i} differs"
        a, b = a._values() if a.layout == torch.sparse_coo else a.values(), \
            b._values() if b.layout == torch.sparse_coo else b.values()
    if isinstance(a, Tensor) and a.dtype in (torch.int32, torch.int64):
        assert type(a) is type(b), f"{what}: {type(b).__name__} != {type(a).__name__}"
        assert torch.equal(a.as_subclass(Tensor).long(), b.as_subclass(Tensor).long()), f"{what}: edge indices differ"
        return
    torch.testing.assert_close(b, a, msg=lambda m: f"{what}: {m}", **tol)


def _sparse_structure(t: Tensor) -> tuple[Tensor, ...]:
    """A torch sparse tensor's index tensors in storage order (and a COO tensor's coalesced flag, as a tensor)."""
    if t.layout == torch.sparse_coo:
        return torch.tensor(t.is_coalesced()), t._indices()
    if t.layout == torch.sparse_csr:
        return t.crow_indices(), t.col_indices()
    return t.ccol_indices(), t.row_indices()


def make_pair(pyg_cls: type, ours_cls: type, *args: Any, **kwargs: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    pyg = pyg_cls(*args, **kwargs).to(DT)
    ours = ours_cls(*args, **kwargs, backend="reference").to(DT)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    with torch.no_grad():  # make bias and residual non-trivial
        for p in pyg.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours.load_state_dict(pyg.state_dict(), strict=True)
    pyg.load_state_dict(ours.state_dict(), strict=True)
    return pyg, ours


def run_parity(
    pyg: torch.nn.Module,
    ours: torch.nn.Module,
    x: Tensor | tuple[Tensor, Tensor | None],
    edge_index: Any,
    *,
    ours_edge_index: Any = None,
    edge_attr: Tensor | None = None,
    extra: dict[str, Any] | None = None,
    compare_attention: bool = True,
) -> None:
    """Forward both layers with attention returned, compare everything, backprop a random cotangent, compare
    the gradients of the inputs and of every parameter."""
    extra = extra or {}
    results, grads = [], []
    for layer, ei in ((pyg, edge_index), (ours, edge_index if ours_edge_index is None else ours_edge_index)):
        layer.zero_grad()
        leaves: dict[str, Tensor] = {}
        if isinstance(x, Tensor):
            xs: Any = leaves.setdefault("x", x.detach().clone().requires_grad_())
        else:
            xs = tuple(None if t is None else leaves.setdefault(f"x{i}", t.detach().clone().requires_grad_())
                       for i, t in enumerate(x))
        ea = None if edge_attr is None else leaves.setdefault("edge_attr", edge_attr.detach().clone().requires_grad_())
        out, att = layer(xs, ei, ea, **extra, return_attention_weights=True)
        alpha = attention_values(att)
        cot = torch.randn(out.shape, generator=_gen(1), dtype=out.dtype)
        loss = (out * cot).sum()
        if alpha.numel() and compare_attention:
            loss = loss + (alpha * torch.randn(alpha.shape, generator=_gen(2), dtype=alpha.dtype)).sum()
        if loss.requires_grad:
            loss.backward()
        results.append((out, att))
        grads.append(grads_of(layer, leaves))
    (out_p, att_p), (out_o, att_o) = results
    assert_close_tree(out_p, out_o, "out")
    assert out_o.dtype == out_p.dtype
    if compare_attention:
        assert_close_tree(att_p, att_o, "attention")
        assert attention_values(att_o).dtype == attention_values(att_p).dtype
    gp, go = grads
    assert gp.keys() == go.keys()
    for k in gp:
        # a parameter PyG leaves out of the graph has no gradient (None, which optimizers skip, AdamW's decay too);
        # ours must leave it out as well, not give zeros
        kinds = ["None" if g[k] is None else "a tensor" for g in (gp, go)]
        assert kinds[0] == kinds[1], f"grad {k}: PyG's is {kinds[0]}, ours {kinds[1]}"
        if gp[k] is None:
            continue
        torch.testing.assert_close(go[k], gp[k], msg=lambda m, k=k: f"grad {k}: {m}", **TOL)


def features(n: int, f: int, seed: int) -> Tensor:
    return torch.randn(n, f, generator=_gen(seed), dtype=DT)


# ------------------------------------------------------------------------------------------------ the grid
CONFIGS = [  # heads, concat, bias, residual, edge_dim, fill_value, add_self_loops
    (1, True, True, False, None, "mean", True),
    (3, True, True, True, 4, "mean", True),
    (2, False, False, True, 1, 0.5, True),
    (3, False, True, False, 4, "max", False),
    (2, True, False, False, 4, torch.tensor([1.0, -2.0, 0.5, 3.0]), True),
    (1, False, True, True, 1, "add", True),
    (2, True, True, True, None, "mean", False),
    (3, True, True, False, 4, "min", True),
    (2, True, True, False, 4, "mul", True),
]


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "h{}-{}-b{}-r{}-e{}-{}-l{}".format(
    c[0], "cat" if c[1] else "mean", int(c[2]), int(c[3]), c[4],
    c[5] if isinstance(c[5], (str, float)) else "tensor", int(c[6])))
def test_parity_grid(graph: str, cfg: tuple) -> None:
    heads, concat, bias, residual, edge_dim, fill, loops = cfg
    ei, ns, nd = GRAPHS[graph]()
    kw = dict(heads=heads, concat=concat, bias=bias, residual=residual, edge_dim=edge_dim, fill_value=fill,
              add_self_loops=loops)
    ea = None if edge_dim is None else torch.randn(ei.shape[1], edge_dim, generator=_gen(3), dtype=DT)
    if edge_dim == 1:
        ea = ea.view(-1)  # PyG accepts 1-D edge features when edge_dim == 1
    if ns == nd:
        pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, **kw)
        run_parity(pyg, ours, features(ns, 5, 4), ei, edge_attr=ea)
    else:
        pyg, ours = make_pair(pyg_nn.GATConv, GATConv, (5, 6), 4, **kw)
        x = (features(ns, 5, 4), features(nd, 6, 5))
        run_parity(pyg, ours, x, ei, edge_attr=ea, extra={"size": (ns, nd)})


def test_bipartite_shared_lin_and_missing_dst() -> None:
    ei, ns, nd = GRAPHS["bipartite"]()
    # shared projection (int in_channels) over a (x_src, x_dst) tuple
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 3, heads=2, residual=True)
    run_parity(pyg, ours, (features(ns, 5, 0), features(nd, 5, 1)), ei)
    # x_dst=None with size: no destination term, no residual; loops up to min(size)
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, (5, 6), 3, heads=2)
    run_parity(pyg, ours, (features(ns, 5, 0), None), ei, extra={"size": (ns, nd)})
    # a bipartite-initialised layer fed one tensor projects it with lin_src and lin_dst
    ei7, n7, _ = GRAPHS["shuffled_dup_loops"]()
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, (5, 5), 3, heads=2)
    run_parity(pyg, ours, features(n7, 5, 2), ei7)


# ------------------------------------------------------------------------------------------------ forms
def _forms(ei: Tensor, n: int) -> dict[str, Any]:
    return {
        "tensor": ei,
        "int32": ei.to(torch.int32),
        "edge_index": EdgeIndex(ei, sparse_size=(n, n)),
        "csr_adj_t": to_torch_csr_tensor(ei.flip(0), size=(n, n)),
        "coo_adj_t": to_torch_coo_tensor(ei.flip(0), size=(n, n)),  # coalesced: duplicate pairs merged
    }


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("form", ["tensor", "int32", "edge_index", "csr_adj_t", "coo_adj_t"])
def test_edge_index_forms_match_pyg(form: str, loops: bool) -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2, add_self_loops=loops)
    ours_form = _forms(ei, n)[form]
    # PyG 2.8 computes wrong gradients for an int32 edge_index (checked against finite differences), so
    # the int32 form is judged against PyG on the int64 one.
    pyg_form = ei if form == "int32" else ours_form
    run_parity(pyg, ours, features(n, 5, 0), pyg_form, ours_edge_index=ours_form)
    if form == "int32":  # the returned edge_index has PyG's dtype (int64 once self-loops are appended)
        x = features(n, 5, 0)
        got = ours(x, ours_form, return_attention_weights=True)[1][0].dtype
        assert got == pyg(x, ours_form, return_attention_weights=True)[1][0].dtype


def _uncoalesced_adj_t(ei: Tensor, num_src: int, num_dst: int) -> Tensor:
    """``ei``'s torch sparse COO adj_t as built, entries in ``ei``'s order (duplicates and self-loops kept)."""
    return torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1], dtype=DT), (num_dst, num_src))


@pytest.mark.parametrize("graph", ["shuffled_dup_loops", "bipartite"])
def test_uncoalesced_coo_adj_t_with_self_loops_is_coalesced_like_pyg(graph: str) -> None:
    """PyG's remove_self_loops / add_self_loops coalesce a torch sparse COO adj_t (duplicate entries become one
    edge, entries sorted): the output, the coalesced attention adjacency and ``alpha`` in its order match; the
    caller's tensor stays marked uncoalesced (PyG's ``to_edge_index`` marks it coalesced, in place)."""
    ei, ns, nd = GRAPHS[graph]()
    if ns == nd:
        pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2)
        x: Any = features(ns, 5, 0)
    else:
        pyg, ours = make_pair(pyg_nn.GATConv, GATConv, (5, 6), 4, heads=2)
        x = (features(ns, 5, 0), features(nd, 6, 1))
    adj = _uncoalesced_adj_t(ei, ns, nd)
    run_parity(pyg, ours, x, _uncoalesced_adj_t(ei, ns, nd), ours_edge_index=adj)
    assert not adj.is_coalesced()


def test_uncoalesced_coo_adj_t_without_self_loops_is_refused() -> None:
    """Without self-loops PyG reads a COO adj_t's entries as stored and fails on an uncoalesced one (a bare
    RuntimeError from ``adj_t.indices()``); ours refuses it naming edge_index, and takes its coalesced form."""
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2, add_self_loops=False)
    x = features(n, 5, 0)
    with pytest.raises(RuntimeError, match="uncoalesced"):
        pyg(x, _uncoalesced_adj_t(ei, n, n))
    with pytest.raises(ValueError, match=r"^edge_index must be coalesced .*got an uncoalesced tensor; pass "
                                         r"edge_index.coalesce\(\)"):
        ours(x, _uncoalesced_adj_t(ei, n, n))
    run_parity(pyg, ours, x, _uncoalesced_adj_t(ei, n, n).coalesce())


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
@pytest.mark.parametrize("loops", [True, False])
def test_coo_adj_t_attention_is_built_coalesced_without_a_sort(loops: bool, static: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The attention returned for a COO adj_t is PyG's coalesced tensor, built from indices already coalesced (the
    self-loop form's, or the caller's tensor marked coalesced) and marked so: no ``coalesce()`` (a sort, and on
    CUDA a host read), eager or in the static plan (``is_compiling()`` patched, as in test_layer_compile.py)."""
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2, add_self_loops=loops)
    x, adj = features(n, 5, 0), to_torch_coo_tensor(ei.flip(0), size=(n, n))
    want = pyg(x, adj, return_attention_weights=True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: static)

    def refuse(self: Tensor) -> Tensor:
        raise AssertionError("coalesce() called")

    monkeypatch.setattr(Tensor, "coalesce", refuse)
    got = ours(x, adj, return_attention_weights=True)
    assert got[1][0].is_coalesced()
    assert_close_tree(want, got, "attention", **TOL)


@pytest.mark.parametrize("loops", [True, False])
def test_bipartite_coo_adj_t_matches_pyg(loops: bool) -> None:
    """A torch sparse COO adj_t of 3 destination rows and 7 source columns fixes the sizes: x as a pair, with and
    without ``size``; self-loops up to min(size) = 3."""
    ei, ns, nd = GRAPHS["bipartite"]()
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, (5, 6), 4, heads=2, residual=True, add_self_loops=loops)
    adj = to_torch_coo_tensor(ei.flip(0), size=(nd, ns))
    x = (features(ns, 5, 0), features(nd, 6, 1))
    run_parity(pyg, ours, x, adj)
    run_parity(pyg, ours, x, adj, extra={"size": (ns, nd)})


@pytest.mark.parametrize("loops", [True, False])
def test_csc_graph_matches_edge_index(loops: bool) -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    ea = torch.randn(ei.shape[1], 4, generator=_gen(3), dtype=DT)
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2, edge_dim=4, add_self_loops=loops)
    graph = CscGraph.from_edge_index(ei, num_nodes=n)
    run_parity(pyg, ours, features(n, 5, 0), ei, ours_edge_index=graph, edge_attr=ea)
    data = cudnn_gnn.ToCscGraph()(__import__("torch_geometric").data.Data(edge_index=ei, num_nodes=n))
    run_parity(pyg, ours, features(n, 5, 0), ei, ours_edge_index=data.csc_graph, edge_attr=ea)


@pytest.mark.parametrize("loops", [True, False])
def test_torch_sparse_csc_adj_t(loops: bool) -> None:
    """PyG refuses a sparse CSC edge_index; ours takes it as adj_t and returns attention as a CSC tensor."""
    ei, n, _ = GRAPHS["isolated_nodes"]()
    ei = ei[:, :3]  # no duplicates, so (row, col) -> alpha is well defined
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2, add_self_loops=loops)
    x = features(n, 5, 0)
    out_p, (ei_p, alpha_p) = pyg(x, ei, return_attention_weights=True)
    out_o, (adj_o, alpha_o) = ours(x, to_torch_csc_tensor(ei.flip(0), size=(n, n)), return_attention_weights=True)
    torch.testing.assert_close(out_o, out_p, **TOL)
    assert adj_o.layout == torch.sparse_csc
    dense_p = torch.zeros(n, n, 2, dtype=DT).index_put_((ei_p[1], ei_p[0]), alpha_p)
    torch.testing.assert_close(adj_o.to_dense(), dense_p, **TOL)
    torch.testing.assert_close(adj_o.values(), alpha_o)


@pytest.mark.skipif(not WITH_TORCH_SPARSE, reason="torch_sparse is not installed (SparseTensor form)")
def test_sparse_tensor_form() -> None:  # pragma: no cover - needs torch_sparse
    from torch_geometric.typing import SparseTensor

    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    pyg, ours = make_pair(pyg_nn.GATConv, GATConv, 5, 4, heads=2)
    adj = SparseTensor.from_edge_index(ei, sparse_sizes=(n, n)).t()
    run_parity(pyg, ours, features(n, 5, 0), adj)


# ------------------------------------------------------------------------------------------------ module parity
def same_init(pyg_cls: type, our_cls: type, args: tuple, kw: dict[str, Any]) -> tuple[Any, Any]:
    """Both layers built from the same seed: same ``repr``, same ``state_dict`` keys in order, equal values."""
    torch.manual_seed(7)
    pyg = pyg_cls(*args, **kw)
    torch.manual_seed(7)
    ours = our_cls(*args, **kw)
    assert repr(ours) == repr(pyg)
    sp, so = pyg.state_dict(), ours.state_dict()
    assert list(sp) == list(so)
    for k in sp:
        assert torch.equal(sp[k], so[k]), k
    return pyg, ours


def test_same_init_repr_and_state_dict_keys() -> None:
    for args, kw in (((8, 4), dict(heads=3, edge_dim=2, residual=True)), (((8, 6), 4), dict(bias=False))):
        pyg, ours = same_init(pyg_nn.GATConv, GATConv, args, kw)
        torch.manual_seed(8)
        pyg.reset_parameters()
        torch.manual_seed(8)
        ours.reset_parameters()
        for k, v in pyg.state_dict().items():
            assert torch.equal(v, ours.state_dict()[k]), k


def test_lazy_in_channels_match_pyg() -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    x = features(n, 5, 0).float()
    torch.manual_seed(3)
    pyg = pyg_nn.GATConv(-1, 4, heads=2, residual=True)
    torch.manual_seed(3)
    ours = GATConv(-1, 4, heads=2, residual=True)
    torch.manual_seed(4)
    out_p = pyg(x, ei)
    torch.manual_seed(4)
    out_o = ours(x, ei)
    torch.testing.assert_close(out_o, out_p, rtol=1e-5, atol=1e-6)


def test_return_attention_truthiness() -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    ours = GATConv(5, 4, heads=2)
    x = features(n, 5, 0).float()
    assert isinstance(ours(x, ei, return_attention_weights=False), Tensor)  # PyG 2.8: `if return_attention_weights:`
    assert isinstance(ours(x, ei), Tensor)
    out, (ei_out, alpha) = ours(x, ei, return_attention_weights=True)
    assert alpha.dtype == torch.float32 and alpha.shape == (ei_out.shape[1], 2)


def test_dropout_in_training_only() -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    conv = GATConv(5, 4, heads=2, dropout=0.5)
    x = features(n, 5, 0).float()
    conv.eval()
    a, b = conv(x, ei), conv(x, ei)
    assert torch.equal(a, b)
    conv.train()
    torch.manual_seed(0)
    _, (_, alpha) = conv(x, ei, return_attention_weights=True)
    assert bool(((alpha == 0) | (alpha >= 0)).all()) and bool((alpha == 0).any())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_close_to_fp32(dtype: torch.dtype) -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    conv = GATConv(16, 8, heads=2, edge_dim=4, residual=True)
    x, ea = torch.randn(n, 16), torch.randn(ei.shape[1], 4)
    ref = conv(x, ei, ea)
    with torch.autocast("cpu", dtype=dtype):
        out = conv(x, ei, ea)
    assert bool(torch.isfinite(out).all())
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
    out.float().sum().backward()
    assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in conv.parameters())


# ------------------------------------------------------------------------------------------------ caching
def test_graph_converted_once_per_edge_index(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = CscGraph.from_edge_index.__func__

    def counting(cls: type, *a: Any, **k: Any) -> CscGraph:
        calls.append(1)
        return real(cls, *a, **k)

    monkeypatch.setattr(CscGraph, "from_edge_index", classmethod(counting))
    _plan_cache.clear_cache()
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    c1, c2 = GATConv(5, 4, heads=2), GATConv(8, 4)
    x = features(n, 5, 0).float()
    for _ in range(3):  # an "epoch" of three steps through two layers sharing the graph
        c2(c1(x, ei), ei).sum().backward()
    assert len(calls) == 1
    ei.add_(0)  # an in-place write that leaves the values as they were: the plan stays
    c1(x, ei)
    assert len(calls) == 1
    ei[1, 0] = (ei[1, 0] + 1) % n  # new values: the plan is rebuilt
    c1(x, ei)
    assert len(calls) == 2
    GATConv(5, 4, add_self_loops=False)(x, ei)  # another self-loop config is another plan
    assert len(calls) == 3
    GATConv(5, 4, cache_graph=False)(x, ei)
    GATConv(5, 4, cache_graph=False)(x, ei)
    assert len(calls) == 5
    del ei
    import gc

    gc.collect()
    assert len(_plan_cache._CACHE) == 0  # entries die with their tensor


def _pyg_out(x: Tensor, ei: Tensor) -> Tensor:
    torch.manual_seed(0)
    ours = GATConv(5, 4, heads=2, backend="reference")
    pyg = pyg_nn.GATConv(5, 4, heads=2)
    pyg.load_state_dict(ours.state_dict())
    return pyg(x, ei)


@pytest.mark.parametrize("how", ["numpy_buffer", "data_write", "untyped_storage"])
def test_a_cached_graph_never_outlives_its_values(how: str) -> None:
    """Writes torch's version counter does not see (a ``torch.from_numpy`` buffer refilled through numpy,
    ``.data[...] =``, a write through the storage) change the graph the next forward uses: every forward equals
    PyG's on the values the tensor holds then."""
    import numpy as np

    _plan_cache.clear_cache()
    n, e = 12, 40
    g = torch.Generator().manual_seed(5)
    buf = np.random.default_rng(0).integers(0, n, size=(2, e))
    ei = torch.from_numpy(buf) if how == "numpy_buffer" else torch.from_numpy(buf.copy())
    x = torch.randn(n, 5, generator=g)
    torch.manual_seed(0)
    conv = GATConv(5, 4, heads=2, backend="reference")
    conv(x, ei)
    stale = _plan_cache._CACHE.stale
    for step in range(3):
        new = np.random.default_rng(step + 1).integers(0, n, size=(2, e))
        version = ei._version
        if how == "numpy_buffer":
            buf[...] = new
        elif how == "data_write":
            ei.data[...] = torch.from_numpy(new)
        else:
            ei.untyped_storage().copy_(torch.from_numpy(new).contiguous().untyped_storage())
        assert ei._version == version  # invisible to the version counter
        torch.testing.assert_close(conv(x, ei), _pyg_out(x, ei.clone()), atol=1e-6, rtol=1e-5)
    assert _plan_cache._CACHE.stale == stale + 3


def test_layers_run_under_inference_mode_and_give_pygs_output() -> None:
    """An edge_index created inside ``torch.inference_mode()`` (and what ``to_undirected`` returns there) works,
    also in a model after ``convert``, and gives PyG's output; a plan built there is not reused outside it."""
    from torch_geometric.utils import to_undirected

    from cudnn_gnn.layers import convert

    _plan_cache.clear_cache()
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    x = features(n, 5, 0).float()
    torch.manual_seed(0)
    pyg = pyg_nn.GATConv(5, 4, heads=2)
    model = convert(torch.nn.Sequential(pyg_nn.GATConv(5, 4, heads=2)))
    model[0].load_state_dict(pyg.state_dict())
    with torch.inference_mode():
        ei_inf = to_undirected(ei.clone())
        want = pyg(x, ei_inf)
        got = model[0](x, ei_inf)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        assert model[0](x, ei_inf).shape == want.shape  # cached plan, still inside
    ei_plain = to_undirected(ei)
    out = model[0](x.requires_grad_(), ei_plain)
    out.sum().backward()  # a plan from inference mode would fail here (inference tensors saved for backward)
    torch.testing.assert_close(out, pyg(x, ei_plain), atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ errors
def test_errors_name_the_argument() -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    conv = GATConv(5, 4)
    x = features(n, 5, 0).float()
    with pytest.raises(ValueError, match="^x must have shape"):
        conv(x.unsqueeze(0), ei)
    with pytest.raises(TypeError, match="^edge_index must be"):
        conv(x, ei.tolist())
    with pytest.raises(ValueError, match="^edge_index must have shape"):
        conv(x, ei[:1])
    with pytest.raises(ValueError, match=r"^edge_index\[0\] \(sources\) must be < num_src_nodes"):
        conv(x, ei + n)
    with pytest.raises(NotImplementedError, match="^aggr must be 'add'"):
        GATConv(5, 4, aggr="mean")
    with pytest.raises(ValueError, match="^backend must be one of"):
        GATConv(5, 4, backend="cuda")
    adj = to_torch_csr_tensor(ei.flip(0), size=(n, n))  # duplicate pairs merged: fewer entries than ei has edges
    with pytest.raises(NotImplementedError, match="^edge_attr must be None with add_self_loops"):
        GATConv(5, 4, edge_dim=2)(x, adj, torch.randn(adj._nnz(), 2))
    with pytest.raises(ValueError, match=r"^size\[0\] must equal"):
        conv((x, x), ei, size=(n + 1, n))


def test_coo_adj_t_refusals_name_edge_index() -> None:
    """A torch sparse COO adj_t checks nothing when built (``check_invariants`` is off by default) and conversions
    index with its ids unchecked: ids outside its size and a tensor of other than 2 sparse dims are refused naming
    edge_index before anything reads them; the sizes it fixes are checked against x."""
    n = 7
    conv = GATConv(5, 4)
    x = features(n, 5, 0).float()

    def coo(indices: list, size: tuple = (n, n)) -> Tensor:
        return torch.sparse_coo_tensor(torch.tensor(indices), torch.ones(len(indices[0])), size)

    with pytest.raises(ValueError, match=rf"^edge_index's indices\[1\] \(source node ids\) must be in \[0, {n}\), got "
                                         rf"range \[2, {n}\]"):
        conv(x, coo([[0, 1], [2, n]]))
    with pytest.raises(ValueError, match=r"^edge_index's indices\[0\] \(destination node ids\) must be in \[0, 7\), "
                                         r"got range \[-1, 1\]"):
        conv(x, coo([[-1, 1], [2, 3]]))
    with pytest.raises(ValueError, match=r"^edge_index must be a sparse adjacency of 2 sparse dims .*got 3 sparse dims"):
        conv(x, coo([[0, 1], [2, 3], [1, 1]], (n, n, n)))
    with pytest.raises(ValueError, match=r"^x must have shape \(num_nodes=7, in_channels\)"):
        conv(features(n + 1, 5, 0).float(), coo([[0, 1], [2, 3]]))


def test_grid_is_modest() -> None:
    assert len(list(itertools.product(CONFIGS, GRAPHS))) <= 40


@pytest.mark.parametrize("edge_dim", [None, 3])
def test_hub_split_path_gives_the_same_layer_results(monkeypatch: pytest.MonkeyPatch, edge_dim: int | None) -> None:
    """The layer through the hub-split path (forced here: on the GPU ``max_degree="auto"`` picks it for skewed
    graphs) equals the plain layer: output, PyG-order attention with self-loops, every gradient, and the dropout
    mask drawn from the same RNG state."""
    from cudnn_gnn.backends import gat_backend
    from cudnn_gnn.ops import plan as plan_module
    from cudnn_gnn.ops import run as run_module

    g = torch.Generator().manual_seed(3)
    n, e = 30, 240
    src, dst = torch.randint(0, n, (e,), generator=g), torch.randint(0, n, (e,), generator=g)
    dst[:80] = 4  # a hub destination
    src[80:150] = 9  # a hub source
    ei = torch.stack([src, dst])
    x = torch.randn(n, 6, generator=g, dtype=torch.float64)
    ea = None if edge_dim is None else torch.randn(e, edge_dim, generator=g, dtype=torch.float64)

    calls = []
    real_split = run_module._run_split
    monkeypatch.setattr(run_module, "_run_split", lambda *a: calls.append(1) or real_split(*a))
    monkeypatch.setattr(type(gat_backend("reference")), "splits_hubs", True)  # let "auto" consider a split

    def run(split: bool) -> list[Tensor]:
        monkeypatch.setattr(plan_module, "auto_max_degree", (lambda *a: 5) if split else (lambda *a: None))
        torch.manual_seed(0)
        conv = GATConv(6, 4, heads=3, edge_dim=edge_dim, dropout=0.3, backend="reference").double()
        _plan_cache.clear_cache()
        xl = x.clone().requires_grad_()
        torch.manual_seed(1)
        out, (ei_out, att) = conv(xl, ei, ea, return_attention_weights=True)
        gen = torch.Generator().manual_seed(2)
        ((out * torch.randn(out.shape, generator=gen, dtype=out.dtype)).sum()
         + (att * torch.randn(att.shape, generator=gen, dtype=att.dtype)).sum()).backward()
        return [out, ei_out.float(), att, xl.grad, *[p.grad for p in conv.parameters()]]

    split, plain = run(True), run(False)
    assert len(calls) == 1  # the first run went through the split, the second did not
    for a, b in zip(split, plain):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)
