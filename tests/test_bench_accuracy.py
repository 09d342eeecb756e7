"""The accuracy benchmark (``benchmarks/bench_accuracy.py``): its statistics, and its CPU smoke run, where both modes
run the same eager step (capture is CUDA-only), so every seed's results must agree exactly between them."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import bench_accuracy  # noqa: E402


def test_compare_against_the_standard_error_of_the_difference() -> None:
    """Means 1 apart with stds 1 over 3 seeds: standard error sqrt(1/3 + 1/3), |z| 1.22, within noise; the same gap
    with stds 0.1 is 12 standard errors, not within noise. Paired: the same-seed differences."""
    c = bench_accuracy.compare([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [(1.0, 2.0), (2.0, 3.0), (3.0, 4.0)])
    assert c["difference"] == pytest.approx(-1.0) and c["se_difference"] == pytest.approx(math.sqrt(2 / 3))
    assert c["z"] == pytest.approx(-1 / math.sqrt(2 / 3)) and c["within_noise"] is True
    assert c["pooled_std"] == pytest.approx(1.0) and (c["paired_mean"], c["paired_std"]) == (pytest.approx(-1.0), 0.0)
    far = bench_accuracy.compare([0.9, 1.0, 1.1], [1.9, 2.0, 2.1], [])
    assert far["z"] == pytest.approx(-1.0 / math.sqrt(2 * 0.01 / 3)) and far["within_noise"] is False
    assert math.isnan(far["paired_mean"]) and far["n_paired"] == 0
    # no spread at all (one seed each, or a CPU run): equal is within noise, any difference is not
    assert bench_accuracy.compare([0.5], [0.5], [(0.5, 0.5)])["within_noise"] is True
    one = bench_accuracy.compare([0.5], [0.4], [(0.5, 0.4)])
    assert one["z"] == math.inf and one["within_noise"] is False


def test_smoke_run_both_modes_on_cpu(tmp_path) -> None:
    out, md = tmp_path / "a.json", tmp_path / "a.md"
    argv = ["--smoke", "--out", str(out), "--md", str(md)]
    try:
        import matplotlib  # noqa: F401

        argv += ["--plot", str(tmp_path / "a.png")]
    except ImportError:
        pass
    bench_accuracy.main(argv)
    result = json.loads(out.read_text())  # strict JSON
    smoke = bench_accuracy.SMOKE
    runs = result["runs"]
    assert result["seeds_run"] == [0, 1] and result["stopped"] is None
    assert [(r["workload"], r["mode"], r["seed"]) for r in runs] == [
        (w, m, s) for s in (0, 1) for w in bench_accuracy.WORKLOADS for m in ("captured", "eager")]
    assert not [r for r in runs if "error" in r]
    epochs = {"arxiv": smoke["arxiv_epochs"], "molecules": smoke["molecules_epochs"]}
    for cap, eager in zip(runs[::2], runs[1::2]):  # one computation on a CPU: identical, seed by seed
        assert cap["captured"] is False and eager["captured"] is False
        assert cap["train_loss"] == eager["train_loss"]
        for key, *_ in bench_accuracy.METRICS[cap["workload"]]:
            assert cap[key] == eager[key] and math.isfinite(cap[key]), (cap["workload"], key)
        n = epochs.get(cap["workload"], smoke["epochs"])
        assert len(cap["train_loss"]) == cap["epochs_run"] == n and all(map(math.isfinite, cap["train_loss"]))
    for w in ("arxiv", "molecules"):  # the examples' own flags, the packed batches both ways for molecules
        first = [r for r in runs if r["workload"] == w][:2]
        assert "--capture" in first[0]["argv"] and "--no-capture" in first[1]["argv"], w
    molecules = [r for r in runs if r["workload"] == "molecules"]
    assert all(r["argv"][r["argv"].index("--batching") + 1] == "packed" for r in molecules)
    assert all(0.0 <= r["test_rocauc"] <= 1.0 and 1 <= r["best_epoch"] <= r["epochs_run"] for r in molecules)
    assert molecules[0]["train_loss"] != molecules[2]["train_loss"], "two seeds must be two trainings"
    seeds = {r["seed"]: r["train_loss"] for r in runs if r["workload"] == "cora" and r["mode"] == "eager"}
    assert seeds[0] != seeds[1], "two seeds must be two trainings"
    assert [s["workload"] for s in result["summary"]] == list(bench_accuracy.WORKLOADS)
    for s in result["summary"]:
        for key, *_ in bench_accuracy.METRICS[s["workload"]]:
            assert s[key]["difference"] == 0.0 and s[key]["within_noise"] is True, (s["workload"], key)
        assert s["curve"]["epochs"] == epochs.get(s["workload"], smoke["epochs"])
        assert s["curve"]["within_noise_share"] == 1.0 and s["curve"]["captured_mean"] == s["curve"]["eager_mean"]
        assert s["captured_runs"] == 0 and "capture needs CUDA" in s["capture_notes"][0]
    table = md.read_text()
    assert "| Cora | test acc (%), reported epoch |" in table and "| arxiv-shaped | test acc (%), last evaluation |" in table
    assert "| ogbg-molbace GPS | test ROC-AUC, best valid |" in table and "| ogbg-molbace GPS | train loss, epoch 4 |" in table
    assert "molecules `examples/gps_molecules.py --dataset ogbg-molbace --batching packed`, 4 epochs" in table
    assert "capture needs CUDA: on cpu both modes run the same eager step" in table
    assert f"(`python benchmarks/bench_accuracy.py {' '.join(argv)}`)" in table  # the command, not pytest's
    if "--plot" in argv:
        assert (tmp_path / "a.png").stat().st_size > 0


def test_molecules_is_in_the_smoke_run_not_in_the_full_default(monkeypatch) -> None:
    """The full run's default leaves molecules out (its time budget); --smoke runs every workload; --molecules-epochs
    reaches the example's command line, which has no smoke-run limits outside --smoke."""
    import torch

    assert bench_accuracy.parse_args(["--smoke"]).workloads == list(bench_accuracy.WORKLOADS)
    monkeypatch.setattr(bench_accuracy, "check_device", lambda ap, device: torch.device("cuda"))
    full = bench_accuracy.parse_args([])
    assert full.workloads == ["cora", "citeseer", "arxiv"] and full.molecules_epochs == 50
    mol = bench_accuracy.parse_args(["--workloads", "molecules", "--molecules-epochs", "7"])
    assert mol.workloads == ["molecules"] and mol.molecules_epochs == 7
    argv = bench_accuracy.molecules_argv(3, "eager", mol)
    assert argv[argv.index("--seeds") + 1] == "3" and argv[argv.index("--epochs") + 1] == "7" and "--limit" not in argv


