"""CPU smoke test of examples/gps_molecules.py: two tiny epochs on each kind of OGB molecule task."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gps_molecules.py"


def _load_example():
    try:
        from cudnn_gnn.datasets import load_ogbg  # noqa: F401
    except ImportError as e:
        pytest.skip(f"cudnn_gnn.datasets.load_ogbg is not available yet ({e})")
    spec = importlib.util.spec_from_file_location("gps_molecules", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("dataset", "metric"), [("ogbg-molbace", "rocauc"), ("ogbg-molesol", "rmse")])
def test_gps_molecules_smoke(dataset, metric, capsys):
    example = _load_example()
    argv = ["--dataset", dataset, "--epochs", "2", "--device", "cpu", "--limit", "48", "--batch-size", "16"]
    res = example.main([*argv, "--channels", "16", "--layers", "1", "--heads", "2", "--no-progress", "--seed", "1"])
    out = capsys.readouterr().out
    assert res["metric"] == metric and math.isfinite(res["valid"]) and math.isfinite(res["test"])
    assert "local conv" in out and out.strip().splitlines()[-1].startswith(f"final: {dataset} {metric}")


def test_gps_molecules_saves_a_model_that_loads_back_and_plots(tmp_path):
    import torch

    example = _load_example()
    ckpt, png = tmp_path / "gps.pt", tmp_path / "curves.png"
    example.main(["--dataset", "ogbg-molbace", "--epochs", "2", "--device", "cpu", "--limit", "32", "--batch-size",
                  "16", "--channels", "16", "--layers", "1", "--heads", "2", "--no-progress", "--save", str(ckpt),
                  "--plot", str(png)])
    saved = torch.load(ckpt, weights_only=True)
    model = example.GPS(**saved["config"]["model"])
    model.load_state_dict(saved["state_dict"], strict=True)
    assert saved["config"]["args"]["epochs"] == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
