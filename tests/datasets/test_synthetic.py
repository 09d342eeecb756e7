"""Tests for cudnn_gnn.datasets.synthetic: OGB-shaped power-law graphs and degree statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_gnn.datasets import degree_stats, synthetic_ogbn
from cudnn_gnn.datasets import synthetic as synthetic_module
from cudnn_gnn.datasets._meta import OGBN_META

SCALE = 0.001


@pytest.mark.parametrize("name", sorted(OGBN_META))
def test_shapes_follow_the_dataset(name: str) -> None:
    meta = OGBN_META[name]
    data = synthetic_ogbn(name, scale=SCALE)[0]
    n = round(meta.num_nodes * SCALE)
    raw = round(meta.num_raw_edges * SCALE)
    assert data.num_nodes == n
    assert data.edge_index.shape == (2, raw * (2 if meta.add_inverse_edge else 1))
    assert data.edge_index.dtype == torch.int64
    assert int(data.edge_index.min()) >= 0 and int(data.edge_index.max()) < n
    assert not bool((data.edge_index[0] == data.edge_index[1]).any())
    assert data.x.shape == (n, meta.num_features or 8) and data.x.dtype == torch.float32
    assert data.y.shape == (n, meta.num_tasks)
    assert (data.num_classes, data.num_tasks, data.eval_metric) == (meta.num_classes, meta.num_tasks, meta.eval_metric)
    parts = torch.cat([data.train_idx, data.valid_idx, data.test_idx])
    assert len(parts.unique()) == len(parts) <= n
    expected_train = round(meta.split_sizes[0] * n / meta.num_nodes)
    assert abs(len(data.train_idx) - expected_train) <= 1
    if meta.add_inverse_edge:
        assert torch.equal(data.edge_index[:, 1::2], data.edge_index[:, 0::2].flip(0))
    if meta.num_edge_features:
        assert data.edge_attr.shape == (data.edge_index.size(1), 8)
        assert float(data.edge_attr.min()) > 0 and float(data.edge_attr.max()) < 1
    else:
        assert "edge_attr" not in data


@pytest.mark.slow
def test_label_types() -> None:
    arxiv = synthetic_ogbn("ogbn-arxiv", scale=SCALE)[0]
    assert arxiv.y.dtype == torch.int64 and int(arxiv.y.max()) < 40 and len(arxiv.y.unique()) > 5
    proteins = synthetic_ogbn("ogbn-proteins", scale=SCALE)[0]
    assert set(proteins.y.unique().tolist()) == {0, 1}
    papers = synthetic_ogbn("ogbn-papers100M", scale=SCALE)[0]
    labelled = torch.cat([papers.train_idx, papers.valid_idx, papers.test_idx])
    assert papers.y.dtype == torch.float32 and not torch.isnan(papers.y[labelled]).any()
    assert int(torch.isnan(papers.y).sum()) == papers.num_nodes - len(labelled)


def test_seeded_and_reproducible() -> None:
    a = synthetic_ogbn("ogbn-arxiv", scale=SCALE, seed=3)[0]
    b = synthetic_ogbn("ogbn-arxiv", scale=SCALE, seed=3)[0]
    c = synthetic_ogbn("ogbn-arxiv", scale=SCALE, seed=4)[0]
    for key in ("edge_index", "x", "y", "train_idx"):
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a.edge_index, c.edge_index)


def test_num_features_override() -> None:
    assert synthetic_ogbn("ogbn-products", scale=SCALE, num_features=7)[0].x.shape[1] == 7
    assert "x" not in synthetic_ogbn("ogbn-products", scale=SCALE, num_features=0)[0]


def test_power_law_degrees() -> None:
    data = synthetic_ogbn("ogbn-arxiv", scale=0.1)[0]
    stats = degree_stats(data.edge_index, data.num_nodes)
    assert stats["mean"] == pytest.approx(1_166_243 / 169_343, rel=0.01)
    assert stats["max"] > 20 * stats["median"]  # heavy tail
    gamma = synthetic_module.SYNTHETIC_DEGREE_MODEL["ogbn-arxiv"].gamma_in
    assert abs(stats["power_law_exponent"] - gamma) < 0.3


@pytest.mark.slow
def test_labels_are_learnable() -> None:
    torch.manual_seed(0)
    data = synthetic_ogbn("ogbn-arxiv", scale=0.02)[0]
    src, dst = data.edge_index
    agg = torch.zeros_like(data.x).index_add_(0, dst, data.x[src])
    agg = agg / torch.bincount(dst, minlength=data.num_nodes).clamp(min=1).unsqueeze(1)
    feats = torch.cat([data.x, agg], dim=1)
    model = torch.nn.Linear(feats.size(1), 40)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    y = data.y.view(-1)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(feats[data.train_idx]), y[data.train_idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]
    pred = model(feats[data.test_idx]).argmax(dim=1)
    majority = float((y[data.test_idx] == y[data.train_idx].mode().values).float().mean())
    assert float((pred == y[data.test_idx]).float().mean()) > majority + 0.1


def test_memory_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthetic_module, "MEMORY_WARN_BYTES", 1000)
    with pytest.warns(UserWarning, match="GiB"):
        synthetic_ogbn("ogbn-arxiv", scale=SCALE)[0]


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        ({"name": "ogbn-mag"}, ValueError, "`name`"),
        ({"scale": 0.0}, ValueError, "`scale`"),
        ({"scale": float("nan")}, ValueError, "`scale`"),
        ({"scale": True}, TypeError, "`scale`"),
        ({"seed": 1.5}, TypeError, "`seed`"),
        ({"num_features": -1}, ValueError, "`num_features`"),
        ({"num_features": "8"}, TypeError, "`num_features`"),
    ],
)
def test_argument_errors(kwargs: dict, exc: type, arg: str) -> None:
    kwargs = {"name": "ogbn-arxiv", "scale": SCALE, **kwargs}
    with pytest.raises(exc, match=arg):
        synthetic_ogbn(kwargs.pop("name"), **kwargs)[0]


# ---------------------------------------------------------------- degree_stats


def test_degree_stats_on_a_star() -> None:
    # 5 leaves point at node 0; node 1 points at node 2. In-degrees: [5, 0, 1, 0, 0, 0].
    edge_index = torch.tensor([[1, 2, 3, 4, 5, 1], [0, 0, 0, 0, 0, 2]])
    stats = degree_stats(edge_index, 6, xmin=1)
    assert stats["mean"] == 1.0 and stats["median"] == 0.0 and stats["max"] == 5.0
    assert stats["frac_zero_in"] == pytest.approx(4 / 6)
    assert stats["power_law_exponent"] == pytest.approx(1 + 2 / (math.log(5 / 0.5) + math.log(1 / 0.5)))


def test_degree_stats_recovers_a_known_exponent() -> None:
    rng = np.random.default_rng(0)
    # Continuous Pareto(gamma=2.5) on [9.5, inf) rounded to integers >= 10: the model behind the estimator.
    degrees = np.floor(9.5 * (1 - rng.random(50_000)) ** (-1 / 1.5) + 0.5).astype(np.int64)
    dst = torch.from_numpy(np.repeat(np.arange(len(degrees)), degrees))
    stats = degree_stats(torch.stack([torch.zeros_like(dst), dst]), len(degrees), xmin=10)
    assert abs(stats["power_law_exponent"] - 2.5) < 0.05


def test_degree_stats_errors() -> None:
    good = torch.tensor([[0], [1]])
    with pytest.raises(TypeError, match="`edge_index`"):
        degree_stats(good.float(), 2)
    with pytest.raises(ValueError, match="`edge_index`"):
        degree_stats(torch.zeros(3, 2, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="`edge_index`"):
        degree_stats(good, 1)
    with pytest.raises(ValueError, match="`xmin`"):
        degree_stats(good, 2, xmin=0)
    with pytest.raises(TypeError, match="`num_nodes`"):
        degree_stats(good, 2.0)


# ------------------------------------------------------------------------------------ memory-mapped layout

PAPERS_TINY = 3e-5  # 3,332 nodes, 48,471 edges


def test_mmap_papers_shapes_dtypes_and_skew(tmp_path) -> None:
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn_mmap

    g = synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "p", scale=PAPERS_TINY, chunk_edges=10_000)
    meta = OGBN_META["ogbn-papers100M"]
    n, e = round(meta.num_nodes * PAPERS_TINY), round(meta.num_raw_edges * PAPERS_TINY)
    assert (g.num_nodes, g.num_edges, g.num_classes) == (n, e, 172)
    assert g.x.shape == (n, 128) and g.x.dtype == torch.float32
    assert g.y.shape == (n, 1) and g.y.dtype == torch.float32
    assert g.colptr.shape == (n + 1,) and g.row.shape == (e,)
    assert g.colptr.dtype == g.row.dtype == torch.int64
    assert int(g.colptr[0]) == 0 and int(g.colptr[-1]) == e and bool((g.colptr.diff() >= 0).all())
    assert 0 <= int(g.row.min()) and int(g.row.max()) < n
    labelled = torch.cat([g.train_idx, g.valid_idx, g.test_idx])
    assert not torch.isnan(g.y[labelled]).any() and int(torch.isnan(g.y).sum()) == n - len(labelled)
    ei = g.edge_index()
    assert not bool((ei[0] == ei[1]).any())
    stats = degree_stats(ei, n)
    assert stats["max"] > 5 * stats["mean"] and stats["median"] < stats["mean"]  # heavy tail
    assert 2.0 < stats["power_law_exponent"] < 3.5


def test_mmap_csc_holds_exactly_the_drawn_edges(tmp_path) -> None:
    """The counting sort puts every drawn edge (and, undirected, its reverse) in its destination's CSC range."""
    from cudnn_gnn.datasets.synthetic import _edge_laws, _raw_edge_chunk, _sizes, synthetic_ogbn_mmap

    g = synthetic_ogbn_mmap("ogbn-products", tmp_path / "p", scale=0.0005, seed=2, chunk_edges=7_000)
    meta = OGBN_META["ogbn-products"]
    n, raw, _ = _sizes(meta, 0.0005)
    laws = _edge_laws(meta, n, raw, 0.0005, torch.Generator().manual_seed(2))
    drawn = [_raw_edge_chunk(*laws, 2, i, s, min(7_000, raw - s), True) for i, s in enumerate(range(0, raw, 7_000))]
    src, dst = torch.cat([d[0] for d in drawn]), torch.cat([d[1] for d in drawn])
    ei = g.edge_index()
    key = lambda s, d: torch.sort(d * n + s).values  # noqa: E731
    assert torch.equal(key(ei[0], ei[1]), key(src, dst))
    assert g.y.dtype == torch.int64 and g.x.shape == (n, 100)


