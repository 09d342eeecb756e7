"""The Triton backend's compiled kernels against the reference backend on a GPU, at realistic sizes.

Outputs, returned attention and every gradient (a gradient through the returned attention included), GAT and
GATv2, float32 and bfloat16, int32 and int64 indices, on a power-law graph with a hub (cut into chunks) and with a
20,000-edge hub row and hub source (in one block size and in big blocks); bitwise repeats of outputs and gradients;
counter-based dropout's keep flags (the forward's equal the materialised mask; a step reading them gives the bits of
the explicit factors); head widths that are not powers of two (3 x 250, 2 x 375); head shapes of one padded tile one
after another in one process (each its own compiled variant); ``torch.compile(fullgraph=True)``;
GATv2's fused edge
projection (raw edge features and ``lin_edge_weight``) on a 1.6M-edge graph, its forward+backward peak at least one
``[E, H*C]`` buffer below the projected path's; GAT's node-score kernels under autocast at 200,000 rows, and GAT
compiled against eager; a feature tensor just under and just over 2**31 elements (int32 and int64 offsets). The
reference runs in float64; low precision is judged against the error of the same-precision reference path.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

from ..conftest import call_spec  # noqa: E402
from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from cudnn_gnn import CscGraph  # noqa: E402
from cudnn_gnn.backends import reference  # noqa: E402
from cudnn_gnn.backends import triton as tb  # noqa: E402
from cudnn_gnn.backends.triton import gat_op as triton_op  # noqa: E402
from cudnn_gnn.backends.triton import kernels as tk  # noqa: E402
from cudnn_gnn.backends.triton import packed_offsets, tuning  # noqa: E402
from cudnn_gnn.backends.triton.kernels.gat_backward import DstScoreGrad  # noqa: E402

DEV = torch.device("cuda")
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    assert not torch.isnan(a).any(), "NaN: an element was left unwritten"
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _power_law_graph(n: int, e: int, seed: int, index_dtype: torch.dtype) -> CscGraph:
    """Power-law destinations (node 0 a hub with thousands of edges), uniform sources, shuffled edge order."""
    g = torch.Generator().manual_seed(seed)
    w = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.1)
    dst = torch.multinomial(w, e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    ei = torch.stack([src, dst])[:, torch.randperm(e, generator=g)]
    return CscGraph.from_edge_index(ei.to(DEV), num_nodes=n, index_dtype=index_dtype)


def _hub_graph(n: int, background: int, hub: int, seed: int) -> CscGraph:
    """``background`` uniform edges, destination 0 with ``hub`` in-edges and source 1 with ``hub`` out-edges,
    shuffled; int32 indices."""
    g = torch.Generator().manual_seed(seed)
    rand = torch.stack([torch.randint(0, n, (background,), generator=g), torch.randint(0, n, (background,), generator=g)])
    hub_in = torch.stack([torch.randint(0, n, (hub,), generator=g), torch.zeros(hub, dtype=torch.long)])
    hub_out = torch.stack([torch.ones(hub, dtype=torch.long), torch.randint(0, n, (hub,), generator=g)])
    ei = torch.cat([rand, hub_in, hub_out], 1)
    ei = ei[:, torch.randperm(ei.shape[1], generator=g)]
    return CscGraph.from_edge_index(ei.to(DEV), num_nodes=n, index_dtype=torch.int32)


def _inputs(v2: bool, graph: CscGraph, heads: int, c: int, *, edge: bool, mask: bool, seed: int = 0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    n, e, d = graph.num_src_nodes, graph.num_edges, heads * c
    de = d if v2 else 2 * heads
    xs = torch.randn(n, d, device=DEV, generator=gen)
    w = torch.randn(d if v2 else 2 * d + (de if edge else 0), device=DEV, generator=gen) * 0.3
    ea = torch.randn(e, de, device=DEV, generator=gen) if edge else None
    m = ((torch.rand(heads, e, device=DEV, generator=gen) > 0.2).float() * 1.25).t() if mask else None
    return xs, w, ea, m


def _run(backend: str, graph, xs, w, ea, m, dtype, *, v2, heads, concat, act="leaky_relu", alpha=0.2, drop=None,
         attention=True):
    """Output, attention and gradients of one call; ``drop``: ``(p, seed)``, counter-based dropout (``m`` None);
    ``attention`` False: a training call (no attention returned, none in the loss: GAT's dense delta pass), the
    attention None."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (xs, w)]
    e_leaf = None if ea is None else ea.detach().to(dtype).requires_grad_()
    x = leaves[0]
    kw = dict(v2=v2, heads=heads, concat=concat, activation_name=act, activation_alpha=alpha)
    if drop is not None:
        kw.update(dropout=drop[0], dropout_seed=drop[1])
    if backend == "triton":
        out, att = tb.triton_gat(call_spec(graph, x, x[: graph.num_dst_nodes], leaves[1], e_leaf, m,
                                           return_attention=attention, **kw))
    else:
        out, att = reference.mha_gat(call_spec(graph, x, x[: graph.num_dst_nodes], leaves[1], e_leaf, m, **kw))
    gen = torch.Generator(device=DEV).manual_seed(0)
    loss = (out.float() * torch.randn(out.shape, device=DEV, generator=gen)).sum()
    if attention:
        loss = loss + (att.float() * torch.randn(att.shape, device=DEV, generator=gen)).sum()
    else:
        att = None
    loss.backward()
    grads = [t.grad for t in leaves] + ([] if e_leaf is None else [e_leaf.grad])
    return out, att, grads


CASES = [
    # op, dtype, index dtype, edge features, mask, concat, activation
    ("gat", torch.float32, torch.int32, True, True, True, "leaky_relu"),
    ("gat", torch.float32, torch.int64, False, False, False, "elu"),
    ("gat", torch.bfloat16, torch.int32, True, False, True, "leaky_relu"),
    ("gat", torch.bfloat16, torch.int64, True, True, False, "leaky_relu"),  # one-gather backward: float32 per-head
    ("gatv2", torch.float32, torch.int32, True, True, True, "leaky_relu"),
    ("gatv2", torch.float32, torch.int64, False, True, False, "tanh"),
    ("gatv2", torch.bfloat16, torch.int32, True, False, True, "leaky_relu"),
]


@pytest.mark.parametrize("op, dtype, index_dtype, edge, mask, concat, act", CASES,
                         ids=[f"{c[0]}-{str(c[1])[6:]}-{str(c[2])[6:]}-{'edge' if c[3] else 'noedge'}-"
                              f"{'mask' if c[4] else 'nomask'}-{'concat' if c[5] else 'mean'}-{c[6]}" for c in CASES])
def test_triton_matches_reference(op, dtype, index_dtype, edge, mask, concat, act):
    v2 = op == "gatv2"
    heads, c = 8, 32
    graph = _power_law_graph(20_000, 200_000, seed=1, index_dtype=index_dtype)
    xs, w, ea, m = _inputs(v2, graph, heads, c, edge=edge, mask=mask)
    kw = dict(v2=v2, heads=heads, concat=concat, act=act)
    ref = _run("reference", graph, xs.double(), w.double(), None if ea is None else ea.double(), m, torch.float64,
               **kw)
    got = _run("triton", graph, xs, w, ea, m, dtype, **kw)
    same = None if dtype == torch.float32 else _run("reference", graph, xs, w, ea, m, dtype, **kw)
    assert got[0].dtype == dtype and got[1].dtype == torch.float32
    names = ["output", "attention"] + [f"grad {n}" for n in ("x", "attn_weights", "edge_attr")]
    for k, (name, a, b) in enumerate(zip(names, [got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]])):
        bound = TOL[dtype] * (1 if k < 2 else 3)
        if same is not None:
            lp = [same[0], same[1], *same[2]][k]
            bound = max(bound, 3 * _rel(lp, b))
        assert _rel(a, b) < bound, f"{name}: {_rel(a, b):.2e} >= {bound:.2e}"
    # a second call gives bitwise the same output, attention and gradients (no atomics anywhere)
    again = _run("triton", graph, xs, w, ea, m, dtype, **kw)
    for a, b in zip([got[0], got[1], *got[2]], [again[0], again[1], *again[2]]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("op, dtype", [("gat", torch.float32), ("gat", torch.bfloat16), ("gatv2", torch.float32)])
def test_counter_based_dropout_compiled_matches_reference(op, dtype):
    """In-kernel dropout on the compiled kernels (Philox in PTX against :mod:`cudnn_gnn._philox` in torch): on a
    200,000-edge power-law graph with a hub, output, attention and every gradient match the float64 reference on the
    mask :func:`cudnn_gnn.attention_dropout_mask` materialises for the same seed; the attention is zero exactly where
    that mask drops, at the rate asked; bitwise repeatable; no [E, H] float tensor is read (the call holds the seed)."""
    import cudnn_gnn

    v2 = op == "gatv2"
    heads, c, p = 8, 32, 0.6
    graph = _power_law_graph(20_000, 200_000, seed=3, index_dtype=torch.int32)
    xs, w, ea, _ = _inputs(v2, graph, heads, c, edge=True, mask=False)
    seed = torch.tensor([2**40 + 17], dtype=torch.int64, device=DEV)
    kw = dict(v2=v2, heads=heads, concat=True, drop=(p, seed))
    ref = _run("reference", graph, xs.double(), w.double(), ea.double(), None, torch.float64, **kw)
    got = _run("triton", graph, xs, w, ea, None, dtype, **kw)
    # the reference in the same dtype sets the rounding a gradient through the hub carries; float32 gradients get
    # 6e-4 at least: the kernels' delta (dout . out, the output rounded once) and the reference's (a sum over the
    # row) round differently, and ds = att * (dot - delta) cancels on the hub's many small weights (edge_attr's
    # gradient measured 3.4e-4 on the H100, the float32 reference under 1e-4); a wrong mask is off by O(1)
    same = _run("reference", graph, xs, w, ea, None, dtype, **kw)
    for k, (a, b) in enumerate(zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]])):
        floor = TOL[dtype] if k < 2 else (6e-4 if dtype == torch.float32 else 3 * TOL[dtype])
        bound = max(floor, 3 * _rel([same[0], same[1], *same[2]][k], b))
        assert _rel(a, b) < bound, f"{k}: {_rel(a, b):.2e} >= {bound:.2e}"
    mask = cudnn_gnn.attention_dropout_mask(graph, heads, p, seed)
    dropped = mask == 0
    assert torch.equal(got[1][dropped], torch.zeros_like(got[1][dropped]))
    assert (got[1][~dropped] > 0).float().mean().item() > 0.999
    assert abs(dropped.float().mean().item() - p) < 0.01
    again = _run("triton", graph, xs, w, ea, None, dtype, **kw)
    assert all(torch.equal(a, b) for a, b in zip([got[0], got[1], *got[2]], [again[0], again[1], *again[2]]))


