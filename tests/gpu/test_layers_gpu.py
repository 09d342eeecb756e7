"""GATConv / GATv2Conv on the cuDNN backend against PyG 2.8's layers on CUDA: outputs, attention, every
gradient, low precision, determinism, compile, and a converted 3-layer GAT training on Cora.

Runs only where cuDNN's GNN kernels run (``cudnn_gnn.backend_info().reason is None``: CUDA, SM >= 8.0, cuDNN >= 9.28,
nvidia-cudnn-frontend >= 1.32). ``CUDNN_GNN_GPU_TESTS_ON_CPU=1`` dry-runs the same logic on CPU with the
reference backend (to check the tests themselves on a machine without a GPU).
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor

from cudnn_gnn import CscGraph
from cudnn_gnn.layers import GATConv, GATv2Conv, convert

from ._requirements import DRY_RUN, compiled_triton_skip_reason, cudnn_skip_reason

pytestmark = pytest.mark.gpu

if not DRY_RUN and (_reason := cudnn_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

DEV = torch.device("cpu" if DRY_RUN else "cuda")
BACKEND = "reference" if DRY_RUN else "cudnn"
PAIRS = {"gat": (pyg_nn.GATConv, GATConv), "gatv2": (pyg_nn.GATv2Conv, GATv2Conv)}
TOL32 = {"rtol": 1e-4, "atol": 1e-4}
LOW_PRECISION_REL = 3e-2  # bf16/fp16 output vs the fp32 PyG reference, relative norm error


def _rel(a: Tensor, b: Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _graph(n_src: int, n_dst: int, e: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_src, (e,), generator=g)
    dst = torch.randint(0, n_dst, (e,), generator=g).clamp(min=2)  # destinations 0, 1: no incoming edges
    ei = torch.stack([src, dst])
    ei = torch.cat([ei, ei[:, :20], torch.tensor([[3, 4, 5], [3, 4, 5]])], dim=1)  # duplicates, self-loops
    return ei[:, torch.randperm(ei.shape[1], generator=g)].to(DEV)


def _pair(kind: str, *args, **kwargs) -> tuple[torch.nn.Module, torch.nn.Module]:
    pyg_cls, ours_cls = PAIRS[kind]
    torch.manual_seed(0)
    pyg = pyg_cls(*args, **kwargs).to(DEV)
    with torch.no_grad():
        for p in pyg.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = ours_cls(*args, **kwargs, backend=BACKEND).to(DEV)
    ours.load_state_dict(pyg.state_dict(), strict=True)
    return pyg, ours


def _run(layer: torch.nn.Module, x, ei, ea, extra: dict) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    layer.zero_grad()
    leaves = {}
    if isinstance(x, Tensor):
        xs = leaves.setdefault("x", x.clone().requires_grad_())
    else:
        xs = tuple(leaves.setdefault(f"x{i}", t.clone().requires_grad_()) for i, t in enumerate(x))
    e = None if ea is None else leaves.setdefault("edge_attr", ea.clone().requires_grad_())
    out, (ei_out, alpha) = layer(xs, ei, e, **extra, return_attention_weights=True)
    g = torch.Generator(device=DEV).manual_seed(1)
    loss = (out.float() * torch.randn(out.shape, generator=g, device=DEV)).sum()
    loss = loss + (alpha.float() * torch.randn(alpha.shape, generator=g, device=DEV)).sum()
    loss.backward()
    grads = {k: t.grad for k, t in leaves.items()}
    grads.update({f"param:{k}": p.grad for k, p in layer.named_parameters() if p.grad is not None})
    return out, ei_out, alpha, grads


GRID = [  # kind, heads, concat, edge_dim, add_self_loops, bipartite
    ("gat", 1, True, None, True, False),
    ("gat", 4, True, 8, True, False),
    ("gat", 3, False, 6, False, False),
    ("gat", 2, True, 4, True, True),
    ("gatv2", 1, True, None, True, False),
    ("gatv2", 4, True, 8, True, False),
    ("gatv2", 3, False, None, False, True),
    ("gatv2", 2, True, 4, True, True),
]


@pytest.mark.parametrize("cfg", GRID, ids=lambda c: "-".join(map(str, c)))
def test_parity_with_pyg_fp32(cfg: tuple) -> None:
    kind, heads, concat, edge_dim, loops, bipartite = cfg
    n_src, n_dst = (300, 120) if bipartite else (200, 200)
    ei = _graph(n_src, n_dst, 1500, seed=heads)
    ea = None if edge_dim is None else torch.randn(ei.shape[1], edge_dim, device=DEV)
    in_ch = (16, 12) if bipartite else 16
    pyg, ours = _pair(kind, in_ch, 8, heads=heads, concat=concat, edge_dim=edge_dim, add_self_loops=loops,
                      residual=True)
    x = (torch.randn(n_src, 16, device=DEV), torch.randn(n_dst, 12, device=DEV)) if bipartite else \
        torch.randn(n_src, 16, device=DEV)
    extra = {"size": (n_src, n_dst)} if bipartite and kind == "gat" else {}
    out_p, ei_p, alpha_p, g_p = _run(pyg, x, ei, ea, extra)
    out_o, ei_o, alpha_o, g_o = _run(ours, x, ei, ea, extra)
    torch.testing.assert_close(out_o, out_p, **TOL32)
    assert torch.equal(ei_o, ei_p)
    torch.testing.assert_close(alpha_o, alpha_p, **TOL32)
    assert g_o.keys() == g_p.keys()
    for k in g_p:
        torch.testing.assert_close(g_o[k], g_p[k], **TOL32, msg=lambda m, k=k: f"grad {k}: {m}")


@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_csc_graph_and_csr_forms(kind: str) -> None:
    from torch_geometric.utils import to_torch_csr_tensor

    ei = _graph(200, 200, 1500, seed=5)
    pyg, ours = _pair(kind, 16, 8, heads=2)
    x = torch.randn(200, 16, device=DEV)
    ref = pyg(x, ei)
    torch.testing.assert_close(ours(x, CscGraph.from_edge_index(ei, num_nodes=200)), ref, **TOL32)
    adj_t = to_torch_csr_tensor(ei.flip(0), size=(200, 200))  # coalesces duplicates: compare with PyG on it
    torch.testing.assert_close(ours(x, adj_t), pyg(x, adj_t), **TOL32)


@pytest.mark.parametrize("backend", ["cudnn", "triton"])
@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_torch_sparse_adjacencies_on_cuda(kind: str, backend: str) -> None:
    """A torch sparse adj_t in each layout (CSR, CSC, coalesced COO) on CUDA against PyG on the same tensor (CSC:
    on its CSR, as PyG refuses one with self-loops): output and attention values. Malformed offsets and ids get
    the eager ValueError before any kernel (a CSR's offsets reached ``repeat_interleave``, whose CUDA kernel asserts
    on the device and ends the process's CUDA context), and the context still runs a layer afterwards."""
    if DRY_RUN:
        backend = "reference"
    elif backend == "triton" and (reason := compiled_triton_skip_reason()) is not None:
        pytest.skip(reason)
    ei = _graph(200, 200, 1500, seed=11)
    pyg, ours = _pair(kind, 16, 8, heads=2)
    ours.backend = backend
    x = torch.randn(200, 16, device=DEV)
    coo = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1], device=DEV), (200, 200)).coalesce()
    csr = coo.to_sparse_csr()
    for name, adj in {"csr": csr, "coo": coo}.items():
        out_p, (_, alpha_p) = pyg(x, adj, return_attention_weights=True)
        out_o, (_, alpha_o) = ours(x, adj, return_attention_weights=True)
        torch.testing.assert_close(out_o, out_p, **TOL32, msg=lambda m, n=name: f"{n}: {m}")
        torch.testing.assert_close(alpha_o, alpha_p, **TOL32, msg=lambda m, n=name: f"{n} attention: {m}")
    # PyG's add_self_loops refuses a CSC layout: against PyG on the CSR of the same adjacency
    torch.testing.assert_close(ours(x, coo.to_sparse_csc()), pyg(x, csr), **TOL32)
    crow = csr.crow_indices().clone()
    crow[5] = crow[-1] + 7  # offsets that rise past nnz
    bad_csr = torch.sparse_csr_tensor(crow, csr.col_indices(), csr.values(), (200, 200), check_invariants=False)
    # left uncoalesced: CUDA's coalesce() rebuilds the indices from their flattened form, each modulo its size, which
    # makes these well-formed (a tensor PyG takes too); CPU's keeps them as given
    bad_coo = torch.sparse_coo_tensor(torch.stack([coo.indices()[0], coo.indices()[1] + 150]), coo.values(),
                                      (200, 200), check_invariants=False)
    for adj in (bad_csr, bad_coo):
        with pytest.raises(ValueError, match="edge_index"):
            ours(x, adj)
    torch.testing.assert_close(ours(x, csr), pyg(x, csr), **TOL32)  # the CUDA context is intact
    if DEV.type == "cuda":
        torch.cuda.synchronize()  # a device-side assert would surface here