def test_mmap_is_seeded_and_loads_share_the_files(tmp_path, monkeypatch) -> None:
    from cudnn_gnn.datasets import synthetic as syn

    a = syn.synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "a", scale=PAPERS_TINY, seed=1, feature_dtype="float16")
    b = syn.synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "b", scale=PAPERS_TINY, seed=1, feature_dtype="float16")
    c = syn.synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "c", scale=PAPERS_TINY, seed=2, feature_dtype="float16")
    assert a.x.dtype == torch.float16
    for key, path in a.files.items():
        assert path.read_bytes() == b.files[key].read_bytes(), key
    assert not torch.equal(a.row, c.row) and not torch.equal(a.x, c.x)

    def no_generation(*args, **kwargs):
        raise AssertionError("a matching folder must be mapped, not generated again")

    monkeypatch.setattr(syn, "_write_mapped", no_generation)
    again = syn.synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "a", scale=PAPERS_TINY, seed=1, feature_dtype="float16")
    other = syn.load_mapped(tmp_path / "a")
    for g in (again, other):  # memory maps of the same files: no copy in either process view
        for key in ("x", "row", "colptr"):
            mapped = np.load(g.files[key], mmap_mode="r")
            assert isinstance(mapped, np.memmap) and str(g.files[key]) == str(a.files[key])
        assert torch.equal(g.x, a.x) and torch.equal(g.row, a.row)
        if Path("/proc/self/maps").exists():  # the tensors' memory is a mapping of the file itself, not a copy
            for key in ("x", "row", "colptr"):
                assert _mapping_of(getattr(g, key).data_ptr()) == str(a.files[key].resolve()), key
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        syn.load_mapped(tmp_path / "missing")
    with pytest.raises(NotImplementedError, match="edge features"):
        syn.synthetic_ogbn_mmap("ogbn-proteins", tmp_path / "q", scale=0.001)
    with pytest.raises(ValueError, match="feature_dtype"):
        syn.synthetic_ogbn_mmap("ogbn-arxiv", tmp_path / "q", scale=0.001, feature_dtype="bfloat16")