@pytest.mark.parametrize("op, gat_backward, hg", [("gat", "one_gather", None), ("gat", "one_gather", 2),
                                                  ("gat", "two_gather", 2), ("gatv2", "auto", 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_keep_flags_compiled_equal_the_mask_and_give_the_explicit_factors_bits(op, gat_backward, hg, dtype):
    """The keep flags on the compiled kernels, at size (200,000 edges, 8 heads, a hub cut into chunks): the forward
    op's ``uint8 [E, H]`` equals ``attention_dropout_mask(...) != 0`` in CSC order, with every head in one program and
    with groups of 2 (four programs' byte stores into each edge's 8 bytes); a training call, whose backward reads
    them, gives output, attention and every gradient bitwise equal to a call given the explicit factors
    ``attention_dropout_mask`` materialises (GAT's one- and two-gather backward, GATv2's)."""
    import cudnn_gnn

    v2 = op == "gatv2"
    heads, c, p = 8, 32, 0.6
    graph = _power_law_graph(20_000, 200_000, seed=3, index_dtype=torch.int32)
    xs, w, ea, _ = _inputs(v2, graph, heads, c, edge=True, mask=False)
    xs, w, ea = xs.to(dtype), w.to(dtype), ea.to(dtype)
    seed = torch.tensor([2**40 + 17], dtype=torch.int64, device=DEV)
    launch = {}
    if hg is not None:
        cfg = tuning.launch_config(xs, heads, v2, "fwd", xs)[2]
        launch = {"fwd": (cfg["BLOCK_E"], cfg["num_warps"], hg)}
    options = tb.TritonOptions(gat_backward=gat_backward, launch=launch)
    mask = cudnn_gnn.attention_dropout_mask(graph, heads, p, seed)
    spec = call_spec(graph, xs, xs, w, ea, v2=v2, heads=heads, concat=True, dropout=p, dropout_seed=seed)
    call, _ = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True, options=options)
    if hg is not None:
        assert tuning.launch_config(xs, heads, v2, "fwd", xs, call.launch)[1] == heads // hg
    flags = getattr(torch.ops.cudnn_gnn, f"triton_{op}_fwd")(*call, False, True)[-1]
    csc = mask if graph.map_csc_to_coo is None else mask[graph.map_csc_to_coo.long()]
    assert flags.dtype == torch.uint8 and torch.equal(flags, (csc != 0).to(torch.uint8))

    def step(m, drop):
        leaves = [t.detach().clone().requires_grad_() for t in (xs, w, ea)]
        out, att = tb.triton_gat(call_spec(graph, leaves[0], leaves[0], leaves[1], leaves[2], m, v2=v2, heads=heads,
                                           concat=True, return_attention=True, **drop), options=options)
        gen = torch.Generator(device=DEV).manual_seed(0)
        go = torch.randn(out.shape, device=DEV, generator=gen).to(out.dtype)
        ga = torch.randn(att.shape, device=DEV, generator=gen)
        ((out.float() * go.float()).sum() + (att * ga).sum()).backward()
        return [out, att, *(t.grad for t in leaves)]

    drawn = step(None, dict(dropout=p, dropout_seed=seed))
    given = step(mask, {})
    for k, (a, b) in enumerate(zip(drawn, given, strict=True)):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("heads, c", [(3, 250), (2, 375)])
@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_wide_heads(op, heads, c):
    """Widths that are not powers of two (padded tiles of 256 and 512 channels)."""
    v2 = op == "gatv2"
    graph = _power_law_graph(3000, 30_000, seed=2, index_dtype=torch.int32)
    xs, w, ea, m = _inputs(v2, graph, heads, c, edge=True, mask=True)
    ref = _run("reference", graph, xs.double(), w.double(), ea.double(), m, torch.float64, v2=v2, heads=heads,
               concat=True)
    got = _run("triton", graph, xs, w, ea, m, torch.float32, v2=v2, heads=heads, concat=True)
    for a, b in zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]]):
        assert _rel(a, b) < 3e-4


