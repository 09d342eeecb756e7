"""Static-shape tree sampling on the GPU (cudnn_gnn.apps.static_sampler): a warmed sampled step (sampling, gather,
forward, backward, Adam) runs under ``set_sync_debug_mode("error")``; the step is captured whole by CapturedStep and
its replays equal eager steps from the same RNG state, each replay drawing new neighbours; a batch of another shape
is refused; the Triton kernels on a block equal the reference backend on the compacted subgraph."""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

from _common import OgbGAT  # noqa: E402

from cudnn_gnn.apps.capture import CapturedStep  # noqa: E402
from cudnn_gnn.apps.static_sampler import StaticNeighborSampler, capture_ahead, sampled_loss  # noqa: E402
from cudnn_gnn.layers import GATConv  # noqa: E402

DEV = torch.device("cuda")
N, E, F_IN, CLASSES, B = 5_000, 60_000, 32, 5, 64


def _sampler() -> StaticNeighborSampler:
    g = torch.Generator().manual_seed(0)
    w = torch.arange(1, N + 1, dtype=torch.float64).pow(-0.9)
    dst = torch.multinomial(w, E, replacement=True, generator=g)
    src = torch.randint(0, N, (E,), generator=g)
    order = (dst * N + src).argsort()
    colptr = torch.zeros(N + 1, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=N).cumsum(0)
    x, y = torch.randn(N, F_IN, generator=g), torch.randint(0, CLASSES, (N,), generator=g)
    return StaticNeighborSampler(colptr, src[order], fanout=[6, 4, 3], batch_size=B, node_attrs={"x": x, "y": y},
                                 device=DEV)


def _model() -> OgbGAT:
    torch.manual_seed(0)
    return OgbGAT("gat", F_IN, 16, CLASSES, layers=3, heads=2, dropout=0.5, attn_drop=0.1, norm=False).to(DEV)


def _inputs() -> dict[str, torch.Tensor]:
    return {"seeds": torch.zeros(B, dtype=torch.long, device=DEV), "seed_valid": torch.ones(B, dtype=torch.bool,
                                                                                              device=DEV)}


def _seeds(sampler: StaticNeighborSampler, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out: list[tuple[torch.Tensor, torch.Tensor]] = []
    while len(out) < steps:  # 1000 seeds: the last batch of each epoch is padded
        out += list(sampler.epoch(torch.arange(1000, device=DEV), generator=torch.Generator(DEV).manual_seed(len(out))))
    return out[:steps]


def test_a_warm_sampled_step_does_not_sync() -> None:
    sampler, model = _sampler(), _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True, fused=True)
    loss_fn = sampled_loss(model, sampler)
    batches = _seeds(sampler, 3)

    def step(seeds: torch.Tensor, valid: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(seeds, valid).backward()
        opt.step()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Adam's note that capturable=True runs uncaptured here
        step(*batches[0])
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step(*batches[1])
            step(*batches[2])
        finally:
            torch.cuda.set_sync_debug_mode(0)


def _losses(captured: bool, steps: int, lr: float = 0.01) -> tuple[list[float], CapturedStep, OgbGAT]:
    sampler, model = _sampler(), _model()
    opt = torch.optim.Adam(model.parameters(), lr=lr, capturable=True, fused=True)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, model=model, inputs=_inputs(), capture=captured)
    batches = _seeds(sampler, steps)
    torch.cuda.manual_seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("error" if captured else "ignore", RuntimeWarning)  # a captured run must not fall back
        losses = [float(step(seeds=s, seed_valid=m)) for s, m in batches]
    return losses, step, model


def test_captured_sampled_steps_equal_eager_steps() -> None:
    eager, _, eager_model = _losses(False, 20)
    captured, step, step_model = _losses(True, 20)
    assert step.captured and step.replays == 20 - step.warmup
    torch.testing.assert_close(torch.tensor(captured), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(eager_model.named_parameters(), step_model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_each_replay_samples_new_neighbours() -> None:
    """lr 0 and the same seeds every step: replays differ only through their draws (neighbours and dropout)."""
    sampler, model = _sampler(), _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, capturable=True, fused=True)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, model=model, inputs=_inputs())
    model.eval()  # no dropout: the neighbours alone change the loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        losses = [float(step()) for _ in range(8)]
    assert step.captured
    replayed = losses[step.warmup:]
    assert len(set(replayed)) == len(replayed), replayed


