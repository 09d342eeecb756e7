"""The kernels' offset width: int32 where every tensor a call's kernels index stays below 2**31 elements with a pad of
rows for masked lanes, else int64 (:func:`~cudnn_gnn.backends.triton.tuning.int64_offsets`, decided once a call in
:func:`~cudnn_gnn.backends.triton.call.build_call` and passed to every launch as the constexpr ``I64``), but GAT's
one-gather source pass and node-score backward take int64 on the tiles where it measured faster
(:func:`~cudnn_gnn.backends.triton.tuning.kernel_int64_offsets`). On CPU under Triton's interpreter, set as in
``test_triton_backend.py`` (whose helpers this file takes); with CUDA present it skips unless ``TRITON_INTERPRET=1``
was set from the start. Sizes past 2**31 elements run on the GPU
(``tests/gpu/test_triton_gpu.py::test_int64_offsets_past_2_31_elements``).

What is checked: the rule at its boundary for each kind of tensor (node rows, ``[E, H]`` and ``[E, H*C]`` edge
tensors, raw edge features, GAT's destination record, work lists, index arrays), the pad and a launch override's
larger block; the per-kernel rule for every kernel on the measured tiles and others, and that sizes needing int64 give
every kernel int64; the shapes ``build_call`` gives the rule (GAT, GATv2 projected and fused, bipartite, with and
without a backward) and that its answer reaches every launch; and outputs, attention and every gradient bitwise equal
with the offsets forced to int64 and to int32, on GAT's one- and two-gather backward (with and without an attention
gradient), GATv2 with projected and fused edge features, counter-based dropout drawn in-kernel, hub rows and sources
in chunks, and bipartite graphs; and, at GAT's 8 x 32, 8 x 8 and 1 x 40, the per-kernel rule's launches (int64 in the
source pass or the node-score backward, int32 elsewhere) against all-int64, bitwise."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")

from cudnn_gnn import CscGraph  # noqa: E402

from ..conftest import GRAPHS, call_spec  # noqa: E402
from .test_triton_backend import _inputs, _raw_edges, _run, tb, tuning  # noqa: E402
from .test_triton_keep_flags import _chunks_of  # noqa: E402

LIMIT, PAD = tuning.INT32_OFFSETS_BELOW, tuning.OFFSET_PAD_ROWS


def _last_int32_rows(width: int, pad: int = PAD) -> int:
    """The most rows of ``width`` elements that int32 offsets still take: ``(rows + pad) * width < 2**31``."""
    return (LIMIT - 1) // width - pad


# ------------------------------------------------------------------------------ the rule
@pytest.mark.parametrize("width", [
    1,  # indices, maps, offsets [E] / [N+1]
    3,  # raw edge features [E, De] of the fused GATv2 projection
    4,  # work lists [P, 4]
    8,  # [E, H] edge tensors at 8 heads: attention, keep flags, dropout factors, the backward's buffers
    32,  # GAT's destination record [Nd, 4H] at 8 heads
    256,  # node rows and GATv2's projected edge features [N or E, H*C] at 8 x 32
    1000,  # a width that does not divide 2**31
], ids=lambda w: f"width_{w}")
def test_rule_at_its_boundary_per_tensor_kind(width):
    rows = _last_int32_rows(width)
    assert (rows + PAD) * width < LIMIT <= (rows + 1 + PAD) * width
    assert not tuning.int64_offsets([(rows, width)])
    assert tuning.int64_offsets([(rows + 1, width)])
    # one tensor past the boundary decides, whatever the others
    assert tuning.int64_offsets([(10, 256), (rows + 1, width), (0, 1)])
    assert not tuning.int64_offsets([(10, 256), (rows, width), (0, 1)])
    assert not tuning.int64_offsets([])


def test_rule_pads_by_a_launch_overrides_block_where_larger():
    """A launch override's block (``(kernel index, BLOCK_E, num_warps, HG)`` codes) larger than the pad moves the
    boundary by its size; a smaller one leaves the pad."""
    width, block = 8, 4 * PAD
    rows = _last_int32_rows(width)
    small = [tuning.KERNELS.index("fwd"), 16, 2, 0]
    big = [tuning.KERNELS.index("gat_dst"), block, 4, 0]
    assert not tuning.int64_offsets([(rows, width)], small)
    assert tuning.int64_offsets([(rows, width)], small + big)
    assert not tuning.int64_offsets([(_last_int32_rows(width, block), width)], small + big)
    assert tuning.int64_offsets([(_last_int32_rows(width, block) + 1, width)], big)


# ------------------------------------------------------------------------------ the per-kernel rule
def _tile(kernel: str, heads: int, c: int, elem_bytes: int) -> tuple[int, int, int]:
    """``(width, c, block_c)`` of ``kernel``'s tile as its launcher takes it, for ``heads`` heads of width ``c``
    gathering rows of ``elem_bytes`` bytes an element."""
    if kernel in ("scores", "scores_bwd"):
        _, hg, block_c, _, _ = tuning.node_score_shape(kernel, heads, c)
    else:
        _, hg, block_c, _ = tuning.launch_shape(kernel, heads, c, False, elem_bytes)
    return hg * block_c, c, block_c


INT64_ANYWAY = {("gat_src", 8, 32), ("gat_src", 1, 256), ("scores_bwd", 8, 8), ("scores_bwd", 1, 40),
                ("scores_bwd", 2, 32)}
"""``(kernel, heads, c)`` that take int64 offsets where int32 fits: GAT's one-gather source pass on full 256-wide
tiles (8 x 32, one head of 256), its node-score backward on 64-wide ones (8 x 8, 1 x 40 padded, 2 x 32)."""


@pytest.mark.parametrize("elem_bytes", [4, 2], ids=["fp32", "bf16"])
@pytest.mark.parametrize("heads, c", [
    (8, 32), (1, 256), (8, 8), (1, 40), (2, 32),
    (4, 47),  # 256 wide with padded lanes (4 x 64): not "full_256"
    (2, 8),  # 16 wide: narrower than the measured tiles
    (3, 3),  # the bit tests' shape
    (4, 128),  # 512 wide
], ids=lambda v: str(v))
def test_kernel_rule_takes_int64_on_the_measured_tiles_only(heads, c, elem_bytes):
    """Every kernel on each tile: int64 where :data:`INT64_ANYWAY` lists it and the sizes allow int32, int32
    elsewhere; int64 everywhere where the sizes need it."""
    for kernel in tuning.KERNELS:
        tile = _tile(kernel, heads, c, elem_bytes)
        assert tuning.kernel_int64_offsets(kernel, False, *tile) is ((kernel, heads, c) in INT64_ANYWAY), kernel
        assert tuning.kernel_int64_offsets(kernel, True, *tile) is True, kernel


# ------------------------------------------------------------------------------ what build_call gives the rule
@pytest.fixture
def rule(monkeypatch):
    """Spy on the rule: ``rule.calls`` holds each call's ``(shapes, launch)``; ``rule.answer`` (None: the real rule's)
    is what the calls get."""

    class _Rule:
        calls: list = []
        answer: bool | None = None

    real = tuning.int64_offsets

    def spy(shapes, launch=()):
        shapes = list(shapes)
        _Rule.calls.append((shapes, list(launch)))
        return real(shapes, launch) if _Rule.answer is None else _Rule.answer

    _Rule.calls = []
    monkeypatch.setattr(tuning, "int64_offsets", spy)
    return _Rule


def _offset_widths(launched: list) -> set[tuple[str, bool]]:
    """``(kernel name, I64)`` of the launches :func:`~tests.conftest.kernel_launches` recorded."""
    return {(name, kwargs["I64"]) for name, _, _, kwargs in launched}


@pytest.mark.parametrize("v2, edges, needs_grad", [
    (False, "scores", True), (False, None, False), (True, "projected", True), (True, "fused", True),
    (True, "fused", False),
], ids=["gat_edge_scores", "gat_inference", "gatv2_projected", "gatv2_fused", "gatv2_fused_inference"])
def test_build_call_gives_the_rule_every_indexed_tensor(v2, edges, needs_grad, rule, monkeypatch):
    """A bipartite power-law graph (Ns = 30, Nd = 20, E = 150) with hub rows and sources in chunks of 4, 2 heads
    of width 3, a launch override: the shapes ``build_call`` gives the rule, their largest tensors exactly, and the
    call's ``i64`` is the rule's answer."""
    _chunks_of(monkeypatch, 4)
    monkeypatch.setattr(tuning, "FUSED_EXTRA_SHARE", 1e9)  # the tiny graph takes the fused path where asked
    ei, ns, _ = GRAPHS["power_law"]()
    nd, heads, c = 20, 2, 3
    ei = ei[:, ei[1] < nd]
    e, d = ei.shape[1], heads * c
    graph = CscGraph.from_edge_index(ei, size=(ns, nd))
    xs, xd, w, ea, _ = _inputs(v2, ns, nd, e, heads, c, edge=edges is not None, mask=False, bipartite=True)
    ew = None
    if edges == "fused":
        ea, ew = _raw_edges(e, heads, c, 3)
    options = tb.TritonOptions(launch={"fwd": (4, 2)})
    spec = call_spec(graph, xs, xd, w, ea, v2=v2, heads=heads, concat=True, lin_edge_weight=ew)
    kg = tb.kernel_graph(graph)
    for answer in (True, False):
        rule.answer, rule.calls = answer, []
        call, walk = tb.build_call(spec, kg, needs_grad=needs_grad, options=options)
        assert call.i64 is answer and len(rule.calls) == 1
    shapes, launch = rule.calls[0]
    assert launch == options.launch_codes()
    rows = kg.rows
    expected = {(ns, d), (nd, d), (nd + 1, 1), (e, heads), *((t.shape[0], 4 if t.dim() == 2 else 1) for t in rows[:2]),
                (rows.hubs.shape[0], 3)}
    if walk is not None:
        expected |= {(walk.src_work.shape[0], 4), (walk.src_hub_work.shape[0], 4), (walk.src_hubs.shape[0], 3)}
    slots = rows.hub_work.shape[0] + (walk.src_hub_work.shape[0] if walk is not None else 0)
    assert slots > 0 and (slots, d) in shapes
    assert expected <= set(shapes), expected - set(shapes)
    if v2:
        assert (nd + slots, d) in shapes
        if edges == "fused":
            assert call.lin_edge_weight is not None and (e, 3) in shapes
            span = tuning.edge_span(e)
            assert (tuning.cdiv(e, span), d * 3) in shapes
        else:
            assert call.lin_edge_weight is None and (e, d) in shapes
    else:
        assert (nd, 4 * heads) in shapes
        block_n = tuning.node_score_shape("scores_bwd", heads, c)[0]
        programs, per = tuning.score_bwd_programs(ns, block_n)
        assert (programs * per * block_n, d) in shapes and (2 * programs, d) in shapes
        assert (2 * tuning.cdiv(e, tuning.dst_sum_shape(heads)[0]), heads) in shapes


def test_the_real_rule_decides_from_the_shapes_at_a_moved_limit(rule, monkeypatch):
    """With the limit moved to the call's largest tensor, the real rule answers int32 just below and int64 at it:
    ``build_call``'s shapes reach the rule and its answer the call."""
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, _ = _inputs(False, ns, nd, ei.shape[1], 2, 4, edge=False, mask=False, bipartite=False)
    spec = call_spec(graph, xs, xs, w, v2=False, heads=2, concat=True)
    tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)
    largest = max((r + PAD) * w for r, w in rule.calls[0][0])
    monkeypatch.setattr(tuning, "INT32_OFFSETS_BELOW", largest + 1)
    assert tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)[0].i64 is False
    monkeypatch.setattr(tuning, "INT32_OFFSETS_BELOW", largest)
    assert tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True)[0].i64 is True


