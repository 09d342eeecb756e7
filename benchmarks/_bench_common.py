"""Timing, peak-memory, error-capture and JSON helpers shared by the benchmark scripts.

Timing: ``warmup`` untimed calls, then ``repeats`` timed calls. On CUDA each call is bracketed by
``torch.cuda.Event(enable_timing=True)`` records on the current stream and the device is synchronised after each
call (outside the bracket), so a time is the GPU time from the first to the last kernel of that call, including
any idle gap our host code leaves between kernels. On CPU (``--quick`` smoke runs) ``time.perf_counter`` is used
and the figures mean nothing.

Memory: :func:`peak_memory` runs one extra call after the timed ones and reports
``torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()`` measured from just before that call, so
everything that already existed (inputs, graph and its caches, parameters, the upstream gradient) is *not*
counted; activations kept for backward, workspaces, the output and the parameter gradients are.
"""

from __future__ import annotations

import datetime
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from cudnn_gnn.apps._util import is_oom, write_json  # one implementation, shared with the examples

__all__ = [
    "is_oom",
    "is_fatal",
    "free_memory",
    "synchronize",
    "time_fn",
    "peak_memory",
    "percentile",
    "environment",
    "write_json",
    "H200_BYTES_PER_S",
    "kernel_table",
    "kernel_times",
    "gather_floor_bytes",
    "triton_spec",
    "TritonCompiles",
]

H200_BYTES_PER_S = 4.3e12  # an H200's measured device-to-device copy bandwidth (HBM3e)


def gather_floor_bytes(num_edges: int, num_dst: int, width: int, elem: int) -> int:
    """Bytes a gather-bound attention forward must move at least: one source row of ``width`` elements of
    ``elem`` bytes gathered per edge, plus the ``[num_dst, width]`` output written once."""
    return (num_edges + num_dst) * width * elem


def triton_spec(graph: Any, x: torch.Tensor, attn_weights: torch.Tensor, *, v2: bool, heads: int,
                edge_attr: torch.Tensor | None = None, dropout: float = 0.0) -> Any:
    """The validated call (:func:`cudnn_gnn.spec.attention_spec`) the kernel benchmarks hand the Triton backend's
    entries (``triton_gat``, ``build_call``) directly: ``x`` both sides, concatenated heads, leaky ReLU 0.2, no
    attention returned; ``dropout > 0``: training-mode attention dropout drawn in the kernels (a seed from torch's
    generator, as a training step's layer)."""
    from cudnn_gnn.spec import attention_spec

    return attention_spec(v2=v2, graph=graph, x=x, attn_weights=attn_weights, heads=heads, edge_attr=edge_attr,
                          concat=True, activation="leaky_relu", activation_alpha=0.2, dropout=dropout,
                          training=dropout > 0,
                          dropout_mask=None, return_attention=False, deterministic=False, grad_precision="auto",
                          backend="triton", max_degree=None)


def is_fatal(exc: BaseException) -> bool:
    """True for errors after which the CUDA context is unusable (every later CUDA call would fail too)."""
    text = str(exc)
    return any(s in text for s in ("illegal memory access", "device-side assert", "unspecified launch failure",
                                   "CUDA error: an illegal instruction"))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kernel_table(run: Callable[[], Any], steps: int, device: torch.device,
                 name_width: int = 90) -> dict[str, tuple[float, float]]:
    """``{kernel name: (us per step, launches per step)}`` of the GPU activities (kernels, copies, memsets)
    ``run()`` launches, ``run`` doing ``steps`` steps under ``torch.profiler`` (one synchronize at the end); names
    cut to ``name_width``. Kernels replayed from a CUDA graph are recorded one by one, as launched ones are."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        synchronize(device)
    per: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            entry = per.setdefault(e.name[:name_width], [0.0, 0.0])
            entry[0] += e.time_range.end - e.time_range.start
            entry[1] += 1
    n = max(steps, 1)
    return {k: (us / n, count / n) for k, (us, count) in per.items()}


def kernel_times(run: Callable[[], Any], steps: int, device: torch.device,
                 name_width: int = 90) -> tuple[dict[str, float], float]:
    """``(us per step by kernel name, kernels per step)`` of the GPU kernels ``run()`` launches (see
    :func:`kernel_table`)."""
    table = kernel_table(run, steps, device, name_width)
    return {k: us for k, (us, _) in table.items()}, sum(count for _, count in table.values())


def free_memory(device: torch.device | None = None) -> None:
    """Collect garbage and hand cached blocks back, so one case's leftovers do not count against the next."""
    gc.collect()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def time_fn(
    fn: Callable[[], Any],
    *,
    device: torch.device,
    warmup: int,
    repeats: int,
    pre: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Median/p10/p90 milliseconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls.

    Ours rather than ``triton.testing.do_bench`` or ``torch.utils.benchmark.Timer``: neither runs a per-call ``pre``
    outside the timed bracket, nor reports the first call (plan builds, compiles), nor runs without CUDA (the
    ``--quick`` CPU smoke runs); ``do_bench`` also zeroes a 256 MB buffer before each call, and a full-graph step's
    own inputs are several times L2 already.

    ``pre`` (e.g. dropping parameter gradients) runs before each call, outside the timed bracket. The result of
    ``fn`` is dropped immediately. Also returns ``first_call_ms``, the wall time of the first warm-up call
    (plan builds, ``torch.compile``), measured with a device sync.
    """
    first_ms = float("nan")
    for i in range(max(warmup, 1)):
        if pre is not None:
            pre()
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        if i == 0:
            first_ms = (time.perf_counter() - t0) * 1e3
    times: list[float] = []
    if device.type == "cuda":
        for _ in range(repeats):
            if pre is not None:
                pre()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
    else:
        for _ in range(repeats):
            if pre is not None:
                pre()
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return {
        "median_ms": statistics.median(times) if times else float("nan"),
        "p10_ms": percentile(times, 10),
        "p90_ms": percentile(times, 90),
        "first_call_ms": first_ms,
        "repeats": len(times),
    }


def peak_memory(fn: Callable[[], Any], *, device: torch.device, pre: Callable[[], None] | None = None) -> int | None:
    """Bytes allocated at the peak of one ``fn()`` call above what was allocated just before it (None on CPU)."""
    if device.type != "cuda":
        return None
    if pre is not None:
        pre()
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - base)


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - a missing or broken package is simply reported as absent
        return None


def environment(device: torch.device) -> dict[str, Any]:
    """GPU, torch, CUDA, cuDNN (backend loaded by the frontend and torch's own), frontend, PyG versions, date."""
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_geometric": _version("torch_geometric"),
        "cudnn_gnn": _version("cudnn_gnn"),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32) if device.type == "cuda" else None,
        "ld_preload": os.environ.get("LD_PRELOAD"),
        "argv": sys.argv,
    }
    try:
        import cudnn_gnn

        info = cudnn_gnn.backend_info()
        env["backend_info"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in info.as_dict().items()}
        env["cudnn_backend_version"] = info.cudnn_backend_version
        env["cudnn_frontend"] = info.frontend_version
        env["torch_cudnn_version"] = info.torch_cudnn_version
    except Exception as exc:  # noqa: BLE001 - reported, never fatal for a benchmark
        env["backend_info_error"] = f"{type(exc).__name__}: {exc}"
    return env


