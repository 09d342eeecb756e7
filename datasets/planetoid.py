"""Planetoid citation graphs (Cora, CiteSeer, PubMed) with the public split of Yang et al. (2016).

Cora and CiteSeer ship with the package as archives of plain arrays (``cudnn_gnn/datasets/data/planetoid/
<name>.npz``, read with ``allow_pickle=False``; built from the original files by ``_build_bundled.py``), so they
load offline with no download, no write and no unpickling. Other copies, and PubMed (not bundled), are read from
``root`` laid out as PyG's ``Planetoid`` expects it, by PyG's own ``read_planetoid_data``, so the result is the same
as ``torch_geometric.datasets.Planetoid(root, name)[0]`` built from the same files. Those raw files are Python
pickles: loading one runs any code it was crafted to hold, so pass only files from a source you trust.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import torch
from torch_geometric.data import Data

from cudnn_gnn.datasets._build_bundled import read_bundled
from cudnn_gnn.datasets._io import as_folder, corrupt_file_error, package_data_dir, require_files

__all__ = ["load_planetoid", "PLANETOID_NAMES"]

#: Canonical dataset names, as PyG spells them (and as the ``<root>/<Name>/raw`` folder must be named).
PLANETOID_NAMES = ("Cora", "CiteSeer", "PubMed")
_BUNDLED = ("Cora", "CiteSeer")
_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_SPLITS = ("public", "full")


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
) -> Data:
    """Load a Planetoid citation graph as one PyG ``Data`` object.

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
        split: ``"public"`` (Planetoid's fixed 20 labels per class for training) or ``"full"`` (every node
            outside validation and test is a training node), as in PyG's ``Planetoid``.
        normalize_features: Row-normalise ``x`` to sum to one, as PyG's ``NormalizeFeatures`` transform and
            the GAT paper (Velickovic et al., 2018) do.

    Returns:
        ``Data(x=[N, F] float32, edge_index=[2, E] int64, y=[N] int64, train_mask=[N], val_mask=[N],
        test_mask=[N])`` with boolean masks.

    Raises:
        TypeError: ``name``, ``root``, ``split`` or ``normalize_features`` has the wrong type.
        ValueError: ``name`` or ``split`` is not one of the accepted values, or ``root`` is a file.
        FileNotFoundError: A raw file is missing (every missing file is named, with where to put it).
        ValueError: A raw file is corrupt (truncated or not a Planetoid pickle): the file is named.

    Example:
        >>> data = load_planetoid("Cora", normalize_features=True)
        >>> data.num_nodes, int(data.train_mask.sum())
        (2708, 140)
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
        data = _read_raw(as_folder(root, "root") / canonical / "raw", canonical)
    if split == "full":
        train_mask = torch.ones_like(data.train_mask)
        train_mask[data.val_mask | data.test_mask] = False
        data.train_mask = train_mask
    if normalize_features:
        x = data.x - data.x.min()
        data.x = x / x.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return data


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
