"""gat / gatv2 on the reference backend against the loop oracle, plus gradients, dropout and edge order."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cudnn_gnn
from cudnn_gnn import CscGraph, attention_dropout_mask, gat, gatv2, make_dropout_mask
from cudnn_gnn._philox import draw_seed
from cudnn_gnn.backends.reference import ACTIVATIONS

from ._oracle import naive_attention

OPS = {"gat": (gat, False), "gatv2": (gatv2, True)}


def _inputs(v2, ns, nd, e, heads, c, de, seed=0, dtype=torch.float64, bipartite=False):
    g = torch.Generator().manual_seed(seed)
    d = heads * c
    xs = torch.randn(ns, d, generator=g, dtype=dtype)
    xd = torch.randn(nd, d, generator=g, dtype=dtype) if bipartite else xs[:nd]
    n_w = d if v2 else 2 * d + de
    w = torch.randn(n_w, generator=g, dtype=dtype)
    edge = torch.randn(e, d if v2 else de, generator=g, dtype=dtype) if de else None
    return xs, xd, w, edge


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matches_oracle_every_activation(op, activation):
    fn, v2 = OPS[op]
    ei = torch.tensor([[0, 1, 2, 3, 4, 1, 2, 0], [1, 0, 0, 2, 2, 2, 3, 3]])
    xs, _, w, edge = _inputs(v2, 5, 5, ei.shape[1], 2, 3, 4 if not v2 else 1)
    g = CscGraph.from_edge_index(ei, num_nodes=5)
    alpha = 0.3 if activation in ("leaky_relu", "scalar") else None  # the others take no parameter
    out, att = fn(g, xs, w, heads=2, edge_attr=edge, activation=activation, activation_alpha=alpha,
                  return_attention=True, backend="reference")
    ref_out, ref_att = naive_attention(v2, ei, 5, xs, xs, w, 2, edge=edge, activation=activation, alpha=alpha)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(att, ref_att)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("with_edge", [False, True])
@pytest.mark.parametrize("heads", [1, 3])
def test_catalogue_matches_oracle(graph_case, op, concat, with_edge, heads):
    name, ei, ns, nd = graph_case
    fn, v2 = OPS[op]
    bip = ns != nd
    xs, xd, w, edge = _inputs(v2, ns, nd, ei.shape[1], heads, 2, 2 * heads if with_edge else 0, bipartite=bip)
    g = CscGraph.from_edge_index(ei, size=(ns, nd))
    x = (xs, xd) if bip else xs
    out, att = fn(g, x, w, heads=heads, edge_attr=edge, concat=concat, return_attention=True, backend="reference")
    ref_out, ref_att = naive_attention(v2, ei, nd, xs, xd, w, heads, edge=edge, concat=concat)
    assert out.shape == ((nd, heads * 2) if concat else (nd, 2))
    assert att.shape == (ei.shape[1], heads)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(att, ref_att)


@pytest.mark.parametrize("op", sorted(OPS))
def test_zero_in_degree_rows_are_zero_and_attention_sums_to_one(op):
    fn, v2 = OPS[op]
    ei = torch.tensor([[0, 1, 2, 0], [1, 1, 3, 3]])
    xs, _, w, _ = _inputs(v2, 5, 5, 4, 2, 4, 0)
    out, att = fn(CscGraph.from_edge_index(ei, num_nodes=5), xs, w, heads=2, return_attention=True)
    assert torch.equal(out[[0, 2, 4]], torch.zeros(3, 8, dtype=out.dtype))
    sums = torch.zeros(5, 2, dtype=att.dtype).index_add(0, ei[1], att)
    torch.testing.assert_close(sums[[1, 3]], torch.ones(2, 2, dtype=att.dtype))


@pytest.mark.parametrize("op", sorted(OPS))
def test_dropout_mask_semantics(op):
    fn, v2 = OPS[op]
    ei = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 0, 0, 2, 2, 2]])
    xs, _, w, _ = _inputs(v2, 5, 5, 6, 2, 3, 0)
    g = CscGraph.from_edge_index(ei, num_nodes=5)
    mask = make_dropout_mask(6, 2, 0.5, generator=torch.Generator().manual_seed(3)).double()
    out, att = fn(g, xs, w, heads=2, dropout_mask=mask, return_attention=True)
    ref_out, ref_att = naive_attention(v2, ei, 5, xs, xs, w, 2, mask=mask)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(att, ref_att)


def test_make_dropout_mask_values_and_layout():
    m = make_dropout_mask(1000, 4, 0.25, generator=torch.Generator().manual_seed(0))
    assert m.shape == (1000, 4) and m.dtype == torch.float32
    assert m.t().is_contiguous()  # head-major storage: what cuDNN reads, no copy
    vals = set(m.unique().tolist())
    assert vals <= {0.0, torch.tensor(1.0 / 0.75).item()} and len(vals) == 2
    assert abs((m == 0).float().mean().item() - 0.25) < 0.05


@pytest.mark.parametrize("op", sorted(OPS))
def test_dropout_reproducible_with_seed_and_off_in_eval(op):
    fn, v2 = OPS[op]
    ei = torch.randint(0, 20, (2, 200), generator=torch.Generator().manual_seed(0))
    xs, _, w, _ = _inputs(v2, 20, 20, 200, 2, 4, 0, dtype=torch.float32)
    g = CscGraph.from_edge_index(ei, num_nodes=20)
    torch.manual_seed(7)
    a = fn(g, xs, w, heads=2, dropout=0.5, training=True)
    torch.manual_seed(7)
    b = fn(g, xs, w, heads=2, dropout=0.5, training=True)
    c = fn(g, xs, w, heads=2, dropout=0.5, training=True)
    plain = fn(g, xs, w, heads=2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(fn(g, xs, w, heads=2, dropout=0.5, training=False), plain)
    # the drawn mask is the counter-based mask of the seed drawn from torch's generator in that state
    torch.manual_seed(7)
    seed = draw_seed(torch.device("cpu"))
    mask = attention_dropout_mask(g, 2, 0.5, seed)
    torch.testing.assert_close(fn(g, xs, w, heads=2, dropout_mask=mask), a)
    torch.testing.assert_close(fn(g, xs, w, heads=2, dropout=0.5, training=True, dropout_seed=int(seed)), a)
    torch.testing.assert_close(fn(g, xs, w, heads=2, dropout=0.5, training=True, dropout_seed=seed), a)


def test_attention_dropout_mask_rate_scale_and_coo_order():
    """The counter-based mask: factors 0 or 1 / (1 - p) at rate p (binomial bound over 40,000 draws), the same
    factors for the same seed, others for another; in COO order: a graph built from shuffled edges gives each edge
    the factor of its CSC position, so permuting the COO edges permutes the mask with them."""
    ei = torch.randint(0, 100, (2, 10_000), generator=torch.Generator().manual_seed(0))
    g = CscGraph.from_edge_index(ei, num_nodes=100)
    m = attention_dropout_mask(g, 4, 0.3, 123)
    assert m.shape == (10_000, 4) and m.dtype == torch.float32
    assert m.unique().tolist() == [0.0, pytest.approx(1 / 0.7)]
    rate = (m == 0).float().mean().item()
    assert abs(rate - 0.3) < 4 * (0.3 * 0.7 / 40_000) ** 0.5
    assert torch.equal(m, attention_dropout_mask(g, 4, 0.3, torch.tensor([123])))
    assert not torch.equal(m, attention_dropout_mask(g, 4, 0.3, 124))
    # keyed by CSC position: the factors of the sorted graph's positions, scattered to the caller's COO ids
    sorted_g = CscGraph.from_csc(g.offsets, g.indices, num_src_nodes=100)
    csc_factors = attention_dropout_mask(sorted_g, 4, 0.3, 123)
    assert torch.equal(m[g.map_csc_to_coo.long()], csc_factors)
    assert torch.equal(attention_dropout_mask(g, 4, 1.0, 5), torch.zeros(10_000, 4))
    assert torch.equal(attention_dropout_mask(g, 4, 0.0, 5), torch.ones(10_000, 4))


def test_attention_dropout_mask_heads_are_independent():
    """Four heads share one Philox evaluation (its four outputs) and the next four the next counter: the keep
    decisions of every pair of heads agree at the rate of independent draws, ``p**2 + (1 - p)**2`` (binomial bound
    over 20,000 edges), and one head's mask does not repeat another's."""
    g = CscGraph.from_edge_index(torch.randint(0, 50, (2, 20_000), generator=torch.Generator().manual_seed(1)),
                                 num_nodes=50)
    keep = attention_dropout_mask(g, 8, 0.5, 99) > 0
    bound = 4 * (0.5 * 0.5 / 20_000) ** 0.5
    for a in range(8):
        assert abs(keep[:, a].float().mean().item() - 0.5) < bound
        for b in range(a + 1, 8):
            assert abs((keep[:, a] == keep[:, b]).float().mean().item() - 0.5) < bound, (a, b)
    # heads are the same draws whatever the head count: H = 8's first three are H = 3's
    assert torch.equal(keep[:, :3], attention_dropout_mask(g, 3, 0.5, 99) > 0)


@pytest.mark.parametrize(("seed", "error", "match"), [
    (1.5, TypeError, "dropout_seed must be an int or an int64 tensor, got float"),
    (True, TypeError, "dropout_seed must be an int or an int64 tensor, got bool"),
    (-1, ValueError, r"dropout_seed must be in \[0, 2\*\*62\), got -1"),
    (2**62, ValueError, r"dropout_seed must be in \[0, 2\*\*62\)"),
    (torch.tensor([1.0]), TypeError, "got a torch.float32 tensor"),
    (torch.tensor([1, 2]), ValueError, r"dropout_seed must hold one element, got shape \(2,\)"),
])
def test_dropout_seed_refused_before_any_kernel(seed, error, match):
    g = CscGraph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(error, match=match):
        gat(g, torch.randn(2, 4), torch.randn(8), heads=1, dropout=0.5, training=True, dropout_seed=seed)
    with pytest.raises(ValueError, match="dropout_seed must be None when dropout_mask is given"):
        gat(g, torch.randn(2, 4), torch.randn(8), heads=1, dropout_mask=torch.ones(2, 1), dropout_seed=3)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("concat", [True, False])
def test_gradcheck_float64(op, concat):
    fn, v2 = OPS[op]
    ei = torch.tensor([[0, 1, 2, 3, 1, 2, 0], [1, 0, 0, 2, 2, 3, 3]])
    xs, xd, w, edge = _inputs(v2, 4, 4, 7, 2, 2, 4, bipartite=True)
    g = CscGraph.from_edge_index(ei, num_nodes=4)
    mask = make_dropout_mask(7, 2, 0.3, generator=torch.Generator().manual_seed(1)).double()
    inputs = [t.clone().requires_grad_() for t in (xs, xd, w, edge)]

    def f(a, b, c, e):
        out, att = fn(g, (a, b), c, heads=2, edge_attr=e, concat=concat, dropout_mask=mask, return_attention=True)
        return out, att

    assert torch.autograd.gradcheck(f, inputs)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 9), e=st.integers(0, 30), heads=st.sampled_from([1, 2]),
       v2=st.booleans())
def test_edge_permutation_invariance(seed, n, e, heads, v2):
    """Shuffling the COO edges (with their features and mask) leaves the output alone and permutes alpha."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=gen)
    xs, _, w, edge = _inputs(v2, n, n, e, heads, 2, 2 * heads, seed=seed)
    mask = make_dropout_mask(e, heads, 0.2, generator=gen).double()
    perm = torch.randperm(e, generator=gen)
    fn = gatv2 if v2 else gat
    out1, att1 = fn(CscGraph.from_edge_index(ei, num_nodes=n), xs, w, heads=heads, edge_attr=edge, dropout_mask=mask,
                    return_attention=True)
    out2, att2 = fn(CscGraph.from_edge_index(ei[:, perm], num_nodes=n), xs, w, heads=heads, edge_attr=edge[perm],
                    dropout_mask=mask[perm], return_attention=True)
    torch.testing.assert_close(out1, out2)
    torch.testing.assert_close(att1[perm], att2)


