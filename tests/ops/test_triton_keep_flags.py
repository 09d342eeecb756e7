"""The keep flags of counter-based attention dropout: the Triton forward, where a backward follows, writes the
decisions it drew as ``uint8 [E, H]`` in CSC order, and every backward pass reads them (the kernels' ``DROP == 3``)
instead of evaluating Philox again. On CPU under Triton's interpreter, set as in ``test_triton_backend.py`` (whose
helpers this file takes); with CUDA present it skips unless ``TRITON_INTERPRET=1`` was set from the start.

What is checked: the flags equal ``attention_dropout_mask(...) != 0`` in CSC order (1, 2, 3 and 8 heads, head groups
smaller than H, hub rows in chunks); the backward op gives the same bits reading them as drawing Philox again (the
path before the flags), and a whole step the same bits as with the explicit factors ``attention_dropout_mask``
gives; inference writes none; the ops' fakes and ``torch.compile`` agree."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")

from cudnn_gnn import CscGraph, attention_dropout_mask  # noqa: E402

from ..conftest import GRAPHS, call_spec  # noqa: E402
from .test_triton_backend import _inputs, _run, tb, tuning  # noqa: E402

P, SEED = 0.5, 987654321
SLOW = pytest.mark.slow


def _chunks_of(monkeypatch, b: int) -> None:
    """Work lists cut into chunks of ``b`` edges (normally 256 to 1024): hub rows and sources on tiny graphs."""
    monkeypatch.setattr(tuning, "MIN_CHUNK_E", b)
    monkeypatch.setattr(tuning, "MAX_CHUNK_E", b)


def _seed() -> torch.Tensor:
    return torch.tensor([SEED], dtype=torch.int64)


def _detached(call):
    """The call record with its tensors detached (the ops carry no autograd of their own)."""
    return type(call)(*(v.detach() if isinstance(v, torch.Tensor) else v for v in call))


def _power_law_call(v2: bool, heads: int, *, options=None, edge: bool = False, return_attention: bool = False):
    """``(graph, call, walk)``: the power-law catalogue graph (shuffled COO: a real CSC -> COO map), counter-based
    dropout at rate :data:`P`, C = 2."""
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, ea, _ = _inputs(v2, ns, nd, ei.shape[1], heads, 2, edge=edge, mask=False, bipartite=False, seed=6)
    spec = call_spec(graph, xs, xs, w, ea, v2=v2, heads=heads, concat=True, dropout=P, dropout_seed=_seed(),
                     return_attention=return_attention)
    call, walk = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True,
                               options=options or tb.TritonOptions())
    return graph, _detached(call), walk


def _fwd(v2: bool):
    return getattr(torch.ops.cudnn_gnn, "triton_gatv2_fwd" if v2 else "triton_gat_fwd")


def _bwd(v2: bool):
    return getattr(torch.ops.cudnn_gnn, "triton_gatv2_bwd" if v2 else "triton_gat_bwd")


def _flag_case(v2: bool, heads: int, hg: int | None, slow: bool = True):
    """A case of :func:`test_forward_writes_the_keep_flags_it_drew`: ``hg``, the forward's heads a program (None: the
    rule's, every head of these small cases in one program)."""
    name = f"{'gatv2' if v2 else 'gat'}-h{heads}" + ("" if hg is None else f"-groups_of_{hg}")
    return pytest.param(v2, heads, hg, id=name, marks=SLOW if slow else ())


