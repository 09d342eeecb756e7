"""Second-order gradients (``create_graph=True``, e.g. a gradient penalty): the kernel backends refuse them, the
reference backend computes them.

The Triton and cuDNN ops' backward formulas run in kernels (cuDNN's CPU stand-in in a detached recomputation), so
the gradients they return are not differentiable: a gradient penalty through them came out silently wrong. Both
raise instead, from the eager autograd Function and from the registered op's autograd formula alike; the
reference backend is plain PyTorch and passes ``gradgradcheck``. The Triton cases run under Triton's interpreter on
CPU (``TRITON_INTERPRET=1``, set before the kernels are first imported, as in ``test_triton_backend.py``).
"""

from __future__ import annotations

import os

import pytest
import torch

import cudnn_gnn
from cudnn_gnn import CscGraph

from ..conftest import call_spec, interpret_triton_on_cpu

interpret_triton_on_cpu()

_EDGES = torch.tensor([[0, 1, 2, 3, 1, 2, 0, 4], [1, 0, 0, 2, 2, 3, 3, 3]])

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="the Triton cases run on CPU under TRITON_INTERPRET=1 (CUDA is present and it was not set)")


def _inputs(v2: bool, dtype: torch.dtype = torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    heads, c = 2, 3
    x = torch.randn(5, heads * c, generator=g, dtype=dtype).requires_grad_()
    w = torch.randn(heads * c if v2 else 2 * heads * c, generator=g, dtype=dtype).requires_grad_()
    return x, w, heads


@needs_interpreter
@pytest.mark.parametrize("op", ["gat", "gatv2"])
@pytest.mark.parametrize("direct", [False, True], ids=["public", "function"])
def test_triton_refuses_create_graph(op, direct):
    """A gradient penalty through the Triton op raises, naming ``create_graph=True`` and the reference backend; a
    plain backward still runs. ``function``: the op's autograd Function (what eager calls and ``torch.compile``
    take) applied directly to a built call; ``public``: through ``cudnn_gnn.gat`` / ``gatv2``."""
    pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")
    from cudnn_gnn.backends import triton as tb

    graph = CscGraph.from_edge_index(_EDGES, num_nodes=5)
    x, w, heads = _inputs(op == "gatv2")
    if direct:
        from cudnn_gnn.backends.triton.gat_op import GatAttention
        from cudnn_gnn.backends.triton.gatv2_op import Gatv2Attention

        call, walk = tb.build_call(call_spec(graph, x, x, w, v2=op == "gatv2", heads=heads, concat=True),
                                   tb.kernel_graph(graph), needs_grad=True)
        from cudnn_gnn.backends.triton import gat_op, gatv2_op
        from cudnn_gnn.backends.triton._op_common import grad_inputs

        function, module = (Gatv2Attention, gatv2_op) if op == "gatv2" else (GatAttention, gat_op)
        layout, inputs = grad_inputs(call, module.GRADS)
        out = function.apply(False, call, walk, layout, *inputs)[0]
    else:
        out = getattr(cudnn_gnn, op)(graph, x, w, heads=heads, backend="triton")
    with pytest.raises(NotImplementedError, match=r"create_graph=True.*backend='reference'"):
        torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
    (dx,) = torch.autograd.grad(out.pow(2).sum(), x)  # first order: unchanged
    assert torch.isfinite(dx).all()


@pytest.mark.parametrize("v2", [False, True], ids=["gat", "gatv2"])
def test_cudnn_op_refuses_create_graph(v2):
    """The cuDNN op's autograd formula refuses too (checked through its CPU emulation; the CUDA path shares the
    formula)."""
    import cudnn_gnn.backends._cudnn as cu

    graph = CscGraph.from_edge_index(_EDGES, num_nodes=5)
    x, w, heads = _inputs(v2)
    call = cu.GatCall(graph.offsets, graph.indices, graph.map_csc_to_coo, None, None, 5, x, x, None, w, None,
                      v2, heads, True, "leaky_relu", 0.2, False, False)
    out, _ = cu.cudnn_gat(call, False)
    with pytest.raises(NotImplementedError, match=r"create_graph=True.*backend='reference'"):
        torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)


@pytest.mark.parametrize("op", ["gat", "gatv2"])
def test_reference_is_differentiable_twice(op):
    """The reference backend's double backward, by finite differences in float64 (``gradgradcheck``), with edge
    features and a mean over heads."""
    graph = CscGraph.from_edge_index(_EDGES, num_nodes=5)
    x, w, heads = _inputs(op == "gatv2", torch.float64)
    fn = getattr(cudnn_gnn, op)

    def f(x, w):
        return fn(graph, x, w, heads=heads, concat=False, backend="reference")

    assert torch.autograd.gradgradcheck(f, (x, w))


def test_gradient_penalty_on_the_reference_layer_matches_pyg():
    """A gradient penalty on ``GATConv`` with ``backend="reference"`` equals PyG's (same state_dict): the value and
    the parameters' gradients through it."""
    pyg = pytest.importorskip("torch_geometric.nn", reason="the parity test needs torch_geometric")
    from cudnn_gnn.layers import GATConv

    torch.manual_seed(0)
    ref = pyg.GATConv(6, 4, heads=2)
    ours = GATConv(6, 4, heads=2, backend="reference")
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(5, 6)
    penalties = []
    for layer in (ref, ours):
        xi = x.clone().requires_grad_()
        (dx,) = torch.autograd.grad(layer(xi, _EDGES).pow(2).sum(), xi, create_graph=True)
        penalty = dx.pow(2).sum()
        penalties.append((penalty, *torch.autograd.grad(penalty, list(layer.parameters()))))
    for a, b in zip(*penalties, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
