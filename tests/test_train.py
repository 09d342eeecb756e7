"""``python -m cudnn_gnn train`` (:mod:`cudnn_gnn.apps.train`): the input-dropout cache, ``--save`` at the reported
epoch and the per-epoch curves, progress lines off a terminal, argument checks of :func:`train_planetoid`."""

from __future__ import annotations

import pytest
import torch

from cudnn_gnn.apps.train import build_gat, main


def test_input_dropout_sees_writes_the_version_counter_misses():
    """Writes through numpy or ``.data`` leave ``x._version`` as it was: the kept non-zero positions must still be
    found stale, or new non-zeros are dropped for good (and the model trains on other inputs than it is given)."""
    model = build_gat("gat", 40, 3, dropout=0.5).train()
    x = torch.zeros(300, 40)
    x[:, 0] = 1.0
    torch.manual_seed(0)
    model.input_dropout(x)  # finds column 0
    version = x._version
    x.numpy()[:, 7] = 1.0  # a numpy write
    assert x._version == version
    out = model.input_dropout(x)
    assert (out[:, 7] != 0).sum() > 50 and set(out[:, 7].unique().tolist()) <= {0.0, 2.0}
    x.data[:, 9] = 3.0  # a write through .data
    out = model.input_dropout(x)
    assert (out[:, 9] != 0).sum() > 50
    x.numpy()[:, 0] = 0.0  # positions that became zero, with as many new ones elsewhere: same count, other places
    x.numpy()[:, 11] = 4.0
    out = model.input_dropout(x)
    assert (out[:, 0] == 0).all() and (out[:, 11] != 0).sum() > 50


def test_input_dropout_matches_plain_dropout_statistics():
    """The sparse path keeps ``F.dropout``'s law: each non-zero kept with probability ``1 - p``, scaled."""
    model = build_gat("gat", 64, 3, dropout=0.6).train()
    x = torch.zeros(2000, 64)
    x[:, :4] = 1.0
    torch.manual_seed(1)
    out = model.input_dropout(x)
    kept = (out[:, :4] != 0).float().mean().item()
    assert abs(kept - 0.4) < 0.03
    assert torch.allclose(out[:, :4][out[:, :4] != 0], torch.full((1,), 2.5))
    assert (out[:, 4:] == 0).all()


def test_save_reproduces_the_reported_test_accuracy(tmp_path):
    """``--save`` stores the model of the reported epoch (the last at which both validation scores improved), not
    the last epoch's: loaded, it gives the reported test accuracy exactly. (A small model and a large learning
    rate, so that the scores stop improving before the last of a few epochs.)"""
    from cudnn_gnn.apps.train import TrainConfig, format_result, load_gat, train_planetoid
    from cudnn_gnn.datasets import load_planetoid

    data = load_planetoid("Cora", normalize_features=True)[0]
    ckpt = tmp_path / "gat.pt"
    res = train_planetoid(TrainConfig(device="cpu", progress=False, hidden=4, heads=2, epochs=8, seed=2, lr=0.05,
                                      save=str(ckpt)), data=data)
    assert res["best_epoch"] < res["epochs_run"], "the scores must stop improving before the end"
    model, cfg = load_gat(ckpt)
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    assert acc == res["test_acc"]
    assert cfg["epoch"] == res["best_epoch"] and cfg["test_acc"] == acc
    assert f"test accuracy {100 * acc:.2f}%" in format_result(res)
    # the per-epoch curves: one value an epoch; the reported scores are those of the reported epoch
    curves = res["curves"]
    assert set(curves) == {"train_loss", "val_loss", "val_acc", "test_acc"}
    assert all(len(v) == res["epochs_run"] for v in curves.values())
    best = res["best_epoch"] - 1
    assert (curves["test_acc"][best], curves["val_acc"][best], curves["val_loss"][best]) == (
        res["test_acc"], res["val_acc"], res["val_loss"])
    assert curves["train_loss"][0] == pytest.approx(torch.log(torch.tensor(7.0)).item(), abs=0.1)  # 7 classes


def test_history_lines_one_per_epoch_through_logging(capsys):
    """A line per epoch stays as the run's history (PyG's and DGL's examples print one), in one format, through
    logging: every --log-every epochs and the last; -q leaves only the final result line."""
    from cudnn_gnn.apps._log import setup_logging
    from cudnn_gnn.apps.train import TrainConfig, train_planetoid
    from cudnn_gnn.datasets import load_planetoid

    def epoch_lines(text):
        return [ln.split(": ")[0].split()[-1] for ln in text.splitlines() if ln.startswith("seed 1 epoch ")]

    setup_logging()
    data = load_planetoid("Cora", normalize_features=True)[0]
    small = {"device": "cpu", "hidden": 2, "heads": 1, "epochs": 5, "seed": 1}
    train_planetoid(TrainConfig(**small, log_every=2), data=data)
    out = capsys.readouterr().out
    assert epoch_lines(out) == ["2/5", "4/5", "5/5"], out
    assert all("loss " in ln and "val acc " in ln for ln in out.splitlines())
    train_planetoid(TrainConfig(**small), data=data)  # default: one an epoch
    assert epoch_lines(capsys.readouterr().out) == ["1/5", "2/5", "3/5", "4/5", "5/5"]
    for quiet in ({"log_every": 0}, {"progress": False}):
        train_planetoid(TrainConfig(**small, **quiet), data=data)
        assert capsys.readouterr().out == ""
    assert main(["--epochs", "2", "--device", "cpu", "--seed", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("GAT paper setup on Cora") and epoch_lines("\n".join(out)) == ["1/2", "2/2"]
    assert out[-1].startswith("final: Cora gat seed 1: test accuracy"), out
    assert main(["--epochs", "2", "--device", "cpu", "--seed", "1", "-q"]) == 0  # -q: the result alone
    quiet = capsys.readouterr().out.splitlines()
    assert len(quiet) == 1 and quiet[0].split(" (")[0] == out[-1].split(" (")[0], quiet
    setup_logging()


def test_train_planetoid_refuses_out_of_range_seeds():
    from cudnn_gnn.apps.train import TrainConfig, train_planetoid

    for seed in (-1, 2**32, 2**64):
        with pytest.raises(ValueError, match="seed must be an int in"):
            train_planetoid(TrainConfig(device="cpu", progress=False, seed=seed))


@pytest.mark.parametrize("bad", ["negative", "float", "two_columns", "empty"])
def test_train_planetoid_refuses_labels_that_are_not_class_ids(bad):
    """A negative label would index before the logits in cross-entropy (on CUDA a device-side assert): refused with
    the data's own value before the model is built, as are float or 2-d labels."""
    from cudnn_gnn.apps.train import TrainConfig, train_planetoid
    from cudnn_gnn.datasets import load_planetoid

    data = load_planetoid("Cora", normalize_features=True)[0]
    exc = ValueError
    if bad == "negative":
        data.y = data.y.clone()
        data.y[5] = -3
        match = r"^data.y must hold class ids >= 0, got -3"
    elif bad == "float":
        data.y, exc, match = data.y.float(), TypeError, r"^data.y must hold integer class ids, got dtype torch.float32"
    else:
        data.y = data.y.view(-1, 1) if bad == "two_columns" else data.y[:0]
        match = r"^data.y must have shape \(num_nodes=2708,\): one class id per node"
    with pytest.raises(exc, match=match):
        train_planetoid(TrainConfig(device="cpu", progress=False, epochs=1), data=data)
