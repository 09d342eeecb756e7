"""The Triton backend's kernels against the reference backend, on CPU under Triton's interpreter.

Outputs, returned attention and every gradient (x_src, x_dst, attn_weights, edge_attr, with a gradient flowing
through the returned attention too), GAT and GATv2, over the graph catalogue, all activations, dropout masks,
concat and mean, float32 and bfloat16, int32 and int64 indices; plus a bitwise repeat, ``torch.library.opcheck``
and ``torch.compile(fullgraph=True)``. GATv2's fused edge projection (raw ``edge_attr`` and ``lin_edge_weight``)
over the same matrix, its gradients (the weight's included), the rule that picks it, and PyG's ``GATv2Conv`` with
``edge_dim`` against ours on it. The interpreter runs every program in Python, so every case is tiny.

Triton decides between compiling and interpreting when it decorates the kernels, so ``TRITON_INTERPRET=1`` is set
here before the backend's first call. On a machine with CUDA the kernels are left compiled for the GPU suite
(``tests/gpu/test_triton_gpu.py``) and this file skips, unless ``TRITON_INTERPRET=1`` was set from the start.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")

from ..conftest import interpret_triton_on_cpu  # noqa: E402

interpret_triton_on_cpu("tests/gpu/test_triton_gpu.py")

from cudnn_gnn import CscGraph  # noqa: E402
from cudnn_gnn.backends import reference  # noqa: E402
from cudnn_gnn.backends import triton as tb  # noqa: E402
from cudnn_gnn.backends.triton import call as triton_call  # noqa: E402
from cudnn_gnn.backends.triton import tuning  # noqa: E402
from cudnn_gnn.backends.triton.kernels import n_items  # noqa: E402

from ..conftest import GRAPHS, call_spec  # noqa: E402

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _inputs(v2: bool, ns: int, nd: int, e: int, heads: int, c: int, *, edge: bool, mask: bool, bipartite: bool,
            dtype: torch.dtype = torch.float32, seed: int = 0):
    """Leaf tensors (x_src, x_dst, attn_weights, edge_attr, dropout_mask); x_dst is a view of x_src's first rows
    unless ``bipartite``, and the mask a transposed [H, E] buffer, as make_dropout_mask lays it out."""
    g = torch.Generator().manual_seed(seed)
    d = heads * c
    de = d if v2 else 2 * heads
    xs = torch.randn(ns, d, generator=g).to(dtype).requires_grad_()
    xd = torch.randn(nd, d, generator=g).to(dtype).requires_grad_() if bipartite else None
    w = torch.randn(d if v2 else 2 * d + (de if edge else 0), generator=g).to(dtype).requires_grad_()
    ea = torch.randn(e, de, generator=g).to(dtype).requires_grad_() if edge else None
    m = ((torch.rand(heads, e, generator=g) > 0.3).float() * 1.5).t() if mask else None
    return xs, xd, w, ea, m


def _run(backend, graph, xs, xd, w, ea, m, *, v2, heads, concat, act="leaky_relu", alpha=0.2, seed=1, ew=None,
         gat_backward="auto", drop=None):
    """Forward, then the gradients of ``<out, g_out> + <attention, g_att>`` w.r.t. every input given (``ew``: GATv2's
    ``lin_edge_weight``, ``ea`` then raw). Without ``xd``, ``x_dst`` is ``xs`` itself on a square graph (GAT's op
    then reads one feature tensor for both node scores), else a view of its first rows. ``gat_backward``: the Triton
    backend's :class:`~cudnn_gnn.backends.triton.TritonOptions` variant (the reference ignores it). ``drop``:
    ``(p, seed)``, counter-based dropout (``m`` None), drawn in-kernel by Triton, materialised by the reference."""
    if xd is not None:
        x_dst = xd
    else:  # x_src itself where the graph is square (as the layers pass it), else a view of its first rows
        x_dst = xs if graph.num_dst_nodes == xs.shape[0] else xs[: graph.num_dst_nodes]
    kw = dict(v2=v2, heads=heads, concat=concat, activation_name=act, activation_alpha=alpha, lin_edge_weight=ew)
    if drop is not None:
        kw.update(dropout=drop[0], dropout_seed=drop[1])
    if backend == "triton":
        out, att = tb.triton_gat(call_spec(graph, xs, x_dst, w, ea, m, return_attention=True, **kw),
                                 options=tb.TritonOptions(gat_backward=gat_backward))
    else:
        out, att = reference.mha_gat(call_spec(graph, xs, x_dst, w, ea, m, **kw))
    gen = torch.Generator().manual_seed(seed)
    g_out = torch.randn(out.shape, generator=gen).to(out.dtype)
    g_att = torch.randn(att.shape, generator=gen)
    leaves = [t for t in (xs, xd, w, ea, ew) if t is not None and t.requires_grad]
    loss = (out.float() * g_out.float()).sum() + (att * g_att).sum()
    grads = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True) if leaves else ()
    return out, att, grads


def _gat_backward(one_gather: bool) -> str:
    """The :class:`~cudnn_gnn.backends.triton.TritonOptions` variant that forces GAT's one- or two-gather backward."""
    return "one_gather" if one_gather else "two_gather"


def _compare(graph, xs, xd, w, ea, m, **kw):
    out, att, grads = _run("triton", graph, xs, xd, w, ea, m, **kw)
    r_out, r_att, r_grads = _run("reference", graph, xs, xd, w, ea, m, **kw)
    tol = TOL[xs.dtype]
    assert out.dtype == xs.dtype and att.dtype == torch.float32
    torch.testing.assert_close(out, r_out, **tol)
    torch.testing.assert_close(att, r_att, **tol)
    names = [n for n, t in zip(("x_src", "x_dst", "attn_weights", "edge_attr", "lin_edge_weight"),
                               (xs, xd, w, ea, kw.get("ew"))) if t is not None and t.requires_grad]
    for name, a, b in zip(names, grads, r_grads):
        assert a.dtype == b.dtype, name
        torch.testing.assert_close(a, b, **tol, msg=lambda s, name=name: f"grad of {name}: {s}")
    return out, att, grads


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_catalogue_matches_reference(name, v2):
    """Every catalogue graph, with edge features and a dropout mask; GAT in int32 and mean over heads, GATv2 in
    int64 and concatenated."""
    ei, ns, nd = GRAPHS[name]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=torch.int64 if v2 else torch.int32)
    heads = 2
    xs, xd, w, ea, m = _inputs(v2, ns, nd, ei.shape[1], heads, 3, edge=True, mask=True, bipartite=ns != nd)
    out, att, _ = _compare(graph, xs, xd, w, ea, m, v2=v2, heads=heads, concat=v2)
    if graph.num_edges:  # zero in-degree destinations: zero rows
        empty = graph.offsets.diff() == 0
        assert torch.equal(out[empty], torch.zeros_like(out[empty]))


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("act", reference.ACTIVATIONS)
def test_every_activation(act, v2):
    """All seven activations, forward and backward, on a shuffled graph with a duplicate edge and a self-loop;
    without edge features or mask, alternating concat and mean."""
    ei = torch.tensor([[0, 1, 2, 3, 4, 1, 2, 0, 0, 3], [1, 0, 0, 2, 2, 2, 3, 3, 3, 3]])
    graph = CscGraph.from_edge_index(ei[:, torch.randperm(10, generator=torch.Generator().manual_seed(3))],
                                     num_nodes=5)
    xs, xd, w, ea, m = _inputs(v2, 5, 5, 10, 2, 3, edge=False, mask=False, bipartite=False, seed=4)
    alpha = 0.3 if act in ("leaky_relu", "scalar") else 0.0
    _compare(graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=act in ("linear", "sigmoid", "elu", "scalar"),
             act=act, alpha=alpha)


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_bfloat16_against_the_reference_on_the_same_inputs(v2):
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, m = _inputs(v2, ns, nd, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False,
                               dtype=torch.bfloat16)
    _compare(graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=True)


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_head_width_not_a_power_of_two_one_head_and_long_rows(v2):
    """C = 5 pads to a tile of 8; a row of 40 edges spans several edge blocks of the online softmax."""
    src = torch.arange(40) % 7
    ei = torch.cat([torch.stack([src, torch.zeros(40, dtype=torch.long)]), torch.tensor([[1, 2], [3, 3]])], 1)
    graph = CscGraph.from_edge_index(ei, num_nodes=7)
    xs, xd, w, ea, m = _inputs(v2, 7, 7, ei.shape[1], 1, 5, edge=True, mask=False, bipartite=False, seed=5)
    _compare(graph, xs, xd, w, ea, m, v2=v2, heads=1, concat=False)


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("max_tile_d", [1024, 16, 8], ids=["all_heads", "head_groups", "one_head"])
@pytest.mark.slow
def test_padded_heads_head_groups_and_rows_of_many_blocks(v2, max_tile_d, monkeypatch):
    """H = 3, C = 5: heads pad to 4 and channels to 8 in one all-heads tile; with a smaller tile budget the heads
    split into groups of 2 (the second group half padding) or one head per program (the wide-row path). A row of
    150 edges takes ten blocks of 16 (the last one short); others have 0 to 3 edges. Bipartite, shuffled, with edge
    features and a strided dropout mask."""
    from cudnn_gnn.backends.triton import tuning as kernels

    monkeypatch.setattr(kernels, "MAX_TILE_D", max_tile_d)
    block_e, big_e, hg, block_c, _ = kernels.default_launch_shape(3, 5, v2, max_tile_d)
    assert (block_e, big_e, block_c) == (16, 64, 8) and hg == {1024: 4, 16: 2, 8: 1}[max_tile_d]
    hub = torch.stack([torch.arange(150) % 9, torch.zeros(150, dtype=torch.long)])
    light = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 1, 2, 3, 3, 3]])
    ei = torch.cat([hub, light], 1)
    ei = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(2))]
    graph = CscGraph.from_edge_index(ei, size=(9, 5), index_dtype=torch.int32 if v2 else torch.int64)
    xs, xd, w, ea, m = _inputs(v2, 9, 5, ei.shape[1], 3, 5, edge=True, mask=True, bipartite=True, seed=6)
    out, _, _ = _compare(graph, xs, xd, w, ea, m, v2=v2, heads=3, concat=not v2)
    assert torch.equal(out[4], torch.zeros_like(out[4]))  # zero in-degree


def test_block_sizes_for_the_named_shapes():
    """All heads in one program up to a padded width of 1024 (arxiv's 8 x 32, 3 x 250, 2 x 375); 8 x 256 in two
    groups of 4; a head wider than 1024 alone. Small blocks for light rows, bigger ones for long rows."""
    from cudnn_gnn.backends.triton.tuning import default_launch_shape

    assert default_launch_shape(8, 32, False) == (8, 32, 8, 32, 4)
    assert default_launch_shape(8, 32, True) == (8, 16, 8, 32, 4)
    assert default_launch_shape(3, 250, False)[2:4] == (4, 256) and default_launch_shape(2, 375, True)[2:4] == (2, 512)
    assert default_launch_shape(8, 256, False)[2] == 4 and default_launch_shape(1, 2000, False)[2:4] == (1, 2048)
    for heads, c in ((8, 32), (3, 250), (2, 375), (8, 256), (1, 2000), (3, 5)):
        for v2 in (False, True):
            block_e, big_e, hg, block_c, warps = default_launch_shape(heads, c, v2)
            assert 2 <= block_e <= big_e <= 64 and hg * block_c <= max(1024, block_c) and 2 <= warps <= 4
            assert big_e * hg * block_c <= (4096 if v2 else 8192)


