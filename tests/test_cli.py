"""User mistakes on the command line of the main job and of every example end in one line that names the flag
and the fix, with exit status 2, before any data is loaded; a bug ends in its traceback plus a hint to report it.
Also: the shared progress bar, and ``--save`` / ``--plot``."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OGB_SCRIPTS = ("ogbn_arxiv", "ogbn_products", "ogbn_proteins")
ALL_SCRIPTS = ("train", "gat_cora", *OGB_SCRIPTS, "gps_molecules")


@pytest.fixture
def script(monkeypatch):
    """``script(name)`` -> the ``main(argv)`` of ``python -m cudnn_gnn train`` or ``examples/<name>.py``."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def _main(name: str):
        if name == "train":
            from cudnn_gnn.apps.train import main

            return main
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main

    yield _main
    sys.modules.pop("_common", None)


def refused(capsys, main, argv: list[str], *words: str) -> str:
    """Run ``main(argv)``: it must exit with status 2 and one stderr line containing every word."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


# Every numeric flag of every script, with values it must refuse.
NUMERIC = {
    "train": {"--epochs": ["0", "-1", "x"], "--patience": ["0", "-5"], "--threads": ["-1"]},
    "gat_cora": {"--epochs": ["0", "-1"], "--patience": ["-5"], "--threads": ["-2"], "--jobs": ["0"]},
    "ogbn_arxiv": {"--epochs": ["0", "-1"], "--eval-every": ["0"], "--runs": ["0"], "--scale": ["0", "-1", "nan"],
                   "--layers": ["0"], "--heads": ["0"], "--hidden": ["0"], "--dropout": ["1.5", "-0.1"],
                   "--input-drop": ["2"], "--attn-drop": ["-1"], "--lr": ["0", "-0.1"], "--wd": ["-1"],
                   "--warmup": ["-1"], "--mask-rate": ["1.1"]},
    "ogbn_products": {"--epochs": ["0", "-1"], "--eval-every": ["-1"], "--runs": ["-3"], "--layers": ["0"],
                      "--batch-size": ["0"], "--eval-batch-size": ["-1"], "--num-workers": ["-1"],
                      "--fanout": ["10,0,5", "a,b"], "--lr": ["0"]},
    "ogbn_proteins": {"--epochs": ["0"], "--hidden": ["-4"], "--dropout": ["1.01"], "--lr": ["-1"]},
    "gps_molecules": {"--epochs": ["0", "-1"], "--batch-size": ["0"], "--channels": ["0"], "--layers": ["0"],
                      "--heads": ["0"], "--dropout": ["2"], "--lr": ["0"], "--limit": ["-1"]},
}
NUMERIC_CASES = [(s, f, v) for s, flags in NUMERIC.items() for f, values in flags.items() for v in values]


@pytest.mark.parametrize(("name", "flag", "value"), NUMERIC_CASES, ids=[f"{s}{f}={v}" for s, f, v in NUMERIC_CASES])
def test_numeric_flags_refuse_bad_values(capsys, script, name, flag, value):
    refused(capsys, script(name), [flag, value], flag, value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("name", ALL_SCRIPTS)
def test_device_cuda_without_cuda(capsys, script, name):
    refused(capsys, script(name), ["--device", "cuda"], "--device", "--device cpu")


@pytest.mark.parametrize("name", ALL_SCRIPTS)
def test_device_unknown(capsys, script, name):
    refused(capsys, script(name), ["--device", "gpu0"], "--device", "'gpu0'")


@pytest.mark.parametrize("backend", ["cudnn", "triton"])
@pytest.mark.parametrize("name", ("train", "gat_cora", *OGB_SCRIPTS))
def test_gpu_backend_on_cpu(capsys, script, name, backend):
    refused(capsys, script(name), ["--device", "cpu", "--backend", backend], f"--backend {backend}",
            "--backend reference")


def test_backend_cudnn_without_cudnn_gives_reason_and_fix(capsys, monkeypatch):
    """On a GPU without cuDNN's GNN kernels, the error quotes backend_info()'s reason and fix."""
    import argparse

    from cudnn_gnn.apps import _cli
    from cudnn_gnn.backends import cudnn as cudnn_backend
    from cudnn_gnn.backends import info

    fake = SimpleNamespace(auto_backend="reference", reason="cudnn frontend not installed",
                           fix="pip install 'cudnn-gnn[cuda]'")
    monkeypatch.setattr(cudnn_backend, "backend_info", lambda: fake)
    monkeypatch.setattr(cudnn_backend, "cudnn_available", lambda: False)
    monkeypatch.setattr(info, "backend_info", lambda: fake)
    ap = _cli.ArgumentParser(prog="prog")
    with pytest.raises(SystemExit) as exc:
        _cli.check_backend(ap, "cudnn", torch.device("cuda"))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--backend cudnn" in err and fake.reason in err and fake.fix in err
    _cli.check_backend(ap, "cudnn", torch.device("cuda"), ours=False)  # PyG's layers ignore --backend
    _cli.check_backend(argparse.ArgumentParser(), "reference", torch.device("cpu"))


@pytest.mark.parametrize("name", ("train", "gat_cora", *OGB_SCRIPTS))
def test_missing_data_root(capsys, script, name, tmp_path):
    refused(capsys, script(name), ["--device", "cpu", "--data-root", str(tmp_path / "nowhere")], "--data-root",
            "nowhere", "does not exist")


@pytest.mark.parametrize("name", ("train", *OGB_SCRIPTS))
def test_data_root_without_the_files(capsys, script, name, tmp_path):
    """An existing folder without the dataset: one line naming the missing files, before any training."""
    refused(capsys, script(name), ["--device", "cpu", "--data-root", str(tmp_path)], "--data-root", str(tmp_path))


@pytest.mark.parametrize(("name", "flag"), [(s, "--json") for s in ALL_SCRIPTS] + [
    ("train", "--save"), ("train", "--plot"), ("gat_cora", "--save"), ("ogbn_arxiv", "--log"),
    ("ogbn_arxiv", "--save"), ("ogbn_proteins", "--plot")])
def test_unwritable_output_paths_refused_before_training(capsys, script, name, flag, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    refused(capsys, script(name), ["--device", "cpu", flag, str(blocker / "out" / "x.json")], flag, "a_file")
    refused(capsys, script(name), ["--device", "cpu", flag, str(tmp_path)], flag, "folder")


def test_sampled_without_sampler_is_one_line(capsys, script, monkeypatch):
    import torch_geometric.typing as pyg_typing

    monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(pyg_typing, "WITH_TORCH_SPARSE", False)
    refused(capsys, script("ogbn_products"), ["--device", "cpu", "--sampled"], "--sampled", "pip install pyg-lib")


@pytest.mark.slow
def test_subprocess_user_mistake_exit_status_and_one_line():
    proc = subprocess.run([sys.executable, "-m", "cudnn_gnn", "train", "--epochs", "0"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "python -m cudnn_gnn train: error: argument --epochs: must be an integer >= 1, got '0' (--help: usage)"]


def test_bug_gets_traceback_and_report_hint(capsys):
    from cudnn_gnn.apps._cli import BUG_HINT, run_main

    def broken(argv):
        raise KeyError("internal")

    assert run_main(broken, [], prog="prog") == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and err.strip().endswith(BUG_HINT)
    assert run_main(lambda argv: {"ok": 1}, []) == 0


def test_main_module_wraps_bugs(capsys, monkeypatch):
    import cudnn_gnn.apps.train as train
    from cudnn_gnn.__main__ import main

    monkeypatch.setattr(train, "train_planetoid", lambda cfg: 1 / 0)
    assert main(["train", "--device", "cpu", "--no-progress", "--epochs", "1"]) == 1
    assert "please report it" in capsys.readouterr().err


def test_train_planetoid_refuses_bad_epochs_and_patience():
    from cudnn_gnn.apps.train import TrainConfig, train_planetoid

    for bad in ({"epochs": 0}, {"epochs": -1}, {"patience": -5}, {"patience": 0}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be an int >= 1"):
            train_planetoid(TrainConfig(device="cpu", progress=False, **bad))


# --------------------------------------------------------------------------------------------- progress bar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_no_bar_when_not_a_terminal():
    from cudnn_gnn.apps._progress import progress

    out = io.StringIO()
    bar = progress(total=10, desc="x", file=out)
    assert not bar.active
    for _ in range(10):
        bar.update()
    bar.close()
    assert out.getvalue() == ""
    assert list(progress(range(3), file=out)) == [0, 1, 2]
    assert list(progress([1, 2], enabled=False)) == [1, 2]


def test_progress_early_stop_closes_at_100_percent():
    pytest.importorskip("tqdm")
    from cudnn_gnn.apps._progress import progress

    out = _Tty()
    bar = progress(total=100, desc="run", file=out)
    assert bar.active
    inner = bar.bar
    for _ in range(7):  # early stopping after 7 of 100 epochs
        bar.update()
    bar.close()
    assert inner.total == inner.n == 7 and not bar.active
    assert "7/7" in out.getvalue() and "100%" in out.getvalue()
    bar.close()  # idempotent
    out = _Tty()
    it = progress(range(5), file=out)
    for i in it:
        if i == 2:
            break
    del it  # a loop left early still closes its bar (generator finaliser)


# --------------------------------------------------------------------------------------------- --save / --plot


def test_main_job_save_round_trip_and_plot(script, tmp_path, capsys):
    from cudnn_gnn.apps.train import load_gat
    from cudnn_gnn.datasets import load_planetoid

    ckpt, png = tmp_path / "m" / "gat.pt", tmp_path / "curves.png"
    assert script("train")(["--epochs", "2", "--device", "cpu", "--no-progress", "--save", str(ckpt),
                            "--plot", str(png)]) == 0
    saved = torch.load(ckpt, weights_only=True)
    assert set(saved) == {"state_dict", "config"}
    assert saved["config"]["model"] == "gat" and saved["config"]["epochs"] == 2 and saved["config"]["in_channels"] == 1433
    model, cfg = load_gat(ckpt)
    assert cfg["num_classes"] == 7
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved["state_dict"][k])
    data = load_planetoid("Cora", normalize_features=True)
    model.eval()
    assert model(data.x, data.edge_index).shape == (2708, 7)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_ogb_example_save_and_plot(script, tmp_path):
    ckpt, png = tmp_path / "arxiv.pt", tmp_path / "arxiv.png"
    script("ogbn_arxiv")(["--synthetic", "--scale", "0.002", "--device", "cpu", "--no-progress", "--epochs", "2",
                          "--hidden", "8", "--heads", "2", "--seeds", "0,1", "--save", str(ckpt), "--plot", str(png)])
    common = sys.modules["_common"]
    for seed in (0, 1):
        saved = torch.load(tmp_path / f"arxiv-seed{seed}.pt", weights_only=True)
        assert saved["config"]["seed"] == seed and saved["config"]["epochs"] == 2
        model = common.OgbGAT(**{k: v for k, v in saved["config"]["model_config"].items()})
        model.load_state_dict(saved["state_dict"])  # strict: the same model comes back
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