@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_head_shapes_of_one_tile_take_their_own_variants(op):
    """Head shapes of one padded tile whose sizes are of one integer class (1 x 7 and 1 x 6, 2 x 6 and 3 x 6) run one
    after another in one process, each against the float64 reference, with and without returned attention: each
    takes the variant compiled for its own ``heads`` and ``c`` (a launch keyed by their class alone would run the
    earlier shape's: CiteSeer's 1 x 6 layer after Cora's 1 x 7, wrong gradients)."""
    v2 = op == "gatv2"
    graph = _power_law_graph(3000, 30_000, seed=5, index_dtype=torch.int32)
    for heads, c in [(1, 7), (1, 6), (2, 6), (3, 6), (1, 7)]:
        xs, w, _, _ = _inputs(v2, graph, heads, c, edge=False, mask=False, seed=10 * heads + c)
        for attention in (False, True):
            kw = dict(v2=v2, heads=heads, concat=True, attention=attention)
            ref = _run("reference", graph, xs.double(), w.double(), None, None, torch.float64, **kw)
            got = _run("triton", graph, xs, w, None, None, torch.float32, **kw)
            pairs = [(got[0], ref[0])] + ([(got[1], ref[1])] if attention else []) + list(zip(got[2], ref[2]))
            for k, (a, b) in enumerate(pairs):
                assert _rel(a, b) < 3e-4, (heads, c, attention, k, _rel(a, b))


