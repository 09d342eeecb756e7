"""The GPS graph transformer ``examples/gps_molecules.py`` trains (and ``benchmarks/bench_training.py`` times), on
PyG batches and on the fixed-shape packed batches of :mod:`cudnn_gnn.apps.static_batcher`.

``GPS(**config)`` rebuilds a saved model (``--save`` stores the constructor arguments next to the weights).
"""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party)

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import global_mean_pool

from cudnn_gnn._validation import check_int, check_tensor, sync_is_costly
from cudnn_gnn.apps.static_batcher import GraphBudget, masked_graph_loss, packed_csc_graph
from cudnn_gnn.layers.gps_conv import GPSConv

__all__ = ["GPS", "FeatureEncoder", "IMPLS", "ATOM_VOCAB", "BOND_VOCAB", "local_gat_class", "packed_loss"]

ATOM_VOCAB = 128  # every OGB atom feature column has < 128 values (atomic number: 119)
BOND_VOCAB = 16  # every OGB bond feature column has < 16 values
IMPLS = ("ours", "pyg")


def local_gat_class() -> tuple[type, str]:
    """Our cuDNN GATConv when importable, else PyG's."""
    try:
        from cudnn_gnn.layers import GATConv

        return GATConv, "cudnn_gnn.layers.GATConv"
    except ImportError:
        from torch_geometric.nn import GATConv

        return GATConv, "torch_geometric.nn.GATConv (cudnn_gnn.layers.GATConv not importable)"


class FeatureEncoder(nn.Module):
    """Sum of one embedding per categorical column (OGB's AtomEncoder/BondEncoder, without needing ``ogb``):
    ``x [N, columns]`` integers in ``[0, vocab)`` -> ``[N, channels]``.

    A value outside ``[0, vocab)`` would make ``nn.Embedding`` index out of its table (on CUDA a device-side assert
    that ends the process's CUDA context). On CPU it raises ``ValueError`` naming the column and the value; on CUDA,
    where a check would cost a host sync every step (and break a captured one), its row of the output is NaN (the
    loss too) and the lookup reads a clamped index."""

    def __init__(self, columns: int, vocab: int, channels: int) -> None:
        super().__init__()
        self.columns, self.vocab = check_int("columns", columns, minimum=1), check_int("vocab", vocab, minimum=1)
        self.embeddings = nn.ModuleList(nn.Embedding(vocab, channels) for _ in range(columns))

    def forward(self, x: Tensor) -> Tensor:
        check_tensor("x", x)
        if x.dim() != 2 or x.shape[1] != self.columns:
            raise ValueError(f"x must have shape [N, columns={self.columns}], got {tuple(x.shape)}")
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"x must hold integer category ids, got dtype {x.dtype}")
        outside = (x < 0) | (x >= self.vocab)  # [N, columns]
        poison = None
        if sync_is_costly(x.device):
            poison = torch.where(outside.any(1, keepdim=True), float("nan"), 0.0)  # [N, 1]
            x = x.clamp(0, self.vocab - 1)
        elif bool(outside.any()):
            row, col = (int(i) for i in outside.nonzero()[0])
            raise ValueError(f"x must hold values in [0, vocab={self.vocab}) in every column, got {int(x[row, col])} "
                             f"in column {col} (row {row})")
        out = self.embeddings[0](x[:, 0])
        for i in range(1, self.columns):
            out = out + self.embeddings[i](x[:, i])
        return out if poison is None else out + poison.to(out.dtype)


