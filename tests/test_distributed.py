"""Tests for cudnn_gnn.apps.distributed: DDP parity on CPU (gloo), seed sharding, the pipeline helpers that run
without a GPU or a sampler, and the memory model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudnn_gnn.apps.distributed import (
    BusyMeter,
    DistContext,
    Prefetcher,
    all_reduce_counts,
    estimate_memory,
    init_distributed,
    launched_by_torchrun,
    sampled_hop_sizes,
    sampler_available,
    shard_seeds,
    wrap_ddp,
)

from .conftest import interpret_triton_on_cpu

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_ddp_two_gloo_ranks_equal_single_process(tmp_path: Path) -> None:
    """2 spawned gloo ranks of a small GAT (our GATConv, reference backend, each rank's loss the mean over its half
    of the seeds) end with the parameters of one process trained on the mean over all seeds; ranks agree bitwise,
    no parameter is left without a gradient (find_unused_parameters=False), sharded evaluation counts add up."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    subprocess.run([sys.executable, str(HERE / "_ddp_parity.py"), str(tmp_path), "4"], check=True, env=env,
                   timeout=120)
    single = torch.load(tmp_path / "single-rank0.pt")
    r0, r1 = (torch.load(tmp_path / f"ddp-rank{r}.pt") for r in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2 and single["world_size"] == 1
    assert single["state"].keys() == r0["state"].keys()
    for key, value in single["state"].items():
        assert torch.equal(r0["state"][key], r1["state"][key]), key
        torch.testing.assert_close(r0["state"][key], value, atol=1e-6, rtol=0, msg=key)
    assert r0["counts"] == r1["counts"] and r0["counts"][1] == 60
    assert abs(r0["counts"][0] - single["counts"][0]) <= 1


def test_shard_seeds_partition_the_same_permutation() -> None:
    from torch.utils.data import DistributedSampler

    seeds = torch.arange(100, 203)  # 103 seeds: 1 dropped for 2 ranks, 3 for 4
    for world in (1, 2, 4):
        parts = [shard_seeds(seeds, epoch=3, seed=5, rank=r, world_size=world) for r in range(world)]
        assert len({p.numel() for p in parts}) == 1 and parts[0].numel() == 103 // world
        union = torch.cat(parts)
        assert union.unique().numel() == union.numel() and bool(torch.isin(union, seeds).all())
        for r, part in enumerate(parts):  # DistributedSampler's deal, index for index
            sampler = DistributedSampler(range(103), num_replicas=world, rank=r, seed=5, drop_last=True)
            sampler.set_epoch(3)
            assert torch.equal(part, seeds[list(sampler)])
    one = shard_seeds(seeds, epoch=3, seed=5, rank=0, world_size=1)
    two = [shard_seeds(seeds, epoch=3, seed=5, rank=r, world_size=2) for r in range(2)]
    assert torch.equal(torch.stack(two, 1).view(-1), one[:102])  # dealt in turn from the single-process order
    assert not torch.equal(one, shard_seeds(seeds, epoch=4, seed=5, rank=0, world_size=1))
    assert torch.equal(shard_seeds(seeds, epoch=0, seed=0, rank=1, world_size=2, shuffle=False), seeds[1:102:2])
    with pytest.raises(ValueError, match="rank must be in"):
        shard_seeds(seeds, epoch=0, seed=0, rank=2, world_size=2)


def test_single_process_context_has_no_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    assert not launched_by_torchrun()
    ctx = init_distributed("cpu")
    assert ctx == DistContext() and ctx.is_main and not ctx.distributed
    model = torch.nn.Linear(2, 2)
    assert wrap_ddp(model, ctx) is model
    assert all_reduce_counts([3, 4], ctx) == [3, 4]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launched_by_torchrun()
    with pytest.raises(ValueError, match="rank must be in"):
        init_distributed("cpu", rank=2, world_size=2)


def test_prefetcher_and_busy_meter_are_pass_throughs_on_cpu() -> None:
    batches = [torch.full((3,), float(i)) for i in range(4)]
    seen = list(Prefetcher(batches, torch.device("cpu")))
    assert [int(b[0]) for b in seen] == [0, 1, 2, 3]
    meter = BusyMeter(torch.device("cpu"))
    with meter.step():
        pass
    assert meter.busy_seconds() is None and meter.fraction(1.0) is None


class _Event:
    """A stand-in for a completed CUDA event at ``t`` milliseconds (elapsed_time as CUDA's: to ``other``, in ms)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def elapsed_time(self, other: _Event) -> float:
        return other.t - self.t


def test_busy_union_counts_overlapping_steps_once() -> None:
    from cudnn_gnn.apps.distributed import busy_union_seconds

    step, sample = BusyMeter(torch.device("cpu")), BusyMeter(torch.device("cpu"))
    assert busy_union_seconds(step, sample) is None  # CPU meters time nothing
    step.cuda = sample.cuda = True
    assert busy_union_seconds(step, sample) == 0.0
    # steps [10, 20], [30, 45], [50, 51] ms on one stream; sampling [0, 12], [18, 32], [60, 70] on another
    step.pairs = [(_Event(a), _Event(b)) for a, b in ((10, 20), (30, 45), (50, 51))]
    sample.pairs = [(_Event(a), _Event(b)) for a, b in ((0, 12), (18, 32), (60, 70))]
    assert step.busy_seconds() == pytest.approx(0.026) and sample.busy_seconds() == pytest.approx(0.036)
    assert busy_union_seconds(step, sample) == pytest.approx(0.056)  # [0, 45] + [50, 51] + [60, 70]
    assert busy_union_seconds(sample) == pytest.approx(0.036)


def test_kernel_busy_window_is_inert_on_cpu() -> None:
    from cudnn_gnn.apps.distributed import KernelBusyWindow

    window = KernelBusyWindow(torch.device("cpu"), start=0, count=3)
    for i in range(5):
        window.before(i)
        window.after(i)
    assert window.fraction is None and window.kernels == 0 and window.busy_estimate(3.0, 24) is None
    # a closed window of 4 batches: 80 ms of kernels; 1 s added to a 3 s epoch of 24 batches, so the 20 batches
    # outside it took 2 s (0.1 s each) and a batch's 20 ms of kernels is 20% of an unprofiled batch
    window.busy_seconds, window.count, window.cost_seconds = 0.08, 4, 1.0
    assert window.busy_estimate(3.0, 24) == pytest.approx(0.2)
    assert window.busy_estimate(1.0, 24) is None and window.busy_estimate(3.0, 4) is None


def test_memory_model_grows_as_the_formulas_say() -> None:
    nodes, edges = sampled_hop_sizes(512, [10, 10, 5])
    assert nodes == [512, 5120, 51200, 256000] and edges == [5120, 51200, 256000]
    assert sampled_hop_sizes(10, [5, 5], num_nodes=40)[0] == [10, 30, 0]
    # fan-out -1 (every in-edge): bounded by the graph's edges, never negative
    assert sampled_hop_sizes(10, [-1, 5], num_nodes=1000, num_edges=300) == ([10, 300, 300], [300, 300])
    with pytest.raises(ValueError, match=r"num_edges must be given for fanout\[0\] = -1"):
        sampled_hop_sizes(10, [-1])
    kw = dict(num_nodes=1000, num_edges=20000, num_features=128, num_classes=172, batch_size=64, fanout=[5, 5],
              hidden=32, heads=4)
    ours, pyg = estimate_memory(**kw), estimate_memory(**kw, model="pyg-gat")
    assert ours.host_features == 1000 * 128 * 4 and ours.host_structure == 8 * 1001 + 8 * 20000
    assert ours.host_total == pyg.host_total and pyg.gpu_activations > ours.gpu_activations
    # PyG's extra is the [E, H, C] messages and three [E, H] attention tensors per layer (edges + self-loops).
    e1 = 64 * 5 + 320 * 5 + 64 + 320  # layer 1: both hops' edges and the loops of its targets
    e2 = 64 * 5 + 64
    assert pyg.gpu_activations - ours.gpu_activations == 4 * (e1 * 128 + e2 * 4 * 172) + 12 * 4 * (e1 + e2)
    two = estimate_memory(**kw, ranks=2, num_workers=2)
    assert two.host_total - two.host_features - two.host_structure - two.host_labels == 2 * two.host_per_rank
    assert two.gpu_model_state > ours.gpu_model_state  # DDP's gradient buckets
    assert set(ours.as_dict()) >= {"host_total", "gpu_total"} and "GiB" in ours.summary()
    with pytest.raises(ValueError, match="model must be"):
        estimate_memory(**kw, model="sage")


def test_memory_model_untrimmed_runs_every_layer_on_the_whole_batch() -> None:
    """Without per-hop counts (torch-sparse's sampler) every layer sees the batch's nodes and edges."""
    kw = dict(num_nodes=1000, num_edges=20000, num_features=128, num_classes=172, batch_size=64, fanout=[5, 5],
              hidden=32, heads=4, act_bytes=2)
    trimmed, whole = estimate_memory(**kw), estimate_memory(**kw, trimmed=False)
    n, e = whole.batch_nodes, whole.batch_edges + whole.batch_nodes  # the batch, with self-loops
    per_layer = [2 * (n * (128 + 128) + 3 * n * 128) + 4 * 3 * n * 4 + 16 * e,
                 2 * (n * (128 + 4 * 172) + 3 * n * 4 * 172) + 4 * 3 * n * 4 + 16 * e]
    assert whole.gpu_activations == sum(per_layer) > trimmed.gpu_activations
    assert whole.host_total == trimmed.host_total
    # the backward's transient at the hidden layer: three float32 [n, H*C] gradients (PyG: and three [E, H, C])
    assert whole.gpu_backward_transient == 3 * 4 * n * 128
    pyg = estimate_memory(**kw, trimmed=False, model="pyg-gat")
    assert pyg.gpu_backward_transient == 3 * 4 * n * 128 + 3 * 2 * e * 128
    assert whole.gpu_total == (whole.gpu_model_state + whole.gpu_batch_inputs + whole.gpu_structure_per_batch
                               + whole.gpu_activations + whole.gpu_backward_transient)


def test_memory_model_predicts_the_measured_h200_peaks() -> None:
    """The two sampled runs measured on the H200 (torch-sparse: every layer on the whole batch; bf16; batches of
    1024 seeds, fan-out 10,10,5, 4 x 128), at the mean batch the same loader produces on the CPU (40 batches,
    docs/scale.md): the model predicts each measured peak within 20%."""
    papers = dict(num_nodes=11_105_996, num_edges=161_568_587, num_features=128, num_classes=172, num_workers=20,
                  params=1_100_300, hop_nodes=[288_332], hop_edges=[294_952])
    products = dict(num_nodes=2_449_029, num_edges=123_718_280, num_features=100, num_classes=47, num_workers=6,
                    params=750_503, hop_nodes=[366_631], hop_edges=[526_833])
    common = dict(batch_size=1024, fanout=[10, 10, 5], hidden=128, heads=4, act_bytes=2, trimmed=False)
    measured_gib = ((papers, "gat", 7.09), (papers, "pyg-gat", 11.03), (products, "gat", 7.62),
                    (products, "pyg-gat", 10.22))
    for run, model, peak in measured_gib:
        predicted = estimate_memory(**run, **common, model=model).gpu_total / 2**30
        assert abs(predicted / peak - 1) < 0.2, (model, run["num_nodes"], predicted, peak)


def test_memory_model_counts_the_example_parameters() -> None:
    from cudnn_gnn import GATConv

    layers = [GATConv(128, 32, heads=4, residual=True), GATConv(128, 32, heads=4, residual=True),
              GATConv(128, 172, heads=4, concat=False, residual=True)]
    params = sum(p.numel() for m in layers for p in m.parameters())
    est = estimate_memory(num_nodes=10, num_edges=10, num_features=128, num_classes=172, batch_size=1,
                          fanout=[1, 1, 1], hidden=32, heads=4)
    assert est.gpu_model_state == 16 * params


def test_memory_model_of_the_device_sampler() -> None:
    """--sampler device: the graph (features, labels, CSC, the relabel map) on every GPU, one batch's inputs there (no
    prefetched copy), no loader workers or pinned batches on the host; the model's terms are unchanged."""
    kw = dict(num_nodes=1000, num_edges=20000, num_features=128, num_classes=172, batch_size=64, fanout=[5, 5],
              hidden=32, heads=4, ranks=2, num_workers=4)
    host, dev = estimate_memory(**kw), estimate_memory(**kw, sampler="device")
    assert host.gpu_resident_graph == 0 and host.host_per_rank > 0
    assert dev.gpu_resident_graph == 1000 * 128 * 4 + 8 * 1001 + 8 * 20000 + 8 * 1000 + 8 * 1001
    assert dev.host_per_rank == 0 and dev.host_total == dev.host_features + dev.host_structure + dev.host_labels
    assert dev.gpu_batch_inputs * 2 == host.gpu_batch_inputs
    assert dev.gpu_activations == host.gpu_activations and dev.gpu_model_state == host.gpu_model_state
    assert dev.gpu_total == host.gpu_total - dev.gpu_batch_inputs + dev.gpu_resident_graph
    assert "resident graph" in dev.summary() and "resident graph" not in host.summary()
    ahead = estimate_memory(**kw, sampler="device", sample_ahead=2)  # a BackgroundLoader's batches made ahead
    assert ahead.gpu_batch_inputs == 3 * dev.gpu_batch_inputs
    assert ahead.gpu_total == dev.gpu_total + 2 * dev.gpu_batch_inputs
    with pytest.raises(ValueError, match="sampler must be 'pyg' or 'device', got 'cpu'"):
        estimate_memory(**kw, sampler="cpu")


@pytest.mark.skipif(sampler_available(), reason="checks the error raised when no sampler is installed")
def test_mapped_loader_without_sampler_names_the_install_command() -> None:
    from cudnn_gnn.apps.distributed import mapped_neighbor_loader

    with pytest.raises(RuntimeError, match="pip install pyg-lib"):
        mapped_neighbor_loader(torch.zeros(3, dtype=torch.long), torch.zeros(0, dtype=torch.long), node_attrs={},
                               input_nodes=torch.arange(2), fanout=[1], batch_size=1)


# ---------------------------------------------------------------------------------------------- the example

EXAMPLES = HERE.parent / "examples"
TINY = ["--scale", "3e-5", "--device", "cpu", "--no-progress", "--hidden", "8", "--heads", "2", "--batch-size", "256",
        "--num-workers", "0"]


@pytest.fixture
def papers(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location("example_papers100m", EXAMPLES / "papers100m.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("_common", None)


def test_papers100m_plan_only_writes_the_memory_model(papers, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    plan = papers.main([*TINY, "--root", str(tmp_path / "d"), "--plan-only", "--json", str(out)])
    assert plan == __import__("json").loads(out.read_text())
    n = plan["num_nodes"]
    mem = plan["memory_model_bound"]
    assert n == 3332 and mem["host_features"] == n * 128 * 4 and mem["host_structure"] == 8 * (n + 1) + 8 * plan["num_edges"]
    assert mem["gpu_model_state"] == 16 * plan["params"] and mem["gpu_total"] > mem["gpu_activations"] > 0
    assert (tmp_path / "d" / "manifest.json").is_file()


def _full_neighbourhood_loader(colptr, row, *, node_attrs, input_nodes, fanout, batch_size, **kwargs):
    """A stand-in for NeighborLoader (no sampler here): each batch is its seeds first, then every other node, with
    the whole graph relabelled (torch-sparse's layout: no per-hop counts, every layer on the whole subgraph)."""
    from torch_geometric.data import Data

    n = colptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(n), colptr.diff())
    batches = []
    for seeds in input_nodes.split(batch_size):
        rest = torch.ones(n, dtype=torch.bool)
        rest[seeds] = False
        n_id = torch.cat([seeds, torch.arange(n)[rest]])
        local = torch.empty(n, dtype=torch.long)
        local[n_id] = torch.arange(n)
        batches.append(Data(x=node_attrs["x"][n_id], y=node_attrs["y"][n_id], n_id=n_id, batch_size=seeds.numel(),
                            edge_index=torch.stack([local[row], local[dst]])))
    return batches


def test_papers100m_trains_through_the_pipeline_on_cpu(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The training loop (seed shards, prefetcher, busy meter, sharded evaluation, JSON) with the loader replaced by
    a full-neighbourhood stand-in, so it runs without pyg-lib/torch-sparse."""
    monkeypatch.setattr(papers, "sampler_available", lambda: True)
    monkeypatch.setattr(papers, "mapped_neighbor_loader", _full_neighbourhood_loader)
    out = tmp_path / "run.json"
    rec = papers.main([*TINY, "--root", str(tmp_path / "d"), "--epochs", "2", "--max-batches", "1", "--json", str(out),
                       "--backend", "reference", "--fanout", "2,2,2"])
    assert rec["world_size"] == 1 and len(rec["epochs"]) == 2 and rec["memory_model_bound"]["host_total"] > 0
    last = rec["epochs"][-1]
    assert last["gpu_busy_fraction"] is None and last["peak_gpu_bytes"] is None and last["batches"] == 1
    assert 0.0 <= last["valid_acc"] <= 1.0 and last["loss"] > 0 and last["peak_host_rss_bytes"] > 0
    assert out.is_file()
    # no per-hop counts from this loader: the model is evaluated at the largest batch, every layer on all of it
    assert rec["largest_batch"] == {"nodes": rec["num_nodes"], "edges": rec["num_edges"]}  # the whole graph
    from cudnn_gnn.apps.distributed import estimate_memory

    want = estimate_memory(num_nodes=rec["num_nodes"], num_edges=rec["num_edges"], num_features=128,
                           num_classes=172, batch_size=256, fanout=[2, 2, 2], hidden=8, heads=2, act_bytes=4,
                           num_workers=0, params=rec["params"], hop_nodes=[rec["num_nodes"]],
                           hop_edges=[rec["num_edges"]], trimmed=False)
    assert rec["memory_model_largest_batch"]["gpu_activations"] == want.as_dict()["gpu_activations"] > 0


def test_hop_batch_is_laid_out_as_the_sampler_lays_one_out(papers) -> None:
    """The warm-up's batches: per-hop counts of a sampler without repeats and with half the neighbours repeats,
    hop-by-hop edges that :func:`cudnn_gnn.sampled_blocks` accepts with its checks on."""
    from cudnn_gnn import sampled_blocks

    common = sys.modules["_common"]
    ei, nsn, nse = common.hop_batch(4, [3, 2], torch.Generator().manual_seed(0))
    assert nsn == [4, 12, 24] and nse == [12, 24] and ei.shape == (2, 36)
    blocks = sampled_blocks(ei, nsn, nse, 2, validate=True)
    assert [(b.num_src_nodes, b.num_dst_nodes, b.num_edges) for b in blocks] == [(40, 16, 36), (16, 4, 12)]
    ei, nsn, nse = common.hop_batch(4, [3, 2], torch.Generator().manual_seed(0), new_share=0.5)  # repeats
    assert nsn == [4, 6, 6] and nse == [12, 12] and sum(nsn) < sum(nse)
    sampled_blocks(ei, nsn, nse, 2, validate=True)


@pytest.mark.parametrize("fanout", [None, [3, 2]], ids=["flat", "hop_by_hop"])
@pytest.mark.parametrize("backend", ["reference", pytest.param("triton", marks=pytest.mark.slow)])  # interpreter
def test_warm_up_leaves_the_model_and_random_state_unchanged(papers, backend: str, fanout) -> None:
    """The warm-up step (kernel builds before epoch 1) on a model with batch norm and dropout: parameters, gradients
    (None), running statistics, training mode and the CPU random stream are those of before it; on the reference
    backend and on the Triton kernels (Triton's interpreter here), on a flat batch and on a hop-by-hop one."""
    if backend == "triton":
        pytest.importorskip("triton", reason="the triton backend needs the triton package")
        if not interpret_triton_on_cpu():
            pytest.skip("the Triton kernels run compiled on this machine's GPU: the GPU suites cover them")
    common = sys.modules["_common"]
    torch.manual_seed(5)
    model = common.OgbGAT("gat", 12, 4, 3, layers=2, heads=2, norm=True, dropout=0.5, backend=backend)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    seconds = common.warm_up(model, 12, torch.device("cpu"), "fp32", num_nodes=64, num_edges=300, seeds=16,
                             fanout=fanout)
    assert seconds > 0 and model.training
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)


def test_papers100m_no_warm_up_on_a_cpu(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager on a CPU builds no kernels: the warm-up step would only cost time (66 s of a 73 s run), so it is skipped
    there (with --compile it runs: test_papers100m_compiled_trains_like_eager_on_cpu); the losses are those of
    --no-warm-up. (That the step leaves the model and random state unchanged where it runs:
    test_warm_up_leaves_the_model_and_random_state_unchanged.)"""
    monkeypatch.setattr(papers, "sampler_available", lambda: True)
    monkeypatch.setattr(papers, "mapped_neighbor_loader", _full_neighbourhood_loader)
    called: list[int] = []
    monkeypatch.setattr(papers, "warm_up", lambda *a, **k: called.append(1) or 0.0)
    args = [*TINY, "--root", str(tmp_path / "d"), "--epochs", "2", "--max-batches", "1", "--backend", "reference",
            "--fanout", "2,2,2"]
    warm = papers.main(args)
    cold = papers.main([*args, "--no-warm-up"])
    assert not called and "warm_up_seconds" not in warm and "warm_up_seconds" not in cold
    assert [e["loss"] for e in warm["epochs"]] == [e["loss"] for e in cold["epochs"]]


def test_papers100m_refuses_a_run_beyond_host_memory_on_a_cpu(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """On a CPU the memory model's bound is compared with the machine's memory before any training."""
    monkeypatch.setattr(papers, "sampler_available", lambda: True)
    monkeypatch.setattr(papers, "worker", lambda *a, **k: pytest.fail("trained although it cannot fit"))
    real = papers.os.sysconf
    monkeypatch.setattr(papers.os, "sysconf", lambda name: 1 if name == "SC_PHYS_PAGES" else real(name))
    with pytest.raises(SystemExit) as exc:
        papers.main([*TINY, "--root", str(tmp_path / "d"), "--fanout", "2,2,2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "memory model" in err and "--scale" in err


def test_papers100m_builds_each_loader_once(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One training loader (shuffled, persistent workers when there are workers) and two evaluation loaders, built
    before the first epoch and iterated every epoch: loader workers start once per run, not once per epoch."""
    calls: list[dict] = []

    def recording(colptr, row, **kwargs):
        calls.append(kwargs)
        return _full_neighbourhood_loader(colptr, row, **kwargs)

    monkeypatch.setattr(papers, "sampler_available", lambda: True)
    monkeypatch.setattr(papers, "mapped_neighbor_loader", recording)
    rec = papers.main([*TINY, "--root", str(tmp_path / "d"), "--epochs", "3", "--eval-every", "1", "--max-batches",
                       "1", "--backend", "reference", "--fanout", "2,2,2"])
    assert len(rec["epochs"]) == 3 and all("valid_acc" in e for e in rec["epochs"])
    assert [c["shuffle"] for c in calls] == [True, False, False]
    assert all(c["persistent_workers"] is False and c["num_workers"] == 0 for c in calls)  # TINY: no workers
    from cudnn_gnn.datasets.synthetic import load_mapped

    g = load_mapped(str(tmp_path / "d"))
    assert sorted(calls[0]["input_nodes"].tolist()) == sorted(g.train_idx.tolist())  # one rank: the whole split


@pytest.mark.skipif(not sampler_available(), reason="sampled training needs pyg-lib or torch-sparse (neither installed)")
def test_papers100m_sampled_on_cpu(papers, tmp_path: Path) -> None:
    # batches of 8 seeds: the tiny graph's training split holds a few dozen, so --max-batches 2 is what stops it
    rec = papers.main([*TINY, "--root", str(tmp_path / "d"), "--epochs", "1", "--max-batches", "2", "--fanout", "3,3,2",
                       "--backend", "reference", "--batch-size", "8"])
    assert rec["epochs"][0]["batches"] == 2 and rec["epochs"][0]["loss"] > 0


def test_papers100m_with_the_device_sampler_on_cpu(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--sampler device end to end on CPU, needing neither pyg-lib nor torch-sparse: training and evaluation on the
    device sampler's batches, each layer on its trimmed block (per-hop counts), the memory model with the graph on the
    GPU side and no host workers, the record naming the sampler; ours and PyG's GATConv see the same batches and,
    from the same weights, give the same losses."""
    monkeypatch.setattr(papers, "sampler_available", lambda: False)
    args = [*TINY, "--root", str(tmp_path / "d"), "--epochs", "2", "--max-batches", "2", "--backend", "reference",
            "--fanout", "4,3,2", "--batch-size", "8", "--sampler", "device", "--no-warm-up", "--dropout", "0"]
    rec = papers.main(args)
    pyg = papers.main([*args, "--model", "pyg-gat"])
    assert rec["sampler"] == "device" and rec["num_workers"] == 0 and len(rec["epochs"]) == 2
    last = rec["epochs"][-1]
    assert last["batches"] == 2 and last["loss"] > 0 and 0.0 <= last["valid_acc"] <= 1.0
    assert last["gpu_sampling_seconds"] is None and last["gpu_busy_fraction_step_and_sampling"] is None  # CPU
    nodes, edges = rec["measured_hops"]["nodes"], rec["measured_hops"]["edges"]
    assert len(nodes) == 4 and len(edges) == 3 and nodes[0] == 8
    mem = rec["memory_model_measured_hops"]
    assert mem["host_per_rank"] == 0 and mem["gpu_resident_graph"] > 0 and mem["batch_nodes"] == sum(nodes)
    n = rec["num_nodes"]
    assert rec["gpu_resident_graph_bytes"] == 8 * (n + 1) + 8 * rec["num_edges"] + n * 128 * 4 + n * 4 + 8 * (n + 1)
    assert pyg["measured_hops"] == rec["measured_hops"]
    for ours, theirs in zip(rec["epochs"], pyg["epochs"]):
        assert abs(ours["loss"] - theirs["loss"]) < 1e-4


@pytest.mark.slow
def test_papers100m_compiled_trains_like_eager_on_cpu(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--compile end to end on CPU (the device sampler, the reference backend): the warm-up builds the compiled
    graphs, every batch of training and evaluation runs them without recompiling per batch size (one graph for
    training, one for evaluation, at most one more where a batch crosses a size guard), and the losses match the
    eager run's (dropout off, so neither draws)."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(papers, "sampler_available", lambda: False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # no artifact of another run
    args = [*TINY, "--root", str(tmp_path / "d"), "--epochs", "2", "--max-batches", "3", "--backend", "reference",
            "--fanout", "4,3,2", "--batch-size", "8", "--sampler", "device", "--dropout", "0"]
    torch._dynamo.reset()
    eager = papers.main(args)
    graphs0 = counters["stats"]["unique_graphs"]  # counters outlive reset(): other tests' graphs are in them
    rec = papers.main([*args, "--compile"])
    graphs = counters["stats"]["unique_graphs"] - graphs0
    assert rec["compile"] and not eager["compile"] and rec["warm_up_seconds"] > 0
    assert graphs <= 3, f"{graphs} graphs: something pins a batch size (TORCH_LOGS=recompiles says what)"
    for ours, ref in zip(rec["epochs"], eager["epochs"], strict=True):
        assert abs(ours["loss"] - ref["loss"]) < 1e-4


def test_papers100m_samples_ahead_in_a_thread_like_inline(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--sample-ahead 1 (the default with the device sampler: a BackgroundLoader) and 2 train on the same batches as
    --sample-ahead 0 (inline): the same losses, hop counts and accuracies over whole epochs. Cut short by
    --max-batches, an epoch still ends at its batch count and the thread is stopped before the evaluation loaders
    (which share the relabel map) start; it makes no batch past the cut, so the loader's generator has drawn for
    the same batches as inline and every epoch equals the inline run's (a batch made ahead past the cut would have
    drawn from it and changed epoch 2)."""
    monkeypatch.setattr(papers, "sampler_available", lambda: False)
    args = [*TINY, "--root", str(tmp_path / "d"), "--epochs", "2", "--backend", "reference", "--fanout", "4,3,2",
            "--batch-size", "8", "--sampler", "device", "--no-warm-up", "--dropout", "0"]
    inline = papers.main([*args, "--sample-ahead", "0"])
    assert inline["sample_ahead"] == 0 and inline["epochs"][0]["batches"] == 5  # 36 training seeds
    for ahead in ("1", "2"):
        rec = papers.main([*args, "--sample-ahead", ahead])
        assert rec["sample_ahead"] == int(ahead) and rec["measured_hops"] == inline["measured_hops"]
        for a, b in zip(rec["epochs"], inline["epochs"], strict=True):
            assert a["loss"] == b["loss"] and a["batches"] == b["batches"]
            assert a.get("valid_acc") == b.get("valid_acc") and a.get("test_acc") == b.get("test_acc")
    cut = papers.main([*args, "--max-batches", "2"])
    cut_inline = papers.main([*args, "--max-batches", "2", "--sample-ahead", "0"])
    assert [e["batches"] for e in cut["epochs"]] == [2, 2] and cut["epochs"][-1]["valid_seeds"] == 4
    for a, b in zip(cut["epochs"], cut_inline["epochs"], strict=True):
        assert a["loss"] == b["loss"] and a.get("valid_acc") == b.get("valid_acc")
    with pytest.raises(SystemExit):
        papers.parse([*args, "--sample-ahead", "-1"])


@pytest.mark.skipif(sampler_available(), reason="checks the message given when no sampler is installed")
def test_papers100m_without_sampler_names_the_install_command(papers, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        papers.main([*TINY, "--root", str(tmp_path / "d")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "--sampler pyg" in err and "pip install pyg-lib" in err


@pytest.mark.slow
def test_papers100m_two_gloo_ranks_split_a_global_batch(tmp_path: Path) -> None:
    """The example end to end on 2 spawned gloo ranks (the device sampler in its BackgroundLoader on each rank):
    --global-batch-size 16 gives each rank batches of 8, the record names both, every epoch runs its batches on both
    ranks (DDP's matched collectives: no hang), evaluation counts are summed over the ranks; a global batch that
    does not split evenly is refused before anything starts."""
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    out = tmp_path / "two.json"
    args = [sys.executable, str(EXAMPLES / "papers100m.py"), *TINY, "--root", str(tmp_path / "d"), "--epochs", "2",
            "--max-batches", "2", "--backend", "reference", "--fanout", "3,2,2", "--sampler", "device",
            "--no-warm-up", "--gpus", "2"]
    subprocess.run([*args, "--global-batch-size", "16", "--json", str(out)], check=True, env=env, timeout=300,
                   capture_output=True)
    rec = json.loads(out.read_text())
    assert rec["world_size"] == 2 and rec["batch_size"] == 8 and rec["global_batch_size"] == 16
    assert [e["batches"] for e in rec["epochs"]] == [2, 2] and rec["measured_hops"]["nodes"][0] == 8
    last = rec["epochs"][-1]
    assert last["valid_seeds"] == 4 and last["test_seeds"] == 6 and last["loss"] > 0  # both ranks' shards counted
    bad = subprocess.run([*args, "--global-batch-size", "15"], env=env, timeout=120, capture_output=True, text=True)
    assert bad.returncode == 2 and "--global-batch-size must be a positive multiple of the 2 ranks, got 15" in bad.stderr


def test_papers100m_full_evaluation_equals_sampling_every_in_edge(papers, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--eval full (layer-wise over full in-neighbourhoods, in chunks of 64 in-edges here) gives the accuracies of the
    sampled evaluation with every in-edge taken (fan-out -1 at every hop): both compute the exact outputs; it also
    runs over the host's memory-mapped graph (PyG's sampler path, the stand-in loader) and reports the receptive
    fields it computed."""
    monkeypatch.setattr(papers, "sampler_available", lambda: False)
    args = [*TINY, "--root", str(tmp_path / "d"), "--epochs", "1", "--max-batches", "1", "--backend", "reference",
            "--fanout=-1,-1,-1", "--batch-size", "8", "--sampler", "device", "--no-warm-up", "--dropout", "0"]
    sampled = papers.main(args)
    full = papers.main([*args, "--eval", "full", "--eval-max-edges", "64"])
    a, b = sampled["epochs"][-1], full["epochs"][-1]
    assert (a["valid_seeds"], a["test_seeds"]) == (b["valid_seeds"], b["test_seeds"]) == (4, 6)
    assert a["valid_acc"] == b["valid_acc"] and a["test_acc"] == b["test_acc"] and a["loss"] == b["loss"]
    assert [f[-1] for f in b["eval_fields"]] == [4, 6] and b["eval_store_bytes"] > 0
    monkeypatch.setattr(papers, "sampler_available", lambda: True)
    monkeypatch.setattr(papers, "mapped_neighbor_loader", _full_neighbourhood_loader)
    host_args = [a for a in args if a not in ("--sampler", "device")]  # PyG's sampler: the graph stays on the host
    host = papers.main([*host_args, "--eval", "full"])
    assert host["epochs"][-1]["valid_seeds"] == 4 and 0 <= host["epochs"][-1]["test_acc"] <= 1
    with pytest.raises(SystemExit):
        papers.parse([*args, "--eval-max-edges", "0"])


def test_papers100m_full_evaluation_on_a_rank_without_seeds(papers, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank whose part of a split is empty (more ranks than seeds) counts nothing there instead of failing, and
    still evaluates its part of the other split."""
    monkeypatch.setattr(papers, "sampler_available", lambda: False)
    args = papers.parse([*TINY, "--root", str(tmp_path / "d"), "--backend", "reference", "--eval", "full"])
    g = papers.prepare(args)
    model = papers.OgbGAT(args.model, g.x.size(1), args.hidden, g.num_classes, layers=args.layers, heads=args.heads,
                          out_heads=args.heads, norm=False, activation="elu", backend=args.backend)
    res = papers.evaluate_full(model, args, DistContext(rank=5, world_size=6), g, None)  # valid has 4 seeds
    assert res["valid_seeds"] == 0 and res["valid_acc"] == 0.0 and res["eval_fields"][0] == []
    assert res["test_seeds"] == 1 and len(res["eval_fields"][1]) == 3


def test_all_reduce_counts_refuses_float_counts() -> None:
    """Float counts were truncated to int64 silently (0.9 correct -> 0)."""
    ctx = DistContext()
    with pytest.raises(TypeError, match=r"counts must be integers, got 0.9 \(float\)"):
        all_reduce_counts([0.9, 4], ctx)
    with pytest.raises(TypeError, match="counts must be integers, got a tensor of dtype torch.float32"):
        all_reduce_counts(torch.tensor([1.0, 2.0]), ctx)
    assert all_reduce_counts(torch.tensor([1, 2]), ctx) == [1, 2]


@pytest.mark.parametrize(("change", "match"), [
    ({"batch_size": -5}, "batch_size must be >= 1, got -5"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"num_nodes": -1}, "num_nodes must be >= 1"),
    ({"heads": 0}, "heads must be >= 1"),
    ({"ranks": 0}, "ranks must be >= 1"),
    ({"num_workers": -2}, "num_workers must be >= 0"),
    ({"fanout": [10, 0]}, "fanout must be one int >= 1"),
    ({"fanout": []}, "fanout must be one int >= 1"),
    ({"hop_nodes": [4, -1, 3], "hop_edges": [3, 3]}, "hop_nodes must be counts >= 0"),
])
def test_estimate_memory_refuses_out_of_range(change: dict, match: str) -> None:
    """A negative batch gave negative bytes (a 'prediction' of -7536 bytes) instead of an error."""
    kw = {"num_nodes": 100, "num_edges": 1000, "num_features": 8, "num_classes": 3, "batch_size": 16,
          "fanout": [2, 2], "hidden": 4, "heads": 2}
    with pytest.raises(ValueError, match=match):
        estimate_memory(**{**kw, **change})
    with pytest.raises(TypeError, match="batch_size must be an int, got float"):
        estimate_memory(**{**kw, "batch_size": 16.0})


def test_papers100m_with_the_static_sampler_on_cpu(papers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--sampler static end to end on CPU (the step runs eagerly there, the same step CUDA captures): training and
    sampled evaluation on tree-sampled batches of fixed shape, the record naming the sampler and the slots; ours and
    PyG's GATConv from the same weights see the same blocks and give the same losses; several ranks are refused."""
    monkeypatch.setattr(papers, "sampler_available", lambda: False)
    args = [*TINY, "--root", str(tmp_path / "d"), "--epochs", "2", "--max-batches", "2", "--backend", "reference",
            "--fanout", "4,3,2", "--batch-size", "8", "--sampler", "static", "--no-warm-up", "--dropout", "0"]
    rec = papers.main(args)
    pyg = papers.main([*args, "--model", "pyg-gat"])
    assert rec["sampler"] == "static" and rec["num_workers"] == 0 and len(rec["epochs"]) == 2
    assert rec["static_slots_per_batch"] == 8 * (1 + 4 + 12 + 24) and rec["measured_hops"]["nodes"] == [8, 32, 96, 192]
    last = rec["epochs"][-1]
    assert last["batches"] == 2 and last["loss"] > 0 and 0.0 <= last["valid_acc"] <= 1.0 and not last["captured"]
    for ours, theirs in zip(rec["epochs"], pyg["epochs"]):
        assert abs(ours["loss"] - theirs["loss"]) < 1e-4
    with pytest.raises(SystemExit):
        papers.main([*args, "--gpus", "2"])
    with pytest.raises(SystemExit):
        papers.main([*args, "--fanout", "4,-1,2"])
