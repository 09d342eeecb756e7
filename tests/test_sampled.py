"""sampled_blocks: per-layer CSC blocks of a NeighborLoader batch against the edge_index slices (PyG's
trim_to_layer), against PyG's GATConv / GATv2Conv, PyG's sampler order (torch-sparse), the validate checks, and
the layers' fixed-shape self-loop plan for graphs marked rebuilt every call."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
import torch_geometric.typing as pyg_typing

import cudnn_gnn
from cudnn_gnn import CscGraph, sampled_blocks
from cudnn_gnn.layers import GATConv, GATv2Conv
from cudnn_gnn.sampled import block_sizes

HAS_SAMPLER = bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)
needs_sampler = pytest.mark.skipif(not HAS_SAMPLER, reason="PyG's NeighborLoader needs pyg-lib or torch-sparse "
                                                           "(neither installed)")


def _batch(nodes: list[int], fanout: list[int], seed: int, *, loops: bool = True,
           shuffle_within_hop: bool = True) -> tuple[torch.Tensor, list[int]]:
    """A batch laid out as PyG's samplers lay it out: nodes numbered hop by hop (``nodes[k]`` at hop ``k``), the
    edges into hop-``k`` nodes listed after those into hop ``k - 1``, their sources among hops ``<= k + 1``.
    Within a hop the edges are shuffled (not sorted by destination), with duplicates and, if ``loops``, self-loops.
    Returns ``(edge_index [2, E], num_sampled_edges)``."""
    g = torch.Generator().manual_seed(seed)
    starts = [sum(nodes[:k]) for k in range(len(nodes) + 1)]
    parts, counts = [], []
    for k, f in enumerate(fanout):
        lo, hi = starts[k], starts[k + 1]
        dst = torch.arange(lo, hi).repeat_interleave(torch.randint(0, f + 1, (hi - lo,), generator=g))
        src = torch.randint(0, starts[k + 2], (dst.numel(),), generator=g)
        if loops and dst.numel():
            src[:: 5] = dst[:: 5]  # every fifth edge a self-loop
        if dst.numel() > 2:
            src[1], dst[1] = src[0], dst[0]  # a duplicate edge
        ei = torch.stack([src, dst])
        if shuffle_within_hop:
            ei = ei[:, torch.randperm(ei.shape[1], generator=g)]
        parts.append(ei)
        counts.append(ei.shape[1])
    return torch.cat(parts, 1), counts


NODES, FANOUT = [6, 14, 25, 30], [3, 2, 2]


# ---------------------------------------------------------------------------------------------- sizes and blocks


def test_block_sizes_are_trim_to_layer_slices():
    assert block_sizes([2, 3, 4, 5], [6, 7, 8], 3) == [(14, 9, 21), (9, 5, 13), (5, 2, 6)]
    assert block_sizes([2, 3, 4, 5], [6, 7, 8], 1) == [(5, 2, 6)]  # a sampler deeper than the model


@pytest.mark.parametrize(("args", "exc", "match"), [
    (([2, 3], [6], 2), ValueError, r"num_sampled_nodes must have at least 3 entries \(the seeds, then one per hop\), got 2"),
    (([2, 3, 4], [6], 2), ValueError, r"num_sampled_edges must have at least 2 entries \(one per hop\), got 1"),
    (([2, 3, 4], [6, 7], 0), ValueError, r"num_layers must be >= 1, got 0"),
    (([2, 3.0, 4], [6, 7], 2), TypeError, r"num_sampled_nodes\[1\] must be an int, got float"),
    (([2, 3, 4], [6, -1], 2), ValueError, r"num_sampled_edges\[1\] must be >= 0, got -1"),
    (([2, 3, 4], None, 2), TypeError, r"num_sampled_edges must be a list of ints, got NoneType"),
])
def test_block_sizes_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        block_sizes(*args)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_blocks_equal_the_edge_index_slices(seed, index_dtype):
    """Block i is from_edge_index(edge_index[:, :n_edge], size=(n_src, n_dst)): same offsets, sources and
    permutation (so edge features stay in the batch's COO order), as prefix views of one CSC."""
    ei, edges = _batch(NODES, FANOUT, seed)
    ei = ei.to(index_dtype)
    blocks = sampled_blocks(ei, NODES, edges, 3)
    for block, s in zip(blocks, block_sizes(NODES, edges, 3)):
        ref = CscGraph.from_edge_index(ei[:, : s.num_edges], size=(s.num_src, s.num_dst))
        assert (block.num_src_nodes, block.num_dst_nodes, block.num_edges) == s
        assert block.index_dtype == ref.index_dtype
        for name in ("offsets", "indices", "map_csc_to_coo", "dst_index"):
            assert torch.equal(getattr(block, name), getattr(ref, name)), name
        assert torch.equal(block.edge_index(), ei[:, : s.num_edges].long())
        assert block.rebuilt_every_call and block.max_degrees() is None and block.short_rows
        block.validate()
    assert all(b.offsets.data_ptr() == blocks[0].offsets.data_ptr() for b in blocks)  # views of one CSC


def test_the_self_loop_plan_of_a_block_keeps_short_rows():
    """A layer adding self-loops to a block builds a new CSC with fixed-shape ops; it keeps the block's
    ``short_rows`` hint (one loop more a row), so the Triton kernels walk its rows whole. The plan reads the
    block's COO (the batch's own slice) and builds PyG's loop slots and kept-edge mask only when read."""
    from cudnn_gnn.layers._plan_cache import resolve

    ei, edges = _batch(NODES, FANOUT, 0)
    block = sampled_blocks(ei, NODES, edges, 3)[0]
    n = min(block.num_src_nodes, block.num_dst_nodes)
    for num_loops in (None, n):
        plan = resolve(block, num_src=block.num_src_nodes, num_dst=block.num_dst_nodes, num_loops=num_loops,
                       device=block.device, cache=True)
        assert plan.graph.rebuilt_every_call and plan.graph.short_rows
    # what only edge features, returned attention and explanations read is built on first read, and equals the rule
    assert plan.loop_index_ is None and plan.keep_ is None
    src, dst = ei[:, : block.num_edges]
    assert torch.equal(plan.keep, torch.cat([src != dst, torch.ones(n, dtype=torch.bool)]))
    assert torch.equal(plan.loop_index, torch.where((src == dst) | (dst >= n), n, dst))
    assert block.edge_index().data_ptr() == ei.data_ptr()  # the batch's own edges, not scattered back
    plain = CscGraph.from_edge_index(ei, num_nodes=sum(NODES)).as_rebuilt_every_call()
    plan = resolve(plain, num_src=plain.num_src_nodes, num_dst=plain.num_dst_nodes, num_loops=plain.num_dst_nodes,
                   device=plain.device, cache=True)
    assert not plan.graph.short_rows


def test_blocks_ignore_hops_the_model_does_not_use():
    ei, edges = _batch(NODES, FANOUT, 0)
    (block,) = sampled_blocks(ei, NODES, edges, 1)
    ref = CscGraph.from_edge_index(ei[:, : edges[0]], size=(NODES[0] + NODES[1], NODES[0]))
    assert torch.equal(block.offsets, ref.offsets) and torch.equal(block.map_csc_to_coo, ref.map_csc_to_coo)


def test_blocks_of_a_batch_without_edges():
    blocks = sampled_blocks(torch.empty(2, 0, dtype=torch.long), [4, 0, 0], [0, 0], 2)
    assert [(b.num_src_nodes, b.num_dst_nodes, b.num_edges) for b in blocks] == [(4, 4, 0), (4, 4, 0)]
    assert blocks[0].offsets.tolist() == [0] * 5


# ---------------------------------------------------------------------------------------------- validate


@pytest.mark.parametrize(("change", "match"), [
    (lambda ei: ei.__setitem__((0, 3), -2), r"edge_index must hold non-negative node ids, got minimum -2"),
    (lambda ei: ei.__setitem__((0, 0), 75), r"edge_index\[0\] \(sources\) of the first sum\(num_sampled_edges\[:3\]\)="
                                            r"\d+ edges must be < sum\(num_sampled_nodes\[:4\]\)=75, got maximum 75"),
    (lambda ei: ei.__setitem__((1, -1), 45), r"edge_index\[1\] \(destinations\) of the first "
                                             r"sum\(num_sampled_edges\[:3\]\)=\d+ edges must be < "
                                             r"sum\(num_sampled_nodes\[:3\]\)=45, got maximum 45"),
    # a hop-0 edge whose source is a hop-2 node: fine for the outer blocks, out of range for the last layer's
    (lambda ei: ei.__setitem__((0, 0), 30), r"edge_index\[0\] \(sources\) of the first "
                                            r"sum\(num_sampled_edges\[:1\]\)=\d+ edges must be < "
                                            r"sum\(num_sampled_nodes\[:2\]\)=20, got maximum 30"),
    # a hop-1 edge moved into the hop-0 prefix: hop order broken
    (lambda ei: ei.__setitem__((1, 0), 10), r"edge_index\[1\] \(destinations\) of the first "
                                            r"sum\(num_sampled_edges\[:1\]\)=\d+ edges must be < "
                                            r"sum\(num_sampled_nodes\[:1\]\)=6, got maximum 10"),
    # a seed as the destination of the last edge: one edge too many into the nodes the outer layers' prefixes
    # end at (the first block whose prefix it breaks, outermost first, is named)
    (lambda ei: ei.__setitem__((1, -1), 0), r"edge_index must hold exactly sum\(num_sampled_edges\[:2\]\)=\d+ "
                                            r"edges into the first sum\(num_sampled_nodes\[:2\]\)=20 nodes"),
])
def test_validate_names_the_broken_argument(change, match):
    ei, edges = _batch(NODES, FANOUT, 0)
    change(ei)
    with pytest.raises(ValueError, match=match):
        sampled_blocks(ei, NODES, edges, 3)
    sampled_blocks(ei, NODES, edges, 3, validate=False)  # trusted: not read back


def test_validate_reads_back_once(monkeypatch):
    """One host read per batch, whatever the layer count (here: Tensor.tolist, the one read back)."""
    calls = []
    original = torch.Tensor.tolist

    def counting(self):
        calls.append(self.shape)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    ei, edges = _batch(NODES, FANOUT, 0)
    sampled_blocks(ei, NODES, edges, 3)
    assert len(calls) == 1
    calls.clear()
    sampled_blocks(ei, NODES, edges, 3, validate=False)
    assert calls == []


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"edge_index": torch.zeros(2, 3)}, TypeError, r"edge_index must have dtype int32 or int64, got torch.float32"),
    ({"edge_index": torch.zeros(3, 3, dtype=torch.long)}, ValueError,
     r"edge_index must have shape \(2, num_edges\), got \(3, 3\)"),
    ({"num_sampled_edges": [50, 50, 50]}, ValueError,
     r"edge_index must have at least sum\(num_sampled_edges\[:3\]\)=150 edges, got \d+"),
    ({"validate": 1}, TypeError, r"validate must be a bool, got int"),
    ({"num_sampled_nodes": torch.tensor([[1]])}, ValueError,
     r"num_sampled_nodes must be a list of ints or a 1-D CPU tensor, got a 2-D tensor on cpu"),
])
def test_argument_errors(kwargs, exc, match):
    ei, edges = _batch(NODES, FANOUT, 0)
    args = {"edge_index": ei, "num_sampled_nodes": NODES, "num_sampled_edges": edges, "num_layers": 3, **kwargs}
    with pytest.raises(exc, match=match):
        sampled_blocks(**args)


