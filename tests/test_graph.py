"""CscGraph: construction from every input form, invariants, caches, errors."""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from cudnn_gnn import CscGraph


def _check_csc(g: CscGraph, ei: torch.Tensor, ns: int, nd: int) -> None:
    assert (g.num_src_nodes, g.num_dst_nodes, g.num_edges) == (ns, nd, ei.shape[1])
    g.validate()
    dst = g.dst_index.long()
    ids = g.edge_ids.long()
    # every CSC position is the COO edge it maps to
    assert torch.equal(g.indices.long(), ei[0, ids])
    assert torch.equal(dst, ei[1, ids])
    # destination-major and stable: within one destination, COO ids increase
    assert bool((dst.diff() >= 0).all()) if dst.numel() > 1 else True
    same = dst[1:] == dst[:-1]
    assert bool((ids[1:][same] > ids[:-1][same]).all())
    expected = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(ei[1], minlength=nd).cumsum(0)])
    assert torch.equal(g.offsets.long(), expected)
    assert torch.equal(g.edge_index(), ei)


def test_from_edge_index_catalogue(graph_case, index_dtype):
    name, ei, ns, nd = graph_case
    g = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=index_dtype)
    assert g.index_dtype == index_dtype
    _check_csc(g, ei, ns, nd)


def test_default_index_dtype_is_int32_and_num_nodes_inferred():
    ei = torch.tensor([[0, 3], [1, 2]])
    g = CscGraph.from_edge_index(ei)
    assert g.index_dtype == torch.int32
    assert g.num_src_nodes == g.num_dst_nodes == 4


def test_int32_edge_index_input():
    ei = torch.tensor([[2, 0, 1], [0, 0, 2]], dtype=torch.int32)
    _check_csc(CscGraph.from_edge_index(ei, num_nodes=3), ei.long(), 3, 3)


def _bincount_offsets(dst: torch.Tensor, nd: int) -> torch.Tensor:
    """The offsets as from_edge_index built them before it used searchsorted: a histogram and its prefix sum."""
    counts = torch.bincount(dst, minlength=nd) if dst.numel() else dst.new_zeros(nd)
    return torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])


@pytest.mark.parametrize("seed", range(12))
def test_searchsorted_offsets_equal_the_bincount_ones(seed, index_dtype):
    """Random bipartite graphs (some with no edges, most with destinations that have none, a few with every edge
    on one destination): the searchsorted offsets equal the histogram's, and so does everything else."""
    g = torch.Generator().manual_seed(seed)
    ns, nd = int(torch.randint(1, 40, (1,), generator=g)), int(torch.randint(1, 60, (1,), generator=g))
    e = 0 if seed % 4 == 0 else int(torch.randint(1, 3 * nd, (1,), generator=g))
    dst_hi = 1 if seed % 4 == 1 else nd  # seed % 4 == 1: one destination takes every edge
    ei = torch.stack([torch.randint(0, ns, (e,), generator=g), torch.randint(0, dst_hi, (e,), generator=g)])
    graph = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=index_dtype)
    assert graph.offsets.dtype == index_dtype
    assert torch.equal(graph.offsets.long(), _bincount_offsets(ei[1], nd))
    _check_csc(graph, ei, ns, nd)
    homogeneous = CscGraph.from_edge_index(ei, num_nodes=max(ns, nd), index_dtype=index_dtype)
    assert torch.equal(homogeneous.offsets.long(), _bincount_offsets(ei[1], max(ns, nd)))
    if e:  # sizes inferred from the largest id
        inferred = CscGraph.from_edge_index(ei, index_dtype=index_dtype)
        assert torch.equal(inferred.offsets.long(), _bincount_offsets(ei[1], int(ei.max()) + 1))


def test_csc_offsets_ignores_nothing_below_num_dst():
    from cudnn_gnn.graph import csc_offsets

    sorted_dst = torch.tensor([0, 0, 2, 2, 2, 5], dtype=torch.int32)
    assert csc_offsets(sorted_dst, 6, torch.int64).tolist() == [0, 2, 2, 5, 5, 5, 6]
    assert csc_offsets(sorted_dst, 3, torch.int32).tolist() == [0, 2, 2, 5]  # a prefix: destinations < 3
    assert csc_offsets(sorted_dst[:0], 2, torch.int32).tolist() == [0, 0, 0]


