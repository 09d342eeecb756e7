"""OGB graph property prediction molecule sets: ogbg-molbace, -molbbbp, -molesol, -molfreesolv.

All four ship with the package (about 0.5 MB, in OGB's raw layout under ``cudnn_gnn/datasets/data/ogb``), so
they load offline. They are MoleculeNet sets (Wu et al., 2018) as distributed by OGB (Hu et al., 2020), MIT
licence; see ``datasets/README.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch
from torch_geometric.data import Data

from cudnn_gnn.datasets._io import as_folder, package_data_dir, read_csv_gz, require_files
from cudnn_gnn.datasets._meta import OgbgMeta, ogbg_meta
from cudnn_gnn.datasets._metrics import make_evaluator
from cudnn_gnn.datasets.ogb_node import add_inverse_edges

__all__ = ["OgbgDataset", "load_ogbg", "ogbg_evaluator", "OGB_ROOT_ENV"]

#: Environment variable naming a directory with more (or other copies of) OGB graph datasets.
OGB_ROOT_ENV = "CUDNN_GNN_OGB_ROOT"
_RAW = ("edge", "edge-feat", "node-feat", "graph-label", "num-node-list", "num-edge-list")
_SPLIT_PARTS = ("train", "valid", "test")


@dataclass(frozen=True)
class OgbgDataset:
    """A list of molecule graphs with OGB's split and task description.

    Attributes:
        name: OGB name, e.g. ``"ogbg-molbace"``.
        graphs: One ``Data`` per molecule: ``x [n, 9] int64`` (OGB atom features), ``edge_index [2, 2b] int64``
            (every bond in both directions, ``(u, v)`` then ``(v, u)``), ``edge_attr [2b, 3] int64`` (OGB bond
            features), ``y [1, num_tasks]`` (int64 for classification without missing labels, else float32
            with NaN for missing) and ``num_nodes``.
        split: ``{"train", "valid", "test"}`` -> ``int64`` graph indices (OGB's scaffold split).
        num_tasks: Number of target columns.
        task_type: ``"binary classification"`` or ``"regression"``.
        eval_metric: ``"rocauc"`` or ``"rmse"``.
        root: Directory the dataset was read from.
        num_classes: As OGB's datasets: 2 for binary classification, -1 for regression.

    Indexing follows PyG's and OGB's datasets: ``ds[i]`` is one ``Data``; ``ds[split["train"]]`` (a 1-D integer
    tensor or array, a list, a slice or a ``[len(ds)]`` bool mask) is an :class:`OgbgDataset` of those graphs, in
    that order, whose ``split`` holds, per part, the positions of its graphs that belong to that part.
    """

    name: str
    graphs: list[Data] = field(repr=False)
    split: dict[str, torch.Tensor] = field(repr=False)
    num_tasks: int
    task_type: str
    eval_metric: str
    root: Path
    num_classes: int = -1

    def __len__(self) -> int:
        return len(self.graphs)

    @property
    def num_features(self) -> int:
        """Width of each graph's ``x`` (OGB's 9 atom features), as PyG's ``Dataset.num_features``; 0 when empty."""
        return int(self.graphs[0].x.size(-1)) if self.graphs else 0

    @property
    def num_node_features(self) -> int:
        """Same as :attr:`num_features` (PyG's name)."""
        return self.num_features

    @property
    def num_edge_features(self) -> int:
        """Width of each graph's ``edge_attr`` (OGB's 3 bond features); 0 when empty."""
        return int(self.graphs[0].edge_attr.size(-1)) if self.graphs else 0

    @overload
    def __getitem__(self, index: int) -> Data: ...

    @overload
    def __getitem__(self, index: slice | torch.Tensor | np.ndarray | Sequence[int]) -> Data | OgbgDataset: ...

    def __getitem__(self, index: Any) -> Data | OgbgDataset:
        """``ds[i]``: graph ``i``; ``ds[indices]``: the dataset of those graphs (see the class docstring).

        Raises:
            TypeError: ``index`` is not an int, slice, sequence, integer or bool tensor/array.
            ValueError: An index tensor that is not 1-D, or a bool mask not of length ``len(ds)``.
            IndexError: An index outside ``[-len(ds), len(ds))``.
        """
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return self.graphs[int(index)]
        if isinstance(index, (torch.Tensor, np.ndarray)) and index.ndim == 0 and index.dtype not in (torch.bool, bool):
            return self.graphs[int(index)]
        return self.index_select(self._positions(index))

    def _positions(self, index: Any) -> torch.Tensor:
        n = len(self.graphs)
        if isinstance(index, slice):
            return torch.arange(n)[index]
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        elif not isinstance(index, torch.Tensor):
            if isinstance(index, (str, bytes)) or not isinstance(index, Sequence):
                raise TypeError(f"`index` must be an int, a slice, a sequence or a tensor, got {type(index).__name__}")
            index = torch.as_tensor(list(index)) if len(index) else torch.empty(0, dtype=torch.long)
        if index.dtype == torch.bool:
            if tuple(index.shape) != (n,):
                raise ValueError(f"`index` as a mask must have shape ({n},), got {tuple(index.shape)}")
            return index.nonzero().view(-1)
        if index.dtype.is_floating_point or index.dtype.is_complex:
            raise TypeError(f"`index` must hold integers or bools, got {index.dtype}")
        if index.dim() != 1:
            raise ValueError(f"`index` must be 1-D, got shape {tuple(index.shape)}")
        index = index.long()
        if index.numel() and (int(index.min()) < -n or int(index.max()) >= n):
            raise IndexError(f"`index` must be in [-{n}, {n}), got values in [{int(index.min())}, {int(index.max())}]")
        return torch.where(index < 0, index + n, index)

    def index_select(self, index: torch.Tensor) -> OgbgDataset:
        """The dataset of graphs ``index`` (``[k]`` int64 in ``[0, len)``), in that order; its split holds the
        positions of its graphs in each part of this one's."""
        split = {part: torch.isin(index, idx).nonzero().view(-1) for part, idx in self.split.items()}
        return replace(self, graphs=[self.graphs[i] for i in index.tolist()], split=split)

    def __iter__(self) -> Iterator[Data]:
        return iter(self.graphs)

    def get_idx_split(self) -> dict[str, torch.Tensor]:
        """Return the split, as ``ogb``'s datasets do."""
        return dict(self.split)

    def subset(self, part: str) -> list[Data]:
        """Return the graphs of one split part (``"train"``, ``"valid"`` or ``"test"``)."""
        if part not in self.split:
            raise ValueError(f"`part` must be one of {tuple(self.split)}, got {part!r}")
        return [self.graphs[i] for i in self.split[part].tolist()]


