"""torch_geometric.explain on models built from our layers: the same explanations as PyG's layers on the same weights."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import nn
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import AttentionExplainer, GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

from cudnn_gnn import attention_dropout_mask, gat
from cudnn_gnn._philox import draw_seed
from cudnn_gnn.layers import GATConv, GATv2Conv
from cudnn_gnn.layers._explain import edge_factor
from cudnn_gnn.layers._graph_plan import eager_plan, static_plan
from cudnn_gnn.layers._plan_cache import resolve

OURS = {"gat": GATConv, "gatv2": GATv2Conv}
PYG = {"gat": pyg_nn.GATConv, "gatv2": pyg_nn.GATv2Conv}
N, F, E, DE = 12, 5, 40, 3


def _graph() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shuffled random edges with three self-loops (dropped and re-added by the layers) and multi-edges."""
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, N, (2, E), generator=g)
    ei[:, [3, 17, 29]] = torch.tensor([[4, 9, 4], [4, 9, 4]])
    return torch.randn(N, F, generator=g), ei, torch.randn(E, DE, generator=g)


class Net(nn.Module):
    def __init__(self, conv: type, edge_dim: int | None) -> None:
        super().__init__()
        self.conv1 = conv(F, 4, heads=2, edge_dim=edge_dim)
        self.conv2 = conv(8, 3, heads=2, concat=False, edge_dim=edge_dim)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        x = torch.relu(self.conv1(x, edge_index, edge_attr))
        return self.conv2(x, edge_index, edge_attr).log_softmax(-1)


def _pair(kind: str, edge: bool) -> tuple[Net, Net]:
    torch.manual_seed(1)
    pyg = Net(PYG[kind], DE if edge else None)
    ours = Net(OURS[kind], DE if edge else None)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return pyg.eval(), ours.eval()


MODEL_CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="log_probs")
CASES = [pytest.param(kind, edge, id=f"{kind}-{'edge' if edge else 'plain'}") for kind in OURS for edge in (False, True)]


def _kwargs(edge: bool, ea: torch.Tensor) -> dict:
    return {"edge_attr": ea} if edge else {}


@pytest.mark.parametrize("kind, edge", CASES)
def test_gnn_explainer_matches_pyg(kind: str, edge: bool) -> None:
    x, ei, ea = _graph()
    pyg, ours = _pair(kind, edge)
    before = ours(x, ei, *([ea] if edge else []))
    explanations = []
    for model in (pyg, ours):
        explainer = Explainer(model, algorithm=GNNExplainer(epochs=5), explanation_type="model",
                              node_mask_type="attributes", edge_mask_type="object", model_config=MODEL_CONFIG)
        torch.manual_seed(2)
        explanations.append(explainer(x, ei, index=torch.tensor([2, 7]), **_kwargs(edge, ea)))
    want, got = explanations
    assert got.edge_mask.shape == (E,) and got.node_mask.shape == (N, F)
    assert bool((want.edge_mask > 0).any())  # the comparison is not between two empty masks
    torch.testing.assert_close(got.edge_mask, want.edge_mask, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.node_mask, want.node_mask, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.prediction, want.prediction, atol=1e-5, rtol=1e-4)
    for conv in (ours.conv1, ours.conv2):  # masks cleared: a plain forward is what it was
        assert conv.explain is None and conv._edge_mask is None
    torch.testing.assert_close(ours(x, ei, *([ea] if edge else [])), before, atol=0, rtol=0)


@pytest.mark.parametrize("kind, edge", CASES)
@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_attention_explainer_matches_pyg(kind: str, edge: bool, reduce: str) -> None:
    x, ei, ea = _graph()
    pyg, ours = _pair(kind, edge)
    masks = []
    for model in (pyg, ours):
        explainer = Explainer(model, algorithm=AttentionExplainer(reduce=reduce), explanation_type="model",
                              edge_mask_type="object", model_config=MODEL_CONFIG)
        masks.append(explainer(x, ei, index=3, **_kwargs(edge, ea)).edge_mask)
    assert bool((masks[0] > 0).any())
    torch.testing.assert_close(masks[1], masks[0], atol=1e-6, rtol=1e-5)
    for conv in (ours.conv1, ours.conv2):
        assert not conv._message_forward_hooks


