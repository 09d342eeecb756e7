"""GPSConv on a GPU: ``ptr`` and ``batch`` that disagree are refused where the forward syncs anyway (no
``max_num_nodes``); with ``max_num_nodes`` only shapes are checked, without a host sync; a PyG GPSConv converted by
``convert`` gives PyG's outputs and gradients.

Run: ``python -m pytest tests/gpu/test_gps_gpu.py -m gpu -rA``.
"""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import pytest
import torch

from cudnn_gnn.layers.gps_conv import GPSConv

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

DEV = torch.device("cuda")


def _case() -> tuple[GPSConv, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    layer = GPSConv(16, None, heads=2, attention_backend="reference").to(DEV).eval()
    x = torch.randn(13, 16, device=DEV)
    edge_index = torch.tensor([[0, 1], [1, 0]], device=DEV)
    batch = torch.tensor([0] * 4 + [1] * 7 + [2] * 2, device=DEV)
    return layer, x, edge_index, batch, torch.tensor([0, 4, 11, 13], device=DEV)


def test_gps_ptr_batch_disagreement_refused_on_cuda():
    layer, x, edge_index, batch, _ = _case()
    with pytest.raises(ValueError, match="ptr and batch must describe the same graphs"):
        layer(x, edge_index, batch, ptr=torch.tensor([0, 5, 11, 13], device=DEV))


def test_gps_shape_check_with_max_num_nodes_has_no_host_sync():
    """On CUDA with ``max_num_nodes`` the layer checks only shapes (values would cost a sync): no host sync there."""
    from cudnn_gnn.layers import gps_conv

    layer, x, edge_index, batch, ptr = _case()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        gps_conv._check_ptr_matches_batch(ptr, batch, x.size(0), False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    with pytest.raises(ValueError, match=r"batch must have shape \[N=13\]"):
        layer(x, edge_index, batch[:-1], ptr=ptr, max_num_nodes=7)


def test_converted_pyg_gps_model_matches_pyg_on_cuda():
    """A PyG GPSConv with a GATConv inside, converted (our GPS layer on the GPU attention backend `auto` picks, our
    GATConv on Triton/cuDNN), gives PyG's outputs and gradients within the kernels' precision."""
    import torch_geometric.nn as pyg_nn

    from cudnn_gnn.layers import GATConv, convert

    torch.manual_seed(0)
    pyg = pyg_nn.GPSConv(16, pyg_nn.GATConv(16, 8, heads=2), heads=2, norm="layer_norm").to(DEV).eval()
    ours = convert(pyg)
    assert type(ours) is GPSConv and type(ours.conv) is GATConv
    x = torch.randn(13, 16, device=DEV, requires_grad=True)
    edge_index = torch.tensor([[0, 1, 2, 5, 6, 7, 11], [1, 2, 3, 6, 7, 4, 12]], device=DEV)
    batch = torch.tensor([0] * 4 + [1] * 7 + [2] * 2, device=DEV)
    ref = pyg(x, edge_index, batch)
    (gx_ref,) = torch.autograd.grad(ref.square().sum(), x)
    out = ours(x, edge_index, batch)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)  # cuDNN SDPA runs fp32 inputs in bf16
    torch.testing.assert_close(gx, gx_ref, rtol=5e-2, atol=5e-2)
