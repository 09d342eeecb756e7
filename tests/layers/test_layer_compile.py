"""``torch.compile(fullgraph=True)`` through the layers, self-loops included, with no graph break."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters
from torch_geometric.data import Data

from cudnn_gnn.layers import GATConv, GATv2Conv, ToCscGraph


def _graph() -> tuple[torch.Tensor, int]:
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 9, (2, 30), generator=g)
    ei[:, :2] = torch.tensor([[3, 4], [3, 4]])  # existing self-loops PyG removes first
    return ei, 9


def _compiled(module: torch.nn.Module) -> tuple[torch.nn.Module, CompileCounterWithBackend]:
    torch._dynamo.reset()
    counters.clear()
    cnt = CompileCounterWithBackend("aot_eager")  # aot: the backward is traced too
    return torch.compile(module, backend=cnt, fullgraph=True), cnt


# Each layer once in the default run, on a different graph form and loop setting; the rest of the grid is slow.
_DEFAULT_FULLGRAPH = {(GATConv, "edge_index", True), (GATv2Conv, "csc_graph", False)}


@pytest.mark.parametrize(("cls", "graph_form", "loops"), [
    pytest.param(cls, form, loops, id=f"{loops}-{form}-{cls.__name__}",
                 marks=() if (cls, form, loops) in _DEFAULT_FULLGRAPH else pytest.mark.slow)
    for loops in (True, False) for form in ("edge_index", "csc_graph", "pyg_edge_index") for cls in (GATConv, GATv2Conv)
])
def test_fullgraph_no_graph_breaks(cls: type, graph_form: str, loops: bool) -> None:
    """``pyg_edge_index``: a PyG EdgeIndex, unwrapped with ``as_tensor()`` (``as_subclass`` broke the graph)."""
    from torch_geometric import EdgeIndex

    ei, n = _graph()
    torch.manual_seed(0)
    conv = cls(6, 4, heads=2, edge_dim=3, fill_value="mean", add_self_loops=loops, residual=True)
    x, ea = torch.randn(n, 6), torch.randn(ei.shape[1], 3)
    graph = {"edge_index": lambda: ei, "pyg_edge_index": lambda: EdgeIndex(ei, sparse_size=(n, n)),
             "csc_graph": lambda: ToCscGraph()(Data(edge_index=ei, num_nodes=n)).csc_graph}[graph_form]()
    ref = conv(x, ei, ea)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    compiled, cnt = _compiled(conv)
    out = compiled(x, graph, ea)
    out.square().sum().backward()
    assert cnt.frame_count == 1
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    for p, g in zip(conv.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)


def test_compiled_attention_weights_with_csc_graph() -> None:
    """A prepared CscGraph returns PyG's (edge_index, alpha) under fullgraph compile too."""
    ei, n = _graph()
    conv = GATConv(6, 4, heads=2)
    x = torch.randn(n, 6)
    graph = ToCscGraph()(Data(edge_index=ei, num_nodes=n)).csc_graph
    ref_out, (ref_ei, ref_alpha) = conv(x, ei, return_attention_weights=True)
    compiled, _ = _compiled(conv)
    out, (ei_out, alpha) = compiled(x, graph, return_attention_weights=True)
    assert sum(counters["graph_break"].values()) == 0
    torch.testing.assert_close(out, ref_out)
    assert torch.equal(ei_out, ref_ei)
    torch.testing.assert_close(alpha, ref_alpha)


@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
@pytest.mark.slow
def test_compiled_attention_weights_with_raw_edge_index(cls: type) -> None:
    """The static self-loop plan drops the redirected loops from the returned attention (a boolean mask)."""
    ei, n = _graph()
    conv = cls(6, 4, heads=2, edge_dim=3)
    x, ea = torch.randn(n, 6), torch.randn(ei.shape[1], 3)
    ref_out, (ref_ei, ref_alpha) = conv(x, ei, ea, return_attention_weights=True)
    compiled, _ = _compiled(conv)
    out, (ei_out, alpha) = compiled(x, ei, ea, return_attention_weights=True)
    assert sum(counters["graph_break"].values()) == 0
    torch.testing.assert_close(out, ref_out)
    assert torch.equal(ei_out, ref_ei)
    torch.testing.assert_close(alpha, ref_alpha)


