"""Neighbour sampling with fixed shapes: every batch has the same tensors of the same sizes, so that sampling,
feature gather and the training step can be captured together in one CUDA graph.

:class:`DeviceNeighborLoader` (and PyG's ``NeighborLoader``) deduplicate the sampled nodes, so a batch's node and
edge counts depend on the draw and are read on the host once a hop. :class:`StaticNeighborSampler` samples a
*tree* instead: a batch of ``B`` seeds and fan-outs ``f_0 .. f_{L-1}`` has exactly ``n_0 = B`` slots at hop 0 and
``n_{k+1} = n_k * f_k`` slots at hop ``k + 1``. The ``f_k`` child slots of a hop-``k`` slot holding node ``v`` of
in-degree ``d`` take ``min(d, f_k)`` of ``v``'s in-neighbours, distinct and uniformly at random (every subset
equally likely, the draw :class:`DeviceNeighborLoader` makes), in CSC order, first; the remaining slots are padding
(``valid`` False). A node reached twice is two slots (no deduplication), so nothing about the shapes depends on
the draw and nothing is read back on the host.

Slots are numbered hop by hop (``offsets[k] = n_0 + ... + n_{k-1}`` is hop ``k``'s first slot), so, as in PyG's
batches, layer ``l`` of an ``L``-layer model feeds the slots of hops ``0 .. h - 1`` (``h = L - l``, ``n_dst =
offsets[h]``) from those of hops ``0 .. h`` (``n_src = offsets[h + 1]``). Its block (:class:`StaticBlock`) is a
CSC with fixed shapes and no padding inside any softmax:

- destination row ``d < n_dst`` holds the self-loop ``d -> d`` first (PyG's GAT adds one per destination; here it
  is in the block, and the layers run with ``add_self_loops=False``: :func:`self_loops_in_blocks`), then the
  ``c_d`` valid children of slot ``d``: ``1 + c_d`` edges. Valid edges are compacted (a cumulative sum of the row
  lengths, one scatter), so they fill positions ``0 .. T - 1`` of a buffer of the static capacity
  ``C = n_dst + (n_src - B)`` (every slot's self-loop plus every child slot), ``T`` known only on the device;
- the ``C - T`` positions left over are edges of ``K`` *sink* rows after the real ones (rows ``n_dst .. n_dst + K
  - 1``, at most ``W = ceil((C - n_dst) / K)`` edges each; the one at position ``p`` comes from source slot
  ``p mod n_src``, and as ``C < 2 n_src`` no source gets more than two of them, so the backward's source rows stay
  short too). The offsets are a proper CSC, ``[n_dst + K + 1]`` with ``offsets[-1] == C``, whatever ``T`` is.
  A layer computes the sink rows' outputs
  (``x_dst`` is ``x[:n_dst + K]``, real slots' features) and the caller drops them (``out[:n_dst]``, a static
  slice): they reach nothing, and their gradient is exactly zero. ``K`` is at most ``ceil((C - n_dst) / 32)`` and
  at most ``n_src - n_dst``, so the sink rows are short (the Triton kernels walk rows whole) and few.

A padding slot is a destination with only its self-loop and no edge to its parent: its value reaches no valid
slot. A padded seed (the last, short batch of an epoch, filled up to ``B`` by :meth:`StaticNeighborSampler.epoch`)
has no valid children; its loss is masked (``seed_valid``).

Costs: device memory of a batch is ``S = offsets[L + 1] = B (1 + f_0 + f_0 f_1 + ...)`` slots (int64 ids, a bool
mask, the gathered features ``S x F``; ``S`` is the upper bound of a deduplicated batch's node count) and per layer
``C`` int32 (or int64) indices and destinations and ``2 C`` int64 COO entries
(:meth:`StaticNeighborSampler.batch_bytes`). Per batch the work is fixed: ``f_k`` random draws and
``f_k^2 / 2`` comparisons per hop-``k`` slot (Floyd's algorithm), one gather per child slot, one scan and one
scatter per layer.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from cudnn_gnn._validation import check_bool, check_index, check_int, check_tensor, sync_is_costly
from cudnn_gnn.apps.sampler import _check_csc, _choose, _resolve_device
from cudnn_gnn.graph import CscGraph, storage_index_dtype

__all__ = ["SINK_ROW_EDGES", "StaticBatch", "StaticBlock", "StaticNeighborSampler", "capture_ahead", "forward_blocks",
           "masked_cross_entropy", "sampled_loss", "self_loops_in_blocks"]

SINK_ROW_EDGES = 32
"""The sink rows' target length: a block has ``min(n_src - n_dst, ceil((C - n_dst) / 32))`` of them."""