def test_compile_fullgraph():
    graph = _power_law_graph(2000, 20_000, seed=3, index_dtype=torch.int32)
    xs, w, ea, _ = _inputs(True, graph, 4, 16, edge=True, mask=False)
    x = xs.requires_grad_()

    def f(x, w, ea):
        out, att = tb.triton_gat(call_spec(graph, x, x, w, ea, v2=True, heads=4, concat=True, return_attention=True))
        return out.square().sum() + att.square().sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    grad = torch.autograd.grad(compiled(x, w, ea), x)[0]
    eager = torch.autograd.grad(f(x, w, ea), x)[0]
    assert _rel(grad, eager) < 1e-5


def test_reduce_overhead_on_a_graph_no_eager_call_used():
    """``mode="reduce-overhead"`` (CUDA graphs) on a ``CscGraph`` that no eager call has used: the work lists and
    the reverse CSC the first compiled call builds stay inside its CUDA graph instead of on the graph, whose next
    replay would overwrite them (``accessing tensor output of CUDAGraphs that has been overwritten``). Five steps
    match the eager layer on the same edges: outputs and every parameter's gradient."""
    from cudnn_gnn import GATConv

    edges = _power_law_graph(2000, 20_000, seed=7, index_dtype=torch.int32).edge_index()
    torch.manual_seed(0)
    conv = GATConv(32, 16, heads=4, add_self_loops=False, backend="triton").to(DEV)  # the graph itself, no loops plan
    x = torch.randn(2000, 32, device=DEV)
    grad = torch.randn(2000, 64, device=DEV)

    def step(model, graph):
        for p in model.parameters():
            p.grad = None
        out = model(x, graph)
        out.backward(grad)
        return out.detach().clone(), [p.grad.clone() for p in model.parameters()]

    want_out, want_grads = step(conv, CscGraph.from_edge_index(edges, num_nodes=2000))
    graph = CscGraph.from_edge_index(edges, num_nodes=2000)
    torch._dynamo.reset()
    compiled = torch.compile(conv, mode="reduce-overhead")
    for _ in range(5):
        torch.compiler.cudagraph_mark_step_begin()
        out, grads = step(compiled, graph)
        assert _rel(out, want_out) < 1e-5
        for g, w in zip(grads, want_grads, strict=True):
            assert _rel(g, w) < 1e-4
    torch._dynamo.reset()


def test_compile_fullgraph_gat_against_eager():
    """GAT under ``torch.compile(fullgraph=True)`` (its autograd Function and ops traced, the node scores computed
    inside the forward op) against the eager call: outputs and gradients agree to float32 rounding."""
    graph = _power_law_graph(3000, 30_000, seed=4, index_dtype=torch.int32)
    xs, w, _, _ = _inputs(False, graph, 8, 32, edge=False, mask=False)
    x = xs.requires_grad_()
    w = w.requires_grad_()

    def f(x, w):
        out, _ = tb.triton_gat(call_spec(graph, x, x, w, v2=False, heads=8, concat=True))
        return out.square().sum()

    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(f, fullgraph=True)(x, w), (x, w))
    want = torch.autograd.grad(f(x, w), (x, w))
    for a, b in zip(got, want, strict=True):
        assert _rel(a, b) < 1e-5


