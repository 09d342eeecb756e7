"""Tests for cudnn_gnn.datasets.ogb_graph: the four bundled OGB molecule sets and their evaluators."""

from __future__ import annotations

import gzip
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.loader import DataLoader

from cudnn_gnn.datasets import load_ogbg, ogbg_evaluator
from cudnn_gnn.datasets._io import package_data_dir
from cudnn_gnn.datasets._metrics import BuiltinEvaluator
from cudnn_gnn.datasets.ogb_graph import OGB_ROOT_ENV

EXPECTED = {
    # name: (graphs, atoms, raw bonds, task type, metric)
    "ogbg-molbace": (1513, 51577, 55768, "binary classification", "rocauc"),
    "ogbg-molbbbp": (2039, 49068, 52921, "binary classification", "rocauc"),
    "ogbg-molesol": (1128, 14991, 15428, "regression", "rmse"),
    "ogbg-molfreesolv": (642, 5600, 5385, "regression", "rmse"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_counts_dtypes_split(name: str) -> None:
    graphs, atoms, bonds, task_type, metric = EXPECTED[name]
    ds = load_ogbg(name)
    assert len(ds) == graphs and (ds.task_type, ds.eval_metric, ds.num_tasks) == (task_type, metric, 1)
    assert sum(g.num_nodes for g in ds) == atoms
    assert sum(g.edge_index.size(1) for g in ds) == 2 * bonds
    g = ds[0]
    assert g.x.dtype == torch.int64 and g.x.shape[1] == 9
    assert g.edge_attr.dtype == torch.int64 and g.edge_attr.shape == (g.edge_index.size(1), 3)
    assert g.y.shape == (1, 1)
    assert g.y.dtype == (torch.int64 if "classification" in task_type else torch.float32)
    assert all(int(h.edge_index.max()) < h.num_nodes for h in ds if h.edge_index.numel())
    split = ds.get_idx_split()
    everything = torch.cat([split["train"], split["valid"], split["test"]]).sort().values
    assert torch.equal(everything, torch.arange(graphs))
    assert len(ds.subset("valid")) == len(split["valid"])


def test_edges_match_raw_file_with_reverse_interleaved() -> None:
    ds = load_ogbg("ogbg-molfreesolv")
    raw = package_data_dir() / "ogb" / "ogbg_molfreesolv" / "raw"
    with gzip.open(raw / "num-edge-list.csv.gz", "rt") as f:
        first_count = int(f.readline())
    with gzip.open(raw / "edge.csv.gz", "rt") as f:
        first = np.array([[int(v) for v in f.readline().split(",")] for _ in range(first_count)]).T
    ei = ds[0].edge_index
    assert torch.equal(ei[:, 0::2], torch.from_numpy(first))
    assert torch.equal(ei[:, 1::2], torch.from_numpy(first).flip(0))
    assert torch.equal(ds[0].edge_attr[0::2], ds[0].edge_attr[1::2])


def test_regression_labels_read_as_floats() -> None:
    ds = load_ogbg("ogbg-molesol")
    raw = package_data_dir() / "ogb" / "ogbg_molesol" / "raw" / "graph-label.csv.gz"
    with gzip.open(raw, "rt") as f:
        first = float(f.readline())
    assert float(ds[0].y) == pytest.approx(first)


def test_pyg_dataloader_batches() -> None:
    ds = load_ogbg("ogbg-molbace")
    batch = next(iter(DataLoader(ds.subset("train"), batch_size=32)))
    assert batch.num_graphs == 32 and batch.y.shape == (32, 1)


def test_root_env_and_explicit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(package_data_dir() / "ogb" / "ogbg_molfreesolv", tmp_path / "ogbg_molfreesolv")
    assert load_ogbg("ogbg-molfreesolv", root=tmp_path).root == tmp_path
    monkeypatch.setenv(OGB_ROOT_ENV, str(tmp_path))
    assert load_ogbg("ogbg-molfreesolv").root == tmp_path
    assert load_ogbg("ogbg-molesol").root == package_data_dir() / "ogb"  # not in the env dir: bundled copy


def test_missing_and_inconsistent_files(tmp_path: Path) -> None:
    shutil.copytree(package_data_dir() / "ogb" / "ogbg_molesol", tmp_path / "ogbg_molesol")
    raw = tmp_path / "ogbg_molesol" / "raw"
    shutil.copy(package_data_dir() / "ogb" / "ogbg_molfreesolv" / "raw" / "node-feat.csv.gz", raw / "node-feat.csv.gz")
    with pytest.raises(ValueError, match="`node-feat.csv.gz` must have 14991 rows"):
        load_ogbg("ogbg-molesol", root=tmp_path)
    (raw / "edge-feat.csv.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"edge-feat\.csv\.gz") as info:
        load_ogbg("ogbg-molesol", root=tmp_path)
    assert "esol.zip" in str(info.value)


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [({"name": "ogbg-molhiv"}, ValueError, "`name`"), ({"name": "ogbg-molbace", "root": 5}, TypeError, "`root`")],
)
def test_argument_errors(kwargs: dict, exc: type, arg: str) -> None:
    with pytest.raises(exc, match=arg):
        load_ogbg(**kwargs)


def test_builtin_rocauc_and_rmse() -> None:
    roc = ogbg_evaluator("ogbg-molbace", backend="builtin")
    y_true = np.array([[1.0], [0.0], [np.nan], [1.0], [0.0]])
    y_pred = np.array([[0.9], [0.2], [-5.0], [0.1], [0.3]])  # NaN row ignored: pairs (0.9|0.2,0.3)=2, (0.1|..)=0
    assert roc.eval({"y_true": y_true, "y_pred": y_pred}) == {"rocauc": pytest.approx(0.5)}
    rmse = ogbg_evaluator("ogbg-molesol", backend="builtin")
    out = rmse.eval({"y_true": torch.tensor([[1.0], [2.0], [float("nan")]]), "y_pred": torch.tensor([[1.0], [4.0], [9.0]])})
    assert out == {"rmse": pytest.approx(np.sqrt(2.0))}


def test_model_free_baseline_scores_through_loader_labels() -> None:
    ds = load_ogbg("ogbg-molbbbp")
    test = ds.subset("test")
    y_true = torch.cat([g.y for g in test])
    atoms = torch.tensor([[float(g.num_nodes)] for g in test])
    score = ogbg_evaluator("ogbg-molbbbp", backend="builtin").eval({"y_true": y_true, "y_pred": atoms})["rocauc"]
    assert 0.0 < score < 1.0


def test_evaluator_prefers_ogb_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeEvaluator:
        def __init__(self, name: str) -> None:
            self.name = name

    sub = types.ModuleType("ogb.graphproppred")
    sub.Evaluator = FakeEvaluator
    monkeypatch.setitem(sys.modules, "ogb", types.ModuleType("ogb"))
    monkeypatch.setitem(sys.modules, "ogb.graphproppred", sub)
    assert ogbg_evaluator("ogbg-molesol").name == "ogbg-molesol"
    monkeypatch.setitem(sys.modules, "ogb.graphproppred", None)
    assert isinstance(ogbg_evaluator("ogbg-molesol"), BuiltinEvaluator)


@pytest.mark.parametrize("name,num_classes", [("ogbg-molbace", 2), ("ogbg-molesol", -1)])
def test_indexing_with_a_split_and_sizes_like_ogb(name: str, num_classes: int) -> None:
    """As PyG's and OGB's datasets: ds[split["train"]] is the training set (a dataset of those graphs, in order,
    usable with PyG's DataLoader), and num_features / num_classes / num_tasks are attributes."""
    ds = load_ogbg(name)
    assert (ds.num_features, ds.num_node_features, ds.num_edge_features) == (9, 9, 3)
    assert (ds.num_classes, ds.num_tasks) == (num_classes, 1)
    split = ds.get_idx_split()
    train = ds[split["train"]]
    assert len(train) == len(split["train"]) and train.num_classes == num_classes and train.num_features == 9
    assert all(g is ds.graphs[i] for g, i in zip(train, split["train"].tolist()))
    assert torch.equal(train.split["train"], torch.arange(len(train))) and not train.split["valid"].numel()
    batch = next(iter(DataLoader(train, batch_size=len(train))))
    assert batch.num_graphs == len(train)
    for index in (split["valid"].numpy(), split["valid"].tolist()):
        assert [g.num_nodes for g in ds[index]] == [g.num_nodes for g in ds.subset("valid")]
    mask = torch.zeros(len(ds), dtype=torch.bool)
    mask[split["test"]] = True
    assert len(ds[mask]) == len(split["test"]) and torch.equal(ds[mask].split["test"], torch.arange(len(ds[mask])))
    assert [g.num_nodes for g in ds[5:8]] == [ds[i].num_nodes for i in (5, 6, 7)]
    assert ds[torch.tensor(3)] is ds[3] is ds[np.int64(3)] and ds[-1] is ds.graphs[-1]
    assert len(ds[[]]) == 0 and ds[torch.tensor([-1])][0] is ds.graphs[-1]


@pytest.mark.parametrize("index,exc,match", [
    (torch.tensor([0.5]), TypeError, r"`index` must hold integers or bools, got torch.float32"),
    (torch.zeros(2, 2, dtype=torch.long), ValueError, r"`index` must be 1-D, got shape \(2, 2\)"),
    (torch.ones(3, dtype=torch.bool), ValueError, r"`index` as a mask must have shape \(642,\), got \(3,\)"),
    (torch.tensor([642]), IndexError, r"`index` must be in \[-642, 642\), got values in \[642, 642\]"),
    ("train", TypeError, r"`index` must be an int, a slice, a sequence or a tensor, got str"),
])
def test_indexing_errors(index, exc: type, match: str) -> None:
    ds = load_ogbg("ogbg-molfreesolv")
    with pytest.raises(exc, match=match):
        ds[index]


def test_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=f"`root` must be a folder, got the file '{tmp_path / 'f'}'"):
        load_ogbg("ogbg-molbace", root=tmp_path / "f")


def _rewrite_raw(path: Path, rows: list[str]) -> None:
    with gzip.open(path, "wt") as f:
        f.write("".join(row + "\n" for row in rows))


@pytest.mark.parametrize(("file", "name", "row", "match"), [
    ("node-feat.csv.gz", "ogbg-molbace", "1,2,3", r"`node-feat.csv.gz` must have 9 columns, got 3"),
    ("edge-feat.csv.gz", "ogbg-molbace", "1,2", r"`edge-feat.csv.gz` must have 3 columns, got 2"),
    ("graph-label.csv.gz", "ogbg-molbace", "2", r"`graph-label.csv.gz` must hold 0 or 1 \(binary classification\) "
                                               r"or NaN \(ogbg-molbace\), got 2"),
    ("graph-label.csv.gz", "ogbg-molesol", "inf", r"must hold finite numbers \(regression\) or NaN \(ogbg-molesol\), "
                                                 r"got inf"),
])
def test_feature_widths_and_labels_are_checked_against_the_metadata(tmp_path: Path, file: str, name: str, row: str,
                                                                    match: str) -> None:
    """A raw file of another width, a label outside the task's values: refused naming the file, instead of graphs
    whose features a model reads wrongly or labels an evaluator scores as they come."""
    folder = name.replace("-", "_")
    shutil.copytree(package_data_dir() / "ogb" / folder, tmp_path / folder)
    path = tmp_path / folder / "raw" / file
    with gzip.open(path, "rt") as f:
        rows = f.read().splitlines()
    _rewrite_raw(path, rows[:-1] + [row] if file == "graph-label.csv.gz" else [row] * len(rows))
    with pytest.raises(ValueError, match=match):
        load_ogbg(name, root=tmp_path)
