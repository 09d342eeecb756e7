"""What this process can run: the cuDNN probe behind ``python -m cudnn_gnn info`` and :func:`backend_info`.

The cuDNN backends need a CUDA GPU of compute capability >= 8.0, ``nvidia-cudnn-frontend >= 1.32`` and a loaded
cuDNN >= 9.28 (a complete one: see ``JIT_ONLY_NOTE``). The probe is lazy (nothing runs at import) and cached; it
also records which ``libcudnn`` files the process has mapped, so that two builds, or an incomplete one, are named.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass

import torch

from cudnn_gnn._names import AUTO_ORDER

__all__ = ["BackendInfo", "backend_info", "mapped_cudnn_libraries", "MIN_CUDNN_VERSION", "MIN_FRONTEND_VERSION",
           "CUDNN_SUBLIBRARIES", "PRECOMPILED", "JIT_ONLY_NOTE", "library_dirs", "lacking_precompiled",
           "precompiled_engines_everywhere", "incomplete_cudnn", "cudnn_available", "triton_available", "AUTO_ORDER"]

MIN_CUDNN_VERSION = 92800  # cudnnGetVersion() encoding of 9.28.0
MIN_FRONTEND_VERSION = (1, 32)
MIN_SM = (8, 0)




@dataclass(frozen=True)
class BackendInfo:
    """What this process can run, as ``python -m cudnn_gnn info`` prints it."""

    torch_version: str
    torch_cuda: str | None
    cuda_available: bool
    gpu_name: str | None
    sm: tuple[int, int] | None
    frontend_version: str | None
    cudnn_backend_version: int | None
    torch_cudnn_version: int | None
    gnn_symbols: bool
    sdpa_available: bool
    auto_backend: str
    reason: str | None
    fix: str | None
    cudnn_libraries: tuple[str, ...] = ()  # the libcudnn*.so files this process had mapped when probed
    triton_version: str | None = None
    triton_reason: str | None = "not probed"  # None: the Triton kernels run on this process's CUDA GPU

    @property
    def cudnn_dirs(self) -> tuple[str, ...]:
        """The directories of ``cudnn_libraries``; more than one means two cuDNN builds in one process."""
        return library_dirs(self.cudnn_libraries)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        def ver(v: int | None) -> str:
            return "-" if v is None else f"{v // 10000}.{v % 10000 // 100}.{v % 100} ({v})"

        lines = [
            f"torch               {self.torch_version} (CUDA {self.torch_cuda or 'none'})",
            f"GPU                 {self.gpu_name or 'none'}" + (f", SM {self.sm[0]}.{self.sm[1]}" if self.sm else ""),
            f"cudnn frontend      {self.frontend_version or 'not installed'}",
            f"cuDNN (frontend)    {ver(self.cudnn_backend_version)}",
            f"cuDNN (torch)       {ver(self.torch_cudnn_version)}",
            f"GNN kernels         {'found' if self.gnn_symbols else 'missing'}",
            f"cuDNN SDPA          {'available' if self.sdpa_available else 'unavailable'}",
            f"triton              {self.triton_version or 'not installed'}"
            + (" (kernels run here)" if self.triton_reason is None else f" (not used: {self.triton_reason})"),
            f"backend='auto'      {self.auto_backend} (GAT and GATv2 on CUDA: the first of {', '.join(AUTO_ORDER)} that "
            "runs here, per docs/performance.md; CPU tensors: reference)",
        ]
        for i, d in enumerate(self.cudnn_dirs):
            names = sorted(os.path.basename(p) for p in self.cudnn_libraries if os.path.dirname(p) == d)
            lines.append(f"{'cuDNN libraries' if i == 0 else '':20s}{d}: {', '.join(names)}")
        if len(self.cudnn_dirs) > 1:
            lines.append(f"mixed cuDNN         {MIXED_CUDNN_NOTE}")
        for d, missing in incomplete_cudnn(self.cudnn_libraries).items():
            lines.append(f"incomplete cuDNN    {d} lacks {', '.join(missing)}")
            if PRECOMPILED in missing:
                lines.append(f"{'':20s}{JIT_ONLY_NOTE}")
        if self.reason:
            lines.append(f"why not cudnn       {self.reason}")
        if self.fix:
            lines.append(f"fix                 {self.fix}")
        return "\n".join(lines)


MIXED_CUDNN_NOTE = (
    "libcudnn files from more than one directory are loaded (two cuDNN builds). Two builds alone do not break the "
    "GAT kernels, an incomplete one (without libcudnn_engines_precompiled) does: see 'incomplete cuDNN' where it "
    "applies"
)


# A complete cuDNN 9 (the nvidia-cudnn-cu13 9.28 wheel ships every one of these next to libcudnn.so.9).
CUDNN_SUBLIBRARIES = (
    "libcudnn_graph", "libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_engines_tensor_ir",
    "libcudnn_heuristic", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv", "libcudnn_ext",
)
PRECOMPILED = "libcudnn_engines_precompiled"
JIT_ONLY_NOTE = (
    "cuDNN loads libcudnn_engines_precompiled on the first graph that needs its engines (the backward of cuDNN SDPA, "
    "a torch cuDNN convolution); where it cannot, it switches the whole process to its GRAPH_JIT_ONLY library mode "
    "(CUDNN_LIB_CONFIG=AUTO), and every cuDNN GAT call after that fails with SUBLIBRARY_UNAVAILABLE (cuDNN "
    "9.28.1; docs/gpu-install.md). Fix: install a complete cuDNN >= 9.28 (pip install "
    "\"nvidia-cudnn-cu13>=9.28\", cu12 for CUDA 12); until then keep cuDNN SDPA and cuDNN convolutions out of "
    "processes that run cuDNN GAT (graph_attention(..., backend='flash'), what 'auto' picks on such an install)"
)


def missing_sublibraries(directory: str) -> tuple[str, ...]:
    """The sublibraries of a complete cuDNN 9 (``CUDNN_SUBLIBRARIES``) that ``directory`` lacks."""
    try:
        names = os.listdir(directory)
    except OSError:
        return ()
    return tuple(lib for lib in CUDNN_SUBLIBRARIES if not any(n.startswith(lib + ".so") for n in names))


def incomplete_cudnn(paths: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``{directory: missing sublibraries}`` for the directories of ``paths`` whose cuDNN is in use (a mapped
    ``libcudnn_graph``) and incomplete."""
    graph_dirs = library_dirs(tuple(p for p in paths if os.path.basename(p).startswith("libcudnn_graph")))
    found = {d: missing_sublibraries(d) for d in graph_dirs}
    return {d: m for d, m in found.items() if m}