@pytest.mark.slow
def test_backward_is_bitwise_repeatable():
    ei, ns, nd = GRAPHS["unsorted_coo"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    for v2 in (False, True):
        xs, xd, w, ea, m = _inputs(v2, ns, nd, ei.shape[1], 2, 3, edge=True, mask=True, bipartite=False)
        first = _run("triton", graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=True)
        second = _run("triton", graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=True)
        assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
        assert all(torch.equal(a, b) for a, b in zip(first[2], second[2]))


def _attention_only_grads_match(graph, xs, w, ea, kw):
    """A loss on the returned attention alone: its gradients in x, attn_weights and edge_attr equal the
    reference's (fp32)."""
    _, att = tb.triton_gat(call_spec(graph, xs, xs, w, ea, None, return_attention=True, **kw))
    _, r_att = reference.mha_gat(call_spec(graph, xs, xs, w, ea, None, **kw))
    grads = torch.autograd.grad(att[:, 0].sum() + 2 * att[:, 1].pow(2).sum(), (xs, w, ea))
    r_grads = torch.autograd.grad(r_att[:, 0].sum() + 2 * r_att[:, 1].pow(2).sum(), (xs, w, ea))
    for a, b in zip(grads, r_grads):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


def test_gradient_through_attention_only_and_no_attention_materialised():
    ei, ns, nd = GRAPHS["multi_edges"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, ea, _ = _inputs(True, ns, nd, ei.shape[1], 2, 2, edge=True, mask=False, bipartite=False)
    kw = dict(v2=True, heads=2, concat=True, activation_name="leaky_relu", activation_alpha=0.2)
    _attention_only_grads_match(graph, xs, w, ea, kw)
    with torch.no_grad():
        out, none = tb.triton_gat(call_spec(graph, xs, xs, w, ea, None, return_attention=False, **kw))
    assert none is None and out.shape == (nd, 4)


def test_per_graph_structures_are_cached_on_the_graph():
    ei, ns, _ = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, _ = _inputs(False, ns, ns, ei.shape[1], 1, 2, edge=False, mask=False, bipartite=False)
    with torch.no_grad():
        tb.triton_gat(call_spec(graph, xs, xs, w, v2=False, heads=1, concat=True, activation_name="relu",
                                activation_alpha=0.0))
    kernel_graph = tb.built_kernel_graph(graph)
    assert kernel_graph is not None and kernel_graph.backward_if_built() is None  # no backward asked
    assert tb.kernel_graph(graph) is kernel_graph  # kept on the graph: the next call reads it
    rows = kernel_graph.rows
    lengths = rows.work[:, 2] - rows.work[:, 1]
    assert bool((lengths[:-1] >= lengths[1:]).all())  # heaviest first


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_a_warm_step_reads_the_kernel_graph_kept_on_the_graph(v2, monkeypatch):
    """The backend's kernel graph (arrays and row work list; the reverse CSC, ``rev_dst`` and the source work list
    once a backward asked) is built by the first step and kept on the graph: a warm step through
    :func:`cudnn_gnn.gat` / :func:`cudnn_gnn.gatv2` asks ``graph.py`` for none of its derived structures (each one
    refuses here), looks up only the Triton entries through ``derived``, and issues no host sync."""
    import cudnn_gnn
    from cudnn_gnn.apps.capture import host_syncs

    ei, ns, _ = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, _ = _inputs(v2, ns, ns, ei.shape[1], 2, 4, edge=False, mask=False, bipartite=False)
    op = cudnn_gnn.gatv2 if v2 else cudnn_gnn.gat

    def step() -> None:
        torch.autograd.grad(op(graph, xs, w, heads=2, backend="triton").square().sum(), (xs, w))

    step()
    kept = tb.built_kernel_graph(graph)
    assert kept is not None and kept.backward_if_built() is not None and kept.backward_if_built().rev_dst is not None

    def refuse(*args, **kwargs):
        raise AssertionError("a warm step went back to graph.py for a derived structure")

    for name in ("reverse_csc", "reverse_dst", "reverse_coo_map", "max_degrees"):
        monkeypatch.setattr(CscGraph, name, refuse)
    monkeypatch.setattr(CscGraph, "dst_index", property(refuse))
    keys: list = []
    real_derived = CscGraph.derived
    monkeypatch.setattr(CscGraph, "derived", lambda self, key, build: keys.append(key) or real_derived(self, key, build))
    assert host_syncs(step) == []
    assert keys and all(k[0] == "triton" for k in keys), keys
    assert tb.built_kernel_graph(graph) is kept


def test_the_kept_kernel_graph_makes_no_reference_cycle():
    """A graph keeps its kernel graph (and the backward's structures) but the kernel graph holds the graph only
    weakly: once the last reference goes, the graph is freed at once, without a run of the cycle collector (a sampled
    block's tensors do not outlive its step)."""
    import gc
    import weakref

    ei, ns, _ = GRAPHS["power_law"]()
    xs, _, w, _, _ = _inputs(False, ns, ns, ei.shape[1], 2, 2, edge=False, mask=False, bipartite=False)
    gc.collect()
    gc.disable()
    try:
        graph = CscGraph.from_edge_index(ei, num_nodes=ns)
        out, _ = tb.triton_gat(call_spec(graph, xs, xs, w, v2=False, heads=2, concat=True))
        out.sum().backward()
        kept = tb.built_kernel_graph(graph)
        assert kept is not None and kept.backward_if_built() is not None and kept.graph is graph
        alive = weakref.ref(graph)
        del graph, out
        assert alive() is None
        with pytest.raises(RuntimeError, match="graph must be alive"):
            kept.backward()
    finally:
        gc.enable()


def _op_call(v2: bool, return_attention: bool) -> tuple:
    """``(call, walk)`` of a bipartite call with edge features, a dropout mask and ELU, its inputs detached (the ops
    carry no autograd of their own: their Function does)."""
    ei, ns, nd = GRAPHS["bipartite"]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    xs, xd, w, ea, m = _inputs(v2, ns, nd, ei.shape[1], 2, 2, edge=True, mask=True, bipartite=True)
    call, walk = tb.build_call(call_spec(graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=not v2,
                                         activation_name="elu", activation_alpha=1.0,
                                         return_attention=return_attention),
                               tb.kernel_graph(graph), needs_grad=True)
    call = type(call)(*(v.detach() if isinstance(v, torch.Tensor) else v for v in call))
    return call, walk


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_op_schemas_are_the_call_records_fields(v2):
    """Each op's arguments are its call record's fields in order (the record is written once; the schema derived),
    GAT's and GATv2's ops each their own: GAT's takes ``att_node`` and the edge scores, never GATv2's edge inputs."""
    name, record = ("triton_gatv2", tb.Gatv2Call) if v2 else ("triton_gat", tb.GatCall)
    fwd = [a.name for a in getattr(torch.ops.cudnn_gnn, f"{name}_fwd").default._schema.arguments]
    bwd = [a.name for a in getattr(torch.ops.cudnn_gnn, f"{name}_bwd").default._schema.arguments]
    assert fwd == [*record._fields, "return_attention", "write_keep"]
    lead = ["grad_out", "grad_attention", "lse"] + ([] if v2 else ["out", "scores"])
    assert bwd == [*lead, *record._fields, *tb.SourceWalk._fields]
    assert ("edge_attr" in fwd) == v2 and ("score_edge" in fwd) != v2 and "v2" not in fwd


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.slow
def test_opcheck(v2):
    """The forward and backward ops against their fakes, schemas and ``torch.compile``'s checks."""
    name = "triton_gatv2" if v2 else "triton_gat"
    call, walk = _op_call(v2, return_attention=True)
    fwd = getattr(torch.ops.cudnn_gnn, f"{name}_fwd").default
    torch.library.opcheck(fwd, (*call, True, False))
    out, lse, att, *scores, _ = fwd(*call, True, False)
    go = torch.randn_like(out)
    lead = (go, torch.randn_like(att), lse) + (() if v2 else (out, *scores))
    torch.library.opcheck(getattr(torch.ops.cudnn_gnn, f"{name}_bwd").default, (*lead, *call, *walk))


def test_triton_options_launch_replaces_a_kernels_shape(monkeypatch):
    """``TritonOptions(launch=...)`` replaces the named kernel's ``BLOCK_E`` / ``num_warps`` / ``HG`` for that call
    only (what the tuning sweeps run; no module patched), the result unchanged; bad overrides are refused."""
    from cudnn_gnn.backends.triton import tuning

    seen = []
    real = tuning.launch_config

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append((args[3], result[2]))
        return result

    monkeypatch.setattr(tuning, "launch_config", spy)
    ei, ns, nd = GRAPHS["bipartite"]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    xs, xd, w, _, _ = _inputs(False, ns, nd, ei.shape[1], 2, 4, edge=False, mask=False, bipartite=True)
    outs = []
    for options in (tb.TritonOptions(), tb.TritonOptions(launch={"fwd": (2, 1, 1), "src": (4, 2)},
                                                         gat_backward="two_gather")):
        seen.clear()
        out, _ = tb.triton_gat(call_spec(graph, xs, xd, w, v2=False, heads=2, concat=True), options=options)
        outs.append(out)
        out.sum().backward()
    shapes = dict(seen)
    assert (shapes["fwd"]["BLOCK_E"], shapes["fwd"]["num_warps"], shapes["fwd"]["HG"]) == (2, 1, 1)
    assert (shapes["src"]["BLOCK_E"], shapes["src"]["num_warps"]) == (4, 2)
    assert shapes["dst"] == real(xs, 2, False, "dst", xs)[2]  # not named: the rule's
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    for bad, match in (({"fwdd": (2, 1)}, "launch must name kernels"), ({"fwd": (3, 1)}, "powers of two"),
                       ({"fwd": (2,)}, r"launch\['fwd'\] must be")):
        with pytest.raises(ValueError, match=match):
            tb.TritonOptions(launch=bad)


@pytest.mark.slow
def test_compile_fullgraph_has_no_graph_break():
    """``torch.compile(fullgraph=True)`` traces GAT (the registered op, its node scores computed inside it; the edge
    scores' GEMM traced): gradients equal the eager call's."""
    ei, ns, nd = GRAPHS["zero_in_degree"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, ea, _ = _inputs(False, ns, nd, ei.shape[1], 2, 2, edge=True, mask=False, bipartite=False)

    def f(x, w, ea):
        out, att = tb.triton_gat(call_spec(graph, x, x, w, ea, v2=False, heads=2, concat=True, return_attention=True))
        return out.sum() + att.pow(2).sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    loss = compiled(xs, w, ea)
    grads = torch.autograd.grad(loss, (xs, w, ea))
    r_grads = torch.autograd.grad(f(xs, w, ea), (xs, w, ea))
    for a, b in zip(grads, r_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_kernel_signatures_take_the_argument_groups_in_their_order():
    """The launchers pass the inputs (``x_src`` and :func:`edge_inputs`) and the dropout (:func:`drop_args`) as
    groups; each kernel that reads one takes it as one run of parameters in :data:`EDGE_INPUT_PARAMS` /
    :data:`DROPOUT_PARAMS` order (the source pass the first five inputs), so a group is spelled once for the
    launchers."""
    import inspect

    from cudnn_gnn.backends.triton.kernels import backward_dst, backward_src, common, forward, gat_backward

    def params(kernel):
        fn = getattr(kernel, "fn", kernel)
        return tuple(getattr(fn, "arg_names", None) or inspect.signature(fn).parameters)

    def has_run(names, run):
        return any(names[i:i + len(run)] == run for i in range(len(names)))

    inputs, drop = common.EDGE_INPUT_PARAMS, common.DROPOUT_PARAMS
    for kernel, group in ((forward._fwd_kernel, inputs), (backward_dst._bwd_dst_kernel, inputs),
                          (backward_src._bwd_src_kernel, inputs[:5])):
        assert has_run(params(kernel), group), (kernel, params(kernel))
    for kernel in (forward._fwd_kernel, forward._fwd_merge_kernel, backward_dst._bwd_dst_kernel,
                   gat_backward._bwd_gat_src_kernel, gat_backward._bwd_gat_delta_att_kernel):
        assert has_run(params(kernel), drop), (kernel, params(kernel))


def test_host_grid_math_is_tritons():
    """The launchers' host ``_cdiv`` / ``_next_pow2`` (plain Python in place of Triton's constexpr functions) give
    ``triton.cdiv`` / ``triton.next_power_of_2``'s values."""
    import triton

    from cudnn_gnn.backends.triton.tuning import cdiv as _cdiv
    from cudnn_gnn.backends.triton.tuning import next_pow2 as _next_pow2

    for a in range(0, 3000, 7):
        for b in (1, 2, 3, 16, 64, 4096):
            assert _cdiv(a, b) == triton.cdiv(a, b), (a, b)
    for n in [*range(1, 2100), 2**31 - 1, 2**31, 2**31 + 1]:
        assert _next_pow2(n) == triton.next_power_of_2(n), n


def test_float64_is_refused_and_unavailable_reason(monkeypatch):
    graph = CscGraph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=2)
    x = torch.randn(2, 2, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="float64"):
        tb.triton_gat(call_spec(graph, x, x, torch.randn(2, dtype=torch.float64), v2=True, heads=1, concat=True,
                                activation_name="relu", activation_alpha=0.0))
    assert tb.unavailable_reason(torch.device("cpu")) is None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = tb.unavailable_reason(torch.device("cpu"))
    assert reason is not None and "CUDA" in reason and "TRITON_INTERPRET=1" in reason


# ------------------------------------------------------------------------------ through the public call path
@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.slow
def test_public_op_with_backend_triton_matches_the_reference(v2):
    """``cudnn_gnn.gat/gatv2(..., backend="triton")``: spec -> plan -> the Triton backend, with edge features, a
    drawn dropout mask (same RNG state), returned attention and every gradient equal to ``backend="reference"``."""
    import cudnn_gnn

    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    fn = cudnn_gnn.gatv2 if v2 else cudnn_gnn.gat
    results = []
    for backend in ("triton", "reference"):
        xs, _, w, ea, _ = _inputs(v2, ns, nd, ei.shape[1], 2, 3, edge=True, mask=False, bipartite=False)
        torch.manual_seed(7)
        out, att = fn(graph, xs, w, heads=2, edge_attr=ea, dropout=0.25, training=True, return_attention=True,
                      backend=backend)
        g = torch.Generator().manual_seed(3)
        ((out * torch.randn(out.shape, generator=g)).sum() + (att * torch.randn(att.shape, generator=g)).sum()).backward()
        results.append([out, att, xs.grad, w.grad, ea.grad])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


def test_gatconv_with_backend_triton_matches_the_reference_layer():
    """The drop-in layer on the Triton backend: same state_dict, same output, PyG-order attention and gradients."""
    from cudnn_gnn import GATConv

    ei, n, _ = GRAPHS["self_loops"]()
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(0))
    results = []
    for backend in ("triton", "reference"):
        torch.manual_seed(0)
        conv = GATConv(5, 3, heads=2, edge_dim=2, backend=backend)
        xl = x.clone().requires_grad_()
        out, (ei_out, att) = conv(xl, ei, torch.ones(ei.shape[1], 2), return_attention_weights=True)
        (out.sum() + att.square().sum()).backward()
        results.append([out, ei_out.float(), att, xl.grad, *[p.grad for p in conv.parameters()]])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


@pytest.mark.parametrize("concat", [True, False])
def test_an_in_place_change_of_the_layers_output_stays_legal(concat):
    """GAT's one-gather backward keeps the op's output for ``delta = <dout, out>``; the layer adds its bias after the
    op, so the layer's own output is another tensor and ``out.relu_()`` on it (legal on PyG's layer) keeps the
    backward's result: the same gradients as the reference layer's."""
    from cudnn_gnn import GATConv

    ei, n, _ = GRAPHS["power_law"]()
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(0))
    results = []
    for backend in ("triton", "reference"):
        torch.manual_seed(0)
        conv = GATConv(5, 4, heads=2, concat=concat, backend=backend)
        with torch.no_grad():
            conv.bias.normal_()
        xl = x.clone().requires_grad_()
        out = conv(xl, ei)
        out.relu_()
        out.square().sum().backward()
        results.append([out, xl.grad, *[p.grad for p in conv.parameters()]])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


def test_use_options_reaches_the_layers_eager_calls_in_its_block_only(monkeypatch):
    """``use_options`` sets the options of the eager Triton calls given none (a layer's) for its block: the forward's
    launch shape is the block's inside it and the rule's outside, before and after; a non-options object is refused
    in the house grammar."""
    from cudnn_gnn import GATConv
    from cudnn_gnn.backends.triton import tuning

    seen = []
    real = tuning.launch_config

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        if args[3] == "fwd":
            seen.append(result[2]["BLOCK_E"])
        return result

    monkeypatch.setattr(tuning, "launch_config", spy)
    ei, n, _ = GRAPHS["power_law"]()
    conv = GATConv(5, 4, heads=2, backend="triton")
    x = torch.randn(n, 5)
    with torch.no_grad():
        conv(x, ei)
        with tb.use_options(tb.TritonOptions(launch={"fwd": (2, 1)})):
            conv(x, ei)
        conv(x, ei)
    rule = real(x.new_empty(n, 8), 2, False, "fwd", x)[2]["BLOCK_E"]
    assert rule != 2 and seen == [rule, 2, rule], seen
    with pytest.raises(TypeError, match="options must be a TritonOptions, got dict"):
        with tb.use_options({"fwd": (2, 1)}):
            pass


def test_a_shape_that_failed_to_launch_on_cudnn_is_planned_on_triton(monkeypatch):
    """The planner's launch fallback: once cuDNN failed to launch a shape, later calls of it go to Triton where
    Triton runs (here: the interpreter), not to cuDNN again."""
    import cudnn_gnn
    from cudnn_gnn.backends import gat_backend
    from cudnn_gnn.ops import plan as plan_module
    from cudnn_gnn.spec import attention_spec

    cudnn = gat_backend("cudnn")
    monkeypatch.setattr(plan_module, "choose_backend", lambda spec: cudnn)
    monkeypatch.setattr(type(cudnn), "failed_to_launch_before", lambda self, spec, graph: True)
    ei, n, _ = GRAPHS["multi_edges"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=n)
    xs, _, w, _, _ = _inputs(False, n, n, ei.shape[1], 2, 4, edge=False, mask=False, bipartite=False)
    spec = attention_spec(v2=False, graph=graph, x=xs, attn_weights=w, heads=2, edge_attr=None, concat=True,
                          activation="leaky_relu", activation_alpha=None, dropout=0.0, training=False,
                          dropout_mask=None, return_attention=False, deterministic=False, grad_precision="auto",
                          backend="auto", max_degree="auto")
    planned = plan_module.plan_call(spec)
    assert planned.backend.name == "triton" and planned.fallback_from == "cudnn" and planned.split is None
    torch.testing.assert_close(cudnn_gnn.ops.run.run(planned), cudnn_gnn.gat(graph, xs, w, heads=2,
                                                                             backend="reference"))


# ------------------------------------------------------------------------------ hub rows cut into chunks
@pytest.fixture
def chunk(monkeypatch):
    """Force the chunk size of the work lists (normally 256 to 1024 edges) to ``chunk.set(b)``."""

    class _Set:
        def set(self, b: int) -> None:
            monkeypatch.setattr(tuning, "MIN_CHUNK_E", b)
            monkeypatch.setattr(tuning, "MAX_CHUNK_E", b)

    return _Set()


def test_chunk_size_rule():
    assert tuning.chunk_size(0) == 256 and tuning.chunk_size(10_556) == 256  # Cora
    assert tuning.chunk_size(1_166_243) == 512  # arxiv
    assert tuning.chunk_size(61_859_140) == 1024  # products


def test_size_rules_keep_a_symbolic_edge_count_symbolic():
    """``chunk_size`` and ``edge_span`` of a symbolic edge count (``torch.compile(dynamic=True)``, a sampled
    block's) add range guards only: edge counts of one size class share one graph, where an exact power-of-two
    computation (``bit_length``) would pin each count and recompile for every batch."""
    from torch._dynamo.utils import counters

    def f(x):
        return x * (tuning.chunk_size(x.shape[0]) + tuning.edge_span(x.shape[0]))

    torch._dynamo.reset()
    graphs0 = counters["stats"]["unique_graphs"]
    compiled = torch.compile(f, backend="eager", dynamic=True)
    for e in (300_001, 310_017, 333_333):  # ceil(E / 4096) 74, 76, 82; ceil(E / 2048) 147, 152, 163
        x = torch.ones(e)
        assert torch.equal(compiled(x), f(x))
    assert counters["stats"]["unique_graphs"] - graphs0 == 1


def test_work_list_cuts_rows_into_chunks_heaviest_first():
    """Rows of 0, 10, 1, 19, 0 edges with chunks of 4: rows 1 and 3 are hubs (3 and 5 chunks, slots 0..2 and 3..7),
    the others whole items; fixed shapes P = N + E // B, S = E // B + R, R = min(N, E // (B + 1))."""
    w = tb.work_list(torch.tensor([0, 0, 10, 11, 30, 30], dtype=torch.int32), 30, 4)
    assert w.work.shape == (5 + 7, 4) and w.hub_work.shape == (7 + 5, 4) and w.hubs.shape == (5, 3)
    lengths = (w.work[:, 2] - w.work[:, 1]).tolist()
    assert lengths == sorted(lengths, reverse=True)
    assert sorted(w.work[w.work[:, 3] >= 0, 3].tolist()) == list(range(8))
    assert w.hub_work[:8].tolist() == [[1, 0, 4, 0], [1, 4, 8, 1], [1, 8, 10, 2], [3, 11, 15, 3], [3, 15, 19, 4],
                                       [3, 19, 23, 5], [3, 23, 27, 6], [3, 27, 30, 7]]
    assert bool((w.hub_work[8:] == torch.tensor([0, 0, 0, -2])).all())
    assert w.hubs[:2].tolist() == [[1, 0, 3], [3, 3, 5]] and bool((w.hubs[2:, 2] == 0).all())
    whole = w.work[w.work[:, 3] == -1]
    assert sorted(whole[:, 0].tolist()) == [0, 2, 4]  # empty rows are whole items too (they write zeros)


def _work_list_by_hand(off: list[int], num_edges: int, b: int) -> tuple[list, list, list]:
    """The documented lists, one item at a time (the oracle of the vectorised :func:`tb.work_list`)."""
    n = len(off) - 1
    items, hubs, slot = [], [], 0
    for r in range(n):
        d = off[r + 1] - off[r]
        if d <= b:
            items.append([r, off[r], off[r + 1], -1])
            continue
        count = -(-d // b)
        hubs.append([r, slot, count])
        items += [[r, off[r] + k * b, min(off[r] + (k + 1) * b, off[r + 1]), slot + k] for k in range(count)]
        slot += count
    items += [[0, 0, 0, -2]] * (n + num_edges // b - len(items))
    length = [it[2] - it[1] if it[3] != -2 else -1 for it in items]
    work = [items[i] for i in sorted(range(len(items)), key=lambda i: -length[i])]  # stable
    r_max, s_max = min(n, num_edges // (b + 1)), num_edges // b + min(n, num_edges // (b + 1))
    hub_work = sorted((it for it in items if it[3] >= 0), key=lambda it: it[3])
    hub_work = (hub_work + [[0, 0, 0, -2]] * s_max)[:s_max]
    slot0 = {r: f for r, f, _ in hubs}
    rest, acc = [], 0
    for r in range(n):
        if r not in slot0:
            rest.append([r, acc, 0])
        else:
            acc += [c for h, _, c in hubs if h == r][0]
    return work, hub_work, (hubs + rest)[:r_max]


@pytest.mark.parametrize("seed", range(6))
def test_work_list_equals_the_lists_built_by_hand(seed):
    """Random row lengths (empty rows, rows of exactly a chunk, long hubs): the vectorised lists equal the ones
    built one item at a time, entry for entry."""
    gen = torch.Generator().manual_seed(seed)
    n, b = 1 + seed * 5, 4
    deg = torch.randint(0, 3 * b, (n,), generator=gen)
    deg[torch.randint(0, n, (2,), generator=gen)] = torch.tensor([b, 7 * b + 1])
    off = torch.cat([torch.zeros(1, dtype=torch.long), deg.cumsum(0)])
    e = int(off[-1])
    w = tb.work_list(off, e, b)
    work, hub_work, hubs = _work_list_by_hand(off.tolist(), e, b)
    assert w.work.tolist() == work and w.hub_work.tolist() == hub_work and w.hubs.tolist() == hubs


def test_work_list_without_hubs_when_the_largest_degree_fits_a_chunk():
    """With the largest degree known and at most the chunk, the lists hold the rows only: no chunk, padding or hub
    entries, the same whole items as without it; a known degree above the chunk keeps the upper bounds."""
    offsets = torch.tensor([0, 0, 3, 4, 8, 8])
    bounded = tb.work_list(offsets, 8, 4)
    exact = tb.work_list(offsets, 8, 4, max_degree=4)
    assert bounded.work.shape == (5 + 2, 4) and bounded.hubs.shape == (1, 3)
    assert exact.work.shape == (5, 4) and exact.hub_work.shape == (0, 4) and exact.hubs.shape == (0, 3)
    assert exact.work.tolist() == bounded.work[bounded.work[:, 3] == -1].tolist()
    assert tb.work_list(offsets, 8, 3, max_degree=4).hubs.shape == (2, 3)


@pytest.mark.parametrize("one_gather", [False, True], ids=["two_gather", "one_gather"])
@pytest.mark.slow
def test_whole_rows_list_and_a_short_rows_graph_with_a_long_row(chunk, monkeypatch, one_gather):
    """``whole_rows``: every row one item, in row order, even a row longer than the chunk; a graph marked
    ``short_rows`` takes that list for its destinations and its sources, and a row (or a source's out-edges) far
    longer than the chunk, walked whole by one program, still gives the reference's outputs and every gradient
    (GAT with either backward)."""
    gb = _gat_backward(one_gather)
    offsets = torch.tensor([0, 0, 10, 11, 30, 30], dtype=torch.int32)
    w = tb.work_list(offsets, 30, 4, whole_rows=True)
    assert w.work is offsets and n_items(w.work) == 5  # the offsets are the list: program i walks row i
    assert w.hub_work.shape == (0, 4) and w.hubs.shape == (0, 3)
    chunk.set(4)
    ei, ns, _ = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns).as_rebuilt_every_call(short_rows=True)
    assert graph.short_rows and graph.to_index_dtype(torch.int64).short_rows
    assert int(graph.offsets.diff().max()) > 4  # a row the chunked list would cut
    assert int(graph.reverse_csc()[0].diff().max()) > 4  # and a source
    for v2 in (False, True):
        xs, xd, w_, ea, m = _inputs(v2, ns, ns, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False, seed=5)
        _compare(graph, xs, xd, w_, ea, m, v2=v2, heads=2, concat=True, gat_backward=gb)
    kernel_graph = tb.built_kernel_graph(graph)
    rows, srcs = kernel_graph.rows, kernel_graph.backward_if_built().src
    assert rows.hub_work.shape[0] == 0 and rows.work is graph.offsets
    assert srcs.hub_work.shape[0] == 0 and srcs.work is graph.reverse_csc()[0]


GAT_BACKWARD = {True: ["_bwd_gat_delta_kernel", "_bwd_gat_src_kernel", "_bwd_gat_dst_kernel"],
                False: ["_bwd_dst_kernel", "_bwd_src_kernel"]}
"""The backward launches of a static graph without hubs: GAT's one-gather backward (delta, source pass, destination
sum, whose rows that cross its blocks the node scores' backward joins), or the two-gather one. With a gradient on
the returned attention the delta pass is ``_bwd_gat_delta_att_kernel`` (see :func:`_gat_backward_launches`)."""


def _gat_backward_launches(one_gather: bool, attention_grad: bool) -> list[str]:
    if one_gather and attention_grad:
        return ["_bwd_gat_delta_att_kernel", *GAT_BACKWARD[True][1:]]
    return GAT_BACKWARD[one_gather]

SCORE_KERNELS = ("_node_scores_kernel", "_node_scores_bwd_kernel")
"""GAT's node-score launches, one in the op's forward and, after the one-gather backward, one in its backward (the
scores' gradients folded into the features' and the head vectors'; the two-gather backward folds them by GEMMs),
whether ``x_dst`` is ``x_src`` or another tensor."""


def _attention_launches(launched: list[str]) -> list[str]:
    """The kernel names ``launched`` without the node-score kernels."""
    return [k for k in launched if k not in SCORE_KERNELS]


@pytest.mark.parametrize("one_gather", [True, False], ids=["one_gather", "two_gather"])
@pytest.mark.slow
def test_static_graph_without_hubs_skips_the_hub_launches(one_gather, kernel_launches, monkeypatch):
    """A static CscGraph whose degrees fit a chunk: forward + backward launch the row kernels and nothing else (no
    merge, no pass-1 launch): the forward, then GAT's three backward passes (delta, source, destination sum), or
    the two-gather backward's two, besides the node scores' kernels (forward, and the one-gather backward's fold);
    the same
    graph marked rebuilt every call (no degree sync) keeps the bounded lists
    and launches the merges over padding (GAT's one-gather backward: three, for delta, dx and d score_src; the
    destination sum has no work list). Results agree."""
    gb = _gat_backward(one_gather)
    ns = 40
    ei = torch.randint(0, ns, (2, 300), generator=torch.Generator().manual_seed(3))  # 300 edges > one 256-edge chunk
    results = []
    for rebuilt in (False, True):
        graph = CscGraph.from_edge_index(ei, num_nodes=ns)
        if rebuilt:
            graph = graph.as_rebuilt_every_call()
        xs, xd, w, ea, m = _inputs(False, ns, ns, ei.shape[1], 2, 3, edge=False, mask=False, bipartite=False)
        kernel_launches.clear()
        results.append(_run("triton", graph, xs, xd, w, ea, m, v2=False, heads=2, concat=True, gat_backward=gb))
        names = kernel_launches.names
        assert [k for k in names if k in SCORE_KERNELS] == list(SCORE_KERNELS[:2 if one_gather else 1])
        rows = _attention_launches(names)
        if not rebuilt:
            assert rows == ["_fwd_kernel", *_gat_backward_launches(one_gather, True)], names
        else:
            assert "_fwd_merge_kernel" in rows and "_merge_sum_kernel" in rows, names
            if one_gather:
                assert rows[2:] == ["_bwd_gat_delta_att_kernel", "_merge_sum_kernel", "_bwd_gat_src_kernel",
                                        "_merge_sum_kernel", "_merge_sum_kernel", "_bwd_gat_dst_kernel"], names
    for a, b in zip(*results):
        if a is not None:
            torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_cora_shaped_gat_step_launches_four_backward_kernels_a_layer(kernel_launches, monkeypatch):
    """Two GATConv layers of Cora's shape (8 heads x 8 concatenated, then one head averaged; attention dropout 0.6,
    self-loops) on a static hub-free graph, on the one-gather backward: it launches GAT's three passes per layer and
    the node scores' backward, nothing else, and every gradient equals the reference layers'. The one-gather
    backward is the default rule's choice here (a static graph, tiles of 8 x 8 and 1 x 8)."""
    from cudnn_gnn import GATConv

    n, f = 60, 12
    gen = torch.Generator().manual_seed(11)
    ei = torch.randint(0, n, (2, 240), generator=gen)
    x = torch.randn(n, f, generator=gen)
    grads = []
    for backend in ("triton", "reference"):
        torch.manual_seed(0)
        convs = [GATConv(f, 8, heads=8, dropout=0.6, backend=backend),
                 GATConv(64, 7, heads=1, concat=False, dropout=0.6, backend=backend)]
        xl = x.clone().requires_grad_()
        torch.manual_seed(5)
        out = convs[1](torch.nn.functional.elu(convs[0](xl, ei)), ei)
        kernel_launches.clear()
        out.square().sum().backward()
        if backend == "triton":
            names = kernel_launches.names
            assert names == [*GAT_BACKWARD[True], "_node_scores_bwd_kernel"] * 2, names
        grads.append([xl.grad, *(p.grad for conv in convs for p in conv.parameters())])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


_NO_KERNEL = {"empty", "empty_strided", "new_empty", "new_empty_strided", "view", "_unsafe_view", "as_strided",
              "slice", "select", "unbind", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "reshape",
              "detach", "alias", "split", "narrow", "diagonal"}
"""aten ops that launch no kernel on a GPU (allocations and views): what :func:`_backward_launches` leaves out."""


def _backward_launches(out: torch.Tensor, inputs: list[torch.Tensor], kernel_launches) -> list[str]:
    """Every launch a backward makes from ``out`` (gradient: random, contiguous) into ``inputs``, in order: the
    Triton kernels by name (recorded by :func:`~tests.conftest.kernel_launches`) and the torch ops by their aten name
    (``aten.sum``), recorded by a dispatch mode outside the kernels' launches (the interpreter's own tensor copies are
    not launches)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    kernel_launches.clear()

    class _Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not kernel_launches.launching and name not in _NO_KERNEL:
                kernel_launches.append((f"aten.{name}", func, (), {}))
            return func(*args, **(kwargs or {}))

    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.dtype)
    with _Ops():
        torch.autograd.grad(out, inputs, g)
    return kernel_launches.names


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_training_backward_on_a_static_graph_launches_its_passes_and_one_sum(v2, kernel_launches):
    """The backward of a training call (attention dropout, no attention returned) on a static hub-free graph with
    rows of no edge, whole: GAT's three passes, the node scores' backward (which completes ``d score_dst``: no zeroing
    launch before the destination sum, no join after it) and the sum of the head vectors' partials; GATv2's two
    passes, the sum of its attention vector's per-row partials (no zeroing launch: every row writes its own) and the
    sum of the two gradients of ``x``."""
    from cudnn_gnn import gat, gatv2

    gen = torch.Generator().manual_seed(3)
    n, heads, c = 30, 2, 4
    ei = torch.stack([torch.randint(0, n, (120,), generator=gen), torch.randint(3, n, (120,), generator=gen)])
    graph = CscGraph.from_edge_index(ei, num_nodes=n)  # rows 0-2: no edge
    x = torch.randn(n, heads * c, generator=gen).requires_grad_()
    w = torch.randn((1 if v2 else 2) * heads * c, generator=gen).requires_grad_()
    op = gatv2 if v2 else gat
    out = op(graph, x, w, heads=heads, dropout=0.5, training=True, backend="triton")
    # GATv2's x is its x_src and its x_dst: the op adds the two gradients (input_grads)
    want = (["_bwd_dst_kernel", "_bwd_src_kernel", "aten.sum", "aten.add"] if v2
            else [*GAT_BACKWARD[True], "_node_scores_bwd_kernel", "aten.sum"])
    assert _backward_launches(out, [x, w], kernel_launches) == want


@pytest.mark.parametrize("heads", [2, 3])
@pytest.mark.parametrize("tile", [64, None], ids=["blocks_of_16_edges", "default_blocks"])
def test_light_passes_over_rows_that_cross_blocks_match_the_reference(heads, tile, monkeypatch, kernel_launches):
    """GAT's training backward (no attention returned, so the dense delta pass): the destination sum's segmented
    blocks (16 edges, ``launch={"gat_dst": (16, 4)}`` through :func:`use_options`, with the delta pass's tile moved
    down to 64) cut a 70-edge hub over five blocks, rows end on block edges and inside them, rows with no edge get
    zero; heads padded (3 -> 4). Gradients equal the float64 reference's; launches are the dense delta pass, the
    source pass and the destination sum (its crossing and empty rows completed by the node scores' backward)."""
    from cudnn_gnn import gat
    from cudnn_gnn.backends.triton.kernels import gat_backward

    options = tb.TritonOptions()
    if tile is not None:
        monkeypatch.setattr(gat_backward, "DENSE_TILE", tile)
        options = tb.TritonOptions(launch={"gat_dst": (16, 4)})
    n, c = 24, 3
    gen = torch.Generator().manual_seed(7)
    hub = torch.stack([torch.randint(0, n, (70,), generator=gen), torch.full((70,), 5)])
    light = torch.stack([torch.randint(0, n, (90,), generator=gen), torch.randint(8, n, (90,), generator=gen)])
    ei = torch.cat([hub, light, torch.tensor([[1, 2, 3], [1, 1, 1]])], 1)  # rows 0, 2-4 and 6, 7: no edge
    graph = CscGraph.from_edge_index(ei, num_nodes=n)
    assert int((graph.offsets.diff() == 0).sum()) == 6
    x = torch.randn(n, heads * c, generator=gen, dtype=torch.float64)
    w = torch.randn(2 * heads * c, generator=gen, dtype=torch.float64)
    g_out = torch.randn(n, heads * c, generator=gen, dtype=torch.float64)
    grads = []
    for backend in ("triton", "reference"):
        xs, ws = x.float().requires_grad_(), w.float().requires_grad_()
        if backend == "reference":
            xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        with tb.use_options(options):
            out = gat(graph, xs, ws, heads=heads, backend=backend)
            kernel_launches.clear()
            (out.double() * g_out).sum().backward()
        grads.append((xs.grad.double(), ws.grad.double()))
        if backend == "triton":
            names = kernel_launches.names
            assert _attention_launches(names) == GAT_BACKWARD[True], names
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


LIGHT_SHAPES = {
    "tiny_blocks": {"gat_dst": (2, 1), "scores": (1, 1), "scores_bwd": (2, 2)},
    "head_a_program": {"gat_dst": (16, 4), "scores": (4, 2, 1), "scores_bwd": (8, 1, 1)},
    "wide_blocks": {"gat_dst": (4096, 8), "scores": (128, 8), "scores_bwd": (64, 4)},
}
"""GAT's light passes' launch overrides the tests run: blocks of 2 edges (a 70-edge hub over 35 destination-sum
blocks, so nearly every row crosses a block edge and its reader joins long runs) and one or two rows a node-score
block; one head a node-score program; blocks wider than the graph (one destination-sum program, no crossing)."""


def _light_cases() -> list:
    """``(heads, shapes, bipartite)`` for every :data:`LIGHT_SHAPES` entry, 1, 2, 3 and 8 heads, homogeneous and
    bipartite; the default run takes ``"head_a_program"`` (16-edge blocks: the hub over five) and one case of
    ``"tiny_blocks"``, the rest are slow (1-5 s each on the interpreter)."""
    cases = []
    for shapes in LIGHT_SHAPES:
        for bipartite in (False, True):
            for heads in (1, 2, 3, 8):
                fast = shapes == "head_a_program" or (shapes == "tiny_blocks" and bipartite and heads == 3)
                cases.append(pytest.param(heads, shapes, bipartite, marks=() if fast else pytest.mark.slow,
                                          id=f"{shapes}-{'bipartite' if bipartite else 'homogeneous'}-{heads}"))
    return cases


@pytest.mark.parametrize("heads, shapes, bipartite", _light_cases())
def test_light_pass_launch_overrides_match_the_reference(heads, shapes, bipartite, kernel_launches, monkeypatch):
    """``TritonOptions(launch=...)`` for GAT's destination sum (``"gat_dst"``) and node-score kernels (``"scores"``,
    ``"scores_bwd"``) reaches their launchers (the shapes :func:`tuning.dst_sum_shape` and
    :func:`tuning.node_score_shape` return are the overrides), and the one-gather backward's gradients equal the
    reference's within the float32 tolerance: ``x_dst``'s (bipartite: ``d score_dst a_dst`` alone, the destination
    sum's output), ``x_src``'s and the attention vectors'; 1, 2, 3 (padded to 4) and 8 heads."""
    seen: dict[str, tuple[int, ...]] = {}
    real_dst, real_scores = tuning.dst_sum_shape, tuning.node_score_shape

    def dst_spy(*args):
        seen["gat_dst"] = result = real_dst(*args)
        return result

    def scores_spy(kernel, *args):
        seen[kernel] = result = real_scores(kernel, *args)
        return result

    monkeypatch.setattr(tuning, "dst_sum_shape", dst_spy)
    monkeypatch.setattr(tuning, "node_score_shape", scores_spy)
    n, nd, c = 24, 13 if bipartite else 24, 3
    gen = torch.Generator().manual_seed(11)
    hub = torch.stack([torch.randint(0, n, (70,), generator=gen), torch.full((70,), 5)])
    light = torch.stack([torch.randint(0, n, (60,), generator=gen), torch.randint(7, nd, (60,), generator=gen)])
    ei = torch.cat([hub, light, torch.tensor([[1, 2, 3], [1, 1, 1]])], 1)  # rows 0, 2-4 and 6: no edge
    graph = CscGraph.from_edge_index(ei, size=(n, nd))
    xs, xd, w, _, _ = _inputs(False, n, nd, ei.shape[1], heads, c, edge=False, mask=False, bipartite=bipartite,
                              seed=5)
    x_dst = xd if bipartite else xs
    leaves = [t for t in (xs, xd, w) if t is not None]
    g_out = torch.randn(nd, heads * c, generator=gen)
    grads = []
    for options in (tb.TritonOptions(gat_backward="one_gather", launch=LIGHT_SHAPES[shapes]), None):
        spec = call_spec(graph, xs, x_dst, w, v2=False, heads=heads, concat=True)
        if options is None:
            out, _ = reference.mha_gat(spec)
        else:
            kernel_launches.clear()
            out, _ = tb.triton_gat(spec, options=options)
        grads.append(torch.autograd.grad((out * g_out).sum(), leaves))
    names = kernel_launches.names
    assert _attention_launches(names) == ["_fwd_kernel", *GAT_BACKWARD[True]], names
    assert [k for k in names if k in SCORE_KERNELS] == list(SCORE_KERNELS), names
    for kernel, (block, warps, *hg) in LIGHT_SHAPES[shapes].items():
        got = seen[kernel]
        if kernel == "gat_dst":
            assert got == (block, tuning.next_pow2(heads), warps), got
        else:
            assert (got[0], got[4]) == (block, warps) and got[1] == (hg[0] if hg else real_scores(kernel, heads, c)[1])
    names = ("x_src", "x_dst", "attn_weights") if bipartite else ("x", "attn_weights")
    for name, a, b in zip(names, *grads, strict=True):
        torch.testing.assert_close(a, b, **TOL[torch.float32], msg=lambda m, name=name: f"{name}: {m}")


def test_light_pass_shapes_default_to_todays_rule():
    """With no override, GAT's destination sum takes blocks of ``max(16, 2048 / next_pow2(H))`` edges and a warp per
    256 of them (2048 edges on 8 warps at one head, 256 on one at 8), the node-score kernel ``clamp(4096 / (HG *
    BLOCK_C), 1, 64)`` rows a block on ``min(4, HG)`` warps and its backward ``clamp(512 / (HG * BLOCK_C), 1, 64)``
    rows on ``max(1, 4 / HG)``, :func:`default_launch_shape`' head groups; an override replaces its own kernel's
    shape only, and the kernels' codes keep their indices (a call's launch codes hold them)."""
    assert tuning.KERNELS[:5] == ("fwd", "dst", "src", "gat_src", "gat_delta")
    assert tuning.dst_sum_shape(1) == (2048, 1, 8)
    assert tuning.dst_sum_shape(8) == (256, 8, 1)
    assert tuning.dst_sum_shape(3) == (512, 4, 2)
    assert tuning.dst_sum_shape(256) == (16, 256, 1)
    assert tuning.node_score_shape("scores", 8, 8) == (64, 8, 8, 1, 4)  # the GAT paper's hidden layer
    assert tuning.node_score_shape("scores", 1, 40) == (64, 1, 64, 1, 1)  # its output layer on arxiv
    assert tuning.node_score_shape("scores", 8, 32) == (16, 8, 32, 1, 4)
    assert tuning.node_score_shape("scores", 2, 550) == (4, 1, 1024, 2, 1)
    assert tuning.node_score_shape("scores_bwd", 8, 8) == (8, 8, 8, 1, 1)
    assert tuning.node_score_shape("scores_bwd", 1, 40) == (8, 1, 64, 1, 4)
    assert tuning.node_score_shape("scores_bwd", 8, 32) == (2, 8, 32, 1, 1)
    assert tuning.node_score_shape("scores_bwd", 2, 550) == (1, 1, 1024, 2, 4)
    codes = tb.TritonOptions(launch={"gat_dst": (64, 2), "scores": (8, 1, 2), "scores_bwd": (32, 8)}).launch_codes()
    assert tuning.dst_sum_shape(8, codes) == (64, 8, 2)
    assert tuning.node_score_shape("scores", 8, 8, codes) == (8, 2, 8, 4, 1)
    assert tuning.node_score_shape("scores_bwd", 8, 8, codes) == (32, 8, 8, 1, 8)
    other = tb.TritonOptions(launch={"fwd": (2, 1), "gat_src": (4, 2, 1)}).launch_codes()
    assert tuning.dst_sum_shape(8, other) == tuning.dst_sum_shape(8)
    assert tuning.node_score_shape("scores", 8, 8, other) == tuning.node_score_shape("scores", 8, 8)


@pytest.mark.parametrize("bad, error", [
    ({"gat_dst": (16, 4, 2)}, r"launch\['gat_dst'\] must be \(BLOCK_E, num_warps\): the destination sum takes every "
                              r"head in one program, got \(16, 4, 2\)"),
    ({"scores": (48, 4)}, r"launch\['scores'\] must hold powers of two, got \(48, 4\)"),
    ({"scores": (16, 4, 3)}, r"launch\['scores'\] must hold powers of two, got \(16, 4, 3\)"),
    ({"scores_bwd": (0, 4)}, r"launch\['scores_bwd'\] must be \(BLOCK_E, num_warps\) or .* positive ints, got \(0, 4\)"),
    ({"scores_bwd": (16, 64)}, r"launch\['scores_bwd'\] must ask for at most 32 warps, got 64"),
    ({"gat_dst": (16.0, 4)}, r"launch\['gat_dst'\] must be .* positive ints, got \(16.0, 4\)"),
    ({"score": (16, 4)}, r"launch must name kernels of .*'gat_dst', 'scores', 'scores_bwd', got 'score'"),
], ids=["gat_dst_hg", "not_pow2", "hg_not_pow2", "zero", "too_many_warps", "float", "unknown_name"])
def test_light_pass_bad_overrides_refused_before_any_kernel(bad, error, kernel_launches):
    """A light pass's bad override is refused where the options are made (``ValueError``, "X must Y, got Z"), before
    any kernel runs."""
    with pytest.raises(ValueError, match=error):
        tb.TritonOptions(launch=bad)
    assert kernel_launches.names == []


@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.slow
def test_gat_delta_from_the_rounded_bfloat16_output(concat, monkeypatch):
    """GAT's one-gather backward takes the softmax row sums ``delta_i = <dout_i, out_i>`` from the saved output: with
    concat the bfloat16 output itself (rounded, as FlashAttention does), without it the float32 per-head output.
    Against the float64 reference its gradients are within the bf16 tolerances and within 3x the error of the
    reference's own bfloat16 path on the same inputs (the GPU suite's bound); with a dropout mask, edge scores and
    a gradient on the attention."""
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, m = _inputs(False, ns, nd, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False,
                               dtype=torch.bfloat16)
    _, _, grads = _compare(graph, xs, xd, w, ea, m, v2=False, heads=2, concat=concat, gat_backward="one_gather")
    exact = [t.detach().double().requires_grad_() for t in (xs, w, ea)]
    _, _, ref = _run("reference", graph, exact[0], None, exact[1], exact[2], m, v2=False, heads=2, concat=concat)
    _, _, same = _run("reference", graph, xs, xd, w, ea, m, v2=False, heads=2, concat=concat)

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())

    for name, a, b, lp in zip(("x_src", "attn_weights", "edge_attr"), grads, ref, same, strict=True):
        assert rel(a, b) <= max(3 * rel(lp, b), 1e-3), name


@pytest.mark.parametrize("one_gather", [True, False], ids=["one_gather", "two_gather"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
@pytest.mark.slow
def test_gat_attention_gradient_with_dropout_in_chunks(concat, one_gather, chunk, monkeypatch):
    """A gradient on the returned attention with a strided dropout mask, hub rows and sources in chunks of 4: GAT's
    delta pass walks the row's edges for ``sum_e alpha_e datt_e`` (a chunk adds the row's ``<dout_i, out_i>`` once,
    in its first chunk), the merge sums the chunks; also a loss on the attention alone. The two-gather backward
    (the default on graphs rebuilt every call and wide tiles) on the same cases. Bitwise equal on a second run."""
    gb = _gat_backward(one_gather)
    chunk.set(4)
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns, index_dtype=torch.int32)
    xs, xd, w, ea, m = _inputs(False, ns, nd, ei.shape[1], 3, 3, edge=True, mask=True, bipartite=False, seed=12)
    first = _compare(graph, xs, xd, w, ea, m, v2=False, heads=3, concat=concat, act="elu", alpha=1.0, gat_backward=gb)
    second = _run("triton", graph, xs, xd, w, ea, m, v2=False, heads=3, concat=concat, act="elu", alpha=1.0,
                  gat_backward=gb)
    assert all(torch.equal(a, b) for a, b in zip(first[2], second[2]))
    kw = dict(v2=False, heads=3, concat=concat, activation_name="leaky_relu", activation_alpha=0.2)
    _attention_only_grads_match(graph, xs, w, ea, kw)


@pytest.mark.parametrize("variant", ["gat_one_gather", "gat_two_gather", "gatv2"])
def test_counter_based_dropout_in_chunks_matches_the_reference(variant, chunk):
    """Counter-based dropout drawn in-kernel (the forward and the attention's normalisation in the merge kernel; the
    delta pass, the source and destination passes read the keep flags the forward wrote,
    ``test_triton_keep_flags.py``) on hub rows and sources in chunks of 4, with a gradient on the
    returned attention: output, attention and every gradient equal the reference's on the mask it materialises
    for the same seed (:func:`cudnn_gnn.attention_dropout_mask`); bitwise equal on a second run; another seed
    drops other edges."""
    v2 = variant == "gatv2"
    chunk.set(4)
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, _ = _inputs(v2, ns, nd, ei.shape[1], 3, 3, edge=True, mask=False, bipartite=False, seed=5)
    seed = torch.tensor([987654321], dtype=torch.int64)
    kw = dict(v2=v2, heads=3, concat=not v2, drop=(0.4, seed),
              gat_backward="two_gather" if variant == "gat_two_gather" else "one_gather")
    first = _compare(graph, xs, xd, w, ea, None, **kw)
    second = _run("triton", graph, xs, xd, w, ea, None, **kw)
    assert torch.equal(first[0], second[0]) and all(torch.equal(a, b) for a, b in zip(first[2], second[2]))
    dropped = first[1] == 0
    assert 0.3 < dropped.float().mean().item() < 0.5
    other = _run("triton", graph, xs, xd, w, ea, None, **{**kw, "drop": (0.4, seed + 1)})
    assert not torch.equal(other[1] == 0, dropped)


def test_torch_philox_is_tritons():
    """:func:`cudnn_gnn._philox.philox4x32` (the masks of the reference and cuDNN backends) gives ``tl.philox``'s
    four outputs (Philox-4x32-10, what Triton's ``tl.rand``/``tl.randint4x`` build on) for the same key and counters,
    the high counter words and large keys included. In a fresh interpreter process: ``tl.philox`` is a
    ``@triton.jit`` function, which Triton's interpreter calls only where ``TRITON_INTERPRET=1`` was set before
    triton was imported."""
    code = """
import torch, triton, triton.language as tl
from cudnn_gnn._philox import philox4x32

@triton.jit
def philox_kernel(seed_ptr, c0_ptr, c1_ptr, c2_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    seed = tl.load(seed_ptr)
    c0 = tl.load(c0_ptr + i).to(tl.uint32)
    c1 = tl.load(c1_ptr + i).to(tl.uint32)
    c2 = tl.load(c2_ptr + i).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c0 * 0)
    for k, r in ((0, r0), (1, r1), (2, r2), (3, r3)):
        tl.store(out_ptr + i * 4 + k, r.to(tl.int64))

gen = torch.Generator().manual_seed(0)
c = [torch.randint(0, 2**32, (64,), generator=gen, dtype=torch.int64) for _ in range(3)]
c[1][:32] = 0  # edges below 2**32: the high word 0
for seed in (5, 2**61 + 12345):
    out = torch.empty(64, 4, dtype=torch.int64)
    philox_kernel[(1,)](torch.tensor([seed]), *c, out, N=64)
    assert torch.equal(out & 0xFFFFFFFF, torch.stack(philox4x32(seed, *c), 1)), seed
print("ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_training_call_carries_a_seed_and_no_mask_or_coo_map():
    """What the Triton kernels get for dropout in training: the int64 seed [1] and its threshold, no ``[E, H]``
    tensor and no CSC -> COO map (the draws are keyed by CSC position); an explicit mask goes in CSC order, contiguous
    float32 (the kernels read a row's factors as one run)."""
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, m = _inputs(False, ns, nd, ei.shape[1], 2, 4, edge=False, mask=True, bipartite=False)
    seed = torch.tensor([5], dtype=torch.int64)
    spec = call_spec(graph, xs, xs, w, v2=False, heads=2, concat=True, dropout=0.6, dropout_seed=seed)
    call, _ = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)
    assert call.dropout is seed and call.map_csc_to_coo is None
    assert call.kernel_dropout == triton_call.KernelDropout(seed, round(0.6 * 2**31))
    spec = call_spec(graph, xs, xs, w, None, m, v2=False, heads=2, concat=True)
    call, _ = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)
    assert call.map_csc_to_coo is None and call.dropout.is_contiguous() and call.dropout.dtype == torch.float32
    assert torch.equal(call.dropout, m[graph.map_csc_to_coo.long()])


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.slow
def test_catalogue_with_tiny_chunks_matches_reference(name, v2, chunk):
    """Chunks of 3 edges: every row and source of more than 3 edges is cut (forward merge, backward delta merge,
    destination and source partial sums), with edge features, a dropout mask, returned attention with a gradient;
    GAT int64 concatenated, GATv2 int32 mean over heads."""
    chunk.set(3)
    ei, ns, nd = GRAPHS[name]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=torch.int32 if v2 else torch.int64)
    xs, xd, w, ea, m = _inputs(v2, ns, nd, ei.shape[1], 2, 3, edge=True, mask=True, bipartite=ns != nd, seed=8)
    _compare(graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=not v2)


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.parametrize("b", [7, 80])
@pytest.mark.slow
def test_a_150_edge_hub_in_and_out_in_chunks_matches_reference_and_repeats_bitwise(v2, b, chunk):
    """A destination with 180 in-edges and a source with 166 out-edges (both hubs), H = 3 (padded to 4), C = 5.
    Chunks of 7 (26 and 24 chunks of small blocks) or 80 (80 = a big block of 64 + a small one; 20 = 16 + 4). Bitwise
    equal on a second run; the work lists really hold hubs."""
    chunk.set(b)
    hub_in = torch.stack([torch.arange(150) % 9, torch.zeros(150, dtype=torch.long)])
    hub_out = torch.stack([torch.full((150,), 8), torch.arange(150) % 5])
    light = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 1, 2, 3, 3, 3]])
    ei = torch.cat([hub_in, hub_out, light], 1)
    ei = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(4))]
    graph = CscGraph.from_edge_index(ei, size=(9, 6), index_dtype=torch.int32 if v2 else torch.int64)
    xs, xd, w, ea, m = _inputs(v2, 9, 6, ei.shape[1], 3, 5, edge=True, mask=True, bipartite=True, seed=9)
    first = _compare(graph, xs, xd, w, ea, m, v2=v2, heads=3, concat=True)
    assert torch.equal(first[0][5], torch.zeros_like(first[0][5]))  # zero in-degree
    second = _run("triton", graph, xs, xd, w, ea, m, v2=v2, heads=3, concat=True)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert all(torch.equal(a, b) for a, b in zip(first[2], second[2]))
    kernel_graph = tb.built_kernel_graph(graph)
    rows, srcs = kernel_graph.rows, kernel_graph.backward_if_built().src
    assert int(rows.hubs[0, 0]) == 0 and int(rows.hubs[0, 2]) == -(-180 // b)  # destination 0: 150 + 30 edges
    assert int(srcs.hubs[:, 2].max()) == -(-166 // b)  # source 8: 150 + 16 edges


@pytest.mark.slow
def test_chunked_bfloat16_and_gradient_through_attention_only(chunk):
    """Chunks of 4 on the power-law graph in bfloat16 (GATv2), and a loss on the returned attention alone (GAT)."""
    chunk.set(4)
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, m = _inputs(True, ns, nd, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False,
                               dtype=torch.bfloat16)
    _compare(graph, xs, xd, w, ea, m, v2=True, heads=2, concat=True)
    xs, _, w, ea, _ = _inputs(False, ns, nd, ei.shape[1], 2, 2, edge=True, mask=False, bipartite=False)
    kw = dict(v2=False, heads=2, concat=True, activation_name="leaky_relu", activation_alpha=0.2)
    _attention_only_grads_match(graph, xs, w, ea, kw)


def test_launch_shapes_tuned_for_narrow_tiles():
    """The tuned shapes (measured faster on the H200): GAT's forward one warp and 8 KiB of gathered rows a block in
    float32, 2 KiB in 16-bit; its destination pass one warp at 8 KiB, its source pass 16 KiB; its one-gather source
    pass two warps and two edges a block (2 KiB in float32 on full 256-wide tiles, one warp at 16 KiB elsewhere;
    1 KiB in 16-bit), its delta pass one warp in float32;
    GATv2's forward two warps and two edges a block, its float32 backward one warp at 8 KiB, its 16-bit backward two
    warps at 1 KiB; tiles wider than 256 without an entry of their own, the shared shape."""
    from cudnn_gnn.backends.triton.tuning import default_launch_shape, launch_shape

    assert launch_shape("fwd", 8, 32, False, 4) == (8, 8, 32, 1)
    assert launch_shape("fwd", 8, 32, False, 2) == (4, 8, 32, 1)
    assert launch_shape("dst", 8, 32, False, 2) == (16, 8, 32, 1)
    assert launch_shape("src", 8, 32, False, 4) == (16, 8, 32, 1)
    assert launch_shape("src", 8, 32, False, 2) == (32, 8, 32, 1)
    assert launch_shape("gat_src", 8, 32, False, 4) == (2, 8, 32, 2)
    assert launch_shape("gat_src", 1, 47, False, 4) == (32, 1, 64, 1)  # narrower: TUNED_SHAPES' 16 KiB
    assert launch_shape("gat_src", 4, 47, False, 4) == (16, 4, 64, 1)  # 256 wide, padded: the same
    assert launch_shape("gat_src", 8, 32, False, 2) == (2, 8, 32, 2)
    assert launch_shape("gat_delta", 8, 32, False, 4) == (2, 8, 32, 1)
    assert launch_shape("dst", 8, 32, True, 4) == (8, 8, 32, 1)
    assert launch_shape("dst", 8, 32, True, 2) == (2, 8, 32, 2)
    assert launch_shape("src", 8, 32, True, 2) == (2, 8, 32, 2)
    assert launch_shape("fwd", 8, 32, True, 4) == (2, 8, 32, 2)
    assert launch_shape("fwd", 8, 32, True, 2) == (2, 8, 32, 2)
    for args in (("fwd", 4, 256, False, 4), ("src", 3, 250, False, 2)):
        block_e, _, hg, block_c, warps = default_launch_shape(*args[1:4])
        assert launch_shape(*args) == (block_e, hg, block_c, warps)
    # full 64-wide tiles (8 x 8: the GAT paper's hidden layer): TUNED_SHAPES' full_64, one warp for the forward and
    # GAT's source pass, 4 edges a block but 8 for the float32 source pass; the delta pass keeps "narrow"'s entry
    assert launch_shape("fwd", 8, 8, False, 4) == (4, 8, 8, 1)
    assert launch_shape("gat_src", 8, 8, False, 4) == (8, 8, 8, 1)
    assert launch_shape("gat_delta", 8, 8, False, 4) == (8, 8, 8, 1)
    assert launch_shape("fwd", 8, 8, False, 2) == (4, 8, 8, 1)
    assert launch_shape("gat_src", 8, 8, False, 2) == (4, 8, 8, 1)
    # one padded head 64 wide (1 x 40, the output layer): "narrow" in float32, pad_64 in bfloat16 (the forward 32
    # edges a block, the source pass 8, one warp each)
    assert launch_shape("fwd", 1, 40, False, 4) == (32, 1, 64, 1)
    assert launch_shape("gat_src", 1, 40, False, 4) == (32, 1, 64, 1)
    assert launch_shape("fwd", 1, 40, False, 2) == (32, 1, 64, 1)
    assert launch_shape("gat_src", 1, 40, False, 2) == (8, 1, 64, 1)
    # 512-wide tiles (4 x 128 in bfloat16, the sampled papers100M model): TUNED_SHAPES' wide_512, one warp, the forward
    # 8 edges a block, the source pass 2; float32, GATv2 and the destination pass keep the shared shape
    assert launch_shape("fwd", 4, 128, False, 2) == (8, 4, 128, 1)
    assert launch_shape("src", 4, 128, False, 2) == (2, 4, 128, 1)
    for args in (("dst", 4, 128, False, 2), ("fwd", 4, 128, False, 4), ("src", 4, 128, True, 2)):
        block_e, _, hg, block_c, warps = default_launch_shape(*args[1:4])
        assert launch_shape(*args) == (block_e, hg, block_c, warps)


@pytest.mark.slow
def test_wide_tuned_shapes_match_the_reference(chunk, monkeypatch):
    """GAT at 4 heads x 128 with its forward and source pass on ``TUNED_SHAPES``' 512-wide entries (blocks of 8 and 2 edges;
    the bfloat16 entries given to float32 here, so that the comparison is float32's) on a power-law graph with a row
    and a source cut into chunks: outputs, attention and every gradient against the reference, within float32
    rounding of the largest value (sums over 128 channels)."""
    from cudnn_gnn.backends.triton import tuning as kernels

    # the bfloat16 entries' blocks (8 and 2 edges at 512 wide) given to float32: twice the bytes
    wide = {(k, v2, 4, tile): (2 * nbytes, warps) for (k, v2, _, tile), (nbytes, warps) in kernels.TUNED_SHAPES.items()
            if tile == "wide_512"}
    monkeypatch.setattr(kernels, "TUNED_SHAPES", {**kernels.TUNED_SHAPES, **wide})
    kernels.launch_shape.cache_clear()
    assert kernels.launch_shape("src", 4, 128, False, 4)[0] == 2
    chunk.set(4)
    ei, ns, _ = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, m = _inputs(False, ns, ns, ei.shape[1], 4, 128, edge=True, mask=True, bipartite=False, seed=12)
    try:
        got = _run("triton", graph, xs, xd, w, ea, m, v2=False, heads=4, concat=True)
    finally:
        kernels.launch_shape.cache_clear()  # its cache holds the patched table's shapes
    want = _run("reference", graph, xs, xd, w, ea, m, v2=False, heads=4, concat=True)
    for a, b in zip((got[0], got[1], *got[2]), (want[0], want[1], *want[2]), strict=True):
        if b is not None:  # float32 sums over 128 channels: rounding relative to the largest value
            assert float((a - b).detach().abs().max()) <= 1e-5 * float(b.detach().abs().max()) + 1e-6


@pytest.mark.slow
def test_tuned_backward_shapes_match_the_reference(monkeypatch):
    """The backward passes on their tuned shapes (few warps, blocks of 32 edges here) with a 40-edge row cut into
    chunks of 16, and light rows: GAT and GATv2, float32 (the interpreter ignores num_warps; the blocks differ)."""
    from cudnn_gnn.backends.triton import tuning as kernels

    monkeypatch.setattr(tuning, "MIN_CHUNK_E", 16)
    monkeypatch.setattr(tuning, "MAX_CHUNK_E", 16)
    src = torch.arange(70) % 11
    dst = torch.cat([torch.zeros(40, dtype=torch.long), torch.arange(30) % 6 + 1])
    ei = torch.stack([src, dst])
    graph = CscGraph.from_edge_index(ei, num_nodes=11)
    for v2 in (False, True):
        assert kernels.launch_shape("dst", 2, 4, v2, 4)[3] == 1 and kernels.launch_shape("src", 2, 4, v2, 4)[3] == 1
        xs, xd, w, ea, m = _inputs(v2, 11, 11, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False, seed=9)
        _compare(graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=True)


def test_score_matrix_is_the_block_diagonal_of_the_head_vectors():
    from cudnn_gnn.backends.triton.call import _score_matrix

    a = torch.randn(3 * 5, dtype=torch.float64)
    torch.testing.assert_close(_score_matrix(a, 3), torch.block_diag(*a.float().view(3, 5, 1).unbind(0)))


@pytest.mark.parametrize("bipartite", [False, True], ids=["homogeneous", "bipartite"])
@pytest.mark.parametrize("edge", [False, True], ids=["no_edges", "edge_scores"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("one_gather", [True, False], ids=["fold_kernel", "fold_gemm"])
@pytest.mark.slow
def test_gat_node_scores_inside_the_op_and_their_gradients_folded(bipartite, edge, dtype, one_gather, kernel_launches,
                                                                   monkeypatch):
    """GAT's op computes its node scores itself (one ``_node_scores_kernel`` launch, ``SCORE_TILE`` moved down so
    that its programs end inside both tensors; 3 heads of width 5, padded) and folds their gradients into those of
    ``x_src``, ``x_dst`` and ``attn_weights``: after the one-gather backward by ``_fold_node_scores`` (one
    ``_node_scores_bwd_kernel`` launch, here of 3 programs that walk two blocks of 8 rows each, the last one ending
    past both tensors' rows), after the two-gather one by ``_fold_node_scores_gemm``'s GEMMs: one autograd
    node for the whole call, every
    gradient equal to the reference's (bfloat16: norm-wise against float64, see below), homogeneous (``x_dst`` is
    ``x_src``: one gradient) or bipartite, with edge scores or without, float32 and bfloat16. The edge part of
    ``attn_weights``' gradient comes from the edge scores alone."""
    gb = _gat_backward(one_gather)
    from cudnn_gnn.backends.triton import tuning as kernels

    monkeypatch.setattr(kernels, "SCORE_TILE", 256)
    monkeypatch.setattr(kernels, "SCORE_BWD_TILE", 256)
    monkeypatch.setattr(kernels, "SCORE_BWD_PROGRAMS", 4)
    h, c, ns = 3, 5, 41
    nd = 14 if bipartite else ns
    gen = torch.Generator().manual_seed(3)
    ei = torch.stack([torch.randint(0, ns, (120,), generator=gen), torch.randint(0, nd, (120,), generator=gen)])
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    xs, xd, w, ea, m = _inputs(False, ns, nd, ei.shape[1], h, c, edge=edge, mask=True, bipartite=bipartite,
                               dtype=dtype, seed=13)
    kernel_launches.clear()
    if dtype == torch.float32:
        out, _, grads = _compare(graph, xs, xd, w, ea, m, v2=False, heads=h, concat=True, gat_backward=gb)
    else:  # bfloat16: against the float64 reference, within 8x the bfloat16 reference's own error (norm-wise)
        out, _, grads = _run("triton", graph, xs, xd, w, ea, m, v2=False, heads=h, concat=True, gat_backward=gb)
        _, _, same = _run("reference", graph, xs, xd, w, ea, m, v2=False, heads=h, concat=True)
        exact = [None if t is None else t.detach().double().requires_grad_() for t in (xs, xd, w, ea)]
        _, _, ref = _run("reference", graph, *exact, m, v2=False, heads=h, concat=True)
        for a, b, lp in zip(grads, ref, same, strict=True):
            assert a.dtype == lp.dtype
            rel = float((a.double() - b).norm() / b.norm())
            assert rel <= 8 * max(float((lp.double() - b).norm() / b.norm()), 2**-8), rel
    names = kernel_launches.names
    assert names.count("_node_scores_kernel") == 1, names
    assert names.count("_node_scores_bwd_kernel") == int(one_gather), names
    assert out.grad_fn is not None and type(out.grad_fn).__name__ == "GatAttentionBackward"
    w_grad = grads[2 if bipartite else 1]
    assert w_grad.shape == w.shape and (edge or torch.count_nonzero(w_grad[2 * h * c:]) == 0)


def _as_dst_sum(gd: torch.Tensor, gen: torch.Generator, block: int = 4):
    """``(d score_dst, gd')``: ``gd [Nd, H]`` as GAT's destination sum leaves it
    (:class:`~cudnn_gnn.backends.triton.kernels.gat_backward.DstScoreGrad`) on a graph whose rows have 0 to 9 edges
    in blocks of ``block``: a row within one block in ``rows``; a row that crosses blocks as random runs in ``part``
    (its first block's slot 1, the following blocks' slot 0) that add up to it; a row with no edge nowhere. NaN
    everywhere the reader must not look. ``gd'``: ``gd`` with the rows that have no edge zeroed (what it reads)."""
    from cudnn_gnn.backends.triton.kernels.gat_backward import DstScoreGrad

    nd, h = gd.shape
    lengths = torch.randint(0, 10, (nd,), generator=gen)
    lengths[1::4] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    e = int(offsets[-1])
    rows, part = torch.full_like(gd, float("nan")), torch.full((max(1, -(-e // block)), 2, h), float("nan"))
    want = gd.clone()
    kinds = set()
    for r in range(nd):
        start, end = int(offsets[r]), int(offsets[r + 1])
        b0, b1 = start // block, (end - 1) // block
        if start == end:
            want[r] = 0.0
            kinds.add("empty")
        elif b0 == b1:
            rows[r] = gd[r]
            kinds.add("one block")
        else:
            runs = torch.randn(b1 - b0, h, generator=gen)  # the last block's run makes up the rest
            part[b0, 1] = runs[0]
            for k in range(b0 + 1, b1):
                part[k, 0] = runs[k - b0]
            part[b1, 0] = gd[r] - runs.sum(0)
            kinds.add("crosses")
    assert kinds == {"empty", "one block", "crosses"}
    return DstScoreGrad(rows, part, offsets, block), want


@pytest.mark.parametrize("bipartite", [False, True], ids=["homogeneous", "bipartite"])
@pytest.mark.parametrize("heads, c", [(3, 5), (2, 550)], ids=["3x5", "2x550"])
def test_node_scores_backward_kernel_against_float64(heads, c, bipartite, monkeypatch):
    """``launch_node_scores_backward`` alone against float64 sums: ``d_x`` updated in place (both score terms where
    ``x_dst`` is ``x_src``), ``d_x_dst`` written where it is its own tensor, the head vectors' gradient; rows walked
    by 3 programs of several blocks each (the last one past the rows), and at 2 x 550 one head a program (two head
    groups). ``d score_dst`` comes as the destination sum leaves it (:func:`_as_dst_sum`: rows within a block, rows
    that cross blocks as runs, rows with no edge), which the kernel completes per row."""
    from cudnn_gnn.backends.triton import kernels

    monkeypatch.setattr(tuning, "SCORE_BWD_PROGRAMS", 3)
    monkeypatch.setattr(tuning, "SCORE_BWD_TILE", 256)
    gen = torch.Generator().manual_seed(21)
    n, nd, d = 37, 11 if bipartite else 37, heads * c
    x = torch.randn(n, d, generator=gen)
    xd = torch.randn(nd, d, generator=gen) if bipartite else None
    a = torch.randn(2 * d, generator=gen)
    gs = torch.randn(n, heads, generator=gen)
    g_dst, gd = _as_dst_sum(torch.randn(nd, heads, generator=gen), gen)
    base = torch.randn(n, d, generator=gen)
    dx, dxd = base.clone(), None if xd is None else torch.full((nd, d), float("nan"))
    da = kernels.launch_node_scores_backward(x, xd, a, heads, gs, g_dst, dx, dxd)
    a64 = a.double().view(2, heads, c)
    src = (gs.double()[:, :, None] * a64[0]).reshape(n, d)
    dst = (gd.double()[:, :, None] * a64[1]).reshape(nd, d)
    x2 = (x if xd is None else xd).double().view(nd, heads, c)
    want_da = torch.cat([(gs.double()[:, :, None] * x.double().view(n, heads, c)).sum(0).reshape(-1),
                         (gd.double()[:, :, None] * x2).sum(0).reshape(-1)])
    torch.testing.assert_close(da.double(), want_da, rtol=1e-5, atol=1e-5)
    if xd is None:
        torch.testing.assert_close(dx.double(), base.double() + src + dst, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(dx.double(), base.double() + src, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dxd.double(), dst, rtol=1e-5, atol=1e-5)


def test_gat_node_scores_stay_float32_under_autocast():
    """Under ``torch.autocast(bfloat16)`` (how the benchmarks and examples run bf16) the node scores are the float32
    sums of the bfloat16 features (the score kernel reads them in their own dtype and sums in float32), not a 16-bit
    GEMM's rounded output: within float32 rounding of the exact sums, for ``x_dst`` as ``x_src`` and as its own
    tensor."""
    from cudnn_gnn.backends.triton import kernels

    h, c = 2, 16
    gen = torch.Generator().manual_seed(4)
    xs = torch.randn(33, h * c, generator=gen).to(torch.bfloat16)
    xd = torch.randn(9, h * c, generator=gen).to(torch.bfloat16)
    w = torch.randn(2 * h * c, generator=gen)
    for x_dst in (None, xd):
        with torch.autocast("cpu", torch.bfloat16):
            got = kernels.launch_node_scores(xs, x_dst, w, h)
        want = [(x.double().view(-1, h, c) * a.double().view(h, c)).sum(-1)
                for x, a in ((xs, w[:h * c]), (xs if x_dst is None else x_dst, w[h * c:]))]
        for a, b in zip(got, want, strict=True):
            assert a.dtype == torch.float32 and a.is_contiguous()
            torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ GATv2's fused edge projection
@pytest.fixture
def fused(monkeypatch):
    """Let the tiny test graphs take the fused edge projection (their ``[P, H*C, De]`` weight-gradient partials are
    not below a quarter of the ``[E, H*C]`` buffer, so the rule would project them) and record each call's path
    (True: fused) in the returned list."""
    monkeypatch.setattr(tuning, "FUSED_EXTRA_SHARE", 1e9)
    paths: list[bool] = []
    real = triton_call.gatv2_edge_inputs

    def spy(*args, **kwargs):
        ea, ew = real(*args, **kwargs)
        paths.append(ew is not None)
        return ea, ew

    monkeypatch.setattr(triton_call, "gatv2_edge_inputs", spy)
    return paths


def _raw_edges(e: int, heads: int, c: int, de: int, dtype: torch.dtype = torch.float32, seed: int = 0):
    """Raw edge features ``[E, De]`` and a ``lin_edge.weight`` ``[H*C, De]``, leaves that require grad."""
    g = torch.Generator().manual_seed(100 + seed)
    ea = torch.randn(e, de, generator=g).to(dtype).requires_grad_()
    ew = (torch.randn(heads * c, de, generator=g) / de**0.5).to(dtype).requires_grad_()
    return ea, ew


@pytest.mark.parametrize("tiny_chunks", [False, True], ids=["rows", "chunks_of_3"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.slow
def test_fused_edge_projection_catalogue_matches_reference(name, tiny_chunks, fused, chunk):
    """Every catalogue graph with raw edge features (De = 3) and lin_edge.weight: outputs, attention and the
    gradients of x_src, x_dst, attn_weights, edge_attr and the weight equal the reference (which projects in torch);
    with a dropout mask, bipartite where the graph is; whole rows (int64, concat) or chunks of 3 edges cutting every
    longer row and source (int32, mean over heads)."""
    if tiny_chunks:
        chunk.set(3)
    ei, ns, nd = GRAPHS[name]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=torch.int32 if tiny_chunks else torch.int64)
    xs, xd, w, _, m = _inputs(True, ns, nd, ei.shape[1], 2, 3, edge=False, mask=True, bipartite=ns != nd, seed=8)
    ea, ew = _raw_edges(ei.shape[1], 2, 3, 3)
    out, _, _ = _compare(graph, xs, xd, w, ea, m, v2=True, heads=2, concat=not tiny_chunks, ew=ew)
    assert fused and all(fused)
    if graph.num_edges:  # zero in-degree destinations: zero rows
        empty = graph.offsets.diff() == 0
        assert torch.equal(out[empty], torch.zeros_like(out[empty]))


@pytest.mark.parametrize("act", reference.ACTIVATIONS)
def test_fused_edge_projection_every_activation(act, fused):
    ei = torch.tensor([[0, 1, 2, 3, 4, 1, 2, 0, 0, 3], [1, 0, 0, 2, 2, 2, 3, 3, 3, 3]])
    graph = CscGraph.from_edge_index(ei[:, torch.randperm(10, generator=torch.Generator().manual_seed(3))],
                                     num_nodes=5)
    xs, xd, w, _, m = _inputs(True, 5, 5, 10, 2, 3, edge=False, mask=False, bipartite=False, seed=4)
    ea, ew = _raw_edges(10, 2, 3, 2, seed=1)
    alpha = 0.3 if act in ("leaky_relu", "scalar") else 0.0
    _compare(graph, xs, xd, w, ea, m, v2=True, heads=2, concat=act in ("linear", "sigmoid", "elu"), act=act,
             alpha=alpha, ew=ew)
    assert all(fused)


@pytest.mark.parametrize("max_tile_d", [1024, 8], ids=["all_heads", "one_head"])
@pytest.mark.slow
def test_fused_edge_projection_padded_heads_head_groups_and_long_rows(max_tile_d, fused, monkeypatch):
    """H = 3, C = 5 (padded to 4 x 8), De = 5 (padded to 8 in the edge backward): all heads in one program, or one
    head a program (the projection is computed per head group; the edge backward still takes all heads); a row of
    150 edges in big and small blocks; bipartite, shuffled, with a strided dropout mask."""
    from cudnn_gnn.backends.triton import tuning as kernels

    monkeypatch.setattr(kernels, "MAX_TILE_D", max_tile_d)
    hub = torch.stack([torch.arange(150) % 9, torch.zeros(150, dtype=torch.long)])
    light = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 1, 2, 3, 3, 3]])
    ei = torch.cat([hub, light], 1)
    ei = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(2))]
    graph = CscGraph.from_edge_index(ei, size=(9, 5), index_dtype=torch.int32)
    xs, xd, w, _, m = _inputs(True, 9, 5, ei.shape[1], 3, 5, edge=False, mask=True, bipartite=True, seed=6)
    ea, ew = _raw_edges(ei.shape[1], 3, 5, 5, seed=2)
    out, _, _ = _compare(graph, xs, xd, w, ea, m, v2=True, heads=3, concat=True, ew=ew)
    assert all(fused) and torch.equal(out[4], torch.zeros_like(out[4]))
    assert kernels.edge_kernel_shape(3, 5, 5)[1:4] == (4, 8, 8)


@pytest.mark.parametrize("b", [7, 80])
@pytest.mark.slow
def test_fused_edge_projection_hubs_in_chunks_repeat_bitwise(b, fused, chunk, monkeypatch):
    """A 180-edge hub destination and a 166-edge hub source in chunks of 7 or 80, H = 3, C = 5, De = 4, the edge
    backward in 5 programs (spans of 64 edges): against the reference, then bitwise equal on a second run."""
    chunk.set(b)
    monkeypatch.setattr(tuning, "MIN_EDGE_SPAN", 64)
    hub_in = torch.stack([torch.arange(150) % 9, torch.zeros(150, dtype=torch.long)])
    hub_out = torch.stack([torch.full((150,), 8), torch.arange(150) % 5])
    light = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 1, 2, 3, 3, 3]])
    ei = torch.cat([hub_in, hub_out, light], 1)
    ei = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(4))]
    graph = CscGraph.from_edge_index(ei, size=(9, 6))
    assert -(-graph.num_edges // tuning.edge_span(graph.num_edges)) == 5
    xs, xd, w, _, m = _inputs(True, 9, 6, ei.shape[1], 3, 5, edge=False, mask=True, bipartite=True, seed=9)
    ea, ew = _raw_edges(ei.shape[1], 3, 5, 4, seed=3)
    first = _compare(graph, xs, xd, w, ea, m, v2=True, heads=3, concat=True, ew=ew)
    second = _run("triton", graph, xs, xd, w, ea, m, v2=True, heads=3, concat=True, ew=ew)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert all(torch.equal(a, b) for a, b in zip(first[2], second[2])) and all(fused)


@pytest.mark.slow
def test_fused_edge_projection_bfloat16_in_chunks(fused, chunk):
    chunk.set(4)
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, _, m = _inputs(True, ns, nd, ei.shape[1], 2, 4, edge=False, mask=True, bipartite=False,
                              dtype=torch.bfloat16)
    ea, ew = _raw_edges(ei.shape[1], 2, 4, 8, dtype=torch.bfloat16)
    _, _, grads = _compare(graph, xs, xd, w, ea, m, v2=True, heads=2, concat=True, ew=ew)
    assert grads[-1].dtype == grads[-2].dtype == torch.bfloat16 and all(fused)


def test_fused_edge_gradients_only_where_asked(fused):
    """edge_attr without grad (a layer's input data): its gradient is not computed, the weight's is; a frozen
    weight: the reverse; no grad at all: the fused forward (the default rule fuses without gradients)."""
    ei, ns, nd = GRAPHS["unsorted_coo"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, _, m = _inputs(True, ns, nd, ei.shape[1], 2, 3, edge=False, mask=False, bipartite=False)
    ea, ew = _raw_edges(ei.shape[1], 2, 3, 2)
    for e_leaf, w_leaf, bits in ((ea.detach(), ew, 2), (ea, ew.detach(), 1)):
        spec = call_spec(graph, xs, xs, w, e_leaf, v2=True, heads=2, concat=True, activation_name="relu",
                         activation_alpha=0.0, lin_edge_weight=w_leaf)
        call, _ = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)
        assert call.edge_grads == bits
        _compare(graph, xs, xd, w, e_leaf, m, v2=True, heads=2, concat=True, ew=w_leaf)


@pytest.mark.slow
def test_no_edge_by_channel_tensor_on_the_fused_path(fused):
    """Forward and backward of the fused call create no tensor with ``E * H*C`` elements or more (every aten
    op's outputs recorded), where the projected call does (the projection and its gradient)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func._schema.name.endswith("_"):
                # in-place ops create nothing; Triton's interpreter also copies each kernel argument's storage
                # through them as bytes (set_, copy_), which eager calls reach since they skip the dispatcher
                return out
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.numel = max(self.numel, t.numel())
            return out

    ei, ns, _ = GRAPHS["power_law"]()  # 150 edges, 30 nodes
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    heads, c, e = 2, 6, ei.shape[1]
    xs, _, w, _, _ = _inputs(True, ns, ns, e, heads, c, edge=False, mask=False, bipartite=False)
    ea, ew = _raw_edges(e, heads, c, 3)
    largest = []
    for share in (1e9, 0.0):  # fused, then projected
        tuning.FUSED_EXTRA_SHARE = share
        with Largest() as mode:
            _run("triton", graph, xs, None, w, ea, None, v2=True, heads=heads, concat=True, ew=ew)
        largest.append(mode.numel)
    assert fused == [True, False]
    assert largest[0] < e * heads * c <= largest[1], largest


def test_fuse_edge_projection_rule():
    """The one rule: De at most 16, the edge backward's all-heads tile and [De, W] partial bounded, and with
    gradients the partials at most a quarter of the [E, H*C] buffer; the proteins preset fuses."""
    proteins = dict(num_edges=39_561_252, heads=8, dim=64, dim_edge=8, elem_bytes=2, needs_grad=True)
    assert tuning.fuse_edge_projection(**proteins)
    assert tuning.edge_span(39_561_252) == 32_768 and -(-39_561_252 // 32_768) == 1208  # 1208 programs
    assert not tuning.fuse_edge_projection(**{**proteins, "dim_edge": 17})  # past the unrolled loop
    assert not tuning.fuse_edge_projection(**{**proteins, "dim_edge": 0})
    assert tuning.fuse_edge_projection(**{**proteins, "dim": 256, "dim_edge": 16})  # 8 x 32, 16 x 256 = 4096
    assert not tuning.fuse_edge_projection(**{**proteins, "dim": 512, "dim_edge": 16})  # 16 x 512 partial tile
    assert not tuning.fuse_edge_projection(**{**proteins, "heads": 1, "dim": 2048, "dim_edge": 1})  # one 2048 head
    tiny = dict(num_edges=12, heads=2, dim=8, dim_edge=4, elem_bytes=4)
    assert not tuning.fuse_edge_projection(**tiny, needs_grad=True)  # partials 1 x 8 x 4 x 4 B > 12 x 8 x 4 B / 4
    assert tuning.fuse_edge_projection(**tiny, needs_grad=False)  # no backward: nothing extra
    assert tuning.fuse_edge_projection(**{**tiny, "num_edges": 16}, needs_grad=True)  # 128 B <= 512 B / 4


def test_projected_path_where_the_rule_refuses():
    """A tiny graph with gradients: torch projects first (today's [E, H*C] path) and the results still equal the
    reference; a De past the limit too."""
    ei, ns, nd = GRAPHS["multi_edges"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, _, m = _inputs(True, ns, nd, ei.shape[1], 2, 2, edge=False, mask=True, bipartite=False)
    for de in (2, 17):
        ea, ew = _raw_edges(ei.shape[1], 2, 2, de)
        spec = call_spec(graph, xs, xs, w, ea, v2=True, heads=2, concat=True, lin_edge_weight=ew)
        e_in, w_in = triton_call.gatv2_edge_inputs(spec, needs_grad=True)
        assert w_in is None and e_in.shape == (ei.shape[1], 4)
        _compare(graph, xs, xd, w, ea, m, v2=True, heads=2, concat=True, ew=ew)


def test_opcheck_fused_edge_projection(fused):
    ei, ns, nd = GRAPHS["bipartite"]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    xs, xd, w, _, m = _inputs(True, ns, nd, ei.shape[1], 2, 2, edge=False, mask=True, bipartite=True)
    ea, ew = _raw_edges(ei.shape[1], 2, 2, 3)
    spec = call_spec(graph, xs, xd, w, ea, m, v2=True, heads=2, concat=True, activation_name="elu",
                     activation_alpha=1.0, return_attention=True, lin_edge_weight=ew)
    call, walk = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)
    assert call.lin_edge_weight is ew and call.edge_grads == 3
    call = type(call)(*(v.detach() if isinstance(v, torch.Tensor) else v for v in call))
    ops = torch.ops.cudnn_gnn
    torch.library.opcheck(ops.triton_gatv2_fwd.default, (*call, True, False))
    # edge_attr's gradient not asked (bit 0 of the edge-gradient bits cleared): an empty output
    for frozen in (call, call._replace(edge_grads=2)):
        out, lse, att, _ = ops.triton_gatv2_fwd(*frozen, True, False)
        grads = ops.triton_gatv2_bwd(torch.randn_like(out), torch.randn_like(att), lse, *frozen, *walk)
        assert (grads[2].numel() == 0) == (frozen.edge_grads == 2) and grads[3].shape == ew.shape
        torch.library.opcheck(ops.triton_gatv2_bwd.default,
                              (torch.randn_like(out), torch.randn_like(att), lse, *frozen, *walk))


def test_compile_fullgraph_fused_edge_projection(fused):
    import cudnn_gnn

    ei, ns, _ = GRAPHS["zero_in_degree"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, _ = _inputs(True, ns, ns, ei.shape[1], 2, 2, edge=False, mask=False, bipartite=False)
    ea, ew = _raw_edges(ei.shape[1], 2, 2, 3)

    def f(x, w, ea, ew):
        out, att = cudnn_gnn.gatv2(graph, x, w, heads=2, edge_attr=ea, lin_edge_weight=ew, return_attention=True,
                                   backend="triton")
        return out.sum() + att.pow(2).sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    grads = torch.autograd.grad(compiled(xs, w, ea, ew), (xs, w, ea, ew))
    r_grads = torch.autograd.grad(f(xs, w, ea, ew), (xs, w, ea, ew))
    for a, b in zip(grads, r_grads):
        assert torch.equal(a, b)
    assert fused and all(fused)


@pytest.mark.slow
def test_public_gatv2_with_lin_edge_weight_on_triton_and_through_a_hub_split(fused):
    """``cudnn_gnn.gatv2(..., edge_attr=raw, lin_edge_weight=W)``: Triton (drawn dropout, same RNG state) against the
    reference; and an explicit ``max_degree`` split (the merge projects the hub edges' rows itself) on both."""
    import cudnn_gnn

    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    results = []
    for backend, max_degree in (("triton", None), ("reference", None), ("triton", 5), ("reference", 5)):
        xs, _, w, _, _ = _inputs(True, ns, nd, ei.shape[1], 2, 3, edge=False, mask=False, bipartite=False)
        ea, ew = _raw_edges(ei.shape[1], 2, 3, 4)
        torch.manual_seed(7)
        out, att = cudnn_gnn.gatv2(graph, xs, w, heads=2, edge_attr=ea, lin_edge_weight=ew, dropout=0.25,
                                   training=True, return_attention=True, backend=backend, max_degree=max_degree)
        g = torch.Generator().manual_seed(3)
        ((out * torch.randn(out.shape, generator=g)).sum() + (att * torch.randn(att.shape, generator=g)).sum()).backward()
        results.append([out, att, xs.grad, w.grad, ea.grad, ew.grad])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b, **TOL[torch.float32])
    assert fused == [True, True]


def test_gatv2conv_with_edge_dim_on_triton_matches_pyg(fused):
    """The drop-in layer with edge_dim on the Triton backend (fused projection) against PyG's GATv2Conv with the same
    state_dict: output, attention in PyG's order, and the gradients of x, edge_attr and every parameter
    (lin_edge.weight included); self-loops filled with the mean, a bipartite layer too."""
    import torch_geometric.nn as pyg_nn

    from cudnn_gnn import GATv2Conv

    ei, n, _ = GRAPHS["unsorted_coo"]()
    for bipartite in (False, True):
        in_ch = (5, 4) if bipartite else 5
        torch.manual_seed(0)
        pyg = pyg_nn.GATv2Conv(in_ch, 3, heads=2, edge_dim=3)
        ours = GATv2Conv(in_ch, 3, heads=2, edge_dim=3, backend="triton")
        ours.load_state_dict(pyg.state_dict(), strict=True)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(n, 5, generator=g)
        x = (x, torch.randn(n, 4, generator=g)) if bipartite else x
        ea = torch.randn(ei.shape[1], 3, generator=g)
        results = []
        for layer in (ours, pyg):
            xl = tuple(t.clone().requires_grad_() for t in x) if bipartite else x.clone().requires_grad_()
            el = ea.clone().requires_grad_()
            out, (ei_out, att) = layer(xl, ei, el, return_attention_weights=True)
            (out.square().sum() + att.square().sum()).backward()
            xg = [t.grad for t in xl] if bipartite else [xl.grad]
            results.append([out, ei_out.float(), att, *xg, el.grad, *[p.grad for p in layer.parameters()]])
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, atol=3e-5, rtol=1e-4)
    assert fused == [True, True]


@pytest.mark.slow
def test_compiled_sampled_layers_take_one_graph_for_every_batch():
    """Two of our ``GATConv`` layers on :func:`~cudnn_gnn.sampled_blocks` of three batches of different sizes,
    under ``torch.compile(dynamic=True)``: one graph serves every batch (the blocks' sizes stay symbolic: no
    recompilation), and outputs and every gradient equal the eager calls'. The Triton op's node count is a
    ``SymInt`` and the shape checks format their messages only on failure, else each would pin a size."""
    from torch._dynamo.utils import counters

    from cudnn_gnn import sampled_blocks
    from cudnn_gnn.layers import GATConv

    from ..test_sampled import _batch

    torch.manual_seed(0)
    convs = torch.nn.ModuleList([GATConv(6, 4, heads=2, backend="triton"), GATConv(8, 3, heads=1, backend="triton")])

    def forward(x, edge_index, nodes, edges):
        for i, block in enumerate(sampled_blocks(edge_index, nodes, edges, 2, validate=False)):
            x = x[: block.num_src_nodes]
            x = convs[i]((x, x[: block.num_dst_nodes]), block, size=(block.num_src_nodes, block.num_dst_nodes))
        return x

    torch._dynamo.reset()
    graphs0 = counters["stats"]["unique_graphs"]
    compiled = torch.compile(forward, backend="aot_eager", dynamic=True)
    for seed, nodes in enumerate(([4, 9, 14], [5, 11, 17], [3, 8, 20])):
        ei, edges = _batch(nodes, [2, 2], seed)
        x = torch.randn(sum(nodes), 6, generator=torch.Generator().manual_seed(seed))
        results = []
        for f in (compiled, forward):
            convs.zero_grad()
            xs = x.clone().requires_grad_()
            out = f(xs, ei, nodes, edges)
            out.square().sum().backward()
            results.append([out, xs.grad] + [p.grad for p in convs.parameters()])
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] - graphs0 == 1