def test_changing_graph_sizes_recompile_dynamic_without_breaks() -> None:
    conv = GATConv(6, 4, heads=2)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(conv, backend="eager")
    for n, e in ((9, 30), (12, 50), (15, 70)):  # the second size makes dynamo go dynamic (SymInt sizes)
        ei = torch.randint(0, n, (2, e), generator=torch.Generator().manual_seed(n))
        x = torch.randn(n, 6)
        torch.testing.assert_close(compiled(x, ei), conv(x, ei))
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
@pytest.mark.parametrize("bad", [(0, 9), (1, 9), (0, -1), (1, -3)], ids=["src-past", "dst-past", "src-neg", "dst-neg"])
def test_compiled_layers_give_nan_for_node_ids_out_of_range(cls: type, loops: bool, bad: tuple[int, int]) -> None:
    """Under ``torch.compile`` the plan cannot read ids back to refuse them (the eager layer raises ValueError): an id
    outside the nodes is clamped into range, so nothing indexes out of bounds, and the output and the returned
    attention are NaN, never wrong numbers; edge features with a reducing fill_value included. The same call on good
    ids equals the eager layer."""
    ei, n = _graph()
    torch.manual_seed(0)
    conv = cls(6, 4, heads=2, edge_dim=3, fill_value="mean", add_self_loops=loops)
    x, ea = torch.randn(n, 6), torch.randn(ei.shape[1], 3)
    torch._dynamo.reset()
    compiled = torch.compile(conv, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, ei, ea), conv(x, ei, ea), rtol=1e-5, atol=1e-6)
    wrong = ei.clone()
    wrong[bad[0], 5] = bad[1]
    with pytest.raises(ValueError, match="edge_index"):
        conv(x, wrong, ea)
    out, (_, alpha) = compiled(x, wrong, ea, return_attention_weights=True)
    assert torch.isnan(out).all() and torch.isnan(alpha).all()


# A sparse adjacency (torch sparse COO / CSR / CSC adj_t, torch_sparse SparseTensor) broken one way each: an index
# past the nodes or negative, offsets that decrease, end short of nnz, or start past 0; a COO tensor has no offsets,
# its destination ids are broken instead.
_SPARSE_BREAKS = ["index-past", "index-neg", "offsets-decrease", "offsets-end", "offsets-start"]
_COO_BREAKS = ["index-past", "index-neg", "dst-past", "dst-neg"]


def _sparse_adjacency(ei: torch.Tensor, n: int, form: str, broken: str | None) -> object:
    """``ei``'s adjacency in PyG's adj_t convention (rows are destinations) as ``form``, broken as ``broken`` says.
    ``coo``: coalesced; ``coo_uncoalesced``: ``ei``'s entries as given, and two of them once more."""
    from torch_geometric.utils import to_torch_coo_tensor

    adj = to_torch_coo_tensor(ei.flip(0), size=(n, n)).coalesce()  # no duplicate pairs: every form keeps all edges
    if form in ("coo", "coo_uncoalesced"):
        indices = adj.indices().clone() if form == "coo" else torch.cat([ei, ei[:, 7:9]], 1).flip(0)
        if broken is not None:  # indices[1] the sources, indices[0] the destinations
            indices[0 if broken.startswith("dst") else 1, 3] = n + 2 if broken.endswith("past") else -1
        coalesced = form == "coo" or None  # torch checks no invariant by default: the broken ones are kept as given
        return torch.sparse_coo_tensor(indices, torch.ones(indices.shape[1]), (n, n), is_coalesced=coalesced)
    adj = adj.to_sparse_csc() if form == "csc" else adj.to_sparse_csr()
    offsets, indices = (adj.ccol_indices(), adj.row_indices()) if form == "csc" else (adj.crow_indices(),
                                                                                      adj.col_indices())
    offsets, indices = offsets.clone(), indices.clone()
    if broken == "index-past":
        indices[3] = n + 2
    elif broken == "index-neg":
        indices[3] = -1
    elif broken == "offsets-decrease":
        offsets[4] = offsets[5] + 3
    elif broken == "offsets-end":
        offsets[-1] -= 2
    elif broken == "offsets-start":
        offsets[0] = 1
    if form == "sparse_tensor":  # pragma: no cover - needs torch_sparse
        from torch_geometric.typing import SparseTensor

        # is_sorted, trust_data: the constructor would read the broken offsets itself (its sort check)
        return SparseTensor(rowptr=offsets, col=indices, sparse_sizes=(n, n), is_sorted=True, trust_data=True)
    make = torch.sparse_csc_tensor if form == "csc" else torch.sparse_csr_tensor
    return make(offsets, indices, torch.ones(indices.numel()), (n, n))  # torch checks no invariant by default


