"""Build cuDNN's GAT/GATv2 kernels ahead of time, several at once.

cuDNN 9.28 compiles each GNN kernel on its first call in a process (NVRTC, then the driver's JIT, whose cache in
``~/.nv/ComputeCache`` lets later processes on the same machine skip most of it): tens of seconds per kernel. The
kernel depends on the op, the dtype, the direction, whether the call passes the edge map (``edge_features``) and
the index dtype (``index_dtypes``), not on the graph, the heads or the feature width. Builds in threads of one
process do not overlap; builds in separate processes do, after which this process finds them in the disk cache:
``processes=True``. The timings are in docs/performance.md ("first-call kernel build").

Global attention on cuDNN (:func:`~cudnn_gnn.graph_attention`, ``backend="cudnn"``) runs our own SDPA graphs, whose
plans depend on the shapes of a batch (graphs, longest graph, heads, head size, the node total's bucket): ``attention``
builds the plans of the shapes a run will see, and writes them to the plan folder, from which the run (and every
later process) loads them instead of building.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import torch

from cudnn_gnn._validation import check_bool
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops.gat import gat
from cudnn_gnn.ops.gatv2 import gatv2
from cudnn_gnn.ops.global_attention import graph_attention

__all__ = ["AttentionShape", "precompile"]

_OPS = {"gat": gat, "gatv2": gatv2}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class AttentionShape(NamedTuple):
    """The batches of one :func:`~cudnn_gnn.graph_attention` call site, for :func:`precompile`'s ``attention``.

    Attributes:
        num_graphs: graphs per batch (``B``; a smaller last batch is a shape of its own).
        max_num_nodes: the largest graph's nodes (the plan holds it rounded up to a power of two).
        heads, head_dim: ``H`` and ``D`` of q, k and v.
        num_nodes: the batches' node totals: an int, or ``(low, high)`` for every backward plan in between (8 per
            power of two); default ``num_graphs * max_num_nodes // 2``.
    """

    num_graphs: int
    max_num_nodes: int
    heads: int
    head_dim: int
    num_nodes: int | tuple[int, int] | None = None


def precompile(
    ops: Iterable[str] = ("gat", "gatv2"),
    dtypes: Iterable[torch.dtype] = (torch.float32, torch.bfloat16),
    *,
    backward: bool = True,
    deterministic: bool = False,
    edge_features: bool = False,
    index_dtypes: Iterable[torch.dtype] = (torch.int32,),
    device: torch.device | str | None = None,
    backend: str = "cudnn",
    max_workers: int | None = None,
    processes: bool = False,
    attention: Iterable[AttentionShape | tuple[int, ...]] = (),
    attention_dropout: float = 0.0,
) -> dict[str, float]:
    """Run every ``op x dtype`` once on a tiny graph, in parallel, so that later calls find their kernels.

    Call it once at start-up (before timing, before the first training step). With ``processes=True`` it costs
    about as long as the slowest kernel build instead of the sum of all of them. What a call builds is what the
    same call of :func:`~cudnn_gnn.gat` / :func:`~cudnn_gnn.gatv2` uses: forward (with or without returned attention),
    and with ``backward`` the backward with the default ``grad_precision`` (float32 gradient arithmetic for
    half inputs), deterministic or not as ``deterministic`` says.

    Args:
        ops: any of ``"gat"``, ``"gatv2"``.
        dtypes: any of ``torch.float32``, ``torch.float16``, ``torch.bfloat16``.
        backward: also build the backward kernels.
        deterministic: build the deterministic backward (the one ``deterministic=True`` runs) instead.
        edge_features: also build the calls with edge features (GAT: one per head, what ``GATConv`` passes;
            GATv2: ``[E, H*C]``), in the same threads. Those calls hand cuDNN the CSC->COO edge map, which calls
            without edge tensors skip, so they are kernels of their own.
        index_dtypes: the graph index dtypes to build for, ``torch.int32`` and/or ``torch.int64``: the index
            dtype is a kernel parameter. Graphs stored in int64 use int64 kernels, and so do int32 graphs whose
            edges x feature width (or nodes x width) reach 2**30 (:func:`cudnn_gnn.backends.cudnn.kernel_index_dtype`,
            e.g. ogbn-proteins with 8 x 8 heads).
        device: the CUDA device (default: the current one).
        backend: ``"cudnn"`` (default) or ``"reference"`` (runs the same calls on the reference backend; for tests).
        max_workers: threads (default: one per build).
        processes: first run each build in a process of its own, all at once (the same Python, ``sys.executable``),
            then the builds in this process, which then load from the compute cache on disk (the builds overlap,
            which threads of one process do not). A process that
            fails (e.g. a GPU in exclusive-process mode) leaves its build to this process, which raises the real
            error if there is one. GAT / GATv2 only.
        attention: :class:`AttentionShape` s (or tuples of their fields) whose cuDNN SDPA plans to build for
            :func:`~cudnn_gnn.graph_attention` in each of ``dtypes`` (float32 runs as bfloat16), one after another in
            this process: the forward and, with ``backward``, the backward (``deterministic`` as given) of every
            node-total bucket. Each plan is written to the plan folder (``$CUDNN_GNN_CACHE_DIR/sdpa-plans`` or
            ``~/.cache/cudnn_gnn/sdpa-plans``), where later processes find it. ``ops`` may be empty then.
        attention_dropout: the attention dropout of those calls in training (part of the plan).

    Returns:
        seconds per ``"op/dtype"`` (``"op/dtype edge"`` with ``edge_features``, `` int64`` appended for int64
        indices; forward and, with ``backward``, backward), in the order given; with ``processes``, from the
        start to the end of that build's process plus its build in this process. Then one entry per attention
        build, ``"attention/dtype BxS HxD N=n"`` (``S`` the largest graph, ``n`` the node total).

    Raises:
        ValueError: an unknown op or dtype, or an empty selection.
        RuntimeError: ``backend="cudnn"`` cannot run here (says why and the fix).
    """
    ops = list(ops)
    dtypes = list(dtypes)
    index_dtypes = list(index_dtypes)
    for it in index_dtypes:
        if it not in (torch.int32, torch.int64):
            raise ValueError(f"index_dtypes must hold torch.int32 and/or torch.int64, got {it}")
    for op in ops:
        if op not in _OPS:
            raise ValueError(f"ops must name 'gat' or 'gatv2', got {op!r}")
    for dt in dtypes:
        if dt not in _DTYPES:
            raise ValueError(f"dtypes must be float32, float16 or bfloat16, got {dt}")
    shapes = [_attention_shape(s) for s in attention]
    if (not ops and not shapes) or not dtypes or not index_dtypes:
        raise ValueError(f"ops (or attention), dtypes and index_dtypes must not be empty, got ops={ops}, "
                         f"attention={shapes}, dtypes={dtypes}, index_dtypes={index_dtypes}")
    p = float(attention_dropout) if isinstance(attention_dropout, (int, float)) else attention_dropout
    if isinstance(attention_dropout, bool) or not isinstance(p, float) or not 0.0 <= p < 1.0:
        raise ValueError(f"attention_dropout must be in [0, 1) (a call with dropout 1 runs on flash: no cuDNN plan to "
                         f"build), got {attention_dropout!r}")
    check_bool("backward", backward)
    check_bool("deterministic", deterministic)
    check_bool("edge_features", edge_features)
    check_bool("processes", processes)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "cudnn" else torch.device("cpu")
    device = torch.device(device)
    jobs = [(op, dt, edges, it) for op in ops for dt in dtypes for edges in ((False, True) if edge_features else (False,))
            for it in index_dtypes]
    got = _precompile_jobs(jobs, backward=backward, deterministic=deterministic, device=device, backend=backend,
                           max_workers=max_workers, processes=processes) if jobs else {}
    for shape in shapes:
        for dt in dict.fromkeys(torch.bfloat16 if d == torch.float32 else d for d in dtypes):
            got.update(_attention_builds(shape, dt, p, backward=backward, deterministic=deterministic, device=device,
                                         backend=backend))
    return got


def _attention_shape(shape: AttentionShape | tuple[int, ...]) -> AttentionShape:
    """``shape`` as an :class:`AttentionShape`, checked."""
    if not isinstance(shape, tuple) or not 4 <= len(shape) <= 5:
        raise ValueError(f"attention must hold AttentionShape(num_graphs, max_num_nodes, heads, head_dim[, num_nodes]) "
                         f"entries, got {shape!r}")
    s = AttentionShape(*shape)
    for name in ("num_graphs", "max_num_nodes", "heads", "head_dim"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"attention {name} must be an int >= 1, got {value!r}")
    lo, hi = _node_range(s)
    if not s.max_num_nodes <= lo <= hi <= s.num_graphs * s.max_num_nodes:
        raise ValueError(f"attention num_nodes must lie in [max_num_nodes, num_graphs * max_num_nodes] = "
                         f"[{s.max_num_nodes}, {s.num_graphs * s.max_num_nodes}], got {s.num_nodes!r}")
    return s


def _node_range(s: AttentionShape) -> tuple[int, int]:
    if s.num_nodes is None:
        n = max(s.max_num_nodes, s.num_graphs * s.max_num_nodes // 2)
        return n, n
    if isinstance(s.num_nodes, tuple) and len(s.num_nodes) == 2:
        return int(s.num_nodes[0]), int(s.num_nodes[1])
    if isinstance(s.num_nodes, int) and not isinstance(s.num_nodes, bool):
        return s.num_nodes, s.num_nodes
    raise ValueError(f"attention num_nodes must be an int or a (low, high) pair, got {s.num_nodes!r}")


def _attention_builds(s: AttentionShape, dtype: torch.dtype, p: float, *, backward: bool, deterministic: bool,
                      device: torch.device, backend: str) -> dict[str, float]:
    """Run ``graph_attention`` once per node-total bucket of ``s`` (the forward plan is built by the first): batches
    of ``s.num_graphs`` graphs, the first of ``s.max_num_nodes`` nodes, the others filled up to the total."""
    from cudnn_gnn.backends._cudnn_sdpa import bucket_tokens

    lo, hi = _node_range(s)
    totals = [] if backward else [lo]
    t = lo
    while backward and t <= hi:
        b = bucket_tokens(t)
        totals.append(min(b, hi))  # a total whose backward plan is bucket b
        t = b + 1
    got = {}
    for total in totals:
        sizes, rest = [s.max_num_nodes], total - s.max_num_nodes
        for _ in range(s.num_graphs - 1):
            sizes.append(min(s.max_num_nodes, rest))
            rest -= sizes[-1]
        ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device=device)
        q, k, v = (torch.randn(total, s.heads, s.head_dim, device=device, dtype=dtype, requires_grad=backward)
                   for _ in range(3))
        t0 = time.perf_counter()
        with torch.set_grad_enabled(backward):
            out = graph_attention(q, k, v, ptr, max_num_nodes=s.max_num_nodes, dropout=p, training=p > 0,
                                  backend=backend, deterministic=deterministic if backward else None)
            if backward:
                out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        key = (f"attention/{str(dtype).removeprefix('torch.')} {s.num_graphs}x{s.max_num_nodes} "
               f"{s.heads}x{s.head_dim} N={total}")
        got[key] = time.perf_counter() - t0
    return got


_Job = tuple[str, torch.dtype, bool, torch.dtype]  # op, dtype, with edge features, index dtype


def _precompile_jobs(jobs: list[_Job], *, backward: bool, deterministic: bool, device: torch.device, backend: str,
                     max_workers: int | None, processes: bool) -> dict[str, float]:
    """:func:`precompile` after validation: the builds of ``jobs``, keyed as it documents."""
    # A ring of 16 nodes with self-loops: every destination has in-edges, 2 heads x 8 features, 2 edge features.
    n = 16
    ring = torch.arange(n, device=device)
    ei = torch.stack([torch.cat([ring, ring]), torch.cat([(ring + 1) % n, ring])])
    graphs = {it: CscGraph.from_edge_index(ei, num_nodes=n, index_dtype=it) for it in {j[3] for j in jobs}}
    if deterministic:
        for g in graphs.values():
            g.with_reverse_csc()

    def build(op: str, dtype: torch.dtype, edges: bool, index_dtype: torch.dtype) -> float:
        graph = graphs[index_dtype]
        fn = _OPS[op]
        heads, d = 2, 16
        x = torch.randn(n, d, device=device, dtype=dtype, requires_grad=backward)
        de = (d if op == "gatv2" else heads) if edges else 0
        w = torch.randn(d if op == "gatv2" else 2 * d + de, device=device, dtype=dtype, requires_grad=backward)
        edge = torch.randn(graph.num_edges, de, device=device, dtype=dtype, requires_grad=backward) if edges else None
        t0 = time.perf_counter()
        with torch.set_grad_enabled(backward):
            out = fn(graph, x, w, heads=heads, edge_attr=edge, deterministic=deterministic, backend=backend)
            if backward and isinstance(out, torch.Tensor):  # a Tensor: no attention was asked for
                out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    child_s = [t for t, _ in _build_in_processes(jobs, backward, deterministic, device, backend)] if processes else \
        [0.0] * len(jobs)
    with ThreadPoolExecutor(max_workers=max_workers or len(jobs), thread_name_prefix="cudnn_gnn-precompile") as pool:
        futures = {f"{op}/{str(dt).removeprefix('torch.')}{' edge' if edges else ''}{' int64' if it == torch.int64 else ''}":
                   pool.submit(build, op, dt, edges, it) for op, dt, edges, it in jobs}
        return {key: c + f.result() for (key, f), c in zip(futures.items(), child_s)}


def _child_main(argv: list[str]) -> None:
    """A build process of ``precompile(processes=True)``: one job, from its command line."""
    op, dtype, edges, index_dtype, backward, deterministic, device, backend = argv
    job = (op, getattr(torch, dtype), edges == "1", getattr(torch, index_dtype))
    _precompile_jobs([job], backward=backward == "1", deterministic=deterministic == "1", device=torch.device(device),
                     backend=backend, max_workers=1, processes=False)


def _build_in_processes(jobs: list[_Job], backward: bool, deterministic: bool, device: torch.device,
                        backend: str) -> list[tuple[float, int]]:
    """One process per job, all at once: for each, seconds from the start until it exited, and its exit code."""
    code = "import sys; from cudnn_gnn.ops.precompile import _child_main; _child_main(sys.argv[1:])"
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code, op, str(dt).removeprefix("torch."), "1" if edges else "0",
                               str(it).removeprefix("torch."), "1" if backward else "0", "1" if deterministic else "0",
                               str(device), backend], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for op, dt, edges, it in jobs]
    done = [(0.0, 0)] * len(procs)
    pending = dict(enumerate(procs))
    while pending:
        for i, proc in list(pending.items()):
            if proc.poll() is not None:
                done[i] = (time.perf_counter() - t0, proc.returncode)
                del pending[i]
        if pending:
            time.sleep(0.05)
    return done
