"""OGB node property prediction datasets (ogbn-arxiv, -products, -proteins, -papers100M), read offline.

The loader reads the on-disk layout that the ``ogb`` package leaves after its download (or the folder OGB's zip
unpacks to: ``arxiv/``, ``products/``, ``proteins/``, ``papers100M-bin/`` in place of ``ogbn_*``), from a directory
the user filled beforehand; it never downloads and never prompts::

    <root>/ogbn_arxiv/raw/{edge,node-feat,node-label,num-node-list,num-edge-list}.csv.gz  (+ node_year.csv.gz)
    <root>/ogbn_arxiv/split/time/{train,valid,test}.csv.gz
    <root>/ogbn_products/raw/...           split/sales_ranking/...
    <root>/ogbn_proteins/raw/...           (edge-feat.csv.gz, no node-feat; node_species.csv.gz)  split/species/...
    <root>/ogbn_papers100M/raw/{data.npz,node-label.npz}                                  split/time/...

Parsed arrays are cached as ``.npy`` files in ``<root>/<dir>/processed_cudnn_gnn/`` and reloaded without
parsing while the raw files keep their size, modification time and the hash of their first and last megabyte
(:func:`~cudnn_gnn.datasets._io.file_fingerprint`, kept in the cache's manifest with every array's shape and dtype).
Feature widths and label values are checked against the dataset's metadata when the raw files are parsed; a cached
array whose shape disagrees with the manifest or the metadata is rebuilt, never served. ogbn-papers100M's arrays are
streamed out of the ``.npz`` archives (never held in memory whole) and memory-mapped copy-on-write on load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from cudnn_gnn.datasets._io import (
    as_folder,
    atomic_save_npy,
    file_fingerprint,
    read_csv_gz,
    reading,
    remove_stale_temps,
    require_files,
    temp_path,
)
from cudnn_gnn.datasets._meta import OgbnMeta, ogbn_meta
from cudnn_gnn.datasets._metrics import make_evaluator
from cudnn_gnn.datasets.node_dataset import NodeDataset

__all__ = ["OgbnData", "load_ogbn", "ogb_evaluator", "ogbn_dataset", "add_inverse_edges", "CACHE_DIR_NAME"]

#: Name of the cache folder created next to ``raw/`` and ``split/``.
CACHE_DIR_NAME = "processed_cudnn_gnn"
_CACHE_FORMAT = 2  # 2: sources keyed on [size, mtime_ns, hash of both ends]; every array's shape and dtype
_SPLIT_PARTS = ("train", "valid", "test")


def add_inverse_edges(edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Add the reverse of every edge the way OGB does: edge ``i`` becomes rows ``2i`` (as given) and ``2i+1``
    (reversed), and ``edge_attr`` rows are repeated to match.

    Args:
        edge_index: ``[2, E]`` integer tensor.
        edge_attr: Optional ``[E, ...]`` tensor.

    Returns:
        ``(edge_index [2, 2E], edge_attr [2E, ...] or None)``.
    """
    out = torch.empty((2, 2 * edge_index.size(1)), dtype=edge_index.dtype, device=edge_index.device)
    out[:, 0::2] = edge_index
    out[0, 1::2] = edge_index[1]
    out[1, 1::2] = edge_index[0]
    if edge_attr is not None:
        edge_attr = edge_attr.repeat_interleave(2, dim=0)
    return out, edge_attr


class OgbnData(Data):
    """The graph of an OGB node dataset (``load_ogbn(...)[0]``): PyG's ``Data`` plus ``get_idx_split()``, so the
    split can be read off the graph too."""

    def get_idx_split(self) -> dict[str, torch.Tensor]:
        """``{"train", "valid", "test"}`` -> ``[n] int64`` node indices (the ``*_idx`` attributes)."""
        return {"train": self.train_idx, "valid": self.valid_idx, "test": self.test_idx}


