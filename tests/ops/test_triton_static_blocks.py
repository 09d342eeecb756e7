"""The Triton backend on a static-shape sampled block (:mod:`cudnn_gnn.apps.static_sampler`: self-loops in the
block, sink rows after the real ones, short rows) against the reference backend on the compacted subgraph (no sink
rows), outputs and every gradient, on CPU under Triton's interpreter, one tiny batch. The interpreter is set as in
``test_triton_backend.py`` (before the kernels are first decorated); with CUDA present this file skips unless
``TRITON_INTERPRET=1`` was set from the start."""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytest.importorskip("triton", reason="the triton backend needs the triton package: pip install triton")

# the kernels' module (named either way across the backend's layouts) must not be decorated yet
_KERNELS = ("cudnn_gnn.backends._triton_kernels", "cudnn_gnn.backends.triton.kernels")
if not torch.cuda.is_available() and not any(name in sys.modules for name in _KERNELS):
    os.environ["TRITON_INTERPRET"] = "1"
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("CUDA is present and TRITON_INTERPRET is not 1: tests/gpu/test_static_sampler_gpu.py runs the "
                "compiled kernels; set TRITON_INTERPRET=1 to run this file on the interpreter", allow_module_level=True)

from cudnn_gnn.apps.static_sampler import StaticNeighborSampler  # noqa: E402
from cudnn_gnn.layers import GATConv  # noqa: E402


def test_triton_on_a_static_block_equals_reference_on_the_compact_subgraph() -> None:
    g = torch.Generator().manual_seed(0)
    src, dst = torch.randint(0, 30, (2, 120), generator=g)
    pairs = torch.unique(dst * 30 + src)
    src, dst = pairs % 30, pairs // 30
    colptr = torch.zeros(31, dtype=torch.int64)
    colptr[1:] = torch.bincount(dst, minlength=30).cumsum(0)
    sampler = StaticNeighborSampler(colptr, src, fanout=[3, 2], batch_size=3, generator=g)
    batch = sampler.sample(torch.tensor([0, 7, 29]))
    torch.manual_seed(0)
    ours = GATConv(5, 4, heads=2, add_self_loops=False, residual=True, backend="triton")
    ref = GATConv(5, 4, heads=2, add_self_loops=False, residual=True, backend="reference")
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(sampler.num_slots, 5, generator=g)
    for blk in batch.blocks:
        xs = x[: blk.num_src].clone().requires_grad_()
        out = ours((xs, xs[: blk.num_rows]), blk.graph)[: blk.num_dst]
        grad = torch.randn_like(out)
        (out * grad).sum().backward()
        xr = x[: blk.num_src].clone().requires_grad_()
        compact = blk.edge_index[:, : int(blk.graph.offsets[blk.num_dst])]
        want = ref((xr, xr[: blk.num_dst]), compact)
        (want * grad).sum().backward()
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(xs.grad, xr.grad, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
        ours.zero_grad()
        ref.zero_grad()
