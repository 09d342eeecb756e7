"""The SDPA plan key, the bounded thread-safe plan cache and the folder of serialized plans (no cuDNN needed)."""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudnn_gnn.backends import _sdpa_plans
from cudnn_gnn.backends._cudnn_sdpa import plan_key
from cudnn_gnn.backends._sdpa_plans import PlanCache, PlanKey, PlanStore

TAG = "cudnn92801-fe1.32.0-sm90"


def _key(**kw) -> PlanKey:
    base = PlanKey("fwd", "bfloat16", 8, 4, 32, 32, 64, ((1, 2, 3, 4),) * 4, 0.125)
    return dataclasses.replace(base, **kw)


# ----------------------------------------------------------------------------------------------- key


def test_key_text_is_stable_and_tells_every_field_apart():
    key = _key()
    assert key.text() == _key().text()  # a pure function of the fields: the same in every process
    assert "scale=0x1.0000000000000p-3" in key.text()  # floats exactly, in hex
    changed = {"direction": "bwd", "dtype": "float16", "batch": 9, "heads": 8, "head_dim": 64, "value_dim": 16,
               "seqlen": 128, "strides": ((1, 2, 3, 5),) * 4, "scale": 0.125 + 2**-40, "dropout": 0.1,
               "causal": True, "deterministic": True, "total_tokens": 64}
    assert set(changed) == {f.name for f in dataclasses.fields(PlanKey)}
    texts = {key.text()} | {_key(**{name: value}).text() for name, value in changed.items()}
    assert len(texts) == len(changed) + 1


def test_plan_key_follows_mha_cpp():
    """Shapes, strides, dtype, dropout, scale and (backward) determinism and token bucket; a forward key ignores the
    backward's knobs, so training with and without torch's deterministic switch shares one forward plan."""
    import torch

    fwd = plan_key("fwd", torch.bfloat16, 3, 2, 16, 16, 32, 0.25, 0.0, deterministic=True, total_tokens=640)
    assert (fwd.deterministic, fwd.total_tokens, fwd.dtype) == (False, 0, "bfloat16")
    assert fwd.strides == ((32 * 2 * 16, 16, 2 * 16, 1),) * 4  # packed [T, H, D] declared as [B, H, S, D]
    bwd = plan_key("bwd", torch.float16, 3, 2, 16, 16, 32, 0.25, 0.1, deterministic=True, total_tokens=640)
    assert (bwd.deterministic, bwd.total_tokens, bwd.dropout) == (True, 640, 0.1)


# ----------------------------------------------------------------------------------------------- memory


def test_cache_is_a_bounded_lru_with_counts():
    cache: PlanCache[str] = PlanCache(maxsize=2)
    made: list[str] = []

    def make(name: str, source: str = "build"):
        return lambda: (made.append(name), (f"plan-{name}", source))[1]

    assert cache.get("a", make("a")) == "plan-a" and cache.get("b", make("b", "disk")) == "plan-b"
    assert cache.get("a", make("a")) == "plan-a" and made == ["a", "b"]  # a hit: a is now most recent
    with pytest.warns(RuntimeWarning, match="more than 2 cuDNN SDPA plans"):
        cache.get("c", make("c"))  # evicts b
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once
        cache.get("b", make("b"))
    assert made == ["a", "b", "c", "b"] and "b" in cache and "a" not in cache
    cache.count("disk_writes", 3)
    info = cache.info()
    assert info[:9] == (1, 4, 2, 2, 2, 3, 1, 3, 0), info
    assert (info.builds, info.disk_loads, info.disk_writes) == (3, 1, 3)
    assert info.build_seconds >= 0 and info.load_seconds >= 0
    cache.clear()
    assert cache.info() == (0, 0, 0, 0, 2, 0, 0, 0, 0, 0.0, 0.0)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="maxsize must be an int >= 1"):
            PlanCache(bad)


