"""StaticNeighborSampler on CPU tensors: fixed shapes, every valid slot a sampled in-neighbour of its parent slot,
min(deg, fanout) distinct neighbours per slot drawn uniformly, degree 0 and padded seeds, the blocks' CSC (self-loop
first, sink rows after the real ones, offsets ending at the capacity), a layer on a block equal to the same layer on
the compacted subgraph (forward and gradients; ours and PyG's), a warmed sampled step free of host syncs, and
argument errors."""

from __future__ import annotations

import itertools
import os
import sys

import pytest
import torch

from cudnn_gnn.apps import static_sampler
from cudnn_gnn.apps.capture import CapturedStep, host_syncs
from cudnn_gnn.apps.static_sampler import (
    StaticNeighborSampler,
    capture_ahead,
    forward_blocks,
    sampled_loss,
    self_loops_in_blocks,
)

from .conftest import syncs_outside

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def _csc(src: torch.Tensor, dst: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    order = (dst * n + src).argsort()
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return colptr, src[order]


def _simple_graph(n: int = 300, e: int = 3000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A skewed graph without multi-edges (hubs above the fan-out, nodes without in-edges)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.0)
    dst = torch.multinomial(w, e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    pairs = torch.unique(dst * n + src)
    return _csc(pairs % n, pairs // n, n)


FANOUT = [5, 3, 2]


def _check_tree(sampler: StaticNeighborSampler, batch, colptr, row) -> None:
    """Every valid child slot holds a distinct in-neighbour of its parent's node, min(deg, f) of them, first."""
    n_id, valid = batch.n_id, batch.valid
    assert n_id.shape == valid.shape == (sampler.num_slots,)
    for k, f in enumerate(sampler.fanout):
        lo, n = sampler.offsets[k], sampler.hop_sizes[k]
        parents, alive = n_id[lo: lo + n], valid[lo: lo + n]
        kids = n_id[sampler.offsets[k + 1]: sampler.offsets[k + 1] + n * f].view(n, f)
        ok = valid[sampler.offsets[k + 1]: sampler.offsets[k + 1] + n * f].view(n, f)
        deg = torch.where(alive, colptr[parents + 1] - colptr[parents], 0)
        assert torch.equal(ok.sum(1), deg.clamp(max=f))
        assert torch.equal(ok, torch.arange(f) < ok.sum(1, keepdim=True))  # valid slots first
        assert bool((kids[~ok] == 0).all())
        for p in range(n):
            mine = kids[p][ok[p]].tolist()
            neigh = set(row[colptr[parents[p]]: colptr[parents[p] + 1]].tolist())
            assert len(set(mine)) == len(mine) and set(mine) <= neigh


def test_batches_have_fixed_shapes_and_are_trees_of_in_neighbours() -> None:
    colptr, row = _simple_graph()
    sampler = StaticNeighborSampler(colptr, row, fanout=FANOUT, batch_size=8, generator=torch.Generator().manual_seed(0))
    assert sampler.hop_sizes == [8, 40, 120, 240] and sampler.num_slots == 408
    shapes = None
    for seeds, mask in sampler.epoch(torch.arange(0, 300, 7)):
        batch = sampler.sample(seeds, mask)
        _check_tree(sampler, batch, colptr, row)
        now = [(b.graph.offsets.shape, b.graph.indices.shape, b.edge_index.shape) for b in batch.blocks]
        assert shapes is None or now == shapes
        shapes = now


def test_epoch_covers_every_seed_once_and_pads_the_last_batch() -> None:
    colptr, row = _simple_graph()
    sampler = StaticNeighborSampler(colptr, row, fanout=[2], batch_size=8)
    seeds = torch.arange(0, 300, 7)  # 43 seeds: 6 batches, the last with 3
    parts = list(sampler.epoch(seeds, shuffle=True, generator=torch.Generator().manual_seed(3)))
    assert len(parts) == sampler.num_batches(43) == 6
    kept = torch.cat([s[m] for s, m in parts])
    assert sorted(kept.tolist()) == seeds.tolist()
    assert parts[-1][1].tolist() == [True] * 3 + [False] * 5
    batch = sampler.sample(*parts[-1])
    assert batch.seed_valid.tolist() == [True] * 3 + [False] * 5
    assert not bool(batch.valid[8:].view(8, 2)[3:].any())  # padded seeds have no valid children


def test_fanout_at_or_above_degree_takes_every_neighbour_once_and_degree_zero_only_pads() -> None:
    # node 0: in-neighbours 1, 2, 3; node 4: none
    colptr, row = _csc(torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]), 5)
    sampler = StaticNeighborSampler(colptr, row, fanout=[3, 4], batch_size=2)
    for _ in range(20):
        batch = sampler.sample(torch.tensor([0, 4]))
        assert batch.n_id[2:5].tolist() == [1, 2, 3] and batch.valid[2:8].tolist() == [True] * 3 + [False] * 3
        outer = batch.blocks[0].graph
        # rows: seed 0 (self + 3), seed 4 (self only), hop-1 slots (self only; no in-edges), then sinks
        assert outer.offsets[:9].tolist() == [0, 4, 5, 6, 7, 8, 9, 10, 11]
        assert outer.indices[:4].tolist() == [0, 2, 3, 4] and outer.indices[4] == 1
        assert int(outer.offsets[-1]) == batch.blocks[0].capacity == outer.num_edges
    more = StaticNeighborSampler(colptr, row, fanout=[8], batch_size=1)
    assert more.sample(torch.tensor([0])).n_id[1:4].tolist() == [1, 2, 3]


def test_neighbours_and_subsets_are_uniform() -> None:
    """A star (node 0 with 20 in-neighbours; node 21 with 4): 4000 seed slots choosing 5 of 20 pick each neighbour
    4000 * 5 / 20 = 1000 times within 6 standard deviations (fixed seed); 4000 choosing 2 of 4 give each of the 6
    pairs about 1/6 of the time (within 6 standard deviations)."""
    src = torch.cat([torch.arange(1, 21), torch.arange(22, 26)])
    dst = torch.cat([torch.zeros(20, dtype=torch.long), torch.full((4,), 21)])
    colptr, row = _csc(src, dst, 26)
    gen = torch.Generator().manual_seed(0)
    star = StaticNeighborSampler(colptr, row, fanout=[5], batch_size=4000, generator=gen)
    picks = star.sample(torch.zeros(4000, dtype=torch.long)).n_id[4000:].view(4000, 5)
    assert bool((picks.diff(dim=1) > 0).all())  # distinct, in CSC order
    counts = torch.bincount(picks.reshape(-1), minlength=21)[1:].double()
    assert counts.sum() == 20000 and bool(((counts - 1000).abs() < 6 * 27.4).all()), counts
    pair = StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4000, generator=gen)
    pairs = pair.sample(torch.full((4000,), 21)).n_id[4000:].view(4000, 2) - 22
    pair_counts = torch.bincount(pairs[:, 0] * 4 + pairs[:, 1], minlength=16)
    expected, sd = 4000 / 6, (4000 * (1 / 6) * (5 / 6)) ** 0.5
    for a, b in itertools.combinations(range(4), 2):
        assert abs(int(pair_counts[a * 4 + b]) - expected) < 6 * sd, pair_counts


