"""gat(..., max_degree=B): the degree-bounded rewrite gives the plain answer (outputs, attention, gradients)."""

from __future__ import annotations

import pytest
import torch

from cudnn_gnn import CscGraph, gat, gatv2, make_dropout_mask
from cudnn_gnn.backends.reference import ACTIVATIONS
from cudnn_gnn.ops._hub_split import hub_split


def _hubby(n_src: int, n_dst: int, e: int, seed: int) -> torch.Tensor:
    """Shuffled COO edges with a hub destination (0), a hub source (1) and destinations without edges."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_src, (e,), generator=g)
    dst = torch.randint(3, n_dst, (e,), generator=g) if n_dst > 3 else torch.zeros(e, dtype=torch.long)
    dst[: e // 4] = 0
    src[e // 4: e // 2] = 1
    ei = torch.stack([src, dst])
    return ei[:, torch.randperm(e, generator=g)]


def _run(graph, x, w, edge, mask, op=gat, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (x if isinstance(x, tuple) else (x,))]
    wl = w.detach().clone().requires_grad_()
    el = None if edge is None else edge.detach().clone().requires_grad_()
    xin = tuple(leaves) if isinstance(x, tuple) else leaves[0]
    out, att = op(graph, xin, wl, edge_attr=el, dropout_mask=mask, return_attention=True, backend="reference", **kw)
    g = torch.Generator().manual_seed(5)
    (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum().backward(retain_graph=True)
    (att * torch.randn(att.shape, generator=g, dtype=att.dtype)).sum().backward()
    grads = [t.grad for t in leaves] + [wl.grad] + ([] if el is None else [el.grad])
    return out, att, grads


def _case(op: str, bipartite: bool, with_edge: bool, graph_seed: int, seed: int):
    """A hub graph (2 heads x 3) with float64 features, attention vector and optional edge features."""
    ns, nd, e, heads, c = (40, 25, 300, 2, 3) if bipartite else (30, 30, 300, 2, 3)
    graph = CscGraph.from_edge_index(_hubby(ns, nd, e, seed=graph_seed), size=(ns, nd))
    g = torch.Generator().manual_seed(seed)
    d = heads * c
    x = (torch.randn(ns, d, generator=g, dtype=torch.float64), torch.randn(nd, d, generator=g, dtype=torch.float64)) \
        if bipartite else torch.randn(ns, d, generator=g, dtype=torch.float64)
    de = (4 if op == "gat" else d) if with_edge else 0
    w = torch.randn(2 * d + de if op == "gat" else d, generator=g, dtype=torch.float64)
    edge = torch.randn(e, de, generator=g, dtype=torch.float64) if with_edge else None
    return graph, x, w, edge, heads, (gat if op == "gat" else gatv2)


@pytest.mark.parametrize("bipartite", [False, True], ids=["homo", "bip"])
@pytest.mark.parametrize("with_edge", [False, True], ids=["noedge", "edge"])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("max_degree", [1, 3, 16])
@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_split_matches_plain(bipartite, with_edge, concat, max_degree, op):
    graph, x, w, edge, heads, fn = _case(op, bipartite, with_edge, graph_seed=max_degree, seed=1)
    plain = _run(graph, x, w, edge, None, fn, heads=heads, concat=concat)
    split = _run(graph, x, w, edge, None, fn, heads=heads, concat=concat, max_degree=max_degree)
    assert hub_split(graph, max_degree) is not None
    for a, b in zip([split[0], split[1], *split[2]], [plain[0], plain[1], *plain[2]]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)
    assert torch.equal(split[0][1:3], torch.zeros_like(split[0][1:3])) or bipartite  # no in-edges: zeros


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_split_every_activation_and_a_dropout_mask(activation):
    ei = _hubby(30, 30, 200, seed=3)
    graph = CscGraph.from_edge_index(ei, num_nodes=30)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(30, 8, generator=g, dtype=torch.float64)
    w = torch.randn(16, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    mask = make_dropout_mask(200, 2, 0.3).double()
    alpha = 0.3 if activation in ("leaky_relu", "scalar") else None
    kw = dict(heads=2, activation=activation, activation_alpha=alpha)
    plain = _run(graph, x, w, None, mask, **kw)
    split = _run(graph, x, w, None, mask, max_degree=4, **kw)
    for a, b in zip([split[0], split[1], *split[2]], [plain[0], plain[1], *plain[2]]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


def test_split_gradcheck_and_float32():
    ei = _hubby(12, 12, 60, seed=4)
    graph = CscGraph.from_edge_index(ei, num_nodes=12)
    x = torch.randn(12, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: gat(graph, x, w, heads=2, max_degree=2, backend="reference"), (x, w))
    out32 = gat(graph, x.float(), w.float(), heads=2, max_degree=2, backend="reference")
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), gat(graph, x, w, heads=2, backend="reference"), atol=1e-5, rtol=1e-5)


def test_bounded_graph_is_not_rewritten_and_rewrite_is_cached():
    graph = CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    assert hub_split(graph, 1) is None
    hub = CscGraph.from_edge_index(_hubby(10, 10, 50, seed=0), num_nodes=10)
    s = hub_split(hub, 2)
    assert s is hub_split(hub, 2)
    deg = s.graph.offsets[1:] - s.graph.offsets[:-1]
    assert int(deg.max()) <= 2 and int(torch.bincount(s.graph.indices.long()).max()) <= 2
    assert s.graph.num_edges == hub.num_edges


def test_split_errors():
    graph = CscGraph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(ValueError, match="max_degree must be >= 1"):
        gat(graph, torch.randn(2, 4), torch.randn(8), heads=2, max_degree=0)
    with pytest.raises(TypeError, match="max_degree must be an int"):
        gat(graph, torch.randn(2, 4), torch.randn(8), heads=2, max_degree=2.0)


def test_max_degree_argument_errors():
    graph = CscGraph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(ValueError, match="max_degree must be 'auto', None or a positive int, got 'big'"):
        gat(graph, torch.randn(2, 4), torch.randn(8), heads=2, max_degree="big")


@pytest.mark.parametrize("bipartite", [False, True], ids=["homo", "bip"])
@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_deterministic_split_sums_in_sorted_segments_and_matches_plain(monkeypatch, bipartite, op):
    """deterministic=True with an explicit max_degree: every sum over a varying number of terms in the split and
    merge (gathers' backward included) runs as a sorted segment sum, and outputs, attention and gradients equal
    the plain call's."""
    from cudnn_gnn.ops import _hub_split

    calls = []
    sorted_sum = _hub_split._sorted_sum
    monkeypatch.setattr(_hub_split, "_sorted_sum", lambda n, seg, v: (calls.append(v.shape), sorted_sum(n, seg, v))[1])
    graph, x, w, edge, heads, fn = _case(op, bipartite, True, graph_seed=7, seed=3)
    plain = _run(graph, x, w, edge, None, fn, heads=heads)
    split = _run(graph, x, w, edge, None, fn, heads=heads, max_degree=8, deterministic=True)
    for a, b in zip([split[0], split[1], *split[2]], [plain[0], plain[1], *plain[2]]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)
    assert len(calls) >= 8  # forward sums and the gathers' backward sums
    nondet = []
    monkeypatch.setattr(_hub_split, "_sorted_sum", lambda n, seg, v: (nondet.append(1), sorted_sum(n, seg, v))[1])
    _run(graph, x, w, edge, None, fn, heads=heads, max_degree=8)
    assert not nondet  # the default merge keeps index_add


def test_sorted_gather_backward_is_the_index_add():
    """The deterministic gather's backward and the sorted scatter sum equal index_add (float64, gradcheck)."""
    from cudnn_gnn.ops import _hub_split

    g = torch.Generator().manual_seed(0)
    split = hub_split(_hub_graph(40), 4)
    src = torch.randn(12, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 12, (50,), generator=g)
    index[:20] = 5
    y = _hub_split.gather(split, "test", src, index, deterministic=True)
    assert torch.equal(y, src.detach().index_select(0, index))
    assert torch.autograd.gradcheck(lambda t: _hub_split.gather(split, "test", t, index, True), (src,))
    v = torch.randn(50, 4, generator=g, dtype=torch.float64)
    want = torch.zeros(12, 4, dtype=torch.float64).index_add(0, index, v)
    torch.testing.assert_close(_hub_split.scatter_sum(split, "test", v, index, 12, True), want)


def _hub_graph(hub_degree: int) -> CscGraph:
    n = hub_degree + 1
    src = torch.arange(1, n)
    return CscGraph.from_edge_index(torch.stack([src, torch.zeros_like(src)]), num_nodes=n)


def test_max_degrees_are_the_largest_in_and_out_degree_and_cached():
    ei = torch.tensor([[0, 0, 0, 1, 2, 2], [1, 2, 3, 3, 3, 3]])
    graph = CscGraph.from_edge_index(ei, num_nodes=4)
    assert graph.max_degrees() == (4, 3)
    assert graph.derived_if_built("max_degrees") == (4, 3)
    assert CscGraph.from_edge_index(torch.empty(2, 0, dtype=torch.long), num_nodes=3).max_degrees() == (0, 0)


def test_auto_policy_splits_only_hub_graphs_and_only_for_backends_that_split():
    from cudnn_gnn.backends import gat_backend
    from cudnn_gnn.ops.plan import AUTO_SPLIT_DEGREE, AUTO_SPLIT_TRIGGER, auto_max_degree

    hub = _hub_graph(AUTO_SPLIT_TRIGGER + 1)
    flat = _hub_graph(AUTO_SPLIT_TRIGGER)
    assert auto_max_degree(hub) == AUTO_SPLIT_DEGREE
    assert auto_max_degree(flat) is None
    assert gat_backend("cudnn").splits_hubs and not gat_backend("reference").splits_hubs
    hub = hub.as_rebuilt_every_call()  # what the layers' per-call static plans carry: never sync, never split
    assert auto_max_degree(hub) is None


def test_auto_policy_leaves_dense_graphs_without_skew_unsplit():
    """Degrees above the trigger but close to the mean (the ogbn-proteins shape): the merge would cost more than
    the kernels' hub slowdown, so no split; one extra-large destination on the same graph tips it."""
    from cudnn_gnn.ops.plan import AUTO_SPLIT_DEGREE, AUTO_SPLIT_SKEW, AUTO_SPLIT_TRIGGER, auto_max_degree

    n_src, n_dst, per_dst = 3000, 40, AUTO_SPLIT_TRIGGER + 100
    src = torch.randint(0, n_src, (n_dst * per_dst,), generator=torch.Generator().manual_seed(0))
    dst = torch.arange(n_dst).repeat_interleave(per_dst)
    dense = CscGraph.from_edge_index(torch.stack([src, dst]), size=(n_src, n_dst))
    assert auto_max_degree(dense) is None
    # one destination with 4x the trigger among 2,000 more with 4 edges each: 4,400 / ~38 mean, > 32x
    few = torch.arange(2000).repeat_interleave(4) + n_dst + 1
    big = 4 * (AUTO_SPLIT_TRIGGER + 100)
    src2 = torch.cat([src, torch.arange(big) % n_src, few % n_src])
    dst2 = torch.cat([dst, torch.full((big,), n_dst), few])
    skewed = CscGraph.from_edge_index(torch.stack([src2, dst2]), size=(n_src, n_dst + 2001))
    d_in = skewed.max_degrees()[0]
    assert d_in * skewed.num_dst_nodes > AUTO_SPLIT_SKEW * skewed.num_edges
    assert auto_max_degree(skewed) == AUTO_SPLIT_DEGREE


def test_auto_on_the_reference_backend_leaves_the_graph_unsplit():
    hub = _hub_graph(1100)
    x = torch.randn(1101, 8)
    gat(hub, x, torch.randn(16), heads=2)
    assert hub.derived_if_built(("hub_split", 256)) is None
    assert hub.derived_if_built("max_degrees") is None  # the policy did not even sync for the degrees


def test_layers_static_plans_are_marked_for_no_split():
    from cudnn_gnn.layers._graph_plan import static_plan

    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    plan = static_plan(ei, 3, 3, None, "coo", None)
    assert plan.graph.max_degrees() is None


@pytest.mark.parametrize("hub", ["source_only", "destination_only"])
def test_split_with_hubs_on_one_side_only(hub):
    """Only a source hub: rows are unsplit (no merge work at all); only a destination hub: sources unsplit."""
    g = torch.Generator().manual_seed(9)
    n, e = 40, 400
    src, dst = torch.randint(0, n, (e,), generator=g), torch.randint(0, n, (e,), generator=g)
    if hub == "source_only":
        src[:100] = 3
        dst[:100] = torch.arange(100) % n
    else:
        dst[:100] = 5
        src[:100] = torch.arange(100) % n
    graph = CscGraph.from_edge_index(torch.stack([src, dst]), num_nodes=n)
    b = 30
    s = hub_split(graph, b)
    in_deg = torch.bincount(dst, minlength=n)
    assert s.hub_edge_src.numel() == int(in_deg[in_deg > b].sum())
    assert (s.hub_row.numel() == 0) == (hub == "source_only")
    assert (s.src_of_vsrc.numel() == n) == (hub == "destination_only")
    x = torch.randn(n, 6, generator=g, dtype=torch.float64)
    w = torch.randn(12 + 2, generator=g, dtype=torch.float64)
    edge = torch.randn(e, 2, generator=g, dtype=torch.float64)
    plain = _run(graph, x, w, edge, None, heads=2)
    split = _run(graph, x, w, edge, None, heads=2, max_degree=b)
    for a, b_ in zip([split[0], split[1], *split[2]], [plain[0], plain[1], *plain[2]]):
        torch.testing.assert_close(a, b_, atol=1e-10, rtol=1e-9)


def test_gatv2_split_in_checkpointed_blocks_matches_plain_and_gradchecks(monkeypatch):
    """GATv2's hub logits go in blocks of HUB_CHUNK_ELEMS [edge, H, C] elements, recomputed in backward: forced
    to many small blocks here, the result and every gradient still equal the plain call; gradcheck passes."""
    from cudnn_gnn.ops import _hub_split

    monkeypatch.setattr(_hub_split, "HUB_CHUNK_ELEMS", 7 * 4)  # 7 edges of width 4 per block
    ei = _hubby(12, 12, 60, seed=6)
    graph = CscGraph.from_edge_index(ei, num_nodes=12)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(12, 4, generator=g, dtype=torch.float64)
    w = torch.randn(4, generator=g, dtype=torch.float64)
    edge = torch.randn(60, 4, generator=g, dtype=torch.float64)
    plain = _run(graph, x, w, edge, None, gatv2, heads=2)
    split = _run(graph, x, w, edge, None, gatv2, heads=2, max_degree=3)
    for a, b in zip([split[0], split[1], *split[2]], [plain[0], plain[1], *plain[2]]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)
    xs = x.clone().requires_grad_()
    ws = w.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w: gatv2(graph, x, w, heads=2, edge_attr=edge, max_degree=3, backend="reference"), (xs, ws))


@pytest.mark.parametrize("op", ["gat", "gatv2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_split_in_low_precision_keeps_the_dtype_and_the_answer(op, dtype):
    """Rows of non-hub destinations pass through in the input dtype, hub rows are merged in float32: outputs keep
    the input dtype and stay within that dtype's rounding of the float64 plain answer."""
    graph, x, w, edge, heads, fn = _case(op, False, True, graph_seed=3, seed=1)
    plain = _run(graph, x, w, edge, None, fn, heads=heads)
    out, att = fn(graph, x.to(dtype), w.to(dtype), heads=heads, edge_attr=edge.to(dtype), return_attention=True,
                  backend="reference", max_degree=4)
    assert out.dtype == dtype and att.dtype == torch.float32
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.double(), plain[0].detach(), atol=tol, rtol=tol)
    torch.testing.assert_close(att.double(), plain[1].detach(), atol=tol, rtol=tol)
