"""DeviceNeighborLoader on CPU tensors: every sampled edge is a graph edge, each frontier node takes exactly
min(deg, fanout) distinct in-edges, nodes and edges are numbered hop by hop (so sampled_blocks' prefix blocks are the
per-layer subgraphs), uniform draws, determinism per seed, PyG's NeighborLoader (torch-sparse / pyg-lib) on the
same CSC, node attributes, host reads per batch and argument errors."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch_geometric.typing as pyg_typing

from cudnn_gnn import CscGraph, sampled_blocks
from cudnn_gnn.apps.sampler import DeviceNeighborLoader
from cudnn_gnn.sampled import block_sizes

HAS_SAMPLER = bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def _csc(edge_index: torch.Tensor, n: int, dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, torch.Tensor]:
    """``colptr [n + 1]``, ``row [E]`` of a COO graph, sources ascending within a destination."""
    order = (edge_index[1] * n + edge_index[0]).argsort()
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    colptr[1:] = torch.bincount(edge_index[1], minlength=n).cumsum(0)
    return colptr.to(dtype), edge_index[0, order].to(dtype)


def _power_law_csc(n: int = 400, e: int = 5000, seed: int = 0, dtype: torch.dtype = torch.int64):
    """A skewed graph (hubs of in-degree far above the fan-out, nodes without in-edges, multi-edges, self-loops)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.1)
    dst = torch.multinomial(w, e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    return _csc(torch.stack([src, dst]), n, dtype)


FANOUT = [6, 4, 3]


def _loader(colptr, row, **kw) -> DeviceNeighborLoader:
    kw.setdefault("fanout", FANOUT)
    kw.setdefault("batch_size", 16)
    kw.setdefault("seed", 0)
    return DeviceNeighborLoader(colptr, row, **kw)


def _hop_of_each_node(batch) -> torch.Tensor:
    """Each batch node's hop, found from the sampled edges alone: seeds 0, then breadth-first against the edges'
    direction (a node is at hop k + 1 when it is the source of an edge into a hop-k node and of none nearer)."""
    hop = torch.full((batch.num_nodes,), -1, dtype=torch.long)
    hop[: batch.batch_size] = 0
    src, dst = batch.edge_index
    for k in itertools.count():
        reached = src[(hop[dst] == k) & (hop[src] < 0)].unique()
        if reached.numel() == 0:
            return hop
        hop[reached] = k + 1


def _check_batch(batch, colptr, row, fanout) -> None:
    colptr, row = colptr.long(), row.long()
    n_id, (src, dst), e_id = batch.n_id, batch.edge_index, batch.e_id
    nodes, edges = batch.num_sampled_nodes, batch.num_sampled_edges
    assert n_id.numel() == batch.num_nodes == sum(nodes) and e_id.numel() == src.numel() == sum(edges)
    # every edge is a graph edge: its position holds its source and lies in its destination's in-edge range
    assert torch.equal(row[e_id], n_id[src])
    assert bool(((colptr[n_id[dst]] <= e_id) & (e_id < colptr[n_id[dst] + 1])).all())
    # seeds first, then every node once (the seeds here are distinct)
    assert n_id.unique().numel() == n_id.numel()
    assert e_id.unique().numel() == e_id.numel()  # no edge twice
    # per frontier node exactly min(deg, fanout) in-edges (all for -1), taken at its own hop
    starts = [sum(nodes[:k]) for k in range(len(nodes) + 1)]
    estarts = [sum(edges[:k]) for k in range(len(edges) + 1)]
    deg = (colptr[1:] - colptr[:-1])[n_id]
    for k, f in enumerate(fanout):
        got = torch.bincount(dst, minlength=n_id.numel())
        want = deg if f < 0 else deg.clamp(max=f)
        assert torch.equal(got[starts[k]: starts[k + 1]], want[starts[k]: starts[k + 1]])
        hop_dst = dst[estarts[k]: estarts[k + 1]]
        assert bool(((hop_dst >= starts[k]) & (hop_dst < starts[k + 1])).all()), "edges not listed hop by hop"
    last = starts[len(fanout)]
    assert not bool((dst >= last).any())  # the last hop's nodes are not expanded
    # the hop of each node, from the edges alone, is the one its position says
    hop = _hop_of_each_node(batch)
    assert torch.equal(hop, torch.repeat_interleave(torch.arange(len(nodes)), torch.tensor(nodes)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("fanout", [FANOUT, [-1, 3], [2, -1, 0, 5]])
def test_batches_are_graph_edges_hop_by_hop(dtype, fanout):
    colptr, row = _power_law_csc(dtype=dtype)
    loader = _loader(colptr, row, fanout=fanout, input_nodes=torch.randperm(400)[:70], shuffle=True)
    batches = list(loader)
    assert len(batches) == len(loader) == 5 and [b.batch_size for b in batches] == [16] * 4 + [6]
    for batch in batches:
        _check_batch(batch, colptr, row, fanout)
        assert len(batch.num_sampled_nodes) == len(fanout) + 1 and len(batch.num_sampled_edges) == len(fanout)


def test_index_dtypes_draw_the_same_batches():
    batches = [list(_loader(*_power_law_csc(dtype=d), input_nodes=torch.arange(40))) for d in (torch.int64, torch.int32)]
    for a, b in zip(*batches):
        for key in ("n_id", "edge_index", "e_id"):
            assert torch.equal(a[key], b[key]) and a[key].dtype == torch.int64


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_sampled_blocks_are_the_per_layer_subgraphs(layers):
    """Layer i of an L-layer model needs the edges into the nodes within L - i - 1 hops, from nodes within L - i
    hops: built here by selecting those edges by each node's hop (found from the edges), the block cut by
    sampled_blocks from the counts is the same graph (same CSC, same edge order)."""
    colptr, row = _power_law_csc()
    for batch in _loader(colptr, row, fanout=FANOUT[:layers], input_nodes=torch.arange(0, 400, 7)):
        hop = _hop_of_each_node(batch)
        blocks = sampled_blocks(batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges, layers)
        for i, (block, s) in enumerate(zip(blocks, block_sizes(batch.num_sampled_nodes, batch.num_sampled_edges, layers))):
            hops = layers - i
            keep = hop[batch.edge_index[1]] < hops
            n_src, n_dst = int((hop <= hops).sum()), int((hop < hops).sum())
            plain = CscGraph.from_edge_index(batch.edge_index[:, keep], size=(n_src, n_dst))
            assert (block.num_src_nodes, block.num_dst_nodes, block.num_edges) == (n_src, n_dst, int(keep.sum())) == s
            for name in ("offsets", "indices", "map_csc_to_coo"):
                assert torch.equal(getattr(block, name), getattr(plain, name)), name


def test_fanout_all_takes_every_in_edge():
    colptr, row = _power_law_csc()
    batch = next(iter(_loader(colptr, row, fanout=[-1, -1], input_nodes=torch.arange(5))))
    _check_batch(batch, colptr, row, [-1, -1])
    # the seeds' in-edges, all of them, in CSC order
    assert torch.equal(batch.e_id[: batch.num_sampled_edges[0]], torch.arange(int(colptr[5])))


def test_seeds_without_in_edges():
    colptr, row = _csc(torch.tensor([[0, 1, 2], [1, 2, 3]]), 6)  # nodes 0, 4, 5 have no in-edges
    batch = next(iter(_loader(colptr, row, input_nodes=torch.tensor([0, 4, 5]), batch_size=3)))
    assert batch.num_sampled_nodes == [3, 0, 0, 0] and batch.num_sampled_edges == [0, 0, 0]
    assert batch.edge_index.shape == (2, 0) and batch.e_id.numel() == 0 and batch.n_id.tolist() == [0, 4, 5]
    batch = next(iter(_loader(colptr, row, input_nodes=torch.tensor([4, 3]), batch_size=2)))  # a chain behind 3
    assert batch.num_sampled_nodes == [2, 1, 1, 1] and batch.n_id.tolist() == [4, 3, 2, 1, 0]
    assert batch.edge_index.tolist() == [[2, 3, 4], [1, 2, 3]]


@pytest.mark.parametrize("bad", [6, -1])
def test_sample_refuses_seeds_outside_the_graph_and_stays_usable(bad: int) -> None:
    """``sample(seeds)`` with a node id outside the graph (it would index past the node map: on CUDA a device-side
    assert): ValueError at the first hop's host read (no read more), and the loader's next batch is right."""
    colptr, row = _csc(torch.tensor([[0, 1, 2], [1, 2, 3]]), 6)
    loader = _loader(colptr, row, input_nodes=torch.tensor([0, 4, 5]), batch_size=3)
    with pytest.raises(ValueError, match=r"^seeds must be node ids in \[0, num_nodes=6\), got 1 outside"):
        loader.sample(torch.tensor([3, bad, 1]))
    batch = loader.sample(torch.tensor([4, 3]))
    assert batch.n_id.tolist() == [4, 3, 2, 1, 0] and batch.edge_index.tolist() == [[2, 3, 4], [1, 2, 3]]


def test_repeated_seeds_as_torch_sparse():
    """Each seed slot keeps its own row and its own in-edges; an edge from a repeated seed points at its first slot
    (torch-sparse's NeighborLoader on this graph gives exactly this)."""
    colptr, row = torch.tensor([0, 2, 4, 5, 5, 5]), torch.tensor([1, 2, 3, 0, 4])  # 1,2 -> 0; 3,0 -> 1; 4 -> 2
    batch = next(iter(_loader(colptr, row, fanout=[-1, -1], input_nodes=torch.tensor([0, 1, 0]), batch_size=3)))
    assert batch.n_id.tolist() == [0, 1, 0, 2, 3, 4]
    assert batch.edge_index.tolist() == [[1, 3, 4, 0, 1, 3, 5], [0, 0, 1, 1, 2, 2, 3]]
    assert batch.e_id.tolist() == [0, 1, 2, 3, 0, 1, 4]
    assert batch.num_sampled_nodes == [3, 2, 1] and batch.num_sampled_edges == [6, 1]


def test_same_seed_same_batches_and_new_draws_each_epoch():
    colptr, row = _power_law_csc()
    a = _loader(colptr, row, input_nodes=torch.arange(64), shuffle=True, seed=3)
    b = _loader(colptr, row, input_nodes=torch.arange(64), shuffle=True, seed=3)
    epochs_a, epochs_b = [list(a), list(a)], [list(b), list(b)]
    for ea, eb in zip(epochs_a, epochs_b):
        for x, y in zip(ea, eb):
            assert all(torch.equal(x[k], y[k]) for k in ("n_id", "edge_index", "e_id", "input_id"))
    first, second = epochs_a
    assert not torch.equal(torch.cat([x.input_id for x in first]), torch.cat([x.input_id for x in second]))
    assert sorted(torch.cat([x.input_id for x in second]).tolist()) == list(range(64))  # a permutation
    # the same seeds sampled again draw other neighbours (hubs have far more in-edges than the fan-out)
    hub = torch.tensor([0, 1, 2, 3])
    assert not torch.equal(a.sample(hub).e_id, a.sample(hub).e_id)
    c = _loader(colptr, row, input_nodes=torch.arange(64), shuffle=True, seed=4)
    assert not torch.equal(next(iter(c)).input_id, first[0].input_id)
    gen = torch.Generator().manual_seed(3)
    d = _loader(colptr, row, input_nodes=torch.arange(64), shuffle=True, seed=None, generator=gen)
    assert torch.equal(next(iter(d)).e_id, first[0].e_id)  # a generator seeded alike draws alike


def test_draws_are_uniform():
    """A star (node 0 with 20 in-neighbours; node 21 with 4), 4000 draws each in one batch of repeated seeds: every
    neighbour is chosen 4000 * 5 / 20 = 1000 times within 6 standard deviations (27.4; fixed seed, so this cannot
    flake), every draw is 5 distinct edges, and the 6 pairs of node 21's neighbours each come up about 1/6 of
    the time (within 6 standard deviations of 4000 / 6)."""
    src = torch.cat([torch.arange(1, 21), torch.arange(22, 26)])
    dst = torch.cat([torch.zeros(20, dtype=torch.long), torch.full((4,), 21)])
    colptr, row = _csc(torch.stack([src, dst]), 26)
    loader = _loader(colptr, row, fanout=[5], input_nodes=torch.zeros(4000, dtype=torch.long), batch_size=4000)
    batch = next(iter(loader))
    picks = batch.e_id.view(4000, 5)
    assert bool((picks.sort(1).values.diff(dim=1) > 0).all())  # distinct within a draw, kept in CSC order
    counts = torch.bincount(picks.reshape(-1), minlength=20).double()
    assert counts.sum() == 20000 and bool(((counts - 1000).abs() < 6 * 27.4).all()), counts
    pair_loader = _loader(colptr, row, fanout=[2], input_nodes=torch.full((4000,), 21), batch_size=4000, seed=1)
    pairs = next(iter(pair_loader)).e_id.view(4000, 2) - 20
    pair_counts = torch.bincount(pairs[:, 0] * 4 + pairs[:, 1], minlength=16)
    expected, sd = 4000 / 6, (4000 * (1 / 6) * (5 / 6)) ** 0.5
    assert [int(pair_counts[a * 4 + b]) > 0 for a in range(4) for b in range(4) if a < b] == [True] * 6
    assert all(abs(int(pair_counts[a * 4 + b]) - expected) < 6 * sd for a in range(4) for b in range(4) if a < b)


def test_choose_draws_every_subset_alike():
    """Floyd's draws, all made at once: 60,000 rows of degree 6 choosing 3 give each of the 20 subsets 3,000 times
    within 6 standard deviations (fixed seed), sorted and distinct; rows of degree <= fanout take 0..fanout-1."""
    from cudnn_gnn.apps.sampler import _choose

    picks = _choose(torch.full((60_000,), 6), 3, torch.Generator().manual_seed(0))
    assert bool((picks.diff(dim=1) > 0).all()) and int(picks.min()) >= 0 and int(picks.max()) <= 5
    counts = torch.bincount((1 << picks).sum(1), minlength=64)[[sum(1 << i for i in c)
                                                                for c in itertools.combinations(range(6), 3)]]
    sd = (60_000 * (1 / 20) * (19 / 20)) ** 0.5
    assert int(counts.sum()) == 60_000 and bool(((counts - 3000).abs() < 6 * sd).all()), counts
    assert torch.equal(_choose(torch.tensor([0, 2, 3]), 3, torch.Generator()), torch.arange(3).expand(3, 3))


def test_choose_by_keys_draws_every_subset_alike():
    """The random-key draws of fan-outs above Floyd's range: 60,000 rows of degree 6 choosing 3 give each of the 20
    subsets 3,000 times within 6 standard deviations (fixed seed), sorted and distinct, with rows of other degrees
    alongside (each row's offsets in its own range)."""
    from cudnn_gnn.apps.sampler import _choose_by_keys

    deg = torch.full((60_000,), 6)
    picks = _choose_by_keys(deg, 3, int(deg.sum()), torch.Generator().manual_seed(0))
    assert bool((picks.diff(dim=1) > 0).all()) and int(picks.min()) >= 0 and int(picks.max()) <= 5
    counts = torch.bincount((1 << picks).sum(1), minlength=64)[[sum(1 << i for i in c)
                                                                for c in itertools.combinations(range(6), 3)]]
    sd = (60_000 * (1 / 20) * (19 / 20)) ** 0.5
    assert int(counts.sum()) == 60_000 and bool(((counts - 3000).abs() < 6 * sd).all()), counts
    mixed = _choose_by_keys(torch.tensor([4, 100, 3]), 3, 107, torch.Generator().manual_seed(1))
    assert bool((mixed.diff(dim=1) > 0).all()) and mixed[[0, 2]].max() <= 3 and mixed[2].tolist() == [0, 1, 2]


def _regular_csc(n: int, degree: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Every node has exactly ``degree`` distinct in-neighbours (random, no self-loops)."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.arange(n).repeat_interleave(degree)
    src = (dst + 1 + torch.stack([torch.randperm(n - 1, generator=g)[:degree] for _ in range(n)]).view(-1)) % n
    return _csc(torch.stack([src, dst]), n)


def test_fanout_far_above_the_degree_takes_each_in_edge_once():
    """Fan-outs of 2000 and 10**9 on a graph of in-degree 13: every frontier node takes each of its 13 in-edges exactly
    once and the batches are those of fan-out -1, with no random draw at all (the work and memory follow the degrees,
    not fan-out x frontier: 10**9 x 64 seeds would be 512 GB of draws)."""
    colptr, row = _regular_csc(3000, 13)
    wide = _loader(colptr, row, fanout=[10**9, 2000, 2000], input_nodes=torch.arange(0, 3000, 7), batch_size=64)
    full = _loader(colptr, row, fanout=[-1, -1, -1], input_nodes=torch.arange(0, 3000, 7), batch_size=64)
    for a, b in zip(wide, full, strict=True):
        _check_batch(a, colptr, row, [10**9, 2000, 2000])
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.e_id, b.e_id)
        assert a.num_sampled_edges[0] == 13 * a.batch_size
    assert torch.equal(wide.generator.get_state(), torch.Generator().manual_seed(0).get_state())  # nothing drawn


@pytest.mark.parametrize("fanout", [5, 40])
def test_only_nodes_above_the_fanout_draw(monkeypatch: pytest.MonkeyPatch, fanout: int):
    """A hub of 60 in-edges among nodes of at most 4: the chooser (Floyd's up to 32, random keys above) sees the hub
    alone, and the hub's draws stay uniform (each in-neighbour about ``fanout / 60`` of 3000 draws, within 6 standard
    deviations; fixed seed)."""
    import cudnn_gnn.apps.sampler as sampler

    src = torch.cat([torch.arange(1, 61), torch.arange(61, 261) % 59 + 1])
    dst = torch.cat([torch.zeros(60, dtype=torch.long), torch.arange(61, 261) // 4 + 61])
    colptr, row = _csc(torch.stack([src, dst]), 261)
    seen: list[list[int]] = []
    name = "_choose" if fanout <= sampler._FLOYD_MAX else "_choose_by_keys"
    original = getattr(sampler, name)

    def spy(deg, *args):
        seen.append(deg.tolist())
        return original(deg, *args)

    monkeypatch.setattr(sampler, name, spy)
    seeds = torch.cat([torch.zeros(3000, dtype=torch.long), torch.arange(61, 111)])
    batch = next(iter(_loader(colptr, row, fanout=[fanout], input_nodes=seeds, batch_size=3050)))
    assert seen == [[60] * 3000]
    picks = batch.e_id[: 3000 * fanout].view(3000, fanout)
    assert bool((picks.diff(dim=1) > 0).all()) and int(picks.max()) < 60
    counts = torch.bincount(picks.reshape(-1), minlength=60).double()
    p = fanout / 60
    assert bool(((counts - 3000 * p).abs() < 6 * (3000 * p * (1 - p)) ** 0.5).all()), counts


def test_node_attributes_are_gathered():
    colptr, row = _power_law_csc()
    x, y = torch.randn(400, 5), torch.randint(0, 7, (400, 1))
    for batch in _loader(colptr, row, node_attrs={"x": x, "y": y}, input_nodes=torch.arange(40)):
        assert torch.equal(batch.x, x[batch.n_id]) and torch.equal(batch.y, y[batch.n_id])


def test_input_nodes_mask_none_and_drop_last():
    colptr, row = _power_law_csc()
    mask = torch.zeros(400, dtype=torch.bool)
    mask[10:50] = True
    loader = _loader(colptr, row, input_nodes=mask, batch_size=16, drop_last=True)
    assert len(loader) == 2 and [b.n_id[:16].tolist() for b in loader] == [list(range(10, 26)), list(range(26, 42))]
    assert len(_loader(colptr, row, batch_size=100)) == 4  # every node


def test_with_inputs_shares_the_device_copy():
    colptr, row = _power_law_csc()
    train = _loader(colptr, row, node_attrs={"x": torch.randn(400, 3)}, input_nodes=torch.arange(30), shuffle=True)
    valid = train.with_inputs(torch.arange(100, 130), batch_size=8)
    assert valid.row is train.row and valid.node_attrs["x"] is train.node_attrs["x"] and valid._map is train._map
    assert valid.batch_size == 8 and not valid.shuffle and len(valid) == 4
    assert train.resident_bytes() == 401 * 8 + row.numel() * 8 + 400 * 3 * 4 + 401 * 8
    for a, b in zip(train, valid):  # interleaved: each batch leaves the shared map clean
        _check_batch(a, colptr, row, FANOUT)
        _check_batch(b, colptr, row, FANOUT)
    assert bool((train._map[:-1] == valid._map[:-1]).all()) and int(train._map[:-1].min()) == 1 << 62


def test_host_reads_per_batch(monkeypatch: pytest.MonkeyPatch):
    """One read to size the first hop, then one per hop: len(fanout) + 1 per batch (CUDA syncs on each)."""
    colptr, row = _power_law_csc()
    loader = _loader(colptr, row, input_nodes=torch.arange(32), batch_size=16)
    reads: list[str] = []
    for name in ("tolist", "item", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _name=name, _original=original):
            reads.append(_name)
            return _original(self, *a)

        monkeypatch.setattr(torch.Tensor, name, counting)
    batches = list(loader)
    assert len(batches) == 2 and len(reads) == 2 * (len(FANOUT) + 1), reads


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"colptr": torch.zeros(3)}, TypeError, r"colptr must have dtype int32 or int64, got torch.float32"),
    ({"row": [0, 1]}, TypeError, r"row must be a torch.Tensor, got list"),
    ({"colptr": torch.zeros(2, 2, dtype=torch.long)}, ValueError, r"colptr must have shape \(num_nodes \+ 1,\), got \(2, 2\)"),
    ({"colptr": torch.tensor([0, 2, 1, 3])}, ValueError,
     r"colptr must start at 0, never decrease and end at row.numel\(\)=3, got colptr\[0\]=0, colptr\[-1\]=3 and 1 "
     r"decreasing steps"),
    ({"colptr": torch.tensor([0, 1, 2, 2])}, ValueError, r"colptr\[-1\]=2"),
    ({"row": torch.tensor([0, 3, 1])}, ValueError, r"row must hold node ids in \[0, num_nodes=3\), got values in \[0, 3\]"),
    ({"fanout": 3}, TypeError, r"fanout must be a list of ints, got int"),
    ({"fanout": []}, ValueError, r"fanout must have at least one entry \(one per hop\), got \[\]"),
    ({"fanout": [2, -2]}, ValueError, r"fanout\[1\] must be >= -1, got -2"),
    ({"fanout": [2.0]}, TypeError, r"fanout\[0\] must be an int, got float"),
    ({"batch_size": 0}, ValueError, r"batch_size must be >= 1, got 0"),
    ({"shuffle": 1}, TypeError, r"shuffle must be a bool, got int"),
    ({"input_nodes": torch.tensor([0, 3])}, ValueError,
     r"input_nodes must be node ids in \[0, num_nodes=3\), got values in \[0, 3\]"),
    ({"input_nodes": torch.tensor([0.0])}, TypeError, r"input_nodes must have dtype int32 or int64, got torch.float32"),
    ({"input_nodes": torch.ones(2, dtype=torch.bool)}, ValueError,
     r"input_nodes as a mask must have shape \(3,\), got \(2,\)"),
    ({"node_attrs": {"x": torch.zeros(4, 2)}}, ValueError,
     r"node_attrs\['x'\] must have shape \(num_nodes=3, ...\), got \(4, 2\)"),
    ({"node_attrs": {"n_id": torch.zeros(3)}}, ValueError, r"node_attrs keys must be names other than edge_index, .*got 'n_id'"),
    ({"node_attrs": {"x": [1, 2, 3]}}, TypeError, r"node_attrs\['x'\] must be a torch.Tensor, got list"),
    ({"seed": 1, "generator": torch.Generator()}, ValueError, r"seed and generator must not both be given"),
    ({"generator": 5}, TypeError, r"generator must be a torch.Generator, got int"),
    ({"device": 0}, TypeError, r"device must be a str, a torch.device or None, got int"),
    ({"seed": -1}, ValueError, r"seed must be >= 0, got -1"),
])
def test_argument_errors(kwargs, exc, match):
    args = {"colptr": torch.tensor([0, 1, 2, 3]), "row": torch.tensor([1, 2, 0]), "fanout": [2], "batch_size": 2,
            "seed": 0, **kwargs}
    if "generator" in kwargs and "seed" not in kwargs:
        args["seed"] = None
    colptr, row = args.pop("colptr"), args.pop("row")
    with pytest.raises(exc, match=match):
        DeviceNeighborLoader(colptr, row, **args)


@pytest.mark.skipif(not HAS_SAMPLER, reason="PyG's NeighborLoader needs pyg-lib or torch-sparse (neither installed)")
@pytest.mark.parametrize("fanout", [[-1, -1], [50, 50, 50]], ids=["all", "fanout_above_max_degree"])
def test_same_batches_as_pyg_neighbor_loader(fanout):
    """With every in-edge taken (fanout -1, or above the largest in-degree) there is nothing random to sample: PyG's
    NeighborLoader on the same CSC gives the same nodes, edges and edge ids (torch-sparse: in the same order; with
    pyg-lib the same sets), repeated seeds included."""
    from cudnn_gnn.apps.distributed import mapped_neighbor_loader

    colptr, row = _csc(torch.randint(0, 300, (2, 1500), generator=torch.Generator().manual_seed(0)), 300)
    assert int((colptr[1:] - colptr[:-1]).max()) <= 50
    x = torch.randn(300, 3)
    seeds = torch.randint(0, 300, (60,), generator=torch.Generator().manual_seed(1))  # with repeats
    ours = _loader(colptr, row, node_attrs={"x": x}, input_nodes=seeds, fanout=fanout, batch_size=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch-sparse without pyg-lib: a UserWarning
        theirs = list(mapped_neighbor_loader(colptr, row, node_attrs={"x": x}, input_nodes=seeds, fanout=fanout,
                                             batch_size=16))
    exact = not pyg_typing.WITH_PYG_LIB
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.x, x[a.n_id]) and a.batch_size == b.batch_size
        assert torch.equal(a.n_id[: a.batch_size], b.n_id[: b.batch_size])
        if exact:
            assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.e_id, b.e_id)
        assert set(a.n_id.tolist()) == set(b.n_id.tolist())
        triples = [set(zip(z.n_id[z.edge_index[0]].tolist(), z.n_id[z.edge_index[1]].tolist(), z.e_id.tolist()))
                   for z in (a, b)]
        assert triples[0] == triples[1]
        if getattr(b, "num_sampled_nodes", None) is not None:
            assert list(b.num_sampled_nodes) == a.num_sampled_nodes
            assert list(b.num_sampled_edges) == a.num_sampled_edges


