"""The walk of a warm ``GATConv`` forward on the Triton backend, from ``GATConv.forward`` to the first kernel
launcher, as ``docs/design.md`` draws and counts it: which modules of this repository it enters (and their lines),
and that the Triton backend's run path reads the kernel graph kept on the graph instead of going back to
``graph.py``. Measured with ``sys.setprofile`` under Triton's interpreter (the walk is the same on a GPU: only the
kernels differ). ``python tests/test_call_walk.py`` prints the figures the design doc states."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")

from .conftest import interpret_triton_on_cpu  # noqa: E402

if not interpret_triton_on_cpu():
    pytest.skip("CUDA is present and TRITON_INTERPRET is not 1: the walk is measured on the interpreter",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
TRITON = "cudnn_gnn/backends/triton/"


@dataclass(frozen=True)
class Walk:
    """What one call entered, in first-entry order: ``modules`` (repository paths), ``lines`` (their line counts),
    ``calls`` (``(caller path, caller function, callee path, callee function)`` of every call between two
    repository modules)."""

    modules: tuple[str, ...]
    lines: dict[str, int]
    calls: tuple[tuple[str, str, str, str], ...]

    @property
    def total_lines(self) -> int:
        return sum(self.lines.values())


def _repo_path(frame: FrameType | None) -> str | None:
    """The frame's file as a path relative to the repository (installed ``cudnn_gnn.layers`` maps to ``layers/``), or
    None outside it. Installed packages are outside it even when their environment is inside the checkout
    (``python -m venv .venv``): a path through ``site-packages`` or ``dist-packages`` is not the repository's."""
    if frame is None or not frame.f_code.co_filename.endswith(".py"):  # dataclass-generated code: "<string>"
        return None
    path = Path(frame.f_code.co_filename).resolve()
    try:
        rel = path.relative_to(ROOT)
    except ValueError:
        return None
    return None if {"site-packages", "dist-packages"} & set(rel.parts) else rel.as_posix()


def walk(*, backward: bool = False) -> Walk:
    """Profile the second (warm) forward of a ``GATConv`` on a prepared graph with ``backend="triton"`` from
    ``GATConv.forward`` to the first call of a kernel launcher (``launch_*`` in ``backends/triton/kernels/``).
    ``backward``: the inputs require grad (the call then also fetches the backward's kernel graph)."""
    from cudnn_gnn import CscGraph
    from cudnn_gnn.layers import GATConv

    torch.manual_seed(0)
    ei = torch.randint(0, 30, (2, 120))
    graph = CscGraph.from_edge_index(ei, num_nodes=30)
    conv = GATConv(8, 4, heads=2, backend="triton")
    x = torch.randn(30, 8, requires_grad=backward)
    with torch.set_grad_enabled(backward):
        conv(x, graph)  # warm: the layer's plan, the kernel graph, the kernels' first build
    order: list[str] = []
    lines: dict[str, int] = {}
    calls: list[tuple[str, str, str, str]] = []
    state = {"on": False, "done": False}

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        if state["done"] or event not in ("call", "return"):
            return
        path = _repo_path(frame)
        if event == "call" and path == "layers/gat_conv.py" and frame.f_code.co_name == "forward":
            state["on"] = True
        if not state["on"]:
            return
        if event == "call" and path is not None and path.startswith(TRITON + "kernels/") \
                and frame.f_code.co_name.startswith("launch_"):
            state["done"] = True
            path_in = path
        else:
            path_in = path if event == "call" else _repo_path(frame.f_back)
        if event == "call" and path is not None and frame.f_back is not None:
            caller = _repo_path(frame.f_back)
            if caller is not None:
                calls.append((caller, frame.f_back.f_code.co_name, path, frame.f_code.co_name))
        if path_in is None:
            return
        if path_in not in lines:
            order.append(path_in)
            lines[path_in] = len((ROOT / path_in).read_text().splitlines())

    with torch.set_grad_enabled(backward):
        sys.setprofile(tracer)
        try:
            conv(x, graph)
        finally:
            sys.setprofile(None)
    assert state["done"], "the forward reached no kernel launcher"
    return Walk(tuple(order), lines, tuple(calls))


@pytest.mark.parametrize("backward", [False, True], ids=["inference", "training"])
def test_the_run_path_reads_the_kept_kernel_graph(backward: bool) -> None:
    """Nothing of the Triton package calls into ``graph.py`` but the kernel graph's lookups through
    ``CscGraph.derived`` (:func:`kernel_graph`, keyed by the edge count's chunk size, and
    :meth:`TritonGraph.backward` where the call needs gradients):
    ``build_call`` and the op read the kept ``TritonGraph``, nothing else of the graph."""
    w = walk(backward=backward)
    into_graph = {(caller, fn, callee_fn) for caller, fn, callee, callee_fn in w.calls
                  if callee == "cudnn_gnn/graph.py" and caller.startswith(TRITON)}
    lookups = {(TRITON + "call.py", "kernel_graph", "num_edges"), (TRITON + "call.py", "kernel_graph", "derived")}
    if backward:
        lookups.add((TRITON + "call.py", "backward", "derived"))
    assert into_graph == lookups, into_graph
    assert TRITON + "worklists.py" not in w.modules  # work lists are built once per graph, not read per call


def test_the_walk_is_as_the_design_doc_counts_it() -> None:
    """``docs/design.md`` states this walk's module count as measured, and its line total within 5% (edits to the
    modules on the walk move it a little; a new module on the walk, or a much longer one, needs the doc updated)."""
    w = walk()
    found = re.search(r"(\d+) modules of this repository, ([\d,]+) lines in all", (ROOT / "docs/design.md").read_text())
    assert found is not None, "docs/design.md states no module count for the walk"
    modules, lines = int(found[1]), int(found[2].replace(",", ""))
    assert modules == len(w.modules), (modules, w.modules)
    assert abs(lines - w.total_lines) <= 0.05 * w.total_lines, (lines, w.total_lines)


if __name__ == "__main__":
    for backward in (False, True):
        w = walk(backward=backward)
        print(f"{'training' if backward else 'inference'}: {len(w.modules)} modules, {w.total_lines:,} lines")
        for m in w.modules:
            print(f"  {w.lines[m]:5d}  {m}")
