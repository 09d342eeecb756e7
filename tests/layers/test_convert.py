"""convert() / to_pyg(): whole PyG models swapped to cudnn_gnn layers and back, same outputs and gradients."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import nn

import cudnn_gnn
from cudnn_gnn.layers import GATConv, GATv2Conv, convert, to_pyg


def _graph() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 10, (2, 40), generator=g)
    return torch.randn(10, 8, generator=g), ei, torch.randn(40, 3, generator=g)


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([pyg_nn.GATConv(8, 4, heads=3, edge_dim=3, residual=True),
                                    pyg_nn.GATv2Conv(12, 4, heads=2, edge_dim=3, share_weights=True)])
        self.head = nn.Sequential(nn.ReLU(), pyg_nn.GATConv(8, 5, heads=2, concat=False, add_self_loops=False))
        self.shared = self.convs[0]

    def forward(self, x: torch.Tensor, ei: torch.Tensor, ea: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = torch.relu(conv(x, ei, ea))
        return self.head[1](self.head[0](x), ei)


def _outputs_and_grads(model: nn.Module, *args: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    out = model(*args)
    out.square().sum().backward()
    return out, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("v2", [False, True])
def test_pyg_gat_model_converts_with_same_outputs(v2: bool) -> None:
    x, ei, _ = _graph()
    torch.manual_seed(0)
    model = pyg_nn.GAT(8, 16, num_layers=3, out_channels=4, v2=v2, heads=2).eval()
    ours = convert(model, backend="reference")
    kind = GATv2Conv if v2 else GATConv
    assert all(type(c) is kind for c in ours.convs) and all(type(c) is not kind for c in model.convs)
    o1, g1 = _outputs_and_grads(model, x, ei)
    o2, g2 = _outputs_and_grads(ours, x, ei)
    torch.testing.assert_close(o2, o1, rtol=1e-5, atol=1e-6)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    back = to_pyg(ours)
    assert all(type(c) is not kind for c in back.convs)
    torch.testing.assert_close(back(x, ei), o1, rtol=1e-5, atol=1e-6)


def test_mixed_model_shared_modules_and_knobs() -> None:
    x, ei, ea = _graph()
    torch.manual_seed(0)
    model = Mixed()
    ours = cudnn_gnn.convert(model, deterministic=True, cache_graph=False)
    assert ours.shared is ours.convs[0] and isinstance(ours.shared, GATConv)
    assert isinstance(ours.convs[1], GATv2Conv) and ours.convs[1].lin_l is ours.convs[1].lin_r
    assert ours.head[1].deterministic and not ours.head[1].cache_graph
    torch.testing.assert_close(ours(x, ei, ea), model(x, ei, ea), rtol=1e-5, atol=1e-6)
    assert isinstance(model.convs[0], pyg_nn.GATConv)  # not inplace: the original is untouched
    same = convert(model, inplace=True)
    assert same is model and isinstance(model.convs[0], GATConv)


def test_conv_itself_and_dtype_mode_carried() -> None:
    conv = pyg_nn.GATConv(8, 4, heads=2).double().train()
    new = convert(conv)
    assert isinstance(new, GATConv) and new.training and new.att_src.dtype == torch.float64
    x, ei, _ = _graph()
    torch.testing.assert_close(new.eval()(x.double(), ei), conv.eval()(x.double(), ei))


def test_refusals_name_the_module() -> None:
    model = nn.Sequential(pyg_nn.GATConv(-1, 4))
    with pytest.raises(ValueError, match="^0 \\(GATConv\\) must have initialised parameters"):
        convert(model)
    x, ei, _ = _graph()
    model[0](x, ei)  # lazy init done: now it converts
    assert isinstance(convert(model)[0], GATConv)
    with pytest.raises(NotImplementedError, match="^model must use aggr='add'"):
        convert(pyg_nn.GATConv(8, 4, aggr="mean"))
    with pytest.raises(TypeError, match="^model must be a torch.nn.Module"):
        convert("GAT")  # type: ignore[arg-type]  # a wrong type on purpose
    with pytest.raises(ValueError, match="^backend must be one of"):
        convert(model, backend="gpu")
