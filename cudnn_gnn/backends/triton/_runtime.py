"""Whether the Triton kernels can run here, and the kernel package, imported at first use (Triton reads
``TRITON_INTERPRET`` when it decorates the kernels, and ``import cudnn_gnn`` stays free of it)."""


from __future__ import annotations

import functools
import os
import sys
from types import ModuleType

import torch

__all__ = ["check_runnable", "kernels", "unavailable_reason"]


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


def check_runnable(device: torch.device) -> None:
    """Raise :func:`unavailable_reason`'s reason, if any, for tensors of ``device`` (a tensor's). Checked on every
    call (three times a step), so the common case returns first: a CUDA tensor exists only where CUDA does, and an
    imported ``triton`` is importable, so that is :func:`unavailable_reason`'s None without its environment read,
    device parse and CUDA query."""
    if device.type == "cuda" and sys.modules.get("triton") is not None:
        return
    reason = unavailable_reason(device)
    if reason is not None:
        raise RuntimeError(reason)
