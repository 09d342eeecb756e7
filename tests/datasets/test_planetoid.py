"""Tests for cudnn_gnn.datasets.planetoid: bundled Cora/CiteSeer (plain arrays, equal to PyG's reader on the original
raw files), raw files from ``root`` (parity with PyG's Planetoid, PubMed paths, damaged files named)."""

from __future__ import annotations

import pickle
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from cudnn_gnn.datasets import load_planetoid
from cudnn_gnn.datasets._io import package_data_dir

#: The original raw Planetoid files (kimiyoung/planetoid), where this machine has them.
SHARED_RAW = Path("/work/shared/data/planetoid")
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
    data = load_planetoid(name)[0]
    assert data.num_nodes == nodes
    assert tuple(data.edge_index.shape) == (2, edges)
    assert tuple(data.x.shape) == (nodes, feats) and data.x.dtype == torch.float32
    assert data.y.dtype == torch.int64 and int(data.y.max()) + 1 == classes
    for mask, size in ((data.train_mask, n_train), (data.val_mask, n_val), (data.test_mask, n_test)):
        assert mask.dtype == torch.bool and int(mask.sum()) == size
    assert not bool((data.train_mask & data.test_mask).any())
    assert not bool((data.edge_index[0] == data.edge_index[1]).any())  # no self-loops


def _write_raw(raw: Path, prefix: str, *, seed: int = 0) -> None:
    """A small Planetoid raw set in the original format (scipy CSR features, one-hot labels, an adjacency dict, a
    permuted test index): 600 nodes (PyG's reader takes the 500 after the labelled ones for validation), 10
    labelled, 40 test nodes, 8 features, 3 classes."""
    rng = np.random.default_rng(seed)
    n, n_train, n_test, f, c = 600, 10, 40, 8, 3
    x_all = sp.random(n, f, density=0.3, format="csr", random_state=seed, dtype=np.float32)
    onehot = np.eye(c, dtype=np.int64)[rng.integers(0, c, n)]
    graph = defaultdict(list, {v: rng.integers(0, n, 3).tolist() for v in range(n)})
    raw.mkdir(parents=True, exist_ok=True)
    parts = {"x": x_all[:n_train], "allx": x_all[: n - n_test], "tx": x_all[n - n_test :], "y": onehot[:n_train],
             "ally": onehot[: n - n_test], "ty": onehot[n - n_test :], "graph": graph}
    for suffix, value in parts.items():
        with open(raw / f"ind.{prefix}.{suffix}", "wb") as fh:
            pickle.dump(value, fh)
    (raw / f"ind.{prefix}.test.index").write_text("\n".join(map(str, rng.permutation(np.arange(n - n_test, n)))))


@pytest.mark.skipif(not SHARED_RAW.is_dir(), reason=f"the original raw Planetoid files are not at {SHARED_RAW}")
@pytest.mark.parametrize("name,split", [("Cora", "public"), ("Cora", "full"), ("CiteSeer", "public")])
def test_bundled_equals_pygs_reader_on_the_original_files(tmp_path: Path, name: str, split: str) -> None:
    """The bundled archive gives, byte for byte, what PyG's Planetoid builds from the original raw pickles."""
    shutil.copytree(SHARED_RAW / name, tmp_path / name)
    ref = Planetoid(str(tmp_path), name, split=split)[0]
    ours = load_planetoid(name, split=split)[0]
    assert sorted(ours.keys()) == sorted(ref.keys())
    for key in ref.keys():
        assert ours[key].dtype == ref[key].dtype and torch.equal(ours[key], ref[key]), key
    from_root = load_planetoid(name, root=SHARED_RAW, split=split)[0]
    assert all(torch.equal(from_root[key], ref[key]) for key in ref.keys())


def test_bundled_sets_hold_no_pickle() -> None:
    """Only .npz archives of plain arrays ship, and each opens with allow_pickle=False."""
    files = sorted(p.relative_to(package_data_dir()).as_posix() for p in (package_data_dir() / "planetoid").rglob("*")
                   if p.is_file())
    assert files == ["planetoid/citeseer.npz", "planetoid/cora.npz"]
    for name in files:
        with np.load(package_data_dir() / name, allow_pickle=False) as npz:
            assert all(npz[key].dtype != object for key in npz.files)