def test_counts_may_be_a_cpu_tensor():
    ei, edges = _batch(NODES, FANOUT, 0)
    a = sampled_blocks(ei, torch.tensor(NODES), torch.tensor(edges), 3)
    b = sampled_blocks(ei, NODES, edges, 3)
    assert all(torch.equal(x.offsets, y.offsets) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------- layers


def _pair(kind: str, in_ch: int, out_ch: int, **kw):
    pyg_cls, ours_cls = (pyg_nn.GATConv, GATConv) if kind == "gat" else (pyg_nn.GATv2Conv, GATv2Conv)
    torch.manual_seed(0)
    pyg = pyg_cls(in_ch, out_ch, **kw).double()
    ours = ours_cls(in_ch, out_ch, **kw, backend="reference").double()
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return pyg, ours


@pytest.mark.parametrize("kind", ["gat", "gatv2"])
@pytest.mark.parametrize("loops", [True, False], ids=["with_self_loops", "no_self_loops"])
@pytest.mark.parametrize("edge_dim", [None, 3])
@pytest.mark.parametrize("add_self_loops", [True, False])
def test_layers_on_blocks_equal_pyg_on_slices(kind, loops, edge_dim, add_self_loops):
    """Every block through our layer (reference backend) equals PyG's layer on the raw slice: outputs, attention
    (in PyG's edge order) and every gradient, with and without self-loops among the sampled edges."""
    ei, edges = _batch(NODES, FANOUT, 1, loops=loops)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(sum(NODES), 5, generator=g, dtype=torch.float64)
    ea = torch.randn(ei.shape[1], edge_dim, generator=g, dtype=torch.float64) if edge_dim else None
    pyg, ours = _pair(kind, 5, 4, heads=2, edge_dim=edge_dim, add_self_loops=add_self_loops, residual=True)
    for block, s in zip(sampled_blocks(ei, NODES, edges, 3), block_sizes(NODES, edges, 3)):
        outs, grads = [], []
        for layer, graph in ((pyg, ei[:, : s.num_edges]), (ours, block)):
            xs = x[: s.num_src].clone().requires_grad_()
            e = None if ea is None else ea[: s.num_edges].clone().requires_grad_()
            layer.zero_grad()
            size = {"size": (s.num_src, s.num_dst)} if kind == "gat" else {}  # GATv2Conv reads sizes from x
            out, (att_ei, att) = layer((xs, xs[: s.num_dst]), graph, e, **size, return_attention_weights=True)
            (out.square().sum() + att.sum()).backward()
            outs.append((out, att_ei, att))
            grads.append([xs.grad, None if e is None else e.grad] + [p.grad for p in layer.parameters()])
        (o_p, ei_p, a_p), (o_o, ei_o, a_o) = outs
        torch.testing.assert_close(o_o, o_p)
        assert torch.equal(ei_o, ei_p)
        torch.testing.assert_close(a_o, a_p)
        for gp, go in zip(*grads):
            if gp is None:
                assert go is None or not go.any()
            else:
                torch.testing.assert_close(go, gp)


def test_rebuilt_graph_gets_the_static_plan_and_keeps_it_for_its_life(monkeypatch):
    """A graph marked rebuilt every call takes the fixed-shape self-loop plan (no eager_plan, whose nonzero
    syncs on CUDA), kept on the graph so that its other layers share it (the same object); without the self-loop
    rule the plan is the graph itself, kept nowhere. An unmarked graph still gets the kept eager plan."""
    from cudnn_gnn.layers import _graph_inputs, _plan_cache

    def no_eager(*args, **kwargs):
        raise AssertionError("eager_plan called for a graph rebuilt every call")

    ei, edges = _batch(NODES, FANOUT, 0)
    block = sampled_blocks(ei, NODES, edges, 3)[0]
    kw = dict(num_src=block.num_src_nodes, num_dst=block.num_dst_nodes, device=block.device, cache=True)
    with monkeypatch.context() as m:
        m.setattr(_graph_inputs, "eager_plan", no_eager)
        plan = _plan_cache.resolve(block, num_loops=block.num_dst_nodes, **kw)
        assert plan.pad_dst and plan.keep is not None and plan.graph.rebuilt_every_call  # static_plan's
        assert _plan_cache.resolve(block, num_loops=block.num_dst_nodes, **kw) is plan
        plain = _plan_cache.resolve(block, num_loops=None, **kw)
        assert plain.graph is block and not plain.pad_dst
    assert block.derived_if_built((_plan_cache._PLAN_KEY, block.num_dst_nodes)) is plan
    assert block.derived_if_built((_plan_cache._PLAN_KEY, None)) is None
    unmarked = CscGraph.from_edge_index(ei, size=(block.num_src_nodes, block.num_dst_nodes))
    eager = _plan_cache.resolve(unmarked, num_loops=unmarked.num_dst_nodes, **kw)
    assert not eager.pad_dst and eager.keep is None
    assert unmarked.derived_if_built((_plan_cache._PLAN_KEY, unmarked.num_dst_nodes)) is eager


def test_mark_survives_conversions():
    ei, edges = _batch(NODES, FANOUT, 0)
    block = sampled_blocks(ei, NODES, edges, 3)[0]
    assert block.to_index_dtype(torch.int64).rebuilt_every_call
    assert block.to_index_dtype(torch.int64).max_degrees() is None
    assert not CscGraph.from_edge_index(ei).rebuilt_every_call


# ---------------------------------------------------------------------------------------------- PyG's sampler


def _hops_of(edge_index: torch.Tensor, batch_size: int, num_nodes: int) -> torch.Tensor:
    """Each batch node's hop, found independently of the sampler's layout: the seeds are hop 0, and a node is at
    hop ``k + 1`` if it is the source of a sampled edge into a hop-``k`` node and of none into a nearer one (a
    breadth-first search over the sampled edges, against their direction)."""
    hop = torch.full((num_nodes,), -1, dtype=torch.long)
    hop[:batch_size] = 0
    k = 0
    while True:
        into = hop[edge_index[1]] == k
        new = edge_index[0, into]
        new = new[hop[new] < 0].unique()
        if new.numel() == 0:
            return hop
        k += 1
        hop[new] = k


@needs_sampler
@pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without a 'pyg-lib':UserWarning")
@pytest.mark.parametrize("loops", [True, False], ids=["graph_with_self_loops", "graph_without"])
def test_pyg_sampler_emits_hop_by_hop_and_blocks_match_pyg(loops):
    """PyG's NeighborLoader (pyg-lib or torch-sparse, whichever is installed): nodes are numbered hop by hop and
    the edges into hop-k nodes come after those into hop k-1 (checked against hops found by a search of our own,
    not the sampler's counts), so every block is a prefix; our layer on the blocks equals PyG's on the slices."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    g = torch.Generator().manual_seed(0)
    n = 400
    ei = torch.randint(0, n, (2, 4000), generator=g)
    if loops:
        ei = torch.cat([ei, torch.arange(0, n, 3).repeat(2, 1)], 1)
    data = Data(x=torch.randn(n, 6, generator=g, dtype=torch.float64), edge_index=ei, num_nodes=n)
    fanout = [5, 3, 2]
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=fanout, batch_size=16, shuffle=True)
    pyg, ours = _pair("gat", 6, 4, heads=2, residual=True)
    checked = 0
    for batch in loader:
        m = batch.num_nodes
        hop = _hops_of(batch.edge_index, batch.batch_size, m)
        assert bool((hop >= 0).all()) and bool((hop.diff() >= 0).all()), "nodes not numbered hop by hop"
        dst_hop, src_hop = hop[batch.edge_index[1]], hop[batch.edge_index[0]]
        assert bool((dst_hop.diff() >= 0).all()), "edges not emitted hop by hop"
        assert bool((src_hop <= dst_hop + 1).all())
        nodes = torch.bincount(hop, minlength=len(fanout) + 1).tolist()
        edges = torch.bincount(dst_hop, minlength=len(fanout)).tolist()
        if getattr(batch, "num_sampled_nodes", None) is not None:  # pyg-lib reports them: they must agree
            assert list(batch.num_sampled_nodes) == nodes[: len(batch.num_sampled_nodes)]
            assert list(batch.num_sampled_edges) == edges[: len(batch.num_sampled_edges)]
        blocks = sampled_blocks(batch.edge_index, nodes, edges, 3)  # validate=True: the prefix checks pass
        for block, s in zip(blocks, block_sizes(nodes, edges, 3)):
            xs = batch.x[: s.num_src]
            sl = batch.edge_index[:, : s.num_edges]
            ref = CscGraph.from_edge_index(sl, size=(s.num_src, s.num_dst))
            assert torch.equal(block.map_csc_to_coo, ref.map_csc_to_coo)
            torch.testing.assert_close(ours((xs, xs[: s.num_dst]), block, size=(s.num_src, s.num_dst)),
                                       pyg((xs, xs[: s.num_dst]), sl, size=(s.num_src, s.num_dst)))
        checked += 1
        if checked == 4:
            break
    assert checked == 4


def test_top_level_export():
    assert cudnn_gnn.sampled_blocks is sampled_blocks and "sampled_blocks" in cudnn_gnn.__all__


def test_blocks_from_an_edge_index_hold_no_wrapper_tensor():
    """A PyG EdgeIndex has no storage of its own (a kernel reading its data pointer fails): the blocks keep plain
    tensors, the edge_index they keep for returned attention included."""
    from torch_geometric import EdgeIndex

    ei = EdgeIndex(torch.tensor([[1, 2, 3, 4], [0, 0, 1, 2]]))
    for b in sampled_blocks(ei, [1, 2, 2], [2, 2], 2):
        held = [b.offsets, b.indices, b.edge_ids, b.dst_index, b.edge_index()]
        assert all(type(t) is torch.Tensor for t in held), [type(t).__name__ for t in held]
