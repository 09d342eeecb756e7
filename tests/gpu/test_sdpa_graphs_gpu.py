"""Our cuDNN SDPA graphs on a GPU: against float64 math (fp16/bf16, ragged batches, backward), attention dropout
(rate, seeds, the backward seeing the forward's mask, a new mask on every CUDA-graph replay), the deterministic
backward, and plans written by one process and loaded by the next.

Run: ``python -m pytest tests/gpu/test_sdpa_graphs_gpu.py -m gpu -rA``. Skips without CUDA or without cuDNN SDPA
(``cudnn_gnn.backend_info().sdpa_available``: cuDNN >= 9.28 and nvidia-cudnn-frontend >= 1.32). The first test runs
every path once in a subprocess (a crash there cannot poison the CUDA context of the others). Every test keeps its
plans in its own folder, so build counts start from nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import cudnn_gnn
from cudnn_gnn.backends import _cudnn_sdpa, _sdpa_plans
from cudnn_gnn.ops.global_attention import graph_attention

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
_INFO = cudnn_gnn.backend_info()
if not _INFO.sdpa_available:
    pytest.skip(f"needs cuDNN SDPA (cuDNN >= 9.28, nvidia-cudnn-frontend >= 1.32): {_INFO.reason}; fix: {_INFO.fix}",
                allow_module_level=True)

DEV = torch.device("cuda")
TOL = {torch.bfloat16: 2.5e-2, torch.float16: 5e-3}
SIZES = {
    "ragged": [1, 7, 33, 128, 300, 2, 64, 65],
    "molecules": [23, 25, 19, 31, 27, 24, 22, 30] * 16,
    "empty_graphs": [0, 5, 0, 0, 9, 0, 40],
}


@pytest.fixture(autouse=True)
def _own_plan_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(_sdpa_plans, "_DIR", tmp_path / "plans")
    _cudnn_sdpa.clear_plan_cache()
    yield
    _cudnn_sdpa.clear_plan_cache()


def _ptr(sizes):
    return torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device=DEV)


def _rel(a, b, floor=1e-12):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(floor))


def _case(sizes, h, d, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return [torch.randn(sum(sizes), h, d, generator=g, device=DEV, dtype=torch.float64) for _ in range(4)]


def _fwd_bwd(q, k, v, go, ptr, dtype, **kw):
    leaves = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
    out = graph_attention(*leaves, ptr, **kw)
    (out.float() * go.float()).sum().backward()
    return out, [x.grad for x in leaves]


def _subprocess(code, env=None, timeout=300):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return {**json.loads(lines[-1]), "stderr": proc.stderr[-3000:]}


def test_canary_every_path_in_a_subprocess(tmp_path):
    """First contact, isolated: forward + backward on fp16 and bf16, with empty graphs, dropout and the
    deterministic backward; the plans written to the folder."""
    res = _subprocess(
        """
        import json, torch
        from cudnn_gnn.backends import _cudnn_sdpa
        from cudnn_gnn.ops.global_attention import graph_attention
        out = {}
        for name, sizes in {"ragged": [3, 17, 1, 40], "empty": [0, 5, 0, 0, 9, 0]}.items():
            ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device="cuda")
            for dtype in (torch.float16, torch.bfloat16):
                for kw in ({}, {"dropout": 0.2, "training": True}, {"deterministic": True}):
                    q, k, v = (torch.randn(sum(sizes), 2, 32, device="cuda", dtype=dtype, requires_grad=True)
                               for _ in range(3))
                    o = graph_attention(q, k, v, ptr, backend="cudnn", **kw)
                    o.float().sum().backward()
                    torch.cuda.synchronize()
                    r = graph_attention(*(x.detach().double() for x in (q, k, v)), ptr, backend="reference")
                    key = f"{name} {dtype} {sorted(kw)}"
                    out[key] = [float((o.double() - r).norm() / r.norm()),
                                all(bool(torch.isfinite(x.grad).all()) for x in (q, k, v))]
        print(json.dumps({"runs": out, "plans": _cudnn_sdpa.plan_cache_info()._asdict()}))
        """,
        env={"CUDNN_GNN_CACHE_DIR": str(tmp_path)},
    )
    for key, (err, finite) in res["runs"].items():
        assert finite, (key, res["stderr"])
        if "dropout" not in key:
            assert err < TOL[torch.bfloat16], (key, err)
    plans = res["plans"]
    assert plans["builds"] > 0 and plans["disk_writes"] == plans["builds"], res
    assert len(list((tmp_path / "sdpa-plans").iterdir())) == plans["builds"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", list(SIZES))
@pytest.mark.parametrize(("h", "d"), [(4, 16), (8, 64), (2, 128)])
def test_matches_float64_math(dtype, case, h, d):
    sizes = SIZES[case]
    q, k, v, go = _case(sizes, h, d)
    ptr = _ptr(sizes)
    want, want_g = _fwd_bwd(q, k, v, go, ptr, torch.float64, backend="reference")
    low, low_g = _fwd_bwd(q, k, v, go, ptr, dtype, backend="reference")  # the same precision in torch
    got, got_g = _fwd_bwd(q, k, v, go, ptr, dtype, backend="cudnn", max_num_nodes=max(sizes))
    assert got.dtype == dtype and got.shape == (sum(sizes), h, d)
    floor = 1e-3 * float(want_g[2].norm())  # dq, dk vanish for one-node graphs
    for name, a, lo, b in zip(("out", "dq", "dk", "dv"), (got, *got_g), (low, *low_g), (want, *want_g)):
        assert torch.isfinite(a).all(), name
        err, base = _rel(a, b, floor), _rel(lo, b, floor)
        assert err <= max(TOL[dtype], 3 * base), f"{dtype} {name}: rel err {err:.2e} (torch {dtype}: {base:.2e})"


def test_float32_inputs_run_in_bf16_and_bad_head_sizes_are_refused():
    sizes = SIZES["ragged"]
    q, k, v, go = _case(sizes, 4, 32)
    want, _ = _fwd_bwd(q, k, v, go, _ptr(sizes), torch.float64, backend="reference")
    got, grads = _fwd_bwd(q, k, v, go, _ptr(sizes), torch.float32, backend="cudnn")
    assert got.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
    assert _rel(got, want) < TOL[torch.bfloat16]
    x = torch.randn(10, 2, 12, device=DEV, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="multiple of 8"):
        graph_attention(x, x, x, _ptr([4, 6]), backend="cudnn")
    assert graph_attention(x, x, x, _ptr([4, 6]), backend="auto").shape == x.shape  # auto: flash


# ----------------------------------------------------------------------------------------------- dropout


def _uniform_case(p, graphs=16, n=128, h=4, d=16):
    """q = 0: every softmax row is uniform (1/n), and v = 1: an output is (kept keys / n) / (1 - p)."""
    sizes = [n] * graphs
    q = torch.zeros(graphs * n, h, d, device=DEV, dtype=torch.float16)
    k = torch.randn_like(q)
    v = torch.ones_like(q)
    return q, k, v, _ptr(sizes), n


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_rate_and_seeds(p):
    q, k, v, ptr, n = _uniform_case(p)

    def run():
        return graph_attention(q, k, v, ptr, max_num_nodes=n, dropout=p, training=True, backend="cudnn")

    torch.manual_seed(11)
    a, b = run(), run()
    torch.manual_seed(11)
    c = run()
    kept = (a.double() * (1 - p)).mean().item()  # the kept fraction, over 8192 rows x 128 keys
    assert abs(kept - (1 - p)) < 0.01, kept
    assert torch.equal(a, c), "the same torch seed must draw the same mask"
    assert not torch.equal(a, b), "each call must draw a new mask"
    assert _cudnn_sdpa.plan_cache_info().builds == 1


def _bilinear_gap(out, v, dv):
    """With ``dv`` the gradient of ``sum(out * out.detach())``: out = A v with A the (masked, rescaled) attention,
    so sum(out * out) = sum(v * A^T out) = sum(v * dv) when the backward applies the forward's mask. Another mask
    A' gives sum(out' * out) instead, out' = A' v, which differs by O(1) (the dropout noise of an output is as large
    as the output itself here)."""
    lhs = out.double().square().sum()
    rhs = (v.double() * dv.double()).sum()
    return float((lhs - rhs).abs() / lhs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dropout_backward_sees_the_forward_mask(dtype):
    sizes = SIZES["ragged"]
    q, k, v, _ = (x.to(dtype) for x in _case(sizes, 4, 32))
    v.requires_grad_()
    out = graph_attention(q, k, v, _ptr(sizes), dropout=0.3, training=True, backend="cudnn")
    (dv,) = torch.autograd.grad(out, v, out.detach())
    assert _bilinear_gap(out, v, dv) < 2e-2
    nodrop = graph_attention(q, k, v, _ptr(sizes), backend="cudnn")
    assert _rel(out, nodrop) > 0.1  # the mask did act


def test_a_captured_call_draws_a_new_mask_on_every_replay():
    sizes = SIZES["molecules"]
    q, k, v, _ = (x.to(torch.bfloat16) for x in _case(sizes, 4, 32))
    v.requires_grad_()
    ptr = _ptr(sizes)
    kw = dict(max_num_nodes=max(sizes), dropout=0.3, training=True, backend="cudnn")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: the plans are built before the capture
        for _ in range(2):
            out = graph_attention(q, k, v, ptr, **kw)
            torch.autograd.grad(out, v, out.detach())
    torch.cuda.current_stream().wait_stream(side)
    builds = _cudnn_sdpa.plan_cache_info().builds
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = graph_attention(q, k, v, ptr, **kw)
        (dv,) = torch.autograd.grad(out, v, out.detach())
    outs = []
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        outs.append(out.clone())
        assert _bilinear_gap(out, v, dv) < 2e-2  # each replay's backward sees that replay's mask
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
    assert _cudnn_sdpa.plan_cache_info().builds == builds  # nothing built during capture


# ----------------------------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_deterministic_backward_repeats_bitwise(dropout):
    sizes = SIZES["ragged"]
    q, k, v, go = _case(sizes, 4, 32)
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        runs.append(_fwd_bwd(q, k, v, go, _ptr(sizes), torch.bfloat16, backend="cudnn", deterministic=True,
                             dropout=dropout, training=True))
    (o1, g1), (o2, g2) = runs
    assert torch.equal(o1, o2)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------------------------- plans


def test_plans_are_few_across_a_ragged_epoch():
    """30 batches of 32 graphs of 10-200 nodes, twice: the first epoch builds one forward plan per longest-graph
    bucket and one backward plan per (bucket, node-total bucket); the second builds nothing."""
    g = torch.Generator().manual_seed(0)
    epoch = [torch.randint(10, 201, (32,), generator=g).tolist() for _ in range(30)]
    fwd = {_cudnn_sdpa.bucket_seqlen(max(s)) for s in epoch}
    bwd = {(_cudnn_sdpa.bucket_seqlen(max(s)), _cudnn_sdpa.bucket_tokens(sum(s))) for s in epoch}
    for i in range(2):
        for sizes in epoch:
            q = torch.randn(sum(sizes), 4, 32, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            graph_attention(q, q, q, _ptr(sizes), backend="cudnn").sum().backward()
        if i == 0:
            first = _cudnn_sdpa.plan_cache_info()
    info = _cudnn_sdpa.plan_cache_info()
    assert first.builds == len(fwd) + len(bwd) and info.builds == first.builds and info.evictions == 0, (fwd, bwd, info)
    assert len(bwd) <= 8, bwd


_SECOND_PROCESS = """
import json, torch
from cudnn_gnn.backends import _cudnn_sdpa
from cudnn_gnn.ops.global_attention import graph_attention
sums = []
for dtype in (torch.float16, torch.bfloat16):
    for sizes in ([30, 2, 64, 0, 17], [25] * 12):
        ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device="cuda")
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn(sum(sizes), 4, 32, device="cuda", dtype=dtype, generator=g).requires_grad_()
                   for _ in range(3))
        torch.manual_seed(5)
        o = graph_attention(q, k, v, ptr, backend="cudnn", dropout=0.1, training=True, deterministic=True)
        o.float().square().sum().backward()
        torch.cuda.synchronize()
        sums += [float(o.double().sum()), float(q.grad.double().square().sum()), float(v.grad.double().sum())]
