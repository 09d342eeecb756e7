"""Our cuDNN SDPA graphs (:mod:`cudnn_gnn.backends._cudnn_sdpa`) on a CPU fake of the frontend's graph API.

The fake (``_fake_cudnn.py``) checks every declaration against the frontend's contract and runs the graphs in
float64 from the bound buffers, so these tests cover everything but cuDNN itself: the layouts and ragged offsets,
the statistics' two layouts, dropout seeds, plan keys and counts, the plan folder, and the routing around graphs
cuDNN cannot build. The GPU half is tests/gpu/test_sdpa_graphs_gpu.py.
"""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch

from cudnn_gnn.backends import _cudnn_sdpa, _sdpa_plans
from cudnn_gnn.ops.global_attention import graph_attention

from ._fake_cudnn import FakeFrontend, NotSupported, _masks

ga_module = importlib.import_module("cudnn_gnn.ops.global_attention")

SIZES = {"ragged": [3, 1, 6, 2], "empty_graphs": [0, 4, 0, 0, 3, 0], "one_graph": [7]}


def _ptr(sizes):
    return torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.long)


def _qkv(n, h=2, d=16, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, h, d, generator=g, dtype=torch.float64).to(dtype).requires_grad_() for _ in range(3)]


def _reference(q, k, v, sizes, scale, masks=None):
    outs, start = [], 0
    for i, n in enumerate(sizes):
        qs, ks, vs = (x[start:start + n].double().transpose(0, 1) for x in (q, k, v))
        attn = torch.softmax(qs @ ks.transpose(-1, -2) * scale, -1)
        if masks is not None and masks[i] is not None:
            attn = attn * masks[i]
        outs.append((attn @ vs).transpose(0, 1))
        start += n
    return torch.cat(outs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("name", list(SIZES))
def test_forward_and_backward_match_the_reference(fake_cudnn, dtype, name):
    sizes = SIZES[name]
    q, k, v = _qkv(sum(sizes), dtype=dtype)
    out = _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr(sizes), max(sizes), 0.25)
    assert out.dtype == dtype and out.shape == q.shape
    go = torch.randn_like(out, dtype=torch.float64)
    (out.double() * go).sum().backward()
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = _reference(*leaves, sizes, 0.25)
    (want * go).sum().backward()
    tol = {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(out.double(), want, **tol)
    for got, ref in zip((q, k, v), leaves):
        assert got.grad.dtype == dtype
        torch.testing.assert_close(got.grad.double(), ref.grad, **tol)
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.misses, fake_cudnn.builds) == (2, 2, 2)  # one forward, one backward graph


def test_plans_are_keyed_reused_and_counted(fake_cudnn):
    q, k, v = _qkv(12)
    for max_n in (5, 9, 16):  # one longest-graph bucket (16): one forward plan
        _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr([5, 7]), max_n, 0.25)
    assert fake_cudnn.builds == 1 and _cudnn_sdpa.plan_cache_info()[:4] == (2, 1, 0, 1)
    _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr([5, 7]), 17, 0.25)  # bucket 32
    _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr([5, 5, 2]), 7, 0.25)  # B = 3
    _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr([5, 7]), 7, 0.5)  # another scale
    _cudnn_sdpa.sdpa_varlen(q.half(), k.half(), v.half(), _ptr([5, 7]), 7, 0.25)  # another dtype
    assert fake_cudnn.builds == 5
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.hits, info.misses, info.builds, info.currsize, info.maxsize) == (2, 5, 5, 5, 128)
    _cudnn_sdpa.clear_plan_cache()
    assert _cudnn_sdpa.plan_cache_info()[:4] == (0, 0, 0, 0)


def test_a_ragged_epoch_builds_few_backward_plans(fake_cudnn, monkeypatch):
    """60 batches of 128 graphs of 10-500 nodes (a smaller last batch): the backward key follows the node total in
    8 buckets per power of two, not rounded to 64 (which gave one backward plan per batch or so)."""
    fake_cudnn_runs = []
    monkeypatch.setattr(_cudnn_sdpa, "_execute", lambda fe, plan, pack, device: fake_cudnn_runs.append(1))
    g = torch.Generator().manual_seed(0)
    totals = []
    for step in range(60):
        sizes = torch.randint(10, 501, (128 if step < 59 else 37,), generator=g)
        n = int(sizes.sum())
        totals.append(n)
        x = torch.zeros(n, 1, 8, dtype=torch.bfloat16, requires_grad=True)
        _cudnn_sdpa.sdpa_varlen(x, x, x, _ptr(sizes.tolist()), int(sizes.max()), 1.0).sum().backward()
    fwd = {k for k in fake_cudnn.built_keys if '"dir": "fwd"' in k}
    bwd = {k for k in fake_cudnn.built_keys if '"dir": "bwd"' in k}
    assert len(fwd) == 2  # B in {128, 37}, longest-graph bucket 512
    assert len(bwd) == len({(t < 40_000, _cudnn_sdpa.bucket_tokens(t)) for t in totals}) <= 5
    assert len({_cudnn_sdpa.round64(t) for t in totals}) >= 40  # what keying on round64(T) would have built
    assert len(fake_cudnn_runs) == 120


