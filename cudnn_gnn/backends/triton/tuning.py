"""Every launch decision of the Triton backend, in one place: tile and block sizes, warps, the tuned shapes, the
hub-chunk size and the fused GATv2 edge projection's bounds. No triton import: the op and the tests read it
without compiling anything.

The sizes a test moves for a run (``MAX_TILE_D``, the chunk bounds) are read at call time through this module; a
launch shape is replaced per call through :class:`~cudnn_gnn.backends.triton.TritonOptions` ``launch`` (what the tuning
sweeps, ``benchmarks/investigations/triton_tuning.py`` and ``bench_sampled.py --sweep``, run), read by
:func:`launch_config`, :func:`dst_sum_shape` and :func:`node_score_shape`.
"""


from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from torch import Tensor

__all__ = ["DST_SUM_TILE", "EDGE_PROGRAMS", "INT32_OFFSETS_BELOW", "INT64_FASTER_TILES", "KERNELS",
           "FUSED_EXTRA_SHARE", "MAX_CHUNK_E", "MAX_FUSED_EDGE_DIM", "MAX_FUSED_TILE", "MAX_FUSED_WIDTH",
           "MAX_TILE_D", "MAX_WARPS", "MIN_CHUNK_E", "MIN_EDGE_SPAN", "OFFSET_PAD_ROWS", "SCORE_BWD_PROGRAMS",
           "SCORE_BWD_TILE", "SCORE_TILE", "TUNED_SHAPES", "cdiv", "check_launch", "chunk_size",
           "default_launch_shape", "dst_sum_shape", "edge_kernel_shape", "edge_span", "fuse_edge_projection",
           "int64_offsets", "kernel_int64_offsets", "launch_config", "launch_override", "launch_shape", "next_pow2",
           "node_score_shape", "score_bwd_programs", "tile_classes"]


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` on the host. ``triton.cdiv`` (and ``triton.next_power_of_2``) are Triton constexpr functions:
    a host call goes through their Python wrapper (argument unwrapping, an import), and the launchers make several
    a step."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for ``n <= 1``), on the host. ``triton.next_power_of_2`` and
    ``triton.cdiv`` are Triton constexpr functions: a host call goes through their Python wrapper (argument
    unwrapping, an import), and the launchers make several a step."""
    return 1 << max(0, (n - 1).bit_length())


MAX_TILE_D = 1024
"""The widest padded feature slice ``HG * BLOCK_C`` one program holds: 8 x 32 and 3 x 250 (4 x 256) take all heads
in one program, 8 x 256 two programs of 4 heads, a head wider than this one program per head."""


@functools.cache
def default_launch_shape(heads: int, c: int, v2: bool, max_tile_d: int = MAX_TILE_D) -> tuple[int, int, int, int, int]:
    """``(BLOCK_E, BIG_E, HG, BLOCK_C, num_warps)`` for ``heads`` heads of width ``c``.

    ``BLOCK_C`` = ``c`` rounded up to a power of two; ``HG`` (heads per program) = ``heads`` rounded up to a power of
    two, halved until ``HG * BLOCK_C <= max_tile_d`` (at least 1). With the tile width ``W = HG * BLOCK_C``:
    ``BLOCK_E = clamp(2048 / W, 2, 16)`` edges for light rows (16 x 128 ... 8 x 256 ... 2 x 1024) and
    ``BIG_E = clamp(budget / W, BLOCK_E, 64)`` (a long-row block size: the warps rule below reads it for every
    kernel), with a register budget of 8192 tile elements (GAT, one
    live feature tile) or 4096 (GATv2, whose backward holds several); ``num_warps = clamp(min(BIG_E * W, 4096) / 1024,
    2, 8)``: about 32 float32 registers a thread per GATv2 big tile, 64 for GAT's. GAT used to take 8 warps at 8 x 32
    (twice GATv2's 4): a light row's ``[8, 8, 32]`` tile is then 8 elements a thread and every reduction over the edge
    axis crosses 8 warps through shared memory, and half as many programs fit on an SM, in a kernel whose programs are
    mostly light rows (arxiv: 14 edges a row on average, 10 the median). Independent of the storage dtype: tiles are float32 in
    registers."""
    block_c = next_pow2(max(c, 1))
    hg = min(next_pow2(max(heads, 1)), max(1, max_tile_d // block_c))
    width = hg * block_c
    block_e = max(2, min(16, 2048 // width))
    big_e = max(block_e, min(64, (4096 if v2 else 8192) // width))
    num_warps = max(2, min(8, min(big_e * width, 4096) // 1024))
    return block_e, big_e, hg, block_c, num_warps


KERNELS = ("fwd", "dst", "src", "gat_src", "gat_delta", "gat_dst", "scores", "scores_bwd")
"""The kernels whose launch shape this module decides (and :class:`~cudnn_gnn.backends.triton.TritonOptions`
``launch`` may replace): through :func:`launch_shape`, the forward, GATv2's (and GAT's two-gather) destination and
source passes, GAT's one-gather source pass and its attention-gradient delta pass; through :func:`dst_sum_shape`,
GAT's destination sum (``"gat_dst"``: edges a block and warps, all heads in one program); through
:func:`node_score_shape`, GAT's node-score kernel and its backward (``"scores"``, ``"scores_bwd"``: rows a block,
warps and heads a program). New names go last: a call's launch codes hold a kernel's index here."""


MAX_WARPS = 32
"""The most warps a launch override may ask for: 1024 threads, a CUDA block's limit."""


def check_launch(kernel: str, shape: Sequence[int]) -> None:
    """Refuse (``ValueError``) a launch override ``shape`` for ``kernel`` that no launch could take: a name not in
    :data:`KERNELS`; not ``(BLOCK_E, num_warps)`` or ``(BLOCK_E, num_warps, HG)`` positive ints, powers of two, at
    most :data:`MAX_WARPS` warps; an ``HG`` for ``"gat_dst"`` (its programs take every head). Checked where
    :class:`~cudnn_gnn.backends.triton.TritonOptions` is made, before any kernel sees it."""
    if kernel not in KERNELS:
        raise ValueError(f"launch must name kernels of {', '.join(map(repr, KERNELS))}, got {kernel!r}")
    if len(shape) not in (2, 3) or not all(isinstance(v, int) and v >= 1 for v in shape):
        raise ValueError(f"launch[{kernel!r}] must be (BLOCK_E, num_warps) or (BLOCK_E, num_warps, HG) "
                         f"positive ints, got {shape!r}")
    if any(v & (v - 1) for v in shape):
        raise ValueError(f"launch[{kernel!r}] must hold powers of two, got {shape!r}")
    if shape[1] > MAX_WARPS:
        raise ValueError(f"launch[{kernel!r}] must ask for at most {MAX_WARPS} warps, got {shape[1]}")
    if kernel == "gat_dst" and len(shape) == 3:
        raise ValueError(f"launch['gat_dst'] must be (BLOCK_E, num_warps): the destination sum takes every head in "
                         f"one program, got {shape!r}")


def launch_override(kernel: str, launch: Sequence[int], block: int, num_warps: int, hg: int) -> tuple[int, int, int]:
    """``(block, num_warps, hg)``, a kernel's shape by its rule, as a call's ``launch`` codes (flat ``(kernel index in
    KERNELS, BLOCK_E, num_warps, HG or 0)`` quadruples, :meth:`~cudnn_gnn.backends.triton.TritonOptions.launch_codes`)
    replace it where they name ``kernel``: its block and warps, and its heads a program where not 0."""
    if launch:
        code = KERNELS.index(kernel)
        for i in range(0, len(launch), 4):
            if launch[i] == code:
                return launch[i + 1], launch[i + 2], launch[i + 3] or hg
    return block, num_warps, hg


TUNED_SHAPES: Mapping[tuple[str, bool, int, str], tuple[int, int]] = MappingProxyType({
    # tiles at most 256 wide (8 x 32, 8 x 8, 4 x 47 padded to 4 x 64, ...): the H200 sweeps of
    # benchmarks/investigations/triton_tuning.py on the arxiv shape, 8 heads x 32
    ("fwd", False, 4, "narrow"): (8192, 1), ("fwd", False, 2, "narrow"): (2048, 1),
    ("dst", False, 4, "narrow"): (8192, 1), ("dst", False, 2, "narrow"): (8192, 1),
    ("src", False, 4, "narrow"): (16384, 1), ("src", False, 2, "narrow"): (16384, 1),
    ("fwd", True, 4, "narrow"): (2048, 2), ("fwd", True, 2, "narrow"): (1024, 2),
    ("dst", True, 4, "narrow"): (8192, 1), ("dst", True, 2, "narrow"): (1024, 2),
    ("src", True, 4, "narrow"): (8192, 1), ("src", True, 2, "narrow"): (1024, 2),
    ("gat_src", False, 4, "narrow"): (16384, 1), ("gat_src", False, 2, "narrow"): (1024, 2),
    ("gat_delta", False, 4, "narrow"): (2048, 1),
    # full tiles exactly 256 wide (no padded lanes: 8 x 32, where it was swept), before "narrow"
    ("gat_src", False, 4, "full_256"): (2048, 2),
    # full tiles exactly 64 wide (8 x 8: the GAT paper's hidden layer), before "narrow": the H200 sweep of
    # triton_tuning.py --heads 8 --channels 8 on the arxiv shape (float32's source pass), the H100 ones with
    # --dropout 0.6 (the forwards, bfloat16's source pass)
    ("fwd", False, 4, "full_64"): (1024, 1), ("gat_src", False, 4, "full_64"): (2048, 1),
    ("fwd", False, 2, "full_64"): (512, 1), ("gat_src", False, 2, "full_64"): (512, 1),
    # one padded head 64 wide (1 x 40: the GAT paper's output layer on arxiv), before "narrow": the H100 sweep of
    # triton_tuning.py --heads 1 --channels 40 --dropout 0.6 (bfloat16; float32 keeps "narrow", which won there)
    ("fwd", False, 2, "pad_64"): (4096, 1), ("gat_src", False, 2, "pad_64"): (1024, 1),
    # tiles 512 wide: the H200 sweep of bench_sampled.py --sweep on papers100M-shaped sampled blocks, 4 x 128
    ("fwd", False, 2, "wide_512"): (8192, 1), ("src", False, 2, "wide_512"): (2048, 1),
})
"""The launch shapes measured faster than :func:`default_launch_shape`' rule, one table: ``(kernel, v2, element bytes of the
rows the kernel gathers per edge, tile class)`` -> ``(bytes of gathered rows a block, num_warps)``, read by
:func:`launch_shape` (``BLOCK_E = bytes / (W * element bytes)``, clamped to 2..32, for a tile ``W = HG * BLOCK_C``
wide). Kernels: ``"fwd"`` (forward, gathers ``x_src``), ``"dst"`` (backward destination pass,
``x_src``), ``"src"`` (backward source pass, the output gradient), ``"gat_src"`` (GAT's one-gather source pass, the
output gradient), ``"gat_delta"`` (its delta pass, keyed by the output gradient's element size). Tile classes
(:func:`tile_classes`): ``"narrow"``, at most 256 wide; ``"full_256"``, exactly 256 wide with a head width a power of
two, ``"full_64"``, the same at 64 wide, and ``"pad_64"``, 64 wide with padded lanes, each taking precedence over
``"narrow"`` there; ``"wide_512"``, 512 wide.

Why these: the kernels with the most live tiles (GAT's one-gather source pass, GATv2's forward and its 16-bit
backward) run two warps on blocks of two edges at 8 x 32: few registers a thread, so many programs resident, each
with its gathers in flight. GAT's float32 one-gather source pass on full 256-wide tiles takes two edges a block;
measured on products' last layer (4 heads x 47, padded to 4 x 64, sources of about 50 out-edges), that was slower
than the 16 KiB block of ``"narrow"``, which holds there (which of the two differences decides was not measured).
At 512 wide (GAT in bfloat16) one warp a program; the source pass takes the smallest block because a sampled
block's sources have one or two out-edges; a combination not listed (float32, GATv2, the destination pass: not swept
at this width) keeps :func:`default_launch_shape`. On full 64-wide tiles (8 x 8, the arxiv step's swept with its
attention dropout) GAT's forward and one-gather source pass take one warp and blocks of 4 edges, but float32's
source pass 8: ``"narrow"``'s blocks are 16-32 edges there, most of them masked lanes on rows of 14 edges. One
padded head 64 wide (1 x 40) keeps ``"narrow"`` in float32 (32 edges a block, the sweep's best); in bfloat16 the
forward takes 32 edges and the source pass 8, one warp each (``"narrow"``'s were 16 edges and 8 on two warps).
Figures: docs/performance.md ("Launch shapes"). Read-only: :func:`launch_shape` caches what it derives from it."""


def tile_classes(width: int, c: int, block_c: int) -> tuple[str, ...]:
    """The :data:`TUNED_SHAPES` tile classes of a tile ``width = HG * BLOCK_C`` wide for heads of width ``c`` (padded
    to ``block_c``), most specific first."""
    if width == 256 and c == block_c:
        return ("full_256", "narrow")
    if width == 64:
        return ("full_64" if c == block_c else "pad_64", "narrow")
    if width <= 256:
        return ("narrow",)
    return ("wide_512",) if width <= 512 else ()


@functools.cache
def launch_shape(kernel: str, heads: int, c: int, v2: bool, elem_bytes: int,
                 max_tile_d: int = MAX_TILE_D) -> tuple[int, int, int, int]:
    """``(BLOCK_E, HG, BLOCK_C, num_warps)`` of ``kernel`` (a :data:`TUNED_SHAPES` kernel name) for ``heads`` heads
    of width ``c`` gathering rows of ``elem_bytes`` bytes an element: the first :data:`TUNED_SHAPES` entry ``(bytes,
    warps)`` of the tile's classes (:func:`tile_classes`), which runs ``warps`` warps a program and blocks of
    ``bytes`` of gathered rows (``BLOCK_E = bytes / (W * elem_bytes)``, clamped to 2..32; 8 in float32 and 16 in
    bfloat16 at 8 KiB and 8 x 32), else :func:`default_launch_shape`.

    Why few warps: more programs resident, more gathers in flight, no cross-warp reductions, in kernels whose
    programs are mostly light rows (arxiv: 14 edges a row on average, 10 the median)."""
    block_e, _, hg, block_c, num_warps = default_launch_shape(heads, c, v2, max_tile_d)
    width = hg * block_c
    for tile in tile_classes(width, c, block_c):
        tuned = TUNED_SHAPES.get((kernel, v2, min(elem_bytes, 4), tile))
        if tuned is not None:
            nbytes, num_warps = tuned
            return max(2, min(32, nbytes // (width * elem_bytes))), hg, block_c, num_warps
    return block_e, hg, block_c, num_warps


def edge_kernel_shape(heads: int, c: int, dim_edge: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK, HG, BLOCK_C, DE_PAD, num_warps)`` of :func:`_bwd_edge_kernel`: all heads in one program
    (``HG = next_pow2(H)``), ``BLOCK = clamp(2048 / (HG * BLOCK_C), 2, 32)`` edges a block (the GATv2 tiles'
    budget), 8 warps where the ``[DE_PAD, HG, BLOCK_C]`` gradient partial passes 2048 registers' worth, else 4."""
    block_c = next_pow2(max(c, 1))
    hg = next_pow2(max(heads, 1))
    de_pad = next_pow2(max(dim_edge, 1))
    width = hg * block_c
    block = max(2, min(32, 2048 // width))
    return block, hg, block_c, de_pad, 8 if de_pad * width > 2048 else 4


def launch_config(x_src: Tensor, heads: int, v2: bool, kernel: str, gathered: Tensor,
                  launch: Sequence[int] = ()) -> tuple[int, int, dict[str, int]]:
    """``(C, head groups, launch keywords)`` for a call of ``kernel`` (see :func:`launch_shape`); ``gathered`` is the
    tensor whose rows it gathers per edge. ``launch``: a call's overrides, flat ``(kernel index in KERNELS, BLOCK_E,
    num_warps, HG or 0)`` quadruples (:meth:`~cudnn_gnn.backends.triton.TritonOptions.launch_codes`); ``kernel``'s, where
    there, replaces the rule's ``BLOCK_E`` and ``num_warps`` (and ``HG`` where not 0)."""
    c = x_src.shape[1] // heads
    block_e, hg, block_c, num_warps = launch_shape(kernel, heads, c, v2, gathered.element_size(), MAX_TILE_D)
    block_e, num_warps, hg = launch_override(kernel, launch, block_e, num_warps, hg)
    return c, cdiv(heads, hg), dict(BLOCK_E=block_e, HG=hg, BLOCK_C=block_c, num_warps=num_warps)


SCORE_TILE = 4096
"""The node-score kernel's rows a block: ``BLOCK_N = clamp(SCORE_TILE / (HG * BLOCK_C), 1, 64)`` (a feature tile of
at most ~32 float32 registers a thread at 4 warps; two tiles where ``x_dst`` is its own tensor)."""

SCORE_BWD_TILE = 512
"""The node-score backward's rows a block: ``BLOCK_N = clamp(SCORE_BWD_TILE / (HG * BLOCK_C), 1, 64)`` (8 rows at 8 x 8
and at one head of 40: each row's gradient is an outer product, so a small block keeps the partial sums in
registers)."""


def node_score_shape(kernel: str, heads: int, c: int, launch: Sequence[int] = ()) -> tuple[int, int, int, int, int]:
    """``(BLOCK_N, HG, BLOCK_C, head groups, num_warps)`` of GAT's node-score kernel (``kernel`` ``"scores"``: one
    block of ``BLOCK_N`` rows a program) or its backward (``"scores_bwd"``: blocks of ``BLOCK_N`` rows, about
    :data:`SCORE_BWD_PROGRAMS` programs) for ``heads`` heads of width ``c``, :func:`default_launch_shape`' head
    groups. The forward: ``BLOCK_N`` from :data:`SCORE_TILE`, ``min(4, HG)`` warps (one warp reduces a one-head row
    without crossing warps); the backward: ``BLOCK_N`` from :data:`SCORE_BWD_TILE`, ``max(1, 4 / HG)`` warps (swept
    on the arxiv step's 8 x 8 and 1 x 40 layers with dropout: docs/performance.md, "Launch shapes"). ``launch``: a
    call's overrides (see :func:`launch_override`); ``kernel``'s, where there, replaces ``BLOCK_N`` and
    ``num_warps`` (and ``HG`` where not 0)."""
    _, _, hg, block_c, _ = default_launch_shape(heads, c, False, MAX_TILE_D)
    if kernel == "scores":
        block_n, num_warps = max(1, min(64, SCORE_TILE // (hg * block_c))), min(4, hg)
    else:
        block_n, num_warps = max(1, min(64, SCORE_BWD_TILE // (hg * block_c))), max(1, 4 // hg)
    block_n, num_warps, hg = launch_override(kernel, launch, block_n, num_warps, hg)
    return block_n, hg, block_c, cdiv(heads, hg), num_warps


DST_SUM_TILE = 2048
"""The ``dz`` elements (edges x padded heads) a block of GAT's destination sum holds by default (see
:func:`dst_sum_shape`)."""


def dst_sum_shape(heads: int, launch: Sequence[int] = ()) -> tuple[int, int, int]:
    """``(BLOCK, HG, num_warps)`` of GAT's destination sum (``_bwd_gat_dst_kernel``, a segmented scan of ``dz [E,
    H]`` in CSC order, one block of ``BLOCK`` edges a program, whose rows that cross blocks the node scores' backward
    joins as it reads them): every head in one program (``HG = next_pow2(H)``), ``BLOCK = max(16, DST_SUM_TILE /
    HG)`` edges (2048 at one head, 256 at 8), a warp per 256 edges of the block (8 warps at one head, 1 at 8; swept
    on the arxiv step's layers: docs/performance.md, "Launch shapes"). ``launch``: a call's overrides (see
    :func:`launch_override`); ``"gat_dst"``'s, where there, replaces ``BLOCK`` (the scan's and its reader's) and the
    scan's ``num_warps``."""
    hg = next_pow2(max(heads, 1))
    block = max(16, DST_SUM_TILE // hg)
    block, num_warps, _ = launch_override("gat_dst", launch, block, max(1, block // 256), hg)
    return block, hg, num_warps


SCORE_BWD_PROGRAMS = 4096
"""About how many programs (per head group) :func:`launch_node_scores_backward` launches: each walks
``ROWS = BLOCK_N * ceil(blocks / SCORE_BWD_PROGRAMS)`` rows, so the head vectors' partials stay ``[<= 4096, 2, H*C]``
(8 MiB at 8 x 32) however many rows there are, and a small graph still gets one block of rows a program. Measured
against 1,024 and 16,384: docs/performance.md, "The fold as a kernel"."""


def score_bwd_programs(rows: int, block_n: int) -> tuple[int, int]:
    """``(programs, blocks a program)`` of the node-score backward over ``rows`` rows in blocks of ``block_n`` rows:
    ``blocks a program = ceil(blocks / SCORE_BWD_PROGRAMS)``, ``programs = ceil(blocks / blocks a program)`` (at
    most :data:`SCORE_BWD_PROGRAMS`, at most one per block; none for no rows)."""
    blocks = cdiv(rows, block_n)
    per = max(1, cdiv(blocks, SCORE_BWD_PROGRAMS))
    return cdiv(blocks, per), per


MIN_CHUNK_E = 256
MAX_CHUNK_E = 1024
"""Bounds of the chunk size of :func:`chunk_size` (module globals so that tests can force tiny chunks)."""


def chunk_size(num_edges: int) -> int:
    """The most edges one program walks, ``B = clamp(next_pow2(ceil(E / 4096)), MIN_CHUNK_E, MAX_CHUNK_E)``.

    Rows (and, in the backward source pass, sources) with more than ``B`` edges are cut into chunks of ``B``. Why:
    a program's time grows with its edge count, and the kernel ends with its longest program; with ``B >= E / 4096``
    there are at most ~4096 full chunks, several waves of the ~1-2k programs an H200 keeps resident, so a hub no
    longer sets the tail, while a chunk of at least 256 edges (4 to 128 big blocks) amortises its partial-state write
    and the merge. arxiv (1.17M edges): 512; Cora: 256; products-sized graphs: 1024. Depends on ``E`` only, so the
    work list built for a graph stays valid."""
    return max(MIN_CHUNK_E, min(MAX_CHUNK_E, _pow2_cover(num_edges, 4096, MAX_CHUNK_E, start=MIN_CHUNK_E)))


def _pow2_cover(total: int, per: int, cap: int | None = None, *, start: int = 1) -> int:
    """``max(s, next_pow2(ceil(total / per)))``, or the first power of two ``>= cap`` if that is smaller, where
    ``s`` is the largest power of two ``<= start`` (callers that clamp below at ``start`` lose nothing). By
    comparisons only: with a symbolic ``total`` (a sampled block's edge count under ``torch.compile(dynamic=True)``)
    each one is a range guard that every batch of a similar size passes, where ``bit_length`` would pin the exact
    count and recompile for every batch; starting at ``s`` keeps the guards to the thresholds that matter."""
    p = 1 << max(0, start.bit_length() - 1)
    while p * per < total and (cap is None or p < cap):
        p *= 2
    return p


MAX_FUSED_EDGE_DIM = 16
MAX_FUSED_TILE = 4096
MAX_FUSED_WIDTH = 1024
FUSED_EXTRA_SHARE = 0.25
EDGE_PROGRAMS = 2048
MIN_EDGE_SPAN = 256
"""The fused GATv2 edge projection's bounds (module globals, so that tests can move them; see
:func:`fuse_edge_projection` and :func:`edge_span`)."""


def edge_span(num_edges: int) -> int:
    """The CSC positions one program of the fused edge backward takes: ``max(MIN_EDGE_SPAN, next_pow2(ceil(E /
    EDGE_PROGRAMS)))``, so ``P = ceil(E / span)`` programs, at most ``EDGE_PROGRAMS`` (a wave or two of an H200's
    resident programs) and at most one per ``MIN_EDGE_SPAN`` edges: the ``[P, H*C, De]`` gradient partials stay a
    small multiple of ``H*C*De`` and at most ``4 * De / (MIN_EDGE_SPAN * element size)`` of an ``[E, H*C]``
    buffer."""
    return max(MIN_EDGE_SPAN, _pow2_cover(num_edges, EDGE_PROGRAMS, start=MIN_EDGE_SPAN))


def fuse_edge_projection(num_edges: int, heads: int, dim: int, dim_edge: int, elem_bytes: int,
                         needs_grad: bool) -> bool:
    """Whether the Triton kernels project GATv2's raw edge features themselves (the fused path: ``edge_attr [E, De]``
    and ``lin_edge_weight [H*C, De]`` in, nothing of size ``[E, H*C]`` allocated forward or backward) rather than
    take ``edge_attr @ lin_edge_weight^T`` computed by torch first (the projected path). The one rule; all of:

    - ``De <= MAX_FUSED_EDGE_DIM`` (16): every kernel unrolls a loop of ``De`` steps per edge block, each one
      more gather of an element a row and a multiply-add over the feature tile; past 16 that arithmetic rivals the
      row gathers the kernels are bound by, and the raw rows approach the projected ones in size.
    - the edge backward's tile, all heads in one program (``W = next_pow2(H) * next_pow2(C) <= MAX_FUSED_WIDTH``,
      1024), with its ``[next_pow2(De), W]`` float32 partial of the weight gradient in registers
      (``<= MAX_FUSED_TILE``, 4096: 32 a thread at 4 warps). The edge gradient ``dz_e W`` sums over every head.
    - without gradients, nothing else (the fused forward allocates nothing); with them, the extra memory, the
      weight gradient's partials ``[P, H*C, De]`` float32 (``P`` programs, :func:`edge_span`), at most
      ``FUSED_EXTRA_SHARE`` (a quarter) of the ``[E, H*C]`` buffer of ``elem_bytes`` elements it removes (of two:
      the projection and its gradient). Only tiny graphs fail this one.
    """
    width = next_pow2(heads) * next_pow2(dim // max(heads, 1))
    if not 1 <= dim_edge <= MAX_FUSED_EDGE_DIM or width > MAX_FUSED_WIDTH or next_pow2(dim_edge) * width > MAX_FUSED_TILE:
        return False
    if not needs_grad:
        return True
    partials = -(-num_edges // edge_span(num_edges)) * dim * dim_edge * 4
    return partials <= FUSED_EXTRA_SHARE * num_edges * dim * elem_bytes


INT32_OFFSETS_BELOW = 2**31
"""The kernels compute their offsets in int32 where every tensor a call's kernels index stays below this many
elements, its pad included (:func:`int64_offsets`): int32's range."""

OFFSET_PAD_ROWS = 8192
"""Rows past a tensor's last row that :func:`int64_offsets` counts for masked lanes: a kernel's last block (edges
past a row's end, rows past the last one in the dense passes, padded heads and channels) computes offsets beyond the
tensor, which it never loads but which must not wrap. The rules' blocks reach at most 4096 rows past the end (GAT's
dense delta pass at one head of width 1; edge blocks 2048 at most, padded heads less than four rows)."""


def int64_offsets(shapes: Iterable[tuple[int, int]], launch: Sequence[int] = ()) -> bool:
    """Whether a call's sizes need int64 offsets: True where one of the tensors its kernels index, ``shapes``, each
    ``(rows, row width)`` in elements, reaches :data:`INT32_OFFSETS_BELOW` elements with :data:`OFFSET_PAD_ROWS` rows
    more, or more still where the call's ``launch`` overrides (flat ``(kernel index, BLOCK_E, num_warps, HG or 0)``
    quadruples, :meth:`~cudnn_gnn.backends.triton.TritonOptions.launch_codes`) ask for a larger block: a masked lane
    reaches a block past the last row. Else int32, which every offset then fits: int64 offsets cost a thread
    registers (two a lane, and multiplies of several instructions) that its occupancy pays for (figures:
    docs/performance.md, "int32 offsets"). Decided once a call (:func:`~cudnn_gnn.backends.triton.call.build_call`):
    the call's ``I64``, every kernel's but where :func:`kernel_int64_offsets` gives one int64 anyway."""
    pad = OFFSET_PAD_ROWS
    for i in range(1, len(launch), 4):
        pad = max(pad, launch[i])
    return any((rows + pad) * width >= INT32_OFFSETS_BELOW for rows, width in shapes)


INT64_FASTER_TILES: Mapping[str, frozenset[str]] = MappingProxyType({
    "gat_src": frozenset({"full_256"}),
    "scores_bwd": frozenset({"full_64", "pad_64"}),
})
"""The kernels (:data:`KERNELS` names) that take int64 offsets on these tile classes (:func:`tile_classes`) even
where int32 fits, read by :func:`kernel_int64_offsets`: where int32 offsets measured slower. The measurement: an
A/B of the two widths in one call on an H100 (``benchmarks/floor_table.py --case step preset --dtype fp32 bf16``:
the arxiv step's 8 x 8 and 1 x 40 layers with dropout, the arxiv preset's 8 x 32 without; twice, within 1%). GAT's
one-gather source pass took 18% longer with int32 on full 256-wide tiles (8 x 32) in float32, 8% in bfloat16, and 3%
less on the 64-wide ones (8 x 8, 1 x 40); its node-score backward on the 64-wide tiles, full and padded (the step's
8 x 8 and 1 x 40 together), 20% longer in float32 and 47% in bfloat16, and 11% less on 8 x 32. Every other kernel ran
as fast or faster with int32. Figures: docs/performance.md ("int32 offsets", "Kernels against their floor")."""


def kernel_int64_offsets(kernel: str, i64: bool, width: int, c: int, block_c: int) -> bool:
    """``kernel``'s ``I64`` (a :data:`KERNELS` name) in a call whose sizes answer ``i64`` (:func:`int64_offsets`),
    launched on a tile ``width = HG * BLOCK_C`` wide for heads of width ``c`` padded to ``block_c``: int64 where the
    sizes need it, else where :data:`INT64_FASTER_TILES` lists one of the tile's classes for the kernel (measured
    faster there), else int32."""
    return i64 or not INT64_FASTER_TILES.get(kernel, frozenset()).isdisjoint(tile_classes(width, c, block_c))
