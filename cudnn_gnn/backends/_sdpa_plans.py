"""Plans of our cuDNN SDPA graphs: their key, a bounded thread-safe cache in memory, and a folder of serialized plans.

Nothing here calls cuDNN: a plan is whatever object the builder returns (:mod:`cudnn_gnn.backends._cudnn_sdpa`
builds ``cudnn.pygraph`` graphs), and the disk store holds bytes. So every rule below runs, and is tested, on CPU.

**Key.** :class:`PlanKey` holds what PyTorch's ``aten/src/ATen/native/cudnn/MHA.cpp`` keys its cuDNN attention
graphs on (``MHAParams``: shapes, strides, dtype, dropout probability, causal flag, scale, determinism), plus the
ragged token-total bucket the backward's ``max_total_seq_len`` is sized for. :meth:`PlanKey.text` is its stable
spelling (floats in hex), the same in every process: the disk file is named after its hash.

**Memory.** :class:`PlanCache` is an LRU of at most ``maxsize`` plans per process, behind one lock; builds are
serialized (one cuDNN build at a time, and two threads asking for one key build it once). It counts hits, misses,
evictions, and where each miss came from: a build or a load from disk, with the seconds each source took.

**Disk.** :class:`PlanStore` keeps one file per plan in a folder, named ``<tag>-<sha256(key)[:32]>.plan`` where the
tag holds the cuDNN version, the frontend version and the GPU architecture (a plan is only valid for those). A file is
a header (magic, JSON with the key text, the tag, the payload's size and SHA-256, the plan's workspace bytes) and the
payload; it is written to a temporary file in the same folder and renamed over the target (atomic on POSIX), so a
reader never sees a half-written file and concurrent writers of one key leave one whole file. A file that is
truncated, corrupt, of another key, tag or format is never trusted: the caller rebuilds the plan (and overwrites the
file) after a one-line warning. The folder is ``$CUDNN_GNN_CACHE_DIR/sdpa-plans``, else
``$XDG_CACHE_HOME/cudnn_gnn/sdpa-plans``, else ``~/.cache/cudnn_gnn/sdpa-plans``; :func:`set_plan_dir` moves it or
(``None``) turns the disk off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import struct
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = [
    "PlanCache",
    "PlanCacheInfo",
    "PlanKey",
    "PlanStore",
    "StoredPlan",
    "default_plan_dir",
    "plan_dir",
    "set_plan_dir",
]

MAGIC = b"CUDNN_GNN_SDPA_PLAN\n"
FORMAT = 1
_LEN = struct.Struct("<I")


@dataclasses.dataclass(frozen=True)
class PlanKey:
    """What one cuDNN SDPA graph is built for (packed THD layout, ragged offsets, padding mask from the lengths).

    Attributes:
        direction: ``"fwd"`` or ``"bwd"``.
        dtype: the io dtype's name, ``"float16"`` or ``"bfloat16"`` (statistics and accumulation are float32).
        batch: ``B``, the number of sequences (graphs); the ragged offsets have ``B + 1`` entries.
        heads, head_dim, value_dim: ``H``, ``D`` (q, k) and ``Dv`` (v, out).
        seqlen: the longest-sequence bucket ``S`` the graph's ``[B, H, S, D]`` dims are declared with.
        strides: the descriptor strides of q, k, v, o (``[B, H, S, D]`` order), as MHA.cpp keys them.
        scale: the softmax scale.
        dropout: the attention dropout probability (0: no dropout node).
        causal: always False here (graphs attend within themselves, unmasked); kept for MHA.cpp's key.
        deterministic: the backward's deterministic algorithm (False for a forward).
        total_tokens: the backward's ``max_total_seq_len`` bucket (0 for a forward).
    """

    direction: str
    dtype: str
    batch: int
    heads: int
    head_dim: int
    value_dim: int
    seqlen: int
    strides: tuple[tuple[int, ...], ...]
    scale: float
    dropout: float = 0.0
    causal: bool = False
    deterministic: bool = False
    total_tokens: int = 0

    def text(self) -> str:
        """The key's stable spelling (the same in every process and on every machine): fields in order, floats in
        hex (exact), strides joined."""
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float):
                value = value.hex()
            elif isinstance(value, tuple):
                value = "/".join(",".join(str(s) for s in t) for t in value)
            elif isinstance(value, bool):
                value = int(value)
            parts.append(f"{f.name}={value}")
        return "sdpa;" + ";".join(parts)


class PlanCacheInfo(NamedTuple):
    """Counts of the SDPA plan cache (process-wide, since the last :meth:`PlanCache.clear`).

    ``hits``, ``misses``, ``evictions``, ``currsize``, ``maxsize`` as :func:`functools.lru_cache` counts them; a miss
    is a ``build`` (cuDNN builds the graph: milliseconds to seconds) or a ``disk_load`` (deserialized from the plan
    folder); ``disk_writes`` counts plans written to the folder, ``disk_rejects`` files found there but not trusted
    (truncated, corrupt, foreign, or refused by cuDNN), each rebuilt. ``build_seconds`` and ``load_seconds`` are the
    wall seconds spent making the plans counted in ``builds`` and ``disk_loads`` (host time: cuDNN builds and
    deserializes on the host; a build's includes writing its file, a load's the read and checks of the file, and the
    first plan of a thread and device includes creating its cuDNN handle): what plans on disk save a new process.
    """

    hits: int
    misses: int
    evictions: int
    currsize: int
    maxsize: int
    builds: int = 0
    disk_loads: int = 0
    disk_writes: int = 0
    disk_rejects: int = 0
    build_seconds: float = 0.0
    load_seconds: float = 0.0


T = TypeVar("T")


class PlanCache(Generic[T]):
    """A bounded, thread-safe LRU of built plans.

    :meth:`get` returns the plan of a key, calling ``make()`` on a miss; ``make`` returns ``(plan, source)`` with
    source ``"build"`` or ``"disk"``, and its wall time is added to ``build_seconds`` or ``load_seconds``. Makes run
    one at a time (one build lock): cuDNN builds are not made faster by
    racing, and two threads asking for one key build it once. Lookups of cached keys take only the short lock.
    """

    def __init__(self, maxsize: int = 128) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be an int >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self._plans: OrderedDict[Any, T] = OrderedDict()
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._counts = dict.fromkeys(("hits", "misses", "evictions", "builds", "disk_loads", "disk_writes",
                                      "disk_rejects"), 0)
        self._seconds = {"build": 0.0, "disk": 0.0}  # wall time of makes, by source
        self._warned = False

    def _lookup(self, key: Any) -> T | None:
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                self._counts["hits"] += 1
            return plan

    def get(self, key: Any, make: Callable[[], tuple[T, str]]) -> T:
        plan = self._lookup(key)
        if plan is not None:
            return plan
        with self._build_lock:
            plan = self._lookup(key)  # a racing thread built it meanwhile
            if plan is not None:
                return plan
            t0 = time.perf_counter()
            plan, source = make()
            seconds = time.perf_counter() - t0
            evicted = False
            with self._lock:
                self._counts["misses"] += 1
                source = "build" if source == "build" else "disk"
                self._counts["builds" if source == "build" else "disk_loads"] += 1
                self._seconds[source] += seconds
                self._plans[key] = plan
                while len(self._plans) > self.maxsize:
                    self._plans.popitem(last=False)
                    self._counts["evictions"] += 1
                    evicted = True
        if evicted and not self._warned:
            self._warned = True
            warnings.warn(
                f"cudnn_gnn: more than {self.maxsize} cuDNN SDPA plans in use; the least recently used are dropped and "
                "rebuilt (or reloaded from disk) when needed again. Batches with a steadier batch size or node count, "
                "or a fixed max_num_nodes, use fewer plans.",
                RuntimeWarning,
                stacklevel=4,
            )
        return plan

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (``disk_writes``, ``disk_rejects``: what the store reports)."""
        with self._lock:
            self._counts[name] += n

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._plans

    def info(self) -> PlanCacheInfo:
        with self._lock:
            c = self._counts
            return PlanCacheInfo(c["hits"], c["misses"], c["evictions"], len(self._plans), self.maxsize, c["builds"],
                                 c["disk_loads"], c["disk_writes"], c["disk_rejects"], self._seconds["build"],
                                 self._seconds["disk"])

    def clear(self) -> None:
        """Drop every plan and zero the counts and seconds."""
        with self._lock:
            self._plans.clear()
            for name in self._counts:
                self._counts[name] = 0
            for source in self._seconds:
                self._seconds[source] = 0.0
            self._warned = False


