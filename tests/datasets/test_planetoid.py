"""Tests for cudnn_gnn.datasets.planetoid: bundled Cora/CiteSeer, parity with PyG's Planetoid, PubMed paths."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from cudnn_gnn.datasets import load_planetoid
from cudnn_gnn.datasets._io import package_data_dir

EXPECTED = {
    # name: (nodes, directed edges, features, classes, train, val, test)
    "Cora": (2708, 10556, 1433, 7, 140, 500, 1000),
    "CiteSeer": (3327, 9104, 3703, 6, 120, 500, 1000),
}


def _snapshot(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_counts_and_masks(name: str) -> None:
    nodes, edges, feats, classes, n_train, n_val, n_test = EXPECTED[name]
    data = load_planetoid(name)
    assert data.num_nodes == nodes
    assert tuple(data.edge_index.shape) == (2, edges)
    assert tuple(data.x.shape) == (nodes, feats) and data.x.dtype == torch.float32
    assert data.y.dtype == torch.int64 and int(data.y.max()) + 1 == classes
    for mask, size in ((data.train_mask, n_train), (data.val_mask, n_val), (data.test_mask, n_test)):
        assert mask.dtype == torch.bool and int(mask.sum()) == size
    assert not bool((data.train_mask & data.test_mask).any())
    assert not bool((data.edge_index[0] == data.edge_index[1]).any())  # no self-loops


@pytest.mark.parametrize("name,split", [("Cora", "public"), ("Cora", "full"), ("CiteSeer", "public")])
def test_matches_pyg_planetoid(tmp_path: Path, name: str, split: str) -> None:
    shutil.copytree(package_data_dir() / "planetoid" / name, tmp_path / name)
    ref = Planetoid(str(tmp_path), name, split=split)[0]
    ours = load_planetoid(name, split=split)
    assert sorted(ours.keys()) == sorted(ref.keys())
    for key in ref.keys():
        assert torch.equal(ours[key], ref[key]), key


def test_normalize_features_matches_pyg_transform() -> None:
    raw = load_planetoid("Cora")
    expected = T.NormalizeFeatures()(raw.clone()).x
    got = load_planetoid("Cora", normalize_features=True).x
    assert torch.allclose(got, expected)
    assert torch.allclose(got.sum(dim=1)[raw.x.sum(dim=1) > 0], torch.ones(1))
    assert not torch.allclose(raw.x, got)


def test_name_is_case_insensitive_and_package_not_written() -> None:
    before = _snapshot(package_data_dir())
    a = load_planetoid("cora")
    b = load_planetoid("CORA")
    assert torch.equal(a.edge_index, b.edge_index)
    assert _snapshot(package_data_dir()) == before


def _fake_pubmed(tmp_path: Path) -> Path:
    """A complete PubMed folder made of Cora's files under PubMed's names (the format is the same)."""
    raw = tmp_path / "PubMed" / "raw"
    raw.mkdir(parents=True)
    for src in (package_data_dir() / "planetoid" / "Cora" / "raw").iterdir():
        shutil.copy(src, raw / src.name.replace("ind.cora.", "ind.pubmed."))
    return raw


def test_pubmed_from_root(tmp_path: Path) -> None:
    _fake_pubmed(tmp_path)
    data = load_planetoid("PubMed", root=tmp_path)
    assert data.num_nodes == 2708 and int(data.train_mask.sum()) == 140


def test_pubmed_missing_file_named(tmp_path: Path) -> None:
    raw = _fake_pubmed(tmp_path)
    (raw / "ind.pubmed.allx").unlink()
    with pytest.raises(FileNotFoundError, match=r"ind\.pubmed\.allx") as info:
        load_planetoid("PubMed", root=tmp_path)
    assert str(raw) in str(info.value)
    assert "ind.pubmed.x\n" not in str(info.value)  # only missing files are listed


def test_pubmed_not_bundled() -> None:
    with pytest.raises(FileNotFoundError, match="`root`"):
        load_planetoid("PubMed")


def test_missing_root_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"ind\.cora\.graph"):
        load_planetoid("Cora", root=tmp_path)


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        ({"name": "Reddit"}, ValueError, "`name`"),
        ({"name": 3}, TypeError, "`name`"),
        ({"split": "random"}, ValueError, "`split`"),
        ({"split": None}, TypeError, "`split`"),
        ({"root": 1.5}, TypeError, "`root`"),
        ({"normalize_features": 1}, TypeError, "`normalize_features`"),
    ],
)
def test_argument_errors(kwargs: dict, exc: type, arg: str) -> None:
    with pytest.raises(exc, match=arg):
        load_planetoid(**kwargs)


@pytest.mark.parametrize("suffix", ["x", "graph", "ally"])
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_raw_file_named(tmp_path: Path, suffix: str, damage: str) -> None:
    raw = tmp_path / "Cora" / "raw"
    shutil.copytree(package_data_dir() / "planetoid" / "Cora" / "raw", raw)
    path = raw / f"ind.cora.{suffix}"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.write_bytes(b"this is not a pickle")
    with pytest.raises(ValueError, match=r"raw file .* is corrupt \(.*\): delete it") as info:
        load_planetoid("Cora", root=tmp_path)
    assert str(path) in str(info.value)