def test_blocks_are_proper_cscs_with_self_loops_first_and_short_sink_rows() -> None:
    colptr, row = _simple_graph()
    sampler = StaticNeighborSampler(colptr, row, fanout=FANOUT, batch_size=6)
    batch = sampler.sample(torch.arange(6) * 11)
    for (n_src, n_dst, rows, cap), blk in zip(sampler.block_sizes(), batch.blocks):
        g = blk.graph
        assert (g.num_src_nodes, g.num_dst_nodes, g.num_edges) == (n_src, rows, cap) == (blk.num_src, blk.num_rows,
                                                                                            blk.capacity)
        assert g.rebuilt_every_call and g.short_rows and g.indices.dtype == torch.int32
        off = g.offsets.long()
        assert int(off[0]) == 0 and int(off[-1]) == cap and bool((off.diff() >= 0).all())
        assert bool((g.indices.long() < n_src).all()) and torch.equal(g.edge_index(), blk.edge_index)
        assert g.indices[off[:n_dst]].tolist() == list(range(n_dst))  # every real row starts with its self-loop
        assert int(off.diff()[n_dst:].max()) <= -(-(cap - n_dst) // (rows - n_dst))
        # short source rows too (the backward walks them whole): self-loop, parent edge, at most two sink edges
        assert int(torch.bincount(g.indices.long(), minlength=n_src).max()) <= 4
        # the real rows: each valid child slot exactly once, in the row of its parent slot
        src, dst = blk.edge_index[:, : int(off[n_dst])]
        children = src[src != dst]
        assert sorted(children.tolist()) == [s for s in range(sampler.batch_size, n_src) if bool(batch.valid[s])]


def _compact(blk) -> torch.Tensor:
    """The block without its sink rows: the valid edges and self-loops, as a [2, E] COO."""
    total = int(blk.graph.offsets[blk.num_dst])
    return blk.edge_index[:, :total]


@pytest.mark.parametrize("conv_name", ["gat", "gatv2"])
def test_a_layer_on_a_block_equals_the_layer_on_the_compact_subgraph(conv_name: str) -> None:
    from cudnn_gnn.layers import GATConv, GATv2Conv

    colptr, row = _simple_graph()
    sampler = StaticNeighborSampler(colptr, row, fanout=[4, 3], batch_size=5)
    batch = sampler.sample(torch.tensor([0, 1, 2, 50, 299]))
    conv_cls = GATConv if conv_name == "gat" else GATv2Conv
    torch.manual_seed(0)
    conv = conv_cls(6, 4, heads=2, add_self_loops=False, residual=True, backend="reference")
    x = torch.randn(sampler.num_slots, 6)
    for blk in batch.blocks:
        xs = x[: blk.num_src].clone().requires_grad_()
        out = conv((xs, xs[: blk.num_rows]), blk.graph)[: blk.num_dst]
        grad = torch.randn_like(out)
        (out * grad).sum().backward()
        grads = [xs.grad.clone()] + [p.grad.clone() for p in conv.parameters()]
        conv.zero_grad()
        xc = x[: blk.num_src].clone().requires_grad_()
        ref = conv((xc, xc[: blk.num_dst]), _compact(blk))
        (ref * grad).sum().backward()
        ref_grads = [xc.grad] + [p.grad for p in conv.parameters()]
        conv.zero_grad()
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_ours_and_pygs_gat_see_the_same_blocks() -> None:
    """The example's model (ours) and PyG's, same weights, over one batch's blocks: the same output (PyG's fed the
    COO edge_index with add_self_loops=False, ours the CSC graph)."""
    from _common import OgbGAT

    colptr, row = _simple_graph()
    x = torch.randn(300, 6)
    sampler = StaticNeighborSampler(colptr, row, fanout=[4, 3], batch_size=5, node_attrs={"x": x})
    batch = sampler.sample(torch.tensor([0, 1, 2, 50, 299]))
    torch.manual_seed(0)
    ours = OgbGAT("gat", 6, 4, 3, layers=2, heads=2, dropout=0.0, norm=False, backend="reference").eval()
    pyg = OgbGAT("pyg-gat", 6, 4, 3, layers=2, heads=2, dropout=0.0, norm=False).eval()
    pyg.load_state_dict(ours.state_dict())
    a = forward_blocks(ours, batch.attrs["x"], batch.blocks)
    b = forward_blocks(pyg, batch.attrs["x"], batch.blocks, pyg=True)
    assert a.shape == (5, 3)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert all(c.add_self_loops for c in ours.convs)  # restored after the blocks
    with self_loops_in_blocks(ours):
        assert not any(c.add_self_loops for c in ours.convs)


@pytest.mark.parametrize("model_name", ["gat", "pyg-gat"])
def test_a_warm_sampled_step_issues_no_host_sync(model_name: str) -> None:
    """Sampling, gather, forward, loss, backward and Adam: no op that syncs on CUDA, ours and PyG's layer (fed the
    blocks' edge_index with add_self_loops=False), the padded last batch included."""
    from _common import OgbGAT

    colptr, row = _simple_graph()
    x, y = torch.randn(300, 6), torch.randint(0, 3, (300,))
    sampler = StaticNeighborSampler(colptr, row, fanout=[4, 3], batch_size=8, node_attrs={"x": x, "y": y})
    torch.manual_seed(0)
    model = OgbGAT(model_name, 6, 4, 3, layers=2, heads=2, norm=False, backend="reference")
    opt = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)
    step = CapturedStep(sampled_loss(model, sampler, pyg=model_name == "pyg-gat"), optimizer=opt, model=model,
                        capture=False,
                        inputs={"seeds": torch.zeros(8, dtype=torch.long), "seed_valid": torch.ones(8, dtype=torch.bool)})
    epoch = list(sampler.epoch(torch.arange(0, 300, 13)))
    step(seeds=epoch[0][0], seed_valid=epoch[0][1])  # warm-up
    check = static_sampler._refuse_classes_outside  # the loss's CPU-only check
    assert syncs_outside(host_syncs(lambda: step(seeds=epoch[1][0], seed_valid=epoch[1][1])), check) == []
    assert syncs_outside(host_syncs(lambda: step(seeds=epoch[-1][0], seed_valid=epoch[-1][1])), check) == []  # padded
    assert torch.isfinite(step.last_loss)


