"""The Triton backend's package structure: light imports, the backend names without a backend, the options object.

No kernel runs here (no Triton interpreter needed).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn_gnn

from ..conftest import call_spec

PACKAGE = Path(cudnn_gnn.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    """The modules a file imports at its top level or anywhere inside it (``import x`` / ``from x import y``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_backend_names_import_no_backend_and_spec_reads_them():
    """``cudnn_gnn/_names.py`` imports nothing of the package, and ``spec.py`` takes the names from it, not from the
    backends (which import the spec's helpers): no import cycle, no local import to break one."""
    assert not {m for m in _imported_modules(PACKAGE / "_names.py") if m.startswith("cudnn_gnn")}
    spec_imports = _imported_modules(PACKAGE / "spec.py")
    assert "cudnn_gnn._names" in spec_imports
    assert not {m for m in spec_imports if m.startswith("cudnn_gnn.backends")}
    from cudnn_gnn import _names, backends

    assert backends.GAT_BACKENDS is _names.GAT_BACKENDS and backends.AUTO_ORDER is _names.AUTO_ORDER


def test_import_cudnn_gnn_does_not_import_the_kernels():
    """The Triton backend's modules are imported with the package; its kernels (which decorate with Triton and read
    ``TRITON_INTERPRET``) only at the first launch."""
    code = ("import sys, cudnn_gnn, cudnn_gnn.backends.triton as tb; "
            "assert tb.BACKEND.name == 'triton'; "
            "print([m for m in sys.modules if m.startswith('cudnn_gnn.backends.triton.kernels')])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_triton_options_are_checked_and_travel_with_the_call():
    """``TritonOptions`` refuses an unknown GAT backward in the house grammar; a known one reaches the call
    (``GatCall.gat_backward``, a field of GAT's op), as launch overrides do (``GatCall.launch``)."""
    import torch

    from cudnn_gnn import CscGraph
    from cudnn_gnn.backends import triton as tb

    with pytest.raises(ValueError, match=r"gat_backward must be one of 'auto', 'one_gather', 'two_gather', got 'fast'"):
        tb.TritonOptions(gat_backward="fast")
    graph = CscGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    x = torch.randn(3, 4, requires_grad=True)
    for choice in ("auto", "one_gather", "two_gather"):
        spec = call_spec(graph, x, x, torch.randn(8 + 2), torch.randn(3, 2), v2=False, heads=2, concat=True)
        call, _ = tb.build_call(spec, tb.kernel_graph(graph), needs_grad=True,
                                options=tb.TritonOptions(gat_backward=choice, launch={"gat_src": (4, 2)}))
        assert isinstance(call, tb.GatCall) and call.gat_backward == choice and call.launch == [3, 4, 2, 0]
        # att_edge went into the edge scores [E, H]; the op gets att_src | att_dst only
        assert call.att_node.shape == (8,)
        assert call.score_edge is not None and call.score_edge.shape == (3, 2)


@pytest.mark.parametrize("name", ["BIG_BLOCKS", "GAT_ONE_GATHER_BACKWARD", "SOURCE_PASS_REV_DST", "ENABLED",
                                  "COLUMN_SUM"])
def test_no_experiment_switches_in_the_library(name):
    """The module-level switches benchmarks used to patch are gone from every module that held one."""
    from cudnn_gnn import _bias
    from cudnn_gnn.backends import triton
    from cudnn_gnn.backends.triton import call, launch, op, tuning

    for module in (_bias, triton, call, launch, op, tuning):
        assert not hasattr(module, name), (module.__name__, name)
