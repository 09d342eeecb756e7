"""Packed graph-level batches of fixed shapes (cudnn_gnn.apps.static_batcher): every graph once an epoch, fixed
shapes, sinks that carry no loss and reach no real graph, outputs equal to PyG's ``Batch`` of the same graphs, and
the errors."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch, Data

from cudnn_gnn.apps.gps import GPS, packed_loss
from cudnn_gnn.apps.static_batcher import GraphBudget, StaticGraphBatcher, masked_graph_loss
from cudnn_gnn.datasets import load_ogbg

from .conftest import syncs_outside


def ragged_graphs(count: int, seed: int = 0, lo: int = 1, hi: int = 12) -> list[Data]:
    """Graphs of ``lo .. hi`` nodes with random edges (self-loops and multi-edges included), float features and edge
    features, one regression label."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n = int(torch.randint(lo, hi + 1, (), generator=g))
        e = int(torch.randint(0, 3 * n, (), generator=g))
        out.append(Data(x=torch.randn(n, 5, generator=g), edge_index=torch.randint(0, n, (2, e), generator=g),
                        edge_attr=torch.randn(e, 3, generator=g), y=torch.randn(1, 1, generator=g), num_nodes=n))
    return out


@pytest.fixture(scope="module")
def molecules() -> tuple[list[Data], str]:
    ds = load_ogbg("ogbg-molbace")
    return ds.subset("valid")[:48], ds.task_type


def test_an_ogb_dataset_split_packs_as_its_list() -> None:
    """``ds[split["valid"]]`` (an OgbgDataset, as OGB's scripts index one) packs as the list of its graphs."""
    ds = load_ogbg("ogbg-molfreesolv")
    part = ds[ds.get_idx_split()["valid"]]
    a, b = StaticGraphBatcher(part, max_graphs=16), StaticGraphBatcher(list(part), max_graphs=16)
    assert a.budget == b.budget and len(a) == len(part)
    first_a, first_b = next(a.epoch(shuffle=False)), next(b.epoch(shuffle=False))
    assert all(torch.equal(first_a.inputs()[k], v) for k, v in first_b.inputs().items())
    with pytest.raises(TypeError, match="graphs must be a sequence of torch_geometric Data, got int"):
        StaticGraphBatcher(3)  # type: ignore[arg-type]


def test_every_graph_once_an_epoch_and_shapes_fixed(molecules) -> None:
    graphs, _ = molecules
    batcher = StaticGraphBatcher(graphs, max_graphs=8)
    b = batcher.budget
    assert b.max_nodes == max(int(g.num_nodes) for g in graphs)  # sized to the largest graph by default
    seen: list[int] = []
    shapes = set()
    for batch in batcher.epoch(generator=torch.Generator().manual_seed(0)):
        ids = batch.graph_id[batch.graph_valid].tolist()
        assert batch.graph_valid.tolist() == [True] * batch.num_graphs + [False] * (b.max_graphs - batch.num_graphs)
        assert (batch.graph_id[~batch.graph_valid] == -1).all() and batch.y[~batch.graph_valid].isnan().all()
        seen += ids
        shapes.add(tuple((k, tuple(v.shape), v.dtype) for k, v in batch.inputs().items()))
        # the graph is a valid CSC in edge_index's order, and the slots describe the tokens
        g = batch.csc_graph().validate()
        assert g.num_src_nodes == g.num_dst_nodes == b.max_tokens
        assert torch.equal(torch.repeat_interleave(torch.arange(b.num_slots), batch.ptr.diff()), batch.batch)
        sizes = batch.ptr.diff()
        assert int(sizes.max()) <= b.max_nodes  # the attention's max_num_nodes holds for sink graphs too
        real = batch.token_valid
        assert int(real.sum()) == sum(int(graphs[i].num_nodes) for i in ids) <= b.max_tokens - 1
        src, dst = batch.edge_index
        assert torch.equal(real[src], real[dst])  # no edge between a real and a sink token
        assert int(real[dst].sum()) == sum(int(graphs[i].edge_index.shape[1]) for i in ids)
        assert (batch.x[~real] == 0).all()
    assert sorted(seen) == list(range(len(graphs)))
    assert len(shapes) == 1
    assert dict((k, s) for k, s, _ in next(iter(shapes)))["ptr"] == (b.num_slots + 1,)


