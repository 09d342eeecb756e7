"""GATConv / GATv2Conv against PyG on inputs users bring: ``dropout=1.0`` (accepted by PyG: every attention
coefficient dropped in training) and edge features of the wrong shape (the error quotes the user's shape)."""

from __future__ import annotations

import re

import pytest
import torch
from torch_geometric.nn import GATConv as PygGATConv
from torch_geometric.nn import GATv2Conv as PygGATv2Conv

from cudnn_gnn import CscGraph
from cudnn_gnn.layers import GATConv, GATv2Conv

PAIRS = [(GATConv, PygGATConv), (GATv2Conv, PygGATv2Conv)]
IDS = ["gat", "gatv2"]


def _graph():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, generator=g)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 2], [1, 2, 3, 4, 5, 6, 0, 0]])
    return x, ei, torch.randn(ei.size(1), 3, generator=g)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=IDS)
@pytest.mark.parametrize("kwargs", [{}, {"edge_dim": 3}, {"concat": False, "residual": True}])
def test_dropout_one_matches_pyg(ours, theirs, kwargs):
    x, ei, ea = _graph()
    torch.manual_seed(0)
    pyg = theirs(5, 4, heads=2, dropout=1.0, **kwargs)
    mine = ours(5, 4, heads=2, dropout=1.0, backend="reference", **kwargs)
    mine.load_state_dict(pyg.state_dict(), strict=True)
    with torch.no_grad():
        pyg.bias.uniform_(-1, 1)
        mine.bias.copy_(pyg.bias)
    edge_attr = ea if "edge_dim" in kwargs else None
    for training in (True, False):
        pyg.train(training)
        mine.train(training)
        expected, got = pyg(x, ei, edge_attr), mine(x, ei, edge_attr)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        assert torch.isfinite(got).all()
    mine.train()
    out = mine(x.requires_grad_(), ei, edge_attr)
    out.sum().backward()  # no division by zero anywhere: finite gradients
    assert all(torch.isfinite(p.grad).all() for p in mine.parameters() if p.grad is not None)
    if not kwargs.get("residual"):
        torch.testing.assert_close(out, mine.bias.expand_as(out))  # bias only, as PyG


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_outside_unit_interval_refused_at_construction(ours, p):
    with pytest.raises(ValueError, match=rf"dropout must be in \[0, 1\], got {p}"):
        ours(5, 4, dropout=p)


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
@pytest.mark.parametrize("as_graph", [False, True], ids=["coo", "csc"])
@pytest.mark.parametrize("shape", [(8, 5), (9, 3), (7, 3), (8,), (8, 3, 1)])
def test_edge_attr_shape_error_quotes_users_shape(ours, as_graph, shape):
    x, ei, _ = _graph()
    layer = ours(5, 4, heads=2, edge_dim=3)
    edge_index = CscGraph.from_edge_index(ei, num_nodes=7) if as_graph else ei
    want = f"edge_attr must have shape (num_edges=8, edge_dim=3), got {tuple(shape)}"
    with pytest.raises(ValueError, match=re.escape(want)):
        layer(x, edge_index, torch.randn(shape))


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=IDS)
def test_edge_attr_one_column_as_vector_like_pyg(ours, theirs):
    x, ei, ea = _graph()
    torch.manual_seed(0)
    pyg = theirs(5, 4, heads=2, edge_dim=1)
    mine = ours(5, 4, heads=2, edge_dim=1, backend="reference")
    mine.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(mine(x, ei, ea[:, 0]), pyg(x, ei, ea[:, 0]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("add_self_loops", [True, False])
@pytest.mark.parametrize(
    ("x_form", "size"),
    [("tensor", (7, 2)), ("tensor", (None, 3)), ("pair", (7, 5)), ("pair", (None, 2))],
)
def test_gat_size_disagreeing_with_destination_rows_refused_like_pyg(x_form, size, add_self_loops):
    """size=(7, 2) with a 7-row x was accepted (7 output rows); PyG raises ValueError, as do we, naming size[1]."""
    x, ei, _ = _graph()
    ei = ei.clamp(max=1)  # destinations < 2 so that only the size check can refuse
    arg = x if x_form == "tensor" else (x, x[:3])
    torch.manual_seed(0)
    theirs = PygGATConv(5, 4, heads=2, add_self_loops=add_self_loops)
    with pytest.raises((ValueError, TypeError)):  # TypeError: PyG's min(size) on a None entry, before its check
        theirs(arg, ei, size=size)
    ours = GATConv(5, 4, heads=2, add_self_loops=add_self_loops)
    rows = 7 if x_form == "tensor" else 3
    name = "x" if x_form == "tensor" else r"x\[1\]"
    with pytest.raises(ValueError, match=rf"size\[1\] must equal the number of destination nodes in {name} \({rows}\), "
                                         rf"got {size[1]}"):
        ours(arg, ei, size=size)


def test_gat_size_agreeing_with_x_runs_like_pyg():
    x, ei, _ = _graph()
    torch.manual_seed(0)
    theirs = PygGATConv(5, 4, heads=2)
    ours = GATConv(5, 4, heads=2, backend="reference")
    ours.load_state_dict(theirs.state_dict())
    for arg, size in ((x, (7, 7)), (x, (None, 7)), ((x, None), (7, 7)), ((x, None), (None, 7)), ((x, x), (7, None))):
        torch.testing.assert_close(ours(arg, ei, size=size), theirs(arg, ei, size=size) if None not in size
                                   else theirs(arg, ei), rtol=1e-5, atol=1e-6)


def _edge_index_forms(ei, n):
    from torch_geometric import EdgeIndex

    return {"coo": ei, "edge_index": EdgeIndex(ei, sparse_size=(n, n)),
            "csc_graph": CscGraph.from_edge_index(ei, num_nodes=n)}


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=IDS)
@pytest.mark.parametrize("form", ["coo", "edge_index", "csc_graph", "csr", "sparse_coo"])
def test_returned_attention_edge_index_is_fresh_every_call(ours, theirs, form):
    """The returned edge_index was one tensor kept with the plan: a caller's in-place write to it changed what the
    next call returned. PyG builds a new one every call."""
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

    x, ei, _ = _graph()
    sparse = {"csr": to_torch_csr_tensor, "sparse_coo": to_torch_coo_tensor}
    f = sparse[form](ei.flip(0), size=(7, 7)) if form in sparse else _edge_index_forms(ei, 7)[form]
    conv = ours(5, 4, heads=2, backend="reference")
    first = conv(x, f, return_attention_weights=True)[1][0]
    second = conv(x, f, return_attention_weights=True)[1][0]
    if form in sparse:  # the self-loop form of the adjacency: its index tensors
        def index(t):
            return t.col_indices() if form == "csr" else t.indices()

        assert index(first).data_ptr() != index(second).data_ptr()
        keep = index(second).clone()
        index(first).fill_(3)
        assert torch.equal(index(conv(x, f, return_attention_weights=True)[1][0]), keep)
        return
    first, second = (t.as_tensor() if hasattr(t, "as_tensor") else t for t in (first, second))  # an EdgeIndex's data
    assert first.data_ptr() != second.data_ptr()
    expected = second.clone()
    first.fill_(3)  # the caller's in-place write
    third = conv(x, f, return_attention_weights=True)[1][0]
    assert torch.equal(third, expected)
    ref = theirs(5, 4, heads=2)(x, ei, return_attention_weights=True)[1][0]
    assert torch.equal(third, ref)


# --- a torch_sparse.SparseTensor edge_index with edge_dim: PyG's rule ---------------------------------------------


def test_sparse_tensor_edge_attr_rule_refuses_self_loops_like_pyg():
    """PyG raises NotImplementedError for a SparseTensor edge_index in a layer with edge_dim and add_self_loops,
    whether edge features are given or not (it cannot fill self-loop features into a SparseTensor)."""
    from cudnn_gnn.layers._common import sparse_tensor_edge_attr_rule

    vals, ea = torch.randn(5), torch.randn(5, 1)
    for edge_attr, values in ((None, vals), (ea, vals), (None, None), (ea, None)):
        with pytest.raises(NotImplementedError, match=r"edge_dim must be None for GATConv with add_self_loops=True when "
                                                      r"edge_index is a SparseTensor \(as in PyG"):
            sparse_tensor_edge_attr_rule("GATConv", edge_attr, values, edge_dim=1, add_self_loops=True)


def test_sparse_tensor_edge_attr_rule_reads_2d_values_as_edge_attr_like_pyg():
    """Without self-loops PyG's generated MessagePassing collect reads a SparseTensor's [E, D] values as edge_attr
    when none is given and passes None for [E] values (edge weights, which GAT ignores). We once read [E] values as
    edge_attr too, adding an edge term PyG's layer does not have."""
    from cudnn_gnn.layers._common import sparse_tensor_edge_attr_rule

    vals, weights, ea = torch.randn(5, 1), torch.randn(5), torch.randn(5, 1)
    assert sparse_tensor_edge_attr_rule("GATConv", None, vals, edge_dim=1, add_self_loops=False) is vals
    assert sparse_tensor_edge_attr_rule("GATConv", None, weights, edge_dim=1, add_self_loops=False) is None
    assert sparse_tensor_edge_attr_rule("GATConv", ea, vals, edge_dim=1, add_self_loops=False) is ea
    assert sparse_tensor_edge_attr_rule("GATConv", ea, weights, edge_dim=1, add_self_loops=False) is ea
    assert sparse_tensor_edge_attr_rule("GATConv", None, None, edge_dim=1, add_self_loops=False) is None


class _StandInSparseTensor:
    """What the layers read of a torch_sparse.SparseTensor before building a plan: ``storage.value()``."""

    def __init__(self, value):
        self.storage = type("Storage", (), {"value": lambda _self: value})()


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
def test_layers_apply_the_sparse_tensor_rule(ours, monkeypatch):
    """The layers' wiring of the rule, with a stand-in for a SparseTensor (torch-sparse is not needed to decide)."""
    from cudnn_gnn.layers import _common

    vals = torch.randn(4, 1)
    fake = _StandInSparseTensor(vals)
    monkeypatch.setattr(_common, "is_sparse_tensor", lambda obj: isinstance(obj, _StandInSparseTensor))
    assert _common.sparse_tensor_edge_attr("GATConv", fake, None, 1, False) is vals
    assert _common.sparse_tensor_edge_attr("GATConv", _StandInSparseTensor(vals.view(-1)), None, 1, False) is None
    assert _common.sparse_tensor_edge_attr("GATConv", fake, None, None, True) is None  # no edge_dim: not read
    ei = torch.tensor([[0, 1], [1, 0]])
    assert _common.sparse_tensor_edge_attr("GATConv", ei, None, 1, True) is None  # other forms: untouched
    x = torch.randn(3, 5)
    with pytest.raises(NotImplementedError, match="when edge_index is a SparseTensor"):
        ours(5, 4, heads=2, edge_dim=1)(x, fake)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=IDS)
