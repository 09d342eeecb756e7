"""Host-side argument checks shared by the graph container, the ops and the layers.

Every message follows one grammar: "`<arg>` must `<constraint>`, got `<actual>`". TypeError is raised for
types and dtypes, ValueError for shapes and values. Nothing here reads tensor *values* (no host sync):
value checks (index ranges) live in :meth:`cudnn_gnn.CscGraph.validate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__: list[str] = []

def sync_is_costly(device: torch.device) -> bool:
    """Whether reading a value back stalls a device queue (CUDA): value checks there stay on the device (a bad
    input gives NaN, not wrong numbers) instead of raising after a sync."""
    return device.type == "cuda"


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


def check_shape(name: str, t: Tensor, shape: Sequence[int | None],
                what: str | Callable[[], str] | None = None) -> None:
    """Check ``t.shape`` against ``shape`` where ``None`` matches any size. ``what``, the expected shape as the
    message says it, may be a callable, formatted only on failure: formatting a symbolic size (``torch.compile``
    with dynamic shapes) would pin it to its current value and recompile for every batch."""
    ok = t.dim() == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape))
    if not ok:
        want = (what() if callable(what) else what) or "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
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


def check_probability(name: str, value: object, *, allow_one: bool = False) -> float:
    """A dropout probability: ``[0, 1)``, or ``[0, 1]`` with ``allow_one`` (p = 1 drops everything, as in torch
    and PyG; its caller must not scale by ``1 / (1 - p)``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if allow_one:
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    elif not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_edge_attr(edge_attr: object, edge_dim: int, edge_index: object) -> None:
    """The user's ``edge_attr`` against the layer's ``edge_dim`` and the user's edge count, before any projection,
    so the message quotes the shape the user passed: ``[num_edges, edge_dim]``, or ``[num_edges]`` when
    ``edge_dim == 1`` (as PyG). The edge count is read from a ``[2, E]`` tensor, a torch sparse adjacency's entry
    count (one of shape ``(2, n)`` is no ``[2, E]``) or a graph's ``num_edges``."""
    t = check_float("edge_attr", edge_attr)
    num_edges: int | None = None
    if isinstance(edge_index, Tensor) and edge_index.layout != torch.strided:
        num_edges = int(edge_index._nnz())
    elif isinstance(edge_index, Tensor) and edge_index.dim() == 2 and edge_index.shape[0] == 2:
        num_edges = int(edge_index.shape[1])
    elif isinstance(getattr(edge_index, "num_edges", None), int):
        num_edges = int(getattr(edge_index, "num_edges"))  # noqa: B009 - duck-typed CscGraph
    rows = "num_edges" if num_edges is None else f"num_edges={num_edges}"
    want = f"({rows}, edge_dim={edge_dim})" + (f" or ({rows},)" if edge_dim == 1 else "")
    ok = (t.dim() == 2 and t.shape[1] == edge_dim) or (t.dim() == 1 and edge_dim == 1)
    if not ok or (num_edges is not None and t.shape[0] != num_edges):
        raise ValueError(f"edge_attr must have shape {want}, got {tuple(t.shape)}")
