"""Layer-wise full-neighbourhood inference on CUDA (issue #16): our GATConv on Triton, the graph and features on the
GPU or on the host, rows kept on the GPU or the host, equal to the model run on the whole graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from cudnn_gnn import GATConv  # noqa: E402
from cudnn_gnn.apps.inference import layerwise_inference  # noqa: E402

DEV = torch.device("cuda")


@pytest.mark.parametrize("where", ["gpu", "host"])
def test_chunked_inference_equals_the_whole_graph_on_cuda(where: str) -> None:
    n, e = 20_000, 300_000
    g = torch.Generator().manual_seed(0)
    dst = torch.multinomial(torch.arange(1, n + 1, dtype=torch.float64).pow(-1.1), e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    order = (dst * n + src).argsort()
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    row, edge_index = src[order], torch.stack([src[order], dst[order]]).to(DEV)
    torch.manual_seed(0)
    convs = torch.nn.ModuleList([GATConv(32, 16, heads=4, residual=True, backend="triton"),
                                 GATConv(64, 16, heads=4, residual=True, backend="triton"),
                                 GATConv(64, 7, heads=1, residual=True, backend="triton")]).to(DEV).eval()

    def layer(i, xs, ei, size):
        h = convs[i](xs, ei, size=size)
        return F.elu(h) if i < 2 else h

    x = torch.randn(n, 32, generator=g)
    with torch.no_grad():
        h = x.to(DEV)
        for i in range(3):
            h = layer(i, h, edge_index, None)
    targets = torch.randperm(n, generator=g)[:3000]
    on = DEV if where == "gpu" else torch.device("cpu")
    stats: dict = {}
    got = layerwise_inference(layer, 3, x.to(on), colptr.to(on), row.to(on), targets=targets, device=DEV,
                              max_edges=50_000, store_device=on, stats=stats)
    assert got.device.type == "cuda" and stats["chunks"][0] > 5
    torch.testing.assert_close(got, h[targets.to(DEV)], atol=2e-4, rtol=2e-4)
