"""Tests for cudnn_gnn.datasets.ogb_node on tiny fake datasets written in OGB's exact on-disk layout."""

from __future__ import annotations

import gzip
import json
import os
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_gnn.datasets import load_ogbn, ogb_evaluator, ogb_node
from cudnn_gnn.datasets._metrics import BuiltinEvaluator, roc_auc

EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 3], [0, 5]], dtype=np.int64)
N = 6


def _write_csv_gz(path: Path, array: np.ndarray, fmt: str = "%d") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    array = np.asarray(array)
    array = array.reshape(len(array), -1)
    with gzip.open(path, "wt") as f:
        for row in array:
            f.write(",".join(fmt % v for v in row) + "\n")


def _write_split(ds: Path, split: str, parts=((0, 1), (2, 3), (4, 5))) -> None:
    for name, idx in zip(("train", "valid", "test"), parts):
        _write_csv_gz(ds / "split" / split / f"{name}.csv.gz", np.array(idx))


def make_csv_dataset(root: Path, name: str) -> dict[str, np.ndarray]:
    """Write a 6-node dataset for ``name`` in OGB's csv layout; return what was written."""
    ds = root / name.replace("-", "_")
    raw = ds / "raw"
    rng = np.random.default_rng(0)
    written = {"edge": EDGES}
    _write_csv_gz(raw / "edge.csv.gz", EDGES)
    _write_csv_gz(raw / "num-node-list.csv.gz", np.array([N]))
    _write_csv_gz(raw / "num-edge-list.csv.gz", np.array([len(EDGES)]))
    if name == "ogbn-proteins":
        edge_feat = rng.random((len(EDGES), 8)).round(3)
        _write_csv_gz(raw / "edge-feat.csv.gz", edge_feat, "%.3f")
        labels = rng.integers(0, 2, (N, 112))
        _write_csv_gz(raw / "node_species.csv.gz", np.array([3702, 3702, 4932, 4932, 6239, 6239]))
        written["edge_feat"] = edge_feat
        split = "species"
    else:
        width = 128 if name == "ogbn-arxiv" else 100
        x = rng.standard_normal((N, width)).round(4)
        _write_csv_gz(raw / "node-feat.csv.gz", x, "%.4f")
        written["x"] = x
        labels = rng.integers(0, 40, (N, 1))
        split = "time" if name == "ogbn-arxiv" else "sales_ranking"
        if name == "ogbn-arxiv":
            _write_csv_gz(raw / "node_year.csv.gz", np.arange(2010, 2010 + N))
    _write_csv_gz(raw / "node-label.csv.gz", labels)
    written["y"] = labels
    _write_split(ds, split)
    return written


def make_papers(root: Path) -> np.ndarray:
    ds = root / "ogbn_papers100M"
    raw = ds / "raw"
    raw.mkdir(parents=True)
    x = np.random.default_rng(1).standard_normal((N, 128)).astype(np.float32)
    np.savez(
        raw / "data.npz",
        edge_index=EDGES.T.copy(),
        node_feat=x,
        node_year=np.arange(N).reshape(N, 1),
        num_nodes_list=np.array([N]),
        num_edges_list=np.array([len(EDGES)]),
    )
    y = np.array([[3], [7], [np.nan], [171], [np.nan], [0]], dtype=np.float32)
    np.savez_compressed(raw / "node-label.npz", node_label=y)
    _write_split(ds, "time", ((0, 1), (3,), (5,)))
    return x


def test_arxiv_shapes_and_values(tmp_path: Path) -> None:
    written = make_csv_dataset(tmp_path, "ogbn-arxiv")
    data = load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert data.num_nodes == N
    assert torch.equal(data.edge_index, torch.from_numpy(EDGES.T))  # directed, no inverse edges
    assert data.x.dtype == torch.float32 and torch.allclose(data.x, torch.from_numpy(written["x"]).float())
    assert data.y.dtype == torch.int64 and tuple(data.y.shape) == (N, 1)
    assert torch.equal(data.y, torch.from_numpy(written["y"]))
    assert data.train_idx.tolist() == [0, 1] and data.valid_idx.tolist() == [2, 3] and data.test_idx.tolist() == [4, 5]
    assert data.node_year.view(-1).tolist() == list(range(2010, 2016))
    assert (data.num_classes, data.num_tasks, data.eval_metric) == (40, 1, "acc")
    assert "edge_attr" not in data