def ogbn_dataset(meta: OgbnMeta, data: OgbnData, *, args: str = "") -> NodeDataset:
    """``data`` as OGB's ``PygNodePropPredDataset`` hands it out: ``dataset[0]``, ``get_idx_split()``, and
    ``num_classes``, ``num_tasks``, ``task_type``, ``eval_metric`` (on the dataset and, as before, on the graph)."""
    info = {"num_tasks": meta.num_tasks, "task_type": meta.task_type, "eval_metric": meta.eval_metric}
    data.num_classes = meta.num_classes
    for key, value in info.items():
        data[key] = value
    name = "synthetic_ogbn" if args else meta.name
    return NodeDataset(data, name=name, args=args, num_classes=meta.num_classes, meta=info)


def _zip_folder(meta: OgbnMeta) -> str:
    """The folder OGB's zip unpacks to (``arxiv``, ``papers100M-bin``); the ``ogb`` package renames it ``ogbn_*``."""
    return meta.url.rsplit("/", 1)[-1][: -len(".zip")]


def _dataset_dir(meta: OgbnMeta, root: Path) -> Path:
    """``<root>/ogbn_<name>`` as the ``ogb`` package leaves it, else ``<root>/<zip folder>`` as unzipping leaves it."""
    ogb_dir = root / meta.dir_name
    unzipped = root / _zip_folder(meta)
    return unzipped if not ogb_dir.is_dir() and unzipped.is_dir() else ogb_dir


def _download_hint(meta: OgbnMeta, root: Path) -> str:
    return (
        f"Nothing is downloaded at run time. Fetch {meta.url} yourself and unzip it in {root} (it unpacks to "
        f"{_zip_folder(meta)!r}; {meta.dir_name!r}, as the `ogb` package names it, is read too)."
    )


def _raw_files(meta: OgbnMeta, ds_dir: Path) -> list[Path]:
    raw = ds_dir / "raw"
    if meta.binary:
        files = [raw / "data.npz", raw / "node-label.npz"]
    else:
        names = ["edge", "num-node-list", "num-edge-list", "node-label"]
        if meta.num_features:
            names.append("node-feat")
        if meta.num_edge_features:
            names.append("edge-feat")
        files = [raw / f"{n}.csv.gz" for n in names]
    files += [ds_dir / "split" / meta.split / f"{part}.csv.gz" for part in _SPLIT_PARTS]
    return files


def _optional_node_files(meta: OgbnMeta, ds_dir: Path) -> dict[str, Path]:
    found = {}
    for key in meta.additional_node_files:
        for candidate in (key, key.removeprefix("node_")):  # ogb once shipped proteins' species.csv.gz
            path = ds_dir / "raw" / f"{candidate}.csv.gz"
            if path.is_file():
                found[key] = path
                break
    return found


def _stamp(paths: list[Path], ds_dir: Path) -> dict[str, list[int | str]]:
    return {str(p.relative_to(ds_dir)): file_fingerprint(p) for p in paths}


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _parse_csv_raw(meta: OgbnMeta, ds_dir: Path) -> dict[str, np.ndarray]:
    """Parse the ``*.csv.gz`` layout into arrays (edges as stored, without inverse edges)."""
    raw = ds_dir / "raw"
    edge = read_csv_gz(raw / "edge.csv.gz", np.int64, ncols=2)
    num_nodes_list = read_csv_gz(raw / "num-node-list.csv.gz", np.int64, ncols=1)[:, 0]
    num_edges_list = read_csv_gz(raw / "num-edge-list.csv.gz", np.int64, ncols=1)[:, 0]
    _check(len(num_nodes_list) == 1, f"`num-node-list.csv.gz` must hold one graph, got {len(num_nodes_list)} rows")
    num_nodes = int(num_nodes_list[0])
    _check(
        int(num_edges_list.sum()) == len(edge),
        f"`edge.csv.gz` must have num-edge-list's {int(num_edges_list.sum())} rows, got {len(edge)}",
    )
    if len(edge):
        lo, hi = int(edge.min()), int(edge.max())
        _check(lo >= 0 and hi < num_nodes, f"`edge.csv.gz` must index nodes in [0, {num_nodes}), got [{lo}, {hi}]")
    arrays: dict[str, np.ndarray] = {
        "num_nodes": np.array(num_nodes, dtype=np.int64),
        "edge_index": np.ascontiguousarray(edge.T),
    }
    if meta.num_features:
        x = read_csv_gz(raw / "node-feat.csv.gz", np.float32, ncols=meta.num_features)
        _check(x.shape[0] == num_nodes, f"`node-feat.csv.gz` must have {num_nodes} rows, got {x.shape[0]}")
        arrays["x"] = x
    if meta.num_edge_features:
        edge_attr = read_csv_gz(raw / "edge-feat.csv.gz", np.float32, ncols=meta.num_edge_features)
        _check(len(edge_attr) == len(edge), f"`edge-feat.csv.gz` must have {len(edge)} rows, got {len(edge_attr)}")
        arrays["edge_attr"] = edge_attr
    y = read_csv_gz(raw / "node-label.csv.gz", np.float32, ncols=meta.num_tasks)
    _check(len(y) == num_nodes, f"`node-label.csv.gz` must have {num_nodes} rows, got {len(y)}")
    _check_labels(meta, y, "node-label.csv.gz")
    arrays["y"] = y
    for key, path in _optional_node_files(meta, ds_dir).items():
        values = read_csv_gz(path, np.int64)
        _check(len(values) == num_nodes, f"`{path.name}` must have {num_nodes} rows, got {len(values)}")
        arrays[key] = values
    arrays.update(_parse_split(meta, ds_dir, num_nodes))
    return arrays