# ---------------------------------------------------------------------------------------------- BackgroundLoader


def _same_batch(a, b) -> bool:
    return all(torch.equal(a[k], b[k]) for k in ("n_id", "edge_index", "e_id", "x")) and (
        a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges)


def test_background_loader_gives_the_loaders_batches_in_order():
    """The thread runs the loader unchanged: the same batches, draws included, in the same order, epoch after epoch;
    then a loader sharing the relabel map (with_inputs) samples as it would have alone."""
    from cudnn_gnn.apps.distributed import BackgroundLoader

    colptr, row = _power_law_csc()
    x = torch.randn(400, 3)
    inline = _loader(colptr, row, node_attrs={"x": x}, input_nodes=torch.arange(100), shuffle=True)
    ahead = _loader(colptr, row, node_attrs={"x": x}, input_nodes=torch.arange(100), shuffle=True)
    for k in (1, 3):
        bg = BackgroundLoader(ahead, torch.device("cpu"), ahead=k)
        assert len(bg) == len(inline) == 7
        got, want = list(bg), list(inline)
        assert len(got) == len(want) and all(_same_batch(a, b) for a, b in zip(got, want))
    valid = ahead.with_inputs(torch.arange(200, 240), batch_size=8, seed=5)
    want = list(inline.with_inputs(torch.arange(200, 240), batch_size=8, seed=5))
    assert all(_same_batch(a, b) for a, b in zip(BackgroundLoader(valid, torch.device("cpu")), want))
    assert int(ahead._map[:-1].min()) == 1 << 62  # every batch left the shared map clean