class StaticBlock(NamedTuple):
    """Layer ``l``'s block of a :class:`StaticBatch`.

    ``graph``: the CSC (:class:`~cudnn_gnn.CscGraph`, marked rebuilt every call with short rows) with
    ``num_src_nodes = num_src`` and ``num_dst_nodes = num_rows`` (the real destinations, then the sink rows);
    ``edge_index``: the same ``[2, capacity]`` int64 edges in COO form (COO order is CSC order), for PyG's layers;
    ``num_dst``: the real destinations (slots of hops ``0 .. h - 1``), the rows to keep of the layer's output.
    """

    graph: CscGraph
    edge_index: Tensor
    num_src: int
    num_dst: int
    num_rows: int
    capacity: int


@dataclass
class StaticBatch:
    """One tree-sampled batch (every tensor's shape is fixed by the sampler's ``batch_size`` and ``fanout``).

    Attributes:
        n_id: ``[S]`` int64 node of each slot, hop by hop (seeds first); padding slots hold node 0.
        valid: ``[S]`` bool, whether a slot holds a sampled node.
        batch_size: ``B``, the seed slots ``n_id[:B]``; ``valid[:B]`` masks padded seeds.
        blocks: layer ``l``'s :class:`StaticBlock` for ``l = 0 .. L - 1`` (outermost first).
        attrs: the sampler's node attributes gathered per slot (``attrs["x"]``: ``[S, F]``).
    """

    n_id: Tensor
    valid: Tensor
    batch_size: int
    blocks: list[StaticBlock]
    attrs: dict[str, Tensor] = field(default_factory=dict)

    @property
    def seed_valid(self) -> Tensor:
        """``[B]`` bool: which seed slots hold a seed (False: the padding of a short last batch)."""
        return self.valid[: self.batch_size]


