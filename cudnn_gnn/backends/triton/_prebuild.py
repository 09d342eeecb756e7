"""Build the Triton kernels a step will launch, all at once, before its first call (:func:`prebuild`).

Triton builds a kernel variant (one per dtype, alignment and ``constexpr`` set) at its first launch in a process,
one after another: a sampled GAT step's 8 variants cost 3.4 s of papers100M's first epoch. Builds in
threads of one process do not overlap (measured on the CPU machine: four of the step's variants for sm_90a, 3.36-3.42
s one after another, 3.15-3.27 s on two threads); builds in processes of their own do, and each writes Triton's disk
cache (``TRITON_CACHE_DIR``, default ``~/.triton/cache``), where this process then finds it in milliseconds.

How: :func:`prebuild` runs the caller's ``fn`` once with the launches of our kernels
(:mod:`cudnn_gnn.backends.triton.kernels`) that would need a build recorded and skipped (Triton's
``knobs.runtime.jit_cache_hook``: a hook that returns True skips the build and the launch; it is handed the variant's
``specialization_data``), then forks one process per recorded variant, all at once up to ``processes``, each
building its variant through ``JITFunction.preload(specialization_data)`` for this process's target without touching
the GPU; then this process loads each variant (``preload`` again: a disk hit, or the real build, and its error, where
the child failed), so that ``fn``'s real first call compiles nothing. Forked, not started afresh: a fresh
interpreter's ``import cudnn_gnn`` (torch, ``torch._dynamo``) alone took 4.6-5.7 s on the CPU machine, more than the
builds it would overlap.

Read in Triton 3.6 (the GPU image's, with torch 2.11) and 3.9 (the CPU machines'): ``jit_cache_hook``'s keywords
(``fn``: a ``JitFunctionInfo`` with ``module``, ``name``, ``jit_function``; ``compile["specialization_data"]``), a
skipped build making ``JITFunction.run`` return None before the launch, ``preload``, ``driver.set_active`` and
``compile`` with an explicit target are the same in both (3.9 adds the target to ``specialization_data`` and checks
it in ``preload``). Where one of them is missing, :func:`prebuild` runs nothing and returns an empty report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch

from cudnn_gnn._validation import check_int

__all__ = ["BuiltVariant", "PrebuildReport", "prebuild"]

KERNELS_MODULE = "cudnn_gnn.backends.triton.kernels"
"""The modules whose kernels :func:`prebuild` records (Inductor's and other libraries' kernels build as before)."""

CHILD_TIMEOUT_S = 60.0
"""A build process still running after this long is killed and its variant built in this process: a variant builds
in about a second (3.4 s for papers100M's 8), so a process past a minute is stuck (a fork copies the parent's locks
as they were, held by threads the child does not have), and waiting longer would cost more than building here."""


class BuiltVariant(NamedTuple):
    """One kernel variant :func:`prebuild` built.

    Attributes:
        kernel: the kernel's name (e.g. ``"_fwd_kernel"``; a kernel has a variant per dtype and constexpr set).
        seconds: from its build process's start to its exit, plus this process's load of it from the disk cache
            (or its own build, where the process failed).
        in_process: whether this process built it itself (its build process failed, or ``processes=0``).
    """

    kernel: str
    seconds: float
    in_process: bool


class PrebuildReport(NamedTuple):
    """What :func:`prebuild` did.

    Attributes:
        variants: the variants it built, in the order ``fn`` first launched them; empty where none was missing.
        seconds: its wall time: ``fn``'s dry run, the builds and the loads.
    """

    variants: tuple[BuiltVariant, ...]
    seconds: float


class _Recorded(NamedTuple):
    jit: Any  # triton.runtime.JITFunction
    kernel: str
    data: str  # Triton's specialization_data (JSON)


_LOCK = threading.Lock()
_ACTIVE = False


def prebuild(fn: Callable[..., Any], *args: Any, processes: int | None = None, **kwargs: Any) -> PrebuildReport:
    """Build every Triton kernel variant ``fn(*args, **kwargs)`` would build, in parallel processes, before its first
    real call; returns what was built.

    ``fn`` runs once, as a dry run: each launch of one of our kernels whose variant this process does not hold yet is
    recorded and skipped (variants it holds launch as usual), and ``fn``'s results are thrown away. Then every
    recorded variant is built in a forked process of its own, ``processes`` at a time, which writes Triton's disk
    cache, and loaded from there into this process: the first real call finds them all built. The cost is about the
    slowest build plus the dry run, instead of the sum of the builds (figures: docs/performance.md, "Building the
    kernels before the first step").

    Give it one forward and backward of the model on a copy (``copy.deepcopy(model)``) and a batch shaped like the
    training's, under the same autocast, not the optimizer step: what ``fn`` does besides launching kernels happens
    for real. With the launches skipped, the kernels' outputs hold uninitialised memory: nothing in the ops or the
    layers uses a kernel's output as an index or a size (checked: :mod:`~cudnn_gnn.backends.triton.gat_op`,
    :mod:`~cudnn_gnn.backends.triton.gatv2_op`, :mod:`~cudnn_gnn.backends.triton._op_common`, the launchers; a CPU
    test runs GAT and GATv2 with every launch skipped and every op output poisoned), so the dry run's values are
    garbage but its memory accesses are not. ``fn`` must not use its own results as indices or sizes either (a loss
    is fine; ``argmax`` into an index is not). ``fn`` runs with torch's CPU random state and the current CUDA
    device's default generator forked (left as they were; other generators it draws from advance) and under
    ``torch.compiler.set_stance("force_eager")``: compiled code runs eagerly, so that the dry run builds our kernels,
    not Inductor's graphs (those build at the first real call, as before). Variants held in memory launch for real
    (on the dry run's garbage floats: indices come from the graph only).

    Recorded: the launches of the calling thread and of threads Python did not start (``threading.current_thread()``
    a dummy), which is where autograd runs the backward of CUDA tensors (its device threads); the launches of other
    Python threads build and run as usual. Not re-entrant.

    Args:
        fn: the step to prepare, e.g. ``lambda: loss_fn(copy_of_model, batch).backward()``.
        *args, **kwargs: passed to ``fn``.
        processes: how many build processes run at once (default: the CPUs this process may use). ``0`` builds
            every variant in this process, one after another (what the first call would do; where forking this
            process is not wanted).

    Returns:
        :class:`PrebuildReport`. Empty, without calling ``fn``, where Triton's JIT is not in use: no CUDA, no
        triton, ``TRITON_INTERPRET=1``, or a Triton without the hooks above.

    Raises:
        TypeError: ``fn`` not callable, ``processes`` not an int.
        ValueError: ``processes`` negative.
        RuntimeError: called while another :func:`prebuild` records (nested, or from another thread).
        Whatever ``fn`` raises, and a variant's real build error (built again in this process after its process
        failed).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if processes is not None:
        check_int("processes", processes)
    t0 = time.perf_counter()
    if not _jit_in_use():
        return PrebuildReport((), 0.0)
    devices = [torch.cuda.current_device()]
    with _recording(KERNELS_MODULE) as recorded:
        with torch.random.fork_rng(devices=devices), torch.compiler.set_stance("force_eager"):
            fn(*args, **kwargs)
    built = _build(list(recorded.values()), _cpus() if processes is None else processes)
    return PrebuildReport(tuple(built), time.perf_counter() - t0)