def test_packed_batch_matches_pygs_batch_for_the_real_graphs() -> None:
    """Our GPS model (reference attention, our GATConv) on a packed batch, in training mode (batch norms over the
    real tokens only) and in eval mode, equals the same model on PyG's ``Batch`` of the batch's graphs, outputs
    and gradients; sink graphs and empty slots add no loss. Graphs with self-loops, multi-edges, no edges."""
    graphs = ragged_graphs(30)
    batcher = StaticGraphBatcher(graphs, GraphBudget(max_graphs=9, max_tokens=70, max_edges=150, max_nodes=12))
    torch.manual_seed(0)
    model = GPS(8, 2, 2, 1, 0.0, "reference", in_channels=5, edge_channels=3)
    loss_fn = packed_loss(model, batcher.budget, "regression")
    batches = list(batcher.epoch(shuffle=False))
    assert len(batches) > 2 and any(b.num_graphs < 9 for b in batches)
    for packed in batches[:2]:
        pyg = Batch.from_data_list([graphs[i] for i in packed.graph_id[: packed.num_graphs].tolist()])
        for train in (True, False):
            model.train(train)
            inputs = packed.inputs()
            got = model.run_packed(batcher.budget, *(inputs[k] for k in ("x", "edge_index", "offsets", "edge_attr",
                                                                          "batch", "ptr")))
            want = model(pyg)
            torch.testing.assert_close(got[: packed.num_graphs], want, atol=2e-5, rtol=1e-4)
        model.train()
        model.zero_grad()
        loss_fn(**packed.inputs()).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        torch.nn.functional.mse_loss(model(pyg), pyg.y.float()).backward()
        for g_packed, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g_packed, p.grad, atol=1e-5, rtol=1e-4)


def test_masked_loss_ignores_invalid_slots_and_missing_labels() -> None:
    pred = torch.tensor([[0.5], [2.0], [-1.0]])
    y = torch.tensor([[1.0], [float("nan")], [0.0]])
    valid = torch.tensor([True, True, False])
    got = masked_graph_loss(pred, y, valid, "binary classification")
    want = torch.nn.functional.binary_cross_entropy_with_logits(pred[:1], y[:1])
    torch.testing.assert_close(got, want)
    assert float(masked_graph_loss(pred, y, torch.zeros(3, dtype=torch.bool), "regression")) == 0.0
    with pytest.raises(ValueError, match="task_type must be one of"):
        masked_graph_loss(pred, y, valid, "multiclass")


def test_padding_edges_stay_in_sink_graphs_when_a_batch_is_nearly_full() -> None:
    """One sink token left: every padding edge is its self-loop, and the CSC stays valid."""
    graphs = [Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.zeros(1), num_nodes=3)] * 2
    batch = StaticGraphBatcher(graphs, GraphBudget(2, 7, 10, 3)).pack([0, 1])
    assert batch.token_valid.tolist() == [True] * 6 + [False]
    assert batch.edge_index[:, 4:].eq(6).all() and batch.ptr.tolist() == [0, 3, 6, 7, 7, 7]
    batch.csc_graph().validate()


def test_a_graph_larger_than_the_budget_is_refused_naming_it() -> None:
    graphs = ragged_graphs(5, lo=3, hi=3) + [Data(x=torch.zeros(9, 5), edge_index=torch.zeros(2, 0, dtype=torch.long),
                                                  edge_attr=torch.zeros(0, 3), y=torch.zeros(1), num_nodes=9)]
    with pytest.raises(ValueError, match=r"max_nodes=4 nodes .* got graphs\[5\] with 9 nodes and 0 edges"):
        StaticGraphBatcher(graphs, GraphBudget(2, 10, 20, 4))
    with pytest.raises(ValueError, match=r"max_nodes must be <= max_tokens - 1 = 9"):
        GraphBudget(2, 10, 20, 10)
    with pytest.raises(ValueError, match="graphs must all have edge_attr or none"):
        StaticGraphBatcher([graphs[0], Data(x=torch.zeros(2, 5), edge_index=torch.zeros(2, 0, dtype=torch.long),
                                            y=torch.zeros(1), num_nodes=2)])
    with pytest.raises(TypeError, match="budget must be a GraphBudget"):
        StaticGraphBatcher(graphs, (2, 10, 20, 4))  # type: ignore[arg-type]
    batcher = StaticGraphBatcher(graphs)  # default: sized to the largest graph
    assert batcher.budget.max_nodes == 9
    with pytest.raises(ValueError, match="ids must be 1 to"):
        batcher.pack([])


