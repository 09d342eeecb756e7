"""DeviceNeighborLoader on CUDA (issue #16): the batches' invariants (graph edges, min(deg, fanout) in-edges per
frontier node, hop-by-hop layout), determinism per seed with a CUDA generator, uniform draws, and exactly the
documented host syncs per batch, ``len(fanout) + 1``, counted by ``torch.cuda.set_sync_debug_mode("warn")``; the
BackgroundLoader on a side stream (the inline batches, memory kept for the consumer's stream) and the GPU-busy
measurements (the union over two streams, the kernel window)."""

from __future__ import annotations

import warnings

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from cudnn_gnn.apps.sampler import DeviceNeighborLoader  # noqa: E402

DEV = torch.device("cuda")
FANOUT = [10, 10, 5]


def _graph(n: int = 5000, e: int = 80_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A skewed CSC on the host (hubs far above the fan-out, nodes without in-edges)."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.multinomial(torch.arange(1, n + 1, dtype=torch.float64).pow(-1.1), e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    order = (dst * n + src).argsort()
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=n).cumsum(0)
    return colptr, src[order]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_batches_on_cuda_are_graph_edges_hop_by_hop(dtype) -> None:
    colptr, row = _graph()
    loader = DeviceNeighborLoader(colptr.to(dtype), row.to(dtype), node_attrs={"x": torch.randn(5000, 4)},
                                  input_nodes=torch.randperm(5000)[:600], fanout=FANOUT, batch_size=256, shuffle=True,
                                  device="cuda", seed=0)
    deg_all = colptr.diff()
    for batch in loader:
        assert batch.edge_index.is_cuda and batch.x.is_cuda
        b = batch.to("cpu")
        src, dst = b.edge_index
        assert torch.equal(row[b.e_id], b.n_id[src]) and torch.equal(b.x, loader.node_attrs["x"].cpu()[b.n_id])
        assert bool(((colptr[b.n_id[dst]] <= b.e_id) & (b.e_id < colptr[b.n_id[dst] + 1])).all())
        assert b.n_id.unique().numel() == b.n_id.numel() and b.e_id.unique().numel() == b.e_id.numel()
        nodes, edges = b.num_sampled_nodes, b.num_sampled_edges
        starts = [sum(nodes[:k]) for k in range(len(nodes) + 1)]
        estarts = [sum(edges[:k]) for k in range(len(edges) + 1)]
        got = torch.bincount(dst, minlength=b.num_nodes)
        for k, f in enumerate(FANOUT):
            want = deg_all[b.n_id[starts[k]: starts[k + 1]]].clamp(max=f)
            assert torch.equal(got[starts[k]: starts[k + 1]], want)
            hop_dst = dst[estarts[k]: estarts[k + 1]]
            assert bool(((hop_dst >= starts[k]) & (hop_dst < starts[k + 1])).all())
            hop_src = src[estarts[k]: estarts[k + 1]]
            assert bool((hop_src < starts[k + 2]).all())


def test_same_seed_same_batches_on_cuda() -> None:
    colptr, row = _graph()
    runs = []
    for _ in range(2):
        loader = DeviceNeighborLoader(colptr, row, input_nodes=torch.arange(512), fanout=FANOUT, batch_size=128,
                                      shuffle=True, device="cuda", seed=7)
        runs.append([b.e_id for epoch in range(2) for b in loader])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    assert not torch.equal(runs[0][0], runs[0][4])  # epoch 2 draws anew


def test_uniform_draws_on_cuda() -> None:
    """Node 0 with 20 in-neighbours, 4000 draws of 5: each neighbour 1000 times within 6 standard deviations."""
    colptr = torch.tensor([0] + [20] * 21)
    row = torch.arange(1, 21)
    loader = DeviceNeighborLoader(colptr, row, input_nodes=torch.zeros(4000, dtype=torch.long), fanout=[5],
                                  batch_size=4000, device="cuda", seed=0)
    e_id = next(iter(loader)).e_id.view(4000, 5).cpu()
    assert bool((e_id.diff(dim=1) > 0).all())
    counts = torch.bincount(e_id.reshape(-1), minlength=20).double()
    assert bool(((counts - 1000).abs() < 6 * 27.4).all()), counts


@pytest.mark.parametrize("fanout", [[5], [40]], ids=["floyd", "random_keys"])
def test_uniform_draws_above_floyds_range_on_cuda(fanout: list[int]) -> None:
    """Node 0 with 60 in-neighbours, 3000 draws of 5 (Floyd's) or 40 (random keys): each neighbour about
    ``3000 * fanout / 60`` times, within 6 standard deviations; distinct and sorted within a draw."""
    colptr = torch.tensor([0] + [60] * 61)
    row = torch.arange(1, 61)
    loader = DeviceNeighborLoader(colptr, row, input_nodes=torch.zeros(3000, dtype=torch.long), fanout=fanout,
                                  batch_size=3000, device="cuda", seed=0)
    e_id = next(iter(loader)).e_id.view(3000, fanout[0]).cpu()
    assert bool((e_id.diff(dim=1) > 0).all())
    p = fanout[0] / 60
    counts = torch.bincount(e_id.reshape(-1), minlength=60).double()
    assert bool(((counts - 3000 * p).abs() < 6 * (3000 * p * (1 - p)) ** 0.5).all()), counts


