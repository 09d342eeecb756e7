"""Build cuDNN's GAT/GATv2 kernels ahead of time, several at once.

cuDNN 9.28 compiles each GNN kernel on its first call in a process (NVRTC, then the driver's JIT, whose cache in
``~/.nv/ComputeCache`` lets later processes on the same machine skip most of it): tens of seconds per kernel. The
kernel depends on the op, the dtype, the direction, whether the call passes the edge map (``edge_features``) and
the index dtype (``index_dtypes``), not on the graph, the heads or the feature width. Builds in threads of one
process do not overlap; builds in separate processes do, after which this process finds them in the disk cache:
``processes=True``. The timings are in docs/performance.md ("first-call kernel build").
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import torch

from cudnn_gnn._validation import check_bool
from cudnn_gnn.graph import CscGraph
from cudnn_gnn.ops.gat import gat
from cudnn_gnn.ops.gatv2 import gatv2

__all__ = ["precompile"]

_OPS = {"gat": gat, "gatv2": gatv2}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


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
            error if there is one.

    Returns:
        seconds per ``"op/dtype"`` (``"op/dtype edge"`` with ``edge_features``, `` int64`` appended for int64
        indices; forward and, with ``backward``, backward), in the order given; with ``processes``, from the
        start to the end of that build's process plus its build in this process.

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
    if not ops or not dtypes or not index_dtypes:
        raise ValueError(f"ops, dtypes and index_dtypes must not be empty, got ops={ops}, dtypes={dtypes}, "
                         f"index_dtypes={index_dtypes}")
    check_bool("backward", backward)
    check_bool("deterministic", deterministic)
    check_bool("edge_features", edge_features)
    check_bool("processes", processes)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "cudnn" else torch.device("cpu")
    device = torch.device(device)
    jobs = [(op, dt, edges, it) for op in ops for dt in dtypes for edges in ((False, True) if edge_features else (False,))
            for it in index_dtypes]
    return _precompile_jobs(jobs, backward=backward, deterministic=deterministic, device=device, backend=backend,
                            max_workers=max_workers, processes=processes)


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