def _needs_torch_sparse() -> pytest.MarkDecorator:
    from torch_geometric.typing import WITH_TORCH_SPARSE

    return pytest.mark.skipif(not WITH_TORCH_SPARSE, reason="torch_sparse is not installed (SparseTensor form): "
                              "pip install torch-sparse")


def _sparse_forms() -> list:
    return ["csr", "csc", "coo", pytest.param("sparse_tensor", marks=_needs_torch_sparse())]


def _breaks() -> list:
    """``(form, broken)``: each form with each of its breaks."""
    cases = ([(form, broken) for form in ("csr", "csc", "sparse_tensor") for broken in _SPARSE_BREAKS]
             + [(form, broken) for form in ("coo", "coo_uncoalesced") for broken in _COO_BREAKS])
    return [pytest.param(form, broken, id=f"{form}-{broken}",
                         marks=_needs_torch_sparse() if form == "sparse_tensor" else ()) for form, broken in cases]


# one self-loop setting a layer in the default run; the others are slow
_SPARSE_LAYERS = [(GATConv, True), (GATv2Conv, False),
                  pytest.param(GATConv, False, marks=pytest.mark.slow), pytest.param(GATv2Conv, True, marks=pytest.mark.slow)]


@pytest.mark.parametrize(("form", "broken"), _breaks())
@pytest.mark.parametrize(("cls", "loops"), _SPARSE_LAYERS)
def test_sparse_adjacency_out_of_range_gives_nan_in_the_static_plan(cls: type, loops: bool, form: str, broken: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixed-shape plan a compiled call builds, built here by letting the layer see ``is_compiling()`` (torch
    2.13's dynamo runs a frame that holds a torch sparse tensor eagerly, so a real compiled call takes the eager
    path for those): a sparse adjacency's malformed offsets are made well-formed and its indices clamped, so nothing
    reads out of bounds, and the output and the returned attention are NaN; a well-formed one gives the eager
    layer's output. The eager layer raises ``ValueError`` naming ``edge_index`` before any op reads the offsets
    (``repeat_interleave`` raises a bare RuntimeError for them on a CPU and its device-side assert ends the CUDA
    context; torch_sparse's ``set_diag`` writes where they point)."""
    ei, n = _graph()
    torch.manual_seed(0)
    conv = cls(6, 4, heads=2, add_self_loops=loops, cache_graph=False)
    x = torch.randn(n, 6)
    good, bad = _sparse_adjacency(ei, n, form, None), _sparse_adjacency(ei, n, form, broken)
    if form == "coo_uncoalesced" and not loops:  # read as stored without self-loops: refused as PyG does (a flag)
        for compiling in (False, True):
            monkeypatch.setattr(torch.compiler, "is_compiling", lambda compiling=compiling: compiling)
            with pytest.raises(ValueError, match="^edge_index must be coalesced"):
                conv(x, bad)
        return
    ref = conv(x, good)
    with pytest.raises(ValueError, match="edge_index"):
        conv(x, bad)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.testing.assert_close(conv(x, good), ref, rtol=1e-5, atol=1e-6)
    out, attention = conv(x, bad, return_attention_weights=True)
    alpha = attention[1] if isinstance(attention, tuple) else attention.storage.value()
    assert torch.isnan(out).all() and torch.isnan(alpha).all()


def _bipartite_adjacency(form: str) -> torch.Tensor:
    """A 3 x 5 adj_t (3 destinations, 5 sources) as ``form`` (as :func:`_sparse_adjacency` names them), two
    diagonal entries among its 6 (``coo_uncoalesced``: as given, and two of them once more)."""
    ei = torch.tensor([[1, 0, 4, 1, 0, 3], [0, 0, 1, 1, 2, 2]])  # (source, destination); (0, 0), (1, 1) loops
    if form == "coo_uncoalesced":
        indices = torch.cat([ei, ei[:, 2:4]], 1).flip(0)
        return torch.sparse_coo_tensor(indices, torch.ones(indices.shape[1]), (3, 5))
    coo = torch.sparse_coo_tensor(ei.flip(0), torch.ones(6), (3, 5)).coalesce()
    return {"coo": coo, "csr": coo.to_sparse_csr(), "csc": coo.to_sparse_csc()}[form]


@pytest.mark.parametrize(("form", "loops"), [("csr", True), ("csc", True), ("coo", True), ("coo", False),
                                             ("coo_uncoalesced", True)])  # without self-loops refused (test above)
@pytest.mark.parametrize(("cls", "graph"), [(cls, graph) for cls in (GATConv, GATv2Conv)
                                            for graph in ("square", "bipartite", "bipartite_no_x_dst")
                                            if not (cls is GATv2Conv and graph == "bipartite_no_x_dst")])
def test_static_plan_of_a_sparse_adjacency_returns_the_eager_attention(cls: type, form: str, loops: bool, graph: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixed-shape plan (built as in the test above) of a valid torch sparse adj_t returns what the eager layer
    returns: the output, and the attention as the same sparse tensor (layout, index tensors in the same order,
    values) with ``alpha`` in its order, where it returned ``(edge_index, alpha)``. With self-loops that is PyG's
    coalesced self-loop form (CSC: column-major), which the static plan (the caller's entries, self-loops
    redirected, the loops appended) sorts its kept edges into; an uncoalesced COO tensor's repeated entries are
    dropped as its self-loops are. On a square graph with one ``x``, and on a 3 x 5 one with ``x=(x_src, x_dst)``
    and with ``x=(x_src, None)`` (GATConv only: GATv2Conv needs ``x_dst``), whose self-loops are
    ``min(adj_t.shape)`` whatever the layer counts from ``x``."""
    from .test_gat_conv import assert_close_tree

    torch.manual_seed(0)
    if graph == "square":
        ei, n = _graph()
        adj = _sparse_adjacency(ei, n, form, None)
        conv = cls(6, 4, heads=2, add_self_loops=loops, cache_graph=False)
        x: object = torch.randn(n, 6)
    else:
        adj = _bipartite_adjacency(form)
        conv = cls((6, 6), 4, heads=2, add_self_loops=loops, cache_graph=False)
        x = (torch.randn(5, 6), None if graph == "bipartite_no_x_dst" else torch.randn(3, 6))
    ref = conv(x, adj, return_attention_weights=True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert_close_tree(ref, conv(x, adj, return_attention_weights=True), "static", rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [None, (5, 2), (5, 3), (5, 4)], ids=str)
@pytest.mark.parametrize("form", ["csr", "csc", "coo"])
def test_sparse_adjacency_gets_min_shape_self_loops_whatever_x_and_size(form: str, size: tuple | None,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``x=(x_src, None)`` on a 3 x 5 adj_t: PyG's ``add_self_loops`` gives a torch sparse tensor ``min(adj_t.shape)``
    = 3 self-loops whatever ``x`` and ``size`` say, where the layer's own count (``x_src``'s 5 rows, or ``min(size)``)
    differs: the eager and the static plan add those 3 (a count from ``x`` indexes past the 3 destinations, one from
    ``size`` misses a loop or adds one). PyG refuses a CSC adj_t with self-loops; the CSC runs as the CSR does."""
    from torch_geometric.nn import GATConv as PyGGATConv

    from .test_gat_conv import assert_close_tree

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 6, generator=g), None)
    torch.manual_seed(0)
    pyg = PyGGATConv((6, 6), 4, heads=2)
    conv = GATConv((6, 6), 4, heads=2, cache_graph=False)
    conv.load_state_dict(pyg.state_dict())
    kwargs = {} if size is None else {"size": size}
    ref = pyg(x, _bipartite_adjacency("csr" if form == "csc" else form), return_attention_weights=True, **kwargs)
    eager = conv(x, _bipartite_adjacency(form), return_attention_weights=True, **kwargs)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    static = conv(x, _bipartite_adjacency(form), return_attention_weights=True, **kwargs)
    assert_close_tree(ref[0] if form == "csc" else ref, eager[0] if form == "csc" else eager, "eager", rtol=1e-5,
                      atol=1e-6)
    assert_close_tree(eager, static, "static", rtol=1e-5, atol=1e-6)


def _adjacency_with_repeats(form: str) -> torch.Tensor:
    """A 5 x 5 adj_t holding a pair twice in a row and twice apart (row 1: columns 0, 3, 0; row 3: 4, 4), which
    torch builds unchecked: a CSR (its columns unsorted in row 1), and a COO marked coalesced."""
    dst = torch.tensor([0, 1, 1, 1, 2, 3, 3, 4])
    src = torch.tensor([2, 0, 3, 0, 2, 4, 4, 1])  # (2, 2) a diagonal entry
    if form == "csr":
        return torch.sparse_csr_tensor(torch.tensor([0, 1, 4, 5, 7, 8]), src, torch.ones(8), (5, 5))
    return torch.sparse_coo_tensor(torch.stack([dst, src]), torch.ones(8), (5, 5), is_coalesced=True)


@pytest.mark.parametrize("form", ["csr", "coo"])
@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
def test_static_plan_merges_a_sparse_adjacencys_repeated_entries_with_self_loops(cls: type, form: str,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With self-loops PyG coalesces a torch sparse CSR / COO adj_t (repeated entries one edge), whatever its COO
    coalesced flag says, and so does the eager plan; the static plan drops the repeats as it drops self-loops, so
    it gives PyG's output and attention (kept, the repeats are messages of their own: other numbers, none NaN)."""
    from torch_geometric.nn import GATConv as PyGGATConv
    from torch_geometric.nn import GATv2Conv as PyGGATv2Conv

    from .test_gat_conv import assert_close_tree

    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    pyg = (PyGGATConv if cls is GATConv else PyGGATv2Conv)(6, 4, heads=2)
    conv = cls(6, 4, heads=2, cache_graph=False)
    conv.load_state_dict(pyg.state_dict())
    ref = pyg(x, _adjacency_with_repeats(form), return_attention_weights=True)
    assert_close_tree(ref, conv(x, _adjacency_with_repeats(form), return_attention_weights=True), "eager",
                      rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert_close_tree(ref, conv(x, _adjacency_with_repeats(form), return_attention_weights=True), "static",
                      rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", _sparse_forms())
def test_compiled_layer_never_gives_numbers_for_a_malformed_sparse_adjacency(form: str) -> None:
    """Under a real ``torch.compile``, whichever path the call takes (torch 2.13's dynamo runs a frame holding a torch
    sparse tensor eagerly, so the eager check raises; a traced call takes the static plan's NaN): a ``ValueError``
    naming ``edge_index`` or an all-NaN output, never numbers and never an index out of bounds."""
    ei, n = _graph()
    torch.manual_seed(0)
    conv = GATConv(6, 4, heads=2)
    x = torch.randn(n, 6)
    torch._dynamo.reset()
    compiled = torch.compile(conv, backend="eager")
    torch.testing.assert_close(compiled(x, _sparse_adjacency(ei, n, form, None)),
                               conv(x, _sparse_adjacency(ei, n, form, None)), rtol=1e-5, atol=1e-6)
    for broken in _COO_BREAKS if form == "coo" else _SPARSE_BREAKS:
        try:
            out = compiled(x, _sparse_adjacency(ei, n, form, broken))
        except ValueError as e:
            assert "edge_index" in str(e), broken
        else:
            assert torch.isnan(out).all(), broken


def _with_values(adj: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``adj`` (a torch sparse COO / CSR / CSC adj_t) with ``values`` ``[nnz, D]`` instead of its own."""
    size = (*adj.shape[:2], *values.shape[1:])
    if adj.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(adj._indices(), values, size, is_coalesced=adj.is_coalesced())
    if adj.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(), values, size)
    return torch.sparse_csc_tensor(adj.ccol_indices(), adj.row_indices(), values, size)


@pytest.mark.parametrize("form", ["csr", "csc", "coo", "coo_uncoalesced"])
@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
def test_compiled_layer_on_a_sparse_adjacency_matches_eager(cls: type, form: str) -> None:
    """A real ``torch.compile`` of a layer given a valid torch sparse adj_t gives the eager layer's results: with
    self-loops the output and the returned attention (the sparse adjacency and ``alpha``); without them, the output
    with ``[nnz, 3]`` values read as edge features (``edge_dim``). Torch 2.13's dynamo runs the layer's frame eagerly
    for the sparse tensor and traces the functions it calls, raising ``IndexError`` in any of them given a view of a
    sparse tensor such as ``values()``: this catches one reaching them (through PyG's ``add_self_loops``, or as the
    edge features)."""
    from .test_gat_conv import assert_close_tree

    ei, n = _graph()
    x = torch.randn(n, 6)
    adj = _sparse_adjacency(ei, n, form, None)
    torch.manual_seed(0)
    conv = cls(6, 4, heads=2)
    torch._dynamo.reset()
    out, attention = torch.compile(conv, backend="eager")(x, adj, return_attention_weights=True)
    assert_close_tree(conv(x, adj, return_attention_weights=True), (out, attention), "compiled", rtol=1e-5, atol=1e-6)
    if form == "coo_uncoalesced":  # read without self-loops only when coalesced
        return
    adj = _with_values(adj, torch.randn(adj._nnz(), 3))
    torch.manual_seed(0)
    conv = cls(6, 4, heads=2, edge_dim=3, add_self_loops=False)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(conv, backend="eager")(x, adj), conv(x, adj), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
@pytest.mark.parametrize("cls", [GATConv, GATv2Conv])
def test_sparse_values_read_as_edge_features_uncopied_with_pygs_gradients(cls: type, layout: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch sparse adj_t's ``[nnz, 3]`` values read as edge features (``edge_dim``, no self-loops) reach the layer
    as the values' own memory, no copy (the eager check sees their data pointer), and their gradient, eager and
    under a real ``torch.compile`` (where the layer passes them on as a tensor that is no view: dynamo fails on a
    view of a sparse tensor), equals PyG's for the same edges given as ``edge_attr``."""
    from torch_geometric.nn import GATConv as PyGGATConv
    from torch_geometric.nn import GATv2Conv as PyGGATv2Conv

    from cudnn_gnn.layers import gat_conv, gatv2_conv

    ei, n = _graph()
    ei = ei.unique(dim=1)  # no repeated pair: the adjacency keeps every edge
    g = torch.Generator().manual_seed(1)
    x, base = torch.randn(n, 6, generator=g), torch.randn(ei.shape[1], 3, generator=g)
    torch.manual_seed(0)
    pyg = (PyGGATConv if cls is GATConv else PyGGATv2Conv)(6, 4, heads=2, edge_dim=3, add_self_loops=False)
    conv = cls(6, 4, heads=2, edge_dim=3, add_self_loops=False)
    conv.load_state_dict(pyg.state_dict())
    weights = torch.randn(n, 8, generator=g)

    def grad(layer: object, sparse: bool) -> torch.Tensor:
        values = base.clone().requires_grad_()
        if sparse:
            coo = torch.sparse_coo_tensor(ei.flip(0), values, (n, n, 3)).coalesce()
            adj = {"coo": coo, "csr": coo.to_sparse_csr(), "csc": coo.to_sparse_csc()}[layout]
            (layer(x, adj) * weights).sum().backward()
        else:
            (layer(x, ei, values) * weights).sum().backward()
        return values.grad

    seen = []
    for module in (gat_conv, gatv2_conv):
        real = module.check_edge_attr
        monkeypatch.setattr(module, "check_edge_attr", lambda ea, *a, real=real: seen.append(ea) or real(ea, *a))
    coo = torch.sparse_coo_tensor(ei.flip(0), base, (n, n, 3)).coalesce()
    adj = {"coo": coo, "csr": coo.to_sparse_csr(), "csc": coo.to_sparse_csc()}[layout]
    conv(x, adj)
    assert seen[-1].data_ptr() == adj.values().data_ptr()
    expected = grad(pyg, False)
    torch.testing.assert_close(grad(conv, True), expected, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()
    torch.testing.assert_close(grad(torch.compile(conv, backend="eager"), True), expected, rtol=1e-5, atol=1e-6)


class _StandInSparseTensor:
    """What a plan reads of a torch_sparse.SparseTensor: ``sparse_sizes()`` and its storage's ``rowptr`` or COO
    ``row`` (whichever is stored) and ``col``."""

    def __init__(self, rowptr: torch.Tensor | None, row: torch.Tensor | None, col: torch.Tensor, n: int) -> None:
        self.storage = type("Storage", (), {"has_rowptr": lambda _s: rowptr is not None, "rowptr": lambda _s: rowptr,
                                            "row": lambda _s: row, "col": lambda _s: col, "value": lambda _s: None})()
        self.sparse_sizes = lambda: (n, n)
        if rowptr is not None:  # csr() only where rowptr is stored: stored as COO, torch_sparse's would run ind2ptr
            self.csr = lambda: (rowptr, col, None)


@pytest.mark.parametrize(("stored", "broken"), [("rowptr", "offsets-decrease"), ("rowptr", "index-neg"),
                                                 ("row", "row-past"), ("row", "index-neg")])
def test_sparse_tensor_read_as_the_plan_reads_it(stored: str, broken: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SparseTensor path's own reading of ``rowptr`` (or, stored as COO, the rows: counted by binary search, not
    torch_sparse's unchecked ``ind2ptr``) and ``col``, through a stand-in (torch-sparse is not needed; ``set_diag``
    and the returned SparseTensor are, so no self-loops and no attention here): the eager layer raises
    ``ValueError`` naming ``edge_index``, the static plan gives NaN, and a well-formed one the torch CSR's output."""
    from cudnn_gnn.layers import _common, _graph_inputs

    for module in (_common, _graph_inputs):
        monkeypatch.setattr(module, "is_sparse_tensor", lambda obj: isinstance(obj, _StandInSparseTensor))
    ei, n = _graph()
    csr = _sparse_adjacency(ei, n, "csr", None)

    def stand_in(rowptr: torch.Tensor, col: torch.Tensor, row: torch.Tensor | None = None) -> _StandInSparseTensor:
        if stored == "rowptr":
            return _StandInSparseTensor(rowptr, None, col, n)
        return _StandInSparseTensor(None, torch.repeat_interleave(torch.arange(n), rowptr.diff()) if row is None else row,
                                    col, n)

    rowptr, col = csr.crow_indices().clone(), csr.col_indices().clone()
    row = None
    if broken == "offsets-decrease":
        rowptr[4] = rowptr[5] + 3
    elif broken == "row-past":
        row = torch.repeat_interleave(torch.arange(n), rowptr.diff())
        row[-1] = n + 1
    else:
        col[3] = -1
    good, bad = stand_in(csr.crow_indices(), csr.col_indices()), stand_in(rowptr, col, row)
    torch.manual_seed(0)
    conv = GATConv(6, 4, heads=2, add_self_loops=False, cache_graph=False)
    x = torch.randn(n, 6)
    ref = conv(x, csr)
    torch.testing.assert_close(conv(x, good), ref)
    with pytest.raises(ValueError, match="edge_index's (rowptr|col) "):
        conv(x, bad)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.testing.assert_close(conv(x, good), ref, rtol=1e-5, atol=1e-6)
    assert torch.isnan(conv(x, bad)).all()
