"""Graph-level batches with fixed shapes: every batch of a dataset of small graphs (molecules) has the same tensors
of the same sizes, so that a whole training step on it (a GPS layer's local GAT and global attention, readout,
loss, optimizer) can be captured once in a CUDA graph and replayed on every batch.

PyG's ``DataLoader`` concatenates ``batch_size`` graphs, so a batch's node and edge counts change from batch to
batch. :class:`StaticGraphBatcher` packs graphs into a fixed :class:`GraphBudget` instead: at most ``B =
max_graphs`` graphs, ``T - 1`` of the ``T = max_tokens`` node rows and ``E = max_edges`` edges a batch, each graph
of at most ``M = max_nodes`` nodes (the largest graph of the dataset by default). What the real graphs leave is
padding that nothing real sees:

- **graph slots** ``0 .. B - 1`` hold the batch's real graphs in order, then empty graphs (``ptr`` repeats); slots
  ``B .. B + S - 1`` (``S = ceil(T / M)``) are *sink graphs* that hold the padding tokens, in chunks of at most
  ``M`` (so the global attention's largest graph, ``max_num_nodes = M``, and with it the attention kernels' plan,
  is the same for every batch). A token is real iff ``batch < B`` (:attr:`StaticGraphBatch.token_valid`), a fixed
  comparison, no data-dependent size;
- **edges**: each real graph's edges sorted by destination (stable), graph after graph, then the padding edges,
  sorted by destination too, among the sink tokens (each sink token receives about the same number, from the next
  token of its sink graph): ``edge_index`` is in CSC order, ``offsets`` its ``[T + 1]`` CSC offsets, and
  :meth:`StaticGraphBatch.csc_graph` wraps them without a sort as a :class:`~cudnn_gnn.CscGraph` marked
  ``rebuilt_every_call`` with ``short_rows`` (the layers then apply their self-loop rule with fixed-shape ops, no
  sort: the edges are already in CSC order, and derive nothing that would need a host sync, as for the node-level
  blocks of :mod:`cudnn_gnn.apps.static_sampler`; the layers of a step share the one self-loop plan);
- **labels** ``y [B, num_tasks]`` float32 (NaN where a label is missing) with ``graph_valid [B]``: an empty slot
  has no loss (:func:`masked_graph_loss`) and no metric weight (``graph_id`` is -1 there).

A sink token reaches nothing real (no edge leaves a sink graph, attention stays within a graph, pooling is per
graph); a model whose layers mix rows across graphs must ignore it too: the batch norms of
:class:`~cudnn_gnn.layers.GPSConv` take ``node_mask=token_valid`` and then compute their statistics over the real
tokens only.

The batches are built on the host (a shuffled order packed greedily: a batch closes when the next graph would not
fit) and copied into the captured step's input tensors (:class:`~cudnn_gnn.apps.capture.CapturedStep` copies each
call's values into the tensors it captured). Costs per batch: ``T x F`` features, ``E x (2 + edge features)``
edge entries, ``T + 1`` offsets, ``T`` batch ids, ``B + S + 1`` offsets of graphs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_int
from cudnn_gnn.graph import CscGraph, storage_index_dtype

__all__ = ["GraphBudget", "StaticGraphBatch", "StaticGraphBatcher", "masked_graph_loss", "TASK_TYPES"]

TASK_TYPES = ("binary classification", "regression")


@dataclass(frozen=True)
class GraphBudget:
    """The fixed sizes of a packed batch (see the module docstring).

    Attributes:
        max_graphs: ``B``, graph slots for real graphs (labels and predictions have ``B`` rows).
        max_tokens: ``T``, node rows of a batch; real graphs take at most ``T - 1`` (one sink token at least, for the
            padding edges).
        max_edges: ``E``, edges of a batch; real graphs take at most ``E``.
        max_nodes: ``M``, nodes of the largest graph allowed (``<= T - 1``): the attention's ``max_num_nodes`` and
            the size of a sink graph.
    """

    max_graphs: int
    max_tokens: int
    max_edges: int
    max_nodes: int

    def __post_init__(self) -> None:
        check_int("max_graphs", self.max_graphs, minimum=1)
        check_int("max_tokens", self.max_tokens, minimum=2)
        check_int("max_edges", self.max_edges, minimum=0)
        check_int("max_nodes", self.max_nodes, minimum=1)
        if self.max_nodes > self.max_tokens - 1:
            raise ValueError(f"max_nodes must be <= max_tokens - 1 = {self.max_tokens - 1} (one token stays a sink), "
                             f"got {self.max_nodes}")

    @property
    def sink_graphs(self) -> int:
        """``S = ceil(T / M)``: the sink graph slots after the ``B`` real ones."""
        return math.ceil(self.max_tokens / self.max_nodes)

    @property
    def num_slots(self) -> int:
        """``B + S``: graph slots of ``ptr`` (``[B + S + 1]``) and of a per-graph readout."""
        return self.max_graphs + self.sink_graphs

    @classmethod
    def for_graphs(cls, graphs: Sequence[Any], max_graphs: int, *, slack: float = 0.25) -> GraphBudget:
        """A budget for ``graphs`` (PyG ``Data`` with ``num_nodes`` and ``edge_index``): ``B = max_graphs``,
        ``M`` their largest graph, and room for ``B`` graphs of ``1 + slack`` times their mean size plus one largest
        graph: ``T = ceil(B * mean_nodes * (1 + slack)) + M + 1`` and ``E = ceil(B * mean_edges * (1 + slack)) +
        max_edges``. Batches close on whichever budget fills first, so most hold ``B`` graphs."""
        check_int("max_graphs", max_graphs, minimum=1)
        if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not slack >= 0:
            raise ValueError(f"slack must be a number >= 0, got {slack!r}")
        if len(graphs) == 0:
            raise ValueError("graphs must hold at least one graph, got none")
        nodes, edges = _sizes(graphs)
        m = max(int(nodes.max()), 1)
        tokens = math.ceil(max_graphs * float(nodes.mean()) * (1 + slack)) + m + 1
        edge_budget = math.ceil(max_graphs * float(edges.mean()) * (1 + slack)) + int(edges.max())
        return cls(max_graphs, tokens, edge_budget, m)


def _rows(t: Tensor) -> Tensor:
    """Per-row features as ``[rows, ...]``: a 1-D tensor as one column."""
    return t.view(-1, 1) if t.dim() == 1 else t


def _sizes(graphs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    nodes = np.array([int(g.num_nodes) for g in graphs], dtype=np.int64)
    edges = np.array([int(g.edge_index.shape[1]) for g in graphs], dtype=np.int64)
    return nodes, edges


@dataclass
class StaticGraphBatch:
    """One packed batch (every tensor's shape is fixed by the :class:`GraphBudget`; ``T``, ``E``, ``B``, ``S`` as
    there).

    Attributes:
        x: ``[T, F]`` node features (the graphs' dtype); sink rows are zeros.
        edge_index: ``[2, E]`` int64 (source, destination), in CSC order (sorted by destination).
        offsets: ``[T + 1]`` CSC offsets of ``edge_index`` (the storage index dtype).
        edge_attr: ``[E, D]`` edge features in ``edge_index``'s order (zeros for padding edges), or None.
        batch: ``[T]`` int64 graph slot of each token (``>= B``: a sink graph).
        ptr: ``[B + S + 1]`` int64 token offsets of the graph slots.
        y: ``[B, num_tasks]`` float32 labels (NaN: missing or an empty slot).
        graph_valid: ``[B]`` bool, which slots hold a real graph.
        graph_id: ``[B]`` int64 index of each slot's graph in the batcher's list, -1 for an empty slot.
        num_graphs: the real graphs (host int; slots ``0 .. num_graphs - 1``).
        budget: the :class:`GraphBudget`.
    """

    x: Tensor
    edge_index: Tensor
    offsets: Tensor
    edge_attr: Tensor | None
    batch: Tensor
    ptr: Tensor
    y: Tensor
    graph_valid: Tensor
    graph_id: Tensor
    num_graphs: int
    budget: GraphBudget

    @property
    def token_valid(self) -> Tensor:
        """``[T]`` bool: the tokens of real graphs (``batch < B``: a fixed-shape comparison, no sync)."""
        return self.batch < self.budget.max_graphs

    def csc_graph(self) -> CscGraph:
        """The batch's graph as a :class:`~cudnn_gnn.CscGraph` marked rebuilt every call, from its CSC tensors (no
        sort, no host sync; build it inside the step, from the step's input tensors)."""
        return packed_csc_graph(self.offsets, self.edge_index)

    def inputs(self) -> dict[str, Tensor]:
        """The batch's tensors by name (``edge_attr`` only where there is one): what a captured step takes."""
        out = {"x": self.x, "edge_index": self.edge_index, "offsets": self.offsets, "batch": self.batch,
               "ptr": self.ptr, "y": self.y, "graph_valid": self.graph_valid}
        if self.edge_attr is not None:
            out["edge_attr"] = self.edge_attr
        return out

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> StaticGraphBatch:
        """The batch on ``device`` (``graph_id`` stays on the host, where metrics read it)."""
        def move(t: Tensor | None) -> Any:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return StaticGraphBatch(move(self.x), move(self.edge_index), move(self.offsets), move(self.edge_attr),
                                move(self.batch), move(self.ptr), move(self.y), move(self.graph_valid), self.graph_id,
                                self.num_graphs, self.budget)


def packed_csc_graph(offsets: Tensor, edge_index: Tensor) -> CscGraph:
    """A packed batch's :class:`~cudnn_gnn.CscGraph` from its ``offsets [T + 1]`` and CSC-ordered ``edge_index [2,
    E]`` (as :meth:`StaticGraphBatch.csc_graph`, for a step that holds the tensors by name), marked rebuilt every
    call with ``short_rows``: a small graph's nodes have few in- and out-edges, so the Triton kernels walk each row
    whole from the offsets and build no work list (no sort, no sync)."""
    dtype = offsets.dtype
    return CscGraph.from_csc(offsets, edge_index[0].to(dtype), offsets.numel() - 1, dst_index=edge_index[1].to(dtype),
                             edge_index=edge_index, rebuilt_every_call=True, short_rows=True,
                             validate=False)


class StaticGraphBatcher:
    """Packs a list of graphs into batches of one fixed :class:`GraphBudget` (see the module docstring).

    Args:
        graphs: PyG ``Data`` objects (a list, an :class:`~cudnn_gnn.datasets.OgbgDataset`, any iterable) with
            ``x [n, F]``, ``edge_index [2, e]`` (local node ids), optionally
            ``edge_attr [e, D]`` (all or none) and ``y`` (``num_tasks`` values a graph, any shape).
        budget: the batch sizes; None: :meth:`GraphBudget.for_graphs` with ``max_graphs``.
        max_graphs: graphs a batch when ``budget`` is None.

    Raises:
        TypeError: ``graphs`` is not an iterable of graphs, or a ``budget`` of another type.
        ValueError: no graphs, graphs whose feature widths or label counts differ, or a graph larger than the budget
            (its index and size, and the budget, named).

    Example:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> g = [Data(x=torch.ones(n, 2), edge_index=torch.tensor([[0], [n - 1]]), y=torch.tensor([[1.0]]),
        ...           num_nodes=n) for n in (2, 3, 4)]
        >>> b = next(StaticGraphBatcher(g, GraphBudget(2, 8, 4, 4)).epoch(shuffle=False))
        >>> b.x.shape, b.ptr.tolist(), b.graph_valid.tolist()
        (torch.Size([8, 2]), [0, 2, 5, 8, 8], [True, True])
    """

    def __init__(self, graphs: Iterable[Any], budget: GraphBudget | None = None, *, max_graphs: int = 128) -> None:
        if isinstance(graphs, (str, bytes)) or not isinstance(graphs, Iterable):
            raise TypeError(f"graphs must be a sequence of torch_geometric Data, got {type(graphs).__name__}")
        graphs = list(graphs)  # an OgbgDataset (``ds[split["train"]]``), a generator, a list
        if len(graphs) == 0:
            raise ValueError("graphs must hold at least one graph, got none")
        if budget is None:
            budget = GraphBudget.for_graphs(graphs, max_graphs)
        elif not isinstance(budget, GraphBudget):
            raise TypeError(f"budget must be a GraphBudget, got {type(budget).__name__}")
        self.budget = budget
        self.num_nodes, self.num_edges = _sizes(graphs)
        too_big = np.nonzero((self.num_nodes > budget.max_nodes) | (self.num_edges > budget.max_edges))[0]
        if too_big.size:
            i = int(too_big[0])
            raise ValueError(
                f"graphs must each fit the batch budget (at most max_nodes={budget.max_nodes} nodes and "
                f"max_edges={budget.max_edges} edges), got graphs[{i}] with {int(self.num_nodes[i])} nodes and "
                f"{int(self.num_edges[i])} edges ({too_big.size} graph(s) too large); pass a larger GraphBudget, or "
                "budget=None to size it to the dataset's largest graph")
        widths = {tuple(_rows(g.x).shape[1:]) for g in graphs}
        if len(widths) != 1:
            raise ValueError(f"graphs must have node features of one width, got {sorted(widths)}")
        self.x = torch.cat([_rows(g.x) for g in graphs])
        has_attr = [getattr(g, "edge_attr", None) is not None for g in graphs]
        if any(has_attr) and not all(has_attr):
            raise ValueError(f"graphs must all have edge_attr or none, got {sum(has_attr)} of {len(graphs)} with it")
        self.node_ptr = np.concatenate([[0], np.cumsum(self.num_nodes)])
        self.edge_ptr = np.concatenate([[0], np.cumsum(self.num_edges)])
        # each graph's edges sorted by destination (stable), once: a batch is then in CSC order by concatenation
        src, dst, attrs = [], [], []
        for g in graphs:
            ei = g.edge_index.long()
            order = torch.sort(ei[1], stable=True).indices
            src.append(ei[0, order])
            dst.append(ei[1, order])
            if all(has_attr):
                attrs.append(_rows(g.edge_attr)[order])
        self.src, self.dst = torch.cat(src).numpy(), torch.cat(dst).numpy()
        # each graph's node ids within its own nodes, once on the host: an id past them would join another graph of
        # the batch (or index past the batch's tokens in the kernels), silently
        graph_of_edge = np.repeat(np.arange(len(graphs)), self.num_edges)
        limit = self.num_nodes[graph_of_edge]
        bad = np.nonzero((self.src < 0) | (self.src >= limit) | (self.dst < 0) | (self.dst >= limit))[0]
        if bad.size:
            k, i = int(bad[0]), int(graph_of_edge[bad[0]])
            raise ValueError(
                f"graphs must have edge_index values in [0, num_nodes) of their own graph, got graphs[{i}] with "
                f"{int(self.num_nodes[i])} nodes and an edge ({int(self.src[k])}, {int(self.dst[k])}) "
                f"({bad.size} such edge(s) in the dataset)")
        self.edge_attr = torch.cat(attrs) if all(has_attr) else None
        ys = [torch.as_tensor(g.y, dtype=torch.float32).reshape(-1) for g in graphs]
        if len({y.numel() for y in ys}) != 1:
            raise ValueError(f"graphs must have one label count, got {sorted({y.numel() for y in ys})}")
        self.y = torch.stack(ys)
        self.num_tasks = self.y.shape[1]
        self.index_dtype = storage_index_dtype(budget.max_edges, budget.max_tokens + 1)

    def __len__(self) -> int:
        return len(self.num_nodes)

    def __repr__(self) -> str:
        b = self.budget
        return (f"{type(self).__name__}(graphs={len(self)}, max_graphs={b.max_graphs}, max_tokens={b.max_tokens}, "
                f"max_edges={b.max_edges}, max_nodes={b.max_nodes})")

    def plan(self, order: Sequence[int] | Tensor | None = None) -> list[list[int]]:
        """The batches of an epoch, as lists of graph indices: ``order`` (default ``0 .. n - 1``) cut greedily, a
        batch closing when the next graph would pass ``B`` graphs, ``T - 1`` tokens or ``E`` edges. Every graph
        of ``order`` is in exactly one batch."""
        b = self.budget
        ids = list(range(len(self))) if order is None else [int(i) for i in order]
        batches: list[list[int]] = []
        cur: list[int] = []
        tokens = edges = 0
        for i in ids:
            n, e = int(self.num_nodes[i]), int(self.num_edges[i])
            if cur and (len(cur) == b.max_graphs or tokens + n > b.max_tokens - 1 or edges + e > b.max_edges):
                batches.append(cur)
                cur, tokens, edges = [], 0, 0
            cur.append(i)
            tokens, edges = tokens + n, edges + e
        if cur:
            batches.append(cur)
        return batches

    def epoch(self, *, shuffle: bool = True, generator: torch.Generator | None = None) -> Iterator[StaticGraphBatch]:
        """An epoch's batches on the host (every graph once; ``shuffle``: in a random order drawn from
        ``generator``)."""
        order = torch.randperm(len(self), generator=generator) if check_bool("shuffle", shuffle) else None
        for ids in self.plan(order):
            yield self.pack(ids)

    def num_batches(self) -> int:
        """Batches of an unshuffled epoch (a shuffled epoch packs the same graphs greedily in another order, so its
        count can differ)."""
        return len(self.plan())

    def pack(self, ids: Sequence[int]) -> StaticGraphBatch:
        """One batch of the graphs ``ids`` (which must fit the budget together: as :meth:`plan` cuts them)."""
        b = self.budget
        ids = [int(i) for i in ids]
        k = len(ids)
        n, e = self.num_nodes[ids], self.num_edges[ids]
        used_n, used_e = int(n.sum()), int(e.sum())
        if not 1 <= k <= b.max_graphs or used_n > b.max_tokens - 1 or used_e > b.max_edges:
            raise ValueError(f"ids must be 1 to {b.max_graphs} graphs of at most {b.max_tokens - 1} nodes and "
                             f"{b.max_edges} edges together, got {k} graphs of {used_n} nodes and {used_e} edges")
        T, E = b.max_tokens, b.max_edges
        node_sel = np.concatenate([np.arange(self.node_ptr[i], self.node_ptr[i + 1]) for i in ids])
        edge_sel = np.concatenate([np.arange(self.edge_ptr[i], self.edge_ptr[i + 1]) for i in ids])
        start = np.cumsum(n) - n  # first token of each real graph
        shift = np.repeat(start, e)
        x = self.x.new_zeros((T, *self.x.shape[1:]))
        x[:used_n] = self.x[torch.from_numpy(node_sel)]
        # padding: P sink tokens in chunks of M; padding edge j goes to sink token floor(j * P / Q) (sorted, balanced)
        # from the next token of that token's chunk
        p, q = T - used_n, E - used_e
        pad_dst = (np.arange(q) * p) // max(q, 1)
        chunk0 = (pad_dst // b.max_nodes) * b.max_nodes
        chunk_len = np.minimum(b.max_nodes, p - chunk0)
        pad_src = chunk0 + (pad_dst - chunk0 + 1) % chunk_len
        src = np.concatenate([self.src[edge_sel] + shift, used_n + pad_src])
        dst = np.concatenate([self.dst[edge_sel] + shift, used_n + pad_dst])
        offsets = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=T))])
        sink = np.minimum(b.max_nodes, np.maximum(p - b.max_nodes * np.arange(b.sink_graphs), 0))
        sizes = np.concatenate([n, np.zeros(b.max_graphs - k, dtype=np.int64), sink])
        ptr = np.concatenate([[0], np.cumsum(sizes)])
        batch = np.repeat(np.arange(b.num_slots), sizes)
        edge_attr = None
        if self.edge_attr is not None:
            edge_attr = self.edge_attr.new_zeros((E, *self.edge_attr.shape[1:]))
            edge_attr[:used_e] = self.edge_attr[torch.from_numpy(edge_sel)]
        y = torch.full((b.max_graphs, self.num_tasks), float("nan"))
        y[:k] = self.y[ids]
        valid = torch.zeros(b.max_graphs, dtype=torch.bool)
        valid[:k] = True
        graph_id = torch.full((b.max_graphs,), -1, dtype=torch.int64)
        graph_id[:k] = torch.tensor(ids)
        return StaticGraphBatch(
            x=x, edge_index=torch.from_numpy(np.stack([src, dst])), offsets=torch.from_numpy(offsets).to(
                self.index_dtype), edge_attr=edge_attr, batch=torch.from_numpy(batch), ptr=torch.from_numpy(ptr),
            y=y, graph_valid=valid, graph_id=graph_id, num_graphs=k, budget=b)


def masked_graph_loss(pred: Tensor, y: Tensor, valid: Tensor, task_type: str) -> Tensor:
    """Mean loss over the labels of the real graphs, with no host sync: ``pred`` and ``y`` ``[B, num_tasks]`` (``y``
    NaN where missing), ``valid [B]`` bool -> 0-dim float32. ``task_type``: ``"binary classification"`` (binary
    cross-entropy on logits) or ``"regression"`` (squared error). Masked entries weigh nothing; none left gives 0."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type must be one of {TASK_TYPES}, got {task_type!r}")
    pred = pred.float()
    keep = valid[:, None] & ~torch.isnan(y)
    target = torch.where(keep, y.float(), torch.zeros((), device=y.device))
    if task_type == "binary classification":
        loss = torch.nn.functional.binary_cross_entropy_with_logits(pred, target, reduction="none")
    else:
        loss = (pred - target).square()
    weight = keep.to(loss.dtype)
    return (loss * weight).sum() / weight.sum().clamp(min=1)
