"""The fixed-shape self-loop plan (``layers/_graph_plan.py``): for a graph whose COO order is already its CSC order
the plan's CSC comes from a cumulative sum, and equals the one a stable sort builds, tensor for tensor (values and
dtypes); through :func:`resolve`, such a graph's plan takes no sort, another graph's one. A sparse adjacency's
offsets become per-edge ids with fixed-shape ops, malformed ones made well-formed and flagged NaN."""

from __future__ import annotations

import pytest
import torch

from cudnn_gnn import CscGraph
from cudnn_gnn.graph import csc_offsets
from cudnn_gnn.layers._graph_plan import compressed_ids, static_plan
from cudnn_gnn.layers._plan_cache import resolve


def _csc_ordered(num_src: int, num_dst: int, num_edges: int, seed: int, dtype: torch.dtype):
    """``[2, E]`` int64 random edges sorted by destination (stable), a third of them made self-loops where the
    destination is also a source (multi-edges, empty rows, bipartite sizes), and their CSC offsets in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, max(num_src, 1), (num_edges,), generator=g)
    dst = torch.randint(0, max(num_dst, 1), (num_edges,), generator=g)
    loop = (torch.rand(num_edges, generator=g) < 1 / 3) & (dst < num_src)
    src = torch.where(loop, dst, src)
    order = torch.sort(dst, stable=True).indices
    ei = torch.stack([src[order], dst[order]])
    return ei, csc_offsets(ei[1], num_dst, dtype)


@pytest.mark.parametrize(("num_src", "num_dst", "num_edges"), [(9, 9, 40), (4, 11, 30), (12, 5, 50), (6, 6, 0),
                                                                 (1, 1, 5), (30, 30, 300)])
@pytest.mark.parametrize("loops", ["all", "fewer"])
def test_the_sort_free_plan_equals_the_sorted_plan(num_src, num_dst, num_edges, loops, index_dtype) -> None:
    ei, offsets = _csc_ordered(num_src, num_dst, num_edges, num_src * 100 + num_edges, index_dtype)
    n = min(num_src, num_dst)
    num_loops = n if loops == "all" else n // 2
    sorted_plan = static_plan(ei, num_src, num_dst, num_loops, "csc_graph", None)
    free = static_plan(ei, num_src, num_dst, num_loops, "csc_graph", None, offsets=offsets)
    for name in ("offsets", "indices", "map_csc_to_coo", "dst_index"):
        want, got = getattr(sorted_plan.graph, name), getattr(free.graph, name)
        assert got.dtype == want.dtype and torch.equal(got, want), name
    assert (free.graph.num_src_nodes, free.graph.num_dst_nodes) == (num_src, num_dst + 1)
    assert free.graph.rebuilt_every_call and free.pad_dst and free.num_loops == num_loops
    assert torch.equal(free.keep, sorted_plan.keep) and torch.equal(free.loop_index, sorted_plan.loop_index)
    free.graph.validate()


def test_a_graph_in_csc_order_gets_its_plan_without_a_sort(aten_ops) -> None:
    """A graph marked rebuilt every call whose COO order is its CSC order (``map_csc_to_coo is None``, as a packed
    batch's) takes its self-loop plan from its offsets; given a COO permutation, the plan sorts."""
    ei, offsets = _csc_ordered(20, 20, 80, 0, torch.int32)
    in_order = CscGraph.from_csc(offsets, ei[0].int(), 20, edge_index=ei, rebuilt_every_call=True)
    permuted = CscGraph.from_csc(offsets, ei[0].int(), 20, torch.arange(80, dtype=torch.int32), edge_index=ei,
                                 rebuilt_every_call=True)
    plans = []
    for graph, sorts in ((in_order, 0), (permuted, 1)):
        counts = aten_ops(lambda g=graph: plans.append(resolve(g, num_src=20, num_dst=20, num_loops=20,
                                                               device=g.device, cache=True)))
        assert counts.get("sort", 0) == sorts and counts.get("searchsorted", 0) == sorts
    for name in ("offsets", "indices", "map_csc_to_coo", "dst_index"):
        assert torch.equal(getattr(plans[0].graph, name), getattr(plans[1].graph, name)), name


# offsets [6] of 5 rows over 7 entries: well-formed, and broken each way a caller's adjacency can be
_OFFSETS = {
    "well-formed": [0, 2, 2, 5, 6, 7],
    "decreasing": [0, 4, 2, 5, 6, 7],
    "end-short": [0, 2, 2, 5, 6, 6],
    "end-past": [0, 2, 2, 5, 6, 9],
    "start-past": [1, 2, 2, 5, 6, 7],
    "negative": [0, 2, -3, 5, 6, 7],
    "past-the-entries": [0, 2, 40, 5, 6, 7],
}


@pytest.mark.parametrize("case", sorted(_OFFSETS))
def test_compressed_ids_tile_the_entries_and_flag_malformed_offsets(case: str, index_dtype: torch.dtype) -> None:
    """Every entry gets one row id in ``[0, n)``, rows non-decreasing (what ``repeat_interleave`` gives for
    well-formed offsets, bitwise); the flag is NaN exactly where the offsets were malformed."""
    offsets = torch.tensor(_OFFSETS[case], dtype=index_dtype)
    ids, poison = compressed_ids(offsets, 7)
    assert ids.shape == (7,) and ids.dtype == index_dtype
    assert int(ids.min()) >= 0 and int(ids.max()) < 5 and bool((ids.diff() >= 0).all())
    if case == "well-formed":
        assert torch.equal(ids, torch.repeat_interleave(torch.arange(5, dtype=index_dtype), offsets.diff()))
        assert float(poison) == 0.0
    else:
        assert torch.isnan(poison)


def test_compressed_ids_refuse_entries_without_rows() -> None:
    with pytest.raises(ValueError, match="edge_index must be empty"):
        compressed_ids(torch.zeros(1, dtype=torch.long), 3)
    ids, poison = compressed_ids(torch.zeros(1, dtype=torch.long), 0)
    assert ids.numel() == 0 and float(poison) == 0.0


def test_static_plan_of_a_sparse_adjacency_reads_nothing_back() -> None:
    """A compiled call's plan of a torch sparse CSR with broken offsets and indices: no host sync (a CUDA step never
    waits, a captured one stays capturable), a graph whose every index is in range, and the NaN poison."""
    from cudnn_gnn.apps.capture import host_syncs
    from cudnn_gnn.layers._graph_inputs import build_plan

    offsets = torch.tensor(_OFFSETS["decreasing"])
    adj = torch.sparse_csr_tensor(offsets, torch.tensor([0, 3, 1, 9, 2, -1, 4]), torch.ones(7), (5, 5))
    plans = []
    assert host_syncs(lambda: plans.append(build_plan(adj, 5, 5, 5, static=True))) == []
    plans[0].graph.validate()
    assert torch.isnan(plans[0].poison)


def test_static_plan_of_an_uncoalesced_coo_adjacency_reads_nothing_back() -> None:
    """A compiled call's plan of a torch sparse COO adj_t with self-loops, uncoalesced (a repeated pair, a self-loop)
    and a source id past the nodes: no host sync, a graph whose every index is in range, the NaN poison, and the
    repeat dropped from PyG's edges as the self-loop is; without the bad id, no poison."""
    from cudnn_gnn.apps.capture import host_syncs
    from cudnn_gnn.layers._graph_inputs import build_plan

    indices = torch.tensor([[1, 0, 1, 2, 3, 1], [0, 2, 0, 2, 9, 4]])  # (destination, source): (1, 0) twice, 2 -> 2
    adj = torch.sparse_coo_tensor(indices, torch.ones(6), (5, 5))
    plans = []
    assert host_syncs(lambda: plans.append(build_plan(adj, 5, 5, 5, static=True))) == []
    plan = plans[0]
    plan.graph.validate()
    assert torch.isnan(plan.poison)
    assert plan.keep.tolist() == [True, True, False, False, True, True] + [True] * 5
    good = torch.sparse_coo_tensor(indices[:, [0, 1, 2, 3, 5]], torch.ones(5), (5, 5))
    assert float(build_plan(good, 5, 5, 5, static=True).poison) == 0.0


def test_compressed_ids_compile_without_graph_breaks() -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(compressed_ids, backend="aot_eager", fullgraph=True)
    for case in ("well-formed", "decreasing"):
        offsets = torch.tensor(_OFFSETS[case])
        (ids, poison), (want_ids, want_poison) = compiled(offsets, 7), compressed_ids(offsets, 7)
        assert torch.equal(ids, want_ids), case
        torch.testing.assert_close(poison, want_poison, equal_nan=True)
    assert sum(counters["graph_break"].values()) == 0
