"""The training-step benchmark's CPU smoke runs: every CPU variant timed, the precision and the feature dtype
applied and recorded, whole epochs, the time budget, the JSON and markdown written; the real sampled workloads'
graphs built at a tiny scale."""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import bench_training  # noqa: E402


def test_cpu_smoke_run_writes_json_and_markdown(tmp_path) -> None:
    out, md = tmp_path / "t.json", tmp_path / "t.md"
    bench_training.main(["--device", "cpu", "--workloads", "cora", "--repeats", "1", "--out", str(out), "--md", str(md)])
    result = json.loads(out.read_text())
    records = result["records"]
    assert [r["variant"] for r in records] == ["pyg-eager", "ours-eager", "ours-captured"]
    assert all(r["median_ms"] > 0 and "error" not in r and r["precision"] == "fp32" for r in records)
    assert "not captured" in records[2]["note"] and records[2]["captured"] is False
    assert result["settings"]["precision"] == {"cora": "fp32"}  # auto: full graph in fp32
    assert "| cora | ours-eager | fp32 |" in md.read_text()


def test_warmup_too_short_for_the_capture_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_training.parse_args(["--device", "cpu", "--warmup", "2"])
    assert exc.value.code == 2
    assert "--warmup must be >= 4" in capsys.readouterr().err


def test_cpu_smoke_run_of_the_sampled_workloads(tmp_path) -> None:
    """Both sampled workloads on a tiny graph: every CPU variant fed by the static sampler in bf16 (auto) with
    float16 features, per-batch times and the epoch extrapolated from them, no kernel share or profile on a CPU,
    no epochs by default, the table's columns."""
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    bench_training.main(["--device", "cpu", "--workloads", "products-sampled", "papers100m-sampled", "--repeats", "1",
                         "--feature-dtype", "float16", "--out", str(out), "--md", str(md)])
    result = json.loads(out.read_text())
    records = result["records"]
    assert [(r["workload"], r["variant"]) for r in records] == [
        (w, v) for w in ("products-sampled", "papers100m-sampled") for v in ("pyg-eager", "ours-eager", "ours-captured")]
    for r in records:
        assert "error" not in r and r["median_ms"] > 0 and r["slots_per_batch"] == 16 * (1 + 3 + 6 + 12)
        assert r["precision"] == "bf16" and r["feature_dtype"] == "float16" and r["graph_seconds"] > 0
        assert r["epoch_seconds_extrapolated"] == pytest.approx(r["median_ms"] * r["batches_per_epoch"] / 1e3)
        assert r["kernel_share"] is None and r["top_kernels"] is None and "epoch_seconds" not in r
        assert r["batches_per_epoch"] == 4  # 60 train seeds of 300, 16 a batch
    assert result["settings"]["precision"] == {"products-sampled": "bf16", "papers100m-sampled": "bf16"}
    text = md.read_text()
    assert "| products-sampled | ours-captured | bf16 |" in text and "| epochs (s) | epoch 1 / 2 |" in text


def test_whole_epochs_of_the_epoch_variants(tmp_path) -> None:
    """``--epochs 2``: the variants of ``--epoch-variants`` run two whole epochs (4 batches each) before their
    per-batch timing, with the first-epoch ratio, the startup batches and the epoch losses; the others say why they
    ran none. The captured step runs eagerly on a CPU, from the same seed as ours-eager: equal epoch losses mean the
    same bf16 autocast reached both."""
    out, md = tmp_path / "e.json", tmp_path / "e.md"
    bench_training.main(["--device", "cpu", "--workloads", "products-sampled", "--repeats", "1", "--epochs", "2",
                         "--epoch-variants", "ours-eager", "ours-captured", "--out", str(out), "--md", str(md)])
    pyg, eager, captured = json.loads(out.read_text())["records"]
    assert pyg["epochs_skipped"] == "not in --epoch-variants" and "epoch_seconds" not in pyg and pyg["median_ms"] > 0
    for r in (eager, captured):
        assert r["epoch_batches"] == 4 and len(r["epoch_seconds"]) == 2 and "epochs_skipped" not in r
        assert r["first_epoch_ratio"] == pytest.approx(r["epoch_seconds"][0] / r["epoch_seconds"][1])
        assert 0 < r["epoch1_startup_seconds"] <= r["epoch_seconds"][0] and r["epoch1_triton_builds"] == 0
        assert all(loss > 0 for loss in r["epoch_losses"]) and r["median_ms"] > 0
    assert captured["epoch_losses"] == eager["epoch_losses"]
    text = md.read_text()
    assert "- products-sampled pyg-eager: epochs not run: not in --epoch-variants" in text
    assert f"| {eager['first_epoch_ratio']:.2f}x |" in text