def test_bucket_tokens():
    assert [_cudnn_sdpa.bucket_tokens(t) for t in (0, 1, 64, 65, 1000, 33_000, 65_536)] == [64, 64, 64, 128, 1024,
                                                                                              36_864, 65_536]
    for t in range(1, 5000, 37):
        b = _cudnn_sdpa.bucket_tokens(t)
        assert t <= b <= max(64, t + t / 8 + 64) and b % 64 == 0
    assert [_cudnn_sdpa.bucket_seqlen(n) for n in (1, 16, 17, 100, 500)] == [16, 16, 32, 128, 512]


# ----------------------------------------------------------------------------------------------- dropout


def test_dropout_uses_one_device_seed_for_forward_and_backward(fake_cudnn):
    """The forward and the backward graph get the same seed and offset buffers ([1, 1, 1, 1] int64, on the
    tensors' device), so the gradients are those of the forward's mask."""
    sizes = SIZES["ragged"]
    q, k, v = _qkv(sum(sizes), dtype=torch.bfloat16)
    torch.manual_seed(5)
    out = _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr(sizes), max(sizes), 0.25, dropout_p=0.4)
    go = torch.randn(out.shape, dtype=torch.float64)
    (out.double() * go).sum().backward()
    assert len(fake_cudnn.seeds) == 2 and fake_cudnn.seeds[0] == fake_cudnn.seeds[1]
    cfg = {"dropout": [0.4], "h": 2}
    masks = _masks(cfg, sizes, torch.tensor(fake_cudnn.seeds[0]), torch.tensor(0))
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = _reference(*leaves, sizes, 0.25, masks)
    (want * go).sum().backward()
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    for got, ref in zip((q, k, v), leaves):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=2e-2, atol=2e-2)
    assert any('"dropout": [0.4' in key for key in fake_cudnn.built_keys)


def test_dropout_seeds_follow_torchs_generator(fake_cudnn):
    q, k, v = (x.detach() for x in _qkv(9, dtype=torch.float16))
    ptr = _ptr([4, 5])

    def run(**kw):
        return _cudnn_sdpa.sdpa_varlen(q, k, v, ptr, 5, 0.25, dropout_p=0.3, **kw)

    torch.manual_seed(1)
    a, b = run(), run()
    torch.manual_seed(1)
    c = run()
    assert torch.equal(a, c) and not torch.equal(a, b)  # seeded runs repeat; each call draws a new mask
    gen = torch.Generator().manual_seed(7)
    d = run(generator=gen)
    gen.manual_seed(7)
    assert torch.equal(run(generator=gen), d)
    assert len(set(fake_cudnn.seeds)) == 3 and all(0 <= s < 2**62 for s in fake_cudnn.seeds)


def test_draw_dropout_rng_is_a_device_pair():
    seed, offset = _cudnn_sdpa.draw_dropout_rng(torch.device("cpu"))
    assert seed.shape == offset.shape == (1, 1, 1, 1) and seed.dtype == offset.dtype == torch.int64
    assert int(offset) == 0 and seed.data_ptr() != offset.data_ptr()


def test_dropout_rate_through_graph_attention(fake_cudnn, monkeypatch):
    """graph_attention(dropout=p, training=True) on the cudnn path hands p to the graph (not to another backend)."""
    monkeypatch.setattr(ga_module, "choose_backend", lambda *a: "cudnn")
    q, k, v = (x.detach() for x in _qkv(9, dtype=torch.bfloat16))
    graph_attention(q, k, v, _ptr([4, 5]), dropout=0.25, training=True, backend="cudnn")
    graph_attention(q, k, v, _ptr([4, 5]), dropout=0.25, training=False, backend="cudnn")
    keys = fake_cudnn.built_keys
    assert len(keys) == 2 and '"dropout": [0.25' in keys[0] and '"dropout": null' in keys[1]


# ----------------------------------------------------------------------------------------------- determinism