def test_a_batch_of_another_shape_is_refused() -> None:
    sampler, model = _sampler(), _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True, fused=True)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, model=model, inputs=_inputs())
    with pytest.raises(ValueError, match=rf"seeds must have the captured shape \({B},\), got \({B + 1},\)"):
        step(seeds=torch.zeros(B + 1, dtype=torch.long, device=DEV))
    with pytest.raises(ValueError, match=rf"seeds must have the sampler's shape \(batch_size={B},\), got \(3,\)"):
        sampler.sample(torch.zeros(3, dtype=torch.long, device=DEV))


def test_triton_on_blocks_equals_reference_on_the_compact_subgraph() -> None:
    sampler = _sampler()
    batch = sampler.sample(torch.arange(B, device=DEV) * 7)
    torch.manual_seed(0)
    ours = GATConv(F_IN, 8, heads=4, add_self_loops=False, residual=True, backend="triton").to(DEV)
    ref = GATConv(F_IN, 8, heads=4, add_self_loops=False, residual=True, backend="reference").to(DEV)
    ref.load_state_dict(ours.state_dict())
    x = batch.attrs["x"]
    for blk in batch.blocks:
        xs = x[: blk.num_src].clone().requires_grad_()
        out = ours((xs, xs[: blk.num_rows]), blk.graph)[: blk.num_dst]
        grad = torch.randn_like(out)
        (out * grad).sum().backward()
        xr = x[: blk.num_src].clone().requires_grad_()
        want = ref((xr, xr[: blk.num_dst]), blk.edge_index[:, : int(blk.graph.offsets[blk.num_dst])])
        (want * grad).sum().backward()
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(xs.grad, xr.grad, rtol=1e-4, atol=1e-4)
        ours.zero_grad()
        ref.zero_grad()


def test_capture_ahead_captures_and_puts_the_state_back() -> None:
    """Before epoch 1: warm-up and capture on real batches, then parameters as initialised and Adam's state zero, in
    place (the replays read the same addresses); the next call replays and trains."""
    sampler, model = _sampler(), _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True, fused=True)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, model=model, inputs=_inputs())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert capture_ahead(step, _seeds(sampler, 10)) == step.warmup + 1
    assert step.captured
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(not bool(t.any()) for st in opt.state.values() for t in st.values())
    seeds, valid = _seeds(sampler, 1)[0]
    step(seeds=seeds, seed_valid=valid)
    assert step.replays == 2 and not torch.equal(model.convs[0].lin.weight, before["convs.0.lin.weight"])


def test_bench_training_sampled_rows_at_a_small_scale(tmp_path) -> None:
    """benchmarks/bench_training.py's sampled workloads at a small scale (products 0.01: 4 batches an epoch; papers100M
    0.001: 2), every variant, two whole epochs each: no error, bf16 (the default) recorded, both captured variants
    captured (PyG's step on the static blocks is capturable too), kernel shares in (0, 1], epoch times and their
    ratio, and a kernel profile per variant whose GEMMs are not the float32 ones (``f32f32`` / ``sgemm``) that an
    fp32 step runs."""
    import json

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import bench_training

    out = tmp_path / "b.json"
    bench_training.main(["--workloads", "products-sampled", "papers100m-sampled", "--scale", "0.01", "--papers-scale",
                         "0.001", "--epochs", "2", "--warmup", "5", "--repeats", "3", "--out", str(out)])
    records = json.loads(out.read_text())["records"]
    assert [(r["workload"], r["variant"]) for r in records] == [
        (w, v) for w in bench_training.SAMPLED for v in bench_training.VARIANTS]
    for r in records:
        assert "error" not in r and "skipped" not in r, r
        assert r["precision"] == "bf16" and r["feature_dtype"] == "float32"
        assert 0 < r["kernel_share"] <= 1 and r["epoch_seconds_extrapolated"] > 0
        assert r["captured"] == r["variant"].endswith("captured"), r
        assert len(r["epoch_seconds"]) == 2 and r["first_epoch_ratio"] > 0 and r["epoch_batches"] in (4, 2), r
        top = r["top_kernels"]
        assert 0 < len(top) <= 15 and all(k["ms"] > 0 and k["count"] > 0 for k in top), top
        assert r["kernels_sum_ms_per_batch"] >= sum(k["ms"] for k in top) * (1 - 1e-6)
        fp32_gemms = [k["name"] for k in top if "f32f32_f32f32" in k["name"] or "sgemm" in k["name"]]
        assert not fp32_gemms, (r["variant"], fp32_gemms)