def lacking_precompiled(paths: tuple[str, ...]) -> list[str]:
    """The directories of ``paths`` whose cuDNN is in use (a mapped ``libcudnn_graph``) and lacks
    ``libcudnn_engines_precompiled``: where cuDNN SDPA's backward would switch cuDNN to JIT-only mode."""
    return [d for d, missing in incomplete_cudnn(paths).items() if PRECOMPILED in missing]


def precompiled_engines_everywhere(paths: tuple[str, ...]) -> bool:
    """Whether the cuDNN in use holds ``libcudnn_engines_precompiled``: every directory of a mapped
    ``libcudnn_graph`` in ``paths`` or, before any is mapped, of every ``libcudnn*`` file (False for none). Then
    cuDNN SDPA's backward finds its engines and cannot switch cuDNN to JIT-only mode under the GAT kernels
    (tests/gpu/test_graph_attention_gpu.py::test_mixed_gat_and_cudnn_sdpa_in_one_process)."""
    cudnn = tuple(p for p in paths if os.path.basename(p).startswith("libcudnn"))
    dirs = library_dirs(tuple(p for p in cudnn if os.path.basename(p).startswith("libcudnn_graph")) or cudnn)
    return bool(dirs) and all(PRECOMPILED not in missing_sublibraries(d) for d in dirs)


def mapped_cudnn_libraries() -> tuple[str, ...]:
    """The ``libcudnn*.so*`` files mapped into this process now (Linux ``/proc/self/maps``; empty elsewhere)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcudnn" in line}
    except OSError:
        return ()
    return tuple(sorted(p for p in paths if os.path.basename(p).startswith("libcudnn") and ".so" in p))


def library_dirs(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The distinct directories of ``paths``, sorted."""
    return tuple(sorted({os.path.dirname(p) for p in paths}))


def _cudnn_wheel() -> str:
    major = (torch.version.cuda or "13").split(".")[0]
    return f"nvidia-cudnn-cu{major}"


