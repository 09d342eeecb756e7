"""The installed package holds every subpackage of the source tree.

``pyproject.toml`` lists the packages by hand (``layers/`` and ``datasets/`` are installed under ``cudnn_gnn``), so a
new subpackage missing from the list installs nothing: an editable install still imports it from the tree, and only a
plain ``pip install .`` fails (``.ci/run``'s second environment caught ``cudnn_gnn.backends.triton`` that way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python >= 3.11")

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = {name: ROOT / folder for name, folder in config["package-dir"].items()}
    found = set()
    for name, folder in dirs.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            found.add(".".join((name, *rel)))
    assert found <= listed, f"packages missing from pyproject.toml's [tool.setuptools] packages: {sorted(found - listed)}"


def test_wheel_metadata_license_notices_types_and_version() -> None:
    """The wheel carries the licence, the notices of the bundled data and ``py.typed``; one version, read from the
    package; no extra that nothing uses."""
    import cudnn_gnn

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    meta, setuptools = project["project"], project["tool"]["setuptools"]
    assert meta["license"] == "Apache-2.0" and "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    notices = (ROOT / "THIRD_PARTY_NOTICES.md").read_text()
    assert "Copyright (c) 2016 Zhilin Yang" in notices and "Copyright (c) 2019 OGB Team" in notices
    assert set(meta["license-files"]) == {"LICENSE", "THIRD_PARTY_NOTICES.md"}
    assert "py.typed" in setuptools["package-data"]["cudnn_gnn"] and (ROOT / "cudnn_gnn" / "py.typed").is_file()
    assert "version" in meta["dynamic"] and setuptools["dynamic"]["version"] == {"attr": "cudnn_gnn.__version__"}
    assert cudnn_gnn.__version__.count(".") == 2
    assert "scatter" not in meta["optional-dependencies"]  # torch-scatter is used nowhere
