"""Training checkpoints (``--checkpoint``/``--resume``): a run stopped and resumed gives the uninterrupted run's
result, bitwise on a CPU; checkpoints are written atomically, read with ``weights_only=True``, and a checkpoint of
other settings is refused naming the difference."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_gnn.apps import _resume
from cudnn_gnn.apps.train import TrainConfig, main, train_planetoid

#: Result keys that measure time, not what was computed.
TIMING = {"seconds", "sec_per_epoch", "epochs", "checkpoint", "resume", "per_run"}


@pytest.fixture(scope="module")
def cora():
    from cudnn_gnn.datasets import load_planetoid

    return load_planetoid("Cora", normalize_features=True)[0]


def _computed(res: dict) -> dict:
    return {k: v for k, v in res.items() if k not in TIMING}


def test_rng_state_round_trip():
    """torch's, numpy's and Python's generators come back to where they were read, through a weights_only file."""
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    state = _resume.get_rng_state()
    first = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"rng-{os.getpid()}.pt"
    torch.save(state, path)
    try:
        _resume.set_rng_state(torch.load(path, weights_only=True))
    finally:
        path.unlink()
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1]) and first[2] == again[2]


def test_main_job_resumed_equals_uninterrupted(cora, tmp_path):
    """N epochs in one go, and N/2 then --resume for the rest: the same curves, epoch and accuracies, bitwise."""
    base = {"device": "cpu", "progress": False, "hidden": 4, "heads": 2, "epochs": 4, "seed": 3}
    full = train_planetoid(TrainConfig(**base), data=cora)
    ckpt = tmp_path / "run.pt"
    train_planetoid(TrainConfig(**{**base, "epochs": 2}, checkpoint=str(ckpt)), data=cora)
    assert torch.load(ckpt, weights_only=True)["epoch"] == 2  # loads without unpickling code
    rest = train_planetoid(TrainConfig(**base, resume=str(ckpt), checkpoint=str(ckpt)), data=cora)
    assert _computed(rest) == _computed(full)
    assert rest["curves"] == full["curves"] and rest["epochs_run"] == 4


@pytest.mark.slow
def test_main_job_resume_keeps_early_stopping_state(cora, tmp_path):
    """The patience counter and best scores travel: a run resumed two epochs before its early stop stops where the
    uninterrupted one stops, and resuming a stopped run trains no further."""
    base = {"device": "cpu", "progress": False, "hidden": 2, "heads": 1, "epochs": 40, "seed": 0, "patience": 2,
            "lr": 0.05}
    full = train_planetoid(TrainConfig(**base), data=cora)
    stop = full["epochs_run"]
    assert stop < 40  # it stopped early
    ckpt = tmp_path / "run.pt"
    train_planetoid(TrainConfig(**{**base, "epochs": stop - 1}, checkpoint=str(ckpt)), data=cora)
    rest = train_planetoid(TrainConfig(**base, resume=str(ckpt), checkpoint=str(ckpt)), data=cora)
    assert _computed(rest) == _computed(full)
    again = train_planetoid(TrainConfig(**base, resume=str(ckpt)), data=cora)  # the checkpoint of a stopped run
    assert _computed(again) == _computed(full)


