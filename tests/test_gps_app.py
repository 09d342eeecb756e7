"""The GPS app's categorical feature encoder (:class:`cudnn_gnn.apps.gps.FeatureEncoder`): the sum of one embedding
per column, and what a value outside a column's table does: a ``ValueError`` on CPU, NaN rows on CUDA (no host
sync; here through the device branch forced on CPU), never an out-of-range lookup."""

from __future__ import annotations

import pytest
import torch

from cudnn_gnn.apps import gps as gps_module
from cudnn_gnn.apps.gps import ATOM_VOCAB, GPS, FeatureEncoder


def _x(n: int = 6, columns: int = 3, vocab: int = 5) -> torch.Tensor:
    return torch.randint(0, vocab, (n, columns), generator=torch.Generator().manual_seed(0))


def test_the_encoder_sums_one_embedding_per_column() -> None:
    enc = FeatureEncoder(3, 5, 4)
    x = _x()
    want = sum(enc.embeddings[i].weight[x[:, i]] for i in range(3))
    torch.testing.assert_close(enc(x), want, rtol=0, atol=0)
    enc(x).sum().backward()
    for i, emb in enumerate(enc.embeddings):  # each row's gradient counts its uses in column i
        torch.testing.assert_close(emb.weight.grad[:, 0], torch.bincount(x[:, i], minlength=5).float())


@pytest.mark.parametrize("bad", [5, -1, 1000])
def test_a_value_outside_the_table_is_refused_on_cpu_naming_column_and_value(bad: int) -> None:
    enc = FeatureEncoder(3, 5, 4)
    x = _x()
    x[4, 2] = bad
    with pytest.raises(ValueError, match=rf"^x must hold values in \[0, vocab=5\) in every column, got {bad} in "
                                         r"column 2 \(row 4\)"):
        enc(x)


def test_where_a_sync_is_costly_a_bad_row_is_nan_and_the_others_exact(monkeypatch) -> None:
    monkeypatch.setattr(gps_module, "sync_is_costly", lambda device: True)
    enc = FeatureEncoder(3, 5, 4)
    x = _x()
    good = enc(x)
    x[1, 0], x[3, 2] = 7, -2
    out = enc(x)
    assert torch.isnan(out[[1, 3]]).all()
    keep = [0, 2, 4, 5]
    torch.testing.assert_close(out[keep], good[keep], rtol=0, atol=0)
    out[keep].sum().backward()  # the NaN rows do not reach the gradients of the rows kept
    assert all(torch.isfinite(e.weight.grad).all() for e in enc.embeddings)


@pytest.mark.parametrize(
    "x, exc, match",
    [
        (torch.zeros(4, 2, dtype=torch.long), ValueError, r"^x must have shape \[N, columns=3\], got \(4, 2\)"),
        (torch.zeros(4, dtype=torch.long), ValueError, r"^x must have shape \[N, columns=3\], got \(4,\)"),
        (torch.zeros(4, 3), TypeError, "^x must hold integer category ids, got dtype torch.float32"),
        ([[0, 1, 2]], TypeError, "^x must be a torch.Tensor"),
    ],
)
def test_bad_inputs_are_named(x, exc, match) -> None:
    with pytest.raises(exc, match=match):
        FeatureEncoder(3, 5, 4)(x)


def test_the_model_refuses_an_atom_outside_the_vocabulary() -> None:
    model = GPS(channels=8, layers=1, heads=2, num_tasks=1, dropout=0.0, backend="reference", impl="pyg")
    with pytest.raises(ValueError, match=rf"vocab={ATOM_VOCAB}\) in every column, got {ATOM_VOCAB} in column 0"):
        model.atom(torch.full((2, 9), ATOM_VOCAB))