def test_time_budget_stops_between_rounds(tmp_path) -> None:
    """The first round always runs; the next is not started when it would end past the budget, and it says so."""
    result = bench_accuracy.main(["--smoke", "--workloads", "cora", "--epochs", "2", "--time-budget", "0.001",
                                  "--out", str(tmp_path / "b.json")])
    assert result["seeds_run"] == [0] and "seeds 1..1 not run" in result["stopped"]
    assert [r["seed"] for r in result["runs"]] == [0, 0]
    assert "Stopped early: time budget" in bench_accuracy.markdown(result)


@pytest.mark.parametrize(("argv", "message"), [
    (["--device", "cpu"], "--device must be a CUDA device for the full benchmark"),
    (["--smoke", "--arxiv-scale", "2"], "argument --arxiv-scale: must be a number in (0, 1] (a fraction of the real "
                                         "size), got '2'"),
    (["--smoke", "--seeds", "0"], "--seeds: must be an integer >= 1"),
])
def test_bad_flags_are_refused(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_accuracy.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_arxiv_workload_is_the_graph_of_the_benchmarks_arxiv_preset() -> None:
    """What the docstring says: ``examples/ogbn_arxiv.py --synthetic`` trains on the graph that ``_graphs.make_graph``
    builds for an ogbn-arxiv preset (same ``synthetic_ogbn`` call, made undirected), here at a small scale."""
    import torch
    from _graphs import GraphSpec, make_graph
    from torch_geometric.utils import to_undirected

    from cudnn_gnn.datasets import synthetic_ogbn

    g = make_graph(GraphSpec(1, 1, ogbn="ogbn-arxiv", ogbn_scale=0.01), seed=0)
    data = synthetic_ogbn("ogbn-arxiv", scale=0.01, seed=0)[0]  # what the example's load_node_data returns
    assert torch.equal(g.edge_index, to_undirected(data.edge_index, num_nodes=data.num_nodes))


def test_a_diverged_run_is_never_within_noise() -> None:
    c = bench_accuracy.compare([0.5, float("nan")], [0.5, 0.6], [(0.5, 0.5), (float("nan"), 0.6)])
    assert math.isnan(c["captured_mean"]) and math.isnan(c["z"]) and c["within_noise"] is False
    assert math.isnan(bench_accuracy.compare([], [0.5], [])["z"])


@pytest.mark.parametrize("flags, message", [
    (["--out", "{d}/r.json", "--md", "{d}/r.json"], "--md and --out both write"),
    (["--out", "{d}/r.json", "--plot", "{d}/r.json"], "--plot and --out both write"),
    (["--data-root", "{d}/empty"], "--data-root: "),
])
def test_outputs_and_data_root_are_checked_before_any_work(tmp_path, capsys, monkeypatch, flags, message) -> None:
    """The table or the plot would overwrite the results; an empty --data-root would fail after the environment
    probe: each is one line and status 2 before any data is read, the earlier results kept."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "r.json").write_text('{"runs": "earlier"}')
    monkeypatch.setattr(bench_accuracy, "run_all", lambda args: pytest.fail("the work ran"))
    with pytest.raises(SystemExit) as exc:
        bench_accuracy.main(["--smoke", "--workloads", "cora", *[f.format(d=tmp_path) for f in flags]])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "\n" not in err.strip(), err
    assert (tmp_path / "r.json").read_text() == '{"runs": "earlier"}'