class TritonCompiles:
    """Triton's just-in-time builds of our kernels, one entry per kernel variant, each with its build time.

    Triton builds a kernel on its first call for every new specialisation (dtypes, ``constexpr`` block sizes,
    flags): this context manager installs Triton's ``jit_cache_hook`` (called just before a build) and
    ``jit_post_compile_hook`` (just after), chained to whatever hooks were set, and logs the kernels whose module
    starts with ``module_prefix``. :meth:`take` hands over what was built since the last call. A build that finds
    its binary in Triton's disk cache (``~/.triton/cache`` or ``TRITON_CACHE_DIR``) is logged too, and takes
    milliseconds instead of seconds. Under ``TRITON_INTERPRET=1`` nothing is built and nothing is logged; without
    the triton package this does nothing.
    """

    def __init__(self, module_prefix: str = "cudnn_gnn") -> None:
        self.module_prefix = module_prefix
        self._log: list[dict[str, Any]] = []
        self._started: list[float] = []
        self._saved: tuple[Any, Any] | None = None
        self._knobs: Any = None

    def __enter__(self) -> TritonCompiles:
        try:
            import triton

            self._knobs = triton.knobs.runtime
            self._saved = (self._knobs.jit_cache_hook, self._knobs.jit_post_compile_hook)
        except (ImportError, AttributeError):  # no triton, or one without these hooks: log nothing
            self._knobs = None
            return self
        self._knobs.jit_cache_hook = self._before
        self._knobs.jit_post_compile_hook = self._after
        return self

    def __exit__(self, *exc: object) -> None:
        if self._knobs is not None and self._saved is not None:
            self._knobs.jit_cache_hook, self._knobs.jit_post_compile_hook = self._saved

    def take(self) -> list[dict[str, Any]]:
        out, self._log = self._log, []
        return out

    def _ours(self, fn: Any) -> bool:
        return str(getattr(fn, "module", "")).startswith(self.module_prefix)

    def _before(self, **kw: Any) -> bool | None:
        prev = None if self._saved is None else self._saved[0]
        skip = prev(**kw) if prev is not None else None  # a true result skips the build: pass it through
        if self._ours(kw.get("fn")) and not skip:
            self._started.append(time.perf_counter())
        return skip

    def _after(self, **kw: Any) -> bool | None:
        prev = None if self._saved is None else self._saved[1]
        fn = kw.get("fn")
        if self._ours(fn) and self._started:
            seconds = time.perf_counter() - self._started.pop()
            self._log.append({"kernel": str(getattr(fn, "name", "?")), "variant": _variant(fn, kw.get("compile")),
                              "build_s": seconds})
        return prev(**kw) if prev is not None else None


def _variant(fn: Any, compile: Any) -> str:
    """A kernel variant in a few words: its ``constexpr`` values, pointer element types and launch options."""
    try:
        names = list(getattr(getattr(fn, "jit_function", None), "arg_names", []) or [])
        parts = []
        for key, value in (compile.get("constants") or {}).items():
            if isinstance(key, tuple) and len(key) == 1 and isinstance(key[0], int) and key[0] < len(names):
                key = names[key[0]]
            if value is not None:
                parts.append(f"{key}={value}")
        sig = compile.get("signature") or {}
        types = sorted({t.lstrip("*") for t in sig.values() if isinstance(t, str) and t.startswith("*")})
        parts += [f"ptr={'/'.join(types)}"] if types else []
        parts += [f"num_warps={compile.get('num_warps')}", f"num_stages={compile.get('num_stages')}"]
        return " ".join(parts)
    except Exception as exc:  # noqa: BLE001 - a description must never break a benchmark
        return f"? ({type(exc).__name__})"