@pytest.mark.parametrize("one_gather", [False, True], ids=["two_gather", "one_gather"])
@pytest.mark.slow
def test_source_pass_reads_destinations_either_way_with_the_same_bits(one_gather, chunk, monkeypatch):
    """A static graph's source pass reads each out-edge's destination from ``rev_dst`` (``CscGraph.reverse_dst``,
    cached on the graph); the same graph marked rebuilt every call reads them through the edge's CSC position
    (no ``rev_dst``): the same destinations and the same work lists, so the same gradients bit for bit, hub sources
    in chunks included; and they match the reference."""
    gb = _gat_backward(one_gather)
    chunk.set(4)
    ei, ns, _ = GRAPHS["power_law"]()
    built = []
    real = CscGraph.reverse_dst
    monkeypatch.setattr(CscGraph, "reverse_dst", lambda g: built.append(g) or real(g))
    results = []
    for rev_dst in (True, False):
        graph = CscGraph.from_edge_index(ei, num_nodes=ns)
        if not rev_dst:
            graph = graph.as_rebuilt_every_call()
        assert int(graph.reverse_csc()[0].diff().max()) > 4  # a hub source, cut into chunks
        xs, xd, w, ea, m = _inputs(False, ns, ns, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False, seed=7)
        results.append(_compare(graph, xs, xd, w, ea, m, v2=False, heads=2, concat=True, gat_backward=gb)[2])
        assert (graph in built) == rev_dst  # asked for only where the source pass reads it
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("heads,c,rebuilt,one_gather", [
    (2, 3, False, True),  # a static graph, a narrow tile: one gather
    (2, 3, True, False),  # a graph rebuilt every call (sampled blocks): two
    (8, 40, False, False),  # a tile wider than 256 (8 x 64 padded): two
], ids=["static", "rebuilt_every_call", "wide_tile"])
@pytest.mark.slow
def test_gat_backward_rule_picks_one_gather_on_static_narrow_graphs(heads, c, rebuilt, one_gather, kernel_launches):
    """With ``TritonOptions.gat_backward`` at its default (``"auto"``), ``gat_one_gather`` decides: the one-gather backward
    on a static graph with a tile at most 256 wide, the two-gather one on a graph rebuilt every call and on wider
    tiles; the launches say which ran, and the gradients match the reference either way."""
    assert tb.DEFAULT_OPTIONS.gat_backward == "auto"
    ns = 30
    ei = torch.randint(0, ns, (2, 120), generator=torch.Generator().manual_seed(4))
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    if rebuilt:
        graph = graph.as_rebuilt_every_call()
    xs, xd, w, ea, m = _inputs(False, ns, ns, ei.shape[1], heads, c, edge=False, mask=True, bipartite=False, seed=2)
    kernel_launches.clear()
    out, _, grads = _run("triton", graph, xs, xd, w, ea, m, v2=False, heads=heads, concat=True)
    names = kernel_launches.names
    ran = set(_attention_launches(names))
    r_out, _, r_grads = _run("reference", graph, xs, xd, w, ea, m, v2=False, heads=heads, concat=True)
    for a, b in zip((out, *grads), (r_out, *r_grads)):  # sums of up to 30 x 320 terms in another order
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    expected = _gat_backward_launches(one_gather, True)
    assert set(expected) <= ran and not set(GAT_BACKWARD[not one_gather]) & ran, names


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@pytest.mark.slow
def test_long_rows_in_many_small_blocks(v2, monkeypatch):
    """Rows and sources longer than many blocks (``BLOCK_E = 2`` forced for every kernel), with edge features and a
    dropout mask, match the reference: one block size walks a row from its first edge to its last."""
    from cudnn_gnn.backends.triton import tuning as kernels

    real = kernels.launch_shape

    def shape(*a, **k):  # small blocks, so that the power-law graph's long rows take many
        _, hg, block_c, warps = real(*a, **k)
        return 2, hg, block_c, warps

    monkeypatch.setattr(kernels, "launch_shape", shape)
    ei, ns, _ = GRAPHS["power_law"]()
    assert int(torch.bincount(ei[1]).max()) > 8 and int(torch.bincount(ei[0]).max()) > 8
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, m = _inputs(v2, ns, ns, ei.shape[1], 2, 4, edge=True, mask=True, bipartite=False, seed=9)
    assert kernels.launch_config(xs, 2, v2, "fwd", xs)[2]["BLOCK_E"] == 2
    _compare(graph, xs, xd, w, ea, m, v2=v2, heads=2, concat=True)