def test_deterministic_backward_where_asked(fake_cudnn):
    q, k, v = _qkv(9, dtype=torch.bfloat16)
    ptr = _ptr([4, 5])
    _cudnn_sdpa.sdpa_varlen(q, k, v, ptr, 5, 0.25, deterministic=True).sum().backward()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        _cudnn_sdpa.sdpa_varlen(q, k, v, ptr, 5, 0.25).sum().backward()  # None: follows torch's switch
    finally:
        torch.use_deterministic_algorithms(False)
    _cudnn_sdpa.sdpa_varlen(q, k, v, ptr, 5, 0.25).sum().backward()
    bwd = [k for k in fake_cudnn.built_keys if '"dir": "bwd"' in k]
    assert len(bwd) == 2 and '"deterministic": true' in bwd[0] and '"deterministic": false' in bwd[1]
    assert fake_cudnn.builds == 3  # one forward plan serves both


# ----------------------------------------------------------------------------------------------- plans on disk


def _one_call(fe_sizes=(4, 5), dtype=torch.bfloat16):
    q, k, v = _qkv(sum(fe_sizes), dtype=dtype)
    out = _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr(list(fe_sizes)), max(fe_sizes), 0.25)
    out.float().sum().backward()
    return out.detach(), q.grad


def test_a_later_process_loads_the_plans_from_disk(fake_cudnn, monkeypatch, tmp_path):
    out, grad = _one_call()
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.disk_loads, info.disk_writes) == (2, 0, 2)
    files = sorted((tmp_path / "plans").iterdir())
    assert len(files) == 2 and all(f.name.startswith("cudnn92801-fe1.32.0-cpu-") for f in files)
    # "a new process": an empty cache, a new frontend
    later = FakeFrontend()
    monkeypatch.setattr(_cudnn_sdpa, "_frontend", lambda: later)
    _cudnn_sdpa.clear_plan_cache()
    out2, grad2 = _one_call()
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.disk_loads, info.disk_writes, later.builds, later.loads) == (0, 2, 0, 0, 2)
    assert torch.equal(out, out2) and torch.equal(grad, grad2)
    # another cuDNN: its own files, built afresh
    other = FakeFrontend(version=92900)
    monkeypatch.setattr(_cudnn_sdpa, "_frontend", lambda: other)
    _cudnn_sdpa.clear_plan_cache()
    _one_call()
    assert (other.builds, other.loads) == (2, 0) and len(list((tmp_path / "plans").iterdir())) == 4


def test_plan_time_is_counted_by_source(fake_cudnn, monkeypatch):
    """What bench_sdpa_plans.py compares: a cold process spends its plan time building, a warm one loading."""
    _one_call()
    cold = _cudnn_sdpa.plan_cache_info()
    assert cold.build_seconds > 0 and cold.load_seconds == 0.0
    later = FakeFrontend()
    monkeypatch.setattr(_cudnn_sdpa, "_frontend", lambda: later)
    _cudnn_sdpa.clear_plan_cache()
    assert _cudnn_sdpa.plan_cache_info()[-2:] == (0.0, 0.0)
    _one_call()
    warm = _cudnn_sdpa.plan_cache_info()
    assert (warm.builds, warm.disk_loads, warm.build_seconds) == (0, 2, 0.0) and warm.load_seconds > 0
    _one_call()  # hits: no plan made, no time added
    assert _cudnn_sdpa.plan_cache_info().load_seconds == warm.load_seconds


def test_untrusted_files_are_rebuilt_with_a_warning(fake_cudnn, monkeypatch, tmp_path):
    _one_call()
    files = sorted((tmp_path / "plans").iterdir())
    files[0].write_bytes(files[0].read_bytes()[:-5])  # truncated
    _cudnn_sdpa.clear_plan_cache()
    with pytest.warns(RuntimeWarning, match="ignoring SDPA plan file .*truncated"):
        _one_call()
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.disk_loads, info.disk_rejects, info.disk_writes) == (1, 1, 1, 1)
    _cudnn_sdpa.clear_plan_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _one_call()  # rewritten whole: both load
    assert _cudnn_sdpa.plan_cache_info().disk_loads == 2


def test_a_file_cudnn_refuses_is_rebuilt(fake_cudnn, monkeypatch, tmp_path):
    _one_call()
    _cudnn_sdpa.clear_plan_cache()

    def refuse(self, handle, blob):
        raise RuntimeError("CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH\ndetails")

    monkeypatch.setattr(type(fake_cudnn.pygraph()), "deserialize", refuse)
    with pytest.warns(RuntimeWarning, match=r"cuDNN refused it \(RuntimeError: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH\)"):
        _one_call()
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.disk_loads, info.disk_rejects) == (2, 0, 2)