def test_reverse_csc_is_source_major_and_cached(graph_case):
    _, ei, ns, nd = graph_case
    g = CscGraph.from_edge_index(ei, size=(ns, nd))
    assert not g.has_reverse_csc and g.csc_rev_offsets is None
    assert g.with_reverse_csc() is g
    rev_o, rev_m = g.csc_rev_offsets, g.map_rev_to_coo
    assert rev_o.shape == (ns + 1,) and rev_m.shape == (ei.shape[1],)
    assert torch.equal(rev_o.long(), torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(ei[0], minlength=ns).cumsum(0)]))
    src_of_rev = ei[0, rev_m.long()]
    assert bool((src_of_rev.diff() >= 0).all()) if src_of_rev.numel() > 1 else True
    assert sorted(rev_m.tolist()) == list(range(ei.shape[1]))
    g.with_reverse_csc()
    assert g.csc_rev_offsets is rev_o  # built once


def test_structures_built_while_compiling_are_not_kept():
    """A structure a ``torch.compile``-traced call builds stays out of the graph (under ``mode="reduce-overhead"``
    it would live in CUDA-graph memory that the next replay overwrites); the same values as eager, and an eager
    call then keeps them."""
    ei = torch.tensor([[0, 1, 2, 3, 3, 1], [1, 2, 0, 0, 2, 2]])

    def structures(g: CscGraph) -> torch.Tensor:
        rev_offsets, rev_to_csc = g.reverse_csc()
        _, rev_map = g.reverse_coo_map()
        built = g.derived(("test", "twice"), lambda: g.indices * 2)
        return torch.cat([rev_offsets, rev_to_csc, g.reverse_dst(), rev_map, built]).long()

    want = structures(CscGraph.from_edge_index(ei, num_nodes=4))
    g = CscGraph.from_edge_index(ei, num_nodes=4)
    torch._dynamo.reset()
    got = torch.compile(structures, backend="eager", fullgraph=True)(g)
    assert torch.equal(got, want)
    assert not g.has_reverse_csc and g.csc_rev_offsets is None and g.derived_if_built(("test", "twice")) is None
    assert torch.equal(structures(g), want)
    assert g.has_reverse_csc and g.csc_rev_offsets is not None and g.derived_if_built(("test", "twice")) is not None


def test_to_index_dtype_is_cached_and_equal():
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    g = CscGraph.from_edge_index(ei)
    g64 = g.to_index_dtype(torch.int64)
    assert g64.index_dtype == torch.int64 and g.to_index_dtype(torch.int64) is g64
    assert torch.equal(g64.offsets, g.offsets.long()) and torch.equal(g64.map_csc_to_coo, g.map_csc_to_coo.long())
    assert g.to_index_dtype(torch.int32) is g


def test_pickle_and_torch_save_round_trip():
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    g = CscGraph.from_edge_index(ei).with_reverse_csc()
    for loaded in (pickle.loads(pickle.dumps(g)), _torch_roundtrip(g)):
        assert torch.equal(loaded.offsets, g.offsets) and torch.equal(loaded.indices, g.indices)
        assert torch.equal(loaded.map_csc_to_coo, g.map_csc_to_coo) and loaded.num_src_nodes == g.num_src_nodes
        assert torch.equal(loaded.edge_index(), ei)


def _torch_roundtrip(g: CscGraph) -> CscGraph:
    buf = io.BytesIO()
    torch.save(g, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def test_immutable():
    g = CscGraph.from_edge_index(torch.tensor([[0], [1]]))
    with pytest.raises(AttributeError):
        g.num_src_nodes = 5  # type: ignore[misc]  # the frozen dataclass's refusal is what is tested


def test_to_same_device_is_identity():
    g = CscGraph.from_edge_index(torch.tensor([[0], [1]]))
    assert g.to("cpu") is g


@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_from_torch_sparse_adj_t(layout):
    """Sparse inputs follow PyG's adj_t convention: entry (i, j) is the edge j -> i."""
    ei = torch.tensor([[0, 2, 1, 2, 3], [1, 1, 3, 0, 0]])
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(5), (4, 6)).coalesce()  # 6 sources, 4 destinations
    if layout == "csr":
        adj_t = adj_t.to_sparse_csr()
    elif layout == "csc":
        adj_t = adj_t.to_sparse_csc()
    g = CscGraph.from_sparse(adj_t)
    assert (g.num_src_nodes, g.num_dst_nodes) == (6, 4)
    got = sorted(map(tuple, g.edge_index().t().tolist()))
    assert got == sorted(map(tuple, ei.t().tolist()))
    if layout == "csr":  # CSR adj_t is our CSC layout: wrapped, not sorted
        assert g.map_csc_to_coo is None and torch.equal(g.offsets.long(), adj_t.crow_indices())
    g.validate()