@pytest.mark.parametrize("kind", list(OURS))
@pytest.mark.parametrize("apply_sigmoid", [True, False])
def test_edge_mask_gradients_match_pyg(kind: str, apply_sigmoid: bool) -> None:
    """set_masks by hand: outputs, the mask's gradient and the returned attention (before the mask) as PyG's."""
    x, ei, ea = _graph()
    pyg, ours = _pair(kind, True)
    results = []
    for model in (pyg, ours):
        mask = nn.Parameter(torch.linspace(-2.0, 2.0, E) if apply_sigmoid else torch.linspace(0.0, 1.0, E))
        set_masks(model, mask, ei, apply_sigmoid=apply_sigmoid)
        h = torch.relu(model.conv1(x, ei, ea))
        out, (ei_ret, alpha) = model.conv2(h, ei, ea, return_attention_weights=True)
        out.square().sum().backward()
        clear_masks(model)
        results.append((out, mask.grad, ei_ret, alpha))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_training_dropout_multiplies_the_edge_mask() -> None:
    """In training, the op's mask is the edge mask times the dropout factors drawn for the call: the counter-based
    mask of the seed drawn from torch's generator, the mask the kernels would draw without the explainer."""
    x, ei, _ = _graph()
    conv = GATConv(F, 4, heads=2, dropout=0.5).train()
    mask = torch.randn(E)
    set_masks(conv, mask, ei)
    torch.manual_seed(3)
    got = conv(x, ei)
    clear_masks(conv)
    keep = ei[0] != ei[1]
    factor = torch.cat([mask.sigmoid()[keep], torch.ones(N)])  # PyG's explain_message: loops appended, mask 1
    plan = resolve(ei, num_src=N, num_dst=N, num_loops=N, device=x.device, cache=True)
    torch.manual_seed(3)
    drop = attention_dropout_mask(plan.graph, 2, 0.5, draw_seed(x.device))
    w = torch.cat([conv.att_src.reshape(-1), conv.att_dst.reshape(-1)])
    want = gat(plan.graph, conv.lin(x), w, heads=2, dropout_mask=factor.unsqueeze(1) * drop) + conv.bias
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_static_plan_lays_the_mask_out_like_the_eager_plan() -> None:
    """Under torch.compile the plan keeps the caller's self-loops (redirected): the factors of PyG's edges agree."""
    _, ei, _ = _graph()
    conv = GATConv(F, 4)
    set_masks(conv, torch.randn(E), ei)
    eager = edge_factor(conv, eager_plan(ei, N, N, N, "coo", None), ei)
    static_plan_ = static_plan(ei, N, N, N, "coo", None)
    static = edge_factor(conv, static_plan_, ei)
    assert static_plan_.keep is not None
    torch.testing.assert_close(static[static_plan_.keep], eager)


def test_unsupported_hooks_and_forms_are_refused() -> None:
    x, ei, _ = _graph()
    conv = GATConv(F, 4)
    handle = conv.register_aggregate_forward_hook(lambda *a: None)
    with pytest.raises(NotImplementedError, match="aggregate forward hooks must not be registered"):
        conv(x, ei)
    handle.remove()
    handle = conv.register_message_forward_hook(lambda module, inputs, out: out * 2)
    with pytest.raises(NotImplementedError, match="message forward hooks on cudnn_gnn's GATConv must return None"):
        conv(x, ei)
    handle.remove()
    set_masks(conv, torch.randn(E), ei)
    with pytest.raises(NotImplementedError, match="edge_index must be a \\[2, E\\] Tensor or EdgeIndex to explain"):
        conv(x, torch.sparse_coo_tensor(ei.flip(0), torch.ones(E), (N, N)).to_sparse_csr())
    conv._edge_mask = torch.randn(E + 1)
    with pytest.raises(ValueError, match="_edge_mask must have one entry per edge"):
        conv(x, ei)
    clear_masks(conv)
    conv(x, ei)  # and back to normal


def test_compiled_message_hooks_on_out_of_range_ids_see_nan_not_an_index_error() -> None:
    """Under torch.compile a raw edge_index's out-of-range ids are clamped and the output NaN: the message hooks get
    the clamped sources' rows and NaN coefficients, never an out-of-range index (on CUDA a device-side assert)."""
    x, ei, _ = _graph()
    conv = GATConv(F, 4, heads=2)
    seen: list[torch.Tensor] = []
    conv.register_message_forward_hook(lambda module, inputs, out: seen.append(inputs[0]["alpha"].detach()))
    wrong = ei.clone()
    wrong[0, 3] = N + 5
    torch._dynamo.reset()
    out = torch.compile(conv, backend="eager")(x, wrong)
    assert torch.isnan(out).all() and seen and torch.isnan(seen[-1]).all()