@pytest.mark.parametrize("variant", ["pyg-eager", "ours-eager", "ours-captured"])
def test_bf16_reaches_every_variants_step(variant) -> None:
    """The same step from the same seed in fp32 and in bf16 gives another loss (the autocast is applied), and bf16
    twice gives the same one (nothing else differs). The captured step runs eagerly on a CPU, with its warning."""
    device = torch.device("cpu")
    w = bench_training.load_sampled("products-sampled", device, True, 1.0)
    seeds, valid = next(w["sampler"].epoch(w["train"], shuffle=False))
    losses = {}
    for run, precision in enumerate(("fp32", "bf16", "bf16")):
        with pytest.warns(RuntimeWarning, match="not captured") if variant.endswith("captured") else nullcontext():
            step = bench_training.build_sampled_step(variant, w, device, precision)
            torch.manual_seed(1)
            losses[run] = float(step.run(seeds, valid))
    assert losses[1] == losses[2] and losses[0] != losses[1]


def test_time_budget_skips_epochs_and_variants_saying_why(tmp_path) -> None:
    """A budget of 29 s, less than the 30 s kept for each per-batch timing still to come: the first variant's epoch 1
    runs (nothing predicts it), its epoch 2 and the second variant's epochs are skipped with the reason, their
    per-batch timing still runs. A budget already spent skips every variant whole."""
    out, md = tmp_path / "b.json", tmp_path / "b.md"
    bench_training.main(["--device", "cpu", "--workloads", "products-sampled", "--variants", "pyg-eager", "ours-eager",
                         "--repeats", "1", "--epochs", "2", "--time-budget", "29", "--out", str(out), "--md", str(md)])
    records = json.loads(out.read_text())["records"]
    assert len(records[0]["epoch_seconds"]) == 1 and records[0]["first_epoch_ratio"] is None
    assert records[0]["epochs_skipped"].startswith("epoch 2 (about ")
    for r in records[1:]:
        assert r["epoch_seconds"] == [] and "would end past --time-budget" in r["epochs_skipped"]
    assert all(r["median_ms"] > 0 for r in records)
    assert "epochs not run: epoch 1" in md.read_text()

    bench_training.main(["--device", "cpu", "--workloads", "cora", "--time-budget", "1e-9", "--precision", "bf16",
                         "--out", str(out), "--md", str(md)])
    result = json.loads(out.read_text())
    assert all("median_ms" not in r and "time-budget" in r["skipped"] for r in result["records"])
    assert result["settings"]["precision"] == {"cora": "bf16"}  # an explicit precision sets the full graph too
    assert "| cora | pyg-eager | bf16 | skipped: the --time-budget" in md.read_text()