class GPS(nn.Module):
    """Atom and bond encoders, ``layers`` GPS layers (a local GATConv with bond features plus global attention),
    mean pooling and an MLP head. ``impl="ours"``: :class:`cudnn_gnn.layers.GPSConv` on the packed batch with
    ``backend`` for the global attention; ``impl="pyg"``: PyG's ``GPSConv`` and ``GATConv`` (``backend`` unused).
    ``in_channels`` / ``edge_channels``: float features through a linear map instead of OGB's categorical columns
    (9 atom, 3 bond)."""

    def __init__(self, channels: int, layers: int, heads: int, num_tasks: int, dropout: float, backend: str,
                 impl: str = "ours", in_channels: int | None = None, edge_channels: int | None = None) -> None:
        super().__init__()
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.impl = impl
        if impl == "pyg":
            from torch_geometric.nn import GATConv as PygGATConv
            from torch_geometric.nn import GPSConv as PygGPSConv

            gat: type = PygGATConv
            self.local_name = "torch_geometric.nn.GPSConv + GATConv"
        else:
            gat, self.local_name = local_gat_class()
        self.atom: nn.Module = FeatureEncoder(9, ATOM_VOCAB, channels) if in_channels is None else \
            nn.Linear(in_channels, channels)
        self.bond: nn.Module = FeatureEncoder(3, BOND_VOCAB, channels) if edge_channels is None else \
            nn.Linear(edge_channels, channels)
        layer = PygGPSConv if impl == "pyg" else GPSConv
        extra = {} if impl == "pyg" else {"attention_backend": backend}
        self.layers = nn.ModuleList(
            layer(channels, gat(channels, channels // heads, heads=heads, edge_dim=channels), heads=heads,
                  dropout=dropout, **extra)
            for _ in range(layers)
        )
        self.head = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, num_tasks))

    def forward(self, data: Any) -> Tensor:
        """``[num_graphs, num_tasks]`` predictions for a PyG ``Batch`` (one host sync for its largest graph)."""
        max_num_nodes = None if self.impl == "pyg" else int((data.ptr[1:] - data.ptr[:-1]).max())
        return self.run(data.x, data.edge_index, data.edge_attr, data.batch, data.ptr, max_num_nodes,
                        data.num_graphs)

    def run(self, x: Tensor, graph: Any, edge_attr: Tensor, batch: Tensor, ptr: Tensor, max_num_nodes: int | None,
            num_graphs: int, node_mask: Tensor | None = None) -> Tensor:
        """``[num_graphs, num_tasks]`` predictions from a batch's tensors: ``graph`` an ``edge_index`` or a
        :class:`~cudnn_gnn.CscGraph` (ours), ``max_num_nodes`` the largest graph (ours), ``node_mask`` the rows
        the batch norms' statistics read (ours; None: all)."""
        x, edge_attr = self.atom(x), self.bond(edge_attr)
        for layer in self.layers:
            if self.impl == "pyg":
                x = layer(x, graph, batch, edge_attr=edge_attr)
            else:
                x = layer(x, graph, batch, ptr=ptr, max_num_nodes=max_num_nodes, node_mask=node_mask,
                          edge_attr=edge_attr)
        return self.head(global_mean_pool(x, batch, size=num_graphs))

    def run_packed(self, budget: GraphBudget, x: Tensor, edge_index: Tensor, offsets: Tensor, edge_attr: Tensor,
                   batch: Tensor, ptr: Tensor) -> Tensor:
        """``[B, num_tasks]`` predictions for a packed batch's tensors (:meth:`StaticGraphBatch.inputs`), its real
        graph slots first: fixed-shape ops only for ``impl="ours"`` (our layers on the batch's CSC graph rebuilt
        every call, the attention's ``max_num_nodes`` the budget's, batch norms over the real tokens). PyG's layers
        get the ``edge_index`` and see the sink tokens as graphs of their own (their batch norms too)."""
        if self.impl == "pyg":
            out = self.run(x, edge_index, edge_attr, batch, ptr, None, budget.num_slots)
        else:
            out = self.run(x, packed_csc_graph(offsets, edge_index), edge_attr, batch, ptr, budget.max_nodes,
                           budget.num_slots, node_mask=batch < budget.max_graphs)
        return out[: budget.max_graphs]


def packed_loss(model: GPS, budget: GraphBudget, task_type: str,
                forward: Callable[..., Tensor] | None = None) -> Callable[..., Tensor]:
    """The loss of one training step on a packed batch, ``loss_fn(**batch.inputs()) -> Tensor``: ``model``'s
    predictions for the real graph slots and :func:`masked_graph_loss` over the valid ones. Fixed-shape ops only
    with ``impl="ours"``: pass it to :class:`~cudnn_gnn.apps.capture.CapturedStep` with ``inputs=batch.inputs()``
    of a first batch and call the step with each later batch's ``inputs()``. ``forward``: what runs
    ``model.run_packed`` (e.g. a ``torch.compile`` of it; default the method itself)."""
    run = model.run_packed if forward is None else forward

    def loss_fn(x: Tensor, edge_index: Tensor, offsets: Tensor, batch: Tensor, ptr: Tensor, y: Tensor,
                graph_valid: Tensor, edge_attr: Tensor) -> Tensor:
        pred = run(budget, x, edge_index, offsets, edge_attr, batch, ptr)
        return masked_graph_loss(pred, y, graph_valid, task_type)

    return loss_fn