def test_half_precision_inputs_compute_in_float32():
    ei = torch.randint(0, 30, (2, 300), generator=torch.Generator().manual_seed(0))
    xs, _, w, _ = _inputs(False, 30, 30, 300, 4, 8, 0, dtype=torch.float32)
    g = CscGraph.from_edge_index(ei, num_nodes=30)
    ref = gat(g, xs, w, heads=4)
    out = gat(g, xs.bfloat16(), w.bfloat16(), heads=4)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


def test_compile_fullgraph_no_graph_breaks():
    torch._dynamo.reset()
    ei = torch.randint(0, 16, (2, 64), generator=torch.Generator().manual_seed(0))
    g = CscGraph.from_edge_index(ei, num_nodes=16)
    _ = g.dst_index  # built at construction; the compiled region only reads it
    xs, _, w, _ = _inputs(False, 16, 16, 64, 2, 4, 0, dtype=torch.float32)

    def f(x, w):
        return gat(g, x, w, heads=2, concat=False).relu().sum()

    from torch._dynamo.testing import CompileCounterWithBackend

    cnt = CompileCounterWithBackend("eager")
    compiled = torch.compile(f, backend=cnt, fullgraph=True)
    torch.testing.assert_close(compiled(xs, w), f(xs, w))
    assert cnt.frame_count == 1


