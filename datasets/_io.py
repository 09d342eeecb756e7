"""File helpers shared by the dataset loaders: gzip CSV reading, path checks, the user cache directory."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import pickle
import secrets
import socket
import warnings
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

__all__ = ["package_data_dir", "user_cache_dir", "as_path", "require_files", "read_csv_gz", "corrupt_file_error",
           "reading", "atomic_save_npy", "temp_path", "remove_stale_temps", "folder_lock", "as_folder", "file_fingerprint"]

#: Bytes hashed at each end of a file by :func:`file_fingerprint`.
FINGERPRINT_BLOCK = 1 << 20

#: What a damaged file raises while it is read: truncated gzip (EOFError), not gzip (BadGzipFile), damaged deflate
#: stream (zlib.error), damaged zip/npz (BadZipFile), damaged pickle (UnpicklingError).
CORRUPT_ERRORS: tuple[type[BaseException], ...] = (
    EOFError, gzip.BadGzipFile, zlib.error, zipfile.BadZipFile, pickle.UnpicklingError, UnicodeDecodeError,
)


@contextlib.contextmanager
def reading(path: Path, extra: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Turn what a damaged ``path`` raises while it is read (:data:`CORRUPT_ERRORS` and ``extra``) into
    :func:`corrupt_file_error`."""
    try:
        yield
    except CORRUPT_ERRORS + extra as exc:
        raise corrupt_file_error(path, exc) from exc


def corrupt_file_error(path: Path, exc: BaseException, hint: str = "delete it and download the dataset again") -> ValueError:
    """``ValueError: raw file <path> is corrupt (<what>): <hint>`` for a file that could not be read."""
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())}" if str(exc) else type(exc).__name__
    return ValueError(f"raw file {path} is corrupt ({what[:300]}): {hint}")


def temp_path(path: Path) -> Path:
    """A temporary name for ``path``, in its folder, that no other writer uses:
    ``.<name>.<host>.<pid>.<random>.tmp``. Write there, then ``os.replace`` it onto ``path``: a reader never sees a
    partial file, and a reader that has the old file open or memory-mapped keeps it (the rename leaves its inode
    alone; rewriting in place would pull pages from under the map: SIGBUS). :func:`remove_stale_temps` recognises the
    name."""
    host = socket.gethostname().replace("/", "_") or "host"
    return path.parent / f".{path.name}.{host}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temps(folder: Path) -> list[Path]:
    """Delete the temporaries (:func:`temp_path`) that writers on this host left in ``folder`` when they were killed:
    those whose process is no longer running. Temporaries of running processes and of other hosts (a shared file
    system) are left alone; so is one whose process id was taken by a new process (it is cleaned once that one ends).

    Returns:
        The paths removed.
    """
    host = socket.gethostname().replace("/", "_") or "host"
    removed = []
    with contextlib.suppress(OSError):
        for path in folder.iterdir():
            parts = path.name.rsplit(".", 3)  # ".<name>.<host>", "<pid>", "<random>", "tmp"
            if (len(parts) != 4 or parts[3] != "tmp" or not path.name.startswith(".") or not parts[1].isdigit()
                    or not parts[0].endswith(f".{host}")):
                continue
            if not _pid_running(int(parts[1])):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append(path)
    return removed


@contextlib.contextmanager
def folder_lock(folder: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold ``flock`` on ``folder/.lock`` (shared for readers, exclusive for a writer swapping files in), so that a
    reader maps one writer's set of files, never a mix. Where the lock file cannot be created (a read-only folder) or
    ``fcntl`` is missing (Windows), nothing is locked: no writer can be swapping files there.

    Not the ``filelock`` package (torch depends on it): its ``FileLock`` is exclusive only, so readers (every rank of a
    host mapping one folder) would queue behind each other, and its ``ReadWriteLock`` (SQLite) needs filelock >=
    3.21, which torch does not require, and refuses a change of mode within a thread; neither works without a lock
    file in a read-only folder (a shared, read-only copy of the data)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def atomic_save_npy(path: Path, array: np.ndarray) -> None:
    """``np.save(path, array)`` through a temporary file of this writer (:func:`temp_path`) renamed over ``path``, so
    an interrupted write never leaves half a file under the final name and concurrent writers never share one."""
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def file_fingerprint(path: Path, block: int = FINGERPRINT_BLOCK) -> list[int | str]:
    """``[size, mtime_ns, hash]`` of a file, what a cache of data parsed from it is keyed on: the hash (BLAKE2b,
    16 bytes, hex) covers the size and the first and last ``block`` bytes, so a file rewritten with the same size and
    modification time (a copy that keeps them, ``touch -r``, a new download of another version) is noticed without
    reading it whole (two blocks, a few milliseconds for a file of any size). A change confined to the middle of a
    file larger than ``2 * block`` that keeps its size and time is not."""
    st = path.stat()
    h = hashlib.blake2b(digest_size=16)
    h.update(st.st_size.to_bytes(8, "little"))
    with open(path, "rb") as f:
        h.update(f.read(block))
        if st.st_size > block:
            f.seek(max(block, st.st_size - block))
            h.update(f.read(block))
    return [st.st_size, st.st_mtime_ns, h.hexdigest()]


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


def as_folder(value: object, arg: str) -> Path:
    """:func:`as_path`, and a ``ValueError`` naming ``arg`` when the path is an existing file (it must be a folder)."""
    path = as_path(value, arg)
    if path.exists() and not path.is_dir():
        raise ValueError(f"`{arg}` must be a folder, got the file {str(path)!r}")
    return path


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
        ValueError: The file is not a numeric table with ``ncols`` columns, or it is corrupt (truncated or not
            gzip): the message names the file and says to download it again.
    """
    if not path.is_file():
        raise FileNotFoundError(f"`path` must be an existing file, got {str(path)!r}")
    with reading(path, (ValueError,)), gzip.open(path, "rt") as f, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ee]mpty input file.*")
        array = np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2, comments=None)
    if array.size == 0:
        array = array.reshape(0, ncols or 0)
    if ncols is not None and array.shape[1] != ncols:
        raise ValueError(f"`{path.name}` must have {ncols} columns, got {array.shape[1]} (in {path})")
    return array
