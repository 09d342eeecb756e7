"""Layer-wise full-neighbourhood inference in chunks (cudnn_gnn.apps.inference): the receptive fields, the chunked
blocks and the result, equal to the model run on the whole graph, for our GATConv and PyG's, with hubs larger than
a chunk, targets in any order with repeats, rows kept in 16 bits, and argument errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv as PygGATConv

from cudnn_gnn import GATConv
from cudnn_gnn.apps.inference import layerwise_inference, receptive_fields


def _graph(n: int = 300, e: int = 3000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A skewed CSC (hubs of in-degree > 100, nodes without in-edges, self-loops, multi-edges) and its COO."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.multinomial(torch.arange(1, n + 1, dtype=torch.float64).pow(-1.2), e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    src[:20] = dst[:20]  # self-loops
    order = (dst * n + src).argsort()
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return colptr, src[order], torch.stack([src[order], dst[order]])


class _Model(torch.nn.Module):
    def __init__(self, conv: type, c_in: int, hidden: int, out: int, heads: int, layers: int = 3, **kw) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(
            conv(c_in if i == 0 else hidden * heads, out if i == layers - 1 else hidden,
                 heads=1 if i == layers - 1 else heads, residual=True, **kw) for i in range(layers))

    def layer(self, i: int, x, edge_index, size=None):
        h = self.convs[i](x, edge_index, size=size)
        return F.elu(h) if i < len(self.convs) - 1 else h

    def forward(self, x, edge_index):
        for i in range(len(self.convs)):
            x = self.layer(i, x, edge_index)
        return x


@pytest.mark.parametrize("conv, kw", [(GATConv, {"backend": "reference"}), (PygGATConv, {})], ids=["ours", "pyg"])
@pytest.mark.parametrize("max_edges", [64, 1 << 20])
def test_equals_the_whole_graph_forward(conv, kw, max_edges) -> None:
    colptr, row, edge_index = _graph()
    torch.manual_seed(0)
    model = _Model(conv, 12, 8, 5, heads=2, **kw).eval()
    x = torch.randn(300, 12)
    with torch.no_grad():
        want = model(x, edge_index)
    targets = torch.tensor([7, 0, 299, 7, 150, 3])  # any order, a repeat
    stats: dict = {}
    calls: list[tuple[int, int, int]] = []
    got = layerwise_inference(lambda i, xs, ei, size: model.layer(i, xs, ei, size=size), 3, x, colptr, row,
                              targets=targets, max_edges=max_edges, stats=stats,
                              progress=lambda *a: calls.append(a))
    torch.testing.assert_close(got, want[targets], atol=1e-5, rtol=1e-5)
    assert stats["fields"][-1] == 5 and stats["fields"][0] >= stats["fields"][1] >= 5
    assert len(stats["chunks"]) == 3 and calls[-1] == (2, stats["chunks"][2], stats["chunks"][2])
    if max_edges == 64:  # hubs have more in-edges than a chunk: alone in theirs, still exact
        assert int((colptr.diff()).max()) > 64 and stats["chunks"][0] > 10
    every = layerwise_inference(lambda i, xs, ei, size: model.layer(i, xs, ei, size=size), 3, x, colptr, row,
                                max_edges=max_edges)
    torch.testing.assert_close(every, want, atol=1e-5, rtol=1e-5)


def test_receptive_fields_are_the_in_neighbourhoods() -> None:
    colptr, row, edge_index = _graph()
    targets = torch.tensor([5, 1, 5])
    fields = receptive_fields(colptr, row, targets, 3, max_edges=50)
    assert torch.equal(fields[2], torch.tensor([1, 5]))
    for later, earlier in zip(fields[1:], fields[:-1]):
        into = torch.isin(edge_index[1], later)
        want = torch.cat([later, edge_index[0, into]]).unique()
        assert torch.equal(earlier, want)


def test_rows_kept_in_16_bits_on_another_device_stay_close() -> None:
    colptr, row, edge_index = _graph()
    torch.manual_seed(1)
    model = _Model(GATConv, 12, 8, 5, heads=2, backend="reference").eval()
    x = torch.randn(300, 12)
    with torch.no_grad():
        want = model(x, edge_index)
    stats: dict = {}
    got = layerwise_inference(lambda i, xs, ei, size: model.layer(i, xs, ei, size=size), 3, x, colptr.int(),
                              row.int(), max_edges=200, store_device="cpu", store_dtype=torch.bfloat16, stats=stats)
    assert got.dtype == torch.float32  # rows kept in bf16 between layers, computed in the layer's dtype
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)
    assert stats["store_bytes"] == 300 * 16 * 2 * 2  # two layers' rows of 2 x 8 in bf16 at once


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"num_layers": 0}, ValueError, "num_layers must be >= 1, got 0"),
    ({"max_edges": 0}, ValueError, "max_edges must be >= 1, got 0"),
    ({"x": torch.randn(299, 12)}, ValueError, r"x must have shape \(num_nodes=300, num_features\)"),
    ({"targets": torch.tensor([0, 300])}, ValueError, r"targets must be node ids in \[0, num_nodes=300\)"),
    ({"targets": torch.tensor([], dtype=torch.long)}, ValueError, "num_targets >= 1"),
    ({"targets": torch.tensor([0.5])}, TypeError, "targets must"),
    ({"colptr": torch.zeros(3, 2, dtype=torch.long)}, ValueError, "colptr and row must have shapes"),
    ({"store_dtype": "bf16"}, TypeError, "store_dtype must be a torch.dtype or None, got str"),
    ({"store_dtype": torch.int64}, TypeError, "store_dtype must be a floating-point dtype .*, got torch.int64"),
    ({"layer": "conv"}, TypeError, "layer must be callable"),
])
def test_argument_errors(kwargs, exc, match) -> None:
    colptr, row, _ = _graph()
    args = {"layer": lambda *a: None, "num_layers": 3, "x": torch.randn(300, 12), "colptr": colptr, "row": row}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        layerwise_inference(args.pop("layer"), args.pop("num_layers"), args.pop("x"), args.pop("colptr"),
                            args.pop("row"), **args)
    if "targets" in kwargs or "colptr" in kwargs:  # the receptive fields check alike
        with pytest.raises(exc, match=match):
            receptive_fields(kwargs.get("colptr", colptr), row, kwargs.get("targets", torch.tensor([0])), 3)


@pytest.mark.parametrize("broken", ["row_past", "row_negative", "colptr_decreasing", "colptr_short"])
def test_a_csc_that_would_index_out_of_bounds_is_refused(broken: str) -> None:
    """The CSC is read once on the host before any work: a source id past the nodes or a colptr that decreases or
    does not end at the edge count would index out of bounds (on CUDA, a device-side assert)."""
    colptr, row, _ = _graph()
    colptr, row = colptr.clone(), row.clone()
    if broken == "row_past":
        row[3] = 300
    elif broken == "row_negative":
        row[0] = -1
    elif broken == "colptr_decreasing":
        colptr[5] = colptr[7]
    else:
        colptr[-1] -= 1
    match = "row must hold node ids in" if broken.startswith("row") else "colptr must start at 0, never decrease"
    with pytest.raises(ValueError, match=match):
        layerwise_inference(lambda *a: None, 2, torch.randn(300, 12), colptr, row)
    with pytest.raises(ValueError, match=match):
        receptive_fields(colptr, row, torch.tensor([0]), 2)
