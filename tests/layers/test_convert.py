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
    ours = convert(model, backend="reference", inplace=False)
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
    ours = cudnn_gnn.convert(model, deterministic=True, cache_graph=False, inplace=False)
    assert ours.shared is ours.convs[0] and isinstance(ours.shared, GATConv)
    assert isinstance(ours.convs[1], GATv2Conv) and ours.convs[1].lin_l is ours.convs[1].lin_r
    assert ours.head[1].deterministic and not ours.head[1].cache_graph
    torch.testing.assert_close(ours(x, ei, ea), model(x, ei, ea), rtol=1e-5, atol=1e-6)
    assert isinstance(model.convs[0], pyg_nn.GATConv)  # inplace=False: the original is untouched
    same = convert(model)
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


class _Tied(nn.Module):
    """One conv under two names of one parent, its projection shared with a sibling attribute, a frozen parameter,
    hooks on the conv and its projection, and a mode that differs between the conv and its children."""

    def __init__(self, v2: bool) -> None:
        super().__init__()
        conv = pyg_nn.GATv2Conv(8, 4, heads=2) if v2 else pyg_nn.GATConv(8, 4, heads=2)
        self.a = conv
        self.b = conv
        self.proj = conv.lin_l if v2 else conv.lin
        self.other = pyg_nn.GATv2Conv(8, 4, heads=2) if v2 else pyg_nn.GATConv(8, 4, heads=2)
        self.other.bias = conv.bias  # a parameter tied between two convs
        (conv.att if v2 else conv.att_src).requires_grad_(False)


def _conv_cls(pyg: bool, v2: bool) -> type:
    if pyg:
        return pyg_nn.GATv2Conv if v2 else pyg_nn.GATConv
    return GATv2Conv if v2 else GATConv


def _check_tied(m: nn.Module, v2: bool, pyg: bool) -> None:
    kind = _conv_cls(pyg, v2)
    assert type(m.a) is kind and type(m.other) is kind
    assert m.a is m.b, "a conv held under two names of one parent must stay one module"
    assert m.proj is (m.a.lin_l if v2 else m.a.lin), "a submodule shared with another attribute must stay shared"
    assert m.other.bias is m.a.bias, "a parameter tied between two convs must stay tied"
    att = m.a.att if v2 else m.a.att_src
    assert not att.requires_grad and all(p.requires_grad for n, p in m.a.named_parameters() if p is not att)
    if v2:
        assert m.a.lin_l is not m.a.lin_r  # share_weights=False kept


@pytest.mark.parametrize("v2", [False, True])
def test_convert_keeps_sharing_frozen_parameters_mode_and_hooks(v2: bool) -> None:
    torch.manual_seed(0)
    model = _Tied(v2)
    model.a.train()
    model.proj.eval()  # a child's own mode differs from the conv's
    model.other.eval()
    calls: list[str] = []
    model.a.register_forward_pre_hook(lambda mod, args: calls.append("pre1"))
    model.a.register_forward_pre_hook(lambda mod, args, kwargs: calls.append("pre2-kw"), with_kwargs=True)
    removed = model.a.register_forward_hook(lambda mod, args, out: calls.append("removed"))
    model.a.register_forward_hook(lambda mod, args, out: calls.append("post1"))
    model.a.register_forward_hook(lambda mod, args, out: calls.append("post0"), prepend=True)
    model.proj.register_forward_hook(lambda mod, args, out: calls.append("proj"))
    x, ei, _ = _graph()
    expected = model.a(x, ei)
    order = list(calls)
    assert order[:2] == ["pre1", "pre2-kw"] and order[-3:] == ["post0", "removed", "post1"]

    for ours, pyg in ((convert(model, backend="reference", inplace=False), False), (convert(model), False)):
        _check_tied(ours, v2, pyg)
        assert ours.a.training and not ours.proj.training and not ours.other.training
        calls.clear()
        torch.testing.assert_close(ours.a(x, ei), expected, rtol=1e-5, atol=1e-6)
        assert calls == order, "forward (pre-)hooks and their order must be carried"
    removed.remove()  # a handle from before the in-place conversion still removes the hook from the new conv
    calls.clear()
    model.a(x, ei)
    assert "removed" not in calls and calls[-2:] == ["post0", "post1"]

    back = to_pyg(model)
    _check_tied(back, v2, pyg=True)
    assert back.a.training and not back.proj.training
    calls.clear()
    torch.testing.assert_close(back.a(x, ei), expected, rtol=1e-5, atol=1e-6)
    assert calls == [c for c in order if c != "removed"]
    round_trip = to_pyg(convert(back))  # a round trip: same classes, same sharing, same values
    _check_tied(round_trip, v2, pyg=True)
    for (n1, p1), (n2, p2) in zip(back.state_dict().items(), round_trip.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)


