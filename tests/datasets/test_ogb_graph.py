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