def _mapping_of(address: int) -> str | None:
    """The file mapped at ``address`` in this process (Linux ``/proc/self/maps``), or None."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in parts[0].split("-"))
        if lo <= address < hi:
            return parts[5] if len(parts) == 6 else None
    return None


@pytest.mark.slow
def test_mmap_the_gpus_way_on_a_cpu_writes_the_same_graph_and_features(tmp_path, monkeypatch) -> None:
    """The GPU's way (row sorted into a buffer and copied out in pieces, labels from a host generator seeded by the
    device's) run on a CPU: the same CSC and features as writing straight into the files; its own labels and split
    (another generator), still valid; the manifest records the generating device and a CUDA folder is not taken
    for a CPU one."""
    from cudnn_gnn.datasets import synthetic as syn

    meta = OGBN_META["ogbn-papers100M"]
    for root, staged in (("direct", False), ("staged", True)):
        (tmp_path / root).mkdir()
        paths = {key: tmp_path / root / f"{key}.npy" for key in syn._array_keys(128)}
        syn._write_mapped(meta, paths, PAPERS_TINY, 3, 128, "float16", 10_000, torch.device("cpu"), staged=staged)
    for key in ("colptr", "row", "x"):
        assert (tmp_path / "direct" / f"{key}.npy").read_bytes() == (tmp_path / "staged" / f"{key}.npy").read_bytes()
    y = torch.from_numpy(np.load(tmp_path / "staged" / "y.npy"))
    idx = torch.cat([torch.from_numpy(np.load(tmp_path / "staged" / f"{p}.npy")) for p in ("train_idx", "valid_idx",
                                                                                              "test_idx")])
    assert idx.unique().numel() == idx.numel() and not torch.isnan(y[idx]).any()
    assert int(torch.isnan(y).sum()) == y.size(0) - idx.numel()

    g = syn.synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "m", scale=PAPERS_TINY, seed=3)
    manifest = __import__("json").loads((g.root / "manifest.json").read_text())
    assert manifest["generated_on"] == "cpu" and manifest["format"] == syn._MMAP_FORMAT
    manifest["generated_on"] = "cuda"
    (g.root / "manifest.json").write_text(__import__("json").dumps(manifest))
    calls = []
    original = syn._write_mapped
    monkeypatch.setattr(syn, "_write_mapped", lambda *a, **k: (calls.append(a[-1]), original(*a, **k))[1])
    syn.synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "m", scale=PAPERS_TINY, seed=3)
    assert calls == [torch.device("cpu")]  # a folder made on another device is made again


@pytest.mark.parametrize("device, exc, match", [(3, TypeError, "device must be a str or a torch.device, got int"),
                                                ("meta", ValueError, "device must be a CPU or CUDA device, got 'meta'")])
def test_mmap_device_errors(tmp_path, device, exc, match) -> None:
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn_mmap

    with pytest.raises(exc, match=match):
        synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "p", scale=PAPERS_TINY, device=device)


# ------------------------------------------------------------------ concurrent writers and damaged folders

def _signature(g) -> tuple[float, ...]:
    """Sums of every array of a mapped graph (NaN labels skipped): equal signatures, equal graphs (in practice)."""
    return (float(g.colptr.sum()), float(g.row.sum()), float(g.x.double().sum()), float(g.y.nansum()),
            float(g.train_idx.sum()))


# Child processes run in fresh interpreters (a fork of a process with torch's thread pools can hang).
_CHILD = """
import json, os, sys, torch
torch.set_num_threads(1)
from cudnn_gnn.datasets import synthetic as syn
def signature(g):
    return [float(g.colptr.sum()), float(g.row.sum()), float(g.x.double().sum()), float(g.y.nansum()),
            float(g.train_idx.sum())]
