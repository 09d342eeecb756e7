"""The accuracy benchmark's short run on a GPU (``benchmarks/bench_accuracy.py --smoke --device cuda``): every
captured-mode run replays a CUDA graph, every eager one does not, and the two modes of a seed start alike (the first
steps are eager warm-ups in both: same weights, same dropout masks, so the same first loss)."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

import bench_accuracy  # noqa: E402


def test_smoke_run_captures_on_cuda(tmp_path) -> None:
    out = tmp_path / "a.json"
    bench_accuracy.main(["--smoke", "--device", "cuda", "--out", str(out), "--md", str(tmp_path / "a.md")])
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert len(runs) == 2 * len(bench_accuracy.WORKLOADS) * bench_accuracy.SMOKE["seeds"]
    assert not [r for r in runs if "error" in r], [r["error"] for r in runs if "error" in r]
    for cap, eager in zip(runs[::2], runs[1::2]):
        assert (cap["mode"], eager["mode"], cap["seed"], cap["workload"]) == ("captured", "eager", eager["seed"],
                                                                              eager["workload"])
        assert cap["captured"] is True and eager["captured"] is False, (cap["workload"], cap["notes"])
        assert cap["notes"] == [] and all(map(math.isfinite, cap["train_loss"] + eager["train_loss"]))
        assert cap["train_loss"][0] == pytest.approx(eager["train_loss"][0], rel=1e-5), cap["workload"]
    for s in result["summary"]:
        assert s["captured_runs"] == bench_accuracy.SMOKE["seeds"] and s["capture_notes"] == []
