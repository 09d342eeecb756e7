"""Every bad input to gat/gatv2 is refused on the host with a message that names the argument."""

from __future__ import annotations

import pytest
import torch

from cudnn_gnn import CscGraph, gat, gatv2
from cudnn_gnn.backends.cudnn import NODE_ELEMS_LIMIT, kernel_index_dtype

EI = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
G = CscGraph.from_edge_index(EI, num_nodes=4)
X = torch.randn(4, 6)
W = torch.randn(12)


def _call(**over):
    kw = dict(graph=G, x=X, attn_weights=W, heads=2)
    kw.update(over)
    return gat(kw.pop("graph"), kw.pop("x"), kw.pop("attn_weights"), **kw)


@pytest.mark.parametrize(
    "over, exc, match",
    [
        (dict(graph=EI), TypeError, "graph must be a cudnn_gnn.CscGraph"),
        (dict(x=[1.0]), TypeError, "x must be a Tensor or a"),
        (dict(x=X.long()), TypeError, "x must have a floating dtype"),
        (dict(x=torch.randn(3, 6)), ValueError, r"x must have shape \(num_src_nodes=4"),
        (dict(x=(X, torch.randn(4, 5))), ValueError, r"x\[1\] must have shape"),
        (dict(x=(X, X.double())), TypeError, r"x\[1\] must have the dtype of x\[0\]"),
        (dict(heads=4), ValueError, "x must have a feature dimension divisible by heads=4"),
        (dict(heads=0), ValueError, "heads must be >= 1"),
        (dict(heads=2.0), TypeError, "heads must be an int"),
        (dict(attn_weights=torch.randn(13)), ValueError, r"attn_weights must have shape"),
        (dict(attn_weights=torch.randn(2, 6)), ValueError, r"attn_weights must have shape"),
        (dict(edge_attr=torch.randn(3, 2)), ValueError, r"edge_attr must have shape \(num_edges=4"),
        (dict(edge_attr=torch.randn(4, 3), attn_weights=torch.randn(15)), ValueError, "edge_attr must have a width divisible"),
        (dict(edge_attr=torch.randn(4, 2)), ValueError, "attn_weights must have shape"),
        (dict(activation="gelu"), ValueError, "activation must be one of"),
        (dict(activation_alpha="0.2"), TypeError, "activation_alpha must be a float or None"),
        (dict(activation="elu", activation_alpha=0.7), ValueError, "activation_alpha must be None or 1.0 for activation='elu'"),
        (dict(activation="relu", activation_alpha=0.3), ValueError, "activation_alpha must be None for activation='relu'"),
        (dict(dropout=1.5), ValueError, r"dropout must be in \[0, 1\]"),
        (dict(dropout=0.1, training=True, dropout_mask=torch.ones(4, 2)), ValueError, "dropout must be 0 when dropout_mask"),
        (dict(dropout_mask=torch.ones(2, 4)), ValueError, r"dropout_mask must have shape \(num_edges=4, heads=2\)"),
        (dict(dropout_mask=torch.ones(4, 2, dtype=torch.bool)), TypeError, "dropout_mask must have a floating"),
        (dict(dropout_mask=torch.ones(4, 2, dtype=torch.uint8)), TypeError, "dropout_mask must have a floating"),
        (dict(dropout_mask=torch.ones(4, 2, device="meta")), ValueError, "dropout_mask must be on cpu like the graph"),
        (dict(dropout_mask=torch.ones(4, 2, requires_grad=True), backend="cudnn"), NotImplementedError,
         "dropout_mask must not require grad with backend='cudnn'"),
        (dict(dropout_mask=torch.ones(4, 2, requires_grad=True), backend="triton"), NotImplementedError,
         "dropout_mask must not require grad with backend='triton'"),
        (dict(concat=1), TypeError, "concat must be a bool"),
        (dict(deterministic=None), TypeError, "deterministic must be a bool"),
        (dict(grad_precision="fp16"), ValueError, "grad_precision must be one of"),
        (dict(x=X.to("meta")), ValueError, "x must be on cpu like the graph"),
    ],
)
def test_gat_errors_name_the_argument(over, exc, match):
    with pytest.raises(exc, match=match):
        _call(**over)


