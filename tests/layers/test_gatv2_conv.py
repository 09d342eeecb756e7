"""GATv2Conv parity with PyG 2.8 on the reference backend (harness shared with test_gat_conv.py)."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

from cudnn_gnn import CscGraph
from cudnn_gnn.layers import GATv2Conv

from .test_gat_conv import DT, GRAPHS, _gen, features, make_pair, run_parity, same_init

CONFIGS = [  # heads, concat, bias, residual, edge_dim, fill_value, add_self_loops, share_weights
    (1, True, True, False, None, "mean", True, False),
    (3, True, True, True, 4, "mean", True, False),
    (2, False, False, True, 1, 0.5, True, True),
    (3, False, True, False, 4, "max", False, False),
    (2, True, True, False, 4, torch.tensor([1.0, -2.0, 0.5, 3.0]), True, False),
    (2, True, False, True, None, "mean", False, True),
    (1, False, True, False, 4, "add", True, False),
]


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "h{}-{}-b{}-r{}-e{}-{}-l{}-s{}".format(
    c[0], "cat" if c[1] else "mean", int(c[2]), int(c[3]), c[4],
    c[5] if isinstance(c[5], (str, float)) else "tensor", int(c[6]), int(c[7])))
def test_parity_grid(graph: str, cfg: tuple) -> None:
    heads, concat, bias, residual, edge_dim, fill, loops, share = cfg
    ei, ns, nd = GRAPHS[graph]()
    kw = dict(heads=heads, concat=concat, bias=bias, residual=residual, edge_dim=edge_dim, fill_value=fill,
              add_self_loops=loops, share_weights=share)
    ea = None if edge_dim is None else torch.randn(ei.shape[1], edge_dim, generator=_gen(3), dtype=DT)
    if edge_dim == 1:
        ea = ea.view(-1)
    if ns == nd:
        pyg, ours = make_pair(pyg_nn.GATv2Conv, GATv2Conv, 5, 4, **kw)
        run_parity(pyg, ours, features(ns, 5, 4), ei, edge_attr=ea)
    else:
        in_ch = 5 if share else (5, 6)
        pyg, ours = make_pair(pyg_nn.GATv2Conv, GATv2Conv, in_ch, 4, **kw)
        x = (features(ns, 5, 4), features(nd, 5 if share else 6, 5))
        run_parity(pyg, ours, x, ei, edge_attr=ea)


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("form", ["edge_index", "csr_adj_t", "coo_adj_t", "csc_graph"])
def test_edge_index_forms_match_pyg(form: str, loops: bool) -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    pyg, ours = make_pair(pyg_nn.GATv2Conv, GATv2Conv, 5, 4, heads=2, add_self_loops=loops)
    x = features(n, 5, 0)
    if form == "csc_graph":
        run_parity(pyg, ours, x, ei, ours_edge_index=CscGraph.from_edge_index(ei, num_nodes=n))
        return
    f = {"edge_index": lambda: EdgeIndex(ei, sparse_size=(n, n)),
         "csr_adj_t": lambda: to_torch_csr_tensor(ei.flip(0), size=(n, n)),
         "coo_adj_t": lambda: to_torch_coo_tensor(ei.flip(0), size=(n, n))}[form]()  # coalesced: duplicates merged
    run_parity(pyg, ours, x, f)


def test_same_init_repr_and_state_dict() -> None:
    for args, kw in (((8, 4), dict(heads=3, edge_dim=2, residual=True)), (((8, 6), 4), dict(share_weights=False)),
                     ((8, 4), dict(share_weights=True, bias=False))):
        pyg, ours = same_init(pyg_nn.GATv2Conv, GATv2Conv, args, kw)
        sp, so = pyg.state_dict(), ours.state_dict()
        ours.load_state_dict(sp, strict=True)
        pyg.load_state_dict(so, strict=True)


def test_errors_name_the_argument() -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    x = features(n, 5, 0).float()
    with pytest.raises(ValueError, match="^edge_attr must be None for a GATv2Conv built without edge_dim"):
        GATv2Conv(5, 4)(x, ei, torch.randn(ei.shape[1], 3))
    with pytest.raises(ValueError, match=r"^x\[1\] must be a Tensor"):
        GATv2Conv(5, 4)((x, None), ei)
    with pytest.raises(NotImplementedError, match="^flow must be 'source_to_target'"):
        GATv2Conv(5, 4, flow="target_to_source")
    with pytest.raises(ValueError, match="^grad_precision must be one of"):
        GATv2Conv(5, 4, grad_precision="fp16")


def test_autocast_bf16_close_to_fp32() -> None:
    ei, n, _ = GRAPHS["shuffled_dup_loops"]()
    conv = GATv2Conv(16, 8, heads=2, edge_dim=4)
    x, ea = torch.randn(n, 16), torch.randn(ei.shape[1], 4)
    ref = conv(x, ei, ea)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(x, ei, ea)
    assert isinstance(out, Tensor) and bool(torch.isfinite(out).all())
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)


def test_forward_hooks_on_the_projections_run_as_in_pyg() -> None:
    """lin_l / lin_r carry biases, which our forward applies through a fused linear rather than calling the module;
    a hook registered on them was then skipped. A hook that returns a value replaces the output, as in PyG."""
    torch.manual_seed(0)
    pyg = pyg_nn.GATv2Conv(5, 4, heads=2)
    ours = GATv2Conv(5, 4, heads=2, backend="reference")
    ours.load_state_dict(pyg.state_dict())
    x, ei = torch.randn(6, 5), torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    outs = []
    for conv in (pyg, ours):
        seen: list[str] = []
        conv.lin_l.register_forward_hook(lambda mod, args, out, seen=seen: (seen.append("l"), out * 2)[1])
        conv.lin_r.register_forward_pre_hook(lambda mod, args, seen=seen: seen.append("r"))
        outs.append(conv(x, ei))
        assert seen == ["l", "r"]
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)
