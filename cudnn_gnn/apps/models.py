"""The model the OGB examples train: :class:`OgbGAT`, a stack of GATConv with residual maps (ours or PyG's).

``examples/ogbn_*.py`` and ``examples/papers100m.py`` build it; ``--save`` stores its constructor arguments
(``model.config``) next to the weights, so ``OgbGAT(**config)`` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from cudnn_gnn.apps._util import conv_class
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.sampled import block_sizes, sampled_blocks

__all__ = ["OGB_MODELS", "OgbGAT"]

#: ``model`` names: our GATConv, PyG's.
OGB_MODELS = ("gat", "pyg-gat")

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "elu": F.elu}


class OgbGAT(nn.Module):
    """The GAT of the DGL/PyG OGB examples: ``layers`` GATConv with a residual linear map, batch norm
    (optional), activation and dropout between layers; the last layer averages ``out_heads`` heads.

    Every conv is ``GATConv(in, hidden, heads, residual=True, dropout=attn_drop, edge_dim=edge_dim)`` of the
    class ``model`` picks (``"gat"``: :class:`cudnn_gnn.layers.GATConv`; ``"pyg-gat"``: PyG's), so our model and
    PyG's have the same parameters and initialisation. ``forward`` also takes the per-hop node/edge counts of a
    ``NeighborLoader`` batch and then runs layer ``l`` on the bipartite block it needs (sources: nodes within
    ``L - l`` hops; targets: within ``L - l - 1``), which is PyG's ``trim_to_layer`` written out. Our layers get the
    blocks as CSC graphs built once per batch by :func:`cudnn_gnn.sampled_blocks` (one sort, no host sync); PyG's
    get the raw ``edge_index`` slices.

    Args:
        model: ``"gat"`` or ``"pyg-gat"``.
        in_channels: Input features ``F``.
        hidden: Channels per head of the hidden layers ``C``.
        out_channels: Outputs ``K`` (classes or tasks).
        layers: Number of GAT layers ``L``.
        heads: Heads ``H`` of the hidden layers (concatenated: ``H * C`` features between layers).
        out_heads: Heads of the last layer (averaged).
        dropout: Dropout after each hidden layer's activation.
        input_drop: Dropout on the input features.
        attn_drop: Dropout on the attention coefficients.
        norm: Batch norm after each hidden layer.
        activation: ``"relu"`` or ``"elu"``.
        edge_dim: Edge feature width ``D`` (``None``: no edge features).
        backend: Attention backend of our layers (ignored by PyG's).

    Shapes:
        - input: node features ``x`` ``[N, F]``, ``edge_index`` ``[2, E]`` (or a ``CscGraph``), optional
          ``edge_attr`` ``[E, D]``; with ``num_sampled_nodes`` / ``num_sampled_edges`` (``L + 1`` and ``L``
          counts, hop by hop) the nodes and edges of a sampled batch in hop order
        - output: ``[N, K]``; on a batch with per-hop counts ``[num_sampled_nodes[0], K]`` (its seeds)
    """

    def __init__(self, model: str, in_channels: int, hidden: int, out_channels: int, *, layers: int, heads: int,
                 out_heads: int = 1, dropout: float = 0.5, input_drop: float = 0.0, attn_drop: float = 0.0,
                 norm: bool = True, activation: str = "relu", edge_dim: int | None = None, backend: str = "auto") -> None:
        super().__init__()
        #: The constructor arguments (saved with the weights by ``--save``).
        self.config = {"model": model, "in_channels": in_channels, "hidden": hidden, "out_channels": out_channels,
                       "layers": layers, "heads": heads, "out_heads": out_heads, "dropout": dropout,
                       "input_drop": input_drop, "attn_drop": attn_drop, "norm": norm, "activation": activation,
                       "edge_dim": edge_dim, "backend": backend}
        if model not in OGB_MODELS:
            raise ValueError(f"model must be one of {OGB_MODELS}, got {model!r}")
        conv, extra = conv_class(model)
        kw: dict[str, Any] = {"backend": backend} if extra.get("backend_kw") else {}
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(layers):
            last = i == layers - 1
            c_in = in_channels if i == 0 else hidden * heads
            self.convs.append(conv(c_in, out_channels if last else hidden, heads=out_heads if last else heads,
                                   concat=not last, dropout=attn_drop, edge_dim=edge_dim, residual=True, **kw))
            if not last:
                self.norms.append(nn.BatchNorm1d(hidden * heads) if norm else nn.Identity())
        self.dropout, self.input_drop = dropout, input_drop
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.act = ACTIVATIONS[activation]
        self.ours = not model.startswith("pyg-")

    def layer(self, i: int, x: Any, edge_index: Any, edge_attr: Tensor | None = None,
              size: tuple[int, int] | None = None, rows: int | None = None) -> Tensor:
        """Layer ``i`` alone (conv, then norm, activation and dropout unless it is the last). ``rows``: keep the
        conv's first ``rows`` outputs only, before the norm (a static-shape block's sink rows dropped,
        :func:`cudnn_gnn.apps.static_sampler.forward_blocks`)."""
        h = self.convs[i](x, edge_index, edge_attr, size=size)
        if rows is not None:
            h = h[:rows]
        if i < len(self.convs) - 1:
            h = self.act(self.norms[i](h))
            h = F.dropout(h, p=self.dropout, training=self.training)
        return h

    def forward(self, x: Tensor, edge_index: Any, edge_attr: Tensor | None = None,
                num_sampled_nodes: list[int] | None = None, num_sampled_edges: list[int] | None = None,
                sampled: bool = False) -> Tensor:
        """``sampled``: ``edge_index`` is a sampled batch's, new every call. With its per-hop counts each layer runs
        on its trimmed block; without them (torch-sparse's sampler reports none) every layer runs on the whole
        batch, which our layers get as one ``CscGraph`` built on the batch's device without a host sync (instead of
        a raw tensor, whose plan cache would compare it with the last batch's and sync)."""
        x = F.dropout(x, p=self.input_drop, training=self.training)
        L = len(self.convs)
        if num_sampled_nodes is None:
            if sampled and self.ours and isinstance(edge_index, Tensor):
                edge_index = CscGraph.from_edge_index(edge_index, num_nodes=x.size(0),
                                                      validate=False, rebuilt_every_call=True)
            for i in range(L):
                x = self.layer(i, x, edge_index, edge_attr)
            return x
        # layer i feeds the nodes within L-i-1 hops of the seeds from the nodes within L-i hops
        edges_per_hop = [] if num_sampled_edges is None else num_sampled_edges
        sizes = block_sizes(num_sampled_nodes, edges_per_hop, L)
        blocks: list[Any]
        if self.ours:  # one sort for the whole batch, no host sync (PyG's sampler output is in range)
            blocks = sampled_blocks(edge_index, num_sampled_nodes, edges_per_hop, L, validate=False)
        else:
            blocks = [edge_index[:, : s.num_edges] for s in sizes]
        for i, (s, block) in enumerate(zip(sizes, blocks)):
            ea = None if edge_attr is None else edge_attr[: s.num_edges]
            x = x[: s.num_src]
            x = self.layer(i, (x, x[: s.num_dst]), block, ea, size=(s.num_src, s.num_dst))
        return x