def _jit_in_use() -> bool:
    """Whether our kernels build through Triton's JIT here, with the hooks :func:`prebuild` needs."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1" or not torch.cuda.is_available():
        return False
    try:
        import triton
        from triton.runtime import JITFunction, driver
    except ImportError:
        return False
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    return (hasattr(runtime, "jit_cache_hook") and hasattr(JITFunction, "preload")
            and hasattr(driver, "set_active"))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def _recording(module_prefix: str) -> Iterator[dict[str, _Recorded]]:
    """Within: the launches of kernels of modules under ``module_prefix`` that need a build, from the calling thread
    or a thread Python did not start (autograd's device threads, which run a CUDA backward), are recorded
    (``specialization_data`` -> :class:`_Recorded`, first launch first) and skipped. Triton's ``jit_cache_hook`` is
    restored on the way out, error or not; other kernels', and other Python threads', go to it."""
    global _ACTIVE
    import triton

    runtime = triton.knobs.runtime
    with _LOCK:
        if _ACTIVE:
            raise RuntimeError("prebuild must not be nested, or run in two threads at once: it is recording a dry "
                               "run already")
        _ACTIVE = True
    previous = runtime.jit_cache_hook
    owner = threading.get_ident()
    recorded: dict[str, _Recorded] = {}

    def hook(**kw: Any) -> bool | None:
        info: Any = kw.get("fn")
        ours = threading.get_ident() == owner or isinstance(threading.current_thread(), threading._DummyThread)
        if ours and str(getattr(info, "module", "")).startswith(module_prefix):
            data = kw["compile"]["specialization_data"]
            with _LOCK:
                if data not in recorded:
                    recorded[data] = _Recorded(info.jit_function, str(info.name), data)
            return True  # JITFunction.run returns None: no build, no launch (CachedLaunch keeps no variant)
        return previous(**kw) if previous is not None else None

    runtime.jit_cache_hook = hook
    try:
        yield recorded
    finally:
        runtime.jit_cache_hook = previous
        with _LOCK:
            _ACTIVE = False


def _build(variants: list[_Recorded], processes: int) -> list[BuiltVariant]:
    """Build ``variants`` in forked processes, ``processes`` at a time (0: none), then load each in this process."""
    child = _build_in_processes(variants, processes) if variants and processes > 0 and hasattr(os, "fork") \
        else [(0.0, False)] * len(variants)
    out = []
    for v, (seconds, ok) in zip(variants, child, strict=True):
        t = time.perf_counter()
        v.jit.preload(v.data)  # a disk hit where its process built it; else the build itself (its error raised)
        out.append(BuiltVariant(v.kernel, seconds + time.perf_counter() - t, not ok))
    return out


class _TargetOnly:
    """A stand-in for Triton's active driver in a build process: the parent's device index and target, no GPU
    calls (the parent's CUDA context is not usable after a fork, and ``compile`` needs only the target)."""

    def __init__(self, device: int, target: Any) -> None:
        self.device, self.target = device, target

    def get_current_device(self) -> int:
        return self.device

    def get_current_target(self) -> Any:
        return self.target

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def _child_build(v: _Recorded, device: int, target: Any) -> None:
    """A build process's work: ``v`` compiled for ``target`` into the disk cache."""
    from triton.runtime import driver

    driver.set_active(_TargetOnly(device, target))
    v.jit.preload(v.data)


def _build_in_processes(variants: list[_Recorded], processes: int) -> list[tuple[float, bool]]:
    """One forked process per variant, at most ``processes`` at a time: for each, seconds from its fork to its exit
    and whether it succeeded (exit code 0 within :data:`CHILD_TIMEOUT_S`)."""
    from triton.runtime import driver

    device = driver.active.get_current_device()
    target = driver.active.get_current_target()
    sys.stdout.flush()
    sys.stderr.flush()
    done: list[tuple[float, bool]] = [(0.0, False)] * len(variants)
    pending = list(enumerate(variants))[::-1]
    running: dict[int, tuple[int, float]] = {}
    while pending or running:
        while pending and len(running) < processes:
            i, v = pending.pop()
            t = time.perf_counter()
            pid = os.fork()
            if pid == 0:  # the build process: never returns into the caller's code
                code = 1
                try:
                    _child_build(v, device, target)
                    code = 0
                except BaseException:  # noqa: BLE001 - the parent builds it again and raises the real error
                    pass
                finally:
                    os._exit(code)
            running[pid] = (i, t)
        time.sleep(0.005)
        for pid, (i, t) in list(running.items()):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == 0 and time.perf_counter() - t > CHILD_TIMEOUT_S:
                os.kill(pid, signal.SIGKILL)
                got, status = os.waitpid(pid, 0)  # killed: a nonzero exit code
            if got != 0:
                done[i] = (time.perf_counter() - t, os.waitstatus_to_exitcode(status) == 0)
                del running[pid]
    return done