def test_sparse_tensor_with_values_and_edge_dim_matches_pyg(ours, theirs):
    """PyG's test_gat_conv_with_edge_attr with torch-sparse installed: a SparseTensor carrying values in a layer with
    edge_dim=1 is refused with self-loops; without them PyG reads [E, 1] values as edge_attr (the edge_index +
    edge_attr result) and ignores [E] values (edge weights: the result without edge features), and so do we."""
    pytest.importorskip("torch_sparse", reason="a torch_sparse.SparseTensor needs torch-sparse: pip install torch-sparse")
    from torch_geometric.typing import SparseTensor

    x, ei, _ = _graph()
    w = torch.randn(ei.size(1), 1)
    for cls in (ours, theirs):
        with pytest.raises(NotImplementedError):
            cls(5, 4, heads=2, edge_dim=1, fill_value=0.5)(x, SparseTensor.from_edge_index(ei, w, (7, 7)).t())
    torch.manual_seed(0)
    pyg = theirs(5, 4, heads=2, edge_dim=1, add_self_loops=False)
    conv = ours(5, 4, heads=2, edge_dim=1, add_self_loops=False, backend="reference")
    conv.load_state_dict(pyg.state_dict())
    for values, expected in ((w, pyg(x, ei, w)), (w.view(-1), pyg(x, ei))):
        adj_t = SparseTensor.from_edge_index(ei, values, (7, 7)).t()
        torch.testing.assert_close(pyg(x, adj_t), expected, rtol=1e-5, atol=1e-6)  # PyG's own semantics
        torch.testing.assert_close(conv(x, adj_t), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(conv(x, ei, w), pyg(x, ei, w), rtol=1e-5, atol=1e-6)


# --- a PyG EdgeIndex reaches the kernels as plain tensors ---------------------------------------------------------


@pytest.mark.parametrize("num_loops", [None, 3])
@pytest.mark.parametrize("sort", [None, "col"])
def test_edge_index_plan_holds_plain_tensors(sort, num_loops):
    """An EdgeIndex was dropped with as_subclass(Tensor), which keeps the storage-less wrapper (and Index rows): a
    kernel reading the plan graph's data pointers failed with 'invalid python storage'."""
    from torch_geometric import EdgeIndex

    from cudnn_gnn.layers._graph_inputs import build_plan, plain

    e = EdgeIndex(torch.tensor([[0, 1, 2, 1], [1, 0, 1, 2]]), sparse_size=(3, 3))
    if sort is not None:
        e = e.sort_by(sort)[0]
    assert type(plain(e)) is torch.Tensor and type(plain(e)[0]) is torch.Tensor
    g = build_plan(e, 3, 3, num_loops, False).graph
    held = [g.offsets, g.indices, g.dst_index, g.edge_ids]
    assert all(type(t) is torch.Tensor for t in held), [type(t).__name__ for t in held]


_TRITON_EDGE_INDEX = """
import torch
from torch_geometric import EdgeIndex
from cudnn_gnn import CscGraph
from cudnn_gnn.layers import GATConv, GATv2Conv

ei = torch.tensor([[1, 0, 2, 3, 1, 3], [0, 1, 1, 2, 2, 3]])  # sorted by destination
x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
forms = {"sorted": EdgeIndex(ei, sparse_size=(4, 4), sort_order="col"), "unsorted": EdgeIndex(ei[:, [3, 0, 5, 1, 4, 2]])}
forms["graph"] = CscGraph.from_edge_index(forms["sorted"])
for cls in (GATConv, GATv2Conv):
    for loops in (False, True):
        torch.manual_seed(0)
        ref = cls(5, 3, heads=2, add_self_loops=loops, backend="reference")
        tri = cls(5, 3, heads=2, add_self_loops=loops, backend="triton")
        tri.load_state_dict(ref.state_dict())
        for name, f in forms.items():
            want = ref(x, ei[:, [3, 0, 5, 1, 4, 2]] if name == "unsorted" else ei)
            torch.testing.assert_close(tri(x, f), want, rtol=1e-4, atol=1e-5, msg=f"{cls.__name__} {loops} {name}")
print("ok")
"""


def test_triton_backend_runs_on_an_edge_index_under_the_interpreter():
    """GATConv / GATv2Conv with backend='triton' on an EdgeIndex (sorted by column, unsorted, and a CscGraph built
    from one), against the reference backend, on the Triton interpreter in a process of its own (Triton decides
    between compiling and interpreting when it first decorates the kernels)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", _TRITON_EDGE_INDEX], env=env, text=True, capture_output=True,
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=IDS)
@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_torch_sparse_values_read_as_edge_attr_like_pyg(ours, theirs, layout):
    """A torch sparse adj_t with [E, edge_dim] values: PyG reads them as edge_attr, and so do ours without
    self-loops; with self-loops (PyG fills loop features into the values) ours refuse, rather than give other
    numbers."""
    x, ei, ea = _graph()
    ea = ea[:, :2]
    coo = torch.sparse_coo_tensor(ei.flip(0), ea, (7, 7, 2)).coalesce()  # rows are destinations (adj_t)
    adj = {"csr": coo.to_sparse_csr, "csc": coo.to_sparse_csc, "coo": lambda: coo}[layout]()
    torch.manual_seed(0)
    pyg = theirs(5, 4, heads=2, edge_dim=2, add_self_loops=False)
    conv = ours(5, 4, heads=2, edge_dim=2, add_self_loops=False, backend="reference")
    conv.load_state_dict(pyg.state_dict())
    expected = pyg(x, ei, ea)
    torch.testing.assert_close(conv(x, adj), expected, rtol=1e-5, atol=1e-6)
    if layout != "csc":  # PyG refuses a CSC edge_index
        torch.testing.assert_close(pyg(x, adj), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match=r"edge_dim must be None for .* with add_self_loops=True when "
                                                  r"edge_index is a torch sparse tensor with \[num_edges, edge_dim\]"):
        ours(5, 4, heads=2, edge_dim=2)(x, adj)


@pytest.mark.parametrize("loops", [False, True])
@pytest.mark.parametrize("form", ["csr", "coo", "sparse_tensor"])
def test_gatv2_without_edge_dim_refuses_2d_sparse_values_like_pyg(form, loops):
    """GATv2Conv built without edge_dim: PyG reads a sparse edge_index's [E, D] values as edge_attr and its
    edge_update asserts lin_edge, so it raises for them (1-D values are edge weights: no edge features, it runs);
    ours refused no values and ran without them."""
    x, ei, ea = _graph()
    if form == "sparse_tensor":
        pytest.importorskip("torch_sparse", reason="a torch_sparse.SparseTensor needs torch-sparse: pip install "
                                                   "torch-sparse")
        from torch_geometric.typing import SparseTensor

        def make(values):
            return SparseTensor.from_edge_index(ei, values, (7, 7)).t()
    else:
        def make(values):
            coo = torch.sparse_coo_tensor(ei.flip(0), values, (7, 7, *values.shape[1:])).coalesce()
            return coo.to_sparse_csr() if form == "csr" else coo
    torch.manual_seed(0)
    pyg = PygGATv2Conv(5, 4, heads=2, add_self_loops=loops)
    conv = GATv2Conv(5, 4, heads=2, add_self_loops=loops, backend="reference")
    conv.load_state_dict(pyg.state_dict())
    with pytest.raises((AssertionError, RuntimeError)):  # RuntimeError: torch_sparse's set_diag on [E, D] values
        pyg(x, make(ea))
    with pytest.raises(ValueError, match=r"^edge_index's values must be absent or 1-D \(edge weights\) for a "
                                         r"GATv2Conv built without edge_dim .* got values of shape \(8, 3\); build "
                                         r"the layer with edge_dim=3"):
        conv(x, make(ea))
    w = ea[:, 0]
    torch.testing.assert_close(conv(x, make(w)), pyg(x, make(w)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=IDS)
@pytest.mark.parametrize("layout", ["csr", "csc", "coo"])
def test_edge_attr_is_counted_against_a_sparse_adjacencys_entries(ours, theirs, layout):
    """A sparse adjacency's edge count is its entry count: an adj_t of 2 destination rows has shape (2, num_src),
    not a [2, E] edge_index's, so edge_attr has a row per entry (3), not num_src=5 rows. The rows follow the
    adjacency's storage order, row-major (CSR, COO) or column-major (CSC), which differ on this graph: a CSC's
    edge_attr read in the other order gives other numbers."""
    ei = torch.tensor([[4, 0, 3], [0, 1, 1]])  # 5 sources, 2 destinations, in row-major order
    coo = torch.sparse_coo_tensor(ei.flip(0), torch.ones(3), (2, 5)).coalesce()
    adj = {"csr": coo.to_sparse_csr, "csc": coo.to_sparse_csc, "coo": lambda: coo}[layout]()
    stored = ei[:, [1, 2, 0]] if layout == "csc" else ei  # column-major: by source
    g = torch.Generator().manual_seed(0)
    x, ea = (torch.randn(5, 5, generator=g), torch.randn(2, 5, generator=g)), torch.randn(3, 2, generator=g)
    torch.manual_seed(0)
    pyg = theirs((5, 5), 4, heads=2, edge_dim=2, add_self_loops=False)
    conv = ours((5, 5), 4, heads=2, edge_dim=2, add_self_loops=False, backend="reference")
    conv.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(conv(x, adj, ea), pyg(x, stored, ea), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"^edge_attr must have shape \(num_edges=3, edge_dim=2\), got \(5, 2\)"):
        conv(x, adj, torch.randn(5, 2))


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"heads": 0}, ValueError, r"heads must be >= 1, got 0"),
    ({"heads": -2}, ValueError, r"heads must be >= 1, got -2"),
    ({"heads": 2.0}, TypeError, r"heads must be an int, got float"),
    ({"out_channels": 0}, ValueError, r"out_channels must be >= 1, got 0"),
    ({"in_channels": 0}, ValueError, r"in_channels must be >= 1 \(or -1: lazy"),
    ({"in_channels": (5, 0)}, ValueError, r"in_channels\[1\] must be >= 1"),
    ({"edge_dim": 0}, ValueError, r"edge_dim must be >= 1, got 0"),
    ({"edge_dim": 3, "fill_value": "median"}, ValueError, r"fill_value must be a float, a Tensor or one of 'add'"),
    ({"edge_dim": 3, "fill_value": [1.0]}, TypeError, r"fill_value must be a float, a Tensor or one of .*got list"),
    ({"edge_dim": 3, "fill_value": torch.zeros(2)}, ValueError,
     r"fill_value must hold one value or edge_dim=3 values \(shape \(3,\)\), got shape \(2,\)"),
])
def test_constructor_arguments_refused_naming_the_argument(ours, kwargs, exc, match):
    """PyG's layers take these and fail later, deep in a forward (or build zero-width parameters); ours refuse them
    at construction."""
    args = {"in_channels": 5, "out_channels": 4, **kwargs}
    with pytest.raises(exc, match=match):
        ours(args.pop("in_channels"), args.pop("out_channels"), **args)


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
@pytest.mark.parametrize("fill_value", ["add", "sum", "mul", 0.5, 1, torch.zeros(3), torch.zeros(1, 3),
                                        torch.tensor(2.0)])
def test_fill_values_pyg_takes_are_accepted(ours, fill_value):
    x, ei, ea = _graph()
    assert ours(5, 4, edge_dim=3, fill_value=fill_value)(x, ei, ea).shape == (7, 4)


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
@pytest.mark.parametrize(("x", "exc", "match"), [
    (torch.randn(7, 6), ValueError, r"x must have shape \(num_nodes, in_channels=5\), got \(7, 6\)"),
    (torch.ones(7, 5, dtype=torch.long), TypeError, r"x must be a floating-point Tensor \(node features\), got "
                                                    r"torch.int64"),
    (torch.randn(7, 5, dtype=torch.float64), TypeError, r"x must have the layer's weight dtype torch.float32"),
    ((torch.randn(7, 5), torch.randn(7, 4)), ValueError, r"x\[1\] must have shape \(num_nodes, in_channels=5\), "
                                                         r"got \(7, 4\)"),
    ((torch.randn(7, 5).half(), torch.randn(7, 5)), TypeError, r"x\[0\] must have the layer's weight dtype"),
])
def test_node_features_refused_before_any_kernel(ours, x, exc, match):
    """Wrong width, integer or float64 features with float32 weights: PyG's layers fail inside the matmul; ours
    name the argument first."""
    _, ei, _ = _graph()
    with pytest.raises(exc, match=match):
        ours(5, 4)(x, ei)


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
def test_lazy_layer_checks_the_width_it_was_initialised_with(ours):
    x, ei, _ = _graph()
    conv = ours(-1, 4)
    conv(x, ei)
    with pytest.raises(ValueError, match=r"x must have shape \(num_nodes, in_channels=5\), got \(7, 3\)"):
        conv(x[:, :3], ei)


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
def test_mixed_precision_features_run_under_autocast(ours):
    x, ei, _ = _graph()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ours(5, 4, backend="reference")(x.bfloat16(), ei).shape == (7, 4)
        with pytest.raises(TypeError, match=r"x must have the layer's weight dtype torch.float32"):
            ours(5, 4)(x.double(), ei)  # autocast never casts float64


@pytest.mark.parametrize("ours", [GATConv, GATv2Conv], ids=IDS)
@pytest.mark.parametrize("add_self_loops", [True, False])
def test_bipartite_rows_that_disagree_with_the_graph_name_the_users_x(ours, add_self_loops):
    """A CscGraph of 5 sources and 3 destinations given x[1] of 4 rows: the error names the user's x[1] and the
    graph's destination count, not the self-loop plan built from them (whose edge_index the user never passed)."""
    g = CscGraph.from_edge_index(torch.tensor([[0, 1, 4], [0, 1, 2]]), size=(5, 3))
    conv = ours((5, 5), 4, add_self_loops=add_self_loops)
    assert conv((torch.randn(5, 5), torch.randn(3, 5)), g).shape == (3, 4)
    with pytest.raises(ValueError, match=r"x\[1\] must have shape \(num_dst_nodes=3, in_channels\) for this graph, "
                                         r"got \(4, 5\)"):
        conv((torch.randn(5, 5), torch.randn(4, 5)), g)
    with pytest.raises(ValueError, match=r"x\[0\] must have shape \(num_src_nodes=5, in_channels\) for this graph, "
                                         r"got \(6, 5\)"):
        conv((torch.randn(6, 5), torch.randn(3, 5)), g)
    with pytest.raises(ValueError, match=r"x must have shape \(num_nodes=5, in_channels\) for a graph of 5 source "
                                         r"and 3 destination nodes; a bipartite graph takes x=\(x_src, x_dst\)"):
        ours(5, 4, add_self_loops=add_self_loops)(torch.randn(5, 5), g)
