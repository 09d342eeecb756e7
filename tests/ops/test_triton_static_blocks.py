"""The Triton backend on static-shape graphs, on CPU under Triton's interpreter. A sampled block
(:mod:`cudnn_gnn.apps.static_sampler`: self-loops in the block, sink rows after the real ones, short rows) against
the reference backend on the compacted subgraph (no sink rows), outputs and every gradient, one tiny batch. A GPS
training step on a packed batch of small graphs (:mod:`cudnn_gnn.apps.static_batcher`): its layers share one
self-loop plan of the batch's graph, built without a sort, with short rows (no work lists), so the whole step sorts
once (the Triton backward's reverse CSC of that plan's graph), and its loss and every gradient are bitwise those of
the plain path (a new graph, in sort order and without short rows, for each layer), on either backend. The
interpreter is set as in ``test_triton_backend.py`` (before the kernels are first decorated); with CUDA present this
file skips unless ``TRITON_INTERPRET=1`` was set from the start."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")

from ..conftest import interpret_triton_on_cpu  # noqa: E402

interpret_triton_on_cpu("tests/gpu/test_static_sampler_gpu.py")

from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import global_mean_pool  # noqa: E402

from cudnn_gnn import CscGraph  # noqa: E402
from cudnn_gnn.apps.gps import GPS, packed_loss  # noqa: E402
from cudnn_gnn.apps.static_batcher import GraphBudget, StaticGraphBatch, StaticGraphBatcher, masked_graph_loss  # noqa: E402
from cudnn_gnn.apps.static_sampler import StaticNeighborSampler  # noqa: E402
from cudnn_gnn.layers import GATConv  # noqa: E402

LAYERS = 3


def test_triton_on_a_static_block_equals_reference_on_the_compact_subgraph() -> None:
    g = torch.Generator().manual_seed(0)
    src, dst = torch.randint(0, 30, (2, 120), generator=g)
    pairs = torch.unique(dst * 30 + src)
    src, dst = pairs % 30, pairs // 30
    colptr = torch.zeros(31, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=30).cumsum(0)
    sampler = StaticNeighborSampler(colptr, src, fanout=[3, 2], batch_size=3, generator=g)
    batch = sampler.sample(torch.tensor([0, 7, 29]))
    torch.manual_seed(0)
    ours = GATConv(5, 4, heads=2, add_self_loops=False, residual=True, backend="triton")
    ref = GATConv(5, 4, heads=2, add_self_loops=False, residual=True, backend="reference")
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(sampler.num_slots, 5, generator=g)
    for blk in batch.blocks:
        xs = x[: blk.num_src].clone().requires_grad_()
        out = ours((xs, xs[: blk.num_rows]), blk.graph)[: blk.num_dst]
        grad = torch.randn_like(out)
        (out * grad).sum().backward()
        xr = x[: blk.num_src].clone().requires_grad_()
        compact = blk.edge_index[:, : int(blk.graph.offsets[blk.num_dst])]
        want = ref((xr, xr[: blk.num_dst]), compact)
        (want * grad).sum().backward()
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(xs.grad, xr.grad, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
        ours.zero_grad()
        ref.zero_grad()


def _batches() -> tuple[list[StaticGraphBatch], GraphBudget]:
    """Packed batches of small graphs (self-loops and multi-edges included), float features."""
    g = torch.Generator().manual_seed(0)
    graphs = []
    for _ in range(12):
        n = int(torch.randint(2, 7, (), generator=g))
        e = int(torch.randint(1, 2 * n, (), generator=g))
        graphs.append(Data(x=torch.randn(n, 5, generator=g), edge_index=torch.randint(0, n, (2, e), generator=g),
                           edge_attr=torch.randn(e, 3, generator=g), y=torch.randn(1, 1, generator=g), num_nodes=n))
    batcher = StaticGraphBatcher(graphs, GraphBudget(max_graphs=4, max_tokens=28, max_edges=40, max_nodes=6))
    return list(batcher.epoch(shuffle=False)), batcher.budget


def _model(backend: str) -> GPS:
    torch.manual_seed(0)
    model = GPS(8, LAYERS, 2, 1, 0.1, "reference", in_channels=5, edge_channels=3)
    for layer in model.layers:
        layer.conv.backend = backend
    return model


def _plain_loss(model: GPS, budget: GraphBudget, batch: StaticGraphBatch) -> torch.Tensor:
    """The step's loss with a new graph for each layer, through the sorted self-loop plan (its COO order given as a
    permutation) and without short rows: what every layer built before the layers shared one plan."""
    ei = batch.edge_index
    x, edge_attr = model.atom(batch.x), model.bond(batch.edge_attr)
    for layer in model.layers:
        graph = CscGraph.from_csc(batch.offsets, ei[0].to(batch.offsets.dtype), budget.max_tokens,
                                  torch.arange(ei.shape[1], dtype=batch.offsets.dtype), edge_index=ei,
                                  rebuilt_every_call=True)
        x = layer(x, graph, batch.batch, ptr=batch.ptr, max_num_nodes=budget.max_nodes, node_mask=batch.token_valid,
                  edge_attr=edge_attr)
    pred = model.head(global_mean_pool(x, batch.batch, size=budget.num_slots))[: budget.max_graphs]
    return masked_graph_loss(pred, batch.y, batch.graph_valid, "regression")


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_a_packed_step_on_one_shared_plan_is_bitwise_the_plain_step(backend) -> None:
    batches, budget = _batches()
    shared, plain = _model(backend), _model(backend)
    loss_fn = packed_loss(shared, budget, "regression")
    for batch in batches[:2]:  # the second step after batch-norm running statistics moved
        for model in (shared, plain):
            model.zero_grad()
        torch.manual_seed(1)
        got = loss_fn(**batch.inputs())
        got.backward()
        torch.manual_seed(1)
        want = _plain_loss(plain, budget, batch)
        want.backward()
        assert torch.equal(got, want)
        for (name, a), b in zip(shared.named_parameters(), plain.parameters()):
            assert torch.equal(a.grad, b.grad), name
        for a, b in zip(shared.buffers(), plain.buffers()):
            assert torch.equal(a, b)


def test_a_warm_packed_step_sorts_once(aten_ops) -> None:
    """One warm training step (forward, backward, Adam) of a 3-layer GPS model on the Triton backend: one sort, one
    binary search and one cumulative sum in the whole step (the backward's reverse CSC of the one shared plan's graph,
    and the sort-free plan's prefix count), where each layer used to build its own plan (a sort and a binary search)
    and work lists (sorts, binary searches and cumulative sums), forward and backward."""
    batches, budget = _batches()
    model = _model("triton")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = packed_loss(model, budget, "regression")

    def step(batch: StaticGraphBatch) -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(**batch.inputs()).backward()
        opt.step()

    step(batches[0])
    counts = aten_ops(lambda: step(batches[1]))
    assert (counts.get("sort", 0), counts.get("searchsorted", 0), counts.get("cumsum", 0)) == (1, 1, 1), counts
    assert counts.get("argsort", 0) == 0


def test_the_plain_step_is_what_the_op_count_improves_on(aten_ops) -> None:
    """The plain path of the bitwise test sorts once per layer for its plan and once more in its backward: the
    count above is not met by construction."""
    batches, budget = _batches()
    model = _model("triton")
    counts = aten_ops(lambda: _plain_loss(model, budget, batches[0]).backward())
    assert counts.get("sort", 0) >= 2 * LAYERS