def test_gatv2_edge_attr_must_match_node_width():
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(num_edges=4, 6\)"):
        gatv2(G, X, torch.randn(6), heads=2, edge_attr=torch.randn(4, 2))
    with pytest.raises(ValueError, match=r"attn_weights must have shape \(dim,\)"):
        gatv2(G, X, W, heads=2)


EA = torch.randn(4, 2)


@pytest.mark.parametrize(
    "over, exc, match",
    [
        (dict(edge_attr=None), ValueError, "lin_edge_weight must be None when edge_attr is None"),
        (dict(lin_edge_weight=[1.0]), TypeError, "lin_edge_weight must be a torch.Tensor"),
        (dict(lin_edge_weight=torch.ones(6, 2, dtype=torch.long)), TypeError, "lin_edge_weight must have a floating"),
        (dict(lin_edge_weight=torch.randn(5, 2)), ValueError, r"lin_edge_weight must have shape \(dim=6, dim_edge\)"),
        (dict(lin_edge_weight=torch.randn(6)), ValueError, r"lin_edge_weight must have shape \(dim=6, dim_edge\)"),
        (dict(edge_attr=torch.randn(4, 0), lin_edge_weight=torch.randn(6, 0)), ValueError,
         "lin_edge_weight must have at least one column"),
        (dict(edge_attr=torch.randn(4, 3)), ValueError,
         r"edge_attr must have shape \(num_edges=4, dim_edge=2\) to match lin_edge_weight, got \(4, 3\)"),
        (dict(edge_attr=torch.randn(3, 2)), ValueError, r"edge_attr must have shape \(num_edges=4, dim_edge=2\)"),
        (dict(edge_attr=EA.long()), TypeError, "edge_attr must have a floating dtype"),
        (dict(lin_edge_weight=torch.randn(6, 2, device="meta")), ValueError, "lin_edge_weight must be on cpu like the"),
    ],
)
def test_gatv2_raw_edge_features_and_lin_edge_weight_errors(over, exc, match):
    kw = dict(heads=2, edge_attr=EA, lin_edge_weight=torch.randn(6, 2))
    kw.update(over)
    with pytest.raises(exc, match=match):
        gatv2(G, X, torch.randn(6), **kw)


def test_lin_edge_weight_is_gatv2_only():
    from cudnn_gnn.spec import attention_spec

    with pytest.raises(ValueError, match="^lin_edge_weight must be None for GAT"):
        attention_spec(v2=False, graph=G, x=X, attn_weights=torch.randn(14), heads=2, edge_attr=EA, concat=True,
                       activation="relu", activation_alpha=None, dropout=0.0, training=False, dropout_mask=None,
                       return_attention=False, deterministic=False, grad_precision="auto", backend="auto",
                       max_degree=None, lin_edge_weight=torch.randn(6, 2))


def test_single_tensor_x_needs_enough_rows_for_destinations():
    g = CscGraph.from_edge_index(torch.tensor([[0, 1], [3, 4]]), size=(2, 5))
    with pytest.raises(ValueError, match=r"x must be a \(x_src, x_dst\) tuple"):
        gat(g, torch.randn(2, 4), torch.randn(8))


def test_int32_guard_promotes_past_the_kernel_limits():
    ei = torch.tensor([[0], [1]])
    g = CscGraph.from_edge_index(ei, num_nodes=2)
    assert kernel_index_dtype(g, 256, 0) == torch.int32
    big_nodes = CscGraph(torch.zeros(NODE_ELEMS_LIMIT // 256 + 1, dtype=torch.int32), torch.empty(0, dtype=torch.int32),
                         NODE_ELEMS_LIMIT // 256)
    assert kernel_index_dtype(big_nodes, 256, 0) == torch.int64
    assert kernel_index_dtype(big_nodes, 128, 0) == torch.int32
    assert kernel_index_dtype(g.to_index_dtype(torch.int64), 8, 0) == torch.int64


def test_int32_guard_counts_edge_elements(monkeypatch):
    import cudnn_gnn.backends.cudnn as attn

    g = CscGraph.from_edge_index(torch.randint(0, 10, (2, 100)), num_nodes=10)
    monkeypatch.setattr(attn, "EDGE_ELEMS_LIMIT", 100 * 16)
    assert attn.kernel_index_dtype(g, 8, 0) == torch.int32
    assert attn.kernel_index_dtype(g, 16, 0) == torch.int64
    assert attn.kernel_index_dtype(g, 8, 16) == torch.int64  # edge features count too