def test_products_adds_inverse_edges_interleaved(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-products")
    data = load_ogbn("ogbn_PRODUCTS", tmp_path)[0]
    ei = data.edge_index
    assert tuple(ei.shape) == (2, 2 * len(EDGES))
    assert torch.equal(ei[:, 0::2], torch.from_numpy(EDGES.T))
    assert torch.equal(ei[:, 1::2], torch.from_numpy(EDGES.T).flip(0))
    assert data.x.shape == (N, 100) and data.num_classes == 47


def test_proteins_edge_features_follow_edges(tmp_path: Path) -> None:
    written = make_csv_dataset(tmp_path, "ogbn-proteins")
    data = load_ogbn("ogbn-proteins", tmp_path)[0]
    assert "x" not in data
    assert data.edge_attr.shape == (2 * len(EDGES), 8) and data.edge_attr.dtype == torch.float32
    expected = torch.from_numpy(written["edge_feat"]).float()
    assert torch.allclose(data.edge_attr[0::2], expected) and torch.allclose(data.edge_attr[1::2], expected)
    assert data.y.shape == (N, 112) and data.y.dtype == torch.int64
    assert data.node_species.view(-1).tolist()[:2] == [3702, 3702]
    assert (data.num_tasks, data.eval_metric) == (112, "rocauc")


def test_second_load_uses_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_csv_dataset(tmp_path, "ogbn-products")
    first = load_ogbn("ogbn-products", tmp_path)[0]
    cache_dir = tmp_path / "ogbn_products" / ogb_node.CACHE_DIR_NAME
    assert (cache_dir / "manifest.json").is_file()

    def boom(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(ogb_node, "_parse_csv_raw", boom)
    second = load_ogbn("ogbn-products", tmp_path)[0]
    for key in ("edge_index", "x", "y", "train_idx", "valid_idx", "test_idx"):
        assert torch.equal(first[key], second[key]), key

    # A changed raw file invalidates the cache: the (patched) parser must run again.
    label = tmp_path / "ogbn_products" / "raw" / "node-label.csv.gz"
    _write_csv_gz(label, np.array([[1], [2], [3], [4], [5], [6], [7]])[:N])
    os.utime(label, ns=(1, 1))
    with pytest.raises(AssertionError, match="parsed again"):
        load_ogbn("ogbn-products", tmp_path)[0]


def test_cache_false_writes_nothing(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    load_ogbn("ogbn-arxiv", tmp_path, cache=False)[0]
    assert not (tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME).exists()
    with pytest.raises(ValueError, match="`mmap`"):
        load_ogbn("ogbn-arxiv", tmp_path, cache=False, mmap=True)[0]


def test_mmap_for_csv_dataset(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    plain = load_ogbn("ogbn-arxiv", tmp_path)[0]
    mapped = load_ogbn("ogbn-arxiv", tmp_path, mmap=True)[0]
    assert torch.equal(plain.x, mapped.x)


def test_papers100m_binary_layout_and_mmap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = make_papers(tmp_path)
    data = load_ogbn("ogbn-papers100M", tmp_path)[0]
    assert torch.equal(data.edge_index, torch.from_numpy(EDGES.T))
    assert torch.equal(data.x, torch.from_numpy(x))
    assert data.y.dtype == torch.float32 and torch.isnan(data.y[[2, 4]]).all()
    assert data.y[data.train_idx].view(-1).tolist() == [3.0, 7.0]
    assert data.node_year.shape == (N, 1)
    cache_dir = tmp_path / "ogbn_papers100M" / ogb_node.CACHE_DIR_NAME
    assert (cache_dir / "edge_index.npy").is_file() and not (cache_dir / "num_nodes_list.npy").exists()

    calls = []
    real_load = np.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("mmap_mode"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(ogb_node, "_parse_binary_raw", lambda *a, **k: (_ for _ in ()).throw(AssertionError("parsed")))
    monkeypatch.setattr(ogb_node.np, "load", spy)
    again = load_ogbn("ogbn-papers100M", tmp_path)[0]
    assert calls and all(mode == "c" for mode in calls)  # every cached array memory-mapped
    again.x[0, 0] = 123.0  # copy-on-write: allowed, and the file stays unchanged
    assert float(real_load(cache_dir / "x.npy")[0, 0]) == float(x[0, 0])


def test_papers100m_without_cache(tmp_path: Path) -> None:
    make_papers(tmp_path)
    data = load_ogbn("ogbn-papers100M", tmp_path, cache=False)[0]
    assert data.num_nodes == N and not (tmp_path / "ogbn_papers100M" / ogb_node.CACHE_DIR_NAME).exists()


def test_missing_dataset_dir_names_path_and_url(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="`root`") as info:
        load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert "ogbn_arxiv" in str(info.value) and "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip" in str(info.value)
    assert "'ogbn_arxiv' or 'arxiv'" in str(info.value)


def test_missing_file_names_path_and_url(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-proteins")
    target = tmp_path / "ogbn_proteins" / "raw" / "edge-feat.csv.gz"
    target.unlink()
    (tmp_path / "ogbn_proteins" / "split" / "species" / "test.csv.gz").unlink()
    with pytest.raises(FileNotFoundError) as info:
        load_ogbn("ogbn-proteins", tmp_path)[0]
    message = str(info.value)
    assert str(target) in message and "test.csv.gz" in message and "proteins.zip" in message


def test_inconsistent_files_rejected(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    _write_csv_gz(tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz", np.array([[0, 1], [1, 9]] + [[0, 0]] * 5))
    with pytest.raises(ValueError, match=r"`edge\.csv\.gz` must index nodes"):
        load_ogbn("ogbn-arxiv", tmp_path)[0]


@pytest.mark.parametrize(
    "args,kwargs,exc,arg",
    [
        (("ogbn-mag", "."), {}, ValueError, "`name`"),
        ((None, "."), {}, TypeError, "`name`"),
        (("ogbn-arxiv", 3), {}, TypeError, "`root`"),
        (("ogbn-arxiv", "."), {"cache": "yes"}, TypeError, "`cache`"),
        (("ogbn-arxiv", "."), {"mmap": 1}, TypeError, "`mmap`"),
    ],
)
def test_argument_errors(args: tuple, kwargs: dict, exc: type, arg: str) -> None:
    with pytest.raises(exc, match=arg):
        load_ogbn(*args, **kwargs)[0]


# ---------------------------------------------------------------- evaluator


def _pairwise_auc(y: np.ndarray, s: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_matches_pairwise_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 60)
    y[:2] = [0, 1]
    s = rng.integers(0, 8, 60).astype(float)  # many ties
    assert roc_auc(y, s) == pytest.approx(_pairwise_auc(y, s))


def test_builtin_accuracy_and_rocauc() -> None:
    ev = ogb_evaluator("ogbn-arxiv", backend="builtin")
    y = torch.tensor([[1], [2], [3], [4]])
    assert ev.eval({"y_true": y, "y_pred": torch.tensor([[1], [2], [0], [4]])}) == {"acc": 0.75}
    prot = ogb_evaluator("ogbn-proteins", backend="builtin")
    y_true = np.zeros((4, 112))
    y_true[:2] = 1
    y_pred = np.tile(np.array([[0.9], [0.8], [0.1], [0.2]]), (1, 112))
    y_pred[:, 0] = [0.1, 0.2, 0.9, 0.8]  # task 0 perfectly wrong
    y_true[:, 1] = 1  # task 1 has one class only: skipped
    y_true[0, 2] = np.nan  # NaN ignored
    result = prot.eval({"y_true": y_true, "y_pred": y_pred})
    assert result == {"rocauc": pytest.approx(110 / 111)}


def test_builtin_evaluator_errors() -> None:
    ev = ogb_evaluator("ogbn-proteins", backend="builtin")
    with pytest.raises(ValueError, match="`y_true`"):
        ev.eval({"y_true": np.zeros((3, 2)), "y_pred": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="`y_pred`"):
        ev.eval({"y_true": np.zeros((3, 112)), "y_pred": np.zeros((2, 112))})
    with pytest.raises(ValueError, match="`y_true` must have both"):
        ev.eval({"y_true": np.zeros((3, 112)), "y_pred": np.zeros((3, 112))})
    with pytest.raises(TypeError, match="`input_dict`"):
        ev.eval([1, 2])
    with pytest.raises(ValueError, match="`backend`"):
        ogb_evaluator("ogbn-arxiv", backend="sklearn")


def test_evaluator_prefers_ogb_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeEvaluator:
        def __init__(self, name: str) -> None:
            self.name = name

    ogb = types.ModuleType("ogb")
    sub = types.ModuleType("ogb.nodeproppred")
    sub.Evaluator = FakeEvaluator
    monkeypatch.setitem(sys.modules, "ogb", ogb)
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", sub)
    ev = ogb_evaluator("ogbn_arxiv")
    assert isinstance(ev, FakeEvaluator) and ev.name == "ogbn-arxiv"
    assert isinstance(ogb_evaluator("ogbn-arxiv", backend="builtin"), BuiltinEvaluator)


def test_evaluator_without_ogb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ogb", None)  # import fails
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)
    assert isinstance(ogb_evaluator("ogbn-arxiv"), BuiltinEvaluator)
    with pytest.raises(RuntimeError, match=r"cudnn-gnn\[ogb\]"):
        ogb_evaluator("ogbn-arxiv", backend="ogb")


# ------------------------------------------------------------------------------------ corrupt files, OGB API


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: max(1, int(len(data) * keep))])


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_cache_file_is_rebuilt_with_warning(tmp_path: Path, damage: str, mmap: bool) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    first_x = load_ogbn("ogbn-arxiv", tmp_path, mmap=mmap)[0].x.clone()  # a copy: the test damages the mapped file
    cached = tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME / "x.npy"
    {"truncate": _truncate, "garbage": lambda p: p.write_bytes(b"not an npy file at all"),
     "empty": lambda p: p.write_bytes(b"")}[damage](cached)
    with pytest.warns(UserWarning, match=r"cache file .*x\.npy is corrupt.*rebuilding"):
        again = load_ogbn("ogbn-arxiv", tmp_path, mmap=mmap)[0]
    assert torch.equal(first_x, again.x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilt: the next load is clean
        assert torch.equal(load_ogbn("ogbn-arxiv", tmp_path, mmap=mmap)[0].x, first_x)


def test_cache_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write interrupted half-way leaves neither a half file under the final name nor a temporary file."""
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    cache_dir = tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME
    real_save = np.save

    def interrupted(file, array, *args, **kwargs):
        if np.asarray(array).ndim == 2 and np.asarray(array).shape[1] == 128:  # x: write half, then die
            file.write(b"\x93NUMPY half")
            raise KeyboardInterrupt
        return real_save(file, array, *args, **kwargs)

    monkeypatch.setattr(np, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert not (cache_dir / "x.npy").exists() and not (cache_dir / "manifest.json").exists()
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.setattr(np, "save", real_save)
    assert load_ogbn("ogbn-arxiv", tmp_path)[0].x.shape == (N, 128)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
@pytest.mark.parametrize("file", ["raw/edge.csv.gz", "raw/node-feat.csv.gz", "split/time/valid.csv.gz"])
def test_corrupt_raw_csv_gz_named(tmp_path: Path, file: str, damage: str) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    path = tmp_path / "ogbn_arxiv" / file
    if damage == "truncate":
        _truncate(path)
    else:
        path.write_bytes(b"\x00\x01 definitely not gzip")
    with pytest.raises(ValueError, match=r"raw file .* is corrupt \((EOFError|BadGzipFile|error).*delete it") as info:
        load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert str(path) in str(info.value)


def test_corrupt_papers_npz_named(tmp_path: Path) -> None:
    make_papers(tmp_path)
    path = tmp_path / "ogbn_papers100M" / "raw" / "data.npz"
    _truncate(path)
    with pytest.raises(ValueError, match=r"raw file .*data\.npz is corrupt \(BadZipFile"):
        load_ogbn("ogbn-papers100M", tmp_path)[0]


def test_get_idx_split_like_ogb(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    data = load_ogbn("ogbn-arxiv", tmp_path)[0]
    split = data.get_idx_split()
    assert set(split) == {"train", "valid", "test"}
    for part in split:
        assert split[part].dtype == torch.int64 and torch.equal(split[part], data[f"{part}_idx"])
    assert data.num_classes == 40 and data.eval_metric == "acc"  # the attributes stay
    assert isinstance(data, ogb_node.OgbnData)
    assert torch.equal(data.to("cpu").get_idx_split()["test"], split["test"])  # survives Data.to / copies


# ------------------------------------------------------------------------ concurrent loads, damaged caches

_FIRST_LOAD = """
import json, os, sys, time
import torch
torch.set_num_threads(1)
from cudnn_gnn.datasets import load_ogbn
open(sys.argv[2], "w").close()  # ready
while not os.path.exists(sys.argv[3]):  # start together
    time.sleep(0.005)
d = load_ogbn("ogbn-papers100M", sys.argv[1])[0]
print(json.dumps([float(d.x.sum()), int(d.edge_index.sum()), float(d.y.nansum()), int(d.node_year.sum())]))
"""


def test_papers100m_concurrent_first_loads_all_succeed(tmp_path: Path) -> None:
    """Eight processes load the papers100M layout for the first time at once: every one gets the data (they
    streamed the arrays through one fixed temporary name, and one deleted a file another was about to read)."""
    import subprocess
    import time

    make_papers(tmp_path / "root")
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _FIRST_LOAD, str(tmp_path / "root"), str(tmp_path / f"ready{i}"),
                               str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    deadline = time.monotonic() + 240
    while not all((tmp_path / f"ready{i}").exists() for i in range(8)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err[-2000:] for _, err in outs if err]
    results = {out for out, _ in outs}
    assert len(results) == 1
    ref = load_ogbn("ogbn-papers100M", tmp_path / "root")[0]
    assert json.loads(results.pop()) == [float(ref.x.sum()), int(ref.edge_index.sum()), float(ref.y.nansum()),
                                         int(ref.node_year.sum())]
    cache = tmp_path / "root" / "ogbn_papers100M" / ogb_node.CACHE_DIR_NAME
    assert not [p.name for p in cache.iterdir() if p.name.endswith(".tmp")]


def _damage_manifest(manifest: Path, case: str) -> None:
    info = json.loads(manifest.read_text())
    if case == "list":
        info = [info]
    elif case == "null":
        info = None
    elif case == "missing_key":
        del info["arrays"]
    elif case == "path_in_names":
        info["arrays"] = [*info["arrays"], "../../outside"]
    elif case == "array_not_listed":
        info["arrays"].remove("edge_index")
    manifest.write_text(json.dumps(info))


@pytest.mark.parametrize("case", ["list", "null", "missing_key", "path_in_names", "array_not_listed", "not_json"])
def test_damaged_cache_manifest_is_rebuilt_with_warning(tmp_path: Path, case: str) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    first = load_ogbn("ogbn-arxiv", tmp_path)[0]
    manifest = tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME / "manifest.json"
    if case == "not_json":
        manifest.write_text("{not json")
    else:
        _damage_manifest(manifest, case)
    with pytest.warns(UserWarning, match=f"cache file {manifest} is corrupt.*rebuilding"):
        again = load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert torch.equal(again.edge_index, first.edge_index) and torch.equal(again.x, first.x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_ogbn("ogbn-arxiv", tmp_path)[0]


def test_missing_cache_array_is_rebuilt_with_warning(tmp_path: Path) -> None:
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    first = load_ogbn("ogbn-arxiv", tmp_path)[0]
    missing = tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME / "y.npy"
    missing.unlink()
    with pytest.warns(UserWarning, match=f"cache file {missing} is corrupt.*rebuilding"):
        assert torch.equal(load_ogbn("ogbn-arxiv", tmp_path)[0].y, first.y)
    assert missing.is_file()


def test_root_or_cache_folder_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=f"`root` must be a folder, got the file '{tmp_path / 'f'}'"):
        load_ogbn("ogbn-arxiv", tmp_path / "f")[0]
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    cache = tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME
    cache.write_text("not a folder")
    with pytest.warns(UserWarning, match=f"cannot write the cache {cache}"):
        assert load_ogbn("ogbn-arxiv", tmp_path)[0].num_nodes == N


def test_a_dead_writers_temporary_is_removed_on_rebuild(tmp_path: Path) -> None:
    import socket
    import subprocess

    make_csv_dataset(tmp_path, "ogbn-arxiv")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    cache = tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME
    cache.mkdir()
    host = socket.gethostname().replace("/", "_")
    stale = cache / f".x.npy.{host}.{int(dead.stdout)}.0123abcd.tmp"
    other_host = cache / f".x.npy.{host}-elsewhere.{int(dead.stdout)}.0123abcd.tmp"
    alive = cache / f".x.npy.{host}.{os.getpid()}.0123abcd.tmp"
    for path in (stale, other_host, alive):
        path.write_bytes(b"half")
    load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert not stale.exists() and other_host.exists() and alive.exists()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_builtin_rocauc_refuses_non_finite_scores_as_ogb(bad: float) -> None:
    """A NaN score was ranked as the highest (argsort puts NaN last); OGB's evaluator (scikit-learn) refuses it."""
    prot = ogb_evaluator("ogbn-proteins", backend="builtin")
    y_true = np.zeros((4, 112))
    y_true[:2] = 1
    y_pred = np.tile(np.array([[0.9], [0.8], [0.1], [0.2]]), (1, 112))
    y_pred[2, 5] = bad
    with pytest.raises(ValueError, match="`y_pred` must be finite on labelled rows .* in task 5"):
        prot.eval({"y_true": y_true, "y_pred": y_pred})
    with pytest.raises(ValueError, match="y_score must be finite"):
        roc_auc(np.array([0, 1, 0]), np.array([0.1, bad, 0.3]))
    y_true[2, 5] = np.nan  # an unlabelled row's score is not read, as in OGB
    assert prot.eval({"y_true": y_true, "y_pred": y_pred})["rocauc"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-proteins"])
def test_a_node_set_is_a_dataset_of_one_graph_as_ogbs(tmp_path: Path, name: str) -> None:
    """``dataset[0]``, ``len(dataset) == 1``, ``num_classes``, ``num_features``, ``get_idx_split()``, as on OGB's
    ``PygNodePropPredDataset``."""
    make_csv_dataset(tmp_path, name)
    dataset = load_ogbn(name, tmp_path)
    assert repr(dataset) == f"{name}()" and len(dataset) == 1 and [g.num_nodes for g in dataset] == [N]
    classes, features, tasks = (40, 128, 1) if name == "ogbn-arxiv" else (2, 0, 112)
    assert (dataset.num_classes, dataset.num_features, dataset.num_tasks) == (classes, features, tasks)
    data, split = dataset[0], dataset.get_idx_split()
    assert isinstance(data, ogb_node.OgbnData) and data.num_nodes == N
    assert all(torch.equal(split[k], data.get_idx_split()[k]) for k in ("train", "valid", "test"))
    assert dataset.eval_metric == data.eval_metric and dataset.task_type == data.task_type


@pytest.mark.parametrize("name, folder", [("ogbn-arxiv", "arxiv"), ("ogbn-products", "products"),
                                          ("ogbn-papers100M", "papers100M-bin")])
def test_the_folder_ogbs_zip_unpacks_to_is_read_without_a_rename(tmp_path: Path, name: str, folder: str) -> None:
    if name == "ogbn-papers100M":
        make_papers(tmp_path)
    else:
        make_csv_dataset(tmp_path, name)
    (tmp_path / name.replace("-", "_")).rename(tmp_path / folder)  # as `unzip <zip>` leaves it
    data = load_ogbn(name, tmp_path)[0]
    assert data.num_nodes == N and (tmp_path / folder / ogb_node.CACHE_DIR_NAME).is_dir()
    assert not (tmp_path / name.replace("-", "_")).exists()


def _write_stored_gz(path: Path, rows: list[int]) -> None:
    """A gzip file without compression (and a fixed header time): its size depends only on the text's length."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=0, mtime=0) as f:
        f.write("".join(f"{r}\n" for r in rows).encode())


def test_a_raw_file_rewritten_with_its_size_and_mtime_is_noticed(tmp_path: Path) -> None:
    """New labels in a file of the same size and modification time (a copy that keeps them, ``touch -r``): the
    cache keyed on size and mtime alone served the old labels; the hash of the file's ends sees the change."""
    make_csv_dataset(tmp_path, "ogbn-arxiv")
    label = tmp_path / "ogbn_arxiv" / "raw" / "node-label.csv.gz"
    _write_stored_gz(label, [1, 2, 3, 4, 5, 6])
    assert load_ogbn("ogbn-arxiv", tmp_path)[0].y.view(-1).tolist() == [1, 2, 3, 4, 5, 6]  # cached now
    before = label.stat()
    _write_stored_gz(label, [9, 8, 7, 6, 5, 4])
    os.utime(label, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (label.stat().st_size, label.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert load_ogbn("ogbn-arxiv", tmp_path)[0].y.view(-1).tolist() == [9, 8, 7, 6, 5, 4]


@pytest.mark.parametrize(("key", "array"), [
    ("x", np.zeros((N, 3), dtype=np.float32)),  # another width
    ("edge_index", np.zeros((2, 2), dtype=np.int64)),  # fewer edges than the manifest says
    ("y", np.zeros((N, 1), dtype=np.float64)),  # another dtype
])
def test_a_cached_array_of_the_wrong_shape_is_rebuilt_not_served(tmp_path: Path, key: str, array: np.ndarray) -> None:
    written = make_csv_dataset(tmp_path, "ogbn-arxiv")
    load_ogbn("ogbn-arxiv", tmp_path)
    np.save(tmp_path / "ogbn_arxiv" / ogb_node.CACHE_DIR_NAME / f"{key}.npy", array)  # a valid .npy, wrong content
    with pytest.warns(UserWarning, match=r"is corrupt .*rebuilding the cache from the raw files"):
        data = load_ogbn("ogbn-arxiv", tmp_path)[0]
    assert data.x.shape == (N, 128) and torch.equal(data.edge_index, torch.from_numpy(EDGES.T))
    assert torch.equal(data.y, torch.from_numpy(written["y"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_ogbn("ogbn-arxiv", tmp_path)  # rebuilt: served from the cache again, quietly


@pytest.mark.parametrize(("name", "file", "rows", "match"), [
    ("ogbn-arxiv", "node-feat.csv.gz", np.zeros((N, 100)), r"`node-feat.csv.gz` must have 128 columns, got 100"),
    ("ogbn-proteins", "edge-feat.csv.gz", np.zeros((len(EDGES), 4)), r"`edge-feat.csv.gz` must have 8 columns, got 4"),
    ("ogbn-arxiv", "node-label.csv.gz", np.array([0, 1, 2, 40, 3, 4]),
     r"`node-label.csv.gz` must hold class ids in \[0, 40\) \(ogbn-arxiv's 40 classes\) or NaN, got 40"),
    ("ogbn-arxiv", "node-label.csv.gz", np.array([0, 1, -1, 3, 3, 4]), r"class ids in \[0, 40\).*got -1"),
    ("ogbn-proteins", "node-label.csv.gz", np.full((N, 112), 2), r"class ids in \[0, 2\).*got 2"),
])
def test_raw_widths_and_labels_are_checked_against_the_metadata(tmp_path: Path, name: str, file: str,
                                                                rows: np.ndarray, match: str) -> None:
    make_csv_dataset(tmp_path, name)
    _write_csv_gz(tmp_path / name.replace("-", "_") / "raw" / file, rows)
    with pytest.raises(ValueError, match=match):
        load_ogbn(name, tmp_path)


def test_papers_feature_width_and_labels_are_checked(tmp_path: Path) -> None:
    make_papers(tmp_path)
    raw = tmp_path / "ogbn_papers100M" / "raw"
    np.savez_compressed(raw / "node-label.npz", node_label=np.array([[3], [172], [np.nan], [1], [2], [0]], np.float32))
    with pytest.raises(ValueError, match=r"`node-label.npz` must hold class ids in \[0, 172\).*got 172"):
        load_ogbn("ogbn-papers100M", tmp_path, cache=False)
    np.savez_compressed(raw / "node-label.npz", node_label=np.zeros((N, 1), np.float32))
    with np.load(raw / "data.npz") as npz:
        parts = dict(npz)
    np.savez(raw / "data.npz", **{**parts, "node_feat": np.zeros((N, 64), np.float32)})
    with pytest.raises(ValueError, match=r"node_feat must have shape \(6, 128\) \(ogbn-papers100M's feature width\)"):
        load_ogbn("ogbn-papers100M", tmp_path, cache=False)
