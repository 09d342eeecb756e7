"""CPU tests of :mod:`cudnn_gnn.apps.capture`: the host-sync proxy over warmed-up training steps of our layers, the
eager fallback and its warning, argument errors, and the guards that refuse a stale replay. The capture itself
runs in tests/gpu/test_capture_gpu.py."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from cudnn_gnn.apps.capture import CapturedStep, host_syncs, sync_locations
from cudnn_gnn.apps.train import build_gat
from cudnn_gnn.layers import ToCscGraph

N, E, F_IN, CLASSES = 40, 240, 12, 4


def _problem(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=g)
    ei[:, :5] = torch.arange(5).repeat(2, 1)  # a few self-loops: the layers' self-loop rule has work to do
    return ei, torch.randn(N, F_IN, generator=g), torch.randint(0, CLASSES, (N,), generator=g), torch.arange(0, N, 3)


def _prepared(ei: torch.Tensor) -> object:
    return ToCscGraph()(Data(edge_index=ei, num_nodes=N)).csc_graph


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, graph: object, y: torch.Tensor,
                idx: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x, graph)[idx], y[idx])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0, foreach=True)
    opt.step()


@pytest.mark.parametrize("model_name", ["gat", "gatv2"])
def test_a_warm_step_on_a_prepared_graph_issues_no_host_sync(model_name: str) -> None:
    ei, x, y, idx = _problem()
    graph = _prepared(ei)
    torch.manual_seed(0)
    model = build_gat(model_name, F_IN, CLASSES, hidden=4, heads=2, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)  # fused: the step count stays a tensor
    _train_step(model, opt, x, graph, y, idx)  # warm-up: builds the plans (which may sync)
    assert host_syncs(lambda: _train_step(model, opt, x, graph, y, idx)) == []


def test_a_raw_edge_index_syncs_every_step_and_the_proxy_names_where() -> None:
    ei, x, y, idx = _problem()
    torch.manual_seed(0)
    model = build_gat("gat", F_IN, CLASSES, hidden=4, heads=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)
    _train_step(model, opt, x, ei, y, idx)
    found = host_syncs(lambda: _train_step(model, opt, x, ei, y, idx))
    assert found and all("aten::equal" in f and "_plan_cache.py" in f for f in found)


def test_the_proxy_flags_boolean_masks_item_and_unbounded_repeat_interleave() -> None:
    t, mask = torch.arange(6.0), torch.tensor([True, False] * 3)
    assert "boolean mask" in host_syncs(lambda: t[mask])[0]
    assert "boolean mask" in host_syncs(lambda: t.clone().__setitem__(mask, 0.0))[0]
    assert "_local_scalar_dense" in host_syncs(lambda: t.sum().item())[0]
    assert "repeat_interleave" in host_syncs(lambda: torch.repeat_interleave(torch.tensor([1, 2])))[0]
    assert host_syncs(lambda: torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)) == []
    assert host_syncs(lambda: t[torch.tensor([0, 2])]) == []


def _captured(**kwargs: object) -> tuple[CapturedStep, torch.nn.Module, dict[str, object]]:
    ei, x, y, idx = _problem()
    torch.manual_seed(0)
    model = build_gat("gat", F_IN, CLASSES, hidden=4, heads=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    inputs = {"x": x, "y": y, "graph": _prepared(ei)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[idx], y[idx]), optimizer=opt,
                            inputs=inputs, model=model, **kwargs)  # type: ignore[arg-type]
    return step, model, inputs


def test_on_cpu_the_step_warns_once_and_runs_eagerly_with_the_eager_result() -> None:
    ei, x, y, idx = _problem()
    graph = _prepared(ei)
    losses = []
    for use_step in (False, True):
        torch.manual_seed(0)
        model = build_gat("gat", F_IN, CLASSES, hidden=4, heads=2, dropout=0.5)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        if use_step:
            with pytest.warns(RuntimeWarning, match="not captured.*on cpu") as record:
                step = CapturedStep(lambda x, y, graph, m=model: F.cross_entropy(m(x, graph)[idx], y[idx]),
                                    optimizer=opt, inputs={"x": x, "y": y, "graph": graph}, model=model)
            assert len(record) == 1
            for _ in range(4):
                step()
            assert not step.captured and step.steps == 4
            losses.append(step.mean_loss())
        else:
            total = 0.0
            for _ in range(4):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x, graph)[idx], y[idx])
                loss.backward()
                opt.step()
                total += float(loss.detach())
            losses.append(total / 4)
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_capture_false_is_eager_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ei, x, y, idx = _problem()
        model = build_gat("gat", F_IN, CLASSES, hidden=4, heads=2)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        step = CapturedStep(lambda x: model(x, _prepared(ei)).sum(), optimizer=opt, inputs={"x": x}, capture=False)
        step()
    assert step.eager_reason == "capture=False"


def test_inputs_are_copied_into_the_static_tensors_and_wrong_shapes_are_refused() -> None:
    step, _, inputs = _captured()
    x = inputs["x"]
    new = torch.randn_like(x)  # type: ignore[arg-type]
    step(x=new)
    assert torch.equal(inputs["x"], new) and inputs["x"] is x  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"x must have the captured shape \(40, 12\), got \(3, 12\)"):
        step(x=torch.randn(3, F_IN))
    with pytest.raises(TypeError, match="x must have the captured dtype torch.float32, got torch.float64"):
        step(x=torch.randn(N, F_IN, dtype=torch.float64))
    with pytest.raises(ValueError, match="graph must be the graph the step was built with .*num_edges=240"):
        step(graph=_prepared(_problem(seed=1)[0]))
    with pytest.raises(TypeError, match="x must be a Tensor, got CscGraph"):
        step(x=inputs["graph"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nope must be one of the step's inputs"):
        step(nope=x)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"warmup": 1}, ValueError, "warmup must be"),
        ({"max_grad_norm": 0.0}, ValueError, "max_grad_norm must be a positive float"),
        ({"autocast_dtype": torch.float16}, NotImplementedError, "float16 needs a GradScaler"),
        ({"autocast_dtype": torch.float32}, TypeError, "autocast_dtype must be torch.bfloat16 or None"),
        ({"scheduler": object()}, TypeError, "scheduler must have a step"),
        ({"generators": [1]}, TypeError, "generators must hold torch.Generator"),
    ],
)
def test_argument_errors(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _captured(**kwargs)


def test_argument_errors_of_the_callable_optimizer_and_inputs() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        CapturedStep(3, optimizer=opt)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        CapturedStep(lambda: model.weight.sum(), optimizer=model)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"inputs\['x'\] must be a Tensor or a CscGraph"):
        CapturedStep(lambda x: model.weight.sum(), optimizer=opt, inputs={"x": [1]})  # type: ignore[dict-item]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = CapturedStep(lambda: model.weight, optimizer=opt)
    with pytest.raises(ValueError, match=r"loss_fn must return a 0-dim floating Tensor \(the loss\), got shape \(2, 2\)"):
        step()


def test_the_guard_names_what_changed_since_capture() -> None:
    step, model, _ = _captured()
    step()
    step._arm()  # what a capture records (CPU: no capture, so arm the guard by hand)
    step._check_guard()  # nothing changed: no error
    model.eval()
    with pytest.raises(RuntimeError, match="the model's training mode changed since capture"):
        step._check_guard()
    model.train()
    step.optimizer.param_groups[0]["lr"] = 0.5
    with pytest.raises(RuntimeError, match="the optimizer's hyperparameters changed since capture.*0.5"):
        step._check_guard()
    step.optimizer.param_groups[0]["lr"] = 0.01
    step._check_guard()
    conv = model.conv1  # type: ignore[attr-defined]
    conv.att_src = torch.nn.Parameter(conv.att_src.detach().clone())  # a new parameter the optimizer does not hold
    with pytest.raises(RuntimeError, match=r"the model's parameters \(identity, address or requires_grad\) changed.*att_src"):
        step._check_guard()


def test_train_on_cpu_runs_eagerly_with_or_without_the_capture_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from cudnn_gnn.apps.train import main

    for flag in ("--capture", "--no-capture"):
        assert main(["--device", "cpu", "--epochs", "1", "--no-progress", flag]) == 0
        assert "final: Cora gat seed 0" in capsys.readouterr().out


def test_sync_locations_names_each_place_once_and_passes_other_warnings_on() -> None:
    def msg(text: str, filename: str, lineno: int) -> warnings.WarningMessage:
        return warnings.WarningMessage(UserWarning(text), UserWarning, filename, lineno)

    sync = "called a synchronizing CUDA operation (Triggered internally at CUDAFunctions.cpp:150.)"
    caught = [msg(sync, "/x/layers/_plan_cache.py", 68), msg(sync, "/x/layers/_plan_cache.py", 68),
              msg(sync, "/site-packages/torch/autograd/graph.py", 824),
              msg("Synchronization debug mode is a prototype feature", "/t/torch/cuda/__init__.py", 1),
              msg("something else", "/x/model.py", 3)]
    with pytest.warns(UserWarning, match="something else") as record:
        found = sync_locations(caught)
    assert found == ["/x/layers/_plan_cache.py:68", "the backward"]
    assert [str(r.message) for r in record] == ["something else"]


def test_the_proxy_of_the_checked_warm_up_step_ignores_cpu_ops() -> None:
    from cudnn_gnn.apps.capture import _SyncProxy

    with _SyncProxy(cuda_only=True) as proxy:
        torch.arange(3).sum().item()  # a CPU op waits for no GPU
    assert proxy.found == []


def test_checking_a_compiled_function_for_syncs_leaves_it_compiled() -> None:
    """Dynamo skips a compiled function called under a dispatch mode and marks its code skipped for good unless the
    mode ignores compile internals: the sync check of a captured step's warm-up would have sent every later call of a
    ``torch.compile``d model eager, the captured step's included. Counted with a backend that counts its calls."""
    calls = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        def run(*args: object) -> object:
            calls.append(1)
            return gm(*args)
        return run

    torch._dynamo.reset()
    fn = torch.compile(lambda t: (t.sin() * 2).sum(), backend=counting)
    x = torch.randn(8)
    fn(x)
    found = host_syncs(lambda: fn(x).item())
    assert found and found[0].startswith("aten::_local_scalar_dense")  # the .item() outside the compiled code
    fn(x)
    assert len(calls) == 3  # the checked call and the one after it ran the compiled graph
    torch._dynamo.reset()