def test_from_pyg_edge_index_and_data():
    from torch_geometric import EdgeIndex
    from torch_geometric.data import Data

    ei = torch.tensor([[0, 2, 1, 2, 3], [1, 1, 3, 0, 0]])
    e = EdgeIndex(ei, sparse_size=(4, 4))
    _check_csc(CscGraph.from_edge_index(e), ei, 4, 4)
    sorted_e = e.sort_by("col")[0]
    g = CscGraph.from_edge_index(sorted_e)
    assert g.map_csc_to_coo is None  # already CSC order: no permutation kept
    _check_csc(g, sorted_e.as_subclass(torch.Tensor), 4, 4)
    d = Data(edge_index=ei, num_nodes=6)
    assert CscGraph.from_data(d).num_dst_nodes == 6


def test_from_data_rebuilds_an_attached_graph_whose_edges_were_replaced_or_modified():
    """``ToCscGraph`` attaches a graph; once ``data.edge_index`` is replaced (or written in place) that graph
    describes other edges: ``from_data`` (and ``ToCscGraph`` again) builds a fresh one instead of serving it. A
    graph attached by hand is the user's word and is returned as it is."""
    from torch_geometric.data import Data

    from cudnn_gnn import ToCscGraph

    data = ToCscGraph()(Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3))
    attached = data.csc_graph
    assert CscGraph.from_data(data) is attached  # still the data's edges
    data.edge_index = torch.tensor([[2, 2, 0], [0, 1, 1]])
    fresh = CscGraph.from_data(data)
    assert fresh is not attached and torch.equal(fresh.edge_index(), data.edge_index)
    data = ToCscGraph()(data)
    assert data.csc_graph is not attached and torch.equal(data.csc_graph.edge_index(), data.edge_index)
    data.edge_index[0, 0] = 1  # in place: the version counter moves
    assert torch.equal(CscGraph.from_data(data).edge_index(), torch.tensor([[1, 2, 0], [0, 1, 1]]))
    mine = CscGraph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=3)
    data.csc_graph = mine
    assert CscGraph.from_data(data) is mine



@pytest.mark.parametrize("sort", [None, "col", "row"])
def test_edge_index_input_leaves_no_wrapper_tensor_in_the_graph(sort):
    """A PyG EdgeIndex (and the Index its rows are) has no storage of its own: a kernel reading a data pointer
    from one fails ("invalid python storage"), so every tensor the graph holds must be a plain Tensor."""
    from torch_geometric import EdgeIndex

    e = EdgeIndex(torch.tensor([[0, 2, 1, 2, 3], [1, 1, 3, 0, 0]]), sparse_size=(4, 4))
    if sort is not None:
        e = e.sort_by(sort)[0]
    g = CscGraph.from_edge_index(e)
    held = [g.offsets, g.indices, g.dst_index, g.edge_ids, g.edge_index()]
    assert all(type(t) is torch.Tensor for t in held), [type(t).__name__ for t in held]
    for t in held:
        t.untyped_storage().data_ptr()  # raises on a wrapper without storage
    assert type(CscGraph.from_sparse(e).indices) is torch.Tensor


def test_edge_index_false_column_sort_claim_is_caught():
    """An EdgeIndex claiming sort_order='col' whose destinations are not sorted: from_edge_index checks the claim
    when it validates; without validation it trusts it, and graph.validate() catches the graph it gives."""
    from torch_geometric import EdgeIndex

    ei = torch.tensor([[0, 1, 2, 1], [1, 0, 2, 1]])
    liar = EdgeIndex(ei, sparse_size=(3, 3), sort_order="col")
    with pytest.raises(ValueError, match=r"edge_index must be sorted by destination \(row 1\).*edge_index\[1, 0\]=1 > "
                                         r"edge_index\[1, 1\]=0"):
        CscGraph.from_edge_index(liar)
    trusted = CscGraph.from_edge_index(liar, validate=False)
    with pytest.raises(ValueError, match="dst_index must be the destinations offsets describe"):
        trusted.validate()
    truthful = CscGraph.from_edge_index(EdgeIndex(ei[:, [1, 0, 3, 2]], sparse_size=(3, 3), sort_order="col"))
    _check_csc(truthful, ei[:, [1, 0, 3, 2]], 3, 3)