def test_damaged_bundled_archive_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cudnn_gnn.datasets.planetoid as planetoid

    (tmp_path / "planetoid").mkdir()
    bad = tmp_path / "planetoid" / "cora.npz"
    bad.write_bytes((package_data_dir() / "planetoid" / "cora.npz").read_bytes()[:5000])
    monkeypatch.setattr(planetoid, "package_data_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=r"bundled file .*cora\.npz is damaged"):
        load_planetoid("Cora")[0]


@pytest.mark.parametrize("split", ["public", "full"])
def test_raw_files_from_root_match_pyg_planetoid(tmp_path: Path, split: str) -> None:
    _write_raw(tmp_path / "Cora" / "raw", "cora")
    ref = Planetoid(str(tmp_path), "Cora", split=split)[0]
    ours = load_planetoid("Cora", root=tmp_path, split=split)[0]
    assert sorted(ours.keys()) == sorted(ref.keys()) and ours.num_nodes == 600
    for key in ref.keys():
        assert torch.equal(ours[key], ref[key]), key


def test_normalize_features_matches_pyg_transform() -> None:
    raw = load_planetoid("Cora")[0]
    expected = T.NormalizeFeatures()(raw.clone()).x
    got = load_planetoid("Cora", normalize_features=True)[0].x
    assert torch.allclose(got, expected)
    assert torch.allclose(got.sum(dim=1)[raw.x.sum(dim=1) > 0], torch.ones(1))
    assert not torch.allclose(raw.x, got)


def test_name_is_case_insensitive_and_package_not_written() -> None:
    before = _snapshot(package_data_dir())
    a = load_planetoid("cora")[0]
    b = load_planetoid("CORA")[0]
    assert torch.equal(a.edge_index, b.edge_index)
    assert _snapshot(package_data_dir()) == before


def _fake_pubmed(tmp_path: Path) -> Path:
    """A complete PubMed folder of the small raw set (the format is the same)."""
    raw = tmp_path / "PubMed" / "raw"
    _write_raw(raw, "pubmed")
    return raw


def test_pubmed_from_root(tmp_path: Path) -> None:
    _fake_pubmed(tmp_path)
    data = load_planetoid("PubMed", root=tmp_path)[0]
    assert data.num_nodes == 600 and int(data.train_mask.sum()) == 10


def test_pubmed_missing_file_named(tmp_path: Path) -> None:
    raw = _fake_pubmed(tmp_path)
    (raw / "ind.pubmed.allx").unlink()
    with pytest.raises(FileNotFoundError, match=r"ind\.pubmed\.allx") as info:
        load_planetoid("PubMed", root=tmp_path)[0]
    assert str(raw) in str(info.value)
    assert "ind.pubmed.x\n" not in str(info.value)  # only missing files are listed


def test_pubmed_not_bundled() -> None:
    with pytest.raises(FileNotFoundError, match="`root`"):
        load_planetoid("PubMed")[0]


def test_missing_root_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"ind\.cora\.graph"):
        load_planetoid("Cora", root=tmp_path)[0]


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        ({"name": "Reddit"}, ValueError, "`name`"),
        ({"name": 3}, TypeError, "`name`"),
        ({"split": "geom_gcn"}, ValueError, "`split`"),
        ({"num_val": -1}, ValueError, "`num_val`"),
        ({"num_train_per_class": 2.0}, TypeError, "`num_train_per_class`"),
        ({"transform": "NormalizeFeatures"}, TypeError, "`transform`"),
        ({"split": None}, TypeError, "`split`"),
        ({"root": 1.5}, TypeError, "`root`"),
        ({"normalize_features": 1}, TypeError, "`normalize_features`"),
    ],
)
def test_argument_errors(kwargs: dict, exc: type, arg: str) -> None:
    with pytest.raises(exc, match=arg):
        load_planetoid(**kwargs)[0]


@pytest.mark.parametrize("suffix", ["x", "graph", "ally"])
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_raw_file_named(tmp_path: Path, suffix: str, damage: str) -> None:
    raw = tmp_path / "Cora" / "raw"
    _write_raw(raw, "cora")
    path = raw / f"ind.cora.{suffix}"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.write_bytes(b"this is not a pickle")
    with pytest.raises(ValueError, match=r"raw file .* is corrupt \(.*\): delete it") as info:
        load_planetoid("Cora", root=tmp_path)[0]
    assert str(path) in str(info.value)


def test_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=f"`root` must be a folder, got the file '{tmp_path / 'f'}'"):
        load_planetoid("Cora", root=tmp_path / "f")[0]


def test_a_planetoid_set_is_a_dataset_of_one_graph_as_pygs() -> None:
    """``dataset[0]``, ``len(dataset) == 1``, ``num_classes``, ``num_features``, iteration, ``transform`` and
    attribute reads, as on PyG's ``Planetoid``."""
    dataset = load_planetoid("Cora", transform=T.NormalizeFeatures())
    assert (repr(dataset), len(dataset), dataset.num_classes, dataset.num_features) == ("Cora()", 1, 7, 1433)
    data = dataset[0]
    assert data.num_nodes == 2708 and [g.num_nodes for g in dataset] == [2708]
    torch.testing.assert_close(data.x.sum(-1)[data.x.sum(-1) > 0], torch.ones(int((data.x.sum(-1) > 0).sum())))
    assert dataset.y.shape == (2708,) and dataset.train_mask.sum() == 140  # attributes read through, as in PyG
    assert load_planetoid("CiteSeer").num_classes == 6


