"""CPU smoke tests of the example scripts and of ``python -m cudnn_gnn train`` (each a few seconds).

The scripts are run in-process through their ``main(argv)`` on tiny synthetic graphs with tiny models; they
check the plumbing (arguments, data, models, loops, logs, summaries), not accuracy. ``--sampled`` needs pyg-lib
or torch-sparse: without them the test checks the error names the pip command, and the trimmed bipartite
mini-batch path is driven by a small pure-torch stand-in for ``NeighborLoader`` instead.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TINY = ["--device", "cpu", "--no-progress", "--epochs", "2", "--eval-every", "1"]


@pytest.fixture
def load(monkeypatch):
    """Import ``examples/<name>.py`` as a module (its folder on sys.path for ``_common``)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def _load(name: str):
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield _load
    sys.modules.pop("_common", None)


def _check_summary(res, metric, runs=1):
    assert res["metric"] == metric and res["runs"] == runs and res["params"] > 0 and not res["oom"]
    assert math.isfinite(res["test_mean"]) and math.isfinite(res["valid_mean"])
    assert all(math.isfinite(r["sec_per_epoch"]) for r in res["per_run"])


def test_main_job_prints_final_accuracy(capsys, tmp_path):
    from cudnn_gnn.apps.train import main

    out_json = tmp_path / "res.json"
    assert main(["--epochs", "3", "--device", "cpu", "--no-progress", "--json", str(out_json)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("final: Cora gat seed 0: test accuracy ") and "%" in lines[-1]
    res = json.loads(out_json.read_text())
    assert res["epochs_run"] == 3 and 0.0 <= res["test_acc"] <= 1.0 and res["model"] == "gat"


def test_main_job_pyg_baseline_same_initial_weights():
    from cudnn_gnn.apps.train import build_gat

    torch.manual_seed(0)
    ours = build_gat("gat", 20, 3)
    torch.manual_seed(0)
    pyg = build_gat("pyg-gat", 20, 3)
    theirs = pyg.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    assert all(torch.equal(v, theirs[k]) for k, v in ours.state_dict().items())


def test_main_job_models_train_identically_without_dropout():
    """With dropout off (no RNG), our model and PyG's follow the same loss curve: seeds differ only in dropout."""
    import torch.nn.functional as F

    from cudnn_gnn.apps.train import build_gat
    from cudnn_gnn.datasets import load_planetoid

    data = load_planetoid("Cora", normalize_features=True)[0]
    curves = []
    for name in ("gat", "pyg-gat"):
        torch.manual_seed(0)
        model = build_gat(name, data.num_features, 7, dropout=0.0)
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        curve = []
        for _ in range(15):
            opt.zero_grad()
            loss = F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask])
            loss.backward()
            opt.step()
            curve.append(loss.item())
        curves.append(torch.tensor(curve))
    torch.testing.assert_close(curves[0], curves[1], atol=1e-5, rtol=1e-5)


def test_main_job_bf16_citeseer_gatv2(capsys):
    from cudnn_gnn.apps.train import main

    assert main(["--dataset", "CiteSeer", "--model", "gatv2", "--precision", "bf16", "--epochs", "2",
                 "--device", "cpu", "--no-progress"]) == 0
    assert "final: CiteSeer gatv2 seed 0" in capsys.readouterr().out


def test_main_job_pubmed_needs_root():
    from cudnn_gnn.apps.train import main

    with pytest.raises(SystemExit):
        main(["--dataset", "PubMed"])


def test_gat_cora_two_models_two_seeds(load, tmp_path):
    out = tmp_path / "gat_cora.json"
    res = load("gat_cora").main(["--seeds", "0-1", "--epochs", "2", "--device", "cpu", "--no-progress",
                                 "--json", str(out)])
    assert set(res["summary"]) == {"gat", "pyg-gat"} and len(res["runs"]) == 4
    assert json.loads(out.read_text())["seeds"] == [0, 1]


def test_parse_seeds(load):
    load("ogbn_arxiv")
    common = sys.modules["_common"]
    assert common.parse_seeds("0-3") == [0, 1, 2, 3]
    assert common.parse_seeds("0,2,5-6") == [0, 2, 5, 6]
    with pytest.raises(Exception, match="increasing"):
        common.parse_seeds("5-1")


@pytest.mark.parametrize("model", ["gat", "pyg-gat"])
def test_ogbn_arxiv(load, tmp_path, model):
    log = tmp_path / "arxiv.jsonl"
    res = load("ogbn_arxiv").main(["--synthetic", "--scale", "0.002", *TINY, "--model", model, "--hidden", "16",
                                   "--heads", "2", "--use-labels", "--runs", "2", "--log", str(log)])
    _check_summary(res, "acc", runs=2)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 4 and {"epoch_seconds", "peak_memory_bytes", "valid"} <= records[0].keys()