class _Counting:
    """A loader of ``n`` integers that records how many it has made, and raises at ``fail`` if set."""

    def __init__(self, n: int, fail: int | None = None) -> None:
        self.n, self.fail, self.made = n, fail, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail:
                raise RuntimeError(f"loader failed at batch {i}")
            self.made += 1
            yield torch.tensor([i])


def test_background_loader_makes_at_most_ahead_batches_in_front():
    import time

    from cudnn_gnn.apps.distributed import BackgroundLoader

    for ahead in (1, 2):
        loader = _Counting(10)
        it = iter(BackgroundLoader(loader, torch.device("cpu"), ahead=ahead))
        for i in range(4):
            assert int(next(it)) == i
            deadline = time.monotonic() + 10  # the thread fills what it may (a loaded machine may be slow to)
            while loader.made < i + 1 + ahead and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05)  # and a moment more, in which it must not make another
            assert loader.made == i + 1 + ahead  # the batch in hand and `ahead` in front, no more
        it.close()
        assert not it.thread.is_alive() and loader.made == 4 + ahead
        with pytest.raises(StopIteration):
            next(it)


@pytest.fixture
def slow_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """BackgroundLoader's thread slow to be scheduled: each time it is given a slot it waits 0.2 s before going on, as
    on a loaded machine, where the consumer may leave its loop in that time (its next batch was already queued)."""
    import threading
    import time

    class Slow(threading.Semaphore):
        def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
            got = super().acquire(blocking, timeout)
            if threading.current_thread().name == "BackgroundLoader":
                time.sleep(0.2)
            return got

    monkeypatch.setattr(threading, "Semaphore", Slow)