root, tiny = sys.argv[1], float(sys.argv[2])
def generate(seed):
    return syn.synthetic_ogbn_mmap("ogbn-papers100M", root, scale=tiny, seed=seed, chunk_edges=2_000)
"""
_GENERATE = "print(json.dumps(signature(generate(1))))"
_REGENERATE = "for seed in (2, 1, 2, 1):\n    generate(seed)\nprint('null')"
_READ = """
seen = []
while not os.path.exists(sys.argv[3]) or len(seen) < 2:
    seen.append(signature(syn.load_mapped(root)))
print(json.dumps(seen))
"""
_KILLED = """
def die(*args, **kwargs):
    os._exit(3)  # killed after the CSC and the features were written, before the labels
syn._labels_and_split = die
generate(1)
"""


def _child(body: str, root: str, *args: str):
    """A Python child running ``_CHILD + body`` with ``sys.argv[1:] = [root, PAPERS_TINY, *args]``."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", _CHILD + body, root, str(PAPERS_TINY), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc, timeout: float = 300):
    import json

    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


def test_mmap_regenerating_a_folder_leaves_a_mapped_graph_alone(tmp_path) -> None:
    """A graph mapped from a folder keeps its values when the folder is generated again with other arguments (the
    files were rewritten in place: the mapped graph silently became the new one, or died of SIGBUS mid-read)."""
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn_mmap

    old = synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "d", scale=PAPERS_TINY, seed=1)
    before = _signature(old)
    new = synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "d", scale=PAPERS_TINY, seed=2)
    assert _signature(old) == before and _signature(new) != before


