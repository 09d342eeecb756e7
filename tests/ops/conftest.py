"""Fixtures of the op tests: a fake cuDNN frontend for the SDPA adapter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._fake_cudnn import FakeFrontend


@pytest.fixture
def fake_cudnn(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[FakeFrontend]:
    """Our SDPA graphs on a CPU fake of the frontend (tests/ops/_fake_cudnn.py), plans kept in ``tmp_path/plans``,
    the plan cache empty before and after."""
    from cudnn_gnn.backends import _cudnn_sdpa, _sdpa_plans

    fe = FakeFrontend()
    monkeypatch.setattr(_cudnn_sdpa, "_frontend", lambda: fe)
    monkeypatch.setattr(_sdpa_plans, "_DIR", tmp_path / "plans")
    _cudnn_sdpa.clear_plan_cache()
    yield fe
    _cudnn_sdpa.clear_plan_cache()