@pytest.mark.slow
def test_main_job_resume_flag_and_refusals(tmp_path, capsys):
    """From the command line: --resume continues the --checkpoint run; another seed, a --save file or a missing
    file is one error line (exit 2) naming what is wrong, before any data is read."""
    ckpt, js1, js2 = tmp_path / "c.pt", tmp_path / "a.json", tmp_path / "b.json"
    common = ["--device", "cpu", "-q", "--seed", "2"]
    assert main([*common, "--epochs", "4", "--json", str(js1)]) == 0
    assert main([*common, "--epochs", "2", "--checkpoint", str(ckpt)]) == 0
    assert main([*common, "--epochs", "4", "--resume", str(ckpt), "--json", str(js2)]) == 0
    a, b = (json.loads(p.read_text()) for p in (js1, js2))
    assert _computed(a) == _computed(b)
    capsys.readouterr()

    def refused(argv):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        return capsys.readouterr().err.strip()

    err = refused(["--device", "cpu", "--seed", "5", "--resume", str(ckpt)])
    assert "seed 2 there, 5 here" in err and len(err.splitlines()) == 1, err
    save = tmp_path / "w.pt"
    assert main([*common, "--epochs", "1", "--save", str(save)]) == 0
    assert "a --save file" in refused([*common, "--resume", str(save)])
    assert "no such file" in refused([*common, "--resume", str(tmp_path / "nope.pt")])


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A write that fails half-way leaves the previous checkpoint whole and no temporary file behind."""
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    path = tmp_path / "c.pt"
    _resume.save_training(path, config={"a": 1}, epoch=1, model=model, optimizer=opt)
    before = path.read_bytes()

    def broken(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(_resume.torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        _resume.save_training(path, config={"a": 1}, epoch=2, model=model, optimizer=opt)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["c.pt"]
    assert _resume.load_checkpoint(path)["epoch"] == 1


def test_load_optimizer_refills_existing_state_in_place():
    """A captured step's graph reads the optimizer's state tensors and tensor learning rate at fixed addresses:
    loading a checkpoint copies into them instead of replacing them."""
    model = torch.nn.Linear(3, 2)
    lr = torch.tensor(0.01)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    addresses = {k: v.data_ptr() for k, v in opt.state[model.weight].items()}
    other = torch.optim.Adam(model.parameters(), lr=0.5)
    model(torch.randn(4, 3)).pow(2).sum().backward()
    other.step()
    other.step()
    _resume.load_optimizer(opt, other.state_dict())
    for key, value in opt.state[model.weight].items():
        assert value.data_ptr() == addresses[key] and torch.equal(value, other.state[model.weight][key])
    assert opt.param_groups[0]["lr"] is lr and float(lr) == 0.5


# --------------------------------------------------------------------------------------------- OGB scripts


def _summary(res: dict) -> dict:
    out = _computed(res)
    out["runs_detail"] = [{k: v for k, v in r.items() if k not in ("sec_per_epoch", "peak_memory_bytes")}
                          for r in res["per_run"]]
    return out


@pytest.mark.parametrize("name, extra", [
    ("ogbn_arxiv", ["--hidden", "4", "--heads", "1", "--scale", "0.002"]),
    pytest.param("ogbn_proteins", ["--hidden", "4", "--heads", "1", "--scale", "0.0005", "--eval-every", "1"],
                 marks=pytest.mark.slow),  # a scheduler
])
def test_ogb_script_resumed_equals_uninterrupted(name, extra, tmp_path, example_main):
    """Four epochs in one go, and two then --resume: the same per-epoch scores, best epoch and summary."""
    main_ = example_main(name)
    common = ["--device", "cpu", "-q", *extra]
    full = main_([*common, "--epochs", "4"])
    ckpt = tmp_path / "c.pt"
    main_([*common, "--epochs", "2", "--checkpoint", str(ckpt)])
    rest = main_([*common, "--epochs", "4", "--resume", str(ckpt)])
    assert _summary(rest) == _summary(full)


@pytest.mark.slow
def test_ogb_script_resume_several_seeds(tmp_path, example_main):
    """With several seeds each has its checkpoint (PATH-seedN); resuming runs the unfinished ones from where they
    stopped and the finished ones not at all."""
    main_ = example_main("ogbn_arxiv")
    common = ["--device", "cpu", "-q", "--hidden", "4", "--heads", "1", "--scale", "0.002", "--seeds", "0-1"]
    full = main_([*common, "--epochs", "3"])
    ckpt = tmp_path / "c.pt"
    main_([*common, "--epochs", "2", "--checkpoint", str(ckpt)])
    assert sorted(os.listdir(tmp_path)) == ["c-seed0.pt", "c-seed1.pt"]
    rest = main_([*common, "--epochs", "3", "--resume", str(ckpt)])
    assert _summary(rest) == _summary(full)



@pytest.mark.slow
def test_papers100m_resumed_equals_uninterrupted(tmp_path, example_main):
    """papers100m.py with the device sampler (its own generators, saved with torch's): three epochs in one go, and
    two then --resume, give the same losses and accuracies epoch by epoch."""
    main_ = example_main("papers100m")
    common = ["--device", "cpu", "--scale", "0.0005", "--sampler", "device", "--batch-size", "256", "--eval-every",
              "1", "--root", str(tmp_path / "data"), "-q", "--hidden", "8", "--heads", "2"]
    full = main_([*common, "--epochs", "3"])
    ckpt = tmp_path / "c.pt"
    main_([*common, "--epochs", "2", "--checkpoint", str(ckpt)])
    rest = main_([*common, "--epochs", "3", "--resume", str(ckpt)])
    keys = ("loss", "valid_acc", "test_acc", "batches")
    assert [[e[k] for k in keys] for e in rest["epochs"]] == [[e[k] for k in keys] for e in full["epochs"]]