def test_fake_kernel_shapes_for_the_cudnn_op():
    """The cuDNN op's fake (meta) implementation gives the shapes torch.compile traces with."""
    import cudnn_gnn.backends._cudnn as cu

    m = torch.device("meta")
    e, ns, nd, h, d = 7, 5, 4, 2, 6
    i32 = dict(device=m, dtype=torch.int32)
    for v2 in (False, True):
        call = cu.GatCall(
            torch.empty(nd + 1, **i32), torch.empty(e, **i32), torch.empty(e, **i32), None, None, ns,
            torch.empty(ns, d, device=m, dtype=torch.bfloat16), torch.empty(nd, d, device=m, dtype=torch.bfloat16),
            None, torch.empty(d if v2 else 2 * d, device=m, dtype=torch.bfloat16), None,
            v2, h, False, "leaky_relu", 0.2, False, True,
        )
        out, att, sm, act = torch.ops.cudnn_gnn.mha_gat_fwd(*call, True)
        assert out.shape == (nd, d // h) and out.dtype == torch.bfloat16
        assert att.shape == (h, e) and att.dtype == torch.float32 and sm.shape == (2, h, e)
        assert act.shape == ((e, d) if v2 else (0,))
        gs, gd, ge, gw = torch.ops.cudnn_gnn.mha_gat_bwd(out, None, sm, act, *call)
        assert gs.shape == (ns, d) and gs.dtype == torch.float32 and gw.shape == call.attn_weights.shape


def test_backend_selection_on_cpu():
    g = CscGraph.from_edge_index(torch.tensor([[0], [1]]))
    x, w = torch.randn(2, 4), torch.randn(8)
    with pytest.raises(RuntimeError, match="backend='cudnn' is unavailable: cuDNN's GNN kernels need CUDA tensors"):
        gat(g, x, w, backend="cudnn")
    with pytest.raises(ValueError, match="backend must be one of"):
        gat(g, x, w, backend="fast")
    torch.testing.assert_close(gat(g, x, w, backend="auto"), gat(g, x, w, backend="reference"))


def test_backend_info_explains_cpu_fallback():
    info = cudnn_gnn.backend_info()
    if not torch.cuda.is_available():
        assert info.auto_backend == "reference"
        assert "no CUDA GPU" in info.reason and info.fix
    assert "backend='auto'" in str(info)


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("with_edge", [False, True], ids=["noedge", "edge"])
def test_opcheck_and_autograd_of_the_kernel_op_on_cpu(v2, with_edge):
    """The cuDNN op's schema, fakes and autograd formula, checked through its CPU emulation (reference math)."""
    import cudnn_gnn.backends._cudnn as cu

    ei = torch.tensor([[0, 1, 2, 3, 1, 2, 0, 4], [1, 0, 0, 2, 2, 3, 3, 3]])
    g = CscGraph.from_edge_index(ei, num_nodes=5)
    xs, xd, w, edge = _inputs(v2, 5, 5, 8, 2, 3, 4 if with_edge else 0, bipartite=True)
    xs, xd, w = (t.float().requires_grad_() for t in (xs, xd, w))
    edge = None if edge is None else edge.float().requires_grad_()
    mask = make_dropout_mask(8, 2, 0.25, generator=torch.Generator().manual_seed(0)).t().contiguous()
    call = cu.GatCall(g.offsets, g.indices, g.map_csc_to_coo, None, None, 5, xs, xd, edge, w, mask,
                      v2, 2, True, "leaky_relu", 0.2, False, False)
    torch.library.opcheck(torch.ops.cudnn_gnn.mha_gat_fwd.default, (*call, True))
    # the autograd formula (our _backward -> mha_gat_bwd) agrees with differentiating the reference directly
    out, att = cu.cudnn_gat(call, True)
    ref_out, ref_att = (gatv2 if v2 else gat)(g, (xs, xd), w, heads=2, edge_attr=edge, dropout_mask=mask.t(),
                                               return_attention=True, backend="reference")
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(att.t(), ref_att)
    cot = torch.randn_like(out), torch.randn_like(ref_att)
    leaves = [t for t in (xs, xd, w, edge) if t is not None]
    got = torch.autograd.grad([out, att.t()], leaves, cot)
    want = torch.autograd.grad([ref_out, ref_att], leaves, cot)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_dropout_one_drops_every_coefficient_like_torch(op):
    """``dropout=1.0`` in training: every attention coefficient dropped (zeros, finite gradients), as torch's and
    PyG's dropout do; in eval it changes nothing."""
    fn = getattr(cudnn_gnn, op)
    g = CscGraph.from_edge_index(torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]]), num_nodes=3)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4 if op == "gatv2" else 8)
    out, att = fn(g, x, w, heads=2, dropout=1.0, training=True, return_attention=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(att, torch.zeros_like(att))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(fn(g, x, w, heads=2, dropout=1.0, training=False), fn(g, x, w, heads=2))
    assert torch.equal(cudnn_gnn.make_dropout_mask(5, 2, 1.0), torch.zeros(5, 2))
