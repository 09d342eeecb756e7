"""Whole training steps captured in one CUDA graph: :class:`CapturedStep`, and :func:`host_syncs`, a CPU check
that a step issues no op that would synchronise with the host on CUDA.

A full-graph GAT step on a small graph (Cora: 2 layers, dropout, ELU, cross-entropy, backward, Adam) is host
time: each of its few hundred kernels takes longer to launch than to run. Captured once in a
:class:`torch.cuda.CUDAGraph` and replayed, the step costs one launch. What a step needs to be capturable:

- **no host sync**: nothing reads a device value on the host (``.item()``, ``bool(t)``, ``torch.equal``,
  ``nonzero``, boolean-mask indexing, ``bincount``, ``repeat_interleave`` without ``output_size``): capture records
  kernels, it does not run them, so there is no value to read. On the layers' path that means a graph prepared
  once: a :class:`~cudnn_gnn.CscGraph` through :class:`~cudnn_gnn.layers.ToCscGraph` (self-loops included), not a
  raw ``edge_index``, whose cached plan is checked against its values on every forward (``torch.equal``, a sync);
  and the loss on an index tensor (``out[train_idx]``), not on a boolean mask.
- **static shapes and memory**: the graph replays the same kernels on the same addresses. Inputs are copied into
  the tensors the step was captured with (:meth:`CapturedStep.__call__` takes new values of the same shape);
  another graph, other parameters or another shape need another capture.
- **device-side optimizer state**: Adam/AdamW with ``capturable=True`` (and ``fused=True`` for speed) keep their
  step count on the GPU; a learning rate a scheduler changes must be a tensor (``lr=torch.tensor(0.005)``) so that
  the replayed kernels read its new value.
- **RNG through torch's CUDA generator**: ``torch.cuda.graph`` registers the default generator, so each replay
  draws fresh dropout masks (the same ones an eager step from the same generator state draws).

:class:`CapturedStep` does the bookkeeping: warm-up steps on a side stream (the first builds per-graph caches),
a check of the last warm-up step for host syncs (``torch.cuda.set_sync_debug_mode``), capture of forward,
backward, gradient clipping, optimizer step and loss accumulation with a private memory pool, replay, and host-side
guards (identities, no device read) before each replay: a resume (``optimizer.load_state_dict``, a new ``lr`` tensor
or number, a reassigned buffer) is copied into the tensors the graph reads; a replay whose graph, parameters,
``requires_grad`` flags, training mode, Python hyperparameters or optimizer-state layout changed is refused. Where
a step cannot be captured (CPU tensors, a sync in the step, a failed capture) it warns once, naming why, and runs
the same step eagerly: same math, same results.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, NoReturn

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from cudnn_gnn._validation import check_bool, check_int
from cudnn_gnn.graph import CscGraph

__all__ = ["CapturedStep", "host_syncs", "sync_locations", "SYNC_OPS"]

_aten = torch.ops.aten

SYNC_OPS: dict[Any, str] = {
    _aten._local_scalar_dense.default: "reads a tensor's value on the host (.item(), int(t), float(t), bool(t))",
    _aten.item.default: "reads a tensor's value on the host (.item())",
    _aten.is_nonzero.default: "reads a tensor's value on the host (bool(t), if t:)",
    _aten.equal.default: "torch.equal reads its answer on the host",
    _aten.allclose.default: "torch.allclose reads its answer on the host",
    _aten.nonzero.default: "nonzero has a data-dependent size",
    _aten.masked_select.default: "masked_select has a data-dependent size",
    _aten.bincount.default: "bincount reads the largest value on the host (CUDA)",
    _aten.unique_consecutive.default: "unique_consecutive has a data-dependent size",
    _aten._unique2.default: "unique has a data-dependent size",
    _aten.unique_dim.default: "unique has a data-dependent size",
}
"""The ATen ops :func:`host_syncs` flags on any device, each with why it syncs on CUDA. Besides these it flags
``repeat_interleave`` without ``output_size``, indexing with a boolean mask (``t[mask]``, ``t[mask] = v``) and, on
CUDA tensors, copies to the host."""

_INDEX_OPS = (_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default, _aten._index_put_impl_.default)


def _user_frame() -> str:
    """``file:line`` of the innermost Python frame outside torch and this module: where a flagged op was called."""
    for frame in reversed(traceback.extract_stack()):
        name = frame.filename.replace("\\", "/")
        if "/torch/" in name or name.endswith("cudnn_gnn/apps/capture.py"):
            continue
        return f"{name}:{frame.lineno}"
    return "<unknown>"


def _to_host(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether an op copies a CUDA tensor into host memory and waits for it (a sync): ``_to_copy`` to the CPU or
    ``copy_`` into a CPU tensor, unless ``non_blocking``."""
    if func is _aten._to_copy.default:
        device = kwargs.get("device")
        return bool(args) and isinstance(args[0], Tensor) and args[0].is_cuda and device is not None \
            and torch.device(device).type == "cpu" and not kwargs.get("non_blocking", False)
    if func is _aten.copy_.default and len(args) >= 2:
        dst, src = args[0], args[1]
        blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        return isinstance(dst, Tensor) and isinstance(src, Tensor) and src.is_cuda and dst.device.type == "cpu" \
            and blocking
    return False


