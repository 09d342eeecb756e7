"""cuDNN backend vs the reference backend on a GPU: outputs, attention and every gradient.

Runs only where cuDNN's GNN kernels run (``cudnn_gnn.backend_info().reason is None``: CUDA, SM >= 8.0, cuDNN >= 9.28,
nvidia-cudnn-frontend >= 1.32). Low precision is judged against the float64 reference by relative norm error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest
import torch

from cudnn_gnn import CscGraph, attention_dropout_mask, gat, gatv2, make_dropout_mask
from cudnn_gnn._philox import draw_seed
from cudnn_gnn.backends.reference import ACTIVATIONS

from ._requirements import cudnn_skip_reason

pytestmark = pytest.mark.gpu


if (_reason := cudnn_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

DEV = torch.device("cuda")
OPS = {"gat": (gat, False), "gatv2": (gatv2, True)}
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


@pytest.fixture(autouse=True)
def _poison_allocator():
    """Leave NaN in the caching allocator's free blocks before each test: an output element the kernels
    forget to write then shows up as NaN instead of a lucky zero."""
    for mb in (1, 4, 16, 64, 256):
        t = torch.full((mb * 2**18,), float("nan"), device="cuda")
        del t
    yield


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    assert not torch.isnan(a).any(), "NaN: an element was left unwritten"
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _graph(n_src, n_dst, e, seed, zero_deg=True):
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, n_dst, (e,), generator=g)
    if zero_deg and n_dst > 4:
        dst = dst.clamp(min=2)  # destinations 0 and 1 have no incoming edges
    src = torch.randint(0, n_src, (e,), generator=g)
    return torch.stack([src, dst]).to(DEV)


def _assert_matches(got, ref):
    """Output, attention and every gradient of two ``_run`` results within 1e-4 relative."""
    for a, b in zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]]):
        assert _rel(a, b) < 1e-4


def _hub_graph(seed: int, n: int = 600, e: int = 12000) -> CscGraph:
    """Shuffled random edges plus a hub destination (node 5, e/4 edges) and a hub source (node 7, e/4 edges);
    nodes 0 and 1 have no incoming edges."""
    g_ = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n, (e,), generator=g_), torch.randint(2, n, (e,), generator=g_)
    dst[: e // 4], src[e // 4: e // 2] = 5, 7
    ei = torch.stack([src, dst])[:, torch.randperm(e, generator=g_)].to(DEV)
    return CscGraph.from_edge_index(ei, num_nodes=n)


def _run(fn, v2, graph, xs, xd, w, edge, heads, dtype, *, backend, bipartite, **kw):
    leaves = [t.detach().to(dtype).requires_grad_() for t in (xs, xd, w)]
    e_leaf = None if edge is None else edge.detach().to(dtype).requires_grad_()
    x = (leaves[0], leaves[1]) if bipartite else leaves[0]
    out, att = fn(graph, x, leaves[2], heads=heads, edge_attr=e_leaf, return_attention=True, backend=backend, **kw)
    gen = torch.Generator(device=out.device).manual_seed(0)  # same cotangents for every backend, by shape
    go = torch.randn(out.shape, device=out.device, generator=gen)
    ga = torch.randn(att.shape, device=att.device, generator=gen)
    ((out.float() * go).sum() + (att.float() * ga).sum()).backward()
    grads = [t.grad for t in leaves if t.grad is not None] + ([] if e_leaf is None else [e_leaf.grad])
    return out, att, grads


# Each distinct configuration costs a first-call kernel build in cuDNN, so the grid is a covering list, not a
# full product: every op x dtype x index dtype x edge features x bipartite x concat value appears at least once.
CASES = [
    # op, dtype, index dtype, edge features, bipartite, concat
    ("gat", torch.float32, torch.int32, False, False, True),
    ("gat", torch.float32, torch.int64, True, True, False),
    ("gat", torch.bfloat16, torch.int32, True, False, True),
    ("gat", torch.float16, torch.int64, False, True, True),
    ("gatv2", torch.float32, torch.int32, True, False, True),
    ("gatv2", torch.float32, torch.int64, False, True, False),
    ("gatv2", torch.bfloat16, torch.int64, False, False, False),
    ("gatv2", torch.float16, torch.int32, True, True, True),
]


@pytest.mark.parametrize("op, dtype, index_dtype, with_edge, bipartite, concat", CASES,
                         ids=[f"{c[0]}-{str(c[1])[6:]}-{str(c[2])[6:]}-{'edge' if c[3] else 'noedge'}-"
                              f"{'bip' if c[4] else 'homo'}-{'concat' if c[5] else 'mean'}" for c in CASES])
def test_cudnn_matches_reference(op, dtype, index_dtype, with_edge, bipartite, concat):
    fn, v2 = OPS[op]
    heads, c = 4, 16
    d = heads * c
    ns, nd, e = (300, 120, 2000) if bipartite else (200, 200, 2000)
    ei = _graph(ns, nd, e, seed=zlib.crc32(f"{op}-{with_edge}-{bipartite}".encode()) % 1000)
    g = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=index_dtype)
    gen = torch.Generator(device=DEV).manual_seed(1)
    xs = torch.randn(ns, d, device=DEV, generator=gen)
    xd = torch.randn(nd, d, device=DEV, generator=gen) if bipartite else xs[:nd]
    de = d if v2 else 2 * heads
    w = torch.randn(d if v2 else 2 * d + (de if with_edge else 0), device=DEV, generator=gen) * 0.3
    edge = torch.randn(e, de, device=DEV, generator=gen) if with_edge else None
    kw = dict(concat=concat, bipartite=bipartite)
    ref = _run(fn, v2, g, xs.double(), xd.double(), w.double(), None if edge is None else edge.double(), heads,
               torch.float64, backend="reference", **kw)
    got = _run(fn, v2, g, xs, xd, w, edge, heads, dtype, backend="cudnn", **kw)
    # Low precision is judged against the error of the same-precision reference path (inputs rounded to the
    # dtype, fp32 arithmetic): the rounding of the inputs alone moves some gradients by ~1% in fp16.
    same = None if dtype == torch.float32 else _run(fn, v2, g, xs, xd, w, edge, heads, dtype, backend="reference", **kw)
    assert got[0].dtype == dtype and got[1].dtype == torch.float32 and got[1].shape == (e, heads)

    def check(what, a, b, tol, lp=None):
        bound = tol if lp is None else max(tol, 3 * _rel(lp, b))
        assert _rel(a, b) < bound, f"{what}: {_rel(a, b):.2e} >= {bound:.2e}"

    tol = TOL[dtype]
    check("output", got[0], ref[0], tol, None if same is None else same[0])
    check("attention", got[1], ref[1], tol, None if same is None else same[1])
    assert len(got[2]) == len(ref[2])
    for i, (a, b) in enumerate(zip(got[2], ref[2])):
        assert a.dtype == dtype
        check(f"grad {i}", a, b, 3 * tol, None if same is None else same[2][i])
    assert torch.all(got[0][:2] == 0) if not bipartite else True  # zero in-degree rows


@pytest.mark.parametrize("op, activation", [("gat", a) for a in ACTIVATIONS] + [("gatv2", "elu"), ("gatv2", "scalar")])
def test_every_activation(op, activation):
    fn, v2 = OPS[op]
    ei = _graph(150, 150, 1500, seed=3)
    g = CscGraph.from_edge_index(ei, num_nodes=150)
    d = 64
    xs = torch.randn(150, d, device=DEV)
    w = torch.randn(d if v2 else 2 * d, device=DEV) * 0.3
    alpha = 0.7 if activation in ("leaky_relu", "scalar") else None  # ELU's alpha is fixed at 1 in cuDNN
    kw = dict(heads=4, activation=activation, activation_alpha=alpha, bipartite=False, concat=True)
    ref = _run(fn, v2, g, xs.double(), xs.double(), w.double(), None, dtype=torch.float64, backend="reference", **kw)
    got = _run(fn, v2, g, xs, xs, w, None, dtype=torch.float32, backend="cudnn", **kw)
    _assert_matches(got, ref)


@pytest.mark.parametrize("op", sorted(OPS))
def test_dropout_mask_and_drawn_dropout(op):
    fn, v2 = OPS[op]
    ei = _graph(100, 100, 1200, seed=4)
    g = CscGraph.from_edge_index(ei, num_nodes=100)
    xs = torch.randn(100, 64, device=DEV)
    w = torch.randn(64 if v2 else 128, device=DEV) * 0.3
    mask = make_dropout_mask(1200, 4, 0.4, device=DEV)
    kw = dict(heads=4, bipartite=False, concat=True, dropout_mask=mask)
    ref = _run(fn, v2, g, xs.double(), xs.double(), w.double(), None, dtype=torch.float64, backend="reference",
               **{**kw, "dropout_mask": mask.double()})
    got = _run(fn, v2, g, xs, xs, w, None, dtype=torch.float32, backend="cudnn", **kw)
    _assert_matches(got, ref)
    torch.manual_seed(11)
    a = fn(g, xs, w, heads=4, dropout=0.4, training=True, backend="cudnn")
    torch.manual_seed(11)
    b = fn(g, xs, w, heads=4, dropout=0.4, training=True, backend="cudnn")
    torch.manual_seed(11)
    m = attention_dropout_mask(g, 4, 0.4, draw_seed(torch.device(DEV)))  # the seed the call drew, its mask
    assert torch.equal(a, b)
    torch.testing.assert_close(a, fn(g, xs, w, heads=4, dropout_mask=m, backend="reference"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op, dtype", [("gat", torch.float32), ("gatv2", torch.bfloat16)], ids=["gat-fp32", "gatv2-bf16"])
def test_deterministic_backward_is_bitwise_repeatable(op, dtype):
    fn, v2 = OPS[op]
    ei = _graph(3000, 3000, 60000, seed=5)
    g = CscGraph.from_edge_index(ei, num_nodes=3000)
    xs = torch.randn(3000, 64, device=DEV)
    w = torch.randn(64 if v2 else 128, device=DEV) * 0.3
    runs = [_run(fn, v2, g, xs, xs, w, None, 4, dtype, backend="cudnn", bipartite=False, concat=True,
                 deterministic=True) for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip(runs[0][2], other[2]):
            assert torch.equal(a, b)
    assert g.has_reverse_csc


@pytest.mark.parametrize("op, grad_precision", [("gat", "fp32"), ("gat", "input"), ("gatv2", "input")])
def test_grad_precision_choices_are_correct(op, grad_precision):
    fn, v2 = OPS[op]
    ei = _graph(500, 500, 5000, seed=6)
    g = CscGraph.from_edge_index(ei, num_nodes=500)
    xs = torch.randn(500, 64, device=DEV)
    w = torch.randn(64 if v2 else 128, device=DEV) * 0.3
    kw = dict(heads=4, bipartite=False, concat=True)
    ref = _run(fn, v2, g, xs.double(), xs.double(), w.double(), None, dtype=torch.float64, backend="reference", **kw)
    got = _run(fn, v2, g, xs, xs, w, None, dtype=torch.bfloat16, backend="cudnn", grad_precision=grad_precision, **kw)
    for a, b in zip(got[2], ref[2]):
        assert _rel(a, b) < 6e-2


def test_edge_less_graph_on_cuda_gives_zeros():
    g = CscGraph.from_edge_index(torch.empty(2, 0, dtype=torch.long, device=DEV), num_nodes=5)
    x = torch.randn(5, 8, device=DEV, requires_grad=True)
    out = gat(g, x, torch.randn(16, device=DEV), heads=2, backend="cudnn")
    assert torch.equal(out, torch.zeros(5, 8, device=DEV))
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_permuted_edges_give_permuted_attention():
    ei = _graph(400, 400, 4000, seed=7)
    perm = torch.randperm(4000, device=DEV)
    xs = torch.randn(400, 64, device=DEV)
    w = torch.randn(128 + 8, device=DEV)
    edge = torch.randn(4000, 8, device=DEV)
    o1, a1 = gat(CscGraph.from_edge_index(ei, num_nodes=400), xs, w, heads=4, edge_attr=edge, return_attention=True)
    o2, a2 = gat(CscGraph.from_edge_index(ei[:, perm], num_nodes=400), xs, w, heads=4, edge_attr=edge[perm],
                 return_attention=True)
    torch.testing.assert_close(o1, o2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a1[perm], a2, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("v2", [False, True])
def test_opcheck(v2):
    from cudnn_gnn.backends import _cudnn

    ei = _graph(50, 50, 400, seed=8)
    g = CscGraph.from_edge_index(ei, num_nodes=50)
    x = torch.randn(50, 64, device=DEV, requires_grad=True)
    w = torch.randn(64 if v2 else 128, device=DEV, requires_grad=True)
    call = _cudnn.GatCall(g.offsets, g.indices, g.map_csc_to_coo, None, None, 50, x, x, None, w, None,
                          v2, 4, True, "leaky_relu", 0.2, False, False)
    torch.library.opcheck(torch.ops.cudnn_gnn.mha_gat_fwd.default, (*call, True),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.parametrize("op", sorted(OPS))
def test_compile_fullgraph_cudnn(op):
    fn, v2 = OPS[op]
    torch._dynamo.reset()
    ei = _graph(300, 300, 3000, seed=9)
    g = CscGraph.from_edge_index(ei, num_nodes=300)
    lin = torch.nn.Linear(16, 64).to(DEV)
    w = torch.randn(64 if v2 else 128, device=DEV, requires_grad=True)
    x = torch.randn(300, 16, device=DEV)

    def f(x):
        return fn(g, lin(x), w, heads=4, backend="cudnn").relu().sum()

    from torch._dynamo.testing import CompileCounterWithBackend

    cnt = CompileCounterWithBackend("inductor")
    compiled = torch.compile(f, backend=cnt, fullgraph=True)
    a = compiled(x)
    a.backward()
    gw = w.grad.clone()
    w.grad = None
    b = f(x)
    b.backward()
    torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(gw, w.grad, atol=1e-3, rtol=1e-4)
    assert cnt.frame_count == 1


PROBE = r"""
import sys, torch, cudnn_gnn
n, d, e, v2 = (int(a) for a in sys.argv[1:5])
g = cudnn_gnn.CscGraph.from_edge_index(torch.stack([torch.arange(e, device='cuda') % n,
                                                    (torch.arange(e, device='cuda') * 7 + 1) % n]), num_nodes=n)
