"""``ToCscGraph``: a PyG transform that attaches a :class:`~cudnn_gnn.CscGraph` to a ``Data`` object."""

from __future__ import annotations

from typing import Any

import torch
from torch_geometric.transforms import BaseTransform

from cudnn_gnn._validation import check_bool
from cudnn_gnn.graph import CscGraph

from ._plan_cache import prepare_graph

__all__ = ["ToCscGraph"]


class ToCscGraph(BaseTransform):
    """Convert ``data.edge_index`` (or ``data.adj_t``) once and store it as ``data.csc_graph``.

    Layers accept the graph in place of ``edge_index`` (``conv(x, data.csc_graph, data.edge_attr)``) with the
    same results, ``edge_attr`` staying in ``data.edge_index``'s order. With ``add_self_loops=True`` the
    self-loop form that PyG's ``GATConv``/``GATv2Conv`` use is built here too and kept on the graph, so no
    forward converts anything, and a ``torch.compile(fullgraph=True)`` model compiles with no graph break.

    This is the way to prepare a graph once for a layer stack: after the first forward (which builds the kernels'
    per-graph work lists and reads the degree maxima once), a training step on ``data.csc_graph`` reads no device
    value on the host, so it can be captured whole in a CUDA graph (:class:`cudnn_gnn.apps.capture.CapturedStep`).
    A raw ``edge_index`` cannot be: its cached plan is checked against the tensor's values on every forward (one
    ``torch.equal``, a host sync).

    Apply it after moving ``data`` to its device (``Data.to`` does not move a CscGraph; a layer that meets a
    graph on another device moves it once and keeps the copy). Meant for full-graph training; mini-batch
    loaders should pass ``edge_index``, which the layers convert once per batch.

    Args:
        add_self_loops: also prepare the self-loop form (for layers with ``add_self_loops=True``).
        index_dtype: ``torch.int32`` or ``torch.int64`` indices (default: int32 where every count fits).

    Example:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> from cudnn_gnn import ToCscGraph
        >>> data = ToCscGraph()(Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3))
        >>> data.csc_graph
        CscGraph(num_src_nodes=3, num_dst_nodes=3, num_edges=2, index_dtype=torch.int32, device=cpu)
    """

    def __init__(self, *, add_self_loops: bool = True, index_dtype: torch.dtype | None = None) -> None:
        self.add_self_loops = check_bool("add_self_loops", add_self_loops)
        if index_dtype not in (None, torch.int32, torch.int64):
            raise TypeError(f"index_dtype must be torch.int32, torch.int64 or None, got {index_dtype}")
        self.index_dtype = index_dtype

    def forward(self, data: Any) -> Any:
        data.csc_graph = CscGraph.from_data(data, index_dtype=self.index_dtype)  # the attached one unless stale
        prepare_graph(data.csc_graph, add_self_loops=self.add_self_loops)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(add_self_loops={self.add_self_loops})"