def test_validate_checks_the_structures_from_csc_keeps():
    offsets, indices = torch.tensor([0, 1, 3]), torch.tensor([1, 0, 1])
    CscGraph.from_csc(offsets, indices, 2, dst_index=torch.tensor([0, 1, 1]),
                      edge_index=torch.tensor([[1, 0, 1], [0, 1, 1]])).validate()
    with pytest.raises(ValueError, match=r"dst_index must be the destinations offsets describe, got dst_index\[1\]=0"):
        CscGraph.from_csc(offsets, indices, 2, dst_index=torch.tensor([0, 0, 1])).validate()
    with pytest.raises(ValueError, match="edge_index must hold the edges that offsets, indices and map_csc_to_coo"):
        CscGraph.from_csc(offsets, indices, 2, edge_index=torch.tensor([[1, 1, 0], [0, 1, 1]])).validate()


@pytest.mark.parametrize(
    "offsets, indices, match",
    [
        ([0, 1, 2, 5, 3], [0, 1, 0], r"offsets must be non-decreasing, got offsets\[3\]=5 > offsets\[4\]=3"),
        ([0, 2, 1, 3], [0, 1, 0], r"offsets must be non-decreasing, got offsets\[1\]=2 > offsets\[2\]=1"),
        ([1, 2, 3], [0, 1], r"offsets\[0\] must be 0, got 1"),
        ([0, 1, 2], [0, 5], r"indices must be in \[0, num_src_nodes=2\), got range \[0, 5\]"),
        ([0, 1, 2], [-1, 0], r"indices must be in \[0, num_src_nodes=2\), got range \[-1, 0\]"),
    ],
)
def test_from_csc_checks_its_values_unless_told_to_trust_them(offsets, indices, match):
    """Offsets out of order made the destinations' ``repeat_interleave`` write out of bounds (heap corruption on a
    CPU); indices past the sources made the kernels read out of bounds: checked by default, before any use."""
    with pytest.raises(ValueError, match=match):
        CscGraph.from_csc(torch.tensor(offsets), torch.tensor(indices), 2)
    g = CscGraph.from_csc(torch.tensor(offsets), torch.tensor(indices), 2, validate=False)  # the caller's word
    assert g.num_edges == len(indices)
    with pytest.raises(TypeError, match="validate must be a bool"):
        CscGraph.from_csc(torch.tensor([0, 1]), torch.tensor([0]), 1, validate=1)


def test_from_sparse_checks_a_sparse_tensors_values():
    """``torch.sparse_csr_tensor`` checks nothing by default (``check_invariants=False``): a column past the sources
    or a decreasing row pointer is refused here, by default; ``validate=False`` trusts it."""
    bad_col = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 7]), torch.ones(2), size=(2, 3))
    with pytest.raises(ValueError, match=r"indices must be in \[0, num_src_nodes=3\), got range \[0, 7\]"):
        CscGraph.from_sparse(bad_col)
    assert CscGraph.from_sparse(bad_col, validate=False).num_edges == 2
    bad_row = torch.sparse_csr_tensor(torch.tensor([0, 2, 1]), torch.tensor([0, 1]), torch.ones(2), size=(2, 3))
    with pytest.raises(ValueError, match=r"offsets\[-1\] must equal num_edges=2, got 1"):
        CscGraph.from_sparse(bad_row)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_graph_copies_the_callers_index_buffers(dtype):
    """A sorted EdgeIndex and a CSR adj_t already in the stored dtype were wrapped as views: a caller's in-place
    write after the call changed the graph."""
    from torch_geometric import EdgeIndex

    ei = torch.tensor([[1, 0, 1, 2], [0, 1, 1, 2]], dtype=dtype)
    e = EdgeIndex(ei.clone(), sparse_size=(3, 3), sort_order="col")
    g = CscGraph.from_edge_index(e, index_dtype=dtype)
    before = (g.offsets.clone(), g.indices.clone(), g.dst_index.clone())
    e.as_tensor().fill_(0)
    assert all(torch.equal(a, b) for a, b in zip(before, (g.offsets, g.indices, g.dst_index)))

    adj_t = torch.sparse_csr_tensor(torch.tensor([0, 1, 3, 4], dtype=dtype), torch.tensor([1, 0, 1, 2], dtype=dtype),
                                    torch.ones(4), (3, 3))
    g = CscGraph.from_sparse(adj_t, index_dtype=dtype)
    before = (g.offsets.clone(), g.indices.clone())
    adj_t.crow_indices().zero_()
    adj_t.col_indices().zero_()
    assert torch.equal(before[0], g.offsets) and torch.equal(before[1], g.indices)