assert g.index_dtype == torch.int32
x = torch.randn(n, d, device='cuda', dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(d if v2 else 2 * d, device='cuda', dtype=torch.bfloat16, requires_grad=True)
out = (cudnn_gnn.gatv2 if v2 else cudnn_gnn.gat)(g, x, w, heads=4, backend='cudnn')
out.float().sum().backward()
torch.cuda.synchronize()
print('OK', g.to_index_dtype(torch.int64) is not None)
"""


@pytest.mark.slow
@pytest.mark.gpu_alone
@pytest.mark.parametrize("n, d, e", [(8_500_000, 256, 1_000_000), (2_450_000, 256, 61_000_000)],
                         ids=["N*D>=2^31", "products-61M-edges"])
def test_int32_graph_that_crashed_raw_kernels_runs_promoted(n, d, e):
    """Shapes that crashed cuDNN with int32 indices (illegal address, see the device README) run: the op
    promotes to int64 before launch. In a subprocess, so a crash cannot poison this process's CUDA context."""
    free, _ = torch.cuda.mem_get_info()
    if free < 60 * 2**30:
        pytest.skip("needs ~60 GiB of free GPU memory")
    r = subprocess.run([sys.executable, "-c", PROBE, str(n), str(d), str(e), "0"], capture_output=True, text=True,
                       timeout=300, env=os.environ.copy())
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


def test_precompile_builds_what_later_calls_use():
    """After cudnn_gnn.precompile, calls with other graphs, heads and widths find their kernels (no build)."""
    import time

    import cudnn_gnn

    built = cudnn_gnn.precompile(("gat", "gatv2"), (torch.float32, torch.bfloat16))
    assert list(built) == ["gat/float32", "gat/bfloat16", "gatv2/float32", "gatv2/bfloat16"]
    ei = _graph(5000, 5000, 50000, seed=12)
    g = CscGraph.from_edge_index(ei, num_nodes=5000)
    for op, (fn, v2) in OPS.items():
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(5000, 96, device=DEV, dtype=dtype, requires_grad=True)
            w = torch.randn(96 if v2 else 192, device=DEV, dtype=dtype, requires_grad=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(g, x, w, heads=3, backend="cudnn").float().sum().backward()
            torch.cuda.synchronize()
            assert time.perf_counter() - t0 < 5.0, (op, dtype, time.perf_counter() - t0)


@pytest.mark.parametrize("max_degree", [4, 64])
def test_max_degree_rewrite_matches_the_plain_call(max_degree):
    """gat(..., max_degree=B) on cuDNN (hubs split into bounded rows, merged exactly) against the reference:
    outputs, attention and every gradient, with a hub destination and a hub source."""
    n, e = 600, 12000
    g = _hub_graph(21, n, e)
    xs = torch.randn(n, 64, device=DEV)
    w = torch.randn(128 + 8, device=DEV) * 0.3
    edge = torch.randn(e, 8, device=DEV)
    ref = _run(gat, False, g, xs.double(), xs.double(), w.double(), edge.double(), 4, torch.float64,
               backend="reference", bipartite=False, concat=True)
    got = _run(gat, False, g, xs, xs, w, edge, 4, torch.float32, backend="cudnn", bipartite=False, concat=True,
               max_degree=max_degree)
    _assert_matches(got, ref)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("bipartite", [False, True], ids=["homo", "bip"])
def test_call_without_edge_tensors_skips_the_map_and_matches(op, bipartite):
    """No edge features, mask or returned attention: the kernels run without the CSC->COO map (faster); the
    output and every gradient still match the reference, on shuffled edges with hubs and zero in-degree nodes."""
    fn, v2 = OPS[op]
    ns, nd, e = (600, 300, 8000) if bipartite else (500, 500, 8000)
    g_ = torch.Generator().manual_seed(13)
    dst = torch.multinomial(torch.arange(1, nd + 1, dtype=torch.float64).pow(-1.1), e, replacement=True, generator=g_)
    ei = torch.stack([torch.randint(0, ns, (e,), generator=g_), dst.clamp(min=2)]).to(DEV)
    g = CscGraph.from_edge_index(ei, size=(ns, nd))
    xs = torch.randn(ns, 64, device=DEV)
    xd = torch.randn(nd, 64, device=DEV) if bipartite else xs[:nd]
    w = torch.randn(64 if v2 else 128, device=DEV) * 0.3
    outs = []
    for backend, dt in (("reference", torch.float64), ("cudnn", torch.float32)):
        leaves = [t.detach().to(dt).requires_grad_() for t in (xs, xd, w)]
        x = (leaves[0], leaves[1]) if bipartite else leaves[0]
        out = fn(g, x, leaves[2], heads=4, backend=backend)
        out.backward(torch.ones_like(out) * torch.linspace(-1, 1, out.shape[1], device=DEV, dtype=dt))
        outs.append([out] + [t.grad for t in leaves if t.grad is not None])
    for a, b in zip(outs[1], outs[0]):
        assert _rel(a, b) < 1e-4


def test_auto_splits_a_hub_graph_and_matches_the_reference():
    """The default max_degree="auto" splits a graph with a node of degree > 1024 (in and out) on cuDNN and gives
    the reference's output, attention and gradients; deterministic=True splits too (and matches)."""
    from cudnn_gnn.ops.plan import AUTO_SPLIT_DEGREE

    g_ = torch.Generator().manual_seed(22)
    n, e = 3000, 20000
    src, dst = torch.randint(0, n, (e,), generator=g_), torch.randint(0, n, (e,), generator=g_)
    dst[:4000], src[4000:7000] = 11, 13
    ei = torch.stack([src, dst]).to(DEV)
    g = CscGraph.from_edge_index(ei, num_nodes=n)
    xs = torch.randn(n, 64, device=DEV)
    w = torch.randn(128, device=DEV) * 0.3
    ref = _run(gat, False, g, xs.double(), xs.double(), w.double(), None, 4, torch.float64, backend="reference",
               bipartite=False, concat=True)
    got = _run(gat, False, g, xs, xs, w, None, 4, torch.float32, backend="cudnn", bipartite=False, concat=True)
    assert g.derived_if_built(("hub_split", AUTO_SPLIT_DEGREE)) is not None
    _assert_matches(got, ref)
    g2 = CscGraph.from_edge_index(ei, num_nodes=n)
    got = _run(gat, False, g2, xs, xs, w, None, 4, torch.float32, backend="cudnn", bipartite=False, concat=True,
               deterministic=True)
    assert g2.derived_if_built(("hub_split", AUTO_SPLIT_DEGREE)) is not None
    _assert_matches(got, ref)


def test_gatv2_max_degree_rewrite_matches_the_reference():
    """gatv2(..., max_degree=B) on cuDNN (hub logits in recomputed blocks) against the reference."""
    n, e = 600, 12000
    g = _hub_graph(23, n, e)
    xs = torch.randn(n, 64, device=DEV)
    w = torch.randn(64, device=DEV) * 0.3
    edge = torch.randn(e, 64, device=DEV)
    ref = _run(gatv2, True, g, xs.double(), xs.double(), w.double(), edge.double(), 4, torch.float64,
               backend="reference", bipartite=False, concat=True)
    got = _run(gatv2, True, g, xs, xs, w, edge, 4, torch.float32, backend="cudnn", bipartite=False, concat=True,
               max_degree=64)
    assert g.derived_if_built(("hub_split", 64)) is not None
    _assert_matches(got, ref)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("h, c", [(3, 250), (2, 375), (1, 375)], ids=["3x250", "2x375", "1x375"])
def test_head_widths_that_failed_to_launch_run(op, dtype, h, c):
    """Head widths whose GAT kernels failed to launch on the H200 (3 x 250, DGL's ogbn-arxiv GAT, in backward;
    2 x 375 and 1 x 375 in forward; padding to a multiple of 4 or a power of two did not help) give the
    reference's results: on cuDNN where the kernel launches, else through the reference fallback (a warning)."""
    v2 = op == "gatv2"
    n, e = 800, 8000
    g = CscGraph.from_edge_index(_graph(n, n, e, seed=32), num_nodes=n)
    xs = torch.randn(n, h * c, device=DEV)
    w = torch.randn(h * c if v2 else 2 * h * c, device=DEV) * 0.1
    fn = OPS[op][0]
    ref = _run(fn, v2, g, xs.double(), xs.double(), w.double(), None, h, torch.float64, backend="reference",
               bipartite=False, concat=True)
    got = _run(fn, v2, g, xs, xs, w, None, h, dtype, backend="cudnn", bipartite=False, concat=True)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for a, b in zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]]):
        assert _rel(a, b) < tol