@pytest.mark.parametrize("ahead", [1, 2])
def test_background_loader_left_early_has_made_ahead_batches_however_slow_the_thread(slow_thread, ahead):
    """Closed after k batches, the thread has made exactly k + ahead (fewer where the loader ends; ahead + 1 before
    the first was taken), not however many it got to before the close: closing waits for the ones it was free to
    make, so the count, and a sampler's draws, do not depend on how slowly the thread was scheduled."""
    from cudnn_gnn.apps.distributed import BackgroundLoader

    for n, taken, made in ((10, 2, 2 + ahead), (10, 0, 1 + ahead), (3, 2, 3)):
        loader = _Counting(n)
        it = iter(BackgroundLoader(loader, torch.device("cpu"), ahead=ahead))
        assert [int(next(it)) for _ in range(taken)] == list(range(taken))
        it.close()
        assert loader.made == made and not it.thread.is_alive()
    it = iter(BackgroundLoader(_Counting(10, fail=2), torch.device("cpu"), ahead=ahead))
    next(it)
    it.close()  # the failure at a batch never asked for is not raised
    assert not it.thread.is_alive()


def test_background_loader_left_through_an_exception_does_not_wait(slow_thread):
    """`with` left through an exception (a failed step, Ctrl-C) stops the slow thread after the batch it is making
    instead of waiting for the `ahead` it was free to make: after a failure the draws need not repeat, and the wait
    would hold the error back by `ahead` batches. A generator closed at its `yield` (a loop over it left early) still
    waits, as a loop left early does."""
    from cudnn_gnn.apps.distributed import BackgroundLoader

    ahead = 4
    loader = _Counting(10)
    with pytest.raises(KeyError, match="step failed"):
        with iter(BackgroundLoader(loader, torch.device("cpu"), ahead=ahead)) as it:
            next(it)
            raise KeyError("step failed")
    assert not it.thread.is_alive() and loader.made < 1 + ahead  # waiting had made 1 + ahead

    def batches(loader):
        with iter(BackgroundLoader(loader, torch.device("cpu"), ahead=ahead)) as it:
            yield from it

    loader = _Counting(10)
    gen = batches(loader)
    next(gen)
    gen.close()
    assert loader.made == 1 + ahead