@pytest.mark.parametrize("v2", [False, True])
def test_an_optimizer_built_before_convert_trains_the_converted_model(v2: bool) -> None:
    """The usual PyG order (model, optimizer, then ``model = convert(model)``): the converted model holds the same
    parameter objects, so the optimizer's steps train it; ``inplace=False`` is the copy, asked for."""
    x, ei, _ = _graph()
    torch.manual_seed(0)
    model = pyg_nn.GAT(8, 16, num_layers=2, out_channels=3, v2=v2, heads=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    held = list(model.parameters())
    copy = convert(model, inplace=False)
    assert not any(p is q for p in copy.parameters() for q in held)
    model = convert(model, backend="reference")
    assert all(type(c) is (GATv2Conv if v2 else GATConv) for c in model.convs)
    now = list(model.parameters())
    assert len(now) == len(held) and all(p is q for p, q in zip(now, held)), "convert must keep the parameters"
    before = [p.detach().clone() for p in held]
    for _ in range(2):
        opt.zero_grad()
        model(x, ei).square().sum().backward()
        opt.step()
    assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
    conv = model.convs[0]
    back = to_pyg(model)  # the same way back
    assert back is model and all(p is q for p, q in zip(back.parameters(), held)) and back.convs[0] is not conv


def test_message_passing_hooks_are_carried_to_pyg_and_refused_by_ours() -> None:
    """PyG's propagate hooks need a separate propagate step: carried into our conv, they are refused at its
    forward (not silently dropped), and they run again once converted back."""
    conv = pyg_nn.GATConv(8, 4, heads=2)
    seen: list[int] = []
    conv.register_propagate_forward_hook(lambda mod, inputs, out: seen.append(1))
    x, ei, _ = _graph()
    ours = convert(conv)
    with pytest.raises(NotImplementedError, match="propagate forward hooks must not be registered"):
        ours(x, ei)
    to_pyg(ours)(x, ei)
    assert seen == [1]


def _gps_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    sizes = (4, 6)
    ei = torch.cat([torch.randint(0, 4, (2, 12), generator=g), torch.randint(4, 10, (2, 18), generator=g)], 1)
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor(sizes))
    return torch.randn(10, 8, generator=g), ei, batch


class _Gps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gps = nn.ModuleList([
            pyg_nn.GPSConv(8, pyg_nn.GATConv(8, 4, heads=2), heads=2, act="gelu", norm="layer_norm",
                           attn_kwargs={"dropout": 0.0}),
            pyg_nn.GPSConv(8, None, heads=4, norm=None),
        ])

    def forward(self, x: torch.Tensor, ei: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        for layer in self.gps:
            x = layer(x, ei, batch)
        return x


def test_gps_layers_are_converted_with_their_local_conv_and_back() -> None:
    """A PyG GPSConv becomes ours (and its GATConv ours), its activation, norms and attention carried whole."""
    from cudnn_gnn.layers import GPSConv

    torch.manual_seed(0)
    model = _Gps().eval()
    x, ei, batch = _gps_batch()
    expected = model(x, ei, batch)
    ours = convert(model, backend="reference", attention_backend="reference", inplace=False)
    assert [type(m) for m in ours.gps] == [GPSConv, GPSConv]
    assert type(ours.gps[0].conv) is GATConv and ours.gps[1].conv is None
    assert ours.gps[0].attention_backend == "reference" and ours.gps[0].conv.backend == "reference"
    assert type(ours.gps[0].norm1) is pyg_nn.LayerNorm and ours.gps[1].norm1 is None
    assert type(model.gps[0]) is pyg_nn.GPSConv and type(model.gps[0].conv) is pyg_nn.GATConv  # a copy converted
    torch.testing.assert_close(ours(x, ei, batch), expected, rtol=1e-5, atol=1e-5)
    assert set(dict(ours.named_parameters())) == set(dict(model.named_parameters()))

    same = convert(model, inplace=True)
    params = {n: p for n, p in model.named_parameters()}
    assert same is model and type(model.gps[0]) is GPSConv and type(model.gps[0].conv) is GATConv
    assert all(p is params[n] for n, p in same.named_parameters()), "the Parameter objects must be kept"

    back = to_pyg(ours, inplace=False)
    assert type(back.gps[0]) is pyg_nn.GPSConv and type(back.gps[0].conv) is pyg_nn.GATConv
    torch.testing.assert_close(back(x, ei, batch), expected, rtol=1e-5, atol=1e-5)

    root = convert(pyg_nn.GPSConv(8, pyg_nn.GATConv(8, 4, heads=2), heads=2).eval())  # a model that is the layer
    assert type(root) is GPSConv and type(root.conv) is GATConv


def test_gps_layers_convert_refusals_name_the_layer() -> None:
    with pytest.raises(NotImplementedError, match=r"^gps\.0 \(GPSConv\) must use attn_type='multihead'"):
        convert(nn.ModuleDict({"gps": nn.ModuleList([pyg_nn.GPSConv(8, None, heads=2, attn_type="performer")])}))
    with pytest.raises(NotImplementedError, match=r"^model \(GPSConv\) cannot be converted: .*add_bias_kv"):
        convert(pyg_nn.GPSConv(8, None, heads=2, attn_kwargs={"add_bias_kv": True}))
    with pytest.raises(ValueError, match="^attention_backend must be one of"):
        convert(pyg_nn.GPSConv(8, None, heads=2), attention_backend="triton")