@pytest.mark.slow
def test_the_sampled_step_learns() -> None:
    """Labels a function of the node's in-neighbours: the loss falls over a few epochs of sampled steps."""
    from _common import OgbGAT

    colptr, row = _simple_graph()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 6, generator=g)
    y = (x[:, 0] > 0).long()
    sampler = StaticNeighborSampler(colptr, row, fanout=[4, 3], batch_size=100, node_attrs={"x": x, "y": y})
    torch.manual_seed(0)
    model = OgbGAT("gat", 6, 8, 2, layers=2, heads=2, dropout=0.0, norm=False, backend="reference")
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    step = CapturedStep(sampled_loss(model, sampler), optimizer=opt, model=model, capture=False,
                        inputs={"seeds": torch.zeros(100, dtype=torch.long), "seed_valid": torch.ones(100, dtype=torch.bool)})
    means = []
    for _ in range(5):
        for seeds, mask in sampler.epoch(torch.arange(300)):
            step(seeds=seeds, seed_valid=mask)
        means.append(step.mean_loss())
    assert means[-1] < 0.6 * means[0], means


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"fanout": [3, -1]}, ValueError, r"fanout must be a non-empty list of ints >= 1 .*got \[3, -1\]"),
    ({"fanout": []}, ValueError, r"fanout must be a non-empty list"),
    ({"fanout": "3,2"}, TypeError, r"fanout must be a list of ints, got str"),
    ({"batch_size": 0}, ValueError, r"batch_size must be"),
    ({"node_attrs": {"x": torch.zeros(5, 2)}}, ValueError, r"node_attrs\['x'\] must have shape \(num_nodes=300, "
                                                           r"\.\.\.\), got \(5, 2\)"),
    ({"generator": 3}, TypeError, r"generator must be a torch.Generator, got int"),
])
def test_argument_errors(kwargs, exc, match) -> None:
    colptr, row = _simple_graph()
    kw = {"fanout": [3, 2], "batch_size": 4, **kwargs}
    with pytest.raises(exc, match=match):
        StaticNeighborSampler(colptr, row, **kw)


