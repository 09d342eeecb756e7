"""Helpers shared by the main job, the example scripts and the benchmarks (one implementation of each).

- :func:`is_oom`: is this exception an out-of-memory error (torch's, or an allocator failure a library reports
  as a plain ``RuntimeError``)?
- :func:`write_json`, :func:`save_checkpoint`: strict JSON (NaN/inf become ``null``), a model's weights and
  config; written atomically (:func:`atomic_path`: temporary file, then rename) with the umask's permissions.
- :func:`conv_class`: the layer class behind ``--model`` (our GATConv/GATv2Conv or PyG's).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["CONV_MODELS", "atomic_path", "conv_class", "is_oom", "json_safe", "output_file", "plot_curves",
           "save_checkpoint", "state_copy", "write_json", "write_text"]

#: ``--model`` names: ours and PyG's, GAT and GATv2.
CONV_MODELS = ("gat", "gatv2", "pyg-gat", "pyg-gatv2")


#: What allocator failures say when they come as plain RuntimeErrors: CUDA's, cuDNN's, cuBLAS's, torch's CPU
#: allocator's ("DefaultCPUAllocator: can't allocate memory").
_OOM_TEXTS = ("out of memory", "CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED", "can't allocate memory")


def is_oom(exc: BaseException) -> bool:
    """True for torch's and Python's out-of-memory errors and for allocator failures reported as plain
    RuntimeErrors (cuDNN, cuBLAS, torch's CPU allocator)."""
    import torch  # here, not at import: the command line answers --help without torch

    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(s in text for s in _OOM_TEXTS)


def json_safe(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become None, tuples become lists, unknown objects their str()."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (int, str, bool)):
        return obj
    return str(obj)


def _umask() -> int:
    """The process's umask: read from ``/proc/self/status`` where there is one (setting it to read it, the portable
    way, briefly gives other threads' new files a umask of 0)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_file(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """``(the file an output at path lands in, whether to write it directly)``: a symlink's final target (the output
    goes through the link, which stays a link), and direct writing for an existing file that is not a regular one (a
    FIFO, ``/dev/stdout``, a terminal), which cannot be replaced by a rename. Raises ``ValueError`` for an empty
    path."""
    path = os.fspath(path)
    if not path:
        raise ValueError("`path` must be a file path, got ''")
    path = os.path.expanduser(path)
    try:
        mode = os.stat(path).st_mode  # through symlinks
    except OSError:  # not there yet (or a dangling link): written beside its future name
        mode = stat.S_IFREG
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return path, True  # as given: /dev/stdout's own target may be a pipe, which has no path
    return os.path.realpath(path), False


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path in ``path``'s folder (created if missing) to write to; on success it is renamed over
    ``path``, so an interrupted run never leaves half a file, and on failure removed. The file gets the usual
    permissions (``0666`` less the umask, e.g. ``0644``), not the ``0600`` of ``mkstemp``.

    A symlink is written through: the temporary file sits beside the link's final target and is renamed over the
    target (:func:`output_file`). A path that is not a regular file (a FIFO, ``/dev/stdout``) is yielded as is,
    written directly. An empty path is a ``ValueError``."""
    target, direct = output_file(path)
    if direct:
        yield target
        return
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike[str] | None, obj: Any) -> None:
    """Write ``obj`` as indented strict JSON to ``path``, creating its folder; nothing when ``path`` is None.

    Written through :func:`atomic_path` (a temporary file in the same folder, renamed over ``path``).
    """
    if path is None:
        return
    write_text(path, json.dumps(json_safe(obj), indent=1, allow_nan=False) + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through :func:`atomic_path`, creating its folder."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)


def conv_class(model: str) -> tuple[type, dict[str, Any]]:
    """``(layer class, extra constructor kwargs)`` for ``model`` in :data:`CONV_MODELS`.

    ``gat``/``gatv2`` are :class:`cudnn_gnn.layers.GATConv`/``GATv2Conv`` (the extra dict says they take
    ``backend``); ``pyg-gat``/``pyg-gatv2`` are PyG's layers of the same constructor.
    """
    if model in ("gat", "gatv2"):
        from cudnn_gnn.layers import GATConv, GATv2Conv

        return (GATConv if model == "gat" else GATv2Conv), {"backend_kw": True}
    if model in ("pyg-gat", "pyg-gatv2"):
        from torch_geometric.nn import GATConv as PygGATConv
        from torch_geometric.nn import GATv2Conv as PygGATv2Conv

        return (PygGATConv if model == "pyg-gat" else PygGATv2Conv), {}
    raise ValueError(f"model must be one of {CONV_MODELS}, got {model!r}")


def save_checkpoint(path: str | os.PathLike[str], model: torch.nn.Module | dict[str, Any],
                    config: dict[str, Any]) -> None:
    """``torch.save({"state_dict": model.state_dict(), "config": config}, path)`` through :func:`atomic_path`.
    ``model`` may be a state dict already (e.g. a copy taken at the reported epoch). ``config`` holds plain values
    only (it loads with ``weights_only=True``)."""
    import torch

    state = model.state_dict() if isinstance(model, torch.nn.Module) else model
    state = {k: v.detach().cpu() for k, v in state.items()}
    with atomic_path(path) as tmp:
        torch.save({"state_dict": state, "config": json_safe(config)}, tmp)


def state_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``model``'s state dict, on its device (the weights at an epoch worth saving)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def plot_curves(path: str | os.PathLike[str], curves: dict[str, list[tuple[int, float]]], *, title: str = "",
                xlabel: str = "epoch") -> None:
    """Draw ``{name: [(epoch, value), ...]}`` to a PNG at ``path`` with matplotlib's Agg backend: losses on the
    left axes, every other curve (accuracies, scores) on the right."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_score) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for name, points in curves.items():
        if not points:
            continue
        xs, ys = zip(*points)
        (ax_loss if "loss" in name else ax_score).plot(xs, ys, label=name)
    for ax, ylabel in ((ax_loss, "loss"), (ax_score, "score")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    if title:
        fig.suptitle(title)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
    finally:
        plt.close(fig)