def _check_labels(meta: OgbgMeta, label: np.ndarray) -> None:
    """Labels as ``meta`` says: 0 or 1 for binary classification, finite numbers for regression; NaN (missing)
    in either."""
    known = label[~np.isnan(label)]
    if "classification" in meta.task_type:
        bad = known[(known != 0) & (known != 1)]
        want = "0 or 1 (binary classification)"
    else:
        bad = known[~np.isfinite(known)]
        want = "finite numbers (regression)"
    if bad.size:
        raise ValueError(f"`graph-label.csv.gz` must hold {want} or NaN ({meta.name}), got {bad.flat[0]:g}")


def _resolve_root(meta: OgbgMeta, root: str | os.PathLike[str] | None) -> Path:
    if root is not None:
        return as_folder(root, "root")
    env = os.environ.get(OGB_ROOT_ENV)
    if env and (Path(env).expanduser() / meta.dir_name).is_dir():
        return Path(env).expanduser()
    return package_data_dir() / "ogb"


def load_ogbg(name: str, root: str | os.PathLike[str] | None = None) -> OgbgDataset:
    """Load an OGB molecule dataset as a list of PyG ``Data`` plus its split.

    ================ ====== ===== =========== ==================== ======
    name             graphs atoms bonds (raw) task                 metric
    ================ ====== ===== =========== ==================== ======
    ogbg-molbace     1513   51577 55768       binary, 1 task       rocauc
    ogbg-molbbbp     2039   49068 52921       binary, 1 task       rocauc
    ogbg-molesol     1128   14991 15428       regression, 1 task   rmse
    ogbg-molfreesolv 642    5600  5385        regression, 1 task   rmse
    ================ ====== ===== =========== ==================== ======

    Args:
        name: One of the four names above (case-insensitive; ``_`` accepted for ``-``).
        root: Directory holding ``<name with - replaced by _>/{raw,split}`` in OGB's layout. ``None``: the
            directory in ``$CUDNN_GNN_OGB_ROOT`` if it holds this dataset, else the copy bundled with the package.
            Nothing is written anywhere.

    Returns:
        An :class:`OgbgDataset` (``len``, indexing and iteration give ``Data``; usable with PyG's
        ``DataLoader``; ``ds[ds.get_idx_split()["train"]]`` is the training set, as with OGB's datasets) with
        ``num_features``, ``num_classes`` and ``num_tasks``.

    Raises:
        TypeError: ``name`` or ``root`` has the wrong type.
        ValueError: Unknown ``name``, ``root`` a file, or raw files inconsistent with each other.
        FileNotFoundError: A required file is missing (all are named, with the OGB URL).

    Example:
        >>> ds = load_ogbg("ogbg-molbace")
        >>> len(ds), ds[0].x.shape[1], ds.eval_metric
        (1513, 9, 'rocauc')
    """
    meta = ogbg_meta(name)
    base = _resolve_root(meta, root)
    ds_dir = base / meta.dir_name
    raw = ds_dir / "raw"
    split_dir = ds_dir / "split" / meta.split
    require_files(
        [raw / f"{n}.csv.gz" for n in _RAW] + [split_dir / f"{p}.csv.gz" for p in _SPLIT_PARTS],
        what=f"{meta.name} files",
        hint=f"Nothing is downloaded at run time: fetch {meta.url}, unzip it and rename the folder to {ds_dir}.",
    )

    nodes = read_csv_gz(raw / "num-node-list.csv.gz", np.int64, ncols=1)[:, 0]
    edges = read_csv_gz(raw / "num-edge-list.csv.gz", np.int64, ncols=1)[:, 0]
    x = read_csv_gz(raw / "node-feat.csv.gz", np.int64, ncols=meta.num_features)
    edge = read_csv_gz(raw / "edge.csv.gz", np.int64, ncols=2)
    edge_attr = read_csv_gz(raw / "edge-feat.csv.gz", np.int64, ncols=meta.num_edge_features)
    label = read_csv_gz(raw / "graph-label.csv.gz", np.float32, ncols=meta.num_tasks)
    _check_labels(meta, label)
    num_graphs = len(label)
    for what, got, want in (
        ("num-node-list.csv.gz rows", len(nodes), num_graphs),
        ("num-edge-list.csv.gz rows", len(edges), num_graphs),
        ("node-feat.csv.gz rows", len(x), int(nodes.sum())),
        ("edge.csv.gz rows", len(edge), int(edges.sum())),
        ("edge-feat.csv.gz rows", len(edge_attr), int(edges.sum())),
    ):
        if got != want:
            raise ValueError(f"`{what.split()[0]}` must have {want} rows ({meta.name}), got {got}")

    edge_index = torch.from_numpy(np.ascontiguousarray(edge.T))
    edge_attr_t = torch.from_numpy(edge_attr)
    if meta.add_inverse_edge:
        edge_index, edge_attr_t = add_inverse_edges(edge_index, edge_attr_t)
    factor = 2 if meta.add_inverse_edge else 1
    edge_counts = (edges * factor).tolist()
    y_all = torch.from_numpy(label)
    if "classification" in meta.task_type and not bool(torch.isnan(y_all).any()):
        y_all = y_all.to(torch.long)

    graphs = []
    for i, (xi, ei, ai) in enumerate(
        zip(
            torch.split(torch.from_numpy(x), nodes.tolist()),
            torch.split(edge_index, edge_counts, dim=1),
            torch.split(edge_attr_t, edge_counts),
        )
    ):
        graphs.append(Data(x=xi, edge_index=ei, edge_attr=ai, y=y_all[i : i + 1], num_nodes=int(nodes[i])))

    split = {}
    for part in _SPLIT_PARTS:
        idx = read_csv_gz(split_dir / f"{part}.csv.gz", np.int64, ncols=1)[:, 0]
        if len(idx) and (idx.min() < 0 or idx.max() >= num_graphs):
            raise ValueError(f"`{part}.csv.gz` must index graphs in [0, {num_graphs}), got [{idx.min()}, {idx.max()}]")
        split[part] = torch.from_numpy(idx)
    return OgbgDataset(
        name=meta.name,
        graphs=graphs,
        split=split,
        num_tasks=meta.num_tasks,
        task_type=meta.task_type,
        eval_metric=meta.eval_metric,
        root=base,
        num_classes=meta.num_classes,
    )


def ogbg_evaluator(name: str, *, backend: str = "auto") -> Any:
    """Return an evaluator for an OGB molecule dataset with OGB's ``eval(input_dict)`` interface.

    Args:
        name: A name accepted by :func:`load_ogbg`.
        backend: ``"auto"``: ``ogb.graphproppred.Evaluator(name)`` when the optional ``ogb`` package is
            installed, else the built-in one; ``"ogb"`` or ``"builtin"`` to force one.

    Returns:
        An object whose ``eval({"y_true": [n, T], "y_pred": [n, T]})`` gives ``{"rocauc": ...}`` (molbace,
        molbbbp; ROC-AUC per task over non-NaN labels, averaged over tasks with both classes) or ``{"rmse": ...}``
        (molesol, molfreesolv; RMSE per task over non-NaN labels, averaged over tasks).

    Raises:
        ValueError: Unknown ``name`` or ``backend``.
        RuntimeError: ``backend="ogb"`` and ``ogb`` is not installed.
    """
    meta = ogbg_meta(name)
    return make_evaluator("ogb.graphproppred", meta.name, meta.num_tasks, meta.eval_metric, backend)