@pytest.mark.parametrize("v2, heads, hg", [
    _flag_case(False, 1, None, slow=False), _flag_case(False, 2, 1, slow=False), _flag_case(False, 3, None, slow=False),
    _flag_case(False, 8, None), _flag_case(False, 8, 2), _flag_case(False, 3, 1),
    _flag_case(True, 1, None), _flag_case(True, 2, 1), _flag_case(True, 8, 2), _flag_case(True, 3, 1),
])
def test_forward_writes_the_keep_flags_it_drew(v2, heads, hg, monkeypatch):
    """``write_keep``: the forward op's last output is ``uint8 [E, H]``, exactly ``attention_dropout_mask(...) != 0``
    permuted to CSC order, on hub rows in chunks of 4 (each chunk's program writes its edges) and with head groups
    smaller than H (``TritonOptions(launch=...)``: several programs write one edge's bytes); the output is the same
    bits as without ``write_keep``, which returns an empty stand-in."""
    _chunks_of(monkeypatch, 4)
    options = tb.TritonOptions(launch={} if hg is None else {"fwd": (4, 1, hg)})
    graph, call, _ = _power_law_call(v2, heads, options=options)
    if hg is not None:
        assert tuning.launch_config(call.x_src, heads, v2, "fwd", call.x_src, call.launch)[1] > 1  # head groups
    assert call.row_hub_work.shape[0] > 0  # hub rows in chunks
    written = _fwd(v2)(*call, False, True)
    flags = written[-1]
    factors = attention_dropout_mask(graph, heads, P, _seed())
    csc = factors if graph.map_csc_to_coo is None else factors[graph.map_csc_to_coo.long()]
    assert flags.dtype == torch.uint8 and flags.shape == (graph.num_edges, heads)
    assert torch.equal(flags, (csc != 0).to(torch.uint8))
    assert 0.3 < flags.float().mean().item() < 0.7
    plain = _fwd(v2)(*call, False, False)
    assert plain[-1].shape == (0,) and torch.equal(written[0], plain[0])


@pytest.mark.parametrize("variant", ["gat_one_gather", pytest.param("gat_two_gather", marks=SLOW),
                                     pytest.param("gatv2", marks=SLOW)])
def test_backward_op_reading_the_flags_gives_the_bits_of_philox(variant, monkeypatch):
    """The backward op given the forward's flags in place of the seed (``DROP == 3``) returns every gradient bitwise
    equal to the same op given the seed (Philox drawn again in the backward, the path before the flags): GAT's
    one-gather backward (its attention-gradient delta pass and source pass), its two-gather backward and GATv2's
    (the destination pass, both of its walks), on hub rows and sources in chunks of 4, three heads."""
    v2 = variant == "gatv2"
    _chunks_of(monkeypatch, 4)
    _, call, walk = _power_law_call(v2, 3, edge=True, return_attention=True)
    out, lse, att, *rest = _fwd(v2)(*call, True, True)
    flags = rest[-1]
    gen = torch.Generator().manual_seed(2)
    go, ga = torch.randn(out.shape, generator=gen).to(out.dtype), torch.randn(att.shape, generator=gen)
    lead = (go, ga, lse) if v2 else (go, ga, lse, out if variant == "gat_one_gather" else None, rest[0])
    drawn = _bwd(v2)(*lead, *call, *walk)
    read = _bwd(v2)(*lead, *call._replace(dropout=flags), *walk)
    assert all(torch.equal(a, b) for a, b in zip(drawn, read, strict=True))
    assert any(g.numel() and g.abs().sum() > 0 for g in read)


@pytest.mark.parametrize("variant", [pytest.param("gat_one_gather", marks=SLOW), "gat_two_gather",
                                     pytest.param("gatv2", marks=SLOW)])
