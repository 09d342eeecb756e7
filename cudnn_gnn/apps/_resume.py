"""Training-state checkpoints: ``--checkpoint PATH`` writes one after every epoch, ``--resume PATH`` continues from it.

A checkpoint holds everything the next epoch reads: the model's and the optimizer's state (and the scheduler's and
the ``GradScaler``'s where there is one), the epoch just finished, every random generator (torch's CPU and CUDA
generators, numpy's, Python's ``random``), and the loop's own state (best scores, early-stopping counters, curves),
so a run stopped after epoch ``k`` and resumed runs epochs ``k + 1 ..`` exactly as the uninterrupted run does
(bitwise on a CPU with the same thread count).

- Written atomically (:func:`cudnn_gnn.apps._util.atomic_path`: a temporary file renamed over ``PATH``): a run
  killed while writing leaves the previous checkpoint whole.
- Read with ``torch.load(weights_only=True)``: tensors and plain values only, no pickled code runs. numpy's
  generator state is stored as a tensor for that reason.
- The run's settings are stored with it (``config``: plain values); resuming under other settings (another model,
  dataset, seed, learning rate ...) is refused naming every difference, except the keys a caller declares free
  (``--epochs``: a run may be extended).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_gnn.apps._util import atomic_path, json_safe

__all__ = ["FORMAT", "check_config", "get_rng_state", "load_checkpoint", "load_optimizer", "save_training",
           "set_rng_state"]

#: Optimizer options that say how it runs, not what it learned: kept from this run's optimizer on resume.
_HOW = ("capturable", "fused", "foreach", "differentiable")

#: The ``format`` key of a training checkpoint (a ``--save`` file holds weights only and has none).
FORMAT = "cudnn_gnn.training/1"


def get_rng_state() -> dict[str, Any]:
    """Every random generator a training step may draw from: torch's CPU generator, each initialised CUDA device's
    default generator, numpy's global generator (its key as an int64 tensor, so it loads with ``weights_only``) and
    Python's ``random``."""
    kind, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return {"torch": torch.get_rng_state(), "cuda": cuda,
            "numpy": {"kind": str(kind), "key": torch.from_numpy(np.asarray(key, dtype=np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "python": random.getstate()}


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Put back the generators :func:`get_rng_state` read (CUDA devices beyond those saved are left alone)."""
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        for i, s in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s.cpu(), i)
    npy = state["numpy"]
    np.random.set_state((npy["kind"], npy["key"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"],
                         npy["gauss"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def _cpu(obj: Any) -> Any:
    """``obj`` with every tensor detached and on the CPU (dicts, lists and tuples walked)."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def save_training(path: str | os.PathLike[str], *, config: Mapping[str, Any], epoch: int, model: torch.nn.Module,
                  optimizer: torch.optim.Optimizer, scheduler: Any = None, scaler: Any = None,
                  state: Mapping[str, Any] | None = None) -> None:
    """Write a training checkpoint to ``path`` (atomically): the run's ``config`` (plain values), the last finished
    ``epoch``, ``model``/``optimizer``/``scheduler``/``scaler`` state dicts, every random generator and the loop's
    ``state`` (plain values and tensors, e.g. best scores, curves, the weights of the best epoch)."""
    ckpt = {"format": FORMAT, "config": json_safe(dict(config)), "epoch": int(epoch),
            "model": _cpu(model.state_dict()), "optimizer": _cpu(optimizer.state_dict()),
            "scheduler": None if scheduler is None else _cpu(scheduler.state_dict()),
            "scaler": None if scaler is None else _cpu(scaler.state_dict()),
            "rng": get_rng_state(), "state": _cpu(dict(state or {}))}
    with atomic_path(path) as tmp:
        torch.save(ckpt, tmp)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a training checkpoint with ``torch.load(weights_only=True)`` onto the CPU.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a training checkpoint (not torch's format, or a ``--save`` file of weights).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--resume must name a checkpoint file, got {path!r} (no such file)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read means not a checkpoint we can use
        raise ValueError(f"--resume must name a training checkpoint (written by --checkpoint), got {path!r}, which "
                         f"torch.load(weights_only=True) cannot read: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        what = "a --save file (weights only)" if isinstance(ckpt, dict) and "state_dict" in ckpt else "another file"
        raise ValueError(f"--resume must name a training checkpoint (written by --checkpoint, format {FORMAT!r}), got "
                         f"{path!r}, {what}")
    return ckpt


def check_config(ckpt: Mapping[str, Any], config: Mapping[str, Any], path: str | os.PathLike[str], *,
                 free: Iterable[str] = ()) -> None:
    """Refuse to resume ``ckpt`` under settings other than those it was written with.

    Args:
        ckpt: A checkpoint from :func:`load_checkpoint`.
        config: This run's settings (the same keys :func:`save_training` was given).
        path: The checkpoint's path, for the message.
        free: Keys that may differ (``epochs``: a resumed run may be extended).

    Raises:
        ValueError: naming every setting that differs, with the checkpoint's value and this run's.
    """
    saved, now = ckpt["config"], json_safe(dict(config))
    skip = set(free)
    there, here = sorted(set(saved) - set(now) - skip), sorted(set(now) - set(saved) - skip)
    if there or here:  # other flags altogether: another script (or version) wrote it
        raise ValueError(f"--resume {os.fspath(path)!r} must come from this program's --checkpoint, got one written "
                         f"by another program (settings only there: {', '.join(there) or 'none'}; only here: "
                         f"{', '.join(here) or 'none'})")
    diffs = [f"{k} {saved.get(k)!r} there, {now.get(k)!r} here" for k in sorted(set(saved) | set(now))
             if k not in skip and saved.get(k) != now.get(k)]
    if diffs:
        raise ValueError(f"--resume {os.fspath(path)!r} must come from a run with this run's settings, got one with "
                         f"other settings: {'; '.join(diffs)} (resume with the settings it was written with; "
                         "--epochs may be raised)")


def load_optimizer(optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """``optimizer.load_state_dict(state)``, keeping the tensors the optimizer already has: state tensors that exist
    (made by a captured step's warm-up, whose CUDA graph reads their addresses) and tensor learning rates (read by a
    captured step at replay) get the loaded values copied in, instead of being replaced."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    before = {id(p): dict(optimizer.state[p]) for p in params if p in optimizer.state}
    lrs = [group.get("lr") for group in optimizer.param_groups]
    # how this optimizer runs (capturable: state on the device, ...) is this run's, not the checkpoint's run's
    groups = [{**saved, **{k: now[k] for k in _HOW if k in now}}
              for saved, now in zip(state["param_groups"], optimizer.param_groups)]
    optimizer.load_state_dict({**state, "param_groups": groups})
    for p in params:
        old = before.get(id(p))
        if not old:
            continue
        new = optimizer.state[p]
        for key, value in list(new.items()):
            kept = old.get(key)
            if isinstance(kept, Tensor) and isinstance(value, Tensor) and kept.shape == value.shape:
                kept.copy_(value)
                new[key] = kept
    for group, lr in zip(optimizer.param_groups, lrs):
        if isinstance(lr, Tensor):
            lr.fill_(float(group["lr"]))
            group["lr"] = lr
        elif isinstance(group["lr"], Tensor):  # a captured run's checkpoint resumed eagerly
            group["lr"] = float(group["lr"])