class StoredPlan(NamedTuple):
    """A plan read back from disk: the serialized graph and the workspace bytes it runs with."""

    blob: bytes
    workspace: int


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PlanStore:
    """Serialized plans in ``folder``, one file per (tag, key); see the module docstring for the format and rules.

    ``on_write`` and ``on_reject`` are called (no arguments) after each file written and each file not trusted, so
    the owner can count them. Nothing here raises for a bad file or an unwritable folder: a bad file warns and reads
    as absent; a failed write warns once and leaves the plan in memory only.
    """

    def __init__(self, folder: str | os.PathLike[str], *, on_write: Callable[[], None] | None = None,
                 on_reject: Callable[[], None] | None = None) -> None:
        self.folder = Path(folder)
        self._on_write = on_write
        self._on_reject = on_reject
        self._write_warned = False

    def path(self, tag: str, key_text: str) -> Path:
        """The file of ``key_text`` under ``tag`` (cuDNN version, frontend version, GPU architecture)."""
        return self.folder / f"{tag}-{_hash(key_text.encode())[:32]}.plan"

    def reject(self, path: Path, why: str) -> None:
        """Warn (one line) that ``path`` is not trusted and will be rebuilt; count it."""
        warnings.warn(f"cudnn_gnn: ignoring SDPA plan file {path}: {why}; rebuilding it", RuntimeWarning, stacklevel=3)
        if self._on_reject is not None:
            self._on_reject()

    def load(self, tag: str, key_text: str) -> StoredPlan | None:
        """The stored plan of ``key_text`` under ``tag``, or None (absent, or not trusted: warned)."""
        path = self.path(tag, key_text)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):  # absent (or the folder is not one): nothing to trust
            return None
        except OSError as e:
            self.reject(path, f"unreadable ({e.strerror or e})")
            return None
        why, plan = self._parse(data, tag, key_text)
        if plan is None:
            self.reject(path, why)
        return plan

    @staticmethod
    def _parse(data: bytes, tag: str, key_text: str) -> tuple[str, StoredPlan | None]:
        start = len(MAGIC) + _LEN.size
        if len(data) < start or not data.startswith(MAGIC):
            return "not a cudnn_gnn plan file (bad magic or truncated header)", None
        (length,) = _LEN.unpack_from(data, len(MAGIC))
        try:
            header = json.loads(data[start:start + length].decode("utf-8"))
            if not isinstance(header, dict):
                raise ValueError("header is not an object")
            fmt, size, digest = header["format"], int(header["size"]), str(header["sha256"])
            workspace = int(header["workspace"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            return f"corrupt header ({type(e).__name__})", None
        if fmt != FORMAT:
            return f"format {fmt!r}, this cudnn_gnn reads format {FORMAT}", None
        if header.get("tag") != tag:
            return f"built for {header.get('tag')!r}, this process is {tag!r}", None
        if header.get("key") != key_text:
            return "another plan's key (a foreign or renamed file)", None
        payload = data[start + length:]
        if len(payload) != size:
            return f"truncated ({len(payload)} of {size} payload bytes)", None
        if _hash(payload) != digest:
            return "corrupt (payload checksum mismatch)", None
        if workspace < 0:
            return f"corrupt header (workspace {workspace})", None
        return "", StoredPlan(payload, workspace)

    def save(self, tag: str, key_text: str, blob: bytes, workspace: int) -> bool:
        """Write the plan atomically (temporary file in the folder, then rename); True if written."""
        path = self.path(tag, key_text)
        header = json.dumps({"format": FORMAT, "tag": tag, "key": key_text, "size": len(blob),
                             "sha256": _hash(blob), "workspace": int(workspace)}, sort_keys=True).encode()
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=self.folder)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + _LEN.pack(len(header)) + header + blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            tmp = None
        except OSError as e:
            if not self._write_warned:
                self._write_warned = True
                warnings.warn(f"cudnn_gnn: cannot write SDPA plans to {self.folder} ({e.strerror or e}); they stay in "
                              "memory only (set_plan_dir() or CUDNN_GNN_CACHE_DIR picks another folder)",
                              RuntimeWarning, stacklevel=3)
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        if self._on_write is not None:
            self._on_write()
        return True


def default_plan_dir() -> Path:
    """``$CUDNN_GNN_CACHE_DIR/sdpa-plans``, else ``$XDG_CACHE_HOME/cudnn_gnn/sdpa-plans``, else
    ``~/.cache/cudnn_gnn/sdpa-plans``."""
    root = os.environ.get("CUDNN_GNN_CACHE_DIR")
    if root:
        return Path(root) / "sdpa-plans"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "cudnn_gnn" / "sdpa-plans"


_UNSET = object()
_DIR: Any = _UNSET
_DIR_LOCK = threading.Lock()


def plan_dir() -> Path | None:
    """The folder plans are kept in (None: disk off); :func:`default_plan_dir` until :func:`set_plan_dir`."""
    global _DIR
    with _DIR_LOCK:
        if _DIR is _UNSET:
            _DIR = default_plan_dir()
        return _DIR  # type: ignore[no-any-return]


def set_plan_dir(folder: str | os.PathLike[str] | None) -> None:
    """Keep serialized SDPA plans in ``folder`` from now on (created on the first write); ``None``: memory only."""
    global _DIR
    if folder is not None and not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a path or None, got {type(folder).__name__}")
    with _DIR_LOCK:
        _DIR = None if folder is None else Path(folder)