def test_ogbn_products_full_batch(load, tmp_path):
    res = load("ogbn_products").main(["--synthetic", "--scale", "0.0005", *TINY, "--hidden", "16", "--heads", "2",
                                      "--precision", "bf16", "--json", str(tmp_path / "p.json")])
    _check_summary(res, "acc")
    assert json.loads((tmp_path / "p.json").read_text())["sampled"] is False


def test_ogbn_proteins_edge_features(load):
    res = load("ogbn_proteins").main(["--synthetic", "--scale", "0.0002", *TINY, "--hidden", "8", "--heads", "2",
                                      "--layers", "2"])
    _check_summary(res, "rocauc")


def test_ogbn_proteins_pyg_same_params(load):
    res = load("ogbn_proteins").main(["--synthetic", "--scale", "0.0002", *TINY, "--hidden", "8", "--heads", "2",
                                      "--layers", "2", "--model", "pyg-gat", "--epochs", "1"])
    _check_summary(res, "rocauc")


def _fake_neighbor_loader(graph, input_nodes, fanout, batch_size, shuffle, num_workers=0):
    """A pure-torch stand-in for PyG's NeighborLoader (first ``k`` in-neighbours per node and hop), laying
    batches out as pyg-lib does: seeds first, then each hop's new nodes; edges grouped by hop; per-hop counts."""
    ei, n = graph.edge_index, graph.num_nodes
    order = torch.argsort(ei[1], stable=True)
    src_sorted, dst_sorted = ei[0, order], ei[1, order]
    ptr = torch.zeros(n + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(dst_sorted, minlength=n), 0)
    seeds_all = torch.arange(n) if input_nodes is None else input_nodes
    batches = []
    for start in range(0, seeds_all.numel(), batch_size):
        seeds = seeds_all[start : start + batch_size].tolist()
        local = {v: i for i, v in enumerate(seeds)}
        n_id, rows, cols, nodes_per_hop, edges_per_hop = list(seeds), [], [], [len(seeds)], []
        frontier = seeds
        for k in fanout:
            new, count = [], 0
            for v in frontier:
                nbrs = src_sorted[ptr[v] : ptr[v + 1]].tolist()
                for u in nbrs if k < 0 else nbrs[:k]:
                    if u not in local:
                        local[u] = len(n_id)
                        n_id.append(u)
                        new.append(u)
                    rows.append(local[u])
                    cols.append(local[v])
                    count += 1
            nodes_per_hop.append(len(new))
            edges_per_hop.append(count)
            frontier = new
        batches.append(SimpleNamespace(n_id=torch.tensor(n_id), edge_index=torch.tensor([rows, cols]).view(2, -1),
                                       batch_size=len(seeds), num_sampled_nodes=nodes_per_hop,
                                       num_sampled_edges=edges_per_hop))
    return batches