@contextlib.contextmanager
def self_loops_in_blocks(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, every GAT-like layer of ``model`` (every submodule with an ``add_self_loops`` attribute:
    ours and PyG's ``GATConv`` / ``GATv2Conv``) runs with ``add_self_loops=False``, because a
    :class:`StaticBlock` has its self-loops already; restored on exit. Host attributes only (no sync); a captured
    or compiled step records the setting it ran with."""
    convs: list[Any] = [m for m in model.modules() if isinstance(getattr(m, "add_self_loops", None), bool)]
    saved = [(m, bool(m.add_self_loops)) for m in convs]
    try:
        for m, _ in saved:
            m.add_self_loops = False
        yield model
    finally:
        for m, value in saved:
            m.add_self_loops = value


class StaticNeighborSampler:
    """Tree neighbour sampling with fixed shapes, on the device that holds the graph (see the module docstring).

    At construction ``colptr``, ``row`` and the node attributes move to ``device`` once (no copy where they are
    there already). :meth:`sample` then turns ``[B]`` seeds into a :class:`StaticBatch` with fixed-shape torch ops
    only (no host sync, no data-dependent size), so it can run inside a captured training step
    (:class:`~cudnn_gnn.apps.capture.CapturedStep`), each replay drawing fresh neighbours.

    Args:
        colptr: ``[N + 1]`` int32/int64 CSC offsets: node ``v``'s in-edges are ``colptr[v]:colptr[v + 1]``.
        row: ``[E]`` int32/int64 source of each edge, in CSC order.
        fanout: slots per node at each hop, hop 0 (the seeds) first; every entry >= 1 (``-1``, all neighbours,
            has no fixed shape).
        batch_size: seed slots per batch, ``B``.
        node_attrs: ``{name: [N, ...] tensor}`` gathered per slot into :attr:`StaticBatch.attrs`.
        device: where the graph is held and sampled; None: ``colptr``'s device.
        generator: the ``torch.Generator`` (on ``device``) the draws come from; None: the device's default
            generator, which a CUDA graph capture registers by itself. Another generator must be passed to
            ``CapturedStep(generators=[...])`` so that replays advance it.
        validate: check the CSC (starts at 0, never decreases, ends at ``E``, sources in ``[0, N)``) with one host
            read, once.

    Raises:
        TypeError: an argument of the wrong type or dtype.
        ValueError: bad shapes or values, named.

    Example:
        >>> import torch
        >>> colptr, row = torch.tensor([0, 2, 3, 3]), torch.tensor([1, 2, 0])  # in-edges 1->0, 2->0, 0->1
        >>> s = StaticNeighborSampler(colptr, row, fanout=[2, 1], batch_size=1)
        >>> b = s.sample(torch.tensor([0]))
        >>> b.n_id.tolist(), b.valid.tolist()
        ([0, 1, 2, 0, 0], [True, True, True, True, False])
        >>> [(blk.num_src, blk.num_dst, blk.num_rows, blk.capacity) for blk in b.blocks]
        [(5, 3, 4, 7), (3, 1, 2, 3)]
    """

    def __init__(self, colptr: Tensor, row: Tensor, *, fanout: Sequence[int], batch_size: int,
                 node_attrs: dict[str, Tensor] | None = None, device: str | torch.device | None = None,
                 generator: torch.Generator | None = None, validate: bool = True) -> None:
        colptr, row = check_index("colptr", colptr), check_index("row", row)
        if colptr.dim() != 1 or colptr.numel() < 1:
            raise ValueError(f"colptr must have shape (num_nodes + 1,), got {tuple(colptr.shape)}")
        if row.dim() != 1:
            raise ValueError(f"row must have shape (num_edges,), got {tuple(row.shape)}")
        if isinstance(fanout, (str, bytes)) or not isinstance(fanout, Sequence):
            raise TypeError(f"fanout must be a list of ints, got {type(fanout).__name__}")
        self.fanout = [check_int(f"fanout[{k}]", f, minimum=-1) for k, f in enumerate(fanout)]
        if not self.fanout or min(self.fanout) < 1:
            raise ValueError(f"fanout must be a non-empty list of ints >= 1 (a fixed number of slots per node; -1, "
                             f"all neighbours, has no fixed shape), got {list(fanout)}")
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        check_bool("validate", validate)
        self.num_nodes, self.num_edges = colptr.numel() - 1, row.numel()
        if self.num_nodes < 1:
            raise ValueError("colptr must describe at least one node (num_nodes >= 1), got num_nodes=0")
        attrs = {} if node_attrs is None else node_attrs
        if not isinstance(attrs, dict):
            raise TypeError(f"node_attrs must be a dict of tensors, got {type(attrs).__name__}")
        for name, value in attrs.items():
            t = check_tensor(f"node_attrs[{name!r}]", value)
            if t.dim() < 1 or t.shape[0] != self.num_nodes:
                raise ValueError(f"node_attrs[{name!r}] must have shape (num_nodes={self.num_nodes}, ...), got "
                                 f"{tuple(t.shape)}")
        self.device = _resolve_device(device, colptr.device)
        self.colptr, self.row = colptr.to(self.device), row.to(self.device)
        self.node_attrs = {name: t.to(self.device) for name, t in attrs.items()}
        if generator is None:
            generator = (torch.cuda.default_generators[self.device.index or 0] if self.device.type == "cuda"
                         else torch.default_generator)
        elif not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        elif _resolve_device(generator.device, generator.device) != self.device:
            raise ValueError(f"generator must be on the sampler's device {self.device}, got {generator.device}")
        self.generator = generator
        # slots per hop and the first slot of each hop (offsets[k]); the blocks' static sizes
        self.hop_sizes = [self.batch_size]
        for f in self.fanout:
            self.hop_sizes.append(self.hop_sizes[-1] * f)
        self.offsets = [0]
        for n in self.hop_sizes:
            self.offsets.append(self.offsets[-1] + n)
        if validate:
            _check_csc(self.colptr, self.row, self.num_nodes)

    @property
    def num_slots(self) -> int:
        """``S``, the slots of a batch (all hops)."""
        return self.offsets[-1]

    def block_sizes(self) -> list[tuple[int, int, int, int]]:
        """Per layer ``l`` (outermost first): ``(num_src, num_dst, num_rows, capacity)`` (host arithmetic)."""
        L, B = len(self.fanout), self.batch_size
        sizes = []
        for h in range(L, 0, -1):
            n_dst, n_src = self.offsets[h], self.offsets[h + 1]
            cap = n_dst + n_src - B
            sinks = max(1, min(n_src - n_dst, math.ceil((cap - n_dst) / SINK_ROW_EDGES)))
            sizes.append((n_src, n_dst, n_dst + sinks, cap))
        return sizes

    def batch_bytes(self, *, feature_bytes: int = 0) -> int:
        """Device bytes of one batch's outputs: slots (int64 id, bool mask), blocks (offsets, indices,
        destinations, COO, in their index dtypes) and ``feature_bytes`` per slot for the gathered attributes."""
        total = self.num_slots * (8 + 1 + feature_bytes)
        for n_src, _, rows, cap in self.block_sizes():
            isz = torch.empty((), dtype=storage_index_dtype(cap, n_src, rows)).element_size()
            total += (rows + 1) * isz + 2 * cap * isz + 2 * cap * 8
        return total

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_nodes={self.num_nodes}, num_edges={self.num_edges}, fanout={self.fanout}, "
                f"batch_size={self.batch_size}, slots={self.num_slots}, device={self.device})")

    # ------------------------------------------------------------------------------------------ batches

    def epoch(self, input_nodes: Tensor, *, shuffle: bool = True, generator: torch.Generator | None = None,
              validate: bool = True) -> Iterator[tuple[Tensor, Tensor]]:
        """An epoch's seeds: ``(seeds [B] int64, seed_valid [B] bool)`` per batch, ``ceil(n / B)`` batches (every
        seed once, as ``NeighborLoader`` with ``drop_last=False``); the last one is filled up to ``B`` with node 0,
        masked. ``shuffle`` permutes ``input_nodes`` on the device (``generator``: the sampler's by default).
        ``validate``: check that the seeds are node ids of the graph (one host read per epoch, before its first
        batch; :meth:`sample` does not check them).

        Raises:
            TypeError / ValueError: ``input_nodes`` not a 1-D int tensor, or (``validate``) an id out of range.
        """
        nodes = check_index("input_nodes", input_nodes)
        if nodes.dim() != 1:
            raise ValueError(f"input_nodes must have shape (num_seeds,), got {tuple(nodes.shape)}")
        nodes = nodes.to(self.device).long()
        n, B = nodes.numel(), self.batch_size
        if check_bool("validate", validate) and n:
            lo, hi = torch.stack([nodes.min(), nodes.max()]).tolist()
            if lo < 0 or hi >= self.num_nodes:
                raise ValueError(f"input_nodes must be node ids in [0, num_nodes={self.num_nodes}), got values in "
                                 f"[{lo}, {hi}]")
        if shuffle:
            nodes = nodes[torch.randperm(n, device=self.device, generator=generator or self.generator)]
        batches = math.ceil(n / B)
        padded = torch.zeros(batches * B, dtype=torch.int64, device=self.device)
        padded[:n] = nodes
        mask = torch.arange(batches * B, device=self.device) < n
        for k in range(batches):
            yield padded[k * B: (k + 1) * B], mask[k * B: (k + 1) * B]

    def num_batches(self, num_seeds: int) -> int:
        """Batches of an epoch over ``num_seeds`` seeds (the last one padded)."""
        return math.ceil(num_seeds / self.batch_size)

    def sample(self, seeds: Tensor, seed_valid: Tensor | None = None, *, validate: bool = False) -> StaticBatch:
        """The batch around ``seeds`` (``[B]`` int32/int64 node ids on the sampler's device; ``seed_valid`` ``[B]``
        bool marks padding seeds, default all valid). Fixed-shape ops only, no host sync: a seed outside
        ``[0, num_nodes)`` is sampled as padding (its ``seed_valid`` is False in the batch, so the loss skips it);
        ``validate=True`` (a debugging aid: one host read) raises instead.

        Raises:
            TypeError / ValueError: ``seeds`` or ``seed_valid`` of another dtype, shape or device than the
                sampler's (``B = batch_size``), both shapes named; with ``validate``, a seed out of range.
        """
        seeds = check_index("seeds", seeds)
        if tuple(seeds.shape) != (self.batch_size,):
            raise ValueError(f"seeds must have the sampler's shape (batch_size={self.batch_size},), got "
                             f"{tuple(seeds.shape)}")
        if seeds.device != self.device:
            raise ValueError(f"seeds must be on the sampler's device {self.device}, got {seeds.device}")
        if seed_valid is None:
            seed_valid = torch.ones(self.batch_size, dtype=torch.bool, device=self.device)
        else:
            check_tensor("seed_valid", seed_valid)
            if seed_valid.dtype != torch.bool:
                raise TypeError(f"seed_valid must have dtype torch.bool, got {seed_valid.dtype}")
            if tuple(seed_valid.shape) != (self.batch_size,) or seed_valid.device != self.device:
                raise ValueError(f"seed_valid must have shape ({self.batch_size},) on {self.device}, got "
                                 f"{tuple(seed_valid.shape)} on {seed_valid.device}")
        seeds = seeds.long()
        in_range = (seeds >= 0) & (seeds < self.num_nodes)
        if check_bool("validate", validate) and not bool(in_range.all()):
            bad = seeds[~in_range]
            raise ValueError(f"seeds must be node ids in [0, num_nodes={self.num_nodes}), got {bad.numel()} outside, "
                             f"e.g. {bad[:5].tolist()}")
        n_id, valid, children = self._sample_tree(seeds, seed_valid & in_range)
        blocks = self._blocks(children)
        attrs = {name: t.index_select(0, n_id) for name, t in self.node_attrs.items()}
        return StaticBatch(n_id=n_id, valid=valid, batch_size=self.batch_size, blocks=blocks, attrs=attrs)

    def _sample_tree(self, seeds: Tensor, seed_valid: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Slots hop by hop: ``n_id [S]``, ``valid [S]``, and per hop ``k`` the valid-children count ``[n_k]`` of
        its slots (valid children are the first ones of a slot's ``f_k``)."""
        dev = self.device
        frontier = torch.where(seed_valid, seeds, 0)
        alive = seed_valid
        ids, masks, children = [frontier], [alive], []
        for f in self.fanout:
            lo = self.colptr[frontier].long()
            deg = torch.where(alive, self.colptr[frontier + 1].long() - lo, 0)  # [n_k]; padding slots: none
            j = torch.arange(f, device=dev)
            pick = torch.where((deg > f)[:, None], _choose(deg, f, self.generator), j)  # [n_k, f] in-edge offsets
            take = deg.clamp(max=f)
            ok = j < take[:, None]  # [n_k, f]: the first min(deg, f) slots are valid
            if self.num_edges:
                child = torch.where(ok, self.row[torch.where(ok, lo[:, None] + pick, 0)].long(), 0)
            else:
                child = torch.zeros_like(pick)
            frontier, alive = child.view(-1), ok.view(-1)
            ids.append(frontier)
            masks.append(alive)
            children.append(take)
        return torch.cat(ids), torch.cat(masks), children

    def _blocks(self, children: list[Tensor]) -> list[StaticBlock]:
        """Every layer's block from the valid-children counts (see the module docstring for the layout)."""
        dev, B, L = self.device, self.batch_size, len(self.fanout)
        n_dst0, cap0 = self.offsets[L], self.offsets[L] + self.offsets[L + 1] - B
        # The outermost block's real rows: slot d's row is [d, its valid children], rows in slot order.
        count = torch.cat(children)  # [n_dst0] valid children per destination slot
        row_len = count + 1
        ends = torch.cumsum(row_len, 0)  # [n_dst0]
        starts = ends - row_len
        src = torch.zeros(cap0 + 1, dtype=torch.int64, device=dev)  # position cap0: where padding children go
        dst = torch.zeros(cap0 + 1, dtype=torch.int64, device=dev)
        slot = torch.arange(n_dst0, device=dev)
        src[starts] = slot
        dst[starts] = slot
        for k, f in enumerate(self.fanout[: L]):
            lo_k, n_k = self.offsets[k], self.hop_sizes[k]
            j = torch.arange(f, device=dev)
            ok = j < children[k][:, None]  # [n_k, f]
            parent = torch.arange(lo_k, lo_k + n_k, device=dev)
            where = torch.where(ok, starts[lo_k: lo_k + n_k, None] + 1 + j, cap0).view(-1)
            child_slot = (self.offsets[k + 1] + (parent - lo_k)[:, None] * f + j).view(-1)
            src.index_put_((where,), child_slot)
            dst.index_put_((where,), parent[:, None].expand(n_k, f).reshape(-1))
        src, dst = src[:cap0], dst[:cap0]
        blocks = []
        for n_src, n_dst, rows, cap in self.block_sizes():
            dtype = storage_index_dtype(cap, n_src, rows + 1)
            total = ends[n_dst - 1]  # edges of the real rows (every row has its self-loop: >= n_dst)
            sinks, width = rows - n_dst, math.ceil((cap - n_dst) / (rows - n_dst))
            pos = torch.arange(cap, device=dev)
            real = pos < total
            b_src = torch.where(real, src[:cap], pos % n_src)  # sink edges spread over the sources (C < 2 n_src)
            b_dst = torch.where(real, dst[:cap], n_dst + torch.div(pos - total, width, rounding_mode="floor"))
            sink_offsets = (total + width * torch.arange(1, sinks + 1, device=dev)).clamp(max=cap)
            offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), ends[:n_dst], sink_offsets])
            coo = torch.stack([b_src, b_dst])
            graph = CscGraph.from_csc(offsets.to(dtype), b_src.to(dtype), n_src, dst_index=b_dst.to(dtype),
                                      edge_index=coo, rebuilt_every_call=True, short_rows=True, validate=False)
            blocks.append(StaticBlock(graph, coo, n_src, n_dst, rows, cap))
        return blocks


