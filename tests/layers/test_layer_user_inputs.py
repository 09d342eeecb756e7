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