@pytest.mark.parametrize("edge", [(0, 3), (3, 0), (-1, 1), (1, -2)])
def test_an_edge_past_its_own_graph_is_refused_naming_the_graph(edge) -> None:
    """An id past a graph's own nodes would join the next graph of a batch (or, past the batch, reach the kernels):
    refused when the batcher is built, with the graph and the edge named."""
    graphs = ragged_graphs(4, lo=3, hi=3)
    graphs[2] = Data(x=graphs[2].x, edge_index=torch.tensor([[0, 1, edge[0]], [1, 2, edge[1]]]),
                     edge_attr=torch.zeros(3, graphs[2].edge_attr.shape[1]), y=graphs[2].y, num_nodes=3)
    with pytest.raises(ValueError, match=rf"^graphs must have edge_index values in \[0, num_nodes\) of their own "
                                         rf"graph, got graphs\[2\] with 3 nodes and an edge \({edge[0]}, {edge[1]}\)"):
        StaticGraphBatcher(graphs)


def test_a_warm_packed_step_syncs_only_in_the_cpu_only_checks() -> None:
    """On a CPU, the only ops of a warm packed GPS step (forward, masked loss, backward) that would sync on CUDA are
    ``GPSConv``'s ptr/batch value check, which runs only where the forward syncs anyway (on a CPU; on CUDA with
    ``max_num_nodes`` it checks shapes only): the graph, the local GAT's self-loop rule, the masked batch norms,
    the pooling and the loss read no device value. (tests/gpu/test_gps_packed_gpu.py checks CUDA itself.)"""
    from cudnn_gnn.apps.capture import host_syncs
    from cudnn_gnn.layers import gps_conv

    batcher = StaticGraphBatcher(ragged_graphs(20), GraphBudget(max_graphs=6, max_tokens=50, max_edges=100,
                                                                max_nodes=12))
    torch.manual_seed(0)
    model = GPS(8, 1, 2, 1, 0.1, "reference", in_channels=5, edge_channels=3)
    loss_fn = packed_loss(model, batcher.budget, "regression")
    first_batch, second = list(batcher.epoch(shuffle=False))[:2]
    loss_fn(**first_batch.inputs()).backward()  # warm: what a first call builds
    found = host_syncs(lambda: loss_fn(**second.inputs()).backward())
    assert syncs_outside(found, gps_conv._check_ptr_matches_batch) == []


def test_the_packed_graph_has_short_rows_and_its_layers_share_one_self_loop_plan(monkeypatch) -> None:
    """A packed batch's graph is in CSC order (no COO permutation) and marked rebuilt every call with short rows (the
    Triton kernels walk its rows whole, no work list); the GAT layers of a step's GPS layers build one self-loop plan
    of it, kept on the graph (the same object for every layer), whose graph keeps the short rows."""
    from cudnn_gnn.layers import _graph_inputs
    from cudnn_gnn.layers._plan_cache import _PLAN_KEY

    built = []
    static_plan = _graph_inputs.static_plan
    monkeypatch.setattr(_graph_inputs, "static_plan", lambda *a, **k: built.append(static_plan(*a, **k)) or built[-1])
    batcher = StaticGraphBatcher(ragged_graphs(20), GraphBudget(max_graphs=6, max_tokens=50, max_edges=100,
                                                                max_nodes=12))
    batch = next(batcher.epoch(shuffle=False))
    graph = batch.csc_graph()
    assert graph.rebuilt_every_call and graph.short_rows and graph.map_csc_to_coo is None
    torch.manual_seed(0)
    model = GPS(8, 3, 2, 1, 0.1, "reference", in_channels=5, edge_channels=3)
    model.run(batch.x, graph, batch.edge_attr, batch.batch, batch.ptr, batcher.budget.max_nodes,
              batcher.budget.num_slots, node_mask=batch.token_valid).sum().backward()
    assert len(built) == 1  # three layers, one plan
    plan = graph.derived_if_built((_PLAN_KEY, batcher.budget.max_tokens))
    assert plan is built[0] and plan.graph.short_rows and plan.pad_dst