@pytest.mark.parametrize("fold", ["kernel", "gemm"])
@pytest.mark.parametrize("bipartite", [False, True], ids=["homogeneous", "bipartite"])
@pytest.mark.parametrize("heads, c", [(8, 32), (4, 128), (3, 250)])
def test_node_scores_under_autocast_at_size(heads, c, bipartite, fold):
    """GAT's node scores on the score kernel (the op's forward), 200,000 bfloat16 source rows (and 120,000
    destination rows of their own where bipartite) under ``torch.autocast``: float32 scores within float32
    rounding of the float64 sums; their gradients folded into ``d_x`` (added in place to the attention's share,
    zeros here; stored in bfloat16, so within its rounding) and the head vectors' gradient: by the kernel
    (``_fold_node_scores``: float32 sums of the bfloat16 rows, per-program partials; the destination gradients as
    the one-gather backward's destination sum leaves them, every row whole in one block) within float32 rounding, by
    the GEMMs (``_fold_node_scores_gemm``: the score gradients rounded to bfloat16) within bfloat16 rounding;
    bitwise repeats."""
    n, nd, d = 200_000, 120_000 if bipartite else 200_000, heads * c
    gen = torch.Generator(device=DEV).manual_seed(7)
    x = torch.randn(n, d, device=DEV, generator=gen).to(torch.bfloat16).requires_grad_()
    xd = torch.randn(nd, d, device=DEV, generator=gen).to(torch.bfloat16).requires_grad_() if bipartite else None
    w = (torch.randn(2 * d, device=DEV, generator=gen) * 0.3).requires_grad_()
    gs, gd = torch.randn(n, heads, device=DEV, generator=gen), torch.randn(nd, heads, device=DEV, generator=gen)
    graph = CscGraph.from_edge_index(torch.empty(2, 0, dtype=torch.long, device=DEV), size=(n, nd))
    x0 = x.detach()
    call, _ = tb.build_call(call_spec(graph, x0, x0 if xd is None else xd.detach(), w.detach(), v2=False, heads=heads,
                                      concat=True), tb.kernel_graph(graph), needs_grad=True)
    assert (call.x_dst is None) == (xd is None)
    dst_whole = DstScoreGrad(gd, gd, torch.arange(nd + 1, device=DEV), 256)

    def run():
        with torch.autocast("cuda", torch.bfloat16):
            s, t = tk.launch_node_scores(x0, None if xd is None else xd.detach(), w.detach(), heads)
        if fold == "kernel":  # gd as the destination sum leaves it: one edge a row, every row whole in its block
            d_x, d_xd, d_w = triton_op._fold_node_scores(call, torch.zeros_like(x), gs, dst_whole)
        else:
            d_x, d_xd, d_w = triton_op._fold_node_scores_gemm(call, torch.zeros_like(x), gs, gd)
        return (s, t, d_x, d_w) if xd is None else (s, t, d_x, d_xd, d_w)

    got = run()
    x64 = x.detach().double().view(n, heads, c)
    xd64 = x64 if xd is None else xd.detach().double().view(nd, heads, c)
    w64 = w.detach().double().view(2, heads, c)
    want_s, want_t = (x64 * w64[0]).sum(-1), (xd64 * w64[1]).sum(-1)
    src_part = gs.double()[:, :, None] * w64[0]
    dst_part = gd.double()[:, :, None] * w64[1]
    want_dw = torch.cat([(gs.double()[:, :, None] * x64).sum(0).reshape(-1),
                         (gd.double()[:, :, None] * xd64).sum(0).reshape(-1)])
    assert got[0].dtype == got[1].dtype == torch.float32 and got[2].dtype == torch.bfloat16
    assert _rel(got[0], want_s) < 1e-6 and _rel(got[1], want_t) < 1e-6
    if xd is None:
        assert _rel(got[2], (src_part + dst_part).reshape(n, d)) < 1e-2
    else:
        assert _rel(got[2], src_part.reshape(n, d)) < 1e-2 and _rel(got[3], dst_part.reshape(nd, d)) < 1e-2
    assert _rel(got[-1], want_dw) < (1e-4 if fold == "kernel" else 1e-2)
    again = run()
    assert all(torch.equal(a, b) for a, b in zip(got, again, strict=True))


def test_empty_graph_and_no_destinations():
    for n_dst in (5, 0):
        graph = CscGraph.from_edge_index(torch.empty(2, 0, dtype=torch.long, device=DEV), size=(4, n_dst))
        x = torch.randn(4, 8, device=DEV, requires_grad=True)
        w = torch.randn(8, device=DEV, requires_grad=True)
        out, att = tb.triton_gat(call_spec(graph, x, x[:n_dst], w, v2=True, heads=2, concat=True,
                                           activation_name="relu", activation_alpha=0.0, return_attention=True))
        assert torch.equal(out, torch.zeros(n_dst, 8, device=DEV)) and att.shape == (0, 2)
        (gx,) = torch.autograd.grad(out.sum(), x)
        assert torch.equal(gx, torch.zeros_like(gx))