def test_mmap_concurrent_generators_and_readers_on_one_folder(tmp_path) -> None:
    """Three generators of one dataset on one folder all succeed with the same graph; a reader looping over
    load_mapped while another process regenerates the folder with seed 2, 1, 2, 1 only ever maps a whole seed-1 or
    seed-2 graph (never a mix, never SIGBUS); no temporary is left."""
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn_mmap

    root = str(tmp_path / "same")
    results = [_result(p) for p in [_child(_GENERATE, root) for _ in range(3)]]
    one, two = (list(_signature(synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / str(seed), scale=PAPERS_TINY,
                                                    seed=seed, chunk_edges=2_000))) for seed in (1, 2))
    assert results == [one] * 3

    done = tmp_path / "writer_done"
    reader = _child(_READ, root, str(done))
    _result(_child(_REGENERATE, root))
    done.touch()
    seen = _result(reader)
    assert len(seen) >= 2 and all(s in (one, two) for s in seen), [s for s in seen if s not in (one, two)]
    assert not list((tmp_path / "same").glob(".*.tmp"))


def test_mmap_a_killed_writers_temporaries_are_removed_by_the_next_call(tmp_path) -> None:
    """A writer killed mid-way leaves only its temporaries (no manifest, no final file); the next call on the folder
    from this host deletes them (their process is gone) and generates the dataset."""
    from cudnn_gnn.datasets.synthetic import load_mapped, synthetic_ogbn_mmap

    root = tmp_path / "d"
    proc = _child(_KILLED, str(root))
    proc.communicate(timeout=300)
    assert proc.returncode == 3
    left = sorted(p.name for p in root.iterdir() if p.name != ".lock")
    assert left and all(name.startswith(".") and f".{proc.pid}." in name and name.endswith(".tmp") for name in left)
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        load_mapped(root)
    g = synthetic_ogbn_mmap("ogbn-papers100M", root, scale=PAPERS_TINY, seed=1)
    assert sorted(p.name for p in root.iterdir()) == sorted([".lock", "manifest.json", *(f"{k}.npy" for k in g.files)])


