"""What the kernel backends' autograd formulas share: the refusal of a differentiable backward.

The Triton and cuDNN ops compute their gradients in kernels (or, for cuDNN's CPU stand-in, in a detached
recomputation), so the gradients they return are constants to autograd: a second-order gradient taken through them
(``torch.autograd.grad(..., create_graph=True)``, a gradient penalty) would be silently wrong. Their backward
formulas call :func:`refuse_create_graph` first; the reference backend, plain PyTorch, is differentiable twice.
"""

from __future__ import annotations

import torch

__all__ = ["refuse_create_graph"]


def refuse_create_graph(backend: str) -> None:
    """Raise where the backward runs with grad mode on, which is what ``create_graph=True`` does (autograd turns
    grad mode on inside a backward only then).

    Raises:
        NotImplementedError: ``create_graph=True`` through ``backend``'s op.
    """
    if torch.is_grad_enabled():
        raise NotImplementedError(
            f"create_graph must be False for backend={backend!r} (its backward runs in kernels and is not itself "
            f"differentiable), got create_graph=True; use backend='reference', which is differentiable twice, for "
            f"second-order gradients such as a gradient penalty")