@pytest.mark.slow
def test_two_edge_blocks_on_full_tiles_match_the_reference(monkeypatch):
    """The shapes of full 256-wide tiles, unpatched: at 8 heads x 32 in float32, GAT's one-gather source pass
    (``TUNED_SHAPES``' full_256) and GATv2's forward (``TUNED_SHAPES``) walk blocks of two edges, here over a 40-edge row
    and a source cut into chunks of 16 and over light rows; outputs, attention and every gradient against the
    reference. A padded tile of the same width (4 x 47) keeps the 16 KiB block."""
    from cudnn_gnn.backends.triton import tuning as kernels

    assert kernels.launch_shape("gat_src", 8, 32, False, 4)[0] == 2
    assert kernels.launch_shape("fwd", 8, 32, True, 4)[0] == 2
    assert kernels.launch_shape("gat_src", 4, 47, False, 4)[0] == 16
    monkeypatch.setattr(tuning, "MIN_CHUNK_E", 16)
    monkeypatch.setattr(tuning, "MAX_CHUNK_E", 16)
    src = torch.cat([torch.arange(40) % 11, torch.zeros(20, dtype=torch.long), torch.arange(10) % 11])
    dst = torch.cat([torch.zeros(40, dtype=torch.long), torch.arange(20) % 10 + 1, torch.arange(10) % 6 + 1])
    ei = torch.stack([src, dst])  # row 0: 40 in-edges; source 0: 24 out-edges
    graph = CscGraph.from_edge_index(ei, num_nodes=11)
    for v2 in (False, True):
        xs, xd, w, ea, m = _inputs(v2, 11, 11, ei.shape[1], 8, 32, edge=True, mask=True, bipartite=False, seed=21)
        _compare(graph, xs, xd, w, ea, m, v2=v2, heads=8, concat=True)
