"""Planetoid citation graphs (Cora, CiteSeer, PubMed) with the splits of PyG's ``Planetoid``: the public split of
Yang et al. (2016), ``full``, ``random`` and Geom-GCN's ten (Pei et al., 2020).

Cora and CiteSeer ship with the package as archives of plain arrays (``cudnn_gnn/datasets/data/planetoid/
<name>.npz``, read with ``allow_pickle=False``; built from the original files by ``_build_bundled.py``), so they
load offline with no download, no write and no unpickling. Other copies, and PubMed (not bundled), are read from
``root`` laid out as PyG's ``Planetoid`` expects it, by PyG's own ``read_planetoid_data``, so the result is the same
as ``torch_geometric.datasets.Planetoid(root, name)[0]`` built from the same files. Those raw files are Python
pickles: loading one runs any code it was crafted to hold, so pass only files from a source you trust.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch
from torch_geometric.data import Data

from cudnn_gnn.datasets._build_bundled import read_bundled
from cudnn_gnn.datasets._io import as_folder, corrupt_file_error, package_data_dir, require_files
from cudnn_gnn.datasets.node_dataset import NodeDataset

__all__ = ["load_planetoid", "PLANETOID_NAMES"]

#: Canonical dataset names, as PyG spells them (and as the ``<root>/<Name>/raw`` folder must be named).
PLANETOID_NAMES = ("Cora", "CiteSeer", "PubMed")
_BUNDLED = ("Cora", "CiteSeer")
_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_SPLITS = ("public", "full", "random", "geom-gcn")
_GEOM_GCN_SPLITS = 10
_GEOM_GCN_URL = "https://github.com/graphdml-uiuc-jlu/geom-gcn/tree/master/splits"


def _raw_paths(raw_dir: Path, name: str) -> list[Path]:
    return [raw_dir / f"ind.{name.lower()}.{suffix}" for suffix in _SUFFIXES]


def _raise_corrupt(raw_dir: Path, name: str, exc: BaseException) -> NoReturn:
    """PyG's reader failed: read the raw files one by one and name the first damaged one (else re-raise)."""
    from torch_geometric.io.planetoid import read_file

    for path in _raw_paths(raw_dir, name):
        suffix = path.name[len(f"ind.{name.lower()}."):]
        try:
            read_file(str(raw_dir), name.lower(), suffix)
        except Exception as file_exc:  # noqa: BLE001 - any failure to read one file means that file is damaged
            raise corrupt_file_error(
                path, file_exc, f"delete it and put a fresh copy in {raw_dir} "
                "(from https://github.com/kimiyoung/planetoid/tree/master/data)") from exc
    raise exc