def test_background_loader_left_early_next_epoch_is_the_same_however_slow_the_thread(slow_thread):
    """The device sampler's epoch after one left early in a BackgroundLoader (2 batches taken, 1 made ahead) samples
    from the generator as left by 3 batches made inline, in every run with the seed: its batches do not depend on
    how the threads were scheduled."""
    from cudnn_gnn.apps.distributed import BackgroundLoader

    colptr, row = _power_law_csc()
    x = torch.randn(400, 3)
    inline = _loader(colptr, row, node_attrs={"x": x}, input_nodes=torch.arange(100), shuffle=True)
    ahead = _loader(colptr, row, node_attrs={"x": x}, input_nodes=torch.arange(100), shuffle=True)
    for k, _ in enumerate(BackgroundLoader(ahead, torch.device("cpu"), ahead=1), 1):
        if k == 2:
            break
    for k, _ in enumerate(inline, 1):
        if k == 3:
            break
    got, want = list(BackgroundLoader(ahead, torch.device("cpu"))), list(inline)
    assert len(got) == len(want) == 7 and all(_same_batch(a, b) for a, b in zip(got, want))


def test_background_loader_early_exit_joins_the_thread():
    """Leaving a for loop early releases the iterator and stops its thread; `with` stops it where the block ends."""
    import gc
    import threading

    from cudnn_gnn.apps.distributed import BackgroundLoader

    before = threading.active_count()
    for batch in BackgroundLoader(_Counting(100), torch.device("cpu")):
        if int(batch) == 2:
            break
    gc.collect()
    assert threading.active_count() == before
    with iter(BackgroundLoader(_Counting(100), torch.device("cpu"))) as it:
        next(it)
        thread = it.thread
    assert not thread.is_alive()