@functools.lru_cache(maxsize=1)
def _probe() -> BackendInfo:
    cuda = torch.cuda.is_available()
    gpu_name = torch.cuda.get_device_name() if cuda else None
    sm = torch.cuda.get_device_capability() if cuda else None
    torch_cudnn = None
    if cuda:
        try:
            torch_cudnn = torch.backends.cudnn.version()
        except Exception:  # pragma: no cover - broken installs
            torch_cudnn = None
    frontend_version = backend_version = None
    gnn = sdpa = False
    frontend_error = None
    try:
        import cudnn  # type: ignore[import-not-found]

        frontend_version = getattr(cudnn, "__version__", None)
        gnn = all(hasattr(cudnn, s) for s in ("gnn_mha_gat_forward", "gnn_mha_gat_v2_forward"))
        sdpa = hasattr(cudnn, "pygraph")  # our SDPA graphs (backends/_cudnn_sdpa.py) are built through it
        if cuda:
            try:
                backend_version = int(cudnn.backend_version())
            except Exception as e:  # libcudnn not loadable
                frontend_error = str(e)
    except Exception as e:  # not installed, or a broken install
        frontend_error = f"{type(e).__name__}: {e}"

    reason = fix = None
    fe_tuple = tuple(int(p) for p in (frontend_version or "0.0").split(".")[:2] if p.isdigit())
    wheel = _cudnn_wheel()
    if not cuda:
        reason = "no CUDA GPU visible to torch (CPU-only torch build or no driver)"
        fix = "install a CUDA build of torch on a machine with an NVIDIA GPU (SM >= 8.0); the reference backend runs here"
    elif sm is not None and sm < MIN_SM:
        reason = f"GPU compute capability {sm[0]}.{sm[1]} < 8.0; the cuDNN GNN kernels need Ampere or newer"
        fix = "none on this GPU: the reference backend is used"
    elif frontend_version is None:
        reason = f"nvidia-cudnn-frontend is not importable ({frontend_error})"
        fix = 'pip install --no-deps "nvidia-cudnn-frontend>=1.32"'
    elif fe_tuple < MIN_FRONTEND_VERSION or not gnn:
        reason = f"nvidia-cudnn-frontend {frontend_version} lacks the GNN kernels (need >= 1.32)"
        fix = 'pip install --no-deps -U "nvidia-cudnn-frontend>=1.32"'
    elif backend_version is None:
        reason = f"the cuDNN library could not be loaded by the frontend ({frontend_error})"
        fix = f'pip install --no-deps "{wheel}>=9.28"'
    elif backend_version < MIN_CUDNN_VERSION:
        reason = (
            f"the loaded cuDNN is {backend_version // 10000}.{backend_version % 10000 // 100}, the GNN kernels need >= 9.28 "
            "(PyPI's torch pins an older nvidia-cudnn wheel)"
        )
        fix = (
            f'pip install --no-deps -U "{wheel}>=9.28" (after torch; pip will warn that torch pins an older one), '
            "or put a cuDNN >= 9.28 libcudnn.so.9 first with LD_PRELOAD"
        )
    triton_version, triton_reason = _probe_triton(cuda)
    runs = {"triton": triton_reason is None, "cudnn": reason is None}
    auto = next((name for name in AUTO_ORDER if runs[name]), "reference")
    return BackendInfo(
        torch_version=torch.__version__,
        torch_cuda=torch.version.cuda,
        cuda_available=cuda,
        gpu_name=gpu_name,
        sm=sm,
        frontend_version=frontend_version,
        cudnn_backend_version=backend_version,
        torch_cudnn_version=torch_cudnn,
        gnn_symbols=gnn,
        sdpa_available=sdpa and reason is None,
        auto_backend=auto,
        reason=reason,
        fix=fix,
        cudnn_libraries=mapped_cudnn_libraries(),
        triton_version=triton_version,
        triton_reason=triton_reason,
    )


def _probe_triton(cuda: bool) -> tuple[str | None, str | None]:
    """``(triton's version or None, why the Triton kernels do not run on this GPU or None)``."""
    try:
        import triton
    except ImportError:
        return None, "the triton package is not importable (pip install triton)"
    if not cuda:
        return triton.__version__, "no CUDA GPU visible to torch"
    return triton.__version__, None


def backend_info(refresh: bool = False) -> BackendInfo:
    """Probe (once, cached) what this process can run. ``refresh=True`` probes again."""
    if refresh:
        _probe.cache_clear()
    return _probe()


@torch.compiler.assume_constant_result
def cudnn_available() -> bool:
    """Whether cuDNN's GNN kernels run here (``backend_info().reason is None``), read as a constant under
    ``torch.compile``: the probe (an import, device queries) runs once at trace time instead of breaking the graph."""
    return backend_info().reason is None


@torch.compiler.assume_constant_result
def triton_available() -> bool:
    """Whether the Triton kernels run on this process's CUDA GPU, a constant under ``torch.compile`` likewise."""
    return backend_info().triton_reason is None