def test_a_small_call_takes_int32_offsets():
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, _ = _inputs(True, ns, nd, ei.shape[1], 2, 4, edge=False, mask=False, bipartite=False)
    call, _ = tb.build_call(call_spec(graph, xs, xs, w, v2=True, heads=2, concat=True), tb.kernel_graph(graph),
                            needs_grad=True)
    assert call.i64 is False


# ------------------------------------------------------------------------------ int32 and int64 give the same bits
CASES = {
    # name: (v2, options of the case)
    "gat_one_gather": (False, dict(gat_backward="one_gather")),
    "gat_one_gather_no_attention_grad": (False, dict(gat_backward="one_gather", att_grad=False)),
    "gat_two_gather": (False, dict(gat_backward="two_gather")),
    "gat_dropout_drawn": (False, dict(gat_backward="one_gather", drop=True)),
    "gat_bipartite": (False, dict(gat_backward="one_gather", bipartite=True)),
    "gatv2_projected": (True, dict()),
    "gatv2_fused": (True, dict(fused=True)),
    "gatv2_dropout_drawn_bipartite": (True, dict(drop=True, bipartite=True)),
}


def _step(v2: bool, i64: bool | None, rule, *, gat_backward: str = "auto", att_grad: bool = True, drop: bool = False,
          bipartite: bool = False, fused: bool = False, heads: int = 3, c: int = 3):
    """Forward and backward of one case with the call's offsets forced to ``i64`` (None: the real rule's answer):
    output, attention (where returned) and every gradient. The power-law graph (shuffled COO), hub rows and sources
    in chunks of 4, ``heads`` heads of width ``c`` (3 x 3), edge features, a dropout mask or counter-based dropout."""
    rule.answer = i64
    ei, ns, nd = GRAPHS["power_law"]()
    if bipartite:
        nd = 17
        ei = ei[:, ei[1] < nd]
    graph = CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=torch.int32)
    e = ei.shape[1]
    xs, xd, w, ea, m = _inputs(v2, ns, nd, e, heads, c, edge=True, mask=not drop, bipartite=bipartite, seed=3)
    ew = None
    if fused:
        ea, ew = _raw_edges(e, heads, c, 4)
    kw = dict(v2=v2, heads=heads, concat=not v2, ew=ew, gat_backward=gat_backward)
    if drop:
        kw["drop"] = (0.4, torch.tensor([987654321], dtype=torch.int64))
    if att_grad:
        out, att, grads = _run("triton", graph, xs, xd, w, ea, m, **kw)
        return [out, att, *grads]
    spec = call_spec(graph, xs, xs if xd is None and ns == nd else xd, w, ea, m, v2=v2, heads=heads, concat=not v2,
                     lin_edge_weight=ew)
    out, att = tb.triton_gat(spec, options=tb.TritonOptions(gat_backward=gat_backward))
    assert att is None
    leaves = [t for t in (xs, xd, w, ea, ew) if t is not None]
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return [out, *torch.autograd.grad((out * g).sum(), leaves)]


