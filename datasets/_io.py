"""File helpers shared by the dataset loaders: gzip CSV reading, path checks, the user cache directory."""

from __future__ import annotations

import gzip
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np

__all__ = ["package_data_dir", "user_cache_dir", "as_path", "require_files", "read_csv_gz"]


def package_data_dir() -> Path:
    """Directory of the data files shipped inside the package (read-only: never write here)."""
    return Path(__file__).resolve().parent / "data"


def user_cache_dir() -> Path:
    """Directory for derived caches: ``$CUDNN_GNN_CACHE`` if set, else ``~/.cache/cudnn_gnn``.

    The directory is not created here; writers create it when they first need it.
    """
    env = os.environ.get("CUDNN_GNN_CACHE")
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/cudnn_gnn").expanduser()


def as_path(value: object, arg: str) -> Path:
    """Convert a ``str``/``os.PathLike`` argument to a ``Path``, or raise a ``TypeError`` naming ``arg``."""
    if isinstance(value, (str, os.PathLike)):
        return Path(value).expanduser()
    raise TypeError(f"`{arg}` must be a str or os.PathLike, got {type(value).__name__}")


def require_files(paths: Iterable[Path], *, what: str, hint: str) -> None:
    """Raise ``FileNotFoundError`` listing every missing path at once.

    Args:
        paths: Files that must exist.
        what: What the files are, for the message (e.g. ``"ogbn-arxiv raw files"``).
        hint: What the user should do (where to put them, which URL to fetch).
    """
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        listed = "\n  ".join(missing)
        raise FileNotFoundError(f"{what} missing ({len(missing)}):\n  {listed}\n{hint}")


def read_csv_gz(path: Path, dtype: type | np.dtype, *, ncols: int | None = None) -> np.ndarray:
    """Read a headerless, comma-separated, gzip-compressed numeric table into a 2-D array.

    Uses numpy's C parser (``np.loadtxt``); no pandas needed. An empty file gives shape ``[0, ncols or 0]``.

    Args:
        path: The ``.csv.gz`` file.
        dtype: Result dtype (``np.int64`` or ``np.float32``); ``nan`` is accepted for floats.
        ncols: Expected number of columns, checked when given.

    Returns:
        Array of shape ``[rows, cols]``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: The file is not a numeric table with ``ncols`` columns.
    """
    if not path.is_file():
        raise FileNotFoundError(f"`path` must be an existing file, got {str(path)!r}")
    with gzip.open(path, "rt") as f, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ee]mpty input file.*")
        array = np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2, comments=None)
    if array.size == 0:
        array = array.reshape(0, ncols or 0)
    if ncols is not None and array.shape[1] != ncols:
        raise ValueError(f"`{path.name}` must have {ncols} columns, got {array.shape[1]} (in {path})")
    return array
