"""A GPS training step on packed molecule batches (cudnn_gnn.apps.static_batcher) captured whole in one CUDA graph:
a warm step does not sync, and replays on batch after batch (different graphs, different real-graph counts) equal
the eager steps from the same parameters and RNG state, dropout included."""

from __future__ import annotations

import contextlib
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from cudnn_gnn.apps.capture import CapturedStep  # noqa: E402
from cudnn_gnn.apps.gps import GPS, packed_loss  # noqa: E402
from cudnn_gnn.apps.static_batcher import StaticGraphBatcher  # noqa: E402
from cudnn_gnn.datasets import load_ogbg  # noqa: E402

DEV = torch.device("cuda")


def _batches(count: int) -> tuple[StaticGraphBatcher, list, str]:
    ds = load_ogbg("ogbg-molbace")
    batcher = StaticGraphBatcher(ds.subset("train"), max_graphs=32)
    batches = [b.to(DEV) for _, b in zip(range(count), batcher.epoch(generator=torch.Generator().manual_seed(0)))]
    return batcher, batches, ds.task_type


def _model() -> GPS:
    torch.manual_seed(0)
    return GPS(64, 2, 4, 1, 0.1, "auto").to(DEV)


def _adam(model: torch.nn.Module) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True, fused=True)


def test_a_warm_packed_gps_step_does_not_sync() -> None:
    batcher, batches, task = _batches(3)
    model = _model()
    opt = _adam(model)
    loss_fn = packed_loss(model, batcher.budget, task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Adam's note that capturable=True runs uncaptured here
        for i, b in enumerate(batches):
            if i == 1:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                opt.zero_grad(set_to_none=True)
                loss_fn(**b.inputs()).backward()
                opt.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_captured_replays_equal_eager_steps_across_batches(dtype: torch.dtype | None) -> None:
    batcher, batches, task = _batches(8)
    assert all(b.x.shape == batches[0].x.shape for b in batches)
    eager_model, step_model = _model(), _model()
    eager_opt, step_opt = _adam(eager_model), _adam(step_model)
    eager_loss = packed_loss(eager_model, batcher.budget, task)
    eager = []
    torch.cuda.manual_seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in batches:
            eager_opt.zero_grad(set_to_none=True)
            with contextlib.nullcontext() if dtype is None else torch.autocast("cuda", dtype=dtype, cache_enabled=False):
                loss = eager_loss(**b.inputs())
            loss.backward()
            eager_opt.step()
            eager.append(float(loss))
    step = CapturedStep(packed_loss(step_model, batcher.budget, task), optimizer=step_opt, inputs=batches[0].inputs(),
                        model=step_model, autocast_dtype=dtype)
    torch.cuda.manual_seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an eager fallback fails the test
        captured = [float(step(**b.inputs())) for b in batches]
    assert step.captured and step.replays == len(batches) - step.warmup
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype is not None else {"rtol": 1e-3, "atol": 1e-4}
    torch.testing.assert_close(torch.tensor(captured), torch.tensor(eager), **tol)
    if dtype is None:
        # Adam turns float noise in a near-zero gradient into a step of up to lr on the entries that have one. The
        # noise: atomics that sum in another order each run (global_mean_pool's and the self-loop edge features'
        # scatter_add_, the attention backward's dq), magnified where the attention runs in bf16. On the H100: 20
        # of 8,192 embedding entries, 3-7 of the 64 of a layer's att_src after 8 steps, and the attention's key
        # bias, whose true gradient is exactly zero (softmax ignores a constant added to a whole row of scores: each
        # step is noise, ~1e-7 in bf16 against Adam's eps 1e-8), moved in 62 of its 64 entries. The attention's
        # output bias is near it: the batch norm after the residual removes a constant added to a channel's rows,
        # so its gradient is what the dropout mask leaves of a cancelling sum (on the H200: 20 of a layer's 64
        # entries). A replay on stale state moves every entry: so, the key biases aside, at most 1% of the model's
        # entries beyond 1e-4 + 1e-3 |p| and, the output biases aside too, at most a quarter of any one tensor's;
        # none beyond 2 lr a step.
        bound = 2 * 1e-3 * len(batches)
        total = differing = 0
        for (name, a), b in zip(eager_model.named_parameters(), step_model.parameters()):
            diff = (b - a).abs()
            assert float(diff.max()) <= bound, f"{name}: entries differ by up to {float(diff.max()):.2e}"
            if name.endswith("attn.in_proj_bias"):  # [q | k | v] biases: the key's third is noise (above)
                c = a.numel() // 3
                a, diff = torch.cat([a[:c], a[2 * c:]]), torch.cat([diff[:c], diff[2 * c:]])
            off = diff > 1e-4 + 1e-3 * a.abs()
            total, differing = total + a.numel(), differing + int(off.sum())
            if not name.endswith("attn.out_proj.bias"):
                assert float(off.float().mean()) <= 0.25, f"{name}: {int(off.sum())} of {a.numel()} entries differ"
        assert differing <= 0.01 * total, f"{differing} of the model's {total} entries differ"


def test_gps_molecules_trains_packed_and_captured_by_default_on_cuda() -> None:
    """The example on CUDA: packed batches and the captured step by default (no eager fallback warning), a finite
    score; ``--batching pyg`` is the eager baseline."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        import gps_molecules as example
    finally:
        sys.path.pop(0)
    argv = ["--dataset", "ogbg-molbace", "--epochs", "2", "--device", "cuda", "--limit", "256", "--batch-size", "64",
            "--no-progress"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "training step not captured" would fail the test
        res = example.main(argv)
    assert res["batching"] == "packed" and 0 <= res["test"] <= 1 and res["per_run"][0]["captured"] is True
    assert example.main([*argv, "--batching", "pyg"])["batching"] == "pyg"
    with warnings.catch_warnings():  # --no-capture: the same packed batches, an eager step, asked for (no warning)
        warnings.simplefilter("error", RuntimeWarning)
        eager = example.main([*argv, "--no-capture"])
    assert eager["batching"] == "packed" and eager["per_run"][0]["captured"] is False
    assert len(eager["per_run"][0]["curves"]["train loss"]) == 2 and 0 <= eager["test"] <= 1


def test_an_atom_outside_the_vocabulary_gives_a_nan_loss_and_the_context_survives() -> None:
    """On CUDA the encoders do not sync: a batch with an atom id past the table (``nn.Embedding`` would assert and
    end the CUDA context) gives a NaN loss without a host sync; the next good batch is finite."""
    batcher, batches, task = _batches(2)
    model = _model()
    loss_fn = packed_loss(model, batcher.budget, task)
    bad = batches[0].inputs()
    bad["x"] = bad["x"].clone()
    bad["x"][0, 0] = 10_000
    loss_fn(**batches[1].inputs())  # warm: the layers' first calls may sync (kernel builds), the checked ones not
    torch.cuda.set_sync_debug_mode("error")
    try:
        nan_loss, good_loss = loss_fn(**bad), loss_fn(**batches[1].inputs())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isnan(nan_loss) and torch.isfinite(good_loss)
    torch.cuda.synchronize()
