"""Per-dataset metadata for the OGB datasets this package reads or imitates.

The values restate the facts of OGB's ``master.csv`` files (``ogb/nodeproppred/master.csv`` and
``ogb/graphproppred/master.csv`` in snap-stanford/ogb) and the dataset statistics of the OGB paper (Hu et al.,
NeurIPS 2020, arXiv:2005.00687). Nothing here is read from the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

__all__ = ["OgbnMeta", "OgbgMeta", "OGBN_META", "OGBG_META", "ogbn_meta", "ogbg_meta"]


@dataclass(frozen=True)
class OgbnMeta:
    """Facts about one OGB node property prediction dataset.

    Attributes:
        name: OGB name, e.g. ``"ogbn-arxiv"``.
        num_nodes: Number of nodes.
        num_raw_edges: Edge rows in the raw files (undirected edges stored once where ``add_inverse_edge``).
        num_edges: Directed edges in the ``edge_index`` the OGB loaders return (``2 * num_raw_edges`` where
            ``add_inverse_edge``).
        num_features: Width of ``x`` (0 when the dataset has no node features).
        num_edge_features: Width of ``edge_attr`` (0 when none).
        num_tasks: Number of prediction tasks (columns of ``y``).
        num_classes: Classes per task.
        task_type: ``"multiclass classification"`` or ``"binary classification"``.
        eval_metric: ``"acc"`` or ``"rocauc"`` (the key of the evaluator's result dict).
        add_inverse_edge: Whether the loader adds the reverse of every raw edge.
        binary: Whether the raw files are ``data.npz``/``node-label.npz`` instead of ``*.csv.gz``.
        split: Name of the split folder under ``split/``.
        split_sizes: Published (train, valid, test) sizes.
        additional_node_files: Extra per-node files (e.g. ``node_year``), read when present.
        url: OGB download URL of the zip the user must fetch manually.
    """

    name: str
    num_nodes: int
    num_raw_edges: int
    num_edges: int
    num_features: int
    num_edge_features: int
    num_tasks: int
    num_classes: int
    task_type: str
    eval_metric: str
    add_inverse_edge: bool
    binary: bool
    split: str
    split_sizes: tuple[int, int, int]
    additional_node_files: tuple[str, ...]
    url: str

    @property
    def dir_name(self) -> str:
        """Folder name under the OGB root: the name with ``-`` replaced by ``_``."""
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class OgbgMeta:
    """Facts about one OGB graph property prediction dataset.

    Attributes:
        name: OGB name, e.g. ``"ogbg-molbace"``.
        num_graphs: Number of graphs.
        num_tasks: Number of prediction tasks (columns of ``y``).
        task_type: ``"binary classification"`` or ``"regression"``.
        eval_metric: ``"rocauc"`` or ``"rmse"`` (the key of the evaluator's result dict).
        add_inverse_edge: Whether the loader adds the reverse of every raw edge (True for molecules).
        split: Name of the split folder under ``split/``.
        url: OGB download URL.
        num_classes: OGB's ``num classes``: 2 for binary classification, -1 for regression.
        num_features: Width of ``x`` (OGB's 9 atom features).
        num_edge_features: Width of ``edge_attr`` (OGB's 3 bond features).
    """

    name: str
    num_graphs: int
    num_tasks: int
    task_type: str
    eval_metric: str
    add_inverse_edge: bool
    split: str
    url: str
    num_classes: int
    num_features: int = 9
    num_edge_features: int = 3

    @property
    def dir_name(self) -> str:
        """Folder name under the OGB root: the name with ``-`` replaced by ``_``."""
        return self.name.replace("-", "_")


_NODE_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/"
_GRAPH_URL = "http://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/"

OGBN_META: dict[str, OgbnMeta] = {
    m.name: m
    for m in (
        OgbnMeta(
            name="ogbn-arxiv",
            num_nodes=169_343,
            num_raw_edges=1_166_243,
            num_edges=1_166_243,
            num_features=128,
            num_edge_features=0,
            num_tasks=1,
            num_classes=40,
            task_type="multiclass classification",
            eval_metric="acc",
            add_inverse_edge=False,
            binary=False,
            split="time",
            split_sizes=(90_941, 29_799, 48_603),
            additional_node_files=("node_year",),
            url=_NODE_URL + "arxiv.zip",
        ),
        OgbnMeta(
            name="ogbn-products",
            num_nodes=2_449_029,
            num_raw_edges=61_859_140,
            num_edges=123_718_280,
            num_features=100,
            num_edge_features=0,
            num_tasks=1,
            num_classes=47,
            task_type="multiclass classification",
            eval_metric="acc",
            add_inverse_edge=True,
            binary=False,
            split="sales_ranking",
            split_sizes=(196_615, 39_323, 2_213_091),
            additional_node_files=(),
            url=_NODE_URL + "products.zip",
        ),
        OgbnMeta(
            name="ogbn-proteins",
            num_nodes=132_534,
            num_raw_edges=39_561_252,
            num_edges=79_122_504,
            num_features=0,
            num_edge_features=8,
            num_tasks=112,
            num_classes=2,
            task_type="binary classification",
            eval_metric="rocauc",
            add_inverse_edge=True,
            binary=False,
            split="species",
            split_sizes=(86_619, 21_236, 24_679),
            additional_node_files=("node_species",),
            url=_NODE_URL + "proteins.zip",
        ),
        OgbnMeta(
            name="ogbn-papers100M",
            num_nodes=111_059_956,
            num_raw_edges=1_615_685_872,
            num_edges=1_615_685_872,
            num_features=128,
            num_edge_features=0,
            num_tasks=1,
            num_classes=172,
            task_type="multiclass classification",
            eval_metric="acc",
            add_inverse_edge=False,
            binary=True,
            split="time",
            split_sizes=(1_207_179, 125_265, 214_338),
            additional_node_files=("node_year",),
            url=_NODE_URL + "papers100M-bin.zip",
        ),
    )
}

OGBG_META: dict[str, OgbgMeta] = {
    m.name: m
    for m in (
        OgbgMeta("ogbg-molbace", 1513, 1, "binary classification", "rocauc", True, "scaffold", _GRAPH_URL + "bace.zip",
                 num_classes=2),
        OgbgMeta("ogbg-molbbbp", 2039, 1, "binary classification", "rocauc", True, "scaffold", _GRAPH_URL + "bbbp.zip",
                 num_classes=2),
        OgbgMeta("ogbg-molesol", 1128, 1, "regression", "rmse", True, "scaffold", _GRAPH_URL + "esol.zip",
                 num_classes=-1),
        OgbgMeta("ogbg-molfreesolv", 642, 1, "regression", "rmse", True, "scaffold", _GRAPH_URL + "freesolv.zip",
                 num_classes=-1),
    )
}


_Meta = TypeVar("_Meta")


def _lookup(table: dict[str, _Meta], name: object, arg: str) -> _Meta:
    if not isinstance(name, str):
        raise TypeError(f"`{arg}` must be a str, got {type(name).__name__}")
    key = name.strip().lower().replace("_", "-")
    for known, meta in table.items():
        if known.lower() == key:
            return meta
    raise ValueError(f"`{arg}` must be one of {sorted(table)}, got {name!r}")


def ogbn_meta(name: str) -> OgbnMeta:
    """Return the metadata of an OGB node dataset.

    Args:
        name: ``"ogbn-arxiv"``, ``"ogbn-products"``, ``"ogbn-proteins"`` or ``"ogbn-papers100M"``
            (case-insensitive; ``_`` is accepted for ``-``).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: ``name`` is not one of the four.
    """
    return _lookup(OGBN_META, name, "name")


def ogbg_meta(name: str) -> OgbgMeta:
    """Return the metadata of an OGB molecule dataset (``ogbg-molbace``, ``-molbbbp``, ``-molesol``,
    ``-molfreesolv``; case-insensitive, ``_`` accepted for ``-``).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: ``name`` is not one of the four.
    """
    return _lookup(OGBG_META, name, "name")