def test_cache_times_its_makes_by_source(monkeypatch):
    """The wall time of each make goes to ``build_seconds`` or ``load_seconds`` by the source it reports; hits add
    nothing; clear() zeroes both."""
    now = [100.0]
    monkeypatch.setattr(_sdpa_plans, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def make(source: str, seconds: float):
        def run():
            now[0] += seconds
            return "plan", source
        return run

    cache: PlanCache[str] = PlanCache(maxsize=8)
    cache.get("a", make("build", 2.0))
    cache.get("b", make("disk", 0.25))
    cache.get("c", make("build", 0.5))
    cache.get("a", make("build", 9.0))  # a hit: not made, not timed
    info = cache.info()
    assert (info.builds, info.disk_loads, info.build_seconds, info.load_seconds) == (2, 1, 2.5, 0.25), info
    cache.clear()
    assert (cache.info().build_seconds, cache.info().load_seconds) == (0.0, 0.0)


def test_cache_builds_each_key_once_under_threads():
    cache: PlanCache[int] = PlanCache(maxsize=64)
    builds: dict[int, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(8)

    def make(k: int):
        def build():
            with lock:
                builds[k] = builds.get(k, 0) + 1
            return k * 10, "build"
        return build

    def worker(i: int) -> None:
        start.wait()
        for j in range(200):
            k = (i + j) % 16
            assert cache.get(k, make(k)) == k * 10

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = cache.info()
    assert builds == dict.fromkeys(range(16), 1)
    assert info.misses == info.builds == 16 and info.hits + info.misses == 8 * 200 and info.currsize == 16


# ----------------------------------------------------------------------------------------------- disk


def _store(tmp_path: Path, counts: dict[str, int] | None = None) -> PlanStore:
    counts = counts if counts is not None else {}

    def bump(name):
        return lambda: counts.__setitem__(name, counts.get(name, 0) + 1)

    return PlanStore(tmp_path / "plans", on_write=bump("writes"), on_reject=bump("rejects"))


def test_store_round_trip_names_the_file_by_tag_and_key(tmp_path):
    counts: dict[str, int] = {}
    store = _store(tmp_path, counts)
    text = _key().text()
    assert store.load(TAG, text) is None  # absent: no warning, no count
    assert store.save(TAG, text, b"\x00plan bytes\xff", 4096)
    path = store.path(TAG, text)
    assert path.name.startswith(f"{TAG}-") and path.suffix == ".plan" and path.exists()
    assert store.path(TAG, _key(batch=9).text()) != path
    assert store.path("cudnn92900-fe1.32.0-sm90", text) != path  # another cuDNN: another file
    assert store.path("cudnn92801-fe1.32.0-sm100", text) != path  # another architecture: another file
    assert store.load(TAG, text) == (b"\x00plan bytes\xff", 4096)
    assert counts == {"writes": 1}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: data[:-3], "truncated"),
        (lambda data: data[:10], "bad magic or truncated header"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "checksum"),
        (lambda data: b"PK\x03\x04" + data[4:], "bad magic"),
        (lambda data: data[:25] + b"\x00" + data[26:], "corrupt header"),
        (lambda data: b"", "bad magic or truncated header"),
    ],
    ids=["truncated", "header-cut", "bit-flip", "other-file-type", "broken-json", "empty"],
)
def test_damaged_files_are_never_trusted(tmp_path, damage, why):
    counts: dict[str, int] = {}
    store = _store(tmp_path, counts)
    text = _key().text()
    store.save(TAG, text, b"x" * 100, 64)
    path = store.path(TAG, text)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.warns(RuntimeWarning, match=f"ignoring SDPA plan file .*{why}.*rebuilding it") as w:
        assert store.load(TAG, text) is None
    assert len(w) == 1 and "\n" not in str(w[0].message)  # one line
    assert counts == {"writes": 1, "rejects": 1}
    store.save(TAG, text, b"y" * 10, 64)  # the rebuild overwrites it
    assert store.load(TAG, text) == (b"y" * 10, 64)


def test_foreign_files_are_never_trusted(tmp_path):
    """A file of another key (renamed, or a hash collision), another cuDNN / architecture, or another format."""
    store = _store(tmp_path)
    text, other = _key().text(), _key(batch=9).text()
    store.save(TAG, other, b"other plan", 0)
    store.path(TAG, other).rename(store.path(TAG, text))
    with pytest.warns(RuntimeWarning, match="another plan's key"):
        assert store.load(TAG, text) is None
    elsewhere = "cudnn92900-fe1.32.0-sm100"
    store.save(elsewhere, text, b"plan", 0)
    store.path(elsewhere, text).rename(store.path(TAG, text))
    with pytest.warns(RuntimeWarning, match="built for 'cudnn92900-fe1.32.0-sm100'"):
        assert store.load(TAG, text) is None
    data = store.path(TAG, text).read_bytes().replace(b'"format": 1', b'"format": 7')
    store.path(TAG, text).write_bytes(data)
    with pytest.warns(RuntimeWarning, match="format 7"):
        assert store.load(TAG, text) is None


def test_concurrent_writers_leave_one_whole_file(tmp_path):
    store = _store(tmp_path)
    text = _key().text()
    blobs = [bytes([i]) * (50_000 + i) for i in range(6)]
    seen: list[object] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a reader never meets a half-written file
                got = store.load(TAG, text)
            if got is not None:
                seen.append(got.blob)

    def writer(blob: bytes):
        for _ in range(5):
            assert store.save(TAG, text, blob, 1)

    threads = [threading.Thread(target=writer, args=(b,)) for b in blobs]
    r = threading.Thread(target=reader)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    r.join()
    assert store.load(TAG, text).blob in blobs
    assert all(b in blobs for b in seen)
    assert [p.suffix for p in store.folder.iterdir()] == [".plan"]


def test_an_unwritable_folder_warns_once_and_keeps_plans_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = PlanStore(blocker / "plans")
    with pytest.warns(RuntimeWarning, match="cannot write SDPA plans to .*stay in memory"):
        assert not store.save(TAG, "k", b"p", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not store.save(TAG, "k", b"p", 0)
        assert store.load(TAG, "k") is None


def test_plan_dir_default_env_and_override(monkeypatch, tmp_path):
    monkeypatch.setattr(_sdpa_plans, "_DIR", _sdpa_plans._UNSET)
    monkeypatch.setenv("CUDNN_GNN_CACHE_DIR", str(tmp_path / "c"))
    assert _sdpa_plans.plan_dir() == tmp_path / "c" / "sdpa-plans"
    monkeypatch.delenv("CUDNN_GNN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert _sdpa_plans.default_plan_dir() == tmp_path / "x" / "cudnn_gnn" / "sdpa-plans"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _sdpa_plans.default_plan_dir() == Path.home() / ".cache" / "cudnn_gnn" / "sdpa-plans"
    _sdpa_plans.set_plan_dir(os.fspath(tmp_path / "mine"))
    assert _sdpa_plans.plan_dir() == tmp_path / "mine"
    _sdpa_plans.set_plan_dir(None)
    assert _sdpa_plans.plan_dir() is None
    with pytest.raises(TypeError, match="folder must be a path or None, got int"):
        _sdpa_plans.set_plan_dir(3)  # type: ignore[arg-type]