@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(edge_index=[[0], [1]]), TypeError, "edge_index must be a torch.Tensor"),
        (dict(edge_index=torch.tensor([[0.0], [1.0]])), TypeError, "edge_index must have dtype int32 or int64"),
        (dict(edge_index=torch.tensor([0, 1])), ValueError, r"edge_index must have shape \(2, num_edges\)"),
        (dict(edge_index=torch.tensor([[0], [-1]]), num_nodes=2), ValueError, "non-negative"),
        (dict(edge_index=torch.tensor([[5], [1]]), num_nodes=3), ValueError, r"edge_index\[0\] \(sources\) must be < "),
        (dict(edge_index=torch.tensor([[0], [3]]), size=(4, 2)), ValueError, r"edge_index\[1\] \(destinations\) must be <"),
        (dict(edge_index=torch.tensor([[0], [1]]), num_nodes=2, size=(2, 2)), ValueError, "num_nodes and size"),
        (dict(edge_index=torch.tensor([[0], [1]]), num_nodes=-1), ValueError, "num_nodes must be >= 0"),
        (dict(edge_index=torch.tensor([[0], [1]]), index_dtype=torch.int16), TypeError, "index_dtype must be"),
    ],
)
def test_from_edge_index_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        CscGraph.from_edge_index(**kwargs)


def test_validate_catches_corruption():
    g = CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]))
    with pytest.raises(ValueError, match="indices must be in"):
        CscGraph(g.offsets, torch.tensor([0, 1, 9], dtype=torch.int32), 3, g.map_csc_to_coo).validate()
    with pytest.raises(ValueError, match="offsets must be non-decreasing"):
        CscGraph(torch.tensor([0, 2, 1, 3], dtype=torch.int32), g.indices, 3).validate()
    with pytest.raises(ValueError, match=r"offsets\[-1\] must equal num_edges"):
        CscGraph(torch.tensor([0, 1, 1, 2], dtype=torch.int32), g.indices, 3).validate()
    with pytest.raises(ValueError, match="map_csc_to_coo must be a permutation"):
        CscGraph(g.offsets, g.indices, 3, torch.tensor([0, 0, 1], dtype=torch.int32)).validate()