@pytest.mark.parametrize("loops", [False, True])
@pytest.mark.parametrize("backend", ["auto", "cudnn", "triton"])
@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_edge_index_forms_reach_the_kernels_as_plain_tensors(kind: str, backend: str, loops: bool) -> None:
    """A PyG EdgeIndex (sorted by column, unsorted, and a CscGraph built from a sorted one) on each GPU backend,
    against PyG on the plain tensor: its wrapper has no storage of its own, so a kernel given it (or its Index
    rows) failed with 'invalid python storage'. The returned edge_index is a fresh tensor each call."""
    from torch_geometric import EdgeIndex

    if DRY_RUN:
        backend = "reference"
    elif backend == "triton" and (reason := compiled_triton_skip_reason()) is not None:
        pytest.skip(reason)
    ei = _graph(200, 200, 1500, seed=7)
    pyg, ours = _pair(kind, 16, 8, heads=2, add_self_loops=loops)
    ours.backend = backend
    x = torch.randn(200, 16, device=DEV)
    order = torch.sort(ei[1], stable=True)[1]
    sorted_ei = ei[:, order]
    forms = {"unsorted": (EdgeIndex(ei, sparse_size=(200, 200)), ei),
             "sorted": (EdgeIndex(sorted_ei, sparse_size=(200, 200), sort_order="col"), sorted_ei)}
    forms["graph"] = (CscGraph.from_edge_index(forms["sorted"][0]), sorted_ei)
    for name, (f, plain_ei) in forms.items():
        out_p, (ei_p, alpha_p) = pyg(x, plain_ei, return_attention_weights=True)
        out_o, (ei_o, alpha_o) = ours(x, f, return_attention_weights=True)
        torch.testing.assert_close(out_o, out_p, **TOL32, msg=lambda m, n=name: f"{n}: {m}")
        ei_o = ei_o.as_tensor() if hasattr(ei_o, "as_tensor") else ei_o
        assert torch.equal(ei_o, torch.as_tensor(ei_p.as_tensor() if hasattr(ei_p, "as_tensor") else ei_p)), name
        torch.testing.assert_close(alpha_o, alpha_p, **TOL32)
        again = ours(x, f, return_attention_weights=True)[1][0]
        again = again.as_tensor() if hasattr(again, "as_tensor") else again
        assert again.data_ptr() != ei_o.data_ptr() or (not loops and name != "graph")  # else PyG returns the input


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_autocast_low_precision_vs_fp32_pyg(kind: str, dtype: torch.dtype) -> None:
    ei = _graph(400, 400, 4000, seed=7)
    ea = torch.randn(ei.shape[1], 8, device=DEV)
    pyg, ours = _pair(kind, 32, 16, heads=4, edge_dim=8)
    x = torch.randn(400, 32, device=DEV)
    out_p, _, alpha_p, g_p = _run(pyg, x, ei, ea, {})
    with torch.autocast(DEV.type, dtype=dtype):
        out_o, _, alpha_o, g_o = _run(ours, x, ei, ea, {})
    assert bool(torch.isfinite(out_o).all())
    assert _rel(out_o, out_p) < LOW_PRECISION_REL
    assert _rel(alpha_o, alpha_p) < LOW_PRECISION_REL
    for k in g_p:
        assert bool(torch.isfinite(g_o[k]).all()), k
        assert _rel(g_o[k], g_p[k]) < 5 * LOW_PRECISION_REL, k