def forward_blocks(model: nn.Module, x: Tensor, blocks: Sequence[StaticBlock], *, pyg: bool = False) -> Tensor:
    """``model``'s layers over a :class:`StaticBatch`'s blocks, outermost first, self-loops from the blocks
    (:func:`self_loops_in_blocks`): layer ``i`` is ``model.layer(i, (x[:n_src], x[:n_rows]), edge_index,
    size=(n_src, n_rows), rows=n_dst)``, which must return its first ``rows`` output rows (the sink rows dropped
    before any normalisation or activation). ``pyg``: the blocks' COO ``edge_index`` (PyG's layers) instead of
    their CSC graphs. Returns the last layer's ``[B, ...]`` output (the seed slots)."""
    layer = getattr(model, "layer", None)
    if not callable(layer):
        raise TypeError(f"model must have a layer(i, x, edge_index, size=..., rows=...) method, got "
                        f"{type(model).__name__}")
    with self_loops_in_blocks(model):
        for i, blk in enumerate(blocks):
            x = x[: blk.num_src]
            x = layer(i, (x, x[: blk.num_rows]), blk.edge_index if pyg else blk.graph,
                            size=(blk.num_src, blk.num_rows), rows=blk.num_dst)
    return x


def masked_cross_entropy(logits: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Mean cross-entropy over the rows ``mask`` keeps (a padded batch's seeds), with no host sync: ``[B, C]``
    logits (computed in float32), ``[B]`` class ids (int, or float with NaN for an unlabelled node, as
    ogbn-papers100M's), ``[B]`` bool mask -> 0-dim. Rows with a NaN target are dropped as masked ones are; the
    targets of dropped rows are replaced before the cast to int (a NaN cast to int is undefined: INT64_MIN on x86
    CPUs, which cross-entropy refuses). An all-padding batch gives 0.

    A kept row's class id outside ``[0, C)`` (cross-entropy would index past the logits: on CUDA a device-side
    assert that ends the CUDA context) raises ``ValueError`` on CPU; on CUDA, with no host sync (a captured step
    keeps working), it makes the loss and every gradient NaN (the logits are) and the lookup reads a clamped id."""
    if target.is_floating_point():
        mask = mask & ~torch.isnan(target)
    target = torch.where(mask, target, torch.zeros((), dtype=target.dtype, device=target.device)).long()
    classes = logits.shape[-1]
    outside = mask & ((target < 0) | (target >= classes))
    logits = logits.float()
    if sync_is_costly(target.device):  # NaN logits: the loss and every gradient NaN, not a step on clamped labels
        logits = logits + torch.where(outside.any(), float("nan"), 0.0)
        target = target.clamp(0, classes - 1)
    else:
        _refuse_classes_outside(target, outside, classes)
    loss = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    weight = mask.to(loss.dtype)
    return (loss * weight).sum() / weight.sum().clamp(min=1)


def _refuse_classes_outside(target: Tensor, outside: Tensor, classes: int) -> None:
    """The CPU's check of :func:`masked_cross_entropy` (a host read: where one is costly the loss turns NaN instead)."""
    if bool(outside.any()):
        raise ValueError(f"target must hold class ids in [0, {classes}) (the logits' columns) on the rows mask keeps, "
                         f"got {int(target[outside][0])}")


def _check_labels(y: Tensor, name: str) -> None:
    """Class ids a cross-entropy can take: ``[N]`` or ``[N, 1]``, integers >= 0, or floats holding whole numbers >= 0
    and NaN (unlabelled). One host read, at construction."""
    if y.dtype == torch.bool or y.is_complex():
        raise TypeError(f"{name} must hold class ids (an integer or float dtype), got {y.dtype}")
    if not (y.dim() == 1 or (y.dim() == 2 and y.size(1) == 1)):
        raise ValueError(f"{name} must have shape (num_nodes,) or (num_nodes, 1): one class id per node, got "
                         f"{tuple(y.shape)}")
    if y.numel() == 0:
        return
    if y.is_floating_point():
        known = y[~torch.isnan(y)]
        bad = known[(known != known.floor()) | (known < 0) | torch.isinf(known)]
        if bad.numel():
            raise ValueError(f"{name} must hold class ids: whole numbers >= 0, or NaN for an unlabelled node, got "
                             f"{bad.numel()} other values, e.g. {bad[:3].tolist()}")
    elif int(y.min()) < 0:
        raise ValueError(f"{name} must hold class ids >= 0, got {int(y.min())}")


def sampled_loss(model: nn.Module, sampler: StaticNeighborSampler, *, features: str = "x", labels: str = "y",
                 pyg: bool = False, compile: bool = False) -> Any:
    """The loss function of one tree-sampled training step, ``loss_fn(seeds, seed_valid) -> Tensor``: sample
    around ``seeds`` (``[B]``), gather ``sampler.node_attrs[features]`` (as float32) and ``[labels]``, run
    ``model`` over the blocks (:func:`forward_blocks`) and return the masked cross-entropy of the seeds. Made of
    fixed-shape ops only: pass it to :class:`~cudnn_gnn.apps.capture.CapturedStep` with
    ``inputs={"seeds": ..., "seed_valid": ...}`` and sampling, gather, forward, backward and optimizer step replay
    as one CUDA graph.

    ``pyg``: hand the layers the blocks' COO ``edge_index`` (PyG's layers) instead of their CSC graphs.
    ``compile``: the model's part (features and blocks to loss) under ``torch.compile(dynamic=False)``, one graph
    for every batch (the shapes are fixed); the sampling stays eager (its draws take an explicit generator)."""
    for name in (features, labels):
        if name not in sampler.node_attrs:
            raise ValueError(f"sampler.node_attrs must hold {name!r}, got {sorted(sampler.node_attrs)}")
    check_bool("pyg", pyg)
    _check_labels(sampler.node_attrs[labels], f"sampler.node_attrs[{labels!r}] (labels={labels!r})")

    def model_loss(x: Tensor, blocks: list[StaticBlock], y: Tensor, valid: Tensor) -> Tensor:
        out = forward_blocks(model, x if x.dtype == torch.float32 else x.float(), blocks, pyg=pyg)
        return masked_cross_entropy(out, y, valid)

    run = torch.compile(model_loss, dynamic=False) if check_bool("compile", compile) else model_loss

    def loss_fn(seeds: Tensor, seed_valid: Tensor) -> Tensor:
        batch = sampler.sample(seeds, seed_valid)
        return run(batch.attrs[features], batch.blocks, batch.attrs[labels][: batch.batch_size].view(-1),
                   batch.seed_valid)

    return loss_fn


@torch.no_grad()
def _restore(saved: dict[int, Tensor], tensors: list[Tensor]) -> None:
    for t in tensors:
        old = saved.get(id(t))
        if old is None:
            t.zero_()  # optimizer state created by the warm-up steps: Adam's starts at zero (moments, step count)
        else:
            t.copy_(old)


def _saved(value: Any) -> Any:
    """A param group's setting as it is now: tensors cloned (a tuple's element-wise), the rest as is."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_saved(v) for v in value)
    return value


@torch.no_grad()
def _put_back(current: Any, saved: Any) -> Any:
    """The value to store where ``current`` is, for ``saved`` (from :func:`_saved`): into the same tensor (a captured
    step reads it by address), a tuple element-wise, otherwise ``saved`` itself."""
    if isinstance(current, Tensor) and isinstance(saved, Tensor):
        current.copy_(saved)
        return current
    if isinstance(current, tuple) and isinstance(saved, tuple) and len(current) == len(saved):
        return tuple(_put_back(c, v) for c, v in zip(current, saved))
    return saved


def capture_ahead(step: Any, batches: Iterable[tuple[Tensor, Tensor]]) -> int:
    """Warm up and capture a sampled :class:`~cudnn_gnn.apps.capture.CapturedStep` before training, so that the
    first epoch carries no warm-up or capture: run its ``warmup + 1`` first calls on ``batches`` (``(seeds,
    seed_valid)`` pairs, e.g. the first ones of :meth:`StaticNeighborSampler.epoch`), then put the run back as it was
    before, in place (the captured addresses stay valid): the optimizer's parameters and the parameters and buffers
    of ``step.modules`` (buffers only there: pass ``model=`` for BatchNorm statistics); the optimizer's state
    (state tensors that existed are restored, those the warm-up created are zeroed: Adam's and AdamW's fresh state;
    an optimizer whose fresh state is not zeros would start from the wrong state); its param groups' settings, the
    learning rate included (``capturable``, which the step switches on, stays on); and the step's scheduler
    (``scheduler.load_state_dict`` of its state before). The loss sum is reset; the random generators stay advanced.
    Returns the steps run (0 when the step already ran, or runs eagerly: nothing to capture)."""
    if step.steps or step.eager_reason is not None:
        return 0
    opt = step.optimizer
    model_tensors = list({id(t): t for t in (*(p for g in opt.param_groups for p in g["params"]),
                                             *(t for m in step.modules for t in (*m.parameters(), *m.buffers())))
                          }.values())
    saved = {id(t): t.detach().clone() for t in model_tensors}
    before = {id(t): t.detach().clone() for st in opt.state.values() for t in st.values() if isinstance(t, Tensor)}
    groups = [{k: _saved(v) for k, v in g.items() if k != "params"} for g in opt.param_groups]
    scheduler = getattr(step, "scheduler", None)
    scheduler_state = copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None
    it = iter(batches)
    runs = 0
    for _ in range(step.warmup + 1):
        try:
            seeds, valid = next(it)
        except StopIteration:
            break
        step(seeds=seeds, seed_valid=valid)
        runs += 1
    _restore(saved, model_tensors)
    _restore(before, [t for st in opt.state.values() for t in st.values() if isinstance(t, Tensor)])
    for group, settings in zip(opt.param_groups, groups):
        for key, value in settings.items():
            if key != "capturable" and key in group:
                group[key] = _put_back(group[key], value)
    if scheduler is not None:
        scheduler.load_state_dict(scheduler_state)
    step.mean_loss(reset=True)
    return runs