def _parse_split(meta: OgbnMeta, ds_dir: Path, num_nodes: int) -> dict[str, np.ndarray]:
    arrays = {}
    for part in _SPLIT_PARTS:
        path = ds_dir / "split" / meta.split / f"{part}.csv.gz"
        idx = read_csv_gz(path, np.int64, ncols=1)[:, 0]
        if len(idx):
            lo, hi = int(idx.min()), int(idx.max())
            _check(lo >= 0 and hi < num_nodes, f"`{path.name}` must index nodes in [0, {num_nodes}), got [{lo}, {hi}]")
        arrays[f"{part}_idx"] = idx
    return arrays


def _extract_npz_member(archive: Path, member: str, target: Path) -> None:
    """Copy ``<member>.npy`` out of an ``.npz`` archive to ``target`` by streaming (O(1) memory)."""
    with reading(archive), zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        if f"{member}.npy" not in names:
            raise ValueError(f"`{archive.name}` must contain {member!r}, got {sorted(n[:-4] for n in names)}")
        tmp = temp_path(target)  # this loader's own: concurrent first loads never share a temporary
        try:
            with zf.open(f"{member}.npy") as src, open(tmp, "xb") as dst:
                shutil.copyfileobj(src, dst, length=16 << 20)
            os.replace(tmp, target)  # a process that mapped the previous copy keeps it (never rewritten in place)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _binary_members(meta: OgbnMeta, ds_dir: Path) -> dict[str, tuple[Path, str]]:
    raw = ds_dir / "raw"
    with reading(raw / "data.npz"), zipfile.ZipFile(raw / "data.npz") as zf:
        present = {n[:-4] for n in zf.namelist()}
    members = {"edge_index": (raw / "data.npz", "edge_index"), "y": (raw / "node-label.npz", "node_label")}
    pairs = [("x", "node_feat"), ("num_nodes_list", "num_nodes_list")]
    pairs += [(key, key) for key in meta.additional_node_files]
    for ours, theirs in pairs:
        if theirs in present:
            members[ours] = (raw / "data.npz", theirs)
    return members