def test_malformed_csc_and_batch_shape_errors() -> None:
    colptr, row = _simple_graph()
    with pytest.raises(ValueError, match=r"row must hold node ids in \[0, num_nodes=300\), got values in"):
        StaticNeighborSampler(colptr, row + 1, fanout=[2], batch_size=4)
    with pytest.raises(ValueError, match=r"colptr must start at 0"):
        StaticNeighborSampler(colptr + 1, row, fanout=[2], batch_size=4)
    sampler = StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4)
    with pytest.raises(ValueError, match=r"input_nodes must be node ids in \[0, num_nodes=300\), got values in "
                                         r"\[0, 300\]"):
        next(sampler.epoch(torch.arange(301)))
    with pytest.raises(ValueError, match=r"seeds must have the sampler's shape \(batch_size=4,\), got \(5,\)"):
        sampler.sample(torch.arange(5))
    with pytest.raises(TypeError, match=r"seeds must"):
        sampler.sample(torch.zeros(4))
    with pytest.raises(TypeError, match=r"seed_valid must have dtype torch.bool, got torch.int64"):
        sampler.sample(torch.arange(4), torch.ones(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"seed_valid must have shape \(4,\) on cpu, got \(3,\) on cpu"):
        sampler.sample(torch.arange(4), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"sampler.node_attrs must hold 'x', got \[\]"):
        sampled_loss(torch.nn.Linear(1, 1), sampler)
    step_inputs = {"seeds": torch.zeros(4, dtype=torch.long)}
    opt = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    step = CapturedStep(lambda seeds: seeds.float().sum(), optimizer=opt, inputs=step_inputs, capture=False)
    with pytest.raises(ValueError, match=r"seeds must have the captured shape \(4,\), got \(8,\)"):
        step(seeds=torch.zeros(8, dtype=torch.long))


class _EagerStep:
    """What capture_ahead reads of a CapturedStep (steps, eager_reason, warmup, modules, optimizer, mean_loss), its
    calls real eager Adam steps: the capture itself needs CUDA (tests/gpu/test_static_sampler_gpu.py)."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer, *, scheduler: object = None,
                 pass_model: bool = True) -> None:
        self.steps, self.eager_reason, self.warmup, self.optimizer = 0, None, 2, opt
        self.model, self.modules, self.scheduler = model, [model] if pass_model else [], scheduler
        self.reset = False

    def __call__(self, seeds: torch.Tensor, seed_valid: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        self.model(seeds.float()[:, None]).pow(2).sum().backward()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()  # type: ignore[attr-defined]
        self.steps += 1

    def mean_loss(self, reset: bool = True) -> float:
        self.reset = reset
        return 0.0


def test_capture_ahead_puts_parameters_buffers_and_fresh_adam_state_back() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    step = _EagerStep(model, opt)
    batches = [(torch.arange(4) + k, torch.ones(4, dtype=torch.bool)) for k in range(5)]
    assert capture_ahead(step, batches) == 3 and step.steps == 3 and step.reset
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # BatchNorm's running statistics and step count too
    assert opt.state and all(not bool(t.any()) for st in opt.state.values() for t in st.values())
    # the next step from the restored state is a fresh Adam's first step
    fresh = torch.nn.Sequential(torch.nn.Linear(1, 3), torch.nn.BatchNorm1d(3))
    fresh.load_state_dict(before)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    _EagerStep(fresh, fresh_opt)(*batches[0])
    step(*batches[0])
    for a, b in zip(model.parameters(), fresh.parameters()):
        torch.testing.assert_close(a, b)
    assert capture_ahead(step, batches) == 0  # the step has run already: nothing to do


def test_capture_ahead_puts_the_learning_rate_and_the_scheduler_back() -> None:
    """A scheduler stepped in the warm-up: its state and the (tensor) learning rate it wrote are put back, in place,
    so that epoch 1 starts at the first learning rate and the schedule from its start."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 3)
    lr = torch.tensor(0.1)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    step = _EagerStep(model, opt, scheduler=sched)
    batches = [(torch.arange(4) + k, torch.ones(4, dtype=torch.bool)) for k in range(5)]
    assert capture_ahead(step, batches) == 3
    assert opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(0.1)  # not 0.1 / 8
    assert sched.last_epoch == 0 and sched.get_last_lr() == [pytest.approx(0.1)]
    step(*batches[0])
    assert float(lr) == pytest.approx(0.05)  # the schedule goes on from its start


def test_capture_ahead_without_model_puts_the_optimizers_parameters_back() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 3)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = _EagerStep(model, opt, pass_model=False)
    batches = [(torch.arange(4) + k, torch.ones(4, dtype=torch.bool)) for k in range(5)]
    assert capture_ahead(step, batches) == 3
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p, b)


