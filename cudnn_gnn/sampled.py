"""One neighbour-sampled mini-batch as per-layer CSC blocks, with no host sync per layer (or none at all).

PyG's ``NeighborLoader`` (with ``pyg-lib``) returns a batch whose nodes and edges are numbered hop by hop: the
``num_sampled_nodes[0]`` seeds first, then the nodes first reached at hop 1, hop 2, ...; the edges sampled into
the hop-0 nodes first, then those into the hop-1 nodes, ... (``num_sampled_edges[k]`` edges at hop ``k``). Layer
``i`` of an ``L``-layer model needs only the bipartite block from the nodes within ``L - i`` hops to the nodes
within ``L - i - 1`` hops (PyG's ``trim_to_layer``), and because of that numbering every block is a *prefix*: its
destinations are the first ``n_dst`` nodes, its sources the first ``n_src`` and its edges the first ``n_edge``.

:func:`sampled_blocks` sorts the batch's edges by destination once (stable, on the batch's device) and hands out
each block as a prefix view of that one CSC: ``offsets[:n_dst + 1]``, ``indices[:n_edge]``. The CSC -> COO
permutation is kept, so edge features and returned attention stay in the batch's own COO order
(``edge_attr[:n_edge]`` is block ``i``'s edge features).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_index, check_int
from cudnn_gnn.graph import CscGraph

__all__ = ["BlockSize", "block_sizes", "sampled_blocks"]


class BlockSize(NamedTuple):
    """The sizes of one layer's block: ``num_src`` sources (nodes within ``hops`` hops), ``num_dst``
    destinations (within ``hops - 1``), ``num_edges`` edges (those sampled at hops ``0 .. hops - 1``)."""

    num_src: int
    num_dst: int
    num_edges: int


def _counts(name: str, value: Any, at_least: int, what: str) -> list[int]:
    if isinstance(value, Tensor):
        if value.device.type != "cpu" or value.dim() != 1:
            raise ValueError(f"{name} must be a list of ints or a 1-D CPU tensor, got a {value.dim()}-D tensor on "
                             f"{value.device}")
        value = value.tolist()
    if not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of ints, got {type(value).__name__}")
    counts = [check_int(f"{name}[{k}]", v) for k, v in enumerate(value)]
    if len(counts) < at_least:
        raise ValueError(f"{name} must have at least {at_least} entries ({what}), got {len(counts)}")
    return counts


def block_sizes(num_sampled_nodes: Sequence[int], num_sampled_edges: Sequence[int], num_layers: int) -> list[BlockSize]:
    """Layer ``i``'s block sizes for ``i = 0 .. num_layers - 1`` (PyG's ``trim_to_layer`` arithmetic).

    With ``hops = num_layers - i``: ``num_src = sum(num_sampled_nodes[:hops + 1])``,
    ``num_dst = sum(num_sampled_nodes[:hops])``, ``num_edges = sum(num_sampled_edges[:hops])``. Extra hops (a
    sampler that went deeper than the model) are ignored. Host arithmetic only.

    Raises:
        TypeError: a count is not an int.
        ValueError: a count is negative, or there are fewer than ``num_layers + 1`` node counts (the seeds, then
            one per hop) or fewer than ``num_layers`` edge counts.
    """
    layers = check_int("num_layers", num_layers, minimum=1)
    nodes = _counts("num_sampled_nodes", num_sampled_nodes, layers + 1, "the seeds, then one per hop")
    edges = _counts("num_sampled_edges", num_sampled_edges, layers, "one per hop")
    return [BlockSize(sum(nodes[: hops + 1]), sum(nodes[:hops]), sum(edges[:hops]))
            for hops in range(layers, 0, -1)]


def _check_batch(src: Tensor, dst: Tensor, offsets: Tensor, sizes: list[BlockSize]) -> None:
    """The index-range and hop-order checks of :func:`sampled_blocks`, all read back in one host sync."""
    if src.numel() == 0:
        return
    prefix_src, prefix_dst = torch.cummax(src, 0).values, torch.cummax(dst, 0).values
    stats = [torch.minimum(src.min(), dst.min())]
    for s in sizes:  # per block: edges into its destinations, largest source and destination among its edges
        stats.append(offsets[s.num_dst].to(src.dtype))
        last = max(s.num_edges - 1, 0)
        stats += [prefix_src[last], prefix_dst[last]]
    lo, *per_block = torch.stack(stats).tolist()
    if lo < 0:
        raise ValueError(f"edge_index must hold non-negative node ids, got minimum {lo}")
    layers = len(sizes)
    for i, s in enumerate(sizes):
        into, hi_src, hi_dst = per_block[3 * i: 3 * i + 3]
        hops = layers - i
        if s.num_edges and hi_dst >= s.num_dst:
            raise ValueError(
                f"edge_index[1] (destinations) of the first sum(num_sampled_edges[:{hops}])={s.num_edges} edges must "
                f"be < sum(num_sampled_nodes[:{hops}])={s.num_dst}, got maximum {hi_dst}")
        if s.num_edges and hi_src >= s.num_src:
            raise ValueError(
                f"edge_index[0] (sources) of the first sum(num_sampled_edges[:{hops}])={s.num_edges} edges must "
                f"be < sum(num_sampled_nodes[:{hops + 1}])={s.num_src}, got maximum {hi_src}")
        if into != s.num_edges:
            raise ValueError(
                f"edge_index must hold exactly sum(num_sampled_edges[:{hops}])={s.num_edges} edges into the first "
                f"sum(num_sampled_nodes[:{hops}])={s.num_dst} nodes, listed first (hop by hop, as PyG's sampler "
                f"emits them), got {into}")


def sampled_blocks(
    edge_index: Tensor,
    num_sampled_nodes: Sequence[int],
    num_sampled_edges: Sequence[int],
    num_layers: int,
    *,
    validate: bool = True,
) -> list[CscGraph]:
    """Layer ``i``'s bipartite block of one ``NeighborLoader`` batch, for ``i = 0 .. num_layers - 1``.

    Block ``i`` holds the edges sampled at hops ``0 .. L - i - 1`` (``L = num_layers``), from the nodes within
    ``L - i`` hops of the seeds (``num_src_nodes``) to those within ``L - i - 1`` hops (``num_dst_nodes``): exactly
    ``edge_index[:, :n_edge]`` with ``size=(n_src, n_dst)``, the slices PyG's ``trim_to_layer`` takes
    (:func:`block_sizes` has the arithmetic). Pass block ``i`` as layer ``i``'s ``edge_index``, with
    ``x[:n_src]`` / ``x[:n_dst]`` (``block.num_src_nodes``, ``block.num_dst_nodes``) and ``edge_attr[:n_edge]``.

    All blocks come from one stable sort of the batch's edges by destination, on the batch's device, with the
    offsets by binary search (no ``bincount``): each block is a prefix view of that CSC. This relies on the order
    PyG's samplers (``pyg-lib``, ``torch-sparse``) emit, hop by hop, so that the edges into the first ``n_dst``
    nodes are the first ``n_edge`` edges; it does not rely on the edges being sorted. ``map_csc_to_coo`` is kept,
    so edge features and returned attention are in the batch's COO order.

    Every block is built rebuilt every call, with short rows (:attr:`CscGraph.rebuilt_every_call`): its
    degrees are never read back, so the layers never split its hubs automatically (the fan-out bounds the
    in-degrees anyway: at most ``fanout[k]`` edges into a hop-``k`` node, or a few times that where duplicates are
    sampled), the Triton kernels walk its rows whole (no chunk lists and merges for them), and our
    ``GATConv``/``GATv2Conv`` add self-loops to it with fixed-shape ops instead of the exact, syncing removal.

    Args:
        edge_index: ``[2, E]`` int32/int64 local edges of the batch (row 0 sources), as the sampler emitted them.
            Its first ``sum(num_sampled_edges[:num_layers])`` edges are used.
        num_sampled_nodes: per-hop node counts, seeds first (``batch.num_sampled_nodes``; at least
            ``num_layers + 1``), a list of ints (host values: reading them costs nothing).
        num_sampled_edges: per-hop edge counts (``batch.num_sampled_edges``; at least ``num_layers``).
        num_layers: the model's layer count ``L``.
        validate: check, with one host sync per batch (not per layer), that every id is non-negative and that each
            block's prefix holds its edges and only them (destinations and sources in range). ``False`` trusts the
            sampler and does no host sync at all: PyG's samplers produce this by construction.

    Returns:
        ``L`` graphs, block ``i`` with ``num_src_nodes = n_src``, ``num_dst_nodes = n_dst``, ``num_edges = n_edge``,
        int32 indices where everything fits (else int64), on ``edge_index``'s device.

    Raises:
        TypeError: ``edge_index`` is not an int32/int64 tensor, or a count is not an int.
        ValueError: bad shapes or counts, fewer than ``sum(num_sampled_edges[:num_layers])`` edges, or (with
            ``validate``) an id out of range or an edge order that is not hop by hop.

    Example:
        >>> import torch
        >>> from cudnn_gnn import sampled_blocks
        >>> ei = torch.tensor([[1, 2, 3, 4], [0, 0, 1, 2]])  # hop 0: 1->0, 2->0; hop 1: 3->1, 4->2
        >>> [(b.num_src_nodes, b.num_dst_nodes, b.num_edges) for b in sampled_blocks(ei, [1, 2, 2], [2, 2], 2)]
        [(5, 3, 4), (3, 1, 2)]
    """
    ei = check_index("edge_index", edge_index)
    if type(ei) is not Tensor and hasattr(ei, "as_tensor"):  # a PyG EdgeIndex: its data tensor (as_subclass would
        ei = ei.as_tensor()                                     # keep the storage-less wrapper, see CscGraph)
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, num_edges), got {tuple(ei.shape)}")
    check_bool("validate", validate)
    sizes = block_sizes(num_sampled_nodes, num_sampled_edges, num_layers)
    outer = sizes[0]
    if ei.shape[1] < outer.num_edges:
        raise ValueError(f"edge_index must have at least sum(num_sampled_edges[:{num_layers}])={outer.num_edges} "
                         f"edges, got {ei.shape[1]}")
    # The outermost block's CSC (one stable sort by destination, offsets by binary search, no host sync); every
    # block is a prefix of it. Its range checks are ours (one sync, hop order included), so it skips its own.
    outer_ei = ei[:, : outer.num_edges]
    whole = CscGraph.from_edge_index(outer_ei, size=(outer.num_src, outer.num_dst), validate=False)
    if validate:
        _check_batch(outer_ei[0], outer_ei[1], whole.offsets, sizes)
    offsets, indices, perm, sorted_dst = whole.offsets, whole.indices, whole.edge_ids, whole.dst_index
    coo = outer_ei.long()  # what each block's edge_index() returns (a view where the batch is int64)
    blocks = []
    for s in sizes:
        e = s.num_edges
        blocks.append(CscGraph.from_csc(offsets[: s.num_dst + 1], indices[:e], s.num_src, perm[:e],
                                        dst_index=sorted_dst[:e], edge_index=coo[:, :e], rebuilt_every_call=True,
                                        short_rows=True, validate=False))
    return blocks