def test_constructor_invariants():
    o = torch.tensor([0, 1], dtype=torch.int32)
    with pytest.raises(TypeError, match="indices must have the dtype of offsets"):
        CscGraph(o, torch.tensor([0], dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="offsets must have shape"):
        CscGraph(torch.tensor([], dtype=torch.int32), torch.tensor([], dtype=torch.int32), 1)
    with pytest.raises(ValueError, match="map_csc_to_coo must have shape"):
        CscGraph(o, torch.tensor([0], dtype=torch.int32), 1, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="num_src_nodes must be > 0"):
        CscGraph(o, torch.tensor([0], dtype=torch.int32), 0)


def test_reverse_csc_lists_each_sources_edges_in_csc_order(index_dtype):
    ei = torch.tensor([[2, 0, 2, 1, 0], [0, 0, 1, 2, 2]])
    g = CscGraph.from_edge_index(ei, num_nodes=3, index_dtype=index_dtype)
    rev_offsets, rev_to_csc = g.reverse_csc()
    assert rev_offsets.dtype == rev_to_csc.dtype == index_dtype
    src = g.indices.long()
    for j in range(3):
        pos = rev_to_csc[rev_offsets[j]:rev_offsets[j + 1]].long()
        assert (src[pos] == j).all()
        assert pos.tolist() == sorted(pos.tolist())
    assert sorted(rev_to_csc.tolist()) == list(range(5))
    assert g.reverse_csc()[1] is rev_to_csc  # built once
    g.with_reverse_csc()
    assert torch.equal(g.map_rev_to_coo.long(), g.edge_ids.long()[rev_to_csc.long()])
    rev_dst = g.reverse_dst()  # each out-edge's destination, in reverse-CSC order
    assert rev_dst.dtype == index_dtype and g.reverse_dst() is rev_dst
    assert torch.equal(rev_dst.long(), g.dst_index.long()[rev_to_csc.long()])
    assert rev_dst.tolist() == [0, 2, 2, 0, 1]  # sources 0, 1, 2 in turn
    assert torch.equal(g.to_index_dtype(torch.int64 if index_dtype == torch.int32 else torch.int32)
                       .reverse_dst().long(), rev_dst.long())


def test_derived_structures_are_built_once_and_kept():
    g = CscGraph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    calls = []
    assert g.derived(("test", 1), lambda: calls.append(1) or "x") == "x"
    assert g.derived(("test", 1), lambda: calls.append(1) or "y") == "x"
    assert g.derived(("test", 2), lambda: None) is None and g.derived(("test", 2), lambda: "z") is None
    assert calls == [1] and g.derived_if_built(("test", 3)) is None


def test_a_graph_marked_rebuilt_every_call_never_reads_its_degrees():
    g = CscGraph.from_edge_index(torch.tensor([[0, 0], [1, 0]]), num_nodes=2).as_rebuilt_every_call()
    assert g.max_degrees() is None
    g.set_max_degrees(5, 5)
    assert g.max_degrees() is None


def test_graph_modes_are_fields_set_at_construction():
    """``rebuilt_every_call`` and ``short_rows`` are typed fields: set by ``from_csc`` or ``as_rebuilt_every_call``
    (a new graph; the original keeps its mode and its degrees), carried by ``to_index_dtype`` and pickling, with
    the caller's ``dst_index`` / ``edge_index`` carried over and nothing derived from the old mode; ``short_rows``
    alone is refused; a non-bool is refused."""
    import pickle

    g = CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    assert not g.rebuilt_every_call and not g.short_rows and g.max_degrees() == (1, 1)
    r = g.as_rebuilt_every_call(short_rows=True)
    assert r is not g and r.offsets is g.offsets and not g.rebuilt_every_call and g.max_degrees() == (1, 1)
    assert r.rebuilt_every_call and r.short_rows and r.max_degrees() is None
    assert r.to_index_dtype(torch.int64).short_rows and pickle.loads(pickle.dumps(r)).short_rows
    ei = torch.tensor([[0, 1], [0, 0]])
    b = CscGraph.from_csc(torch.tensor([0, 2]), torch.tensor([0, 1]), 2, dst_index=torch.tensor([0, 0]),
                          edge_index=ei, rebuilt_every_call=True)
    assert b.rebuilt_every_call and not b.short_rows and b.edge_index() is ei
    assert b.as_rebuilt_every_call(short_rows=True).edge_index() is ei
    with pytest.raises(ValueError, match="short_rows must be False unless rebuilt_every_call is True"):
        CscGraph.from_csc(torch.tensor([0, 1]), torch.tensor([0]), 1, short_rows=True)
    with pytest.raises(TypeError, match="rebuilt_every_call must be a bool, got int"):
        CscGraph.from_csc(torch.tensor([0, 1]), torch.tensor([0]), 1, rebuilt_every_call=1)


# ------------------------------------------------------------------ sizes that cannot fit


@pytest.mark.parametrize("kwargs", [{"num_nodes": 2**40}, {"size": (3, 2**40)}])
def test_huge_num_nodes_refused_before_allocating(kwargs):
    """A few edges and 2**40 nodes: the 8 TiB of offsets are refused with the figure, nothing is allocated."""
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    arg = "num_nodes" if "num_nodes" in kwargs else "num_dst_nodes"
    with pytest.raises(ValueError, match=rf"{arg} must fit in memory, got {arg}=1,099,511,627,776: its offsets "
                                         r"alone need 8192\.0 GiB .* GiB free on cpu"):
        CscGraph.from_edge_index(ei, **kwargs)


def test_offsets_checked_against_free_memory(monkeypatch):
    """2**31 nodes (16 GiB of offsets) are refused when the host has 4 GiB free; sizes that fit still build."""
    import cudnn_gnn.graph as graph_mod

    monkeypatch.setattr(graph_mod, "_free_bytes", lambda device: 4 << 30)
    ei = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match=r"num_nodes=2,147,483,648: its offsets alone need 16\.0 GiB \(32\.0 GiB "
                                         r"while being built\), more than the 4\.0 GiB free on cpu"):
        CscGraph.from_edge_index(ei, num_nodes=2**31)
    assert CscGraph.from_edge_index(ei, num_nodes=1000).num_dst_nodes == 1000


def test_free_bytes_reports_host_memory():
    from cudnn_gnn.graph import _free_bytes

    free = _free_bytes(torch.device("cpu"))
    assert free is None or free > 0