class _SyncProxy(TorchDispatchMode):
    """Records the ops of :data:`SYNC_OPS` (and boolean-mask indexing, ``repeat_interleave`` without
    ``output_size``) that run under it, with where they were called; runs every op unchanged."""

    def __init__(self, *, cuda_only: bool = False) -> None:
        super().__init__()
        self.found: list[str] = []
        self.cuda_only = cuda_only  # flag only ops on CUDA tensors (a CPU op never waits for the GPU)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let ``torch.compile``d code inside the step run compiled under this mode. Otherwise Dynamo skips a
        compiled function called under a dispatch mode and marks its code skipped for good: every later call,
        the captured step's included, would run eagerly. The mode then sees the ops the compiled code calls
        through ATen (its generated kernels not); torch's sync debug mode still sees every sync."""
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.cuda_only and not any(isinstance(a, Tensor) and a.is_cuda for a in args):
            return func(*args, **kwargs)
        why = SYNC_OPS.get(func)
        if why is None and func is _aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
            why = "repeat_interleave without output_size has a data-dependent size"
        if why is None and _to_host(func, args, kwargs):
            why = "copies a CUDA tensor to the host (.cpu(), .tolist(), .numpy())"
        if why is None and func in _INDEX_OPS:
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, Tensor) and i.dtype == torch.bool for i in indices or ()):
                why = "indexing with a boolean mask has a data-dependent size (index with an index tensor instead)"
        if why is not None:
            self.found.append(f"{func.name()} at {_user_frame()}: {why}")
        return func(*args, **kwargs)


def host_syncs(fn: Callable[[], Any]) -> list[str]:
    """Run ``fn()`` and return every op it ran that synchronises with the host on CUDA, as
    ``"<op> at <file:line>: <why>"`` (empty: none). Works on any device, CPU included, so a training step can be
    checked for capturability where no GPU is: run it once to warm its caches, then check the next one.

    What it cannot see: copies to the host (``.cpu()``, ``.tolist()`` of a CPU tensor is no copy) and syncs inside
    GPU-only code paths (a backend that runs only on CUDA); ``torch.cuda.set_sync_debug_mode("error")`` catches
    those on a GPU.

    Example:
        >>> import torch
        >>> host_syncs(lambda: torch.arange(4).sum().item())[0].split(" at ")[0]
        'aten::_local_scalar_dense'
    """
    proxy = _SyncProxy()
    with proxy:
        fn()
    return proxy.found