def _parse_binary_raw(meta: OgbnMeta, ds_dir: Path, out_dir: Path | None) -> dict[str, np.ndarray]:
    """Read the ``data.npz`` layout. With ``out_dir``, stream every array to ``out_dir/<key>.npy`` and
    memory-map it; without, load it into memory."""
    arrays: dict[str, np.ndarray] = {}
    for ours, (archive, member) in _binary_members(meta, ds_dir).items():
        if out_dir is None or ours == "num_nodes_list":  # (a few ints: read, not cached)
            with reading(archive, (ValueError,)), np.load(archive, allow_pickle=False) as npz:
                arrays[ours] = npz[member]
        else:
            _extract_npz_member(archive, member, out_dir / f"{ours}.npy")
            arrays[ours] = np.load(out_dir / f"{ours}.npy", mmap_mode="c", allow_pickle=False)
    if "num_nodes_list" in arrays:
        num_nodes = int(np.asarray(arrays.pop("num_nodes_list")).sum())
    else:
        num_nodes = len(arrays["y"])
    _check(len(arrays["y"]) == num_nodes, f"`node-label.npz` must have {num_nodes} rows, got {len(arrays['y'])}")
    arrays["num_nodes"] = np.array(num_nodes, dtype=np.int64)
    arrays["y"] = arrays["y"].reshape(num_nodes, -1) if arrays["y"].ndim == 1 else arrays["y"]
    _check(arrays["y"].shape[1:] == (meta.num_tasks,),
           f"`node-label.npz` must have {meta.num_tasks} column(s) ({meta.name}'s tasks), got shape {arrays['y'].shape}")
    _check_labels(meta, arrays["y"], "node-label.npz")
    if "x" in arrays:
        _check(arrays["x"].ndim == 2 and arrays["x"].shape == (num_nodes, meta.num_features),
               f"`data.npz` node_feat must have shape ({num_nodes}, {meta.num_features}) ({meta.name}'s feature width), "
               f"got {arrays['x'].shape}")
    arrays.update(_parse_split(meta, ds_dir, num_nodes))
    return arrays


def _check_labels(meta: OgbnMeta, y: np.ndarray, source: str, rows: int = 1 << 22) -> None:
    """Every label a class id of ``meta``: a whole number in ``[0, num_classes)`` (binary tasks: 0 or 1), or NaN
    (unlabelled). Read ``rows`` rows at a time (papers100M's labels are memory-mapped)."""
    for start in range(0, len(y), rows):
        part = np.asarray(y[start:start + rows])
        if part.dtype.kind == "f":
            part = part[~np.isnan(part)]
        bad = (part < 0) | (part >= meta.num_classes) | (part != np.floor(part))
        if bad.any():
            raise ValueError(f"`{source}` must hold class ids in [0, {meta.num_classes}) ({meta.name}'s "
                             f"{meta.num_classes} classes) or NaN, got {part[bad].flat[0]:g}")


def _shapes(arrays: dict[str, np.ndarray]) -> dict[str, list[Any]]:
    """``{key: [shape, dtype]}`` of the arrays, as the manifest records them."""
    return {key: [list(a.shape), str(a.dtype)] for key, a in arrays.items()}


def _shape_problem(meta: OgbnMeta, arrays: dict[str, np.ndarray], recorded: Any) -> str | None:
    """Why cached ``arrays`` cannot be served (a shape or dtype other than the manifest ``recorded``, or one that
    disagrees with ``meta`` and the other arrays), or None."""
    if not isinstance(recorded, dict) or _shapes(arrays) != {k: recorded.get(k) for k in arrays}:
        return f"shapes and dtypes must be the manifest's {str(recorded)[:200]}, got {_shapes(arrays)}"
    n = int(arrays["num_nodes"])
    edges = arrays["edge_index"].shape
    want = {"edge_index": (2, edges[1] if len(edges) == 2 else -1), "y": (n, meta.num_tasks)}
    if meta.num_features:
        want["x"] = (n, meta.num_features)
    if meta.num_edge_features:
        want["edge_attr"] = (want["edge_index"][1], meta.num_edge_features)
    for key, shape in want.items():
        if arrays[key].shape != shape:
            return f"{key}.npy must have shape {shape} ({meta.name}), got {arrays[key].shape}"
    for key in [f"{part}_idx" for part in _SPLIT_PARTS]:
        if arrays[key].ndim != 1:
            return f"{key}.npy must be 1-D, got shape {arrays[key].shape}"
    for key in meta.additional_node_files:
        if key in arrays and (arrays[key].ndim == 0 or arrays[key].shape[0] != n):
            return f"{key}.npy must have {n} rows, got shape {arrays[key].shape}"
    return None


def _cache_keys(meta: OgbnMeta) -> tuple[set[str], set[str]]:
    """The arrays a cache of ``meta`` must hold, and those it may hold besides."""
    required = {"num_nodes", "edge_index", "y", *(f"{part}_idx" for part in _SPLIT_PARTS)}
    if meta.num_features:
        required.add("x")
    if meta.num_edge_features:
        required.add("edge_attr")
    return required, set(meta.additional_node_files)