def test_plans_that_cannot_be_serialized_still_run(fake_cudnn, monkeypatch):
    fake_cudnn.serialize_error = RuntimeError("CUDNN_STATUS_NOT_SUPPORTED: serialization")
    monkeypatch.setattr(_cudnn_sdpa, "_SERIALIZE_WARNED", False)
    with pytest.warns(RuntimeWarning, match="cannot be serialized"):
        _one_call()
    assert _cudnn_sdpa.plan_cache_info().disk_writes == 0


def test_no_plan_folder_keeps_plans_in_memory(fake_cudnn, tmp_path):
    _sdpa_plans.set_plan_dir(None)
    _one_call()
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.disk_writes) == (2, 0) and not (tmp_path / "plans").exists()


# ----------------------------------------------------------------------------------------------- routing


def test_a_graph_cudnn_cannot_build_is_named_and_auto_runs_flash(fake_cudnn, monkeypatch):
    fake_cudnn.unsupported = lambda cfg: cfg["dir"] == "fwd"
    q, k, v = (x.detach() for x in _qkv(9, dtype=torch.bfloat16))
    with pytest.raises(_cudnn_sdpa.SdpaUnsupported, match="cuDNN cannot build this SDPA graph .*NotSupported: No valid"):
        _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr([4, 5]), 5, 0.25)
    with pytest.raises(_cudnn_sdpa.SdpaUnsupported):  # remembered: not rebuilt
        _cudnn_sdpa.sdpa_varlen(q, k, v, _ptr([4, 5]), 5, 0.25)
    assert isinstance(_cudnn_sdpa.SdpaUnsupported("x"), NotImplementedError) and NotSupported
    flash = []

    def fake_flash(q, k, v, ptr, s, scale, p):
        flash.append(p)
        return v * 1

    monkeypatch.setattr(ga_module, "choose_backend", lambda *a: "cudnn")
    monkeypatch.setattr(ga_module, "_attention_torch_fused", fake_flash)
    monkeypatch.setattr(ga_module, "_FALLBACK_WARNED", set())
    with pytest.raises(NotImplementedError, match="backend='cudnn' cannot run this call: cuDNN cannot build"):
        graph_attention(q, k, v, _ptr([4, 5]), backend="cudnn")
    with pytest.warns(RuntimeWarning, match="backend='auto' runs 'flash'"):
        out = graph_attention(q, k, v, _ptr([4, 5]), backend="auto")
    assert torch.equal(out, v) and flash == [0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason
        graph_attention(q, k, v, _ptr([4, 5]), backend="auto")


def test_graph_attention_arguments_for_cudnn(fake_cudnn, monkeypatch):
    q, k, v = (x.detach() for x in _qkv(9, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="deterministic must be a bool, got int"):
        graph_attention(q, k, v, _ptr([4, 5]), deterministic=1)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
        graph_attention(q, k, v, _ptr([4, 5]), generator=3)
    monkeypatch.setattr(ga_module, "choose_backend", lambda *a: "cudnn")
    out = graph_attention(q, k, v, _ptr([4, 5]), backend="cudnn", deterministic=True, scale=1 / math.sqrt(16))
    assert out.shape == q.shape


def test_ops_pass_opcheck(fake_cudnn):
    """The two ops' schemas, fakes and autograd registration agree with their implementations."""
    q, k, v = (x.detach().bfloat16() for x in _qkv(9))
    cu = _ptr([4, 5])
    seed, offset = _cudnn_sdpa.draw_dropout_rng(torch.device("cpu"))
    args = (q.requires_grad_(), k, v, cu, seed, offset, 16, 0.25, 0.2, False)
    torch.library.opcheck(torch.ops.cudnn_gnn.sdpa_varlen_fwd.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.slow
def test_compiles_without_graph_breaks(fake_cudnn):
    """The adapter touches no data pointer outside its ops, so torch.compile(fullgraph=True) traces it."""
    q, k, v = _qkv(9, dtype=torch.bfloat16)
    ptr = _ptr([4, 5])
    fn = torch.compile(lambda q, k, v: _cudnn_sdpa.sdpa_varlen(q, k, v, ptr, 5, 0.25, dropout_p=0.2),
                       fullgraph=True, backend="aot_eager")
    out = fn(q, k, v)
    out.float().sum().backward()
    assert out.shape == q.shape and q.grad is not None and fake_cudnn.executes == 2