def test_the_eager_body_clips_steps_the_scheduler_and_autocasts_as_asked() -> None:
    """The body that a capture records, run eagerly on CPU: clipping, the scheduler and bf16 autocast as a plain
    loop would run them (the same parameters after three steps)."""
    ei, x, y, idx = _problem()
    graph = _prepared(ei)
    params = []
    for use_step in (False, True):
        torch.manual_seed(0)
        model = build_gat("gat", F_IN, CLASSES, hidden=4, heads=2, dropout=0.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # SGD: clipping shows in the update
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        if use_step:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                step = CapturedStep(lambda x, y, graph, m=model: F.cross_entropy(m(x, graph)[idx].float(), y[idx]),
                                    optimizer=opt, inputs={"x": x, "y": y, "graph": graph}, model=model,
                                    scheduler=sched, max_grad_norm=0.1, autocast_dtype=torch.bfloat16)
            for _ in range(3):
                step()
        else:
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                    loss = F.cross_entropy(model(x, graph)[idx].float(), y[idx])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.1, foreach=True)
                opt.step()
                sched.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(0.05 / 8)
        params.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*params):
        torch.testing.assert_close(b, a)


def test_the_optimizer_check_before_the_first_warm_up_step() -> None:
    """What the first warm-up step on CUDA asks of the optimizer (run here directly: the CPU step never captures)."""
    model = torch.nn.Linear(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fresh = torch.optim.Adam(model.parameters(), lr=0.1)
        step = CapturedStep(lambda: model.weight.sum(), optimizer=fresh)
        assert step._prepare_optimizer() is None and fresh.param_groups[0]["capturable"] is True  # switched
        used = torch.optim.Adam(model.parameters(), lr=0.1)
        model.weight.sum().backward()
        used.step()
        assert "capturable=False and state already" in CapturedStep(lambda: model.weight.sum(),
                                                                    optimizer=used)._prepare_optimizer()
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        reason = CapturedStep(lambda: model.weight.sum(), optimizer=opt, scheduler=sched)._prepare_optimizer()
        assert "['lr'] is a float" in reason
        opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1))
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        assert CapturedStep(lambda: model.weight.sum(), optimizer=opt, scheduler=sched)._prepare_optimizer() is None