def load_planetoid(
    name: str = "Cora",
    root: str | os.PathLike[str] | None = None,
    *,
    split: str = "public",
    normalize_features: bool = False,
    num_train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
    transform: Callable[[Data], Data] | None = None,
) -> NodeDataset:
    """Load a Planetoid citation graph as PyG's ``Planetoid`` does: a dataset of one graph, ``dataset[0]``.

    The graph is undirected (both directions stored), without self-loops, with the standard masks:

    ======== ===== ====== ======== ======= ============================
    name     nodes edges  features classes train / val / test (public)
    ======== ===== ====== ======== ======= ============================
    Cora     2708  10556  1433     7       140 / 500 / 1000
    CiteSeer 3327  9104   3703     6       120 / 500 / 1000
    PubMed   19717 88648  500      3       60 / 500 / 1000
    ======== ===== ====== ======== ======= ============================

    Args:
        name: ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"`` (case-insensitive).
        root: ``None`` for the copy bundled with the package (Cora, CiteSeer: plain arrays, no pickle), or a
            directory holding ``<root>/<Name>/raw/ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}`` (PyG's
            layout). **Those raw files are pickles and are unpickled: a crafted file runs code when loaded; pass a
            trusted copy only.** Nothing is ever written under ``root`` or the package.
        split: As in PyG's ``Planetoid``: ``"public"`` (Planetoid's fixed 20 labels per class for training),
            ``"full"`` (every node outside validation and test is a training node), ``"random"``
            (``num_train_per_class`` nodes of each class for training, then ``num_val`` and ``num_test`` of the rest,
            drawn from torch's global generator in PyG's order, so a seed gives PyG's split) or ``"geom-gcn"`` (the
            ten 60/20/20 splits of Geom-GCN, masks ``[N, 10]``; their files are not bundled: put
            ``<name>_split_0.6_0.2_{0..9}.npz`` from the Geom-GCN repository in ``<root>/<Name>/geom-gcn/raw/``,
            PyG's layout, and pass ``root``; the graph is read from the raw files there too, or is the bundled one
            for Cora and CiteSeer when they are absent).
        normalize_features: Row-normalise ``x`` to sum to one, as PyG's ``NormalizeFeatures`` transform and
            the GAT paper (Velickovic et al., 2018) do.
        num_train_per_class, num_val, num_test: The sizes of a ``"random"`` split (PyG's defaults).
        transform: Applied to the graph at every ``dataset[0]`` (PyG's ``transform``).

    Returns:
        A :class:`~cudnn_gnn.datasets.NodeDataset` (``len`` 1, ``num_classes``, ``num_features``) whose ``[0]`` is
        ``Data(x=[N, F] float32, edge_index=[2, E] int64, y=[N] int64, train_mask=[N], val_mask=[N],
        test_mask=[N])`` with boolean masks (``[N, 10]`` for ``"geom-gcn"``).

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: ``name`` or ``split`` is not one of the accepted values, a split size is negative, or ``root``
            is a file.
        FileNotFoundError: A raw or split file is missing (every missing file is named, with where to put it).
        ValueError: A raw file is corrupt (truncated or not a Planetoid pickle): the file is named.

    Example:
        >>> dataset = load_planetoid("Cora", normalize_features=True)
        >>> data = dataset[0]
        >>> len(dataset), dataset.num_classes, data.num_nodes, int(data.train_mask.sum())
        (1, 7, 2708, 140)
    """
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a str, got {type(name).__name__}")
    canonical = {n.lower(): n for n in PLANETOID_NAMES}.get(name.lower())
    if canonical is None:
        raise ValueError(f"`name` must be one of {PLANETOID_NAMES} (case-insensitive), got {name!r}")
    if not isinstance(split, str):
        raise TypeError(f"`split` must be a str, got {type(split).__name__}")
    if split not in _SPLITS:
        raise ValueError(f"`split` must be one of {_SPLITS}, got {split!r}")
    if not isinstance(normalize_features, bool):
        raise TypeError(f"`normalize_features` must be a bool, got {type(normalize_features).__name__}")
    for arg, value in (("num_train_per_class", num_train_per_class), ("num_val", num_val), ("num_test", num_test)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"`{arg}` must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"`{arg}` must be >= 0, got {value}")
    if transform is not None and not callable(transform):
        raise TypeError(f"`transform` must be callable or None, got {type(transform).__name__}")

    masks = _geom_gcn_masks(root, canonical) if split == "geom-gcn" else None
    if root is None:
        if canonical not in _BUNDLED:
            files = ",".join(_SUFFIXES)
            raise FileNotFoundError(
                f"`root` must be given for {canonical}, got None: only {_BUNDLED} ship with cudnn-gnn. Put the "
                f"Planetoid raw files ind.{canonical.lower()}.{{{files}}} in <root>/{canonical}/raw/ "
                "(from https://github.com/kimiyoung/planetoid/tree/master/data) and pass root=<root>."
            )
        data = read_bundled(package_data_dir() / "planetoid" / f"{canonical.lower()}.npz")
    else:
        raw_dir = as_folder(root, "root") / canonical / ("geom-gcn/raw" if split == "geom-gcn" else "raw")  # PyG's
        if split == "geom-gcn" and canonical in _BUNDLED and not all(p.is_file() for p in _raw_paths(raw_dir, canonical)):
            data = read_bundled(package_data_dir() / "planetoid" / f"{canonical.lower()}.npz")  # the split files only
        else:
            data = _read_raw(raw_dir, canonical)
    if split == "full":
        train_mask = torch.ones_like(data.train_mask)
        train_mask[data.val_mask | data.test_mask] = False
        data.train_mask = train_mask
    elif split == "random":
        _random_split(data, num_train_per_class, num_val, num_test)
    elif masks is not None:
        data.train_mask, data.val_mask, data.test_mask = masks
    if normalize_features:
        x = data.x - data.x.min()
        data.x = x / x.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return NodeDataset(data, name=canonical, transform=transform)


def _random_split(data: Data, num_train_per_class: int, num_val: int, num_test: int) -> None:
    """PyG's ``Planetoid(split="random")``, draw for draw (torch's global generator): ``num_train_per_class``
    random nodes of each class, then ``num_val`` and ``num_test`` of a random order of the rest."""
    data.train_mask = torch.zeros_like(data.train_mask)
    for c in range(int(data.y.max()) + 1):
        idx = (data.y == c).nonzero(as_tuple=False).view(-1)
        data.train_mask[idx[torch.randperm(idx.size(0))[:num_train_per_class]]] = True
    remaining = (~data.train_mask).nonzero(as_tuple=False).view(-1)
    remaining = remaining[torch.randperm(remaining.size(0))]
    data.val_mask = torch.zeros_like(data.val_mask)
    data.val_mask[remaining[:num_val]] = True
    data.test_mask = torch.zeros_like(data.test_mask)
    data.test_mask[remaining[num_val : num_val + num_test]] = True


def _geom_gcn_masks(root: str | os.PathLike[str] | None, canonical: str) -> tuple[torch.Tensor, ...]:
    """Geom-GCN's ten splits as ``[N, 10]`` train/val/test masks, read (no pickle) from PyG's layout
    ``<root>/<Name>/geom-gcn/raw/<name>_split_0.6_0.2_<i>.npz``."""
    names = [f"{canonical.lower()}_split_0.6_0.2_{i}.npz" for i in range(_GEOM_GCN_SPLITS)]
    hint = (f"Geom-GCN's split files are not bundled with cudnn-gnn: fetch {', '.join(names[:2])}, ... "
            f"{names[-1]} from {_GEOM_GCN_URL}, put them in <root>/{canonical}/geom-gcn/raw/ (PyG's layout) and pass "
            "root=<root>; nothing is downloaded")
    if root is None:
        raise FileNotFoundError(f"`root` must be given for split='geom-gcn', got None: {hint}")
    raw_dir = as_folder(root, "root") / canonical / "geom-gcn" / "raw"
    paths = [raw_dir / n for n in names]
    require_files(paths, what=f"{canonical} Geom-GCN split files", hint=hint)
    masks: dict[str, list[torch.Tensor]] = {"train_mask": [], "val_mask": [], "test_mask": []}
    for path in paths:
        try:
            with np.load(path, allow_pickle=False) as arrays:
                for key, found in masks.items():
                    found.append(torch.from_numpy(np.asarray(arrays[key])))
        except Exception as exc:  # noqa: BLE001 - any failure to read one file means that file is damaged
            raise corrupt_file_error(path, exc, f"delete it and put a fresh copy in {raw_dir} (from {_GEOM_GCN_URL})"
                                     ) from exc
    return tuple(torch.stack(found, dim=1).bool() for found in masks.values())


def _read_raw(raw_dir: Path, canonical: str) -> Data:
    """PyG's reader over ``raw_dir`` (unpickles the files: trusted input only), naming a missing or damaged file."""
    require_files(
        _raw_paths(raw_dir, canonical),
        what=f"{canonical} raw files",
        hint=(
            f"Put the Planetoid files ind.{canonical.lower()}.* in {raw_dir} "
            "(from https://github.com/kimiyoung/planetoid/tree/master/data); nothing is downloaded."
        ),
    )

    # Local import: torch_geometric.io pulls in optional readers we do not need at package import time.
    from torch_geometric.io import read_planetoid_data

    try:
        return read_planetoid_data(str(raw_dir), canonical.lower())
    except Exception as exc:  # noqa: BLE001 - find the damaged file and name it
        _raise_corrupt(raw_dir, canonical, exc)
