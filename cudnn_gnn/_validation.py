"""Host-side argument checks shared by the graph container, the ops and the layers.

Every message follows one grammar: "`<arg>` must `<constraint>`, got `<actual>`". TypeError is raised for
types and dtypes, ValueError for shapes and values. Nothing here reads tensor *values* (no host sync):
value checks (index ranges) live in :meth:`cudnn_gnn.CscGraph.validate`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__: list[str] = []

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INDEX_DTYPES = (torch.int32, torch.int64)


def check_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_float(name: str, value: object) -> Tensor:
    t = check_tensor(name, value)
    if t.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), got {t.dtype}")
    return t


def check_index(name: str, value: object) -> Tensor:
    t = check_tensor(name, value)
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype int32 or int64, got {t.dtype}")
    return t


def check_shape(name: str, t: Tensor, shape: Sequence[int | None], what: str | None = None) -> None:
    """Check ``t.shape`` against ``shape`` where ``None`` matches any size."""
    ok = t.dim() == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape))
    if not ok:
        want = what or "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")


def check_device(name: str, t: Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name} must be on {device} like the graph, got {t.device}")


def check_int(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)