def _armed_bn() -> tuple[CapturedStep, torch.nn.Module, torch.optim.Optimizer]:
    """A step with a buffer (BatchNorm), Adam state and a tensor learning rate, run twice on CPU and armed as a
    capture arms it (the guard's host logic; a real capture runs in tests/gpu/test_capture_gpu.py)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    x = torch.randn(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = CapturedStep(lambda x: model(x).square().mean(), optimizer=opt, inputs={"x": x}, model=model)
    step()
    step()
    step._arm()
    return step, model, opt


def test_a_resume_after_capture_is_copied_into_the_tensors_the_capture_reads() -> None:
    """optimizer.load_state_dict replaces every state tensor and a tensor lr; a new lr tensor or a number, and a
    reassigned buffer, too: the guard copies the new values into the captured tensors and puts those back, so that
    replays go on from the loaded values and state_dict() reads the tensors replays advance."""
    import copy

    step, model, opt = _armed_bn()
    p0 = opt.param_groups[0]["params"][0]
    captured = dict(opt.state[p0])
    lr = opt.param_groups[0]["lr"]
    ckpt = copy.deepcopy(opt.state_dict())
    ckpt["state"][0]["exp_avg"].fill_(3.0)
    ckpt["state"][0]["step"].fill_(7.0)
    ckpt["param_groups"][0]["lr"] = torch.tensor(0.5)
    ckpt["state"][0] = dict(reversed(list(ckpt["state"][0].items())))  # keys in another order: followed too
    opt.load_state_dict(ckpt)
    assert opt.state[p0]["exp_avg"] is not captured["exp_avg"]  # what torch does: new objects
    step._check_guard()
    assert all(opt.state[p0][k] is v for k, v in captured.items()) and opt.param_groups[0]["lr"] is lr
    assert bool((captured["exp_avg"] == 3.0).all()) and float(captured["step"]) == 7.0 and float(lr) == 0.5
    saved = opt.state_dict()
    assert saved["state"][0]["exp_avg"] is captured["exp_avg"]  # a later checkpoint saves what replays advance

    opt.param_groups[0]["lr"] = torch.tensor(0.25)  # a new tensor object
    step._check_guard()
    assert opt.param_groups[0]["lr"] is lr and float(lr) == 0.25
    opt.param_groups[0]["lr"] = 0.125  # a number where the capture reads a tensor (what a scheduler may write)
    step._check_guard()
    assert opt.param_groups[0]["lr"] is lr and float(lr) == 0.125

    bn = model[1]
    running_mean = bn.running_mean
    bn.running_mean = torch.full((4,), 5.0)
    step._check_guard()
    assert bn.running_mean is running_mean and bool((running_mean == 5.0).all())
    step._check_guard()  # everything back where the capture reads it: nothing changed


def test_what_a_replay_cannot_follow_is_refused_naming_recapture_and_nothing_is_copied() -> None:
    step, model, opt = _armed_bn()
    lr = opt.param_groups[0]["lr"]
    opt.param_groups[0]["lr"] = torch.tensor(0.5)
    model[1].running_mean = torch.zeros(5)  # another shape: refused, and the new lr is not copied either
    with pytest.raises(RuntimeError, match=r"the model's buffers changed since capture \(1.running_mean: "
                                           r"Tensor\(shape=\(4,\).*shape=\(5,\).*recapture\(\)"):
        step._check_guard()
    assert float(lr) == pytest.approx(0.01)
    model[1].running_mean = torch.zeros(4)
    opt.state.clear()
    with pytest.raises(RuntimeError, match=r"the optimizer's state changed since capture \(optimizer.state of "
                                           r"parameter 0 \(\(4, 3\)\): keys \['exp_avg', 'exp_avg_sq', 'step'\] at "
                                           r"capture, \[\] now.*recapture\(\)"):
        step._check_guard()
    step.recapture()
    step()  # eager on CPU; on CUDA the next calls warm up and capture again
    step, model, opt = _armed_bn()
    opt.param_groups[0]["weight_decay"] = 0.1
    with pytest.raises(RuntimeError, match=r"hyperparameters changed.*\['weight_decay'\]: 0 -> 0.1"):
        step._check_guard()


def test_freezing_or_unfreezing_after_capture_is_refused() -> None:
    step, model, _ = _captured()
    step()
    step._arm()
    model.conv1.requires_grad_(False)  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"the model's parameters .* changed since capture \('conv1\.\w+': "
                                           r"requires_grad True -> False, frozen or unfrozen.*recapture\(\)"):
        step._check_guard()
    model.conv1.requires_grad_(True)  # type: ignore[attr-defined]
    step._check_guard()
    step.modules = []  # without model=, the optimizer's parameters say it
    step._arm()
    model.conv2.bias.requires_grad_(False)  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"optimizer's parameters .* changed since capture \(parameter \d+: "
                                           r"requires_grad True -> False"):
        step._check_guard()


def test_the_guard_adds_no_host_sync() -> None:
    step, model, opt = _armed_bn()
    assert host_syncs(step._check_guard) == []
    opt.load_state_dict(__import__("copy").deepcopy(opt.state_dict()))
    model[1].running_var = torch.ones(4)
    assert host_syncs(step._check_guard) == []  # adopting copies on the device, reads nothing back


def test_optimizers_and_schedulers_a_step_cannot_run_are_refused_at_construction() -> None:
    model = torch.nn.Linear(3, 2)
    lr_sched = torch.optim.lr_scheduler

    def build(opt: torch.optim.Optimizer, sched: object = None, **kw: object) -> CapturedStep:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return CapturedStep(lambda: model.weight.sum(), optimizer=opt, scheduler=sched, **kw)  # type: ignore[arg-type]

    with pytest.raises(NotImplementedError, match="optimizer must step without arguments .* LBFGS, whose step needs "
                                                  "closure"):
        build(torch.optim.LBFGS(model.parameters()))
    adam = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1))
    before = model.weight.detach().clone()
    with pytest.raises(NotImplementedError, match=r"scheduler must step without arguments .* ReduceLROnPlateau, "
                                                  r"whose step needs metrics.*scheduler.step\(step.mean_loss\(\)\)"):
        build(adam, lr_sched.ReduceLROnPlateau(adam))
    assert torch.equal(model.weight, before)  # refused before any step
    other = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1))
    with pytest.raises(ValueError, match="scheduler must be bound to the step's optimizer, got a StepLR of another "
                                         "Adam"):
        build(adam, lr_sched.StepLR(other, step_size=1))
    with pytest.raises(ValueError, match="scheduler must be bound to the step's optimizer"):
        build(adam, lr_sched.ChainedScheduler([lr_sched.StepLR(other, step_size=1)], optimizer=other))
    with pytest.raises(NotImplementedError, match="scheduler must not cycle momentum .* OneCycleLR with "
                                                  "cycle_momentum=True.*cycle_momentum=False"):
        build(adam, lr_sched.OneCycleLR(adam, max_lr=0.1, total_steps=10))
    sgd = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.1), momentum=0.9)
    with pytest.raises(NotImplementedError, match="CyclicLR with cycle_momentum=True"):
        build(sgd, lr_sched.CyclicLR(sgd, 0.01, 0.1))
    with pytest.raises(NotImplementedError, match="OneCycleLR with cycle_momentum=True"):
        build(adam, lr_sched.SequentialLR(adam, [lr_sched.StepLR(adam, 1),
                                                 lr_sched.OneCycleLR(adam, max_lr=0.1, total_steps=10)],
                                          milestones=[2]))
    adam = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1))
    build(adam, lr_sched.OneCycleLR(adam, max_lr=0.1, total_steps=10, cycle_momentum=False))  # lr cycling: fine
    adam = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1))
    step = build(adam, lr_sched.OneCycleLR(adam, max_lr=0.1, total_steps=10), capture=False)  # eager: fine
    for _ in range(6):
        step()


def test_an_input_that_requires_grad_is_copied_as_data() -> None:
    step, _, inputs = _captured()
    t = torch.randn(N, F_IN, requires_grad=True)
    for _ in range(2):
        step(x=t)
    assert not inputs["x"].requires_grad and inputs["x"].grad_fn is None  # type: ignore[union-attr]
    assert t.grad is None and torch.equal(inputs["x"], t.detach())  # type: ignore[arg-type]


def test_a_loss_without_grad_and_inputs_that_are_no_keyword_mapping_are_refused_naming_the_argument() -> None:
    """A loss cut from the parameters fails in autograd ("element 0 of tensors does not require grad"), an int
    ``inputs`` with Python's "not iterable", an int key with "keywords must be strings": each names the argument."""
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"inputs must be a mapping \{name: Tensor or CscGraph\}.*got int"):
        CapturedStep(lambda: model.weight.sum(), optimizer=opt, inputs=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"inputs must be a mapping .*got list"):
        CapturedStep(lambda x: model.weight.sum(), optimizer=opt, inputs=[("x", torch.ones(1))])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"inputs must have str keys \(loss_fn's keyword names\), got the key 1"):
        CapturedStep(lambda **kw: model.weight.sum(), optimizer=opt, inputs={1: torch.ones(1)})  # type: ignore[dict-item]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for loss_fn in (lambda: model.weight.sum().detach(), lambda: torch.tensor(1.0)):
            step = CapturedStep(loss_fn, optimizer=opt)
            with pytest.raises(ValueError, match=r"loss_fn must return a loss that requires grad"):
                step()