@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_deterministic_backward_is_bitwise_repeatable(kind: str) -> None:
    ei = _graph(300, 300, 3000, seed=9)
    _, ours = _pair(kind, 16, 8, heads=4)
    ours.deterministic = True
    x = torch.randn(300, 16, device=DEV)
    runs = [_run(ours, x, ei, None, {})[3] for _ in range(2)]
    for k in runs[0]:
        assert torch.equal(runs[0][k], runs[1][k]), k


def test_compile_fullgraph_on_gpu() -> None:
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    ei = _graph(200, 200, 1500, seed=11)
    pyg, ours = _pair("gat", 16, 8, heads=2, edge_dim=4)
    x, ea = torch.randn(200, 16, device=DEV), torch.randn(ei.shape[1], 4, device=DEV)
    torch._dynamo.reset()
    counters.clear()
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(ours, backend=cnt, fullgraph=True)(x, ei, ea)
    assert sum(counters["graph_break"].values()) == 0
    torch.testing.assert_close(out, pyg(x, ei, ea), **TOL32)


def test_converted_three_layer_gat_trains_like_pyg_on_cora() -> None:
    try:
        from cudnn_gnn.datasets import load_planetoid
    except ImportError as e:
        pytest.skip(f"cudnn_gnn.datasets.load_planetoid is unavailable ({e})")
    data = load_planetoid("Cora")[0].to(DEV)
    torch.manual_seed(0)
    pyg_model = pyg_nn.GAT(data.num_features, 16, num_layers=3, out_channels=int(data.y.max()) + 1, heads=4,
                           dropout=0.0).to(DEV)
    ours_model = convert(pyg_model, backend=BACKEND, inplace=False)  # a copy: both train from the same weights
    curves = []
    for model in (pyg_model, ours_model):
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        losses = []
        for _ in range(200):
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            loss = torch.nn.functional.cross_entropy(out[data.train_mask], data.y[data.train_mask])
            loss.backward()
            opt.step()
            losses.append(float(loss))
        acc = float((model(data.x, data.edge_index).argmax(-1)[data.test_mask] == data.y[data.test_mask]).float().mean())
        curves.append((torch.tensor(losses), acc))
    (lp, acc_p), (lo, acc_o) = curves
    assert float(lo[-1]) < 0.5 * float(lo[0])  # it trains
    # fp32 atomics differ in summation order, so the curves drift slowly; they must stay together.
    assert float((lo - lp).abs().max()) < 2e-2, (lp[::20].tolist(), lo[::20].tolist())
    assert abs(acc_o - acc_p) < 0.02


