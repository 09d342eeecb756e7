"""CPU smoke test of examples/gps_molecules.py: two tiny epochs on each kind of OGB molecule task."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings
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
    sys.path.insert(0, str(EXAMPLE.parent))  # the script imports _common from its folder
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLE.parent))
        sys.modules.pop("_common", None)
    return module


@pytest.mark.parametrize(("dataset", "metric"), [("ogbg-molbace", "rocauc"), ("ogbg-molesol", "rmse")])
def test_gps_molecules_smoke(dataset, metric, capsys):
    example = _load_example()
    argv = ["--dataset", dataset, "--epochs", "2", "--device", "cpu", "--limit", "48", "--batch-size", "16"]
    res = example.main([*argv, "--channels", "16", "--layers", "1", "--heads", "2", "--no-progress", "--seed", "1"])
    out = capsys.readouterr().out
    assert res["metric"] == metric and math.isfinite(res["valid"]) and math.isfinite(res["test"])
    assert "local conv" in out and out.strip().splitlines()[-1].startswith(f"final: {dataset} {metric}")


@pytest.mark.slow
def test_gps_molecules_packed_batches_on_cpu(capsys):
    """``--batching packed`` on a CPU: the packed batches and the CapturedStep's eager path train (the warning names
    why nothing is captured); ``--impl pyg`` cannot pack."""
    example = _load_example()
    argv = ["--dataset", "ogbg-molfreesolv", "--epochs", "1", "--device", "cpu", "--limit", "24", "--batch-size", "16",
            "--channels", "8", "--layers", "1", "--heads", "2", "--no-progress", "--batching", "packed"]
    with pytest.warns(RuntimeWarning, match="not captured"):
        res = example.main(argv)
    assert math.isfinite(res["valid"]) and res["batching"] == "packed"
    assert "packed batches: at most 16 graphs" in capsys.readouterr().out
    run = res["per_run"][0]
    assert run["captured"] is False and list(run["curves"]) == ["train loss", "valid rmse", "test rmse"]
    assert [len(v) for v in run["curves"].values()] == [1, 1, 1] and run["curves"]["test rmse"][0] == run["test"]
    with warnings.catch_warnings():  # --no-capture: the same eager step on the same batches, asked for: no warning
        warnings.simplefilter("error", RuntimeWarning)
        eager = example.main([*argv, "--no-capture"])
    assert eager["per_run"][0]["curves"] == run["curves"]
    assert "the step eager (--no-capture)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        example.main([*argv, "--impl", "pyg"])
    assert "--batching packed needs --impl ours" in capsys.readouterr().err


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


@pytest.mark.slow
def test_gps_molecules_pyg_baseline_over_seeds_on_the_default_device(capsys):
    """--impl pyg trains PyG's GPSConv + GATConv; --runs 2 reports mean ± std of the runs (one run: no spread);
    --precision bf16 runs under autocast; no --device: auto (the CPU here). One history line an epoch per seed."""
    example = _load_example()
    argv = ["--dataset", "ogbg-molbace", "--epochs", "1", "--limit", "16", "--batch-size", "16", "--channels", "8",
            "--layers", "1", "--heads", "2", "--precision", "bf16"]
    res = example.main([*argv, "--impl", "pyg", "--runs", "2"])
    out = capsys.readouterr().out.splitlines()
    assert res["impl"] == "pyg" and res["runs"] == 2 and [r["seed"] for r in res["per_run"]] == [0, 1]
    assert "torch_geometric.nn.GPSConv" in out[0] and "device cpu" in out[0]
    assert [ln.split(":")[0] for ln in out if ln.split(":")[0].endswith("/1")] == ["seed 0 epoch 1/1",
                                                                                   "seed 1 epoch 1/1"]
    assert out[-1].startswith("final: ogbg-molbace rocauc (pyg) over 2 runs: valid ") and "±" in out[-1]
    example.main([*argv, "--seeds", "1", "-q"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "over 1 run" in out[0] and "±" not in out[0], out
