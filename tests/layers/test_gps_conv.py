"""GPSConv parity with PyG's GPSConv (same state_dict), and GraphTransformerBlock parity with
``torch.nn.TransformerEncoderLayer`` applied per graph."""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch.nn import Linear, ReLU, Sequential

from cudnn_gnn.layers.gps_conv import GPSConv
from cudnn_gnn.layers.graph_transformer import GraphTransformerBlock

C, HEADS = 16, 4


def _batch(sizes, seed=0, edge_dim=None):
    """A PyG-style batch: random edges inside each graph (self-loops allowed), sorted ``batch``, ``ptr``."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randn(n, C, generator=g, dtype=torch.float64)
    edges, start = [], 0
    for s in sizes:
        if s:
            e = torch.randint(0, s, (2, 3 * s), generator=g) + start
            edges.append(e)
        start += s
    edge_index = torch.cat(edges, 1) if edges else torch.zeros(2, 0, dtype=torch.long)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()])
    edge_attr = None if edge_dim is None else torch.randn(edge_index.shape[1], edge_dim, generator=g, dtype=torch.float64)
    return x, edge_index, batch, ptr, edge_attr


def _local_conv(kind):
    if kind == "gat":
        return pyg_nn.GATConv(C, C // HEADS, heads=HEADS)
    if kind == "gine":
        return pyg_nn.GINEConv(Sequential(Linear(C, C), ReLU(), Linear(C, C)), edge_dim=4)
    return None


def _pair(kind, **kw):
    torch.manual_seed(0)
    pyg = pyg_nn.GPSConv(C, _local_conv(kind), heads=HEADS, **kw).double()
    ours = GPSConv(C, _local_conv(kind), heads=HEADS, attention_backend="reference", **kw).double()
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return pyg, ours


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", ["gat", "gine", None])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("norm", ["batch_norm", "layer_norm", None])
def test_gps_parity_with_pyg(kind, train, norm):
    pyg, ours = _pair(kind, norm=norm)
    assert set(pyg.state_dict()) == set(ours.state_dict())
    x, edge_index, batch, ptr, edge_attr = _batch([5, 1, 9, 3], edge_dim=4 if kind == "gine" else None)
    kwargs = {"edge_attr": edge_attr} if kind == "gine" else {}
    pyg.train(train)
    ours.train(train)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = pyg(xa, edge_index, batch, **kwargs)
    got = ours(xb, edge_index, batch, **kwargs)
    torch.testing.assert_close(got, want)
    w = torch.randn_like(want)
    (want * w).sum().backward()
    (got * w).sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad)
    gp, go = _grads(pyg), _grads(ours)
    assert gp.keys() == go.keys()
    for name in gp:
        torch.testing.assert_close(go[name], gp[name], msg=name)
    if train and norm == "batch_norm":  # running statistics move alike
        for (na, a), (_, b) in zip(pyg.named_buffers(), ours.named_buffers()):
            torch.testing.assert_close(b, a, msg=na)


def test_gps_ptr_and_max_num_nodes_and_no_batch():
    pyg, ours = _pair("gat")
    pyg.eval()
    ours.eval()
    x, edge_index, batch, ptr, _ = _batch([4, 7, 2])
    want = pyg(x, edge_index, batch)
    torch.testing.assert_close(ours(x, edge_index, batch, ptr=ptr, max_num_nodes=7), want)
    x1, e1, _, _, _ = _batch([6])
    torch.testing.assert_close(ours(x1, e1), pyg(x1, e1))


def test_gps_attention_dropout_runs_and_is_seeded():
    _, ours = _pair("gat", attn_kwargs={"dropout": 0.5}, dropout=0.1)
    ours.train()
    x, edge_index, batch, ptr, _ = _batch([4, 7, 2])
    torch.manual_seed(1)
    a = ours(x, edge_index, batch)
    torch.manual_seed(1)
    b = ours(x, edge_index, batch)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["gat", None])
def test_gps_dropout_of_one_drops_everything_as_pyg_does(kind):
    """``dropout=1`` (and attention dropout 1) in training, as PyG and torch take it: every dropped branch is zero, so
    the output is deterministic and equals PyG's."""
    pyg, ours = _pair(kind, dropout=1.0, attn_kwargs={"dropout": 1.0})
    pyg.train()
    ours.train()
    x, edge_index, batch, _, _ = _batch([5, 1, 9, 3])
    torch.testing.assert_close(ours(x, edge_index, batch), pyg(x, edge_index, batch))