def _damage(root: Path, case: str) -> Path:
    """Damage a generated folder as the case says; return the file an error must name."""
    manifest = root / "manifest.json"
    if case in ("list", "null", "missing_key", "not_json"):
        info = __import__("json").loads(manifest.read_text())
        text = {"list": "[1, 2]", "null": "null", "not_json": "{not json",
                "missing_key": __import__("json").dumps({k: v for k, v in info.items() if k != "num_nodes"})}[case]
        manifest.write_text(text)
        return manifest
    path = root / "row.npy"
    if case == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        path.unlink()
    return path


DAMAGE = ["list", "null", "missing_key", "not_json", "truncated", "missing_array"]


@pytest.mark.parametrize("case", DAMAGE)
def test_mmap_damaged_folder_is_generated_again(tmp_path, case: str) -> None:
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn_mmap

    g = synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "d", scale=PAPERS_TINY, seed=1)
    before = _signature(g)
    named = _damage(tmp_path / "d", case)
    with pytest.warns(UserWarning, match=f"{named}.*generating .* again"):
        again = synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "d", scale=PAPERS_TINY, seed=1)
    assert _signature(again) == before


@pytest.mark.parametrize("case", DAMAGE)
def test_load_mapped_names_the_damaged_file(tmp_path, case: str) -> None:
    from cudnn_gnn.datasets.synthetic import load_mapped, synthetic_ogbn_mmap

    synthetic_ogbn_mmap("ogbn-papers100M", tmp_path / "d", scale=PAPERS_TINY, seed=1)
    named = _damage(tmp_path / "d", case)
    exc = FileNotFoundError if case == "missing_array" else ValueError
    with pytest.raises(exc, match=f"dataset file {named} is (damaged|missing).*generate it again"):
        load_mapped(tmp_path / "d")


def test_mmap_root_that_is_a_file(tmp_path) -> None:
    from cudnn_gnn.datasets.synthetic import load_mapped, synthetic_ogbn_mmap

    (tmp_path / "f").write_text("x")
    for call in (lambda: synthetic_ogbn_mmap("ogbn-arxiv", tmp_path / "f", scale=0.001), lambda: load_mapped(tmp_path / "f")):
        with pytest.raises(ValueError, match=f"`root` must be a folder, got the file '{tmp_path / 'f'}'"):
            call()


def test_synthetic_ogbn_has_ogbs_get_idx_split() -> None:
    data = synthetic_ogbn("ogbn-arxiv", scale=0.001)[0]
    split = data.get_idx_split()
    assert sorted(split) == ["test", "train", "valid"] and split["train"] is data.train_idx


def test_a_synthetic_set_is_a_dataset_of_one_graph_as_ogbs() -> None:
    dataset = synthetic_ogbn("ogbn-proteins", scale=SCALE, seed=2)
    assert repr(dataset) == f"synthetic_ogbn('ogbn-proteins', scale={SCALE}, seed=2)" and len(dataset) == 1
    data = dataset[0]
    assert (dataset.num_classes, dataset.num_features, dataset.num_tasks) == (2, 8, 112)
    assert data.num_nodes == dataset.y.shape[0] and torch.equal(dataset.get_idx_split()["test"], data.test_idx)
    assert synthetic_ogbn("ogbn-arxiv", scale=SCALE).num_classes == 40  # y is [N, 1]: OGB's figure, not inferred