def test_ogbn_products_sampled_needs_a_sampler(load, capsys):
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
        pytest.skip("a sampler is installed (pyg-lib or torch-sparse)")
    with pytest.raises(SystemExit) as exc:
        load("ogbn_products").main(["--synthetic", "--scale", "0.0005", *TINY, "--sampled"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--sampled" in err and "pip install pyg-lib" in err


@pytest.mark.parametrize("model", ["gat", "pyg-gat"])
def test_ogbn_products_sampled_bipartite_blocks(load, monkeypatch, model):
    products = load("ogbn_products")
    monkeypatch.setattr(products, "require_sampler", lambda: None)
    monkeypatch.setattr(products, "neighbor_loader", _fake_neighbor_loader)
    res = products.main(["--synthetic", "--scale", "0.0003", *TINY, "--sampled", "--model", model, "--hidden", "8",
                         "--heads", "2", "--fanout", "3,2,2", "--batch-size", "64", "--eval-batch-size", "256"])
    _check_summary(res, "acc")


@pytest.mark.parametrize("model", ["gat", "pyg-gat"])
def test_ogbn_products_sampled_static(load, model):
    """--sampled --sampler static on CPU (the default on CUDA, where the step is captured): needs no pyg-lib or
    torch-sparse, trains on tree-sampled batches and evaluates layer-wise over full neighbourhoods."""
    res = load("ogbn_products").main(["--synthetic", "--scale", "0.0003", *TINY, "--sampled", "--sampler", "static",
                                      "--model", model, "--hidden", "8", "--heads", "2", "--fanout", "3,2,2",
                                      "--batch-size", "64"])
    _check_summary(res, "acc")


def test_ogbn_products_static_sampler_refuses_fanout_all(load, capsys):
    with pytest.raises(SystemExit) as exc:
        load("ogbn_products").main(["--synthetic", "--scale", "0.0003", *TINY, "--sampled", "--sampler", "static",
                                    "--fanout", "3,-1,2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--fanout must hold positive ints with --sampler static" in err and "'3,-1,2'" in err


@pytest.mark.parametrize("script", ["ogbn_arxiv", "ogbn_products", "ogbn_proteins", "papers100m"])
def test_a_scale_above_one_is_refused_before_any_graph_is_drawn(load, capsys, script):
    """--scale is a fraction of the real dataset: 3 used to draw a graph three times papers100M's size (and end
    a CPU run in the kernel's OOM killer)."""
    with pytest.raises(SystemExit) as exc:
        load(script).main(["--scale", "3", "--device", "cpu"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --scale: must be a number in (0, 1] (a fraction of the real size), got '3'" in err


def test_trimmed_forward_matches_full_subgraph(load):
    """Layer-by-layer bipartite blocks give the seeds the same outputs as running on the whole subgraph."""
    load("ogbn_products")
    common = sys.modules["_common"]
    from cudnn_gnn.datasets import synthetic_ogbn

    data = synthetic_ogbn("ogbn-products", scale=0.0003, seed=1)[0]
    batch = _fake_neighbor_loader(data, torch.arange(20), [3, 2, 2], 20, False)[0]
    torch.manual_seed(0)
    model = common.OgbGAT("gat", data.x.size(1), 8, 5, layers=3, heads=2, out_heads=2, norm=False,
                          activation="elu").eval()
    x = data.x[batch.n_id]
    full = model(x, batch.edge_index)[: batch.batch_size]
    trimmed = model(x, batch.edge_index, None, batch.num_sampled_nodes, batch.num_sampled_edges)
    torch.testing.assert_close(trimmed, full, atol=1e-5, rtol=1e-5)


def _sampled_gat_case(load: Any, edge_dim: int | None, seed: int) -> tuple[Any, Any, Any, torch.Tensor, Any]:
    """A float64 3-layer OgbGAT (ours) and one fake NeighborLoader batch on a tiny synthetic products graph:
    ``(common module, batch, model, x, edge_attr or None)``."""
    load("ogbn_products")
    common = sys.modules["_common"]
    from cudnn_gnn.datasets import synthetic_ogbn

    data = synthetic_ogbn("ogbn-products", scale=0.0003, seed=seed)[0]
    batch = _fake_neighbor_loader(data, torch.arange(20), [3, 2, 2], 20, False)[0]
    torch.manual_seed(0)
    model = common.OgbGAT("gat", data.x.size(1), 8, 5, layers=3, heads=2, out_heads=2, norm=False, activation="elu",
                          edge_dim=edge_dim).double().eval()
    x = data.x[batch.n_id].double()
    ea = torch.randn(batch.edge_index.shape[1], edge_dim, dtype=torch.float64) if edge_dim else None
    return common, batch, model, x, ea


def _outputs_and_grads(model: Any, runs: list[Any]) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """Each run's output and the model's parameter gradients of ``out.square().sum()``."""
    outs, grads = [], []
    for run in runs:
        model.zero_grad()
        out = run()
        out.square().sum().backward()
        outs.append(out)
        grads.append([p.grad.clone() for p in model.parameters()])
    return outs, grads


def _assert_same_and_pyg_agrees(common: Any, model: Any, outs: list[torch.Tensor],
                                grads: list[list[torch.Tensor]], pyg_call: Any) -> None:
    """Both runs agree (outputs, every gradient), and PyG's OgbGAT with the same weights gives the same output."""
    torch.testing.assert_close(outs[0], outs[1])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    c = model.config
    pyg_model = common.OgbGAT("pyg-gat", c["in_channels"], c["hidden"], c["out_channels"], layers=c["layers"],
                              heads=c["heads"], out_heads=c["out_heads"], norm=c["norm"], activation=c["activation"],
                              edge_dim=c["edge_dim"]).double().eval()
    pyg_model.load_state_dict(model.state_dict())
    torch.testing.assert_close(pyg_call(pyg_model), outs[0])


@pytest.mark.parametrize("edge_dim", [None, 3])
def test_ogbgat_blocks_equal_raw_slices(load, monkeypatch, edge_dim):
    """Our model builds the batch's blocks once (sampled_blocks, validate=False) and gives each layer its CscGraph;
    outputs and gradients equal running each layer on the raw edge_index slices (the path PyG's model keeps)."""
    common, batch, model, x, ea = _sampled_gat_case(load, edge_dim, seed=1)
    nsn, nse = batch.num_sampled_nodes, batch.num_sampled_edges
    calls = []
    from cudnn_gnn.apps import models  # where OgbGAT lives

    real = models.sampled_blocks
    monkeypatch.setattr(models, "sampled_blocks", lambda *a, **k: calls.append(k) or real(*a, **k))

    def raw_slices() -> torch.Tensor:
        h = x
        for i, s in enumerate(models.block_sizes(nsn, nse, 3)):
            h = h[: s.num_src]
            e = None if ea is None else ea[: s.num_edges]
            h = model.layer(i, (h, h[: s.num_dst]), batch.edge_index[:, : s.num_edges], e, size=(s.num_src, s.num_dst))
        return h

    outs, grads = _outputs_and_grads(model, [lambda: model(x, batch.edge_index, ea, nsn, nse), raw_slices])
    assert calls == [{"validate": False}]  # once per batch, trusting the sampler
    _assert_same_and_pyg_agrees(common, model, outs, grads, lambda pyg: pyg(x, batch.edge_index, ea, nsn, nse))
    assert len(calls) == 1  # PyG's model takes the raw slices


def test_input_dropout_draws_only_for_non_zeros():
    """The main job's input dropout: zeros stay zero, non-zeros are dropped with probability p and scaled by
    1/(1-p) (F.dropout's distribution); dense inputs and eval mode are exactly F.dropout."""
    from cudnn_gnn.apps.train import build_gat

    model = build_gat("gat", 50, 3, dropout=0.5, backend="reference")
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(400, 50, generator=g) < 0.05).float() * 3.0  # bag-of-words-like, 5% non-zero
    torch.manual_seed(1)
    out = model.input_dropout(x)
    assert torch.equal(out[x == 0], torch.zeros_like(out[x == 0]))
    kept = out[x != 0]
    assert set(kept.unique().tolist()) <= {0.0, 6.0}
    assert 0.4 < float((kept != 0).float().mean()) < 0.6
    x[0, 0] = 5.0  # modified in place: the non-zero positions are found again
    assert float(model.input_dropout(x)[0, 0]) in (0.0, 10.0)
    dense = torch.randn(400, 50, generator=g)
    torch.manual_seed(2)
    a = model.input_dropout(dense)
    torch.manual_seed(2)
    assert torch.equal(a, torch.nn.functional.dropout(dense, 0.5, training=True))
    model.eval()
    assert torch.equal(model.input_dropout(x), x)


@pytest.mark.parametrize("edge_dim", [None, 3])
def test_ogbgat_sampled_without_hop_counts_runs_on_one_graph(load, edge_dim):
    """torch-sparse's sampler reports no per-hop counts: with ``sampled=True`` our model converts the batch once to
    a CscGraph marked rebuilt every call (no plan cache, no host sync) and every layer runs on it; outputs and
    gradients equal the raw edge_index path and PyG's model on the same weights."""
    from cudnn_gnn import CscGraph

    common, batch, model, x, ea = _sampled_gat_case(load, edge_dim, seed=2)
    seen = []
    real = CscGraph.from_edge_index

    def spy(*a: Any, **k: Any) -> CscGraph:
        g = real(*a, **k)
        seen.append((k.get("validate"), g))
        return g

    def forward(sampled: bool) -> torch.Tensor:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(CscGraph, "from_edge_index", staticmethod(spy))
            return model(x, batch.edge_index, ea, sampled=sampled)

    outs, grads = _outputs_and_grads(model, [lambda: forward(True), lambda: forward(False)])
    assert seen[0][0] is False and seen[0][1].rebuilt_every_call  # built once, trusted, for the sampled call
    _assert_same_and_pyg_agrees(common, model, outs, grads, lambda pyg: pyg(x, batch.edge_index, ea, sampled=True))


@pytest.mark.slow
def test_papers100m_static_sampler_on_cpu_trains_past_the_padded_batch(load, tmp_path):
    """--sampler static on a CPU: the epoch's last batch is padded with node 0, whose float label is NaN; its
    target is masked before the cast to int, so the epoch ends with a finite loss instead of a crash."""
    res = load("papers100m").main(["--scale", "0.0001", "--sampler", "static", "--device", "cpu", "--epochs", "1",
                                   "--batch-size", "64", "--hidden", "8", "--heads", "1", "--layers", "2",
                                   "--fanout", "3,2", "--root", str(tmp_path / "graph"), "--no-progress"])
    epoch = res["epochs"][-1]
    assert epoch["batches"] == 2 and math.isfinite(epoch["loss"])
