"""``cudnn_gnn._bias`` on the GPU at size: the column-sum strategies against ``x.sum(0)``, bitwise repeats, and
PyG's ``GATConv`` / ``GATv2Conv`` against ours on a graph tall enough that the biases' gradients (the layer's, and
``GATv2Conv``'s ``lin_l`` / ``lin_r``) go through :func:`cudnn_gnn._bias.column_sum`."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from cudnn_gnn import GATConv, GATv2Conv, _bias  # noqa: E402

DEV = torch.device("cuda")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


@pytest.mark.parametrize("rows", [169_343, 2_449_029])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_column_sum_at_size(rows, dtype):
    """arxiv's and products' node counts, 256 columns: within float32 (bfloat16) rounding of the float64 sums,
    and bitwise equal on a second call."""
    x = torch.randn(rows, 256, device=DEV, generator=torch.Generator(device=DEV).manual_seed(1)).to(dtype)
    got = _bias.column_sum(x)
    assert got.dtype == dtype
    assert _rel(got, x.double().sum(0)) < (1e-6 if dtype == torch.float32 else 1e-2)
    assert torch.equal(got, _bias.column_sum(x))


@pytest.mark.parametrize("layer", ["gat", "gatv2"])
def test_layers_on_a_tall_graph_match_pyg(layer):
    """40,000 nodes (past ``COLUMN_SUM_MIN_ROWS``), 400,000 edges, 8 heads x 32, float32, on the Triton backend:
    output and every parameter's gradient (the biases' by column sums) against PyG's layer with the same
    ``state_dict``."""
    n, e = 40_000, 400_000
    assert n >= _bias.COLUMN_SUM_MIN_ROWS
    gen = torch.Generator(device=DEV).manual_seed(2)
    ei = torch.randint(0, n, (2, e), device=DEV, generator=gen)
    x = torch.randn(n, 64, device=DEV, generator=gen)
    pyg_cls, ours_cls = (pyg_nn.GATConv, GATConv) if layer == "gat" else (pyg_nn.GATv2Conv, GATv2Conv)
    torch.manual_seed(0)
    pyg = pyg_cls(64, 32, heads=8).to(DEV)
    ours = ours_cls(64, 32, heads=8, backend="triton").to(DEV)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    g = torch.randn(n, 256, device=DEV, generator=gen)
    outs = []
    for model in (pyg, ours):
        out = model(x, ei)
        grads = torch.autograd.grad((out * g).sum(), list(model.parameters()))
        outs.append((out, grads))
    assert _rel(outs[1][0], outs[0][0]) < 1e-5
    names = [name for name, _ in pyg.named_parameters()]
    for name, a, b in zip(names, outs[1][1], outs[0][1], strict=True):
        assert _rel(a, b) < 1e-4, name