def test_fanout_far_above_the_degrees_on_cuda_is_fanout_all() -> None:
    """Fan-outs 10**9 and 5000 over a graph whose largest in-degree is below both: the batches of fan-out -1."""
    colptr, row = _graph(e=20_000)
    assert int(colptr.diff().max()) < 5000
    kw = {"input_nodes": torch.arange(0, 5000, 9), "batch_size": 128, "device": "cuda", "seed": 0}
    wide = DeviceNeighborLoader(colptr, row, fanout=[10**9, 5000], **kw)
    full = DeviceNeighborLoader(colptr, row, fanout=[-1, -1], **kw)
    for a, b in zip(wide, full, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id) and torch.equal(a.edge_index, b.edge_index)


@pytest.mark.parametrize("fanout", [FANOUT, [40, 40, 5], [10**9, 2000, 3]], ids=["floyd", "random_keys", "wide"])
def test_host_syncs_per_batch_are_the_documented_ones(fanout: list[int]) -> None:
    colptr, row = _graph()
    loader = DeviceNeighborLoader(colptr, row, node_attrs={"x": torch.randn(5000, 4)}, input_nodes=torch.arange(1024),
                                  fanout=fanout, batch_size=256, shuffle=True, device="cuda", seed=0)
    it = iter(loader)
    next(it)  # warm (the epoch's permutation)
    torch.cuda.synchronize(DEV)
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            batch = next(it)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    # torch's own notice that the sync debug mode "does not yet detect all synchronizing operations" is not a sync
    syncs = [w for w in caught if "called a synchronizing CUDA operation" in str(w.message)]
    assert batch.num_sampled_edges[-1] > 0
    assert len(syncs) == len(fanout) + 1, [str(w.message) for w in syncs]


def _sums(batch) -> torch.Tensor:
    """What a step would read of a batch, reduced on the current stream: [sum x, sum edge_index, sum e_id]."""
    return torch.stack([batch.x.double().sum(), batch.edge_index.double().sum(), batch.e_id.double().sum()])


def test_background_loader_on_cuda_gives_the_inline_batches() -> None:
    """Sampled in a thread on a side stream while the consumer's stream is busy (a 2 ms sleep kernel before each
    read), the batches are the inline ones, bit for bit; the batch is dropped at once after the read is queued, so a
    side-stream allocation that reused its memory before the read ran would change the sums (record_stream keeps
    it); a second loader over the shared map after an early break samples as it does alone."""
    from cudnn_gnn.apps.distributed import BackgroundLoader

    colptr, row = _graph()
    x = torch.randn(5000, 16)

    def make():
        return DeviceNeighborLoader(colptr, row, node_attrs={"x": x}, input_nodes=torch.arange(3000), fanout=FANOUT,
                                    batch_size=128, shuffle=True, device="cuda", seed=3)

    inline = [_sums(b).cpu() for b in make()]
    sums = []
    for batch in BackgroundLoader(make(), DEV, ahead=2):
        torch.cuda._sleep(2_000_000)  # ~1-2 ms on the consumer's stream before it reads the batch
        sums.append(_sums(batch))
        del batch
    torch.cuda.synchronize(DEV)
    assert len(sums) == len(inline) == 24
    assert all(torch.equal(a.cpu(), b) for a, b in zip(sums, inline))

    loader = make()
    for k, _ in enumerate(BackgroundLoader(loader, DEV)):
        if k == 3:
            break
    valid = loader.with_inputs(torch.arange(4000, 4500), batch_size=100, seed=4)
    alone = make().with_inputs(torch.arange(4000, 4500), batch_size=100, seed=4)
    assert all(torch.equal(_sums(a), _sums(b)) for a, b in zip(valid, alone))
    assert int(loader._map[:-1].min()) == 1 << 62


def test_busy_union_and_kernel_window_on_cuda() -> None:
    """Two streams' overlapping timed work counts once in the union; the kernel window counts a host pause between
    kernels as idle and a back-to-back stream of kernels as busy."""
    import time

    from cudnn_gnn.apps.distributed import BusyMeter, KernelBusyWindow, busy_union_seconds

    a, b = BusyMeter(DEV), BusyMeter(DEV)
    side = torch.cuda.Stream(DEV)
    torch.cuda.synchronize(DEV)
    with a.step():
        torch.cuda._sleep(20_000_000)
    with torch.cuda.stream(side), b.step():
        torch.cuda._sleep(20_000_000)
    torch.cuda.synchronize(DEV)
    union, total = busy_union_seconds(a, b), a.busy_seconds() + b.busy_seconds()
    assert 0 < union < 0.8 * total  # the two sleeps ran side by side

    m = torch.randn(2048, 2048, device=DEV)
    for pause, expect in ((0.02, lambda f: f < 0.5), (0.0, lambda f: f > 0.5)):
        window = KernelBusyWindow(DEV, start=1, count=3)
        for i in range(5):
            window.before(i)
            for _ in range(20):
                m = (m @ m).tanh_()
            time.sleep(pause)
            window.after(i)
        assert window.fraction is not None and expect(window.fraction), (pause, window.fraction)
        assert window.kernels >= 3 * 40 and window.window_seconds > 0