def test_masked_cross_entropy_drops_nan_targets_before_the_cast() -> None:
    """A padded row's float target is NaN (ogbn-papers100M's unlabelled node 0): it is replaced before the cast to
    int (on a CPU NaN casts to INT64_MIN, which cross-entropy refuses), and a NaN target in a kept row is dropped."""
    from cudnn_gnn.apps.static_sampler import masked_cross_entropy

    logits = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([1.0, 2.0, float("nan"), 0.0])
    keep = torch.tensor([0, 1, 3])
    expected = torch.nn.functional.cross_entropy(logits[keep], target[keep].long())
    for mask in (torch.tensor([True, True, False, True]), torch.ones(4, dtype=torch.bool)):
        got = masked_cross_entropy(logits, target, mask)
        assert torch.isfinite(got) and torch.allclose(got, expected)


def test_masked_cross_entropy_refuses_a_class_past_the_logits_or_poisons_it_where_a_sync_is_costly(monkeypatch) -> None:
    """A kept row's class id past the logits' columns (cross-entropy would index past them: on CUDA an assert that
    ends the context): ValueError on CPU; where a sync is costly (CUDA, forced here) a NaN loss, no host read. A
    masked row's bad id is ignored either way."""
    from cudnn_gnn.apps import static_sampler as ss

    logits = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([1, 3, 0, 2])
    keep = torch.tensor([True, False, True, True])
    good = ss.masked_cross_entropy(logits, target, keep)  # row 1's 3 is masked
    assert torch.isfinite(good)
    with pytest.raises(ValueError, match=r"^target must hold class ids in \[0, 3\) \(the logits' columns\) on the "
                                         r"rows mask keeps, got 3"):
        ss.masked_cross_entropy(logits, target, torch.ones(4, dtype=torch.bool))
    monkeypatch.setattr(ss, "sync_is_costly", lambda device: True)
    leaf = logits.clone().requires_grad_()
    poisoned = ss.masked_cross_entropy(leaf, target, torch.ones(4, dtype=torch.bool))
    poisoned.backward()
    assert torch.isnan(poisoned) and torch.isnan(leaf.grad).all()  # no step on the clamped labels
    assert torch.equal(ss.masked_cross_entropy(logits, target, keep), good)
    assert torch.isnan(ss.masked_cross_entropy(logits, torch.tensor([1.0, -1.0, 0.0, 2.0]), torch.ones(4, dtype=torch.bool)))