@pytest.mark.parametrize("sizes", [{}, {"num_train_per_class": 5, "num_val": 50, "num_test": 100}])
def test_random_split_is_pygs_draw_for_draw(tmp_path: Path, sizes: dict) -> None:
    _write_raw(tmp_path / "Cora" / "raw", "cora")
    torch.manual_seed(7)
    ref = Planetoid(str(tmp_path), "Cora", split="random", **sizes)[0]
    torch.manual_seed(7)
    ours = load_planetoid("Cora", root=tmp_path, split="random", **sizes)[0]
    for key in ("train_mask", "val_mask", "test_mask", "x", "y", "edge_index"):
        assert torch.equal(ours[key], ref[key]), key
    per_class = sizes.get("num_train_per_class", 20)
    assert torch.bincount(ours.y[ours.train_mask]).tolist() == [per_class] * int(ours.y.max() + 1)
    assert int((ours.train_mask.int() + ours.val_mask.int() + ours.test_mask.int()).max()) == 1  # disjoint


def test_random_split_of_the_bundled_set() -> None:
    torch.manual_seed(0)
    a = load_planetoid("Cora", split="random")[0]
    torch.manual_seed(1)
    b = load_planetoid("Cora", split="random")[0]
    assert [int(m.sum()) for m in (a.train_mask, a.val_mask, a.test_mask)] == [140, 500, 1000]
    assert torch.bincount(a.y[a.train_mask]).tolist() == [20] * 7 and not torch.equal(a.train_mask, b.train_mask)


def _write_geom_gcn_splits(raw: Path, prefix: str, n: int) -> list[dict[str, np.ndarray]]:
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    splits = []
    for i in range(10):
        part = rng.integers(0, 3, n)
        masks = {"train_mask": part == 0, "val_mask": part == 1, "test_mask": part == 2}
        np.savez(raw / f"{prefix}_split_0.6_0.2_{i}.npz", **{k: v.astype(np.uint8) for k, v in masks.items()})
        splits.append(masks)
    return splits


def test_geom_gcn_splits_read_as_pygs(tmp_path: Path) -> None:
    raw = tmp_path / "Cora" / "geom-gcn" / "raw"
    _write_raw(raw, "cora")
    _write_geom_gcn_splits(raw, "cora", 600)
    ref = Planetoid(str(tmp_path), "Cora", split="geom-gcn")[0]
    # the bundled Cora is another graph than these fake raw files: read them, as PyG does, from PyG's layout
    ours = load_planetoid("Cora", root=tmp_path, split="geom-gcn")
    assert sorted(ours[0].keys()) == sorted(ref.keys())
    for key in ref.keys():  # PyG keeps the files' dtype (uint8); ours are bool, as every other split's masks
        assert torch.equal(ours[0][key], ref[key].bool() if key.endswith("_mask") else ref[key]), key
    assert ours[0].train_mask.shape == (600, 10) and ours[0].train_mask.dtype == torch.bool


def test_geom_gcn_of_the_bundled_graph_needs_only_the_split_files(tmp_path: Path) -> None:
    splits = _write_geom_gcn_splits(tmp_path / "CiteSeer" / "geom-gcn" / "raw", "citeseer", 3327)
    data = load_planetoid("CiteSeer", root=tmp_path, split="geom-gcn")[0]
    assert data.edge_index.shape == (2, 9104) and data.val_mask.shape == (3327, 10)
    assert torch.equal(data.val_mask[:, 4], torch.from_numpy(splits[4]["val_mask"]))


def test_geom_gcn_without_its_files_names_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"`root` must be given for split='geom-gcn', got None: .*"
                                                r"cora_split_0\.6_0\.2_0\.npz.*graphdml-uiuc-jlu/geom-gcn"):
        load_planetoid("Cora", split="geom-gcn")
    _write_geom_gcn_splits(tmp_path / "Cora" / "geom-gcn" / "raw", "cora", 2708)
    (tmp_path / "Cora" / "geom-gcn" / "raw" / "cora_split_0.6_0.2_3.npz").unlink()
    with pytest.raises(FileNotFoundError, match=r"Geom-GCN split files missing \(1\):\n  .*cora_split_0\.6_0\.2_3\.npz"):
        load_planetoid("Cora", root=tmp_path, split="geom-gcn")
    (tmp_path / "Cora" / "geom-gcn" / "raw" / "cora_split_0.6_0.2_3.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"raw file .*cora_split_0\.6_0\.2_3\.npz is corrupt"):
        load_planetoid("Cora", root=tmp_path, split="geom-gcn")