print(json.dumps({"plans": _cudnn_sdpa.plan_cache_info()._asdict(), "sums": sums}))
"""


def test_a_second_process_loads_the_plans_from_disk(tmp_path):
    env = {"CUDNN_GNN_CACHE_DIR": str(tmp_path)}
    first = _subprocess(_SECOND_PROCESS, env)
    second = _subprocess(_SECOND_PROCESS, env)
    p1, p2 = first["plans"], second["plans"]
    assert p1["builds"] == 8 and p1["disk_writes"] == 8 and p1["disk_loads"] == 0, first  # 2 dtypes x 2 shapes x 2
    assert p2["builds"] == 0 and p2["disk_loads"] == 8 and p2["disk_rejects"] == 0, second
    assert first["sums"] == second["sums"]  # the loaded plans compute the same bits


def test_precompile_fills_the_folder_a_run_loads_from():
    cudnn_gnn.precompile((), [torch.bfloat16], attention=[(32, 200, 4, 32, (3000, 4000))])
    built = _cudnn_sdpa.plan_cache_info().builds
    assert built >= 2
    _cudnn_sdpa.clear_plan_cache()
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        sizes = [200] + torch.randint(60, 180, (31,), generator=g).tolist()
        while not 3000 <= sum(sizes) <= 4000:
            sizes = [200] + torch.randint(60, 180, (31,), generator=g).tolist()
        q = torch.randn(sum(sizes), 4, 32, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        graph_attention(q, q, q, _ptr(sizes), max_num_nodes=200, backend="cudnn").sum().backward()
    info = _cudnn_sdpa.plan_cache_info()
    assert info.builds == 0 and info.disk_loads >= 2, info