def test_out_of_range_seeds_are_sampled_as_padding() -> None:
    colptr, row = _simple_graph()
    sampler = StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4)
    batch = sampler.sample(torch.tensor([-1, 0, 300, 5]))
    assert batch.seed_valid.tolist() == [False, True, False, True]
    assert bool((batch.n_id >= 0).all()) and bool((batch.n_id < 300).all())
    with pytest.raises(ValueError, match=r"seeds must be node ids in \[0, num_nodes=300\), got 2 outside, "
                                         r"e.g. \[-1, 300\]"):
        sampler.sample(torch.tensor([-1, 0, 300, 5]), validate=True)


@pytest.mark.parametrize(("y", "exc", "match"), [
    (torch.full((300,), 1.5), ValueError, r"must hold class ids: whole numbers >= 0, or NaN"),
    (torch.zeros(300, 2, dtype=torch.long), ValueError, r"must have shape \(num_nodes,\) or \(num_nodes, 1\)"),
    (torch.full((300,), -1), ValueError, r"must hold class ids >= 0, got -1"),
    (torch.zeros(300, dtype=torch.bool), TypeError, r"must hold class ids \(an integer or float dtype\)"),
])
def test_sampled_loss_refuses_labels_that_are_not_class_ids(y, exc, match) -> None:
    colptr, row = _simple_graph()
    sampler = StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4,
                                    node_attrs={"x": torch.randn(300, 3), "lab": y})
    with pytest.raises(exc, match=r"sampler.node_attrs\['lab'\] \(labels='lab'\) " + match):
        sampled_loss(torch.nn.Linear(3, 2), sampler, labels="lab")


def test_float_labels_with_nan_are_accepted() -> None:
    colptr, row = _simple_graph()
    y = torch.arange(300).remainder(3).float()
    y[::7] = float("nan")
    sampler = StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4, node_attrs={"x": torch.randn(300, 3), "y": y})
    sampled_loss(torch.nn.Linear(3, 2), sampler)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "gpu"])
def test_a_device_this_machine_lacks_is_refused_naming_device(device) -> None:
    if torch.cuda.is_available() and device != "gpu":
        pytest.skip("a CUDA GPU is visible: 'cuda' is a device this machine has")
    colptr, row = _simple_graph()
    with pytest.raises(ValueError, match=r"device must be"):
        StaticNeighborSampler(colptr, row, fanout=[2], batch_size=4, device=device)