def _parameters(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


_PLAIN = (bool, int, float, str, type(None))


def _fingerprint(value: Any) -> Any:
    """A hyperparameter or optimizer-state value as a replay sees it, comparable with ``==`` on the host without
    reading a device value: a tensor by identity (its value is read on replay), a tuple or list element-wise, the
    rest by value (baked into the capture)."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, Tensor):
        return ("tensor", id(value))
    if isinstance(value, (tuple, list)):
        return tuple(_fingerprint(v) for v in value)
    return value


def _hyperparameters(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], ...]:
    """Per group, every setting but its parameters, fingerprinted (:func:`_fingerprint`)."""
    return tuple({k: _fingerprint(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups)


def _state(optimizer: torch.optim.Optimizer, params: list[Tensor]) -> tuple[Any, ...]:
    """Per parameter of the optimizer, its state's keys and values fingerprinted (None: no state)."""
    get = optimizer.state.get  # not indexing: state is a defaultdict, and indexing it would create an entry
    return tuple((tuple(st), tuple(map(_fingerprint, st.values()))) if (st := get(p)) else None for p in params)


class _Stale(Exception):
    """A change since capture that a replay cannot follow; its message is the detail."""


def _adopted(captured: Any, now: Any, copies: list[tuple[Tensor, Any]]) -> Any:
    """The value to put back where ``now`` replaced the ``captured`` one: a captured tensor itself, with ``now``'s
    value queued in ``copies`` (a tensor of its shape, or a number for a one-element tensor), element-wise in a
    tuple or list, and ``now`` where it is what was captured. Raises :class:`_Stale` where a replay cannot follow."""
    if isinstance(captured, Tensor):
        if now is captured:
            return captured
        if isinstance(now, Tensor) and now.shape == captured.shape:
            copies.append((captured, now))
            return captured
        if isinstance(now, (int, float)) and not isinstance(now, bool) and captured.numel() == 1:
            copies.append((captured, now))
            return captured
        raise _Stale(f"{_describe(captured)} -> {_describe(now) if isinstance(now, Tensor) else repr(now)}")
    if isinstance(captured, (tuple, list)) and isinstance(now, (tuple, list)) and len(captured) == len(now):
        values = [_adopted(c, n, copies) for c, n in zip(captured, now)]
        return now if all(v is n for v, n in zip(values, now)) else type(now)(values)
    if _fingerprint(now) != _fingerprint(captured):
        raise _Stale(f"{captured!r} -> {now!r}")
    return now


def _required_step_arguments(obj: Any) -> list[str]:
    """The names of the arguments of ``obj.step`` that have no default, read from its class (an instance's ``step``
    may be wrapped, e.g. by a scheduler's call counter); empty where the signature cannot be read."""
    try:
        params = list(inspect.signature(type(obj).step).parameters.values())[1:]  # after self
    except (AttributeError, TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [q.name for q in params if q.kind in kinds and q.default is inspect.Parameter.empty]


def _schedulers(scheduler: Any) -> list[Any]:
    """``scheduler`` and the schedulers it chains (``SequentialLR``, ``ChainedScheduler``), depth first."""
    out = [scheduler]
    for inner in getattr(scheduler, "_schedulers", None) or ():
        out.extend(_schedulers(inner))
    return out


def _check_optimizer_and_scheduler(optimizer: torch.optim.Optimizer, scheduler: Any, capture: bool) -> None:
    """Refuse, before any step, an optimizer or scheduler that :class:`CapturedStep` cannot run (eagerly or, with
    ``capture``, captured): a step that needs a closure, a scheduler step that needs arguments, a scheduler bound to
    another optimizer, a scheduler that writes new Python momenta every step."""
    need = _required_step_arguments(optimizer)
    if need:
        raise NotImplementedError(
            f"optimizer must step without arguments to run in a CapturedStep, got {type(optimizer).__name__}, whose "
            f"step needs {', '.join(need)} (it re-evaluates the loss); train with it in your own loop")
    if scheduler is None:
        return
    need = _required_step_arguments(scheduler)
    if need:
        raise NotImplementedError(
            f"scheduler must step without arguments to run in a CapturedStep, got {type(scheduler).__name__}, whose "
            f"step needs {', '.join(need)}; pass no scheduler= and step it yourself between calls (e.g. "
            "scheduler.step(step.mean_loss())), with a tensor lr it changes in place")
    for s in _schedulers(scheduler):
        bound = getattr(s, "optimizer", optimizer)
        if bound is not optimizer:
            raise ValueError(f"scheduler must be bound to the step's optimizer, got a {type(s).__name__} of another "
                             f"{type(bound).__name__}")
        if capture and getattr(s, "cycle_momentum", False):
            raise NotImplementedError(
                f"scheduler must not cycle momentum in a captured step, got {type(s).__name__} with "
                "cycle_momentum=True: it writes a new Python momentum (betas[0]) every step, which a captured "
                "graph has baked in; build it with cycle_momentum=False (its learning rate still cycles), or pass "
                "capture=False")


def _describe(value: Any) -> str:
    if isinstance(value, CscGraph):
        return (f"CscGraph(num_src_nodes={value.num_src_nodes}, num_dst_nodes={value.num_dst_nodes}, "
                f"num_edges={value.num_edges})")
    if isinstance(value, Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    return type(value).__name__


_SYNC_MESSAGE = "called a synchronizing CUDA operation"
_CAPTURABLE_WARNING = "constructed with capturable=True"
_PROTOTYPE_NOTE = "Synchronization debug mode is a prototype feature"


def sync_locations(caught: list[warnings.WarningMessage]) -> list[str]:
    """Where the warnings of ``torch.cuda.set_sync_debug_mode("warn")`` in ``caught`` were raised (``file:line`` of
    the Python call, or "the backward" for one raised in autograd's engine, which reports them from its own call),
    each once, in order; the other warnings are raised again (except the mode's own prototype note)."""
    found: list[str] = []
    for w in caught:
        if _SYNC_MESSAGE in str(w.message):
            where = "the backward" if "/torch/autograd/" in w.filename.replace("\\", "/") else f"{w.filename}:{w.lineno}"
            if where not in found:
                found.append(where)
        elif _PROTOTYPE_NOTE not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return found


class CapturedStep:
    """One training step (forward, backward, optional gradient clipping, optimizer step), captured whole in a CUDA
    graph after warm-up and replayed on every later call; eager, with a one-line warning naming why, where it
    cannot be captured.

    ``loss_fn(**inputs)`` computes the loss, a 0-dim floating tensor (forward only: this class runs the backward).
    Every call of the step runs exactly one training step: the first ``warmup`` calls eagerly on a side stream (the
    first builds per-graph caches, the last is checked for host syncs), the next one captures the step and replays
    it, every later one replays it. The losses are summed on the device; :meth:`mean_loss` reads them back (one
    sync, as often as the caller wants).

    Args:
        loss_fn: ``loss_fn(**inputs) -> Tensor`` (0-dim), the forward and the loss of one step. It must read the
            step's tensors from ``inputs`` (or from tensors it closes over that never change address) and index
            with index tensors, not boolean masks.
        optimizer: the optimizer stepped after the backward. Adam / AdamW (any optimizer with a ``capturable``
            option) must have ``capturable=True`` on CUDA; one with no state yet is switched to it. A learning
            rate changed after capture (by a scheduler or by hand) must be a tensor on the device,
            ``lr=torch.tensor(0.005, device="cuda")``.
        inputs: the step's input tensors by name (static: later values are copied into them, see
            :meth:`__call__`) and the graphs it runs on (:class:`~cudnn_gnn.CscGraph`, kept by identity).
        model: the module (or modules) trained: their parameters' identity and addresses and their training
            modes are recorded at capture and checked before each replay.
        scheduler: a learning-rate scheduler of ``optimizer`` stepped after every step (``scheduler.step()``, on the
            host, between replays); it needs tensor learning rates. One whose ``step`` needs arguments
            (``ReduceLROnPlateau``) is refused (step it yourself), and so, when capturing, is momentum cycling
            (``OneCycleLR`` / ``CyclicLR`` need ``cycle_momentum=False``).
        max_grad_norm: clip the gradients' total 2-norm to this (``clip_grad_norm_(foreach=True)``, no sync).
        autocast_dtype: ``torch.bfloat16`` to run ``loss_fn`` under ``torch.autocast`` (weight cache off, as
            graphs need), or None. float16 needs a ``GradScaler``, whose step reads a flag on the host: refused.
        warmup: eager steps before capture, >= 2 (the first builds caches, which may sync; the last is checked).
        capture: False runs every step eagerly (the same step, no warning).
        generators: CUDA generators other than the default one that the step draws from (registered with the
            graph, so that each replay advances them too).

    Raises:
        TypeError / ValueError: a bad argument, named (a scheduler bound to another optimizer included).
        NotImplementedError: ``autocast_dtype=torch.float16``; an optimizer whose ``step`` needs a closure (LBFGS);
            a scheduler whose ``step`` needs arguments, or that cycles momentum in a captured step.

    After capture, replays read the tensors the capture recorded. Replacing them is followed: an optimizer's state or
    tensor hyperparameters loaded or replaced, a buffer reassigned, are copied into the recorded tensors (which are
    put back in their place). What a replay cannot follow is refused with a ``RuntimeError`` naming what changed and
    :meth:`recapture`: new parameters, ``requires_grad`` changed (freezing), another training mode, a Python
    hyperparameter, optimizer state gone (``optimizer.state.clear()``) or of another shape.

    Example (on CUDA)::

        data = ToCscGraph()(data.to("cuda"))
        idx = data.train_mask.nonzero().view(-1)            # once, outside the step
        opt = torch.optim.Adam(model.parameters(), lr=0.005, capturable=True, fused=True)
        step = CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[idx], y[idx]), optimizer=opt,
                            inputs={"x": data.x, "y": data.y, "graph": data.csc_graph}, model=model)
        for epoch in range(200):
            step()
            if epoch % 50 == 49:
                print(step.mean_loss())                     # one sync every 50 steps
    """

    def __init__(
        self,
        loss_fn: Callable[..., Tensor],
        *,
        optimizer: torch.optim.Optimizer,
        inputs: Mapping[str, Any] | None = None,
        model: nn.Module | Iterable[nn.Module] | None = None,
        scheduler: Any = None,
        max_grad_norm: float | None = None,
        autocast_dtype: torch.dtype | None = None,
        warmup: int = 3,
        capture: bool = True,
        generators: Iterable[torch.Generator] = (),
    ) -> None:
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if inputs is not None and not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping {{name: Tensor or CscGraph}} (loss_fn's keyword arguments) or "
                            f"None, got {type(inputs).__name__}")
        self.inputs: dict[str, Any] = dict(inputs or {})
        for name in self.inputs:
            if not isinstance(name, str):
                raise TypeError(f"inputs must have str keys (loss_fn's keyword names), got the key {name!r} of type "
                                f"{type(name).__name__}")
        for name, value in self.inputs.items():
            if not isinstance(value, (Tensor, CscGraph)):
                raise TypeError(f"inputs[{name!r}] must be a Tensor or a CscGraph, got {type(value).__name__}")
        if model is None:
            self.modules: list[nn.Module] = []
        elif isinstance(model, nn.Module):
            self.modules = [model]
        else:
            self.modules = list(model)
            for m in self.modules:
                if not isinstance(m, nn.Module):
                    raise TypeError(f"model must be an nn.Module or an iterable of them, got a {type(m).__name__}")
        if scheduler is not None and not callable(getattr(scheduler, "step", None)):
            raise TypeError(f"scheduler must have a step() method (an LRScheduler), got {type(scheduler).__name__}")
        if max_grad_norm is not None:
            if isinstance(max_grad_norm, bool) or not isinstance(max_grad_norm, (int, float)) or not max_grad_norm > 0:
                raise ValueError(f"max_grad_norm must be a positive float or None, got {max_grad_norm!r}")
            max_grad_norm = float(max_grad_norm)
        if autocast_dtype == torch.float16:
            raise NotImplementedError(
                "autocast_dtype must be torch.bfloat16 or None for a captured step (float16 needs a GradScaler, "
                "whose step reads an overflow flag on the host), got torch.float16")
        if autocast_dtype not in (None, torch.bfloat16):
            raise TypeError(f"autocast_dtype must be torch.bfloat16 or None, got {autocast_dtype}")
        self.warmup = check_int("warmup", warmup, minimum=2)
        self.capture = check_bool("capture", capture)
        _check_optimizer_and_scheduler(optimizer, scheduler, capture)
        self.generators = list(generators)
        for gen in self.generators:
            if not isinstance(gen, torch.Generator):
                raise TypeError(f"generators must hold torch.Generator objects, got {type(gen).__name__}")
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.max_grad_norm = max_grad_norm
        self.autocast_dtype = autocast_dtype
        params = _parameters(optimizer)
        if not params:
            raise ValueError("optimizer must hold at least one parameter, got none")
        self.device = params[0].device
        self.steps = 0  # steps run (eager and replayed)
        self.replays = 0  # of which replays of the captured graph
        self.eager_reason: str | None = None if capture else "capture=False"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.last_loss: Tensor | None = None  # the last step's loss (on the device; the graph's output once captured)
        self._loss_sum = torch.zeros((), dtype=torch.float32, device=self.device)
        self._loss_count = 0
        self._guard: tuple[Any, ...] | None = None  # _snapshot() at capture
        self._held: _Held | None = None  # the tensors the capture reads, where the optimizer and modules held them
        self._warm = 0  # warm-up steps run since the last (re)capture
        self._pool: Any = None
        if capture and self.device.type != "cuda":
            self._go_eager(f"its parameters are on {self.device}, and CUDA graphs capture CUDA work only")

    # ------------------------------------------------------------------ the step
    @property
    def captured(self) -> bool:
        """Whether calls replay a captured graph (False: warming up, or eager)."""
        return self.graph is not None

    def __call__(self, **updates: Tensor) -> Tensor:
        """Run one training step and return its loss, a 0-dim tensor on the device (reading it syncs; once captured,
        the graph's output, overwritten by the next replay). ``updates``: new values for tensors of ``inputs`` (same
        shape and dtype), copied into them first; a shape that does not fit is refused with both shapes named."""
        for name, value in updates.items():
            self._update(name, value)
        if self.graph is not None:
            self._check_guard()
            self.graph.replay()
            self.replays += 1
        elif self.eager_reason is not None:
            self._eager_step()
        elif self._warm < self.warmup:
            self._warmup_step(first=self._warm == 0, check_syncs=self._warm == self.warmup - 1)
            self._warm += 1
        else:
            self._capture()
        self.steps += 1
        self._loss_count += 1
        if self.scheduler is not None:
            self.scheduler.step()
        return self.last_loss  # type: ignore[return-value]  # set by every branch above

    def mean_loss(self, *, reset: bool = True) -> float:
        """The mean loss of the steps since the last reset (one host sync); ``nan`` if none ran."""
        if self._loss_count == 0:
            return float("nan")
        value = float(self._loss_sum) / self._loss_count
        if reset:
            self._loss_sum.zero_()
            self._loss_count = 0
        return value

    def recapture(self) -> None:
        """Drop the captured graph; the next call warms up and captures again (after the graph, the parameters or
        the hyperparameters were changed on purpose)."""
        self.graph = None
        self._guard = None
        self._held = None
        self._warm = 0

    # ------------------------------------------------------------------ internals
    def _update(self, name: str, value: Tensor | CscGraph) -> None:
        static = self.inputs.get(name)
        if static is None:
            raise ValueError(f"{name} must be one of the step's inputs ({', '.join(self.inputs) or 'none'}), got "
                             f"an unknown name")
        if isinstance(static, Tensor) and not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a Tensor, got {type(value).__name__}")
        if isinstance(static, CscGraph) or not isinstance(value, Tensor):
            if value is static:
                return
            raise ValueError(f"{name} must be the graph the step was built with ({_describe(static)}), got "
                             f"{_describe(value)}: a captured step replays one graph; build another CapturedStep")
        if value.shape != static.shape:
            raise ValueError(f"{name} must have the captured shape {tuple(static.shape)}, got {tuple(value.shape)}")
        if value.dtype != static.dtype:
            raise TypeError(f"{name} must have the captured dtype {static.dtype}, got {value.dtype}")
        if value is not static:
            with torch.no_grad():  # inputs are data: a value that requires grad is copied, not recorded by autograd
                static.copy_(value)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=False)

    def _body(self) -> Tensor:
        """One step: what the eager path runs and what the capture records."""
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self.loss_fn(**self.inputs)
        if not isinstance(loss, Tensor) or loss.dim() != 0 or not loss.is_floating_point():
            got = f"shape {tuple(loss.shape)}, dtype {loss.dtype}" if isinstance(loss, Tensor) else type(loss).__name__
            raise ValueError(f"loss_fn must return a 0-dim floating Tensor (the loss), got {got}")
        if not loss.requires_grad:  # a host-side flag: no sync
            raise ValueError("loss_fn must return a loss that requires grad (computed from the optimizer's parameters, "
                             "outside torch.no_grad), got one that does not: nothing would be trained")
        loss.backward()
        if self.max_grad_norm is not None:
            grads = [p for p in _parameters(self.optimizer) if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(grads, self.max_grad_norm, foreach=True)
        self.optimizer.step()
        loss = loss.detach()
        self._loss_sum.add_(loss.float())
        return loss

    def _eager_step(self) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=f".*{_CAPTURABLE_WARNING}")
            self.last_loss = self._body()

    def _warmup_step(self, *, first: bool, check_syncs: bool) -> None:
        """One eager step on a side stream (as ``torch.cuda.graph`` asks: lazy initialisations happen off the
        capture stream); the last one runs under ``set_sync_debug_mode("warn")`` and any sync sends the step eager.
        Before the first, the optimizer is made capturable (its state is created by that step)."""
        if first:
            reason = self._prepare_optimizer()
            if reason is not None:
                self._go_eager(reason)
                self._eager_step()
                return
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        syncs: list[str] = []
        with torch.cuda.stream(side):
            if not check_syncs:
                self._eager_step()
            else:
                previous = torch.cuda.get_sync_debug_mode()
                proxy = _SyncProxy(cuda_only=True)  # names the op; torch's debug mode also sees syncs outside ATen ops
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    try:
                        with proxy:
                            self._eager_step()
                    finally:
                        torch.cuda.set_sync_debug_mode(previous)
                found = sync_locations(caught)
                named = list(dict.fromkeys(proxy.found))
                # torch's locations that no named op accounts for (a sync outside ATen, or in the backward)
                syncs = named + [f for f in found if not any(f in n for n in named)]
        torch.cuda.current_stream(self.device).wait_stream(side)
        if syncs:
            hint = ""
            if any("_plan_cache.py" in s for s in syncs):
                hint = " (a raw edge_index is checked against its cached plan every forward: pass a CscGraph " \
                       "prepared once with cudnn_gnn.layers.ToCscGraph)"
            self._go_eager(f"the step synchronizes with the host: {'; '.join(syncs)}{hint}")

    def _prepare_optimizer(self) -> str | None:
        """Switch a stateless optimizer to ``capturable=True`` where it has the option; the reason it cannot be
        captured otherwise (None: it can)."""
        opt = self.optimizer
        for i, group in enumerate(opt.param_groups):
            if "capturable" in group and not group["capturable"]:
                if any(opt.state.get(p) for p in group["params"]):
                    return (f"optimizer.param_groups[{i}] has capturable=False and state already (build "
                            f"{type(opt).__name__}(..., capturable=True) before its first step)")
                group["capturable"] = True
            if self.scheduler is not None and not isinstance(group.get("lr"), Tensor):
                return (f"optimizer.param_groups[{i}]['lr'] is a float, which a captured step reads once; a scheduler "
                        f"needs lr=torch.tensor(..., device='cuda') with capturable=True")
        return None

    def _capture(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        for gen in self.generators:
            graph.register_generator_state(gen)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                loss = self._body()
        except Exception as exc:  # noqa: BLE001 - any failure to capture runs the step eagerly, with its reason
            self.optimizer.zero_grad(set_to_none=True)
            self._go_eager(f"its capture failed: {' '.join(str(exc).split())}")
            self._eager_step()
            return
        self.graph = graph
        self.last_loss = loss
        self._arm()
        graph.replay()
        self.replays += 1

    def _go_eager(self, reason: str) -> None:
        self.eager_reason = reason
        warnings.warn(f"cudnn_gnn: training step not captured in a CUDA graph, running eagerly: {reason}",
                      RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------------ guards (host only, no sync)
    def _walk(self) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
        """The modules' parameters (name, identity, address, requires_grad), training modes and buffers (name,
        identity), in one walk over their submodules."""
        named, modes, buffers = [], [], []
        for m in self.modules:
            for qual, sub in m.named_modules():
                modes.append((qual, sub.training))
                prefix = f"{qual}." if qual else ""
                for name, p in sub._parameters.items():
                    if p is not None:
                        named.append((prefix + name, id(p), p.data_ptr(), p.requires_grad))
                for name, b in sub._buffers.items():
                    if b is not None:
                        buffers.append((prefix + name, id(b)))
        return tuple(named), tuple(modes), tuple(buffers)

    def _snapshot(self) -> tuple[Any, ...]:
        """What a replay assumes, read on the host by identity (no device value is read): the optimizer's parameters
        (identity, address, shape, requires_grad), the modules' parameters, training modes and buffers, the inputs'
        addresses and shapes, graph identities, the optimizer's hyperparameters (tensors by identity) and state."""
        opt_params = _parameters(self.optimizer)
        params = tuple((id(p), p.data_ptr(), tuple(p.shape), p.requires_grad) for p in opt_params)
        named, modes, buffers = self._walk()
        ins = tuple((name, id(v), v.data_ptr() if isinstance(v, Tensor) else None,
                     tuple(v.shape) if isinstance(v, Tensor) else None) for name, v in self.inputs.items())
        return params, named, modes, ins, _hyperparameters(self.optimizer), _state(self.optimizer, opt_params), buffers

    def _arm(self) -> None:
        """Record what the capture reads: the snapshot the guard compares, and the tensors themselves where the
        optimizer's groups and state and the modules hold them (put back by :meth:`_adopt`)."""
        opt = self.optimizer
        buffers = [(f"{qual}.{name}" if qual else name, sub, name, b) for m in self.modules
                   for qual, sub in m.named_modules() for name, b in sub._buffers.items() if b is not None]
        self._held = _Held(groups=[{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
                           states=[dict(st) if (st := opt.state.get(p)) else None for p in _parameters(opt)],
                           buffers=buffers)
        self._guard = self._snapshot()

    _WHAT = ("the optimizer's parameters (identity, address, shape or requires_grad)",
             "the model's parameters (identity, address or requires_grad)", "the model's training mode",
             "the step's inputs", "the optimizer's hyperparameters", "the optimizer's state", "the model's buffers")

    def _check_guard(self) -> None:
        """Before a replay: nothing changed since capture (the usual case, one comparison of host values), or what
        changed is adopted (:meth:`_adopt`), or the replay is refused naming what changed."""
        now = self._snapshot()
        if self._guard is None or now == self._guard:
            return
        for i in (1, 0, 2, 3):  # parameters (the model's first: they have names), modes, inputs: refused
            if now[i] != self._guard[i]:
                self._refuse(self._WHAT[i], _first_difference(self._guard[i], now[i]))
        self._adopt(now)
        after = self._snapshot()
        if after != self._guard:
            i = next(i for i, (a, b) in enumerate(zip(self._guard, after)) if a != b)
            self._refuse(self._WHAT[i], _first_difference(self._guard[i], after[i]))

    def _adopt(self, now: tuple[Any, ...]) -> None:
        """Hyperparameters, optimizer state or buffers replaced since capture (``optimizer.load_state_dict``, a new
        ``group["lr"]`` tensor or number, a reassigned buffer): copy the new values into the tensors the capture
        reads (device copies, no sync) and put those tensors back, so that replays go on from the new values and
        ``state_dict()`` reads the ones replays advance. Everything is checked before anything is copied; what a
        replay cannot follow (state gone or added, another shape, a changed Python setting) is refused."""
        held, opt = self._held, self.optimizer
        if held is None:  # armed with _guard: not reached
            return
        if len(held.groups) != len(opt.param_groups):
            self._refuse(self._WHAT[4], f"{len(held.groups)} param groups at capture, {len(opt.param_groups)} now")
        copies: list[tuple[Tensor, Any]] = []
        puts: list[tuple[dict[Any, Any], Any, Any]] = []
        reorder: list[tuple[dict[Any, Any], list[Any]]] = []  # loaded state whose keys come in another order

        def adopt(where: dict[Any, Any], key: Any, captured: Any, label: int, name: str) -> None:
            current = where[key]
            try:
                value = _adopted(captured, current, copies)
            except _Stale as exc:
                self._refuse(self._WHAT[label], f"{name}: {exc}")
            if value is not current:
                puts.append((where, key, value))

        for i, (before, group) in enumerate(zip(held.groups, opt.param_groups)):
            if set(group) - {"params"} != set(before):
                self._refuse(self._WHAT[4], f"param_groups[{i}] keys {sorted(before)} -> "
                                            f"{sorted(k for k in group if k != 'params')}")
            for key, captured in before.items():
                adopt(group, key, captured, 4, f"param_groups[{i}][{key!r}]")
        for j, (before_state, p) in enumerate(zip(held.states, _parameters(opt))):
            st = opt.state.get(p)
            name = f"optimizer.state of parameter {j} ({tuple(p.shape)})"
            if not before_state and not st:
                continue
            if not before_state or not st or set(st) != set(before_state):
                self._refuse(self._WHAT[5], f"{name}: keys {sorted(before_state or ())} at capture, "
                                            f"{sorted(st or ())} now (a captured step cannot start new state, "
                                            "as optimizer.state.clear() asks)")
            for key, captured in before_state.items():
                adopt(st, key, captured, 5, f"{name}[{key!r}]")
            if list(st) != list(before_state):
                reorder.append((st, list(before_state)))
        if [n for n, _ in now[6]] != [n for n, _, _, _ in held.buffers]:
            self._refuse(self._WHAT[6], _first_difference([n for n, _, _, _ in held.buffers], [n for n, _ in now[6]]))
        for qual, sub, name, captured in held.buffers:
            adopt(sub._buffers, name, captured, 6, qual)
        with torch.no_grad():
            for dst, src in copies:
                if isinstance(src, Tensor):
                    dst.copy_(src)
                else:
                    dst.fill_(src)
        for where, key, value in puts:
            where[key] = value
        for st, keys in reorder:  # the order the snapshot reads them in
            for key in keys:
                st[key] = st.pop(key)

    def _refuse(self, label: str, detail: str) -> NoReturn:
        raise RuntimeError(f"the captured step must replay what it captured, but {label} changed since capture "
                           f"({detail}); restore it, or call recapture() to capture the step again")


class _Held(NamedTuple):
    """The objects a capture reads, where they were at capture: each param group's settings (tensors themselves),
    each optimizer parameter's state dict (a copy of the dict, the same tensors), each buffer with its module."""

    groups: list[dict[str, Any]]
    states: list[dict[Any, Any] | None]
    buffers: list[tuple[str, nn.Module, str, Tensor]]


def _first_difference(before: Any, after: Any) -> str:
    if isinstance(before, (tuple, list)) and isinstance(after, (tuple, list)):
        if len(before) != len(after):
            return f"{len(before)} entries before, {len(after)} now"
        for k, (b, a) in enumerate(zip(before, after)):
            if b != a:
                if isinstance(b, tuple) and isinstance(a, tuple) and len(a) == len(b) == 4 and b[:3] == a[:3] \
                        and isinstance(a[3], bool):  # a parameter's (..., requires_grad)
                    name = repr(b[0]) if isinstance(b[0], str) else f"parameter {k}"
                    return (f"{name}: requires_grad {b[3]} -> {a[3]}, frozen or unfrozen after capture, which a "
                            "replay would ignore")
                return f"{b!r} -> {a!r}"
    return f"{before!r} -> {after!r}"