DEFAULT_RUN = ("gat_one_gather", "gatv2_fused")
"""The cases of the default run (4-8 s each on the 2-core CPU); the others are marked slow."""


@pytest.mark.parametrize("case", [c if c in DEFAULT_RUN else pytest.param(c, marks=pytest.mark.slow) for c in sorted(CASES)])
def test_int32_and_int64_offsets_give_the_same_bits(case, rule, kernel_launches, monkeypatch):
    """Every output and gradient bitwise equal with the offsets forced to int64 and to int32; every launch of each
    step got the forced ``I64``, the hub merges' included (3 x 3 tiles: no kernel takes int64 on its tile anyway)."""
    _chunks_of(monkeypatch, 4)
    v2, kw = CASES[case]
    if kw.get("fused"):
        monkeypatch.setattr(tuning, "FUSED_EXTRA_SHARE", 1e9)
    wide = _step(v2, True, rule, **kw)
    kernels_wide = _offset_widths(kernel_launches)
    kernel_launches.clear()
    narrow = _step(v2, False, rule, **kw)
    kernels_narrow = _offset_widths(kernel_launches)
    assert {flag for _, flag in kernels_wide} == {True} and {flag for _, flag in kernels_narrow} == {False}
    assert {name for name, _ in kernels_wide} == {name for name, _ in kernels_narrow}
    assert "_merge_sum_kernel" in {name for name, _ in kernels_wide}  # hubs in chunks: the merges ran
    if kw.get("fused"):
        assert "_bwd_edge_kernel" in {name for name, _ in kernels_wide}
    assert len(wide) == len(narrow)
    for k, (a, b) in enumerate(zip(wide, narrow, strict=True)):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("heads, c, drop, int64_kernel", [
    (8, 32, False, "_bwd_gat_src_kernel"),  # the arxiv preset's layer
    (8, 8, True, "_node_scores_bwd_kernel"),  # the arxiv step's hidden layer
    pytest.param(1, 40, True, "_node_scores_bwd_kernel", marks=pytest.mark.slow),  # its output layer
], ids=["8x32", "8x8_dropout", "1x40_dropout"])
def test_the_rule_gives_two_kernels_int64_with_the_same_bits(heads, c, drop, int64_kernel, rule, kernel_launches,
                                                             monkeypatch):
    """GAT's one-gather backward at the arxiv shapes' head widths on a small graph, where int32 fits: every launch
    takes int32 but ``int64_kernel``'s (the source pass on 8 x 32, the node-score backward on 8 x 8 and 1 x 40),
    which takes int64; with the sizes' answer forced to int64, every launch int64; output, attention and every
    gradient bitwise equal between the two."""
    _chunks_of(monkeypatch, 4)
    kw = dict(gat_backward="one_gather", drop=drop, heads=heads, c=c)
    wide = _step(False, True, rule, **kw)
    kernels_wide = _offset_widths(kernel_launches)
    kernel_launches.clear()
    ruled = _step(False, None, rule, **kw)
    kernels_ruled = _offset_widths(kernel_launches)
    assert {flag for _, flag in kernels_wide} == {True}
    assert {name for name, flag in kernels_ruled if flag} == {int64_kernel}
    other = ({"_bwd_gat_src_kernel", "_node_scores_bwd_kernel"} - {int64_kernel}).pop()
    assert (other, False) in kernels_ruled and ("_merge_sum_kernel", False) in kernels_ruled
    assert {name for name, _ in kernels_wide} == {name for name, _ in kernels_ruled}
    assert len(wide) == len(ruled)
    for k, (a, b) in enumerate(zip(wide, ruled, strict=True)):
        assert torch.equal(a, b), k
