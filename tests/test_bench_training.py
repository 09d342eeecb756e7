"""The training-step benchmark's CPU smoke run: every CPU variant timed, the JSON and markdown written."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import bench_training  # noqa: E402


def test_cpu_smoke_run_writes_json_and_markdown(tmp_path) -> None:
    out, md = tmp_path / "t.json", tmp_path / "t.md"
    bench_training.main(["--device", "cpu", "--workloads", "cora", "--repeats", "1", "--out", str(out), "--md", str(md)])
    records = json.loads(out.read_text())["records"]
    assert [r["variant"] for r in records] == ["pyg-eager", "ours-eager", "ours-captured"]
    assert all(r["median_ms"] > 0 and "error" not in r for r in records)
    assert "not captured" in records[2]["note"] and records[2]["captured"] is False
    assert "| cora | ours-eager |" in md.read_text()


def test_warmup_too_short_for_the_capture_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_training.parse_args(["--device", "cpu", "--warmup", "2"])
    assert exc.value.code == 2
    assert "--warmup must be >= 4" in capsys.readouterr().err


def test_cpu_smoke_run_of_the_sampled_workloads(tmp_path) -> None:
    """Both sampled workloads on a tiny graph: every CPU variant fed by the static sampler, per-batch times, the
    epoch extrapolated from them, no kernel share on a CPU (no profiler window), the table's sampled columns."""
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    bench_training.main(["--device", "cpu", "--workloads", "products-sampled", "papers100m-sampled", "--repeats", "1",
                         "--out", str(out), "--md", str(md)])
    records = json.loads(out.read_text())["records"]
    assert [(r["workload"], r["variant"]) for r in records] == [
        (w, v) for w in ("products-sampled", "papers100m-sampled") for v in ("pyg-eager", "ours-eager", "ours-captured")]
    for r in records:
        assert "error" not in r and r["median_ms"] > 0 and r["slots_per_batch"] == 16 * (1 + 3 + 6 + 12)
        assert r["epoch_seconds_extrapolated"] == pytest.approx(r["median_ms"] * r["batches_per_epoch"] / 1e3)
        assert r["kernel_share"] is None and r["batches_per_epoch"] == 4  # 60 train seeds of 300, 16 a batch
    assert "| products-sampled | ours-captured |" in md.read_text()


def test_scale_out_of_range_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_training.parse_args(["--device", "cpu", "--papers-scale", "0"])
    assert exc.value.code == 2
    assert "--papers-scale must be in (0, 1], got 0.0" in capsys.readouterr().err