def test_capture_ahead_puts_the_scheduler_and_the_learning_rate_back() -> None:
    """A scheduler stepped by the warm-up and capture: its state and the tensor learning rate are put back, in place,
    so that epoch 1's first replay trains at the first learning rate and the schedule starts over."""
    sampler, model = _sampler(), _model()
    lr = torch.tensor(0.01, device=DEV)
    opt = torch.optim.Adam(model.parameters(), lr=lr, capturable=True, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, model=model, inputs=_inputs(), scheduler=sched)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert capture_ahead(step, _seeds(sampler, 10)) == step.warmup + 1
    assert step.captured and opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(0.01)
    assert sched.last_epoch == 0
    seeds, valid = _seeds(sampler, 1)[0]
    step(seeds=seeds, seed_valid=valid)
    assert step.replays == 2 and float(lr) == pytest.approx(0.005)


def test_capture_ahead_without_model_puts_the_parameters_back() -> None:
    sampler, model = _sampler(), _model()
    # detached: a clone recorded by autograd would keep the parameters' gradient accumulators alive, made on the
    # default stream, where the captured backward may not accumulate ("would make the legacy stream depend on a
    # capturing blocking stream")
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True, fused=True)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, inputs=_inputs())  # no model=
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert capture_ahead(step, _seeds(sampler, 10)) == step.warmup + 1
    assert step.captured
    for k, v in model.named_parameters():
        assert torch.equal(v, before[k]), k


def test_out_of_range_seeds_on_cuda_are_padding_without_a_sync() -> None:
    """Negative and too-large seeds on CUDA: marked invalid in the batch (never node -1 served as valid, never an
    IndexError or a device-side assert about colptr), with no host sync; ``validate=True`` names ``seeds``."""
    sampler = _sampler()
    seeds = torch.arange(B, device=DEV)
    seeds[0], seeds[1], seeds[2] = -1, N, 10 * N
    sampler.sample(torch.arange(B, device=DEV))  # warm: first-call allocations out of the way
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        batch = sampler.sample(seeds)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    valid = batch.seed_valid.cpu()
    assert valid[:3].tolist() == [False, False, False] and bool(valid[3:].all())
    assert bool(((batch.n_id >= 0) & (batch.n_id < N)).all())
    assert not bool(batch.valid[B:B + 6 * B].view(B, 6)[:3].any())  # no children below an invalid seed
    with pytest.raises(ValueError, match=r"seeds must be node ids in \[0, num_nodes=5000\), got 3 outside"):
        sampler.sample(seeds, validate=True)


def test_a_cuda_index_this_machine_lacks_is_refused_naming_device() -> None:
    g = torch.Generator().manual_seed(0)
    colptr = torch.arange(0, 2 * N + 1, 2)
    row = torch.randint(0, N, (2 * N,), generator=g)
    with pytest.raises(ValueError, match=r"device must be"):
        StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4, device=f"cuda:{torch.cuda.device_count()}")


def test_a_class_id_past_the_logits_gives_a_nan_loss_without_a_sync() -> None:
    """masked_cross_entropy on CUDA: a kept row's class id past the logits (cross-entropy's device-side assert would
    end the context) gives NaN, no host sync; a masked row's bad id is ignored; the context works after."""
    from cudnn_gnn.apps.static_sampler import masked_cross_entropy

    logits = torch.randn(4, 3, device=DEV, requires_grad=True)
    target = torch.tensor([1, 3, 0, 2], device=DEV)
    keep = torch.tensor([True, False, True, True], device=DEV)
    torch.cuda.set_sync_debug_mode("error")
    try:
        bad, good = masked_cross_entropy(logits, target, torch.ones_like(keep)), masked_cross_entropy(logits, target, keep)
        bad.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isnan(bad) and torch.isfinite(good) and torch.isnan(logits.grad).all()
    want = torch.nn.functional.cross_entropy(logits[keep], target[keep])
    torch.testing.assert_close(good, want)