@pytest.mark.skipif(DRY_RUN, reason="host-sync detection needs CUDA")
@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_cached_forward_backward_has_no_host_sync(kind: str) -> None:
    """On a CscGraph (ToCscGraph) a forward+backward after the first syncs nowhere. A raw edge_index costs exactly
    the value check that keeps its cached plan honest (layers/_plan_cache.py), and no other sync."""
    from cudnn_gnn import CscGraph

    ei = _graph(200, 200, 1500, seed=13)
    ea = torch.randn(ei.shape[1], 4, device=DEV)
    _, ours = _pair(kind, 16, 8, heads=2, edge_dim=4)
    x = torch.randn(200, 16, device=DEV)
    graph = CscGraph.from_edge_index(ei, num_nodes=200)
    for edge_index in (graph, ei):
        ours(x, edge_index, ea).sum().backward()  # first call converts (and may sync) once, builds kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ours(x, graph, ea).sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    from cudnn_gnn.layers import _plan_cache

    real_get = _plan_cache._CACHE.get
    checks = []

    def counted(*a):
        checks.append(1)
        torch.cuda.set_sync_debug_mode("default")  # the value check itself syncs once
        try:
            return real_get(*a)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    _plan_cache._CACHE.get = counted
    torch.cuda.set_sync_debug_mode("error")
    try:
        ours(x, ei, ea).sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        _plan_cache._CACHE.get = real_get
    assert checks == [1]
