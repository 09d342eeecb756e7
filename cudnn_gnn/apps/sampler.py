"""A neighbour sampler that runs where the graph lives: CSC, node attributes, sampling and gathers on one device.

PyG's ``NeighborLoader`` samples on the host, in worker processes, and copies each batch to the GPU. When the
graph fits in GPU memory (papers100M-shaped at scale 0.1: 162M edges, 1.3 GB of int64 CSC and 5.7 GB of fp32
features; the whole papers100M: 13.8 GB of CSC and 28-57 GB of features, of an H200's 141 GB),
:class:`DeviceNeighborLoader` keeps the CSC and the node attributes on the GPU once and samples there, with
torch ops only: no worker processes and no host->device copy per batch. The same code runs on CPU tensors.

Its batches follow PyG's ``NeighborLoader`` (pyg-lib's directional sampler, ``replace=False``,
``disjoint=False``), so :func:`cudnn_gnn.sampled_blocks` and PyG's ``trim_to_layer`` can cut them into per-layer
prefix blocks: nodes numbered hop by hop (the seeds first, in batch order, then the nodes first reached at hop 1,
...), edges listed hop by hop (those sampled into hop-0 nodes first), ``edge_index[0]`` the sampled neighbour
(source) and ``edge_index[1]`` the node whose in-edges were sampled (destination).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_gnn._validation import check_bool, check_index, check_int, check_tensor
from cudnn_gnn.graph import csc_value_bounds

__all__ = ["DeviceNeighborLoader"]

# The relabel map holds, per node, its local id in the batch being sampled (< 2**31), or one of two markers:
_UNSEEN = 1 << 62  # not in the batch (every entry between batches)
_CLAIM = 1 << 61  # + an edge's position in the current hop: the node's first sampled edge (min wins), while relabelling
# Batch fields the loader sets; node attributes must not take these names.
_RESERVED = ("edge_index", "n_id", "e_id", "input_id", "batch_size", "num_sampled_nodes", "num_sampled_edges",
             "num_nodes")


def _resolve_device(device: object, fallback: torch.device) -> torch.device:
    if device is None:
        dev = fallback
    elif isinstance(device, (str, torch.device)):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    else:
        raise TypeError(f"device must be a str, a torch.device or None, got {type(device).__name__}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device must be a device this machine has, got {str(device)!r}: no CUDA GPU is "
                             "visible to torch here; pass device='cpu' (or None: the graph's device)")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise ValueError(f"device must be one of the {torch.cuda.device_count()} GPU(s) (cuda:0 .. "
                             f"cuda:{torch.cuda.device_count() - 1}), got {str(device)!r}")
    return dev


def _check_fanout(fanout: object) -> list[int]:
    if isinstance(fanout, (str, bytes)) or not isinstance(fanout, Sequence):
        raise TypeError(f"fanout must be a list of ints, got {type(fanout).__name__}")
    values = [check_int(f"fanout[{k}]", f, minimum=-1) for k, f in enumerate(fanout)]
    if not values:
        raise ValueError("fanout must have at least one entry (one per hop), got []")
    return values


def _check_csc(colptr: Tensor, row: Tensor, num_nodes: int) -> None:
    """``colptr[0] == 0``, non-decreasing, ``colptr[N] == E``; sources in ``[0, N)``: one host read (the samplers'
    ``validate=True``)."""
    num_edges = row.numel()
    first, last, drops, lo_v, hi_v = csc_value_bounds(colptr, row)
    if first != 0 or last != num_edges or drops:
        raise ValueError(f"colptr must start at 0, never decrease and end at row.numel()={num_edges}, got "
                         f"colptr[0]={first}, colptr[-1]={last} and {drops} decreasing steps")
    if num_edges and (lo_v < 0 or hi_v >= num_nodes):
        raise ValueError(f"row must hold node ids in [0, num_nodes={num_nodes}), got values in [{lo_v}, {hi_v}]")


def _choose(deg: Tensor, fanout: int, generator: torch.Generator) -> Tensor:
    """``fanout`` distinct offsets in ``[0, max(deg, fanout))`` per row, uniformly at random, sorted ascending.

    Floyd's algorithm, vectorised over the rows: step ``j`` draws ``t`` uniformly from ``[0, top]`` with
    ``top = m - fanout + j`` and keeps ``top`` instead when ``t`` was chosen before. Every ``fanout``-subset comes
    out with the same probability; the work is ``fanout`` draws and ``fanout**2 / 2`` comparisons a row, whatever
    the degree (a hub's millions of edges are never enumerated), with no host sync. The draws do not depend on the
    earlier steps, so all are made at once (one random tensor, one remainder); each step then costs one
    comparison, one ``any`` and one ``where``: the loop is most of a batch's small ops, so it is kept short.

    Shapes: ``deg`` ``[n]`` int64 -> ``[n, fanout]`` int64.
    """
    n = deg.numel()
    top = deg.clamp(min=fanout)[:, None] - fanout + torch.arange(fanout, device=deg.device)  # [n, fanout]
    chosen = torch.randint(0, 1 << 62, (n, fanout), generator=generator, device=deg.device) % (top + 1)  # bias < 2**-31
    for j in range(1, fanout):
        seen = (chosen[:, :j] == chosen[:, j : j + 1]).any(1)
        chosen[:, j] = torch.where(seen, top[:, j], chosen[:, j])
    return chosen.sort(1).values


def _choose_by_keys(deg: Tensor, fanout: int, num_edges: int, generator: torch.Generator) -> Tensor:
    """``fanout`` distinct offsets in ``[0, deg)`` per row (every row has ``deg > fanout``), uniformly at random,
    sorted ascending: each of a row's ``deg`` in-edges gets a random 62-bit key, the row's edges are put in key order
    (two sorts, the second stable by row) and the first ``fanout`` are kept, a uniform random subset (ties, with
    probability below ``deg**2 / 2**63``, go to the lower offset). Work and memory are ``O(num_edges)``, the rows'
    in-edges, whatever the fan-out: used above :data:`_FLOYD_MAX`, where Floyd's ``fanout**2 / 2`` comparisons a
    row would outgrow the degree.

    Shapes: ``deg`` ``[n]`` int64 with ``deg.sum() == num_edges`` -> ``[n, fanout]`` int64.
    """
    n, dev = deg.numel(), deg.device
    owner = torch.repeat_interleave(torch.arange(n, device=dev), deg, output_size=num_edges)
    order = torch.randint(0, 1 << 62, (num_edges,), generator=generator, device=dev).argsort()
    order = order[owner[order].argsort(stable=True)]  # grouped by row, in key order within a row
    start = torch.cumsum(deg, 0) - deg
    return (order[start[:, None] + torch.arange(fanout, device=dev)] - start[:, None]).sort(1).values


#: Fan-outs up to this draw with Floyd's algorithm (``fanout**2 / 2`` comparisons a row, at most 16x the row's
#: degree, and no enumeration of a hub's in-edges); larger ones with :func:`_choose_by_keys` (``O(degree)``).
_FLOYD_MAX = 32


def _compact(mask: Tensor, count: int) -> Tensor:
    """Positions of the ``count`` true entries of ``mask``, ascending, without a host sync (``count`` is known)."""
    slot = torch.where(mask, torch.cumsum(mask, 0) - 1, count)
    out = torch.zeros(count + 1, dtype=torch.int64, device=mask.device)
    return out.scatter_(0, slot, torch.arange(mask.numel(), device=mask.device))[:count]


class DeviceNeighborLoader:
    """PyG's ``NeighborLoader`` (directional, without replacement, not disjoint) on the device that holds the graph.

    At construction ``colptr``, ``row`` and every node attribute are moved to ``device`` once (no copy where a
    tensor is already there) and a relabel map of ``N + 1`` int64 is allocated there. Device memory held for the
    loader's lifetime: ``(N + 1) * colptr.element_size() + E * row.element_size()`` (the CSC, in the dtype given:
    int32 halves it) ``+ sum(a.numel() * a.element_size() for a in node_attrs.values())`` ``+ 8 (N + 1)`` (the
    map). Papers100M-shaped at scale 0.1 (11.1M nodes, 162M edges, int64 CSC, 128 fp32 features, fp32 labels):
    1.38 + 5.69 + 0.04 + 0.09 = 7.2 GB. :meth:`with_inputs` makes further loaders (evaluation splits, another
    shuffle) over the same device copy and map. A batch adds its own outputs and, while it is sampled, a few
    int64 tensors per sampled edge of a hop (transient).

    Each epoch (``iter(loader)``) permutes ``input_nodes`` on the device when ``shuffle`` (a new permutation each
    epoch, drawn from the loader's generator) and cuts it into batches of ``batch_size`` seeds; the last, smaller
    one is dropped when ``drop_last``. Per batch and hop ``k`` each frontier node (the seeds at hop 0, then the
    nodes first reached at hop ``k``) takes ``min(deg, fanout[k])`` of its in-edges (all of them for ``fanout[k]``
    of ``-1``), distinct and uniformly at random, kept in CSC order; edges to nodes already in the batch are kept.
    Only the nodes with more in-edges than the fan-out draw: with Floyd's algorithm for fan-outs up to 32
    (``fanout**2/2`` comparisons a node, no enumeration of a hub's edges), with random keys over the node's in-edges
    above (``O(deg)``). A hop's work and memory are bounded by the frontier's in-edges, never by ``fanout x
    frontier``: a fan-out far above every degree takes each in-edge once at the cost of ``-1``. A node's local id is
    its position in ``n_id``: the seeds first, in batch order (a repeated seed keeps its own slot, row and sampled
    in-edges, and other nodes' edges from that node point at its first slot, as PyG's torch-sparse sampler does),
    then each hop's new nodes in the order of their first sampled edge. Random draws come from one
    ``torch.Generator`` on ``device``, so a seed gives the same batches on the same device (CPU and CUDA draw
    different numbers).

    Host syncs per batch: one to size the first hop, then one per hop (one read of the hop's new node count and the
    next hop's edge count, drawing nodes and their in-edges, which size the next tensors): ``len(fanout) + 1`` in
    all, none inside a loop over nodes or edges, fewer when a frontier runs empty. The relabel map's touched entries
    are reset before the batch is returned. Batches are sampled on the current stream, one at a time: loaders
    sharing a map (:meth:`with_inputs`) may be iterated in turn or interleaved, not from two threads at once.

    Each batch is a PyG ``Data`` with ``NeighborLoader``'s fields, all on ``device``:

    - ``n_id`` ``[n]`` int64: the batch's nodes (global ids), seeds first; ``num_nodes = n``.
    - ``edge_index`` ``[2, e]`` int64: local ids, row 0 the sampled neighbour, row 1 the node it points to.
    - ``e_id`` ``[e]`` int64: each edge's position in ``row`` (``row[e_id] == n_id[edge_index[0]]``), to gather edge
      features in CSC order.
    - ``input_id`` ``[batch_size]`` int64: the seeds' positions in ``input_nodes``; ``batch_size`` (int).
    - ``num_sampled_nodes`` (``len(fanout) + 1`` ints, seeds first), ``num_sampled_edges`` (``len(fanout)`` ints).
    - every node attribute ``name``: ``node_attrs[name][n_id]``.

    Args:
        colptr: ``[N + 1]`` int32/int64 CSC offsets: the in-edges of node ``v`` are ``colptr[v]:colptr[v + 1]``.
        row: ``[E]`` int32/int64 source of each edge, in CSC order.
        node_attrs: ``{name: [N, ...] tensor}`` gathered per batch (e.g. ``x``, ``y``).
        input_nodes: ``[n]`` int32/int64 seed ids, or a ``[N]`` bool mask; ``None``: every node.
        fanout: in-edges taken per node at each hop, hop 0 (the seeds) first; ``-1`` takes all.
        batch_size: seeds per batch.
        shuffle: permute the seeds every epoch.
        drop_last: drop the last batch when it has fewer than ``batch_size`` seeds.
        device: where the graph is held and sampled; ``None``: ``colptr``'s device.
        seed: seeds a new ``torch.Generator`` on ``device``; ``None`` draws one from torch's global generator.
        generator: a ``torch.Generator`` on ``device`` to draw from instead (not with ``seed``).
        validate: check the CSC (``colptr[0] == 0``, non-decreasing, ``colptr[N] == E``, sources in ``[0, N)``) and
            the seeds' range on the device, with one host read (O(N + E), once).

    Raises:
        TypeError: an argument of the wrong type or dtype.
        ValueError: bad shapes or values (``fanout`` entries below -1, attributes of another length, a reserved
            attribute name, ``seed`` and ``generator`` both given, a generator on another device; with ``validate``
            a malformed CSC or a seed out of range).

    Example:
        >>> import torch
        >>> colptr, row = torch.tensor([0, 2, 3, 3]), torch.tensor([1, 2, 0])  # in-edges 1->0, 2->0, 0->1
        >>> loader = DeviceNeighborLoader(colptr, row, input_nodes=torch.tensor([0]), fanout=[-1, -1], batch_size=1)
        >>> b = next(iter(loader))
        >>> b.n_id.tolist(), b.edge_index.tolist(), b.num_sampled_nodes, b.num_sampled_edges
        ([0, 1, 2], [[1, 2, 0], [0, 0, 1]], [1, 2, 0], [2, 1])
    """

    def __init__(self, colptr: Tensor, row: Tensor, *, node_attrs: dict[str, Tensor] | None = None,
                 input_nodes: Tensor | None = None, fanout: Sequence[int], batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, device: str | torch.device | None = None, seed: int | None = None,
                 generator: torch.Generator | None = None, validate: bool = True) -> None:
        colptr, row = check_index("colptr", colptr), check_index("row", row)
        if colptr.dim() != 1 or colptr.numel() < 1:
            raise ValueError(f"colptr must have shape (num_nodes + 1,), got {tuple(colptr.shape)}")
        if row.dim() != 1:
            raise ValueError(f"row must have shape (num_edges,), got {tuple(row.shape)}")
        self.num_nodes, self.num_edges = colptr.numel() - 1, row.numel()
        self.fanout = _check_fanout(fanout)
        check_bool("validate", validate)
        attrs = {} if node_attrs is None else node_attrs
        if not isinstance(attrs, dict):
            raise TypeError(f"node_attrs must be a dict of tensors, got {type(attrs).__name__}")
        for name, value in attrs.items():
            if not isinstance(name, str) or name in _RESERVED:
                raise ValueError(f"node_attrs keys must be names other than {', '.join(_RESERVED)}, got {name!r}")
            t = check_tensor(f"node_attrs[{name!r}]", value)
            if t.dim() < 1 or t.shape[0] != self.num_nodes:
                raise ValueError(f"node_attrs[{name!r}] must have shape (num_nodes={self.num_nodes}, ...), got "
                                 f"{tuple(t.shape)}")
        self.device = _resolve_device(device, colptr.device)
        self.colptr, self.row = colptr.to(self.device), row.to(self.device)
        self.node_attrs = {name: t.to(self.device) for name, t in attrs.items()}
        self._map = torch.full((self.num_nodes + 1,), _UNSEEN, dtype=torch.int64, device=self.device)
        if validate:
            _check_csc(self.colptr, self.row, self.num_nodes)
        self._set_inputs(input_nodes, batch_size, shuffle, drop_last, seed, generator, validate)

    # ------------------------------------------------------------------------------------------ setup

    def _set_inputs(self, input_nodes: Tensor | None, batch_size: int, shuffle: bool, drop_last: bool,
                    seed: int | None, generator: torch.Generator | None, validate: bool) -> None:
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.shuffle, self.drop_last = check_bool("shuffle", shuffle), check_bool("drop_last", drop_last)
        if input_nodes is None:
            nodes = torch.arange(self.num_nodes, device=self.device)
        else:
            t = check_tensor("input_nodes", input_nodes)
            if t.dtype == torch.bool:
                if t.shape != (self.num_nodes,):
                    raise ValueError(f"input_nodes as a mask must have shape ({self.num_nodes},), got {tuple(t.shape)}")
                nodes = t.to(self.device).nonzero().view(-1)
            else:
                t = check_index("input_nodes", t)
                if t.dim() != 1:
                    raise ValueError(f"input_nodes must have shape (num_seeds,), got {tuple(t.shape)}")
                nodes = t.to(self.device).long()
                if validate and nodes.numel():
                    lo, hi = torch.stack([nodes.min(), nodes.max()]).tolist()
                    if lo < 0 or hi >= self.num_nodes:
                        raise ValueError(f"input_nodes must be node ids in [0, num_nodes={self.num_nodes}), got values "
                                         f"in [{lo}, {hi}]")
        self.input_nodes = nodes
        if seed is not None and generator is not None:
            raise ValueError("seed and generator must not both be given, got both")
        if generator is not None:
            if not isinstance(generator, torch.Generator):
                raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
            gen_dev = _resolve_device(generator.device, generator.device)
            if gen_dev != self.device:
                raise ValueError(f"generator must be on the loader's device {self.device}, got {generator.device}")
            self.generator = generator
        else:
            if seed is None:
                seed = int(torch.randint(0, 1 << 62, ()).item())  # from torch's global (CPU) generator
            check_int("seed", seed)
            self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def with_inputs(self, input_nodes: Tensor | None, *, batch_size: int | None = None, shuffle: bool = False,
                    drop_last: bool = False, seed: int | None = None, generator: torch.Generator | None = None,
                    validate: bool = True) -> DeviceNeighborLoader:
        """Another loader over the same device-resident CSC, attributes and relabel map (no second copy), with its
        own seeds, batch size (default: this one's), shuffling and generator; e.g. one per evaluation split."""
        other = copy.copy(self)
        other._set_inputs(input_nodes, self.batch_size if batch_size is None else batch_size, shuffle, drop_last,
                          seed, generator, validate)
        return other

    def resident_bytes(self) -> int:
        """Device bytes this loader's graph holds: CSC, node attributes, relabel map (shared with :meth:`with_inputs`)."""
        tensors = [self.colptr, self.row, self._map, *self.node_attrs.values()]
        return sum(t.numel() * t.element_size() for t in tensors)

    # ------------------------------------------------------------------------------------------ iteration

    def __len__(self) -> int:
        n = self.input_nodes.numel()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        n = self.input_nodes.numel()
        order = torch.randperm(n, generator=self.generator, device=self.device) if self.shuffle else None
        for k in range(len(self)):
            lo, hi = k * self.batch_size, min((k + 1) * self.batch_size, n)
            input_id = order[lo:hi] if order is not None else torch.arange(lo, hi, device=self.device)
            yield self.sample(self.input_nodes[input_id], input_id=input_id)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_nodes={self.num_nodes}, num_edges={self.num_edges}, fanout={self.fanout}, "
                f"batch_size={self.batch_size}, seeds={self.input_nodes.numel()}, shuffle={self.shuffle}, "
                f"device={self.device})")

    def sample(self, seeds: Tensor, *, input_id: Tensor | None = None) -> Any:
        """One batch around ``seeds`` (``[B]`` int64 node ids on the loader's device; one outside ``[0, num_nodes)``
        raises ``ValueError`` at the first hop's host read, no read more); ``input_id`` is stored as the batch's
        ``input_id`` (default ``arange(B)``). See the class docstring for the batch's fields and host syncs."""
        from torch_geometric.data import Data

        try:
            n_id, edge_index, e_id, nodes, edges = self._sample(seeds.long())
        except BaseException:
            self._map.fill_(_UNSEEN)  # whatever was touched: the next batch starts clean
            raise
        batch = Data(edge_index=edge_index, n_id=n_id, e_id=e_id, num_nodes=n_id.numel(),
                     input_id=torch.arange(seeds.numel(), device=self.device) if input_id is None else input_id,
                     batch_size=seeds.numel(), num_sampled_nodes=nodes, num_sampled_edges=edges)
        for name, t in self.node_attrs.items():
            batch[name] = t.index_select(0, n_id)
        return batch

    def _degrees(self, frontier: Tensor, fanout: int,
                 valid: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Per frontier node: first in-edge position, in-degree, edges taken (``min(deg, fanout)``, all for -1) and
        whether it draws a subset (``deg > fanout``); then the counts the host reads to size the hop: ``[edges
        taken, nodes drawing a subset, their in-edges]``. ``valid`` masks the entries of a padded frontier."""
        lo = self.colptr[frontier].long()
        deg = self.colptr[frontier + 1].long() - lo
        if fanout < 0 or fanout >= self.num_edges:  # no node has more than E in-edges: all of them, no draws
            take, draw = deg, torch.zeros_like(deg, dtype=torch.bool)
        else:
            take, draw = deg.clamp(max=fanout), deg > fanout
        if valid is not None:
            take, draw = take * valid, draw & valid
        return lo, deg, take, draw, torch.stack([take.sum(), draw.sum(), (deg * draw).sum()])

    def _subsets(self, deg: Tensor, fanout: int, num_edges: int) -> Tensor:
        """``[n, fanout]`` sorted distinct in-edge offsets for ``n`` nodes of in-degree ``deg > fanout`` (``num_edges``
        in all): Floyd's algorithm up to :data:`_FLOYD_MAX`, random keys above. Memory ``n * fanout < num_edges``."""
        if fanout <= _FLOYD_MAX:
            return _choose(deg, fanout, self.generator)
        return _choose_by_keys(deg, fanout, num_edges, self.generator)

    def _sample(self, seeds: Tensor) -> tuple[Tensor, Tensor, Tensor, list[int], list[int]]:
        dev, state = self.device, self._map
        num_seeds = seeds.numel()
        if num_seeds and not self.num_nodes:
            raise ValueError(f"seeds must be node ids in [0, num_nodes=0), got {num_seeds} seeds")
        # Seeds outside the graph would index past the node map (on CUDA a device-side assert): clamped here, counted,
        # and refused at the first host read below, before anything uses them.
        outside = ((seeds < 0) | (seeds >= self.num_nodes)).sum()
        seeds = seeds.clamp(0, max(self.num_nodes - 1, 0))
        # A repeated seed: its first slot is the one other nodes' edges point to (min position wins).
        state.scatter_reduce_(0, seeds, torch.arange(num_seeds, device=dev), reduce="amin")
        frontier, first = seeds, 0  # the frontier's local ids are first .. first + len - 1
        lo, deg, take, draw, counts = self._degrees(frontier, self.fanout[0])
        # host sync 1: the first hop's edge count, and how many seeds draw a subset, with how many in-edges
        total, drawing, drawn_from, bad = torch.cat([counts, outside.view(1)]).tolist() if num_seeds else (0, 0, 0, 0)
        if bad:
            raise ValueError(f"seeds must be node ids in [0, num_nodes={self.num_nodes}), got {bad} outside")
        node_parts, src_parts, dst_parts, pos_parts = [seeds], [], [], []
        nodes, edges = [num_seeds], []
        for hop, fanout in enumerate(self.fanout):
            n_before, last = sum(nodes), hop == len(self.fanout) - 1
            if total == 0:  # nothing to take (an empty frontier, or no in-edges): no new nodes, no sync
                frontier, first = frontier[:0], n_before
                node_parts.append(frontier)
                nodes.append(0)
                edges.append(0)
                if not last:
                    lo, deg, take, draw = lo[:0], deg[:0], take[:0], draw[:0]
                continue
            # The hop's edges, frontier-major: edge s belongs to frontier node owner[s], its r-th taken in-edge.
            owner = torch.repeat_interleave(torch.arange(frontier.numel(), device=dev), take, output_size=total)
            start = torch.cumsum(take, 0) - take
            r = torch.arange(total, device=dev) - start[owner]
            if drawing:  # nodes with more in-edges than the fan-out take a random subset, the rest all of theirs
                rows = _compact(draw, drawing)
                slots = start[rows, None] + torch.arange(fanout, device=dev)  # their `fanout` edges each
                r.scatter_(0, slots.view(-1), self._subsets(deg[rows], fanout, drawn_from).view(-1))
            pos = lo[owner] + r
            src = self.row[pos].long()
            # Relabel: a node not in the batch yet gets the next local id at its first edge of this hop.
            edge_no = torch.arange(total, device=dev)
            state.scatter_reduce_(0, src, edge_no + _CLAIM, reduce="amin")
            is_new = state[src] == edge_no + _CLAIM
            rank = torch.cumsum(is_new, 0) - 1
            state.scatter_(0, torch.where(is_new, src, self.num_nodes), n_before + rank)  # others write the spare entry
            src_parts.append(state[src])
            dst_parts.append(first + owner)
            pos_parts.append(pos)
            edges.append(total)
            # The next frontier in local-id order, in a buffer of `total + 1` (slot `total` takes the non-new edges).
            grown = torch.zeros(total + 1, dtype=torch.int64, device=dev)
            grown.scatter_(0, torch.where(is_new, rank, total), src)
            new_t = is_new.sum()
            if last:
                new = int(new_t)  # host sync: the last hop's new nodes
            else:  # the next hop's degrees before the sync, so that one read sizes both
                valid = torch.arange(total + 1, device=dev) < new_t
                lo, deg, take, draw, counts = self._degrees(grown, self.fanout[hop + 1], valid)
                new, total, drawing, drawn_from = torch.cat([new_t.view(1), counts]).tolist()  # host sync
                lo, deg, take, draw = lo[:new], deg[:new], take[:new], draw[:new]
            frontier, first = grown[:new], n_before
            node_parts.append(frontier)
            nodes.append(new)
        n_id = torch.cat(node_parts)
        state.index_fill_(0, n_id, _UNSEEN)  # only what this batch touched
        empty = [torch.empty(0, dtype=torch.int64, device=dev)]
        edge_index = torch.stack([torch.cat(src_parts + empty), torch.cat(dst_parts + empty)])
        return n_id, edge_index, torch.cat(pos_parts + empty), nodes, edges