@pytest.mark.parametrize("argv, message", [
    (["--papers-scale", "0"], "argument --papers-scale: must be a number in (0, 1] (a fraction of the real size), got '0'"),
    (["--scale", "2"], "argument --scale: must be a number in (0, 1]"),
    (["--epochs", "-1"], "--epochs must be >= 0, got -1"),
    (["--time-budget", "-5"], "--time-budget must be >= 0, got -5.0"),
    (["--top-kernels", "-1"], "--top-kernels must be >= 0, got -1"),
    (["--feature-dtype", "bfloat16"], "argument --feature-dtype: invalid choice: 'bfloat16'"),
    (["--variants", "ours-eager", "--epoch-variants", "pyg-eager"],
     "--epoch-variants must be among the run's --variants (ours-eager), got pyg-eager"),
    (["--precision", "fp16"], "argument --precision: invalid choice: 'fp16'"),
])
def test_bad_flags_are_refused(capsys, argv, message) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_training.parse_args(["--device", "cpu", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name, nodes, batch", [("products-sampled", 245, 512), ("papers100m-sampled", 11_106, 1024)])
def test_real_sampled_workloads_build_at_a_tiny_scale(name, nodes, batch) -> None:
    """The full-size path (the OGB-shaped synthetic graph, its CSC, the features in the asked dtype, the real batch
    and fan-out) at scale 1e-4 on a CPU: what a GPU run builds at scale 1, minus the size."""
    w = bench_training.load_sampled(name, torch.device("cpu"), False, 1e-4, "float16")
    sampler = w["sampler"]
    assert w["num_nodes"] == nodes and sampler.batch_size == batch and sampler.fanout == [10, 10, 5]
    assert sampler.node_attrs["x"].dtype == torch.float16 and sampler.node_attrs["x"].shape[1] == w["in_channels"]
    assert w["batches_per_epoch"] == sampler.num_batches(w["train"].numel()) >= 1
    assert w["resident_bytes"] > 0 and "scale 0.0001" in w["source"]


def test_markdown_lists_the_captured_variants_top_kernels() -> None:
    """The table of a CUDA run (which a CPU run cannot make): the kernel share, the epochs and their ratio, and the
    top kernels of a captured variant (of an eager one only in the JSON)."""
    row = {"workload": "products-sampled", "precision": "bf16", "median_ms": 10.0, "p10_ms": 9.0, "p90_ms": 11.0,
           "peak_memory_bytes": 2**20, "captured": True, "kernel_share": 0.95, "epoch_seconds_extrapolated": 3.85,
           "epoch_seconds": [5.5, 4.0], "first_epoch_ratio": 1.375, "kernels_sum_ms_per_batch": 9.5,
           "kernel_launches_per_batch": 412.0,
           "top_kernels": [{"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "ms": 1.25, "count": 6.0}]}
    result = {"records": [{**row, "variant": "pyg-eager", "captured": False, "median_ms": 20.0},
                          {**row, "variant": "ours-captured"}]}
    text = bench_training.markdown(result)
    assert "| products-sampled | ours-captured | bf16 | 10.000 | 9.000-11.000 | 2.00x | 1.0 | yes | 95% | 3.85 | " \
           "5.50, 4.00 | 1.38x |" in text
    assert "Top kernels of products-sampled ours-captured (bf16), a batch: 9.50 ms in 412 kernels" in text
    assert "| `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n` | 1.250 | 6 |" in text
    assert "Top kernels of products-sampled pyg-eager" not in text


@pytest.mark.parametrize("flags, message", [
    (["--out", "{d}/r.json", "--md", "{d}/r.json"], "--md and --out both write"),
    (["--out", "{d}/r.json", "--plot", "{d}/r.json"], "--plot and --out both write"),
    (["--out", "{d}"], "--out must be a file path, got the folder"),
    (["--md", "{d}/r.json/t.md"], "is a file, not a folder"),
    (["--device", "gpu"], "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
    (["--device", "meta"], "--device must be a device that holds data"),
])
def test_outputs_and_device_are_checked_before_any_work(tmp_path, capsys, monkeypatch, flags, message) -> None:
    """A clash of outputs (the table would overwrite the results), a folder, an unwritable path and an unknown
    device: one line and status 2 before any data is built, the earlier results left as they were."""
    (tmp_path / "r.json").write_text('{"records": "earlier"}')
    monkeypatch.setattr(bench_training, "run", lambda args: pytest.fail("the work ran"))
    with pytest.raises(SystemExit) as exc:
        bench_training.main(["--device", "cpu", *[f.format(d=tmp_path) for f in flags]])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "r.json").read_text() == '{"records": "earlier"}'


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_refused_up_front(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_training.parse_args(["--device", "cuda"])
    assert exc.value.code == 2
    assert "--device cuda: no CUDA GPU is visible" in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_smoke_run_of_the_graph_level_workloads(tmp_path) -> None:
    """Both graph-level workloads on tiny packed batches: every CPU variant trains on the same fixed-shape batches
    (the captured one eagerly on a CPU, with its warning), each record with the batch budget and the epoch
    extrapolated from the median step; the table's rows."""
    out, md = tmp_path / "g.json", tmp_path / "g.md"
    bench_training.main(["--device", "cpu", "--workloads", "molecules-gps", "ragged-gps", "--repeats", "1",
                         "--out", str(out), "--md", str(md)])
    result = json.loads(out.read_text())
    records = result["records"]
    assert [(r["workload"], r["variant"]) for r in records] == [
        (w, v) for w in ("molecules-gps", "ragged-gps") for v in ("pyg-eager", "ours-eager", "ours-captured")]
    for r in records:
        assert "error" not in r and r["median_ms"] > 0 and r["precision"] == "fp32"
        assert r["max_graphs"] == 8 and r["max_nodes"] < r["max_tokens"] and r["num_graphs"] in (24, 48)
        assert r["epoch_seconds_extrapolated"] == pytest.approx(r["median_ms"] * r["batches_per_epoch"] / 1e3)
        assert r["kernel_share"] is None and r["top_kernels"] is None
    assert "not captured" in records[2]["note"] and records[2]["captured"] is False
    assert {r["batches_per_epoch"] for r in records if r["workload"] == "molecules-gps"} == {6}
    assert "| ragged-gps | ours-captured | fp32 |" in md.read_text()


def test_graph_level_variants_train_the_same_model_on_the_same_batches() -> None:
    """Our eager step and our captured one (eager on a CPU) from seed 0 give the same losses batch after batch:
    the captured variant runs the same model, loss and optimizer on the same packed batches."""
    device = torch.device("cpu")
    w = bench_training.load_graph_level("molecules-gps", device, True)
    losses = {}
    for variant in ("ours-eager", "ours-captured"):
        with pytest.warns(RuntimeWarning, match="not captured") if variant.endswith("captured") else nullcontext():
            step = bench_training.build_graph_step(variant, w, device, "fp32")
            torch.manual_seed(1)
            losses[variant] = [float(step.run(b)) for b in w["batches"][:3]]
    assert losses["ours-eager"] == losses["ours-captured"]
    assert len(set(losses["ours-eager"])) == 3


def test_summary_line_names_the_slowest_prebuilt_variant() -> None:
    """With ``--prebuild`` a record keeps each variant's build (``epoch1_prebuild_builds``) and the printed line names
    the slowest, which bounds the parallel builds; a record without the list (older JSON) prints as before."""
    rec = {"workload": "papers100m-sampled", "variant": "ours-captured", "precision": "bf16", "median_ms": 7.9,
           "epoch_seconds": [16.3, 10.2], "epoch1_prebuild_variants": 2, "epoch1_prebuild_seconds": 3.04,
           "epoch1_prebuild_builds": [{"kernel": "_fwd_kernel", "seconds": 1.1, "in_process": False},
                                      {"kernel": "_bwd_dst_kernel", "seconds": 2.9, "in_process": False}]}
    assert "2 kernel variants prebuilt in 3.04 s, the slowest _bwd_dst_kernel 2.90 s)" in bench_training.summary_line(rec)
    del rec["epoch1_prebuild_builds"]
    assert bench_training.summary_line(rec).endswith("2 kernel variants prebuilt in 3.04 s)")
