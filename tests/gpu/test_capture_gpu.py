"""Whole training steps captured in one CUDA graph (cudnn_gnn.apps.capture): a warmed step of our layers on a prepared
graph runs under ``set_sync_debug_mode("error")``, captures, and replays the eager steps from the same RNG state
(dropout included), with bf16 autocast, gradient clipping and a scheduler; stale replays are refused; the training
app with capture reaches eager's accuracy."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from cudnn_gnn.apps.capture import CapturedStep  # noqa: E402
from cudnn_gnn.apps.train import TrainConfig, build_gat, train_planetoid  # noqa: E402
from cudnn_gnn.layers import ToCscGraph  # noqa: E402

DEV = torch.device("cuda")
N, E, F_IN, CLASSES = 2_000, 20_000, 64, 7


def _problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, object]:
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, N, (2, E), generator=g)
    x = torch.randn(N, F_IN, generator=g).to(DEV)
    y = torch.randint(0, CLASSES, (N,), generator=g).to(DEV)
    idx = torch.arange(0, N, 4, device=DEV)
    graph = ToCscGraph()(Data(edge_index=ei.to(DEV), num_nodes=N)).csc_graph
    return x, y, idx, graph


def _model(model_name: str = "gat") -> torch.nn.Module:
    torch.manual_seed(0)
    return build_gat(model_name, F_IN, CLASSES, hidden=8, heads=8, dropout=0.6).to(DEV)


def _adam(model: torch.nn.Module, lr: float | torch.Tensor = 0.005) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4, capturable=True, fused=True)


def _eager_losses(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, x: torch.Tensor, y: torch.Tensor,
                  idx: torch.Tensor, graph: object, *, clip: float | None = None, sched: object = None,
                  dtype: torch.dtype | None = None) -> list[float]:
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if dtype is None else torch.autocast("cuda", dtype=dtype, cache_enabled=False):
            loss = F.cross_entropy(model(x, graph)[idx], y[idx])
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], clip, foreach=True)
        opt.step()
        if sched is not None:
            sched.step()  # type: ignore[attr-defined]
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("model_name", ["gat", "gatv2"])
def test_a_warm_step_on_a_prepared_graph_does_not_sync(model_name: str) -> None:
    x, y, idx, graph = _problem()
    model = _model(model_name)
    opt = _adam(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Adam's note that capturable=True runs uncaptured here
        _eager_losses(model, opt, 1, x, y, idx, graph)  # warm-up: plans, work lists, degree maxima
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x, graph)[idx], y[idx])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0, foreach=True)
                opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _run_pair(steps: int, *, model_name: str = "gat", clip: float | None = None, with_sched: bool = False,
              dtype: torch.dtype | None = None) -> tuple[list[float], list[float], CapturedStep, torch.nn.Module,
                                                          torch.nn.Module]:
    """The same training, eagerly and through CapturedStep, each from the same parameters and RNG state."""
    x, y, idx, graph = _problem()
    eager_model, step_model = _model(model_name), _model(model_name)
    lr = 0.005
    eager_opt = _adam(eager_model, torch.tensor(lr, device=DEV) if with_sched else lr)
    step_opt = _adam(step_model, torch.tensor(lr, device=DEV) if with_sched else lr)
    eager_sched = torch.optim.lr_scheduler.StepLR(eager_opt, step_size=2, gamma=0.5) if with_sched else None
    step_sched = torch.optim.lr_scheduler.StepLR(step_opt, step_size=2, gamma=0.5) if with_sched else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cuda.manual_seed(1234)
        eager = _eager_losses(eager_model, eager_opt, steps, x, y, idx, graph, clip=clip, sched=eager_sched,
                              dtype=dtype)
    step = CapturedStep(lambda x, y, graph: F.cross_entropy(step_model(x, graph)[idx], y[idx]), optimizer=step_opt,
                        inputs={"x": x, "y": y, "graph": graph}, model=step_model, scheduler=step_sched,
                        max_grad_norm=clip, autocast_dtype=dtype)
    torch.cuda.manual_seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an eager fallback fails the test
        captured = [float(step()) for _ in range(steps)]
    return eager, captured, step, eager_model, step_model


@pytest.mark.parametrize("model_name", ["gat", "gatv2"])
def test_replays_equal_eager_steps_with_dropout(model_name: str) -> None:
    eager, captured, step, eager_model, step_model = _run_pair(8, model_name=model_name)
    assert step.captured and step.replays == 8 - step.warmup
    torch.testing.assert_close(torch.tensor(captured), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(eager_model.named_parameters(), step_model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


def test_each_replay_draws_fresh_dropout_masks() -> None:
    """With a learning rate of 0 the parameters never change, so replays differ only through their dropout masks: a
    graph that replayed one frozen mask would return one loss over and over."""
    x, y, idx, graph = _problem()
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, capturable=True, fused=True)
    step = CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[idx], y[idx]), optimizer=opt,
                        inputs={"x": x, "y": y, "graph": graph}, model=model)
    losses = [float(step()) for _ in range(8)]
    assert step.captured
    replayed = losses[step.warmup:]
    assert len(set(replayed)) == len(replayed), replayed
    model.eval()  # no dropout: every loss is the same (the parameters did not move)
    with torch.no_grad():
        a, b = (float(F.cross_entropy(model(x, graph)[idx], y[idx])) for _ in range(2))
    assert a == b


def test_replays_with_clipping_and_a_scheduler_equal_eager_steps() -> None:
    eager, captured, step, eager_model, step_model = _run_pair(8, clip=0.5, with_sched=True)
    assert step.captured
    torch.testing.assert_close(torch.tensor(captured), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    assert float(step.optimizer.param_groups[0]["lr"]) == pytest.approx(0.005 * 0.5 ** 4)


def test_replays_under_bf16_autocast_equal_eager_steps() -> None:
    eager, captured, step, _, _ = _run_pair(6, dtype=torch.bfloat16)
    assert step.captured
    torch.testing.assert_close(torch.tensor(captured), torch.tensor(eager), rtol=2e-2, atol=2e-2)


def test_loss_sum_is_read_back_every_n_steps() -> None:
    eager, captured, step, _, _ = _run_pair(6)
    assert step.mean_loss() == pytest.approx(sum(captured) / 6, rel=1e-5)
    assert step.mean_loss() != step.mean_loss()  # nan: nothing since the reset


def test_a_raw_edge_index_falls_back_to_eager_naming_the_plan_cache() -> None:
    x, y, idx, graph = _problem()
    ei = graph.edge_index()  # type: ignore[attr-defined]
    model = _model()
    step = CapturedStep(lambda x, ei: F.cross_entropy(model(x, ei)[idx], y[idx]), optimizer=_adam(model),
                        inputs={"x": x, "ei": ei}, model=model)
    with pytest.warns(RuntimeWarning, match=r"not captured.*aten::equal at .*_plan_cache\.py.*ToCscGraph"):
        for _ in range(4):
            step()
    assert not step.captured and step.steps == 4


def test_changed_parameters_or_mode_refuse_the_replay() -> None:
    _, _, step, _, model = _run_pair(4)
    model.eval()
    with pytest.raises(RuntimeError, match="training mode changed since capture"):
        step()
    model.train()
    step()
    conv = model.conv1  # type: ignore[attr-defined]
    conv.att_src = torch.nn.Parameter(conv.att_src.detach().clone())
    with pytest.raises(RuntimeError, match=r"parameters \(identity, address or requires_grad\) changed.*att_src"):
        step()


def test_another_graph_or_shape_is_refused() -> None:
    _, _, step, _, _ = _run_pair(4)
    other = ToCscGraph()(Data(edge_index=torch.randint(0, N, (2, 100), device=DEV), num_nodes=N)).csc_graph
    with pytest.raises(ValueError, match="graph must be the graph the step was built with"):
        step(graph=other)
    with pytest.raises(ValueError, match=r"x must have the captured shape \(2000, 64\), got \(10, 64\)"):
        step(x=torch.randn(10, F_IN, device=DEV))


def test_cora_training_with_capture_reaches_eager_accuracy() -> None:
    accs = {}
    for capture in (False, True):
        res = [train_planetoid(TrainConfig(device="cuda", seed=s, epochs=300, progress=False, capture=capture))
               for s in range(3)]
        assert all(r["captured"] == capture for r in res)
        accs[capture] = sum(r["test_acc"] for r in res) / len(res)
    assert accs[True] > 0.78
    assert abs(accs[True] - accs[False]) < 0.02, accs


def test_the_train_command_captures_by_default_on_cuda(tmp_path) -> None:
    import json

    from cudnn_gnn.apps.train import main

    for flag, expected in (([], True), (["--no-capture"], False)):
        out = tmp_path / f"{expected}.json"
        assert main(["--device", "cuda", "--epochs", "8", "--no-progress", "--json", str(out), *flag]) == 0
        assert json.loads(out.read_text())["captured"] is expected


def test_bench_training_times_the_captured_step(tmp_path) -> None:
    import json
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import bench_training

    out = tmp_path / "t.json"
    bench_training.main(["--workloads", "cora", "--variants", "pyg-eager", "ours-eager", "ours-captured",
                         "--repeats", "5", "--out", str(out)])
    records = {r["variant"]: r for r in json.loads(out.read_text())["records"]}
    assert all("error" not in r for r in records.values()), records
    assert records["ours-captured"]["captured"] is True
    assert records["ours-captured"]["peak_memory_bytes"] > 0


def test_a_compiled_model_stays_compiled_in_the_captured_step() -> None:
    """A ``torch.compile``d model (Inductor) in the step: the checked warm-up step leaves it compiled, so the capture
    records the compiled kernels; the replays equal eager steps of the compiled model from the same state (tolerance:
    two compiled graphs, one captured, may order float sums differently)."""
    x, y, idx, graph = _problem()
    torch._dynamo.reset()
    calls = []
    inductor = torch._inductor.compile_fx.compile_fx

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        compiled = inductor(gm, example_inputs)

        def run(*args: object) -> object:
            calls.append(1)
            return compiled(*args)
        return run

    losses = []
    for use_step in (False, True):
        model = _model()
        model.eval()  # no dropout: compiled draws differ from the capture's replays only by RNG offsets
        fwd = torch.compile(model, backend=counting)
        opt = _adam(model)
        if use_step:
            calls.clear()
            step = CapturedStep(lambda x, y, graph, fwd=fwd: F.cross_entropy(fwd(x, graph)[idx], y[idx]), optimizer=opt,
                                inputs={"x": x, "y": y, "graph": graph}, model=model)
            got = [float(step()) for _ in range(6)]
            assert step.captured and step.eager_reason is None
            assert len(calls) >= 4  # three warm-up steps and the capture ran the compiled graph (replays run none)
        else:
            got = _eager_losses(fwd, opt, 6, x, y, idx, graph)  # type: ignore[arg-type]
        losses.append(got)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=1e-5)


def test_host_syncs_names_copies_to_the_host_but_not_non_blocking_ones() -> None:
    from cudnn_gnn.apps.capture import host_syncs

    t = torch.ones(4, device=DEV)
    assert "copies a CUDA tensor to the host" in host_syncs(lambda: t.cpu())[0]
    assert "copies a CUDA tensor to the host" in host_syncs(lambda: torch.empty(4).copy_(t))[0]
    pinned = torch.empty(4, pin_memory=True)
    assert host_syncs(lambda: pinned.copy_(t, non_blocking=True)) == []
    torch.cuda.synchronize()


def _plain_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                idx: torch.Tensor, graph: object, **kwargs: object) -> CapturedStep:
    """A captured step on the problem, warmed up and captured (one replay run); any fallback fails the test."""
    step = CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[idx], y[idx]), optimizer=opt,
                        inputs={"x": x, "y": y, "graph": graph}, model=model, **kwargs)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(step.warmup + 1):
            step()
    assert step.captured and step.replays == 1
    return step


def test_a_resume_after_capture_goes_on_from_the_loaded_state() -> None:
    """A checkpoint taken after capture (deep-copied, as torch.save / torch.load give new tensors), training on, then
    model.load_state_dict and optimizer.load_state_dict: the replays go on from the loaded state (the losses and
    parameters of the replays that followed the checkpoint), and a later state_dict() saves a step count that
    advanced. No dropout, so that both runs draw nothing."""
    import copy

    x, y, idx, graph = _problem()
    torch.manual_seed(0)
    model = build_gat("gat", F_IN, CLASSES, hidden=8, heads=8, dropout=0.0).to(DEV)
    opt = _adam(model, torch.tensor(0.005, device=DEV))
    step = _plain_step(model, opt, x, y, idx, graph)
    step()
    ckpt = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict()})
    at_ckpt = int(ckpt["opt"]["state"][0]["step"])
    straight = [float(step()) for _ in range(4)]
    params_straight = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        step()  # training goes on past the checkpoint
    model.load_state_dict(ckpt["model"])  # copied into the parameters in place
    opt.load_state_dict(copy.deepcopy(ckpt["opt"]))  # new state tensors and a new lr tensor
    resumed = [float(step()) for _ in range(4)]
    assert step.replays == 1 + 1 + 4 + 3 + 4  # replayed throughout, nothing recaptured
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(straight), rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(model.named_parameters(), params_straight):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    steps_saved = {int(s["step"]) for s in opt.state_dict()["state"].values()}
    assert steps_saved == {at_ckpt + 4}, steps_saved


def test_a_new_lr_tensor_after_capture_is_what_replays_use() -> None:
    x, y, idx, graph = _problem()
    model = _model()
    opt = _adam(model, torch.tensor(0.005, device=DEV))
    step = _plain_step(model, opt, x, y, idx, graph)
    captured_lr = opt.param_groups[0]["lr"]
    opt.param_groups[0]["lr"] = torch.tensor(0.0, device=DEV)  # a new object: a learning rate of 0 moves nothing
    before = [p.detach().clone() for p in model.parameters()]
    step()
    assert opt.param_groups[0]["lr"] is captured_lr and float(captured_lr) == 0.0
    for a, b in zip(model.parameters(), before):
        assert torch.equal(a, b)
    opt.param_groups[0]["lr"] = 0.005  # a number, as a float-writing scheduler would: copied into the tensor
    step()
    assert float(captured_lr) == pytest.approx(0.005)
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), before))


def test_a_reassigned_buffer_after_capture_is_what_replays_update() -> None:
    """BatchNorm's ``running_mean = ...`` after capture: the replay updates the new values (copied into the buffer
    the graph writes, which is put back), not the old ones."""
    x, y, idx, _ = _problem()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(F_IN, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, CLASSES)).to(DEV)
    opt = _adam(model)
    step = CapturedStep(lambda x, y: F.cross_entropy(model(x)[idx], y[idx]), optimizer=opt, inputs={"x": x, "y": y},
                        model=model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(step.warmup + 1):
            step()
    assert step.captured
    bn = model[1]
    captured = bn.running_mean
    bn.running_mean = torch.full((16,), 7.0, device=DEV)
    with torch.no_grad():
        batch_mean = model[0](x).mean(0)  # the parameters the next replay's forward uses
    step()
    assert bn.running_mean is captured
    torch.testing.assert_close(captured, 0.9 * 7.0 + 0.1 * batch_mean, rtol=1e-4, atol=1e-4)


def test_freezing_or_cleared_optimizer_state_after_capture_is_refused_and_recapture_runs() -> None:
    x, y, idx, graph = _problem()
    model = _model()
    opt = _adam(model)
    step = _plain_step(model, opt, x, y, idx, graph)
    model.conv1.requires_grad_(False)  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"requires_grad True -> False.*recapture\(\)"):
        step()
    model.conv1.requires_grad_(True)  # type: ignore[attr-defined]
    step()
    opt.state.clear()
    with pytest.raises(RuntimeError, match=r"the optimizer's state changed since capture.*recapture\(\)"):
        step()
    step.recapture()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(step.warmup + 2):
            step()
    assert step.captured and opt.state  # the warm-up made the state anew


def test_an_input_that_requires_grad_is_copied_as_data() -> None:
    x, y, idx, graph = _problem()
    model = _model()
    step = CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[idx], y[idx]), optimizer=_adam(model),
                        inputs={"x": x, "y": y, "graph": graph}, model=model)
    t = x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(step.warmup + 3):
            step(x=t)
    assert step.captured and step.replays == 3
    assert t.grad is None and not x.requires_grad


def test_one_cycle_lr_without_momentum_cycling_replays_like_eager() -> None:
    x, y, idx, graph = _problem()
    models = [_model(), _model()]
    opts = [_adam(m, torch.tensor(0.001, device=DEV)) for m in models]
    scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=20, cycle_momentum=False)
              for o in opts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cuda.manual_seed(1234)
        eager = _eager_losses(models[0], opts[0], 8, x, y, idx, graph, sched=scheds[0])
    step = CapturedStep(lambda x, y, graph: F.cross_entropy(models[1](x, graph)[idx], y[idx]), optimizer=opts[1],
                        inputs={"x": x, "y": y, "graph": graph}, model=models[1], scheduler=scheds[1])
    torch.cuda.manual_seed(1234)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        captured = [float(step()) for _ in range(8)]
    assert step.captured
    torch.testing.assert_close(torch.tensor(captured), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    assert float(opts[1].param_groups[0]["lr"]) == pytest.approx(float(opts[0].param_groups[0]["lr"]))
