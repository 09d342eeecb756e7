"""Whether the Triton kernels can run here, and the kernel package, imported at first use (Triton reads
``TRITON_INTERPRET`` when it decorates the kernels, and ``import cudnn_gnn`` stays free of it)."""


from __future__ import annotations

import functools
import os
import sys
from types import ModuleType

import torch

__all__ = ["check_runnable", "kernels", "runnable", "unavailable_reason"]


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def unavailable_reason(device: torch.device) -> str | None:
    """``None`` when the Triton kernels can run on tensors of ``device``, else what is missing and how to fix it.

    They run on CUDA with the ``triton`` package importable, and on any device under ``TRITON_INTERPRET=1``
    (Triton's interpreter, slow, for tests)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "the triton backend needs the triton package, which is not importable: pip install triton"
    if _interpreting():
        return None
    if torch.device(device).type != "cuda":
        return (f"the triton backend runs on CUDA tensors (or on any device with TRITON_INTERPRET=1 set before the "
                f"first call), got device {torch.device(device)}")
    if not torch.cuda.is_available():
        return "the triton backend needs a CUDA GPU, and torch.cuda.is_available() is False"
    return None


@functools.lru_cache(maxsize=1)
def kernels() -> ModuleType:
    """The kernel package (:mod:`cudnn_gnn.backends.triton.kernels`), imported on first use (Triton reads
    ``TRITON_INTERPRET`` when it decorates the kernels)."""
    from cudnn_gnn.backends.triton import kernels as module

    return module


def runnable(device: torch.device) -> bool:
    """Whether the kernels run on tensors of ``device`` (a tensor's): :func:`unavailable_reason` is None. Asked on
    every call, so the common case answers first: a CUDA tensor exists only where CUDA does, and an imported
    ``triton`` is importable, so that is :func:`unavailable_reason`'s None without its environment read, device
    parse and CUDA query."""
    return (device.type == "cuda" and sys.modules.get("triton") is not None) or unavailable_reason(device) is None


def check_runnable(device: torch.device) -> None:
    """Raise :func:`unavailable_reason`'s reason, if any, for tensors of ``device`` (a tensor's); checked on every
    call (three times a step), through :func:`runnable`'s shortcut."""
    if not runnable(device):
        raise RuntimeError(unavailable_reason(device))
