"""GPSConv on a GPU: ``ptr`` and ``batch`` that disagree are refused where the forward syncs anyway (no
``max_num_nodes``); with ``max_num_nodes`` only shapes are checked, without a host sync.

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