@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_a_warm_step_reads_the_kept_kernel_graph_and_syncs_nowhere(op, monkeypatch):
    """On a power-law graph with hubs (chunked work lists), with edge features and a dropout mask: the first step
    builds the kernel graph (arrays, row list; reverse CSC, rev_dst, source list for the backward) and keeps it on
    the graph; a warm step asks graph.py for none of its derived structures, syncs nowhere
    (``set_sync_debug_mode("error")``) and repeats the first step's output and gradients bitwise."""
    import cudnn_gnn

    v2 = op == "gatv2"
    graph = _power_law_graph(3000, 30_000, seed=21, index_dtype=torch.int32)
    xs, w, ea, m = _inputs(v2, graph, 4, 16, edge=True, mask=True, seed=22)
    x, w, ea = (t.requires_grad_() for t in (xs, w, ea))
    fn = cudnn_gnn.gatv2 if v2 else cudnn_gnn.gat

    def step() -> list[torch.Tensor]:
        out = fn(graph, x, w, heads=4, edge_attr=ea, dropout_mask=m, backend="triton")
        return [out, *torch.autograd.grad(out.square().sum(), (x, w, ea))]

    first = step()
    kept = tb.built_kernel_graph(graph)
    assert kept is not None and kept.backward_if_built() is not None and int(kept.rows.hubs.shape[0]) > 0
    torch.cuda.synchronize()

    def refuse(*args, **kwargs):
        raise AssertionError("a warm step went back to graph.py for a derived structure")

    for name in ("reverse_csc", "reverse_dst", "reverse_coo_map", "max_degrees"):
        monkeypatch.setattr(CscGraph, name, refuse)
    monkeypatch.setattr(CscGraph, "dst_index", property(refuse))
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_20000_edge_hub_in_and_out_in_chunks(op):
    """Destination 0 with 20,000 in-edges and source 1 with 20,000 out-edges on a light power-law background: both
    are cut into chunks (forward log-sum-exp merge, backward delta / destination / source merges), against the
    float64 reference, with edge features, a dropout mask and returned attention; bitwise equal on a second run."""
    v2 = op == "gatv2"
    n, hub = 4000, 20_000
    graph = _hub_graph(n, 40_000, hub, seed=5)
    xs, w, ea, m = _inputs(v2, graph, 8, 32, edge=True, mask=True, seed=6)
    kw = dict(v2=v2, heads=8, concat=True)
    ref = _run("reference", graph, xs.double(), w.double(), ea.double(), m, torch.float64, **kw)
    got = _run("triton", graph, xs, w, ea, m, torch.float32, **kw)
    chunk = tuning.chunk_size(graph.num_edges)
    kernel_graph = tb.built_kernel_graph(graph)
    rows, srcs = kernel_graph.rows, kernel_graph.backward_if_built().src
    assert int(rows.hubs[:, 2].max()) >= hub // chunk and int(srcs.hubs[:, 2].max()) >= hub // chunk
    names = ["output", "attention", "grad x", "grad attn_weights", "grad edge_attr"]
    for k, (name, a, b) in enumerate(zip(names, [got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]])):
        bound = TOL[torch.float32] * (1 if k < 2 else 3)
        assert _rel(a, b) < bound, f"{name}: {_rel(a, b):.2e} >= {bound:.2e}"
    # the hub rows themselves, not only the norms over all rows
    assert _rel(got[0][0], ref[0][0]) < TOL[torch.float32] and _rel(got[2][0][1], ref[2][0][1]) < 3 * TOL[torch.float32]
    again = _run("triton", graph, xs, w, ea, m, torch.float32, **kw)
    for a, b in zip([got[0], got[1], *got[2]], [again[0], again[1], *again[2]]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_edge_projection_at_size(dtype, monkeypatch):
    """GATv2 with raw 8-dim edge features and lin_edge.weight (the proteins preset's shape, 8 heads x 8, at 1.6M
    edges with a 20,000-edge hub): the fused path is taken, outputs, attention and the gradients of x, attn_weights,
    edge_attr and the weight against the float64 reference (projecting in torch), bitwise repeats, and the peak
    memory the call adds to its inputs over forward and backward at least one ``[E, H*C]`` buffer below the
    projected Triton path's (which holds two: the projection and its gradient)."""
    heads, c, de = 8, 8, 8
    n, e = 20_000, 1_600_000
    g = torch.Generator().manual_seed(7)
    base = torch.stack([torch.randint(0, n, (e - 20_000,), generator=g), torch.randint(0, n, (e - 20_000,), generator=g)])
    hub = torch.stack([torch.randint(0, n, (20_000,), generator=g), torch.zeros(20_000, dtype=torch.long)])
    ei = torch.cat([base, hub], 1)[:, torch.randperm(e, generator=g)]
    graph = CscGraph.from_edge_index(ei.to(DEV), num_nodes=n, index_dtype=torch.int32)
    xs, w, _, m = _inputs(True, graph, heads, c, edge=False, mask=True)
    gen = torch.Generator(device=DEV).manual_seed(8)
    ea = torch.randn(e, de, device=DEV, generator=gen)
    ew = torch.randn(heads * c, de, device=DEV, generator=gen) / de**0.5
    assert tuning.fuse_edge_projection(e, heads, heads * c, de, dtype.itemsize, True)

    def run(backend, dt):
        x, a, f, wt = (t.detach().to(dt).requires_grad_() for t in (xs, w, ea, ew))
        kw = dict(v2=True, heads=heads, concat=True, activation_name="leaky_relu", activation_alpha=0.2,
                  lin_edge_weight=wt)
        torch.cuda.synchronize()
        base_mem = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if backend == "triton":
            out, att = tb.triton_gat(call_spec(graph, x, x, a, f, m, return_attention=True, **kw))
        else:
            out, att = reference.mha_gat(call_spec(graph, x, x, a, f, m, **kw))
        cot = torch.Generator(device=DEV).manual_seed(0)
        go = torch.randn(out.shape, device=DEV, generator=cot)
        ga = torch.randn(att.shape, device=DEV, generator=cot)
        ((out.float() * go).sum() + (att.float() * ga).sum()).backward()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base_mem
        return [out, att, x.grad, a.grad, f.grad, wt.grad], extra

    got, extra = run("triton", dtype)
    monkeypatch.setattr(tuning, "FUSED_EXTRA_SHARE", 0.0)  # the rule now refuses: torch projects first
    projected, extra_projected = run("triton", dtype)
    monkeypatch.undo()
    ref, _ = run("reference", torch.float64)
    same = None if dtype == torch.float32 else run("reference", dtype)[0]
    names = ["output", "attention", "grad x", "grad attn_weights", "grad edge_attr", "grad lin_edge_weight"]
    for k, (name, a, b) in enumerate(zip(names, got, ref)):
        bound = TOL[dtype] * (1 if k < 2 else 3)
        if same is not None:
            bound = max(bound, 3 * _rel(same[k], b))
        assert _rel(a, b) < bound, f"{name}: {_rel(a, b):.2e} >= {bound:.2e}"
    again, _ = run("triton", dtype)
    for a, b in zip(got, again):
        assert torch.equal(a, b)
    for a, b in zip(got, projected):  # the projected Triton path: the same up to rounding
        assert _rel(a, b) < 3 * TOL[dtype]
    buffer = e * heads * c * dtype.itemsize
    assert extra_projected - extra >= buffer, (
        f"fused forward+backward peaked {extra} bytes above its inputs, projected {extra_projected}; one [E, H*C] "
        f"buffer is {buffer}")


def test_cached_launch_matches_tritons_dispatch(monkeypatch):
    """Every kernel launched through :class:`~cudnn_gnn.backends.triton.launch.CachedLaunch`'s shortcut gives
    bitwise what Triton's own dispatch gives: GAT with its one-gather and its two-gather backward and GATv2 with its
    fused edge projection, on a graph with a 3,000-edge hub row and hub source (so the merge kernels run too), with
    edge features, a dropout mask and returned attention, and GAT's training call (no attention returned: the dense
    delta pass), and graph attention's packed-offsets check; every one of the thirteen kernels holds a variant after
    the first run, and the third run launches none through Triton's dispatch (all through the shortcut)."""
    from cudnn_gnn.backends.triton.launch import CachedLaunch

    # (module, name) -> the CachedLaunch a launcher finds in its own module's globals
    kernels = {(module, name): k for module in tk.KERNEL_MODULES for name, k in vars(module).items()
               if isinstance(k, CachedLaunch)}
    assert len(kernels) == 13, sorted(name for _, name in kernels)
    n = 3000
    graph = _hub_graph(n, 30_000, 3000, seed=11)
    assert graph.num_edges > 4 * tuning.chunk_size(graph.num_edges)
    heads, c, de = 8, 8, 8
    gen = torch.Generator(device=DEV).manual_seed(12)
    xs = torch.randn(n, heads * c, device=DEV, generator=gen)
    m = ((torch.rand(graph.num_edges, heads, device=DEV, generator=gen) > 0.2).float() * 1.25)
    ea = torch.randn(graph.num_edges, de, device=DEV, generator=gen)
    ew = torch.randn(heads * c, de, device=DEV, generator=gen) / de**0.5
    w_gat = torch.randn(2 * heads * c + heads, device=DEV, generator=gen) * 0.3
    w_v2 = torch.randn(heads * c, device=DEV, generator=gen) * 0.3
    score_edge = torch.randn(graph.num_edges, heads, device=DEV, generator=gen)
    assert tuning.fuse_edge_projection(graph.num_edges, heads, heads * c, de, 4, True)

    def run(case):
        v2 = case == "gatv2_fused"
        x = xs.detach().clone().requires_grad_()
        w = (w_v2 if v2 else w_gat).detach().clone().requires_grad_()
        f = (ea if v2 else score_edge).detach().clone().requires_grad_()
        wt = ew.detach().clone().requires_grad_() if v2 else None
        one_gather = case in ("gat_one_gather", "gat_training")
        options = tb.TritonOptions(gat_backward="one_gather" if one_gather else "two_gather")
        spec = call_spec(graph, x, x, w, f, m, v2=v2, heads=heads, concat=True,
                         return_attention=case != "gat_training", lin_edge_weight=wt)
        out, att = tb.triton_gat(spec, options=options)
        cot = torch.Generator(device=DEV).manual_seed(0)
        loss = (out * torch.randn(out.shape, device=DEV, generator=cot)).sum()
        if att is not None:
            loss = loss + (att * torch.randn(att.shape, device=DEV, generator=cot)).sum()
        loss.backward()
        ptr = torch.tensor([0, 5, 5, 2000, n], device=DEV)
        safe, flag = packed_offsets.checked_offsets(ptr, n, 2000, x.dtype)
        return [t for t in (out, att, x.grad, w.grad, f.grad, wt.grad if v2 else None, safe, flag) if t is not None]

    cases = ("gat_one_gather", "gat_two_gather", "gatv2_fused", "gat_training")
    with monkeypatch.context() as plain_dispatch:  # every kernel through Triton's own dispatch
        for (module, name), k in kernels.items():
            plain_dispatch.setattr(module, name, k.fn)
        plain = {case: run(case) for case in cases}
    first = {case: run(case) for case in cases}  # builds each variant's entry through Triton's dispatch
    assert all(k.variants() > 0 for k in kernels.values()), {name: k.variants() for name, k in kernels.items()}

    dispatched: list[str] = []

    class _Counting:  # Triton's own dispatch of a kernel, counted
        def __init__(self, fn, name):
            self._fn, self._name = fn, name

        def __getattr__(self, attr):
            return getattr(self._fn, attr)

        def __getitem__(self, grid):
            dispatched.append(self._name)
            return self._fn[grid]

    for name, k in kernels.items():
        monkeypatch.setattr(k, "fn", _Counting(k.fn, name))
    shortcut = {case: run(case) for case in cases}
    assert dispatched == [], dispatched
    for case in cases:
        for a, b, d in zip(plain[case], first[case], shortcut[case], strict=True):
            assert torch.equal(a, b) and torch.equal(a, d), case


@pytest.mark.slow
@pytest.mark.gpu_alone
@pytest.mark.parametrize("side", ["under", "over"])
@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_int64_offsets_past_2_31_elements(op, side, monkeypatch):
    """``x_src [Ns, 4 x 32]`` bfloat16 just under 2**31 elements with the rule's pad (the kernels' int32 offsets: no
    kernel takes int64 on a 128-wide tile anyway, ``tuning.kernel_int64_offsets``) and just over (int64 in every
    kernel; about 10 GiB a case), bipartite to 8 destinations, each reading 16 sources among the top 1,000
    rows (the highest offsets) and 8 anywhere: the rule's answer; the output, the returned attention and the
    gradients of ``x_dst`` and ``attn_weights``, and ``x_src``'s on the rows the edges read, against the float64
    reference on those rows alone; ``x_src``'s gradient zero on the top rows no edge reads (written by GAT's
    node-score backward too)."""
    free, _ = torch.cuda.mem_get_info()
    if free < 16 * 2**30:
        pytest.skip("needs ~16 GiB of free GPU memory")
    v2, heads, c, nd = op == "gatv2", 4, 32, 8
    d = heads * c
    limit, pad = tuning.INT32_OFFSETS_BELOW, tuning.OFFSET_PAD_ROWS
    if side == "under":  # 4,096 programs of GAT's node-score backward's rows (4 x 1,023 each): none past Ns
        ns = ((limit - 1) // d - pad) // 8192 * 8192
    else:
        ns = limit // d + 1
    answers: list[bool] = []
    rule = tuning.int64_offsets
    monkeypatch.setattr(tuning, "int64_offsets", lambda *a, **k: answers.append(rule(*a, **k)) or answers[-1])

    g = torch.Generator(device=DEV).manual_seed(3)
    top = ns - 1000 + torch.randint(0, 1000, (nd, 16), device=DEV, generator=g)
    anywhere = torch.randint(0, ns, (nd, 8), device=DEV, generator=g)
    src = torch.cat([top, anywhere], 1).flatten()
    dst = torch.arange(nd, device=DEV).repeat_interleave(24)
    graph = CscGraph.from_edge_index(torch.stack([src, dst]), size=(ns, nd), index_dtype=torch.int32)
    xs = torch.randn(ns, d, device=DEV, dtype=torch.bfloat16, generator=g).requires_grad_()
    xd = torch.randn(nd, d, device=DEV, dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(d if v2 else 2 * d, device=DEV, generator=g) * 0.3).to(torch.bfloat16).requires_grad_()
    kw = dict(v2=v2, heads=heads, concat=True)
    out, att = tb.triton_gat(call_spec(graph, xs, xd, w, return_attention=True, **kw))
    assert answers == [side == "over"]
    go = torch.randn(out.shape, device=DEV, generator=g)
    ga = torch.randn(att.shape, device=DEV, generator=g)
    ((out.float() * go).sum() + (att * ga).sum()).backward()

    used, sub_src = torch.unique(src, return_inverse=True)
    sub = CscGraph.from_edge_index(torch.stack([sub_src, dst]), size=(used.shape[0], nd))
    leaves = [t.detach()[used].double().requires_grad_() if t is xs else t.detach().double().requires_grad_()
              for t in (xs, xd, w)]
    r_out, r_att = reference.mha_gat(call_spec(sub, *leaves, **kw))
    ((r_out * go.double()).sum() + (r_att * ga.double()).sum()).backward()
    tol = TOL[torch.bfloat16]
    assert _rel(out, r_out) < tol and _rel(att, r_att) < tol
    for name, a, b in (("x_src", xs.grad[used], leaves[0].grad), ("x_dst", xd.grad, leaves[1].grad),
                       ("attn_weights", w.grad, leaves[2].grad)):
        assert _rel(a, b) < 3 * tol, f"grad of {name}: {_rel(a, b):.2e}"
    untouched = torch.ones(1000, dtype=torch.bool, device=DEV)
    untouched[used[used >= ns - 1000] - (ns - 1000)] = False
    assert untouched.any() and not xs.grad[ns - 1000:][untouched].any()


@pytest.mark.parametrize("cls_name", ["GATConv", "GATv2Conv"])
def test_compiled_layers_turn_out_of_range_ids_into_nan_and_the_context_survives(cls_name: str) -> None:
    """Compiled (Inductor) layers on the Triton kernels given a raw edge_index with a source past the nodes and a
    negative destination: NaN output and attention, no device-side assert; the next good call is right."""
    import cudnn_gnn.layers as layers

    torch.manual_seed(0)
    n = 40
    ei = torch.randint(0, n, (2, 200), device=DEV)
    conv = getattr(layers, cls_name)(16, 8, heads=2, edge_dim=4, fill_value="mean").to(DEV)
    x, ea = torch.randn(n, 16, device=DEV), torch.randn(200, 4, device=DEV)
    torch._dynamo.reset()
    compiled = torch.compile(conv)  # not fullgraph: the returned attention's boolean-mask index may break a graph
    want = conv(x, ei, ea)
    torch.testing.assert_close(compiled(x, ei, ea), want, rtol=1e-4, atol=1e-4)
    wrong = ei.clone()
    wrong[0, 7], wrong[1, 11] = 10 * n, -5
    out, (_, alpha) = compiled(x, wrong, ea, return_attention_weights=True)
    assert torch.isnan(out).all() and torch.isnan(alpha).all()
    torch.testing.assert_close(compiled(x, ei, ea), want, rtol=1e-4, atol=1e-4)
    torch.cuda.synchronize()