def test_gps_repr_reset_and_errors():
    pyg, ours = _pair("gat")
    assert repr(ours).replace("GPSConv", "X") == repr(pyg).replace("GPSConv", "X")
    ours.reset_parameters()
    with pytest.raises(NotImplementedError, match="attn_type='performer' is not implemented"):
        GPSConv(C, None, heads=2, attn_type="performer")
    with pytest.raises(ValueError, match="^attn_type must be 'multihead', got 'bigbird'"):
        GPSConv(C, None, attn_type="bigbird")
    with pytest.raises(ValueError, match="^channels must be divisible by heads=3"):
        GPSConv(C, None, heads=3)
    with pytest.raises(ValueError, match="^attention_backend must be one of"):
        GPSConv(C, None, attention_backend="xformers")
    for attn_kwargs in ({"add_bias_kv": True}, {"add_zero_attn": True}):  # PyG runs these; refused, not ignored
        pyg_nn.GPSConv(C, None, attn_kwargs=attn_kwargs)
        with pytest.raises(NotImplementedError, match="add_bias_kv=True / add_zero_attn=True are not supported"):
            GPSConv(C, None, attn_kwargs=attn_kwargs)
    with pytest.raises(NotImplementedError, match="kdim/vdim different from channels"):
        GPSConv(C, None, attn_kwargs={"kdim": C // 2, "vdim": C // 2})


# ----------------------------------------------------------------------------------------------- transformer block


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_block_equals_torch_encoder_layer_per_graph(norm_first, activation):
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(
        C, HEADS, dim_feedforward=24, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).double()
    block = GraphTransformerBlock(C, HEADS, dim_feedforward=24, activation=activation, norm_first=norm_first).double()
    block.load_state_dict(ref.state_dict(), strict=True)
    sizes = [3, 1, 0, 6]
    x, _, batch, ptr, _ = _batch(sizes)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = torch.cat([ref(xa[ptr[i] : ptr[i + 1]][None])[0] for i in range(len(sizes)) if sizes[i]])
    got = block(xb, batch)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(block(x, ptr=ptr, max_num_nodes=6), want.detach())
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad)
    for (n, p), (_, r) in zip(block.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, r.grad, msg=n)


def test_block_errors_and_repr():
    with pytest.raises(ValueError, match="^channels must be divisible by heads=3"):
        GraphTransformerBlock(16, 3)
    with pytest.raises(ValueError, match="^activation must be one of"):
        GraphTransformerBlock(16, 2, activation="tanh")
    with pytest.raises(ValueError, match=r"^dropout must be in \[0, 1\]"):
        GraphTransformerBlock(16, 2, dropout=1.5)
    with pytest.raises(ValueError, match=r"^dropout must be in \[0, 1\]"):
        GPSConv(16, None, heads=2, dropout=-0.1)
    GraphTransformerBlock(16, 2, dropout=1.0)  # as torch's TransformerEncoderLayer takes it
    assert "GraphTransformerBlock(16, heads=2" in repr(GraphTransformerBlock(16, 2))


def test_gps_ptr_and_batch_that_disagree_refused():
    """Given both, the attention used ``ptr`` and the norms ``batch``: graphs that disagree gave a silent mix."""
    _, ours = _pair("gat")
    ours.eval()
    x, edge_index, batch, ptr, _ = _batch([4, 7, 2])
    other = torch.tensor([0, 5, 11, 13])  # the same N, other graphs
    for kw in ({}, {"max_num_nodes": 7}):  # on a CPU, checked with or without max_num_nodes
        with pytest.raises(ValueError, match="ptr and batch must describe the same graphs"):
            ours(x, edge_index, batch, ptr=other, **kw)
    with pytest.raises(ValueError, match=r"batch must have shape \[N=13\]"):
        ours(x, edge_index, batch[:-1], ptr=ptr)
    ours(x, edge_index, batch, ptr=ptr)  # agreeing: fine


@pytest.mark.parametrize("norm_cls", ["pyg", "torch"])
def test_masked_batch_norm_reads_only_the_kept_rows(norm_cls) -> None:
    """``node_mask``: a batch norm's output on the kept rows and its running statistics are those of the same norm
    run on the kept rows alone (the padding rows of a packed batch weigh nothing); in eval mode the mask changes
    nothing."""
    from cudnn_gnn.layers.gps_conv import _masked_batch_norm, _RowWeights

    torch.manual_seed(0)
    bn = pyg_nn.BatchNorm(6) if norm_cls == "pyg" else torch.nn.BatchNorm1d(6, momentum=None)
    inner = bn.module if norm_cls == "pyg" else bn
    with torch.no_grad():
        inner.weight.uniform_(0.5, 1.5)
        inner.bias.uniform_(-1, 1)
    ref = __import__("copy").deepcopy(inner)
    x = torch.randn(10, 6) * 3
    keep = torch.tensor([True, False, True, True, False, True, True, True, False, True])
    for _ in range(2):
        got = _masked_batch_norm(inner, x, _RowWeights.of(keep))
        want = ref(x[keep])
        torch.testing.assert_close(got[keep], want)
    torch.testing.assert_close(inner.running_mean, ref.running_mean)
    torch.testing.assert_close(inner.running_var, ref.running_var)
    assert int(inner.num_batches_tracked) == int(ref.num_batches_tracked) == 2


def test_gps_node_mask_leaves_the_real_rows_as_if_alone() -> None:
    """A GPS layer in training mode with batch norms: extra padding rows in a graph of their own, masked out, leave
    the real rows' outputs unchanged."""
    torch.manual_seed(0)
    layer = GPSConv(8, None, heads=2, attention_backend="reference")
    x = torch.randn(7, 8)
    ptr, batch = torch.tensor([0, 3, 7]), torch.tensor([0, 0, 0, 1, 1, 1, 1])
    want = layer(x, None, batch, ptr=ptr)
    pad = torch.cat([x, torch.randn(4, 8) * 10])
    got = layer(pad, None, torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]), ptr=torch.tensor([0, 3, 7, 11]),
                node_mask=torch.arange(11) < 7)
    torch.testing.assert_close(got[:7], want)
    unmasked = layer(pad, None, torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]), ptr=torch.tensor([0, 3, 7, 11]))
    assert not torch.allclose(unmasked[:7], want, atol=1e-3)


def test_gps_node_mask_row_weights_built_once_a_forward(monkeypatch) -> None:
    """The three masked batch norms of a forward read one set of row weights (one mask conversion and count, not
    three); in eval mode, where the norms use their running statistics, none is built."""
    from cudnn_gnn.layers import gps_conv

    built = []
    of = gps_conv._RowWeights.of
    monkeypatch.setattr(gps_conv._RowWeights, "of", classmethod(lambda cls, mask: built.append(mask) or of(mask)))
    torch.manual_seed(0)
    x, edge_index, batch, ptr, _ = _batch([4, 7, 2])
    layer = GPSConv(C, _local_conv("gat"), heads=HEADS, attention_backend="reference").double()
    mask = torch.arange(x.size(0)) < 11
    layer(x, edge_index, batch, ptr=ptr, node_mask=mask).sum().backward()
    assert len(built) == 1 and built[0] is mask
    layer.eval()
    layer(x, edge_index, batch, ptr=ptr, node_mask=mask)
    assert len(built) == 1