def test_training_step_reads_the_flags_with_the_bits_of_the_explicit_factors(variant, monkeypatch):
    """A whole call through autograd with counter-based dropout: every backward launcher gets the uint8 flags (no
    seed), and output, attention and every gradient (a gradient on the attention too) are bitwise equal to a call
    given the explicit factors ``attention_dropout_mask`` gives for the seed (the kernels' ``DROP == 1``, the
    factors the Philox draws give in-kernel): the gradients of before the flags, bit for bit."""
    from cudnn_gnn.backends.triton import kernels

    v2 = variant == "gatv2"
    _chunks_of(monkeypatch, 4)
    ei, ns, nd = GRAPHS["power_law"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, xd, w, ea, _ = _inputs(v2, ns, nd, ei.shape[1], 3, 3, edge=True, mask=False, bipartite=False, seed=5)
    kw = dict(v2=v2, heads=3, concat=not v2,
              gat_backward="two_gather" if variant == "gat_two_gather" else "one_gather")
    seen: list[torch.dtype] = []

    def spy(real):
        def launch(call, *args):
            seen.append(call.dropout.dtype)
            return real(call, *args)
        return launch

    for name in ("launch_gat_backward", "launch_backward_dst"):
        monkeypatch.setattr(kernels, name, spy(getattr(kernels, name)))
    drawn = _run("triton", graph, xs, xd, w, ea, None, drop=(P, _seed()), **kw)
    assert seen == [torch.uint8]
    seen.clear()
    given = _run("triton", graph, xs, xd, w, ea, attention_dropout_mask(graph, 3, P, _seed()), **kw)
    assert seen == [torch.float32]
    assert torch.equal(drawn[0], given[0]) and torch.equal(drawn[1], given[1])
    assert all(torch.equal(a, b) for a, b in zip(drawn[2], given[2], strict=True))


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_no_keep_flags_without_a_backward_or_a_seed(v2, monkeypatch):
    """The forward is given flags to write only with counter-based dropout and a backward to follow: not under
    ``torch.no_grad()``, not where no input requires grad, not with an explicit mask or without dropout (nothing of
    size ``[E, H]`` allocated for them)."""
    from cudnn_gnn.backends.triton import kernels

    seen: list[torch.Tensor | None] = []
    real = kernels.launch_forward

    def spy(call, scores, out, lse, att, keep=None):
        seen.append(keep)
        return real(call, scores, out, lse, att, keep)

    monkeypatch.setattr(kernels, "launch_forward", spy)
    ei, ns, nd = GRAPHS["multi_edges"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, m = _inputs(v2, ns, nd, ei.shape[1], 2, 2, edge=False, mask=True, bipartite=False)
    seeded = dict(dropout=P, dropout_seed=_seed())

    def call(x, weights, mask=None, **kw):
        seen.clear()
        tb.triton_gat(call_spec(graph, x, x, weights, None, mask, v2=v2, heads=2, concat=True, **kw))
        assert len(seen) == 1
        return seen[0]

    flags = call(xs, w, **seeded)
    assert flags is not None and flags.dtype == torch.uint8 and flags.shape == (graph.num_edges, 2)
    with torch.no_grad():
        assert call(xs, w, **seeded) is None
    assert call(xs.detach(), w.detach(), **seeded) is None
    assert call(xs, w, m) is None
    assert call(xs, w) is None


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
@SLOW
def test_opcheck_and_compile_with_keep_flags(v2):
    """The forward op writing flags and the backward op reading them against their fakes (``opcheck``), and
    ``torch.compile(fullgraph=True)`` of a call with counter-based dropout: gradients equal the eager call's."""
    _, call, walk = _power_law_call(v2, 2, return_attention=True)
    torch.library.opcheck(_fwd(v2).default, (*call, True, True))
    out, lse, att, *rest = _fwd(v2)(*call, True, True)
    lead = (torch.randn_like(out), torch.randn_like(att), lse) + (() if v2 else (out, rest[0]))
    torch.library.opcheck(_bwd(v2).default, (*lead, *call._replace(dropout=rest[-1]), *walk))

    ei, ns, nd = GRAPHS["zero_in_degree"]()
    graph = CscGraph.from_edge_index(ei, num_nodes=ns)
    xs, _, w, _, _ = _inputs(v2, ns, nd, ei.shape[1], 2, 2, edge=False, mask=False, bipartite=False)
    seed = _seed()

    def f(x, w):
        out, att = tb.triton_gat(call_spec(graph, x, x, w, v2=v2, heads=2, concat=True, return_attention=True,
                                           dropout=P, dropout_seed=seed))
        return out.sum() + att.pow(2).sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    grads = torch.autograd.grad(compiled(xs, w), (xs, w))
    r_grads = torch.autograd.grad(f(xs, w), (xs, w))
    for a, b in zip(grads, r_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