def _stale_cache(path: Path, what: str) -> None:
    warnings.warn(f"cache file {path} is corrupt ({what[:300]}); rebuilding the cache from the raw files", stacklevel=4)


def _load_cache(meta: OgbnMeta, cache_dir: Path, stamp: dict, mmap: bool) -> dict[str, np.ndarray] | None:
    """The cached arrays, or ``None`` when the cache is missing, out of date or damaged (a warning names a damaged
    file: a manifest that is not a JSON object of the expected keys, that names arrays this dataset does not have or
    lacks one it needs, an array file missing, truncated or not ``.npy``)."""
    manifest = cache_dir / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        info = json.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        _stale_cache(manifest, f"not JSON: {exc}")
        return None
    if not isinstance(info, dict) or not {"format", "sources", "arrays"} <= info.keys():
        _stale_cache(manifest, f"a JSON object with format, sources and arrays expected, got {str(info)[:100]}")
        return None
    if info["format"] != _CACHE_FORMAT or info["sources"] != stamp:
        return None  # written by another version, or for other raw files: out of date, not damaged
    required, optional = _cache_keys(meta)
    names = info["arrays"]
    # Only names of this dataset's arrays are joined to a path: a manifest cannot point the loader elsewhere.
    if not isinstance(names, list) or not all(isinstance(k, str) for k in names) or not (
            required <= set(names) <= required | optional):
        _stale_cache(manifest, f"arrays must be {sorted(required)} (+ {sorted(optional)}), got {str(names)[:200]}")
        return None
    arrays = {}
    for key in names:
        path = cache_dir / f"{key}.npy"
        try:
            arrays[key] = np.load(path, mmap_mode="c" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:  # missing, truncated or overwritten: rebuild from the raw files
            _stale_cache(path, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            return None
    problem = _shape_problem(meta, arrays, info.get("shapes"))
    if problem is not None:
        _stale_cache(cache_dir, problem)
        return None
    return arrays


def _write_cache(cache_dir: Path, stamp: dict, arrays: dict[str, np.ndarray]) -> None:
    for key, value in arrays.items():
        if isinstance(value, np.memmap):  # already streamed into the cache by _parse_binary_raw
            continue
        atomic_save_npy(cache_dir / f"{key}.npy", value)
    info = {"format": _CACHE_FORMAT, "sources": stamp, "arrays": sorted(arrays), "shapes": _shapes(arrays)}
    tmp = temp_path(cache_dir / "manifest.json")
    try:
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, cache_dir / "manifest.json")  # last: the cache is valid only once every array is in place
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _tensor(array: np.ndarray) -> torch.Tensor:
    # Memory maps are opened copy-on-write ("c"), so they are writable and torch does not warn; writes stay
    # private to this process and never reach the file.
    return torch.from_numpy(array) if isinstance(array, np.ndarray) and array.ndim else torch.as_tensor(array)


def _to_dataset(meta: OgbnMeta, arrays: dict[str, np.ndarray]) -> NodeDataset:
    num_nodes = int(arrays["num_nodes"])
    edge_index = _tensor(arrays["edge_index"])
    if edge_index.dtype != torch.int64:
        edge_index = edge_index.to(torch.int64)
    edge_attr = _tensor(arrays["edge_attr"]) if "edge_attr" in arrays else None
    if meta.add_inverse_edge:
        edge_index, edge_attr = add_inverse_edges(edge_index, edge_attr)
    y = _tensor(arrays["y"])
    if "classification" in meta.task_type and not bool(torch.isnan(y.float()).any()):
        y = y.to(torch.long)  # as OGB: integer labels unless some are missing (NaN)
    data = OgbnData(num_nodes=num_nodes, edge_index=edge_index, y=y)
    if "x" in arrays:
        data.x = _tensor(arrays["x"])
    if edge_attr is not None:
        data.edge_attr = edge_attr
    for key in meta.additional_node_files:
        if key in arrays:
            data[key] = _tensor(arrays[key])
    for part in _SPLIT_PARTS:
        data[f"{part}_idx"] = _tensor(arrays[f"{part}_idx"]).to(torch.long)
    return ogbn_dataset(meta, data)


def load_ogbn(
    name: str,
    root: str | os.PathLike[str],
    *,
    cache: bool = True,
    mmap: bool | None = None,
) -> NodeDataset:
    """Load an OGB node property prediction dataset from files already on disk, as OGB's
    ``PygNodePropPredDataset`` gives it: ``dataset[0]`` is the graph, ``dataset.get_idx_split()`` the split.

    ============== =========== =============== ========== ============================ =========================
    name           nodes       ``edge_index``  ``x``      ``y``                        split (train/valid/test)
    ============== =========== =============== ========== ============================ =========================
    ogbn-arxiv     169,343     1,166,243 dir.  [N, 128]   [N, 1] int64, 40 classes     time
    ogbn-products  2,449,029   123,718,280 (1) [N, 100]   [N, 1] int64, 47 classes     sales_ranking
    ogbn-proteins  132,534     79,122,504 (1)  none (2)   [N, 112] int64 0/1 tasks     species
    ogbn-papers100M 111,059,956 1,615,685,872  [N, 128]   [N, 1] float, NaN unlabeled  time
    ============== =========== =============== ========== ============================ =========================

    (1) ``add_inverse_edge``: each raw edge ``(u, v)`` is followed by ``(v, u)``, as in OGB's loaders. ogbn-arxiv
    and papers100M are returned directed, as stored; symmetrise them yourself (e.g. ``to_undirected``) if wanted.
    (2) ogbn-proteins has no node features; ``edge_attr`` is ``[E, 8]`` float32 and ``node_species`` ``[N, 1]``
    (when the raw file is present). A common choice of ``x`` is the mean of the incoming ``edge_attr``.

    Args:
        name: ``"ogbn-arxiv"``, ``"ogbn-products"``, ``"ogbn-proteins"`` or ``"ogbn-papers100M"``
            (case-insensitive; ``_`` accepted for ``-``).
        root: Directory holding ``<name with - replaced by _>/raw`` and ``.../split`` (the ``ogb`` layout), or the
            folder OGB's zip unpacks to (``arxiv``, ``products``, ``proteins``, ``papers100M-bin``) in its place.
        cache: Keep parsed arrays as ``.npy`` in ``<root>/<dir>/processed_cudnn_gnn/`` and reuse them while the raw
            files are unchanged (size, mtime and a hash of their first and last megabyte; a cached array of another
            shape than recorded, or than the dataset has, is rebuilt with a warning). If that folder cannot be
            written, a warning is issued and the data is returned uncached. Processes may load one dataset at once:
            each writes its own temporaries (``.<file>.<host>.<pid>.<random>.tmp``) and renames them into place
            (manifest last), never rewriting a file another has mapped; temporaries of killed loaders of this host
            are deleted at the next rebuild.
        mmap: Memory-map the cached arrays (copy-on-write) instead of reading them. Default: only for
            ogbn-papers100M. Needs ``cache=True``.

    Returns:
        A :class:`~cudnn_gnn.datasets.NodeDataset` (``len`` 1; ``num_classes``, ``num_features``, ``num_tasks``,
        ``task_type``, ``eval_metric``, ``get_idx_split()``) whose ``[0]`` is the graph: ``num_nodes``,
        ``edge_index [2, E] int64``, ``y``, ``x`` (when the dataset has node features), ``edge_attr`` (proteins),
        ``node_year``/``node_species`` ``[N, 1]`` when their raw files are present, ``train_idx``/``valid_idx``/
        ``test_idx`` ``[n] int64``, and the plain attributes ``num_classes``, ``num_tasks``, ``task_type`` and
        ``eval_metric``.

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: Unknown ``name``; ``root`` a file; ``mmap=True`` with ``cache=False``; raw files inconsistent
            with each other or with the dataset's metadata (feature width, label columns, labels that are not class
            ids); a raw file corrupt (truncated or not gzip/zip: the file is named). A damaged cache (a
            manifest that is not JSON, not an object with ``format``/``sources``/``arrays``, or lists arrays this
            dataset does not have; an array missing, truncated or not ``.npy``) is not an error: it is reported with
            a warning naming the file and rebuilt from the raw files.
        FileNotFoundError: The dataset folder or a required file is missing (every missing path is named with
            the OGB URL to fetch by hand).

    Example:
        >>> dataset = load_ogbn("ogbn-arxiv", "~/ogb")  # doctest: +SKIP
        >>> data, split = dataset[0], dataset.get_idx_split()  # doctest: +SKIP
        >>> data.x[split["train"]].shape  # doctest: +SKIP
        torch.Size([90941, 128])
    """
    meta = ogbn_meta(name)
    root_path = as_folder(root, "root")
    if not isinstance(cache, bool):
        raise TypeError(f"`cache` must be a bool, got {type(cache).__name__}")
    if mmap is not None and not isinstance(mmap, bool):
        raise TypeError(f"`mmap` must be a bool or None, got {type(mmap).__name__}")
    use_mmap = meta.binary if mmap is None else mmap
    if use_mmap and not cache:
        if mmap:
            raise ValueError("`mmap` must be False when `cache` is False (maps are made of cache files), got True")
        use_mmap = False

    ds_dir = _dataset_dir(meta, root_path)
    if not ds_dir.is_dir():
        raise FileNotFoundError(
            f"`root` must hold the folder {meta.dir_name!r} or {_zip_folder(meta)!r} for {meta.name}, got "
            f"{str(root_path)!r} (neither exists). {_download_hint(meta, root_path)}"
        )
    required = _raw_files(meta, ds_dir)
    require_files(required, what=f"{meta.name} files", hint=_download_hint(meta, root_path))
    sources = required + list(_optional_node_files(meta, ds_dir).values())
    stamp = _stamp(sources, ds_dir)

    cache_dir = ds_dir / CACHE_DIR_NAME
    if cache:
        arrays = _load_cache(meta, cache_dir, stamp, use_mmap)
        if arrays is not None:
            return _to_dataset(meta, arrays)
        try:
            cache_dir.mkdir(exist_ok=True)
            (cache_dir / "manifest.json").unlink(missing_ok=True)  # invalid until rewritten
            remove_stale_temps(cache_dir)  # what writers of this host left when they were killed
        except OSError as exc:
            warnings.warn(f"cannot write the cache {cache_dir} ({exc}); loading without cache", stacklevel=2)
            cache = False
            use_mmap = False

    if meta.binary:
        arrays = _parse_binary_raw(meta, ds_dir, cache_dir if cache else None)
    else:
        arrays = _parse_csv_raw(meta, ds_dir)
    if cache:
        try:
            _write_cache(cache_dir, stamp, arrays)
        except OSError as exc:
            warnings.warn(f"cannot write the cache {cache_dir} ({exc}); data returned uncached", stacklevel=2)
        else:
            if use_mmap and not meta.binary:
                reloaded = _load_cache(meta, cache_dir, stamp, True)
                arrays = reloaded if reloaded is not None else arrays
    return _to_dataset(meta, arrays)


def ogb_evaluator(name: str, *, backend: str = "auto") -> Any:
    """Return an evaluator for an OGB node dataset with OGB's ``eval(input_dict)`` interface.

    Args:
        name: An ``ogbn-*`` name accepted by :func:`load_ogbn`.
        backend: ``"auto"``: ``ogb.nodeproppred.Evaluator(name)`` when the optional ``ogb`` package is installed
            (``pip install 'cudnn-gnn[ogb]'``), else the built-in one; ``"ogb"`` or ``"builtin"`` to force one.

    Returns:
        An object whose ``eval({"y_true": ..., "y_pred": ...})`` returns ``{"acc": ...}`` (arxiv, products,
        papers100M: ``y_pred`` are class ids ``[n, 1]``) or ``{"rocauc": ...}`` (proteins: scores ``[n, 112]``,
        ROC-AUC averaged over tasks that have both labels).

    Raises:
        ValueError: Unknown ``name`` or ``backend``.
        RuntimeError: ``backend="ogb"`` and ``ogb`` is not installed.
    """
    meta = ogbn_meta(name)
    return make_evaluator("ogb.nodeproppred", meta.name, meta.num_tasks, meta.eval_metric, backend)
