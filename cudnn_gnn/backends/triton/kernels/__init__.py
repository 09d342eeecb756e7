"""Fused Triton kernels for GAT / GATv2 attention over a CSC graph, and their launchers, one module per pass.

Imported lazily by :mod:`cudnn_gnn.backends.triton` (Triton reads ``TRITON_INTERPRET`` when it decorates the
kernels, so the interpreter can be switched on any time before the first call).

Layout: one program per (destination row, head group) for the forward and the destination pass of the backward,
one per (source row, head group) for the source pass. A head group is ``HG`` consecutive heads (a power of two),
normally all of them: the program then gathers each edge's whole source feature row once, contiguously, as a
``[BLOCK_E, HG, BLOCK_C]`` tile (``BLOCK_C`` = the head width rounded up to a power of two; padded heads and
channels are masked), reduces over channels for the per-head logits ``[BLOCK_E, HG]`` and keeps the online-softmax
state per head (``[HG]``). Only where ``HG * BLOCK_C`` would pass :data:`MAX_TILE_D` (wide rows: 8 x 256, 3 x 1000)
are the heads split over several programs, down to one head per program. See :func:`default_launch_shape` for the rules.

Hub rows are cut into chunks: the programs take the items of a per-graph work list (built once by
:func:`cudnn_gnn.backends.triton.worklists.work_list`), a whole row or a chunk of at most ``B`` edges of a longer one, heaviest
first (a sampled block's short rows: whole, in row order). A chunk writes a partial state to its slot (forward:
per-head max, sum of exponentials and unnormalised accumulator; backward: per-head ``delta`` and the destination- or
source-side sums), and one merge program per hub row combines the slots in their fixed order (log-sum-exp for the
forward, plain sums for the backward).

A program walks its row (or chunk) in blocks of ``BLOCK_E`` edges, one block size for every row: a kernel's
registers are allocated for its largest tile, so a bigger block that only long rows used would cost every program
(mostly light rows) its occupancy (measured: docs/performance.md, "One block size"). GAT's delta pass and
destination sum are not row walks: dense passes over the rows' ``dout`` and ``out``, and a segmented sum of ``[E, H]``
floats in CSC order over blocks of edges.

Softmax statistics are kept per (destination, head) as a log-sum-exp ``[Nd, H]`` float32; the backward recomputes
the logits from it and never stores anything of size ``[E, H*C]``. GAT's backward (:func:`launch_gat_backward`)
gathers one feature row per edge, in its source pass; its delta pass reads node rows in order and its destination
sum per-edge ``[E, H]`` data only. GATv2's (:func:`launch_backward_dst`, :func:`launch_backward_src`) gathers rows in both passes.

Node-sized gradients are written by exactly one program each (destinations in a destination pass, sources in the
source pass over the reverse CSC; for a hub, its merge program), per-edge gradients once per edge (GAT's by the
edge's source program), and GATv2's attention-vector gradient as per-row and per-chunk partial sums reduced in a
fixed order by the caller: no atomics anywhere, so every result is bitwise repeatable.

Where a program stores values (a reduction's layout) and reads them back in another layout, a ``tl.debug_barrier()``
separates the write from the read and the read from the next overwrite (threads of other warps hold the other
layout; the sequential interpreter cannot show such races).

Pointer offsets are computed in the call's offset width, the kernels' ``I64`` constexpr (:func:`common._idx`): int32
where every tensor a call's kernels index stays below 2**31 elements with a pad of rows for masked lanes, else int64
(``N * H * C`` and ``E * H * C`` may pass 2**31 with int32 indices; the rule:
:func:`~cudnn_gnn.backends.triton.tuning.int64_offsets`, decided once a call). int32 offsets take fewer registers a
thread (docs/performance.md, "int32 offsets"). Dropout's Philox counters are 64-bit either way (the same draws);
arithmetic is float32 whatever the storage dtype; stores cast to the destination tensor's dtype.

The heads ``H`` and the head width ``C`` are constexprs of the row kernels (the forward, the destination and source
passes, GAT's delta and source passes; one compiled variant per model shape, as ``HG`` and ``BLOCK_C`` already
were): with them known, a thread's offsets ``h * C + c``
inside a row are constants added to one row address per edge instead of 64-bit addresses computed and held per
element: fewer registers a thread, more warps resident (measured: docs/performance.md, "Heads and
width as constants").
"""

from __future__ import annotations

from cudnn_gnn.backends.triton.kernels import (
    backward_dst,
    backward_edge,
    backward_src,
    common,
    forward,
    gat_backward,
    node_scores,
    packed_offsets,
)
from cudnn_gnn.backends.triton.kernels.backward_dst import launch_backward_dst
from cudnn_gnn.backends.triton.kernels.backward_edge import launch_backward_edge
from cudnn_gnn.backends.triton.kernels.backward_src import launch_backward_src
from cudnn_gnn.backends.triton.kernels.common import ACTIVATION_CODES, n_items
from cudnn_gnn.backends.triton.kernels.forward import launch_forward
from cudnn_gnn.backends.triton.kernels.gat_backward import launch_gat_backward
from cudnn_gnn.backends.triton.kernels.node_scores import launch_node_scores, launch_node_scores_backward
from cudnn_gnn.backends.triton.kernels.packed_offsets import launch_checked_offsets

__all__ = ["ACTIVATION_CODES", "KERNEL_MODULES", "launch_backward_dst", "launch_backward_edge", "launch_backward_src",
           "launch_checked_offsets", "launch_forward", "launch_gat_backward", "launch_node_scores",
           "launch_node_scores_backward", "n_items"]

KERNEL_MODULES = (forward, backward_dst, backward_src, backward_edge, gat_backward, node_scores, common,
                  packed_offsets)
"""The modules that hold kernels and launch them (a launcher looks its kernels up in its own module's globals): one
per pass, ``common`` for the hub merges, and ``packed_offsets`` for the graph attention's batch check."""
