"""A neighbour-sampled batch through the examples' ``OgbGAT`` on CUDA, forward and backward, with no host<->device
sync once warm (issue #16): every layer gets its block from :func:`cudnn_gnn.sampled_blocks` (``validate=False``),
the self-loop plan is built with fixed-shape ops, and the Triton kernels run without reading anything back.

``torch.cuda.set_sync_debug_mode("error")`` turns every synchronising call PyTorch makes (``.item()``, ``.tolist()``,
``nonzero``, boolean indexing, ``bincount`` without a known length, ``torch.equal``, a synchronous host<->device
copy such as ``torch.tensor(list, device="cuda")``) into a RuntimeError. The first batch is a warm-up (Triton
compiles, the backend probe runs once per process); the second, of other sizes, must not sync. The backend is
Triton, named explicitly: no cuDNN call is made (cuDNN's plan building is not part of this claim).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from cudnn_gnn.backends import gat_backend  # noqa: E402

_missing = gat_backend("triton").unavailable(torch.device("cuda"))
if _missing is not None:
    pytest.skip(f"the triton backend does not run here: {_missing[0]}", allow_module_level=True)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEV = torch.device("cuda")


@pytest.fixture
def common(monkeypatch: pytest.MonkeyPatch):
    """``examples/_common.py`` (where ``OgbGAT`` lives), imported with its folder on sys.path."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import _common

    yield _common
    sys.modules.pop("_common", None)


def _batch(nodes: list[int], fanout: list[int], features: int, seed: int):
    """A batch laid out as PyG's sampler lays it out (nodes and edges hop by hop, edges shuffled within a hop,
    some self-loops), moved to the GPU before the sync check starts."""
    g = torch.Generator().manual_seed(seed)
    starts = [sum(nodes[:k]) for k in range(len(nodes) + 1)]
    parts, edges = [], []
    for k, f in enumerate(fanout):
        dst = torch.arange(starts[k], starts[k + 1]).repeat_interleave(
            torch.randint(1, f + 1, (nodes[k],), generator=g))
        src = torch.randint(0, starts[k + 2], (dst.numel(),), generator=g)
        src[::7] = dst[::7]
        ei = torch.stack([src, dst])
        parts.append(ei[:, torch.randperm(ei.shape[1], generator=g)])
        edges.append(ei.shape[1])
    x = torch.randn(starts[-1], features, generator=g)
    return x.to(DEV), torch.cat(parts, 1).to(DEV), nodes, edges


def test_sampled_training_step_does_not_sync(common) -> None:
    torch.manual_seed(0)
    model = common.OgbGAT("gat", 32, 16, 7, layers=3, heads=4, out_heads=2, dropout=0.5, norm=False,
                          activation="elu", backend="triton").to(DEV).train()
    warm = _batch([64, 300, 900, 1500], [5, 3, 2], 32, seed=0)
    steady = _batch([64, 280, 950, 1700], [5, 3, 2], 32, seed=1)  # other sizes: nothing cached from the warm-up

    def step(batch) -> torch.Tensor:
        x, edge_index, nsn, nse = batch
        model.zero_grad(set_to_none=True)
        out = model(x, edge_index, None, nsn, nse)
        loss = out[: nsn[0]].float().square().mean()
        loss.backward()
        return out

    step(warm)
    torch.cuda.synchronize(DEV)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = step(steady)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize(DEV)
    assert out.shape == (64, 7)
    assert torch.isfinite(out).all()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_compiled_sampled_step_takes_one_graph_and_matches_eager(common) -> None:
    """The example's ``OgbGAT`` under ``torch.compile(dynamic=True)`` (inductor) on three batches of different
    sizes: one graph for all of them (no recompilation per batch size), and the output and every gradient equal
    the eager model's (the node scores traced as GEMMs: float32 summation order aside)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = common.OgbGAT("gat", 32, 16, 7, layers=3, heads=4, out_heads=2, dropout=0.0, norm=False,
                          activation="elu", backend="triton").to(DEV).train()
    torch._dynamo.reset()
    graphs0 = counters["stats"]["unique_graphs"]
    compiled = torch.compile(model, dynamic=True)
    sizes = ([64, 300, 900, 1500], [64, 280, 950, 1700], [64, 310, 870, 1650])
    for seed, nodes in enumerate(sizes):
        x, edge_index, nsn, nse = _batch(nodes, [5, 3, 2], 32, seed=seed)
        results = []
        for f in (compiled, model):
            model.zero_grad(set_to_none=True)
            out = f(x, edge_index, None, nsn, nse)
            out.float().square().mean().backward()
            results.append([out] + [p.grad for p in model.parameters()])
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] - graphs0 == 1