def test_background_loader_collected_on_its_own_thread_stops_it():
    """An iterator left in a reference cycle is closed by whichever thread's allocation runs the cyclic garbage
    collector, the loader's own included (the device sampler allocates a lot): there closing tells the thread to stop
    after its batch instead of waiting for batches only that thread can make. The thread is joined with a time limit,
    so a wait that never ends fails the test instead of hanging it."""
    import gc
    import threading
    import weakref

    from cudnn_gnn.apps.distributed import BackgroundLoader

    go, collected = threading.Event(), []

    class CollectedAt2(_Counting):
        def __iter__(self):
            for i, batch in enumerate(super().__iter__()):
                if i == 2:
                    go.wait()
                    gc.collect()  # on the loader's thread
                    collected.append(ref() is None)
                yield batch

    loader = CollectedAt2(100)
    gc.disable()  # no collection on this thread, which would wait for batch 2 while the loader waits for `go`
    try:
        it = iter(BackgroundLoader(loader, torch.device("cpu"), ahead=2))
        assert int(next(it)) == 0
        thread, ref = it.thread, weakref.ref(it)
        cycle: dict[str, object] = {"it": it}
        cycle["self"] = cycle
        del it, cycle
        go.set()
        thread.join(timeout=10)
    finally:
        gc.enable()
    assert not thread.is_alive() and collected == [True] and loader.made == 3


def test_background_loader_raises_the_loaders_error_at_its_batch():
    from cudnn_gnn.apps.distributed import BackgroundLoader

    it = iter(BackgroundLoader(_Counting(10, fail=3), torch.device("cpu")))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="loader failed at batch 3"):
        next(it)
    assert not it.thread.is_alive()


@pytest.mark.parametrize("ahead, exc, match", [(0, ValueError, "ahead must be >= 1, got 0"),
                                               (1.5, TypeError, "ahead must be an int")])
def test_background_loader_argument_errors(ahead, exc, match):
    from cudnn_gnn.apps.distributed import BackgroundLoader

    with pytest.raises(exc, match=match):
        BackgroundLoader([], torch.device("cpu"), ahead=ahead)
