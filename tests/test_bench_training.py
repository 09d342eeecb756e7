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