@pytest.mark.parametrize("op", sorted(OPS))
def test_deterministic_split_is_bitwise_repeatable_and_matches_the_reference(op):
    """deterministic=True with max_degree (sorted-segment merge, no atomics) on a hub graph: three runs give
    bitwise-equal outputs, attention and gradients, and they match the reference."""
    fn, v2 = OPS[op]
    n, e = 600, 12000
    g = _hub_graph(24, n, e)
    xs = torch.randn(n, 64, device=DEV)
    w = torch.randn(64 if v2 else 128, device=DEV) * 0.3
    ref = _run(fn, v2, g, xs.double(), xs.double(), w.double(), None, 4, torch.float64, backend="reference",
               bipartite=False, concat=True)
    runs = [_run(fn, v2, g, xs, xs, w, None, 4, torch.float32, backend="cudnn", bipartite=False, concat=True,
                 deterministic=True, max_degree=64) for _ in range(3)]
    assert g.derived_if_built(("hub_split", 64)) is not None
    for other in runs[1:]:
        for a, b in zip([runs[0][0], runs[0][1], *runs[0][2]], [other[0], other[1], *other[2]]):
            assert torch.equal(a, b)
    _assert_matches(runs[0], ref)


@pytest.mark.parametrize("fail", ["forward", "backward"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_launch_fallback_on_cuda_matches_the_reference(monkeypatch, fail, op, dtype):
    """A kernel that fails to launch (forced here: cuDNN's CUDNN_STATUS_EXECUTION_FAILED from the wrapper) is
    replaced by the reference math on the CUDA tensors, with edge features, returned attention and a graph with
    nodes without edges: outputs, attention and gradients match the float64 reference on the same (rounded)
    inputs, with one warning. bf16 is judged on its inputs rounded to bf16: the fallback computes in float32 and
    only rounds what it returns, so 1e-2 holds where the unrounded inputs would move the weight gradient ~4%."""
    from cudnn_gnn.backends import _cudnn

    monkeypatch.setattr(_cudnn, "_LAUNCH_FAILED", set())
    target = "_fwd_kernel" if fail == "forward" else "_bwd_kernel"

    def failing(*a, **k):
        raise RuntimeError(f"cudnnGnnMhaGat{fail.title()} failed: CUDNN_STATUS_EXECUTION_FAILED")

    monkeypatch.setattr(_cudnn, target, failing)
    fn, v2 = OPS[op]
    n, e, h = 500, 6000, 4
    g = CscGraph.from_edge_index(_graph(n, n, e, seed=41), num_nodes=n)
    xs = torch.randn(n, 64, device=DEV)
    w = torch.randn(64 if v2 else 128 + 8, device=DEV) * 0.2
    edge = torch.randn(e, 64 if v2 else 8, device=DEV)
    xs, w, edge = (t.to(dtype).double() for t in (xs, w, edge))
    ref = _run(fn, v2, g, xs, xs, w, edge, h, torch.float64, backend="reference", bipartite=False, concat=True)
    with pytest.warns(RuntimeWarning, match=f"{fail} kernel failed to launch"):
        got = _run(fn, v2, g, xs, xs, w, edge, h, dtype, backend="cudnn", bipartite=False, concat=True)
    for a, b in zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]]):
        assert a.device.type == "cuda"
        assert _rel(a, b) < (1e-5 if dtype == torch.float32 else 1e-2)


def test_a_deterministic_call_that_falls_back_repeats_bitwise(monkeypatch):
    """A deterministic=True call whose kernel fails to launch (forced) falls back to the reference math under
    torch's deterministic algorithms: three runs give bitwise-equal outputs, attention and gradients."""
    from cudnn_gnn.backends import _cudnn

    monkeypatch.setattr(_cudnn, "_LAUNCH_FAILED", set())

    def failing(*a, **k):
        raise RuntimeError("cudnnGnnMhaGatBackward failed: CUDNN_STATUS_EXECUTION_FAILED")

    monkeypatch.setattr(_cudnn, "_bwd_kernel", failing)
    n, e = 600, 12000
    g = _hub_graph(25, n, e)
    xs = torch.randn(n, 64, device=DEV)
    w = torch.randn(128, device=DEV) * 0.3
    with pytest.warns(RuntimeWarning, match="backward kernel failed to launch"):
        runs = [_run(gat, False, g, xs, xs, w, None, 4, torch.float32, backend="cudnn", bipartite=False,
                     concat=True, deterministic=True, max_degree=None) for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip([runs[0][0], runs[0][1], *runs[0][2]], [other[0], other[1], *other[2]]):
            assert torch.equal(a, b)
