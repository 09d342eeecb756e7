"""CPU tests of :func:`cudnn_gnn.graph_attention` and the cuDNN SDPA adapter (with a fake kernel)."""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch

from cudnn_gnn.backends import _cudnn_sdpa
from cudnn_gnn.ops.global_attention import graph_attention

ga_module = importlib.import_module("cudnn_gnn.ops.global_attention")

# A labelled catalogue of batches, as node counts per graph (0 = an empty graph: a repeated ptr value).
BATCHES = {
    "one_graph": [7],
    "ragged": [3, 1, 6, 2],
    "single_nodes": [1, 1, 1],
    "empty_graphs": [0, 4, 0, 0, 3, 0],
    "one_big_many_small": [12, 1, 2, 1],
}


def _ptr(sizes: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.long)


def _qkv(n: int, h: int = 2, d: int = 8, dtype: torch.dtype = torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, h, d, generator=g, dtype=dtype) for _ in range(3))


def _dense_per_graph(q, k, v, sizes, scale=None):
    """The oracle: plain softmax attention, one graph at a time."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    outs, start = [], 0
    for n in sizes:
        qs, ks, vs = (x[start : start + n].transpose(0, 1) for x in (q, k, v))  # [H, n, D]
        attn = torch.softmax(qs @ ks.transpose(-1, -2) * scale, dim=-1)
        outs.append((attn @ vs).transpose(0, 1))
        start += n
    return torch.cat(outs) if outs else q.new_zeros(0, *q.shape[1:])


@pytest.mark.parametrize("name", list(BATCHES))
def test_reference_matches_per_graph_softmax(name):
    sizes = BATCHES[name]
    q, k, v = _qkv(sum(sizes))
    out = graph_attention(q, k, v, _ptr(sizes), backend="reference", validate=True)
    torch.testing.assert_close(out, _dense_per_graph(q, k, v, sizes), rtol=1e-12, atol=1e-12)
    assert out.dtype == torch.float64 and out.shape == q.shape


def test_custom_scale_and_value_width():
    sizes = [3, 5]
    q, k, _ = _qkv(8)
    v = torch.randn(8, 2, 5, dtype=torch.float64)
    out = graph_attention(q, k, v, _ptr(sizes), scale=0.3)
    torch.testing.assert_close(out, _dense_per_graph(q, k, v, sizes, scale=0.3))


@pytest.mark.parametrize("name", [pytest.param("ragged", marks=pytest.mark.slow), "empty_graphs"])
def test_gradcheck_reference(name):
    sizes = BATCHES[name]
    q, k, v = (x.requires_grad_() for x in _qkv(sum(sizes), h=2, d=3))
    ptr = _ptr(sizes)
    assert torch.autograd.gradcheck(lambda a, b, c: graph_attention(a, b, c, ptr, max_num_nodes=max(sizes)), (q, k, v))


def test_gradients_match_per_graph():
    sizes = BATCHES["empty_graphs"]
    q, k, v = (x.requires_grad_() for x in _qkv(sum(sizes)))
    w = torch.randn(sum(sizes), 2, 8, dtype=torch.float64)
    got = torch.autograd.grad((graph_attention(q, k, v, _ptr(sizes)) * w).sum(), (q, k, v))
    want = torch.autograd.grad((_dense_per_graph(q, k, v, sizes) * w).sum(), (q, k, v))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_batch_equals_ptr(index_dtype):
    sizes = BATCHES["empty_graphs"]
    q, k, v = _qkv(sum(sizes))
    ptr = _ptr(sizes).to(index_dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(index_dtype)
    want = graph_attention(q, k, v, ptr)
    torch.testing.assert_close(graph_attention(q, k, v, batch=batch), want, rtol=0, atol=0)
    torch.testing.assert_close(graph_attention(q, k, v, batch=batch, num_graphs=len(sizes)), want, rtol=0, atol=0)
    torch.testing.assert_close(graph_attention(q, k, v, batch=batch, max_num_nodes=16), want)


def test_no_ptr_means_one_graph():
    q, k, v = _qkv(6)
    torch.testing.assert_close(graph_attention(q, k, v), _dense_per_graph(q, k, v, [6]))


def test_empty_input_keeps_autograd():
    q, k, v = (x.requires_grad_() for x in _qkv(0))
    out = graph_attention(q, k, v, torch.zeros(1, dtype=torch.long))
    assert out.shape == (0, 2, 8)
    out.sum().backward()
    assert v.grad is not None and v.grad.shape == v.shape


def test_non_contiguous_inputs():
    sizes = [4, 3]
    qkv = torch.randn(7, 3, 2, 8, dtype=torch.float64)
    q, k, v = qkv.unbind(1)
    assert not q.is_contiguous()
    torch.testing.assert_close(graph_attention(q, k, v, _ptr(sizes)), _dense_per_graph(q, k, v, sizes))


def test_dropout_reproducible_with_seed():
    sizes = BATCHES["ragged"]
    q, k, v = _qkv(sum(sizes))
    ptr = _ptr(sizes)
    torch.manual_seed(7)
    a = graph_attention(q, k, v, ptr, dropout=0.5, training=True)
    torch.manual_seed(7)
    b = graph_attention(q, k, v, ptr, dropout=0.5, training=True)
    torch.manual_seed(8)
    c = graph_attention(q, k, v, ptr, dropout=0.5, training=True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c)
    # Not training: dropout is off.
    torch.testing.assert_close(graph_attention(q, k, v, ptr, dropout=0.5), _dense_per_graph(q, k, v, sizes))


@pytest.mark.slow
def test_dropout_is_unbiased_in_expectation():
    sizes = [5]
    q, k, v = _qkv(5)
    torch.manual_seed(0)
    mean = torch.stack([graph_attention(q, k, v, _ptr(sizes), dropout=0.3, training=True) for _ in range(1500)]).mean(0)
    torch.testing.assert_close(mean, _dense_per_graph(q, k, v, sizes), rtol=0, atol=0.1)


# ----------------------------------------------------------------------------------------------- errors


def _err(exc, match, **overrides):
    q, k, v = _qkv(5)
    args = {"q": q, "k": k, "v": v, "ptr": _ptr([2, 3])}
    args.update(overrides)
    with pytest.raises(exc, match=match):
        graph_attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("ptr"), **args)


def test_errors_name_the_argument():
    q, k, v = _qkv(5)
    _err(TypeError, "^q must be a torch.Tensor", q=q.tolist())
    _err(TypeError, "^q must have a floating dtype", q=q.long())
    _err(ValueError, r"^q must have shape \[N, H, D\]", q=q[:, 0])
    _err(ValueError, "^k must have shape", k=k[:4])
    _err(ValueError, "^v must have shape", v=v[:, :1])
    _err(TypeError, "^k must have q's dtype", k=k.float())
    _err(TypeError, "^ptr must have dtype int32 or int64", ptr=torch.tensor([0.0, 5.0]))
    _err(ValueError, r"^ptr must have shape \[B\+1\]", ptr=torch.tensor([[0, 5]]))
    _err(ValueError, "^ptr must have num_graphs", num_graphs=3)
    _err(ValueError, "^ptr and batch must not both be given", batch=torch.zeros(5, dtype=torch.long))
    _err(ValueError, r"^batch must have shape \[N\]", ptr=None, batch=torch.zeros(4, dtype=torch.long))
    _err(TypeError, "^batch must have dtype", ptr=None, batch=torch.zeros(5))
    _err(ValueError, r"^dropout must be in \[0, 1\]", dropout=1.5)
    _err(TypeError, "^training must be a bool", training=1)
    _err(TypeError, "^scale must be a float", scale="x")
    _err(TypeError, "^max_num_nodes must be an int", max_num_nodes=2.0)
    _err(ValueError, "^backend must be one of", backend="triton")
    _err(RuntimeError, "backend='cudnn' needs CUDA tensors", backend="cudnn")
    _err(RuntimeError, "backend='flash' needs CUDA tensors", backend="flash")


def test_bad_ptr_and_batch_are_refused_by_default():
    """Without validate=: an unsorted batch (PyG's layout broken), a ptr that does not cover the nodes, and a
    max_num_nodes below the largest graph raise, checked in the sync the call makes anyway (or free on CPU)."""
    _err(ValueError, "^batch must be sorted", ptr=None, batch=torch.tensor([0, 1, 0, 1, 1]))
    _err(ValueError, "^batch must be sorted", ptr=None, batch=torch.tensor([0, 1, 0, 1, 1]), num_graphs=2)
    _err(ValueError, "^batch must be < num_graphs", ptr=None, batch=torch.tensor([0, 0, 1, 1, 2]), num_graphs=2)
    _err(ValueError, "^ptr must start at 0, never decrease and end at N", ptr=torch.tensor([0, 3, 2, 5]))
    _err(ValueError, "^ptr must start at 0, never decrease and end at N", ptr=torch.tensor([1, 2, 5]))
    _err(ValueError, "^ptr must start at 0, never decrease and end at N", ptr=torch.tensor([0, 2, 4]),
         max_num_nodes=3)
    _err(ValueError, "^max_num_nodes must bound", max_num_nodes=2)


def test_a_bad_batch_without_a_sync_gives_nan_not_wrong_numbers(monkeypatch):
    """Where a host sync is costly (CUDA) and the caller passed max_num_nodes to avoid one, the checks run on the
    device: a bad batch gets NaN outputs; a good one is untouched; validate=False trusts the caller."""
    monkeypatch.setattr(ga_module, "_sync_is_costly", lambda device: True)
    q = torch.randn(5, 2, 8)
    good = graph_attention(q, q, q, torch.tensor([0, 2, 5]), max_num_nodes=3, backend="reference")
    assert torch.isfinite(good).all()
    torch.testing.assert_close(good, graph_attention(q, q, q, torch.tensor([0, 2, 5]), backend="reference"))
    for kw in (dict(ptr=torch.tensor([0, 3, 2, 5]), max_num_nodes=3),
               dict(ptr=None, batch=torch.tensor([0, 1, 0, 1, 1]), num_graphs=2, max_num_nodes=3),
               dict(ptr=torch.tensor([0, 2, 5]), max_num_nodes=2)):
        p = kw.pop("ptr")
        assert torch.isnan(graph_attention(q, q, q, p, backend="reference", **kw)).all()
    trusted = graph_attention(q, q, q, torch.tensor([0, 2, 5]), max_num_nodes=3, backend="reference", validate=False)
    torch.testing.assert_close(trusted, good)


def test_value_checks_behind_validate():
    _err(ValueError, "^ptr must start at 0, never decrease and end at N", ptr=torch.tensor([0, 3, 2, 5]), validate=True)
    _err(ValueError, "^ptr must start at 0, never decrease and end at N", ptr=torch.tensor([0, 2, 4]), validate=True)
    _err(ValueError, "^max_num_nodes must bound", max_num_nodes=2, validate=True)
    _err(ValueError, "^batch must be sorted", ptr=None, batch=torch.tensor([0, 1, 0, 1, 1]), validate=True)
    _err(ValueError, "^batch must be < num_graphs", ptr=None, batch=torch.tensor([0, 0, 1, 1, 2]), num_graphs=2, validate=True)
    _err(ValueError, "^ptr must end at N", ptr=torch.tensor([0]))


# ----------------------------------------------------------------------------------------------- backend choice


class _Info:
    def __init__(self, sdpa: bool):
        self.sdpa_available = sdpa
        self.reason = None if sdpa else "the loaded cuDNN is 9.19"
        self.fix = None if sdpa else "LD_PRELOAD a cuDNN >= 9.28"


@pytest.mark.parametrize(
    ("backend", "sdpa", "precompiled", "d", "p", "want"),
    [
        ("auto", True, True, 16, 0.0, "cudnn"),
        ("auto", True, False, 16, 0.0, "flash"),  # a cuDNN without precompiled engines: SDPA would break GAT (H200)
        ("auto", False, True, 16, 0.0, "flash"),
        ("auto", True, True, 12, 0.0, "flash"),  # head size not a multiple of 8
        ("auto", True, True, 16, 0.1, "cudnn"),  # training dropout runs in cuDNN's kernel
        ("auto", True, True, 16, 1.0, "flash"),  # dropout=1: cuDNN's 1 / (1 - p) cannot express it
        ("cudnn", True, False, 16, 0.0, "cudnn"),  # explicit: the user's call (the first SDPA call warns)
        ("flash", True, True, 16, 0.0, "flash"),
        ("reference", True, True, 16, 0.0, "reference"),
    ],
)
def test_resolution_on_cuda(monkeypatch, backend, sdpa, precompiled, d, p, want):
    monkeypatch.setattr(ga_module, "backend_info", lambda: _Info(sdpa))
    monkeypatch.setattr(ga_module, "_precompiled_engines_everywhere", lambda: precompiled)
    assert ga_module.choose_backend(backend, torch.device("cuda"), d, d, p) == want


def test_auto_judges_every_mapped_cudnn_once(monkeypatch, tmp_path):
    """``auto`` takes cuDNN SDPA only where the cuDNN in use holds the precompiled engines: the directories of
    a mapped ``libcudnn_graph``, else of every mapped ``libcudnn*`` (a complete wheel and a partial 9.28 shim next
    to it: no); nothing mapped: no, and asked again; once judged, kept (the maps are not reread per call)."""
    from cudnn_gnn.backends import info as backends

    full, partial = tmp_path / "torch_wheel", tmp_path / "cudnn928"
    for d, names in ((full, backends.CUDNN_SUBLIBRARIES), (partial, ("libcudnn_graph", "libcudnn_ext"))):
        d.mkdir()
        for name in ("libcudnn", *names):
            (d / f"{name}.so.9").write_bytes(b"")
    assert backends.precompiled_engines_everywhere((str(full / "libcudnn.so.9"), str(full / "libcudnn_graph.so.9")))
    assert not backends.precompiled_engines_everywhere((str(full / "libcudnn.so.9"), str(partial / "libcudnn.so.9")))
    assert not backends.precompiled_engines_everywhere(())
    # the graph library in use decides: the partial directory's shim alone does not (torch maps its own shim too)
    assert backends.precompiled_engines_everywhere((str(partial / "libcudnn.so.9"), str(full / "libcudnn_graph.so.9")))
    assert not backends.precompiled_engines_everywhere((str(full / "libcudnn.so.9"), str(partial / "libcudnn_graph.so.9")))
    reads: list[int] = []
    mapped: tuple[str, ...] = ()

    def fake_maps() -> tuple[str, ...]:
        reads.append(1)
        return mapped

    monkeypatch.setattr(backends, "mapped_cudnn_libraries", fake_maps)
    monkeypatch.setattr(ga_module, "_PRECOMPILED_EVERYWHERE", None)
    monkeypatch.setattr(ga_module, "backend_info", lambda: _Info(True))
    assert ga_module.choose_backend("auto", torch.device("cuda"), 16, 16, 0.0) == "flash"  # nothing mapped yet
    mapped = (str(full / "libcudnn.so.9"),)
    assert ga_module.choose_backend("auto", torch.device("cuda"), 16, 16, 0.0) == "cudnn"
    mapped = (str(partial / "libcudnn.so.9"),)
    assert ga_module.choose_backend("auto", torch.device("cuda"), 16, 16, 0.0) == "cudnn"  # judged once, kept
    assert len(reads) == 2
    monkeypatch.setattr(ga_module, "_PRECOMPILED_EVERYWHERE", None)
    assert ga_module.choose_backend("auto", torch.device("cuda"), 16, 16, 0.0) == "flash"


def test_explicit_cudnn_refusals(monkeypatch):
    monkeypatch.setattr(ga_module, "backend_info", lambda: _Info(False))
    with pytest.raises(RuntimeError, match="backend='cudnn' is unavailable: the loaded cuDNN is 9.19. Fix: LD_PRELOAD"):
        ga_module.choose_backend("cudnn", torch.device("cuda"), 16, 16, 0.0)
    monkeypatch.setattr(ga_module, "backend_info", lambda: _Info(True))
    assert ga_module.choose_backend("cudnn", torch.device("cuda"), 16, 16, 0.2) == "cudnn"
    with pytest.raises(NotImplementedError, match="dropout=1 drops every coefficient"):
        ga_module.choose_backend("cudnn", torch.device("cuda"), 16, 16, 1.0)
    with pytest.raises(NotImplementedError, match="multiple of 8"):
        ga_module.choose_backend("cudnn", torch.device("cuda"), 20, 20, 0.0)


def test_cpu_auto_is_reference():
    assert ga_module.choose_backend("auto", torch.device("cpu"), 16, 16, 0.0) == "reference"


# ----------------------------------------------------------------------------------------------- cuDNN adapter
# (the adapter with a fake frontend: tests/ops/test_cudnn_sdpa.py)


def test_supports():
    assert _cudnn_sdpa.supports(64, 64) is None
    assert "multiple of 8" in _cudnn_sdpa.supports(12, 12)
    assert "differs" in _cudnn_sdpa.supports(16, 8)


def test_gat_failure_after_cudnn_sdpa_names_the_cause_and_the_fix(monkeypatch):
    """The H200 failure mode of cuDNN GAT after cuDNN SDPA gets its known cause and fix appended; other
    errors, and the same status without cuDNN SDPA in the process, pass through unchanged."""
    from cudnn_gnn.backends import _cudnn, _cudnn_sdpa

    status = RuntimeError("cudnnGnnMhaGatForward failed: CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE")
    other = RuntimeError("cudnnGnnMhaGatForward failed: CUDNN_STATUS_BAD_PARAM")
    from cudnn_gnn.backends import info as backends

    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: ())  # no incomplete cuDNN in sight
    monkeypatch.setattr(_cudnn_sdpa, "_USED", False)
    assert _cudnn.explain_failure(status) is status
    monkeypatch.setattr(_cudnn_sdpa, "_USED", True)
    assert _cudnn.explain_failure(other) is other
    explained = _cudnn.explain_failure(status)
    assert str(explained).startswith(str(status))
    assert "backend='flash'" in str(explained) and "cuDNN SDPA ran earlier" in str(explained)


def test_cudnn_sdpa_marks_the_process(monkeypatch, fake_cudnn):
    from cudnn_gnn.backends import _cudnn_sdpa
    from cudnn_gnn.backends import info as backends

    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: ())
    monkeypatch.setattr(_cudnn_sdpa, "_USED", False)
    q = torch.randn(5, 2, 8, dtype=torch.bfloat16)
    _cudnn_sdpa.sdpa_varlen(q, q, q, torch.tensor([0, 2, 5]), 3, 0.5)
    assert _cudnn_sdpa.used_in_process()


def test_cuda_kernel_wrappers_pass_results_through_and_explain_the_known_failure(monkeypatch):
    """_fwd_cuda/_bwd_cuda with a stand-in frontend (CPU tensors): results pass through (rows without edges
    zeroed), a SUBLIBRARY_UNAVAILABLE failure after cuDNN SDPA comes back explained, chained to the original."""
    from types import SimpleNamespace

    from cudnn_gnn.backends import _cudnn, _cudnn_sdpa

    offsets = torch.tensor([0, 2, 2, 3], dtype=torch.int32)  # destination 1 has no edges
    indices = torch.tensor([1, 2, 0], dtype=torch.int32)
    x = torch.randn(3, 8)
    call = _cudnn.GatCall(offsets, indices, None, None, None, 3, x, x, None, torch.randn(16), None, False, 2, True,
                          "leaky_relu", 0.2, False, False)
    out = torch.ones(3, 8)
    sm = torch.zeros(2, 2, 3)
    grads = (torch.ones(3, 8), torch.ones(3, 8), torch.empty(0), torch.ones(16))
    ok = SimpleNamespace(gnn_mha_gat_fwd=SimpleNamespace(default=lambda *a: (out, torch.empty(0), sm)),
                         gnn_mha_gat_bwd=SimpleNamespace(default=lambda *a: grads))
    monkeypatch.setattr(_cudnn, "_frontend", lambda: ok)
    got = _cudnn._fwd_cuda(*call, False)
    assert torch.equal(got[0][1], torch.zeros(8)) and torch.equal(got[0][0], torch.ones(8)) and got[2] is sm
    gs, gd, _, gw = _cudnn._bwd_cuda(torch.ones(3, 8), None, sm, torch.empty(0), *call)
    assert torch.equal(gd[1], torch.zeros(8)) and gw is grads[3]

    def fail(*a):
        raise RuntimeError("cudnnGnnMhaGatForward failed: CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE")

    bad = SimpleNamespace(gnn_mha_gat_fwd=SimpleNamespace(default=fail), gnn_mha_gat_bwd=SimpleNamespace(default=fail))
    monkeypatch.setattr(_cudnn, "_frontend", lambda: bad)
    monkeypatch.setattr(_cudnn_sdpa, "_USED", True)
    for run in (lambda: _cudnn._fwd_cuda(*call, False),
                lambda: _cudnn._bwd_cuda(torch.ones(3, 8), None, sm, torch.empty(0), *call)):
        with pytest.raises(RuntimeError, match="backend='flash'") as info:
            run()
        assert "SUBLIBRARY_UNAVAILABLE" in str(info.value.__cause__)


def _cpu_frontend(v2: bool):
    """A stand-in for the frontend's ops (``torch.ops.cudnn.gnn_mha_gat*``) that runs the CPU kernels, so the
    CUDA wrappers' bookkeeping (here: head groups) runs on CPU with the frontend's argument order."""
    from types import SimpleNamespace

    from cudnn_gnn.backends import _cudnn

    def call(offsets, indices, cmap, xs, xd, edge, w, mask, ns, heads, concat, act, alpha, rev, rmap, det):
        return _cudnn.GatCall(offsets, indices, cmap, rev, rmap, ns, xs, xd, edge, w, mask, v2, heads, concat, act,
                              alpha, det, False)

    def fwd(*a):
        out, att, sm, act = _cudnn._fwd_cpu(*call(*a[:13], *a[14:17]), a[13])
        return (out, att, sm, act) if v2 else (out, att, sm)

    def bwd(*a):
        grad_out, grad_att, offsets, indices, cmap, xs, xd, edge, w, sm = a[:10]
        rest = a[10:]
        act, rest = (rest[0], rest[1:]) if v2 else (torch.empty(0), rest)
        mask, ns, heads, concat, act_name, alpha, rev, rmap, det = rest[:9]
        c = call(offsets, indices, cmap, xs, xd, edge, w, mask, ns, heads, concat, act_name, alpha, rev, rmap, det)
        return _cudnn._bwd_cpu(grad_out, grad_att, sm, act, *c)

    return SimpleNamespace(gnn_mha_gat_fwd=SimpleNamespace(default=fwd), gnn_mha_gat_bwd=SimpleNamespace(default=bwd),
                           gnn_mha_gat_v2_fwd=SimpleNamespace(default=fwd), gnn_mha_gat_v2_bwd=SimpleNamespace(default=bwd))


def _fallback_case(v2: bool, dtype: torch.dtype, concat: bool):
    """A GatCall with edge features, a dropout mask, a destination without edges, and cotangents."""
    from cudnn_gnn.backends import _cudnn

    g = torch.Generator().manual_seed(0)
    n, e, h, c = 7, 30, 3, 5
    d = h * c
    dst = torch.sort(torch.randint(0, n - 1, (e,), generator=g)).values  # node n-1: no incoming edges
    offsets = torch.zeros(n + 1, dtype=torch.int64)
    offsets[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    indices = torch.randint(0, n, (e,), generator=g)
    x = torch.randn(n, d, generator=g).to(dtype)
    de = d if v2 else 2 * h
    edge = torch.randn(e, de, generator=g).to(dtype)
    w = torch.randn(d if v2 else 2 * d + de, generator=g).to(dtype)
    mask = (torch.rand(h, e, generator=g) > 0.3).float() / 0.7
    call = _cudnn.GatCall(offsets, indices, torch.randperm(e, generator=g), None, None, n, x, x, edge, w, mask, v2, h,
                          concat, "leaky_relu", 0.2, False, dtype == torch.bfloat16)
    grad_out = torch.randn(n, d if concat else c, generator=g).to(dtype)
    grad_att = torch.randn(h, e, generator=g)
    return call, grad_out, grad_att


def _failing_frontend(v2: bool, fail: str, calls: list[str]):
    """The CPU stand-in frontend whose ``fail`` direction raises what cuDNN 9.28.1 raised on a failed launch."""
    frontend = _cpu_frontend(v2)
    for direction in ("fwd", "bwd"):
        for name in (f"gnn_mha_gat_{direction}", f"gnn_mha_gat_v2_{direction}"):
            inner = getattr(frontend, name).default

            def run(*a, _inner=inner, _d=direction):
                calls.append(_d)
                if _d == fail:
                    raise RuntimeError(f"cudnnGnnMhaGat{'Forward' if _d == 'fwd' else 'Backward'} failed: "
                                       "CUDNN_STATUS_EXECUTION_FAILED")
                return _inner(*a)

            getattr(frontend, name).default = run
    return frontend


@pytest.mark.parametrize("fail", ["fwd", "bwd"])
@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["f64", "bf16"])
def test_a_kernel_that_fails_to_launch_falls_back_to_the_same_results(monkeypatch, fail, v2, dtype):
    """cuDNN 9.28.1's GAT kernels fail to launch for some shapes (CUDNN_STATUS_EXECUTION_FAILED, context intact):
    that call, and later calls of the same shape, run the reference math with the kernels' contract. Output,
    attention and every gradient equal a call whose kernels worked; one warning per shape; a forward fallback
    takes the backward with it (its softmax statistics are a stand-in); half inputs are computed in float32."""
    from cudnn_gnn.backends import _cudnn

    monkeypatch.setattr(_cudnn, "_LAUNCH_FAILED", set())
    call, grad_out, grad_att = _fallback_case(v2, dtype, concat=True)

    def run(frontend):
        monkeypatch.setattr(_cudnn, "_frontend", lambda: frontend)
        out, att, sm, act = _cudnn._fwd_cuda(*call, True)
        return (out, att, *_cudnn._bwd_cuda(grad_out, grad_att, sm, act, *call))

    want = run(_cpu_frontend(v2))
    calls: list[str] = []
    with pytest.warns(RuntimeWarning, match=r"failed to launch .* 3 heads x 5 channels.*reference math"):
        got = run(_failing_frontend(v2, fail, calls))
    assert calls == (["fwd"] if fail == "fwd" else ["fwd", "bwd"])
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    grad_dt = torch.float32 if dtype == torch.bfloat16 else dtype  # grad_fp32: float32 gradients for half inputs
    assert [t.dtype for t in got] == [dtype, torch.float32, grad_dt, grad_dt, grad_dt, grad_dt]
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a.float(), b.float(), **tol)
    assert (got[0][-1] == 0).all()  # the destination without edges: a zero row, as from the kernels
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning for the same shape
        again = run(_failing_frontend(v2, fail, calls))
    assert calls == ([] if fail == "fwd" else ["fwd"])  # the failing kernel is not tried again
    for a, b in zip(again, got):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_other_kernel_errors_and_a_disabled_fallback_still_raise(monkeypatch):
    from cudnn_gnn.backends import _cudnn

    monkeypatch.setattr(_cudnn, "_LAUNCH_FAILED", set())
    call, _, _ = _fallback_case(False, torch.float32, concat=False)
    frontend = _cpu_frontend(False)

    def not_supported(*a):
        raise RuntimeError("cudnnGnnMhaGatForward failed: CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT")

    frontend.gnn_mha_gat_fwd.default = not_supported
    monkeypatch.setattr(_cudnn, "_frontend", lambda: frontend)
    with pytest.raises(RuntimeError, match="SHARED_MEMORY_INSUFFICIENT"):
        _cudnn._fwd_cuda(*call, False)
    monkeypatch.setattr(_cudnn, "_frontend", lambda: _failing_frontend(False, "fwd", []))
    with warnings.catch_warnings():  # the raw failure, as the head-width probe sees it
        warnings.filterwarnings("error", "cuDNN's .* failed to launch", RuntimeWarning)
        with pytest.raises(RuntimeWarning, match="EXECUTION_FAILED"):
            _cudnn._fwd_cuda(*call, False)
    assert not _cudnn._LAUNCH_FAILED


def test_first_cudnn_sdpa_warns_where_the_cudnn_lacks_its_precompiled_engines(monkeypatch, tmp_path, fake_cudnn):
    """The H200's partial cuDNN 9.28 lacked libcudnn_engines_precompiled: the SDPA backward switched cuDNN to
    JIT-only mode and every later cuDNN GAT call failed. The first cuDNN SDPA call of such a process warns, once;
    a complete install does not."""
    from cudnn_gnn.backends import _cudnn_sdpa
    from cudnn_gnn.backends import info as backends

    partial = tmp_path / "cudnn928"
    partial.mkdir()
    for name in ("libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ext.so.9", "libcudnn_engines_runtime_compiled.so.9"):
        (partial / name).write_bytes(b"")
    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: (str(partial / "libcudnn_graph.so.9"),))
    monkeypatch.setattr(backends, "backend_info", lambda refresh=False: type("I", (), {"reason": None})())
    monkeypatch.setattr(_cudnn_sdpa, "_USED", False)
    q = torch.randn(5, 2, 8, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="lacks libcudnn_engines_precompiled.*GRAPH_JIT_ONLY"):
        _cudnn_sdpa.sdpa_varlen(q, q, q, torch.tensor([0, 2, 5]), 3, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _cudnn_sdpa.sdpa_varlen(q, q, q, torch.tensor([0, 2, 5]), 3, 0.5)  # once per process
        for name in backends.CUDNN_SUBLIBRARIES:
            (partial / f"{name}.so.9").write_bytes(b"")
        monkeypatch.setattr(_cudnn_sdpa, "_USED", False)
        _cudnn_sdpa.sdpa_varlen(q, q, q, torch.tensor([0, 2, 5]), 3, 0.5)  # complete: no warning


def test_a_deterministic_call_falls_back_under_torchs_deterministic_algorithms(monkeypatch):
    """deterministic=True promises a repeatable backward: its fallback runs with torch's deterministic algorithms
    switched on (warn_only) and leaves the global setting as it found it."""
    from cudnn_gnn.backends import _cudnn

    monkeypatch.setattr(_cudnn, "_LAUNCH_FAILED", set())
    call, grad_out, grad_att = _fallback_case(False, torch.float64, concat=True)
    call = call._replace(deterministic=True)
    seen: list[bool] = []
    fwd_cpu, bwd_cpu = _cudnn._fwd_cpu, _cudnn._bwd_cpu
    monkeypatch.setattr(_cudnn, "_fwd_cpu", lambda *a: (seen.append(torch.are_deterministic_algorithms_enabled()),
                                                          fwd_cpu(*a))[1])
    monkeypatch.setattr(_cudnn, "_bwd_cpu", lambda *a: (seen.append(torch.are_deterministic_algorithms_enabled()),
                                                          bwd_cpu(*a))[1])
    monkeypatch.setattr(_cudnn, "_frontend", lambda: _failing_frontend(False, "fwd", []))
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.warns(RuntimeWarning, match="failed to launch"):
        out, att, sm, act = _cudnn._fwd_cuda(*call, True)
    _cudnn._bwd_cuda(grad_out, grad_att, sm, act, *call)
    assert seen == [True, True] and not torch.are_deterministic_algorithms_enabled()
    seen.clear()
    monkeypatch.setattr(_cudnn, "_LAUNCH_FAILED", set())
    with pytest.warns(RuntimeWarning, match="failed to launch"):
        _cudnn._fwd_cuda(*call._replace(deterministic=False), True)
    assert seen == [False]


def test_varlen_probe_is_looked_up_once_per_device(monkeypatch):
    """The flash path's probe of torch's ``varlen_attn`` (its route and whether it takes ``scale=``) is cached per
    device: an eager layer calls it every step."""
    import inspect

    ga = importlib.import_module("cudnn_gnn.ops.global_attention")
    ga._varlen_attn.cache_clear()
    calls = []
    real = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda f: calls.append(f) or real(f))
    first = ga._varlen_attn(0)
    assert ga._varlen_attn(0) is first and ga._varlen_attn(0) is first
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        assert first == (None, False)
    else:
        assert first == (varlen_attn, "scale" in real(varlen_attn).parameters)
        assert sum(f is varlen_attn for f in calls) == 1
    ga._varlen_attn.cache_clear()
