"""Do our Triton kernels compile for the GPU in every variant the library launches? A check that needs no GPU.

CI has no GPU: there the kernels run only under Triton's interpreter (``TRITON_INTERPRET=1``), which executes each
kernel's Python with numpy and so accepts what only the compiler refuses (a parameter used where a ``tl.constexpr``
is needed but passed at run time; values of different types out of the two branches of an ``if``). This script:

1. runs small workloads (:func:`workloads`) under the interpreter on CPU tensors, in ``--jobs`` child processes,
   and records every kernel launch (Triton's ``InterpretedFunction.run`` wrapped, :func:`recording`): per launch
   the kernel and what Triton's JIT would compile for it, found by Triton's own code (``JITFunction``'s binder and
   ``_pack_args`` for a CUDA target): the constexprs (taken from the launch, so a new one needs nothing here), each
   other argument's type (pointer dtypes; ``i32`` / ``i64`` / ``u64`` integers; an integer 1 becomes a constant)
   and which are divisible by 16 (16-byte aligned pointers, multiples of 16), and the launch options
   (``num_warps``);
2. dedupes the launches into distinct variants (:func:`variant_key`);
3. compiles each variant with ``triton.compile`` for ``--arch`` (default ``sm_90a``, the H100 / H200) and runs
   the ``ptxas`` Triton ships with ``-v`` on its PTX (``_ahead_of_time.py``, shared with ``kernel_registers.py``):
   a thread's registers and spill bytes; a variant that fails either step is reported failed with the error.

It prints the spills and the summary ``N variants of K kernels, F failed``, writes every variant to ``--out`` as
JSON, and exits with 1 where any failed. The workloads cover GAT and GATv2 in float32 and bfloat16 at the model
shapes the benchmarks run (:data:`SHAPES`, :data:`MODEL_SHAPES`), with int32 and int64 graph indices, with and
without gradients (and GAT's one- and two-gather backward), dropout drawn in-kernel (the forward writing keep flags
that the backward reads, or, without gradients, none), an explicit dropout mask, edge features (GATv2's projected and
fused), returned attention and its gradient, every activation, bipartite graphs rebuilt every call, sampled blocks
walked in whole short rows, hub rows cut into chunks (the chunk size forced down), int32 and int64 offsets (the
kernels' ``I64``; int64 forced); and graph attention's check of a packed batch's offsets. What it cannot see: a
variant no workload launches, and Triton's checks at a launch on the device. Register use depends on the Triton
version: run it with the Triton the GPU runs to read registers (any version to check compilation)::

    PYTHONPATH=. python benchmarks/investigations/compile_check.py [--quick] [--out compile_check.json]
        [--arch sm_90a] [--jobs N] [--workloads FILE.py]

``--variants compile_check.json`` compiles the variants an earlier run wrote to ``--out`` instead of recording
them: to compile with a Triton whose interpreter cannot run the workloads (Triton 3.6's fails on numpy 2, "only
0-dimensional arrays can be converted to Python scalars"), record with another and compile with this one. Our
kernels' signatures do not depend on the version (no tuples or other arguments whose packing changed).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")

SHAPES = ((4, 16), (8, 32), (2, 3))
"""Heads x head width of the workloads that run every case (:func:`_shape_cases`): 4 x 16, arxiv's 8 x 32 and a
width not a power of two (the heads and the width are constexprs of the row kernels and set their launch shapes)."""
MODEL_SHAPES = ((8, 8), (4, 64), (4, 47), (4, 128), (3, 250), (1, 64))
"""Shapes whose workloads run the main cases only (:func:`_model_cases`): Cora's and proteins' 8 x 8, products'
4 x 64 and its last layer's 4 x 47 (heads averaged), the sampled model's 4 x 128, DGL's arxiv 3 x 250 and one head."""
ACTIVATIONS = ("linear", "leaky_relu", "relu", "sigmoid", "tanh", "elu")


# ------------------------------------------------------------------------------------------- the workloads
@dataclass(frozen=True)
class Case:
    """One call of the Triton op (forward, and backward where ``grad``) on a small graph.

    ``graph``: ``"static"`` (a square graph, shuffled COO, a hub destination and a hub source), ``"hubs"`` (the same
    with the chunk size forced to :data:`HUB_CHUNK`, so those rows are cut into chunks), ``"bipartite"`` (sources
    and destinations apart, rebuilt every call, ``x_dst`` a tensor of its own) or ``"short_rows"`` (a sampled
    block: rebuilt every call with short rows, CSC order, ``x_dst`` the first rows of ``x_src``). ``edge``: ``""``,
    ``"projected"`` (GAT's edge scores; GATv2's ``[E, H*C]`` rows) or ``"fused"`` (GATv2's raw ``[E, De]`` with
    ``lin_edge_weight``). ``dropout``: ``""``, ``"kernel"`` (counter-based, drawn in the kernels) or ``"mask"``.
    ``offsets``: the call's offset width (the kernels' ``I64``): ``"int32"``, what calls below 2**31 elements a tensor
    run (but where ``tuning.kernel_int64_offsets`` gives a kernel int64 on its tile), or ``"int64"`` (forced: the int32
    bound, ``tuning.INT32_OFFSETS_BELOW``, set to 1 for the call)."""

    v2: bool
    dtype: str
    heads: int
    c: int
    graph: str = "static"
    index: str = "int32"
    grad: bool = True
    edge: str = ""
    dropout: str = ""
    gat_backward: str = "auto"
    activation: str = "leaky_relu"
    concat: bool = True
    attention: bool = False
    offsets: str = "int32"

    def name(self) -> str:
        parts = ["gatv2" if self.v2 else "gat", self.dtype, f"{self.heads}x{self.c}", self.graph, self.index,
                 "grad" if self.grad else "nograd"]
        parts += [f"edge-{self.edge}"] if self.edge else []
        parts += [f"dropout-{self.dropout}"] if self.dropout else []
        parts += [self.gat_backward] if self.gat_backward != "auto" else []
        parts += [self.activation] if self.activation != "leaky_relu" else []
        parts += [] if self.concat else ["mean"]
        parts += ["attention"] if self.attention else []
        parts += ["offsets-int64"] if self.offsets == "int64" else []
        return "/".join(parts)


HUB_CHUNK = 16
"""The chunk size of the ``"hubs"`` graph's work lists (normally 256 to 1024 edges): its hub rows split."""


def _shape_cases(v2: bool, dtype: str, heads: int, c: int) -> list[Case]:
    """The cases of one layer, dtype and shape; GAT's with gradients in both backwards."""
    base = Case(v2, dtype, heads, c)
    edge = "fused" if v2 else "projected"
    cases = [
        base,
        replace(base, index="int64", grad=False, attention=True, concat=False),
        replace(base, edge="projected"),
        replace(base, edge=edge, grad=False),
        replace(base, dropout="kernel"),  # the forward writes keep flags, the backward reads them
        replace(base, dropout="kernel", grad=False, attention=True),  # drawn in-kernel, no flags
        replace(base, dropout="mask", concat=False),
        replace(base, attention=True, index="int64"),  # the attention's gradient too
        replace(base, graph="hubs", dropout="kernel", edge=edge, attention=True),
        replace(base, graph="hubs", grad=False, dropout="mask", index="int64"),
        replace(base, graph="bipartite", index="int64", edge=edge),
        replace(base, graph="short_rows", dropout="kernel"),
        replace(base, graph="short_rows", grad=False, edge=edge, index="int64"),
    ]
    if v2:
        cases.append(replace(base, edge="fused", dropout="mask"))
    if v2:
        return cases
    return [replace(k, gat_backward=b) for k in cases for b in (("one_gather", "two_gather") if k.grad else ("auto",))]


def _model_cases(v2: bool, dtype: str, heads: int, c: int) -> list[Case]:
    """The main cases of one layer, dtype and shape: a training step plain, with edge features and kernel dropout, on
    hub chunks, and a sampled block's; GAT's in both backwards."""
    base = Case(v2, dtype, heads, c, concat=heads != 4 or c != 47)
    edge = "fused" if v2 else "projected"
    cases = [base, replace(base, edge=edge, dropout="kernel"), replace(base, graph="hubs", edge=edge),
             replace(base, graph="short_rows", index="int64")]
    return cases if v2 else [replace(k, gat_backward=b) for k in cases for b in ("one_gather", "two_gather")]


def cases(quick: bool) -> list[Case]:
    """The workloads' calls: every :func:`_shape_cases` of :data:`SHAPES` and :func:`_model_cases` of
    :data:`MODEL_SHAPES`, GAT and GATv2, float32 and bfloat16, the :func:`_model_cases` of :data:`SHAPES` again with
    int64 offsets, and every activation at 4 x 16 (``quick``: a few cases of 4 x 16 in float32, one with int64
    offsets)."""
    if quick:
        out = []
        for v2 in (False, True):
            base = Case(v2, "fp32", 4, 16, gat_backward="auto" if v2 else "one_gather")
            out += [base, replace(base, dropout="kernel", edge="fused" if v2 else "projected"),
                    replace(base, graph="hubs", grad=False, offsets="int64")]
        return out
    out = [k for shapes, make in ((SHAPES, _shape_cases), (MODEL_SHAPES, _model_cases)) for h, c in shapes
           for v2 in (False, True) for dtype in ("fp32", "bf16") for k in make(v2, dtype, h, c)]
    out += [replace(k, offsets="int64") for h, c in SHAPES for v2 in (False, True) for dtype in ("fp32", "bf16")
            for k in _model_cases(v2, dtype, h, c)]
    for act in ACTIVATIONS:
        for v2 in (False, True):
            base = Case(v2, "fp32", 4, 16, activation=act)
            out += [base] if v2 else [replace(base, gat_backward="one_gather"), replace(base, gat_backward="two_gather")]
    return list(dict.fromkeys(out))


def _graph(kind: str, index: str) -> Any:
    """A fresh graph of ``kind`` (see :class:`Case`; fresh: a graph keeps its work lists, built at the chunk size in
    force at its first call)."""
    import torch

    from cudnn_gnn import CscGraph

    g = torch.Generator().manual_seed(7)
    dtype = getattr(torch, index)
    if kind in ("static", "hubs"):  # 40 nodes: ~4 random in-edges each, node 3 a hub destination, node 5 a hub source
        n = 40
        rand = torch.randint(0, n, (2, 160), generator=g)
        hub_in = torch.stack([torch.randint(0, n, (48,), generator=g), torch.full((48,), 3)])
        hub_out = torch.stack([torch.full((40,), 5), torch.randint(0, n, (40,), generator=g)])
        ei = torch.cat([rand, hub_in, hub_out], 1)
        ei = ei[:, torch.randperm(ei.shape[1], generator=g)]
        return CscGraph.from_edge_index(ei, num_nodes=n, index_dtype=dtype)
    if kind == "bipartite":
        ns, nd = 56, 20
        ei = torch.stack([torch.randint(0, ns, (200,), generator=g), torch.randint(0, nd, (200,), generator=g)])
        return CscGraph.from_edge_index(ei, size=(ns, nd), index_dtype=dtype, rebuilt_every_call=True)
    if kind == "short_rows":  # a sampled block: 24 destinations of 0..10 in-edges from 64 sources, CSC order
        ns, nd = 64, 24
        deg = torch.randint(0, 11, (nd,), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)]).to(dtype)
        indices = torch.randint(0, ns, (int(deg.sum()),), generator=g).to(dtype)
        return CscGraph.from_csc(offsets, indices, ns, rebuilt_every_call=True, short_rows=True, validate=False)
    raise ValueError(f"kind must be one of static, hubs, bipartite, short_rows, got {kind!r}")


@contextlib.contextmanager
def _sizes(chunk: int | None, int32_offsets_below: int | None) -> Iterator[None]:
    """Within: the work lists' chunk size forced to ``chunk`` and the int32 offsets' bound to
    ``int32_offsets_below`` (None: unchanged)."""
    from cudnn_gnn.backends.triton import tuning

    saved = tuning.MIN_CHUNK_E, tuning.MAX_CHUNK_E, tuning.INT32_OFFSETS_BELOW
    if chunk is not None:
        tuning.MIN_CHUNK_E = tuning.MAX_CHUNK_E = chunk
    if int32_offsets_below is not None:
        tuning.INT32_OFFSETS_BELOW = int32_offsets_below
    try:
        yield
    finally:
        tuning.MIN_CHUNK_E, tuning.MAX_CHUNK_E, tuning.INT32_OFFSETS_BELOW = saved


def run_case(case: Case) -> None:
    """Run ``case``'s forward (and backward, with gradients of the output and, with ``attention``, of the returned
    attention) through :func:`cudnn_gnn.backends.triton.triton_gat`."""
    import torch

    from cudnn_gnn.backends import triton as tb
    from cudnn_gnn.spec import AttentionSpec

    g = torch.Generator().manual_seed(0)
    dtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[case.dtype])
    graph = _graph(case.graph, case.index)
    ns, nd, e, h = graph.num_src_nodes, graph.num_dst_nodes, graph.num_edges, case.heads
    d = h * case.c

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype).requires_grad_(case.grad)

    xs = leaf(ns, d)
    xd = leaf(nd, d) if case.graph == "bipartite" else xs if nd == ns else xs[:nd]
    edge_attr = lin_edge = None
    if case.edge == "fused":
        edge_attr, lin_edge = leaf(e, 4), leaf(d, 4)
    elif case.edge == "projected":
        edge_attr = leaf(e, d if case.v2 else 2 * h)
    w = leaf(d if case.v2 else 2 * d + (2 * h if edge_attr is not None else 0))
    mask = ((torch.rand(h, e, generator=g) > 0.3).float() * 1.5).t() if case.dropout == "mask" else None
    kernel_drop = case.dropout == "kernel"
    spec = AttentionSpec(
        v2=case.v2, graph=graph, x_src=xs, x_dst=xd, attn_weights=w, heads=h, edge_attr=edge_attr,
        lin_edge_weight=lin_edge, concat=case.concat, activation=case.activation,
        activation_alpha=0.2 if case.activation == "leaky_relu" else 1.0 if case.activation == "elu" else 0.0,
        dropout_mask=mask, dropout=0.3 if kernel_drop else 0.0,
        dropout_seed=torch.tensor([12345]) if kernel_drop else None, return_attention=case.attention,
        deterministic=False, grad_precision="auto", backend="triton", max_degree=None)
    with _sizes(HUB_CHUNK if case.graph == "hubs" else None, 1 if case.offsets == "int64" else None):
        out, att = tb.triton_gat(spec, options=tb.TritonOptions(gat_backward=case.gat_backward))
        if case.grad:
            loss = out.float().sum() + (att.sum() if att is not None else 0.0)
            loss.backward()


def run_packed_offsets(dtype: str) -> None:
    """Graph attention's one-launch check of a packed batch's offsets (three graphs, one past ``max_nodes``), its flag
    in ``dtype``."""
    import torch

    from cudnn_gnn.backends.triton import packed_offsets

    ptr = torch.tensor([0, 3, 5, 11])
    packed_offsets.checked_offsets(ptr, 11, 5, getattr(torch, dtype))


def workloads(quick: bool) -> dict[str, Callable[[], None]]:
    """The built-in workloads by name: :func:`cases` run by :func:`run_case`, and :func:`run_packed_offsets`."""
    named: dict[str, Callable[[], None]] = {k.name(): functools.partial(run_case, k) for k in cases(quick)}
    for dtype in ("float32",) if quick else ("float32", "bfloat16", "float16"):
        named[f"packed_offsets/{dtype}"] = functools.partial(run_packed_offsets, dtype)
    return named


def _file_workloads(path: str) -> dict[str, Callable[[], None]]:
    """``WORKLOADS`` (name -> function of no arguments) of the Python file ``path``, imported as a module."""
    module = _import_file(path)
    found = getattr(module, "WORKLOADS", None)
    if not isinstance(found, dict):
        raise SystemExit(f"--workloads must name a Python file that defines WORKLOADS = {{name: function}}, "
                         f"got {path}")
    return found


def _import_file(path: str) -> Any:
    """The module of the Python file ``path``, named after its file and kept in ``sys.modules``."""
    name = os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------- recording launches
@contextlib.contextmanager
def recording(arch: str = "sm_90a") -> Iterator[list[dict[str, Any]]]:
    """Within (Triton's interpreter on): every kernel launch is recorded as :func:`describe_launch` gives it, then
    runs as usual. Triton's ``InterpretedFunction.run`` is restored on the way out."""
    from triton.runtime.interpreter import InterpretedFunction

    launches: list[dict[str, Any]] = []
    original = InterpretedFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            launches.append(describe_launch(self.fn, self.kwargs, args, kwargs, arch))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield launches
    finally:
        InterpretedFunction.run = original


_BINDERS: dict[Any, Any] = {}


def describe_launch(fn: Any, jit_kwargs: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                    arch: str) -> dict[str, Any]:
    """What Triton's JIT would compile for ``fn`` (a kernel's Python function; ``jit_kwargs``: its decorator's
    arguments, ``do_not_specialize`` among them) launched with ``args`` and ``kwargs`` on an ``arch`` device:
    ``module``, ``file`` and ``kernel`` (its name), ``signature`` (parameter -> Triton type), ``constexprs`` and
    ``attrs`` (``[[path, value]]``) and ``options`` (the launch's keywords that are not parameters), by Triton's
    own binder (JSON-ready)."""
    import triton
    from triton.runtime.jit import JITFunction, create_function_from_signature

    if not hasattr(JITFunction, "_pack_args"):
        raise SystemExit(f"compile_check.py specialises launches with JITFunction._pack_args (Triton 3.9), which "
                         f"Triton {triton.__version__} does not have")
    entry = _BINDERS.get(fn)
    if entry is None:
        from _ahead_of_time import target
        from triton.compiler import make_backend

        jit = JITFunction(fn, **{k: v for k, v in jit_kwargs.items() if v is not None})
        backend = make_backend(target(arch))
        entry = _BINDERS[fn] = (jit, backend, create_function_from_signature(jit.signature, jit.params, backend))
    jit, backend, binder = entry
    bound, specialization, options = binder(*args, **kwargs)
    _, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    return {"module": fn.__module__, "file": os.path.abspath(fn.__code__.co_filename), "kernel": fn.__name__,
            "signature": signature, "constexprs": [[list(p), v] for p, v in constexprs.items()],
            "attrs": [[list(p), a] for p, a in attrs.items() if a],
            "options": {k: v for k, v in kwargs.items() if k not in jit.arg_names}}


def variant_key(launch: dict[str, Any]) -> str:
    """The launches of one compiled variant share this key: the kernel, its signature, constants, attributes and
    options (the properties Triton's JIT keys its cache on)."""
    return json.dumps([launch[k] for k in ("module", "kernel", "signature", "constexprs", "attrs", "options")],
                      sort_keys=True, default=repr)


def record(named: dict[str, Callable[[], None]], arch: str) -> list[dict[str, Any]]:
    """Run each workload of ``named`` under the interpreter, recording its launches; the distinct variants, first
    launched first, each with ``launches`` (how many launches took it) and ``workload`` (the first that did)."""
    variants: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for i, (name, fn) in enumerate(named.items()):
        with recording(arch) as launches:
            fn()
        for launch in launches:
            v = variants.setdefault(variant_key(launch), {**launch, "launches": 0, "workload": name})
            v["launches"] += 1
        print(f"[{i + 1}/{len(named)}] {name}: {len(launches)} launches, {len(variants)} variants so far "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return list(variants.values())


# ------------------------------------------------------------------------------------------- compiling
def _jit_function(variant: dict[str, Any]) -> Any:
    """The ``triton.JITFunction`` of ``variant``'s kernel (its module imported with the interpreter off; our
    kernels' ``CachedLaunch`` wrapper taken off)."""
    from cudnn_gnn.backends.triton.launch import CachedLaunch

    try:
        module = importlib.import_module(variant["module"])
    except ImportError:
        module = _import_file(variant["file"])
    kernel = getattr(module, variant["kernel"])
    return kernel.fn if isinstance(kernel, CachedLaunch) else kernel


def compile_variant(variant: dict[str, Any], arch: str) -> dict[str, Any]:
    """Compile ``variant`` for ``arch`` and run ``ptxas -v``: ``ok``, ``error`` (the compiler's or ptxas's message,
    else None), ``registers``, ``spill_store_bytes``, ``spill_load_bytes`` and ``seconds``."""
    from _ahead_of_time import compile_ptx, ptxas_usage

    t0 = time.perf_counter()
    out: dict[str, Any] = {"ok": False, "error": None, "registers": None, "spill_store_bytes": None,
                           "spill_load_bytes": None}
    try:
        fn = _jit_function(variant)
        ptx = compile_ptx(fn, variant["signature"], {tuple(p): v for p, v in variant["constexprs"]},
                          {tuple(p): a for p, a in variant["attrs"]}, variant["options"], arch)
        usage = ptxas_usage(ptx, arch)
        out.update({k: usage[k] for k in ("registers", "spill_store_bytes", "spill_load_bytes")})
        out["error"] = usage["ptxas_error"]
        out["ok"] = usage["ptxas_error"] is None
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is this script's finding
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        out["error"] = message[-2000:]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


_POOL_VARIANTS: list[dict[str, Any]] = []
_POOL_ARCH = "sm_90a"


def _compile_nth(i: int) -> dict[str, Any]:
    return compile_variant(_POOL_VARIANTS[i], _POOL_ARCH)


def check(variants: list[dict[str, Any]], arch: str, jobs: int) -> list[dict[str, Any]]:
    """Compile every variant (``jobs`` forked processes at a time; 1: in this process); the variants with their
    results, in order."""
    global _POOL_VARIANTS, _POOL_ARCH
    _POOL_VARIANTS, _POOL_ARCH = variants, arch
    rows = []
    if jobs > 1 and len(variants) > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.imap(_compile_nth, range(len(variants)))
            for i, (v, r) in enumerate(zip(variants, results, strict=True)):
                rows.append({**v, **r})
                _progress(i, len(variants), rows[-1])
    else:
        for i, v in enumerate(variants):
            rows.append({**v, **compile_variant(v, arch)})
            _progress(i, len(variants), rows[-1])
    return rows


def describe(row: dict[str, Any]) -> str:
    """``kernel(CONST=value, ...; num_warps=n)`` with the pointer dtypes of a variant, for a line of output."""
    names = list(row["signature"])
    consts = ", ".join(f"{names[p[0]]}={v}" for p, v in row["constexprs"] if len(p) == 1)
    dtypes = sorted({t[1:] for t in row["signature"].values() if t.startswith("*")})
    opts = ", ".join(f"{k}={v}" for k, v in row["options"].items())
    return f"{row['kernel']}({'; '.join(filter(None, [consts, opts, 'pointers ' + '/'.join(dtypes)]))})"


def _progress(i: int, n: int, row: dict[str, Any]) -> None:
    state = "ok" if row["ok"] else "FAILED"
    print(f"[{i + 1}/{n}] {row['kernel']} {state}: {row['registers']} registers, {row['spill_store_bytes']} B "
          f"spilled ({row['seconds']} s)", file=sys.stderr, flush=True)


def summary(rows: list[dict[str, Any]]) -> str:
    """``N variants of K kernels, F failed``."""
    kernels = {(r["module"], r["kernel"]) for r in rows}
    return f"{len(rows)} variants of {len(kernels)} kernels, {sum(not r['ok'] for r in rows)} failed"


# ------------------------------------------------------------------------------------------- the command
def _record_child(args: argparse.Namespace) -> None:
    """A recording process: the interpreter on, its share of the workloads run (``--record-part i/n``: every n-th
    from the i-th), the variants written to ``--record-to``."""
    os.environ["TRITON_INTERPRET"] = "1"
    named = _file_workloads(args.workloads) if args.workloads else workloads(args.quick)
    part, parts = (int(x) for x in args.record_part.split("/"))
    variants = record(dict(list(named.items())[part::parts]), args.arch)
    with open(args.record_to, "w") as f:
        json.dump(variants, f, default=repr)


def _record_in_children(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run :func:`_record_child` in ``--jobs`` fresh processes at once (the kernels must be decorated under the
    interpreter there and compiled here), each a share of the workloads; the variants they recorded, deduped."""
    jobs = max(1, args.jobs)
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i in range(jobs):
            cmd = [sys.executable, os.path.abspath(__file__), "--record-to", os.path.join(tmp, f"{i}.json"),
                   "--record-part", f"{i}/{jobs}", "--arch", args.arch]
            cmd += ["--quick"] if args.quick else []
            cmd += ["--workloads", os.path.abspath(args.workloads)] if args.workloads else []
            procs.append(subprocess.Popen(cmd, env=env))
        try:
            codes = [p.wait() for p in procs]
        finally:  # interrupted: the children go too
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes):
            raise SystemExit(f"recording the workloads' launches failed (exit codes {codes}); see above")
        variants: dict[str, dict[str, Any]] = {}
        for i in range(jobs):
            with open(os.path.join(tmp, f"{i}.json")) as f:
                for v in json.load(f):
                    kept = variants.setdefault(variant_key(v), {**v, "launches": 0})
                    kept["launches"] += v["launches"]
        return list(variants.values())


def _recorded(path: str) -> list[dict[str, Any]]:
    """The variants of an earlier run's ``--out`` file, without that run's results (each compiled again here)."""
    with open(path) as f:
        rows = json.load(f)["variants"]
    results = {"ok", "error", "registers", "spill_store_bytes", "spill_load_bytes", "seconds"}
    return [{k: v for k, v in r.items() if k not in results} for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few workloads of one shape, float32 (a CPU test's)")
    ap.add_argument("--workloads", default=None,
                    help="a Python file defining WORKLOADS = {name: function}, run instead of the built-in "
                         "workloads (to check other kernels)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count() or 1, help="recording and compile processes at once (default: the CPUs)")
    ap.add_argument("--out", default=None, help="write every variant and its result here as JSON")
    ap.add_argument("--variants", default=None,
                    help="compile the variants of an earlier run's --out file instead of recording them")
    ap.add_argument("--record-to", default=None, help=argparse.SUPPRESS)  # a recording child's output
    ap.add_argument("--record-part", default="0/1", help=argparse.SUPPRESS)  # and its share of the workloads
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    if args.record_to:
        _record_child(args)
        return 0
    os.environ.pop("TRITON_INTERPRET", None)  # compiled here, never interpreted
    import triton

    t0 = time.perf_counter()
    variants = _recorded(args.variants) if args.variants else _record_in_children(args)
    t1 = time.perf_counter()
    rows = check(variants, args.arch, args.jobs)
    t2 = time.perf_counter()
    for r in rows:
        if not r["ok"]:
            print(f"FAILED {describe(r)} from {r['workload']}:\n  " + r["error"].replace("\n", "\n  "))
    for r in rows:
        if r["spill_store_bytes"]:
            print(f"spills {r['spill_store_bytes']} B stored, {r['spill_load_bytes']} B loaded, "
                  f"{r['registers']} registers: {describe(r)} from {r['workload']}")
    line = summary(rows)
    print(f"{line} (Triton {triton.__version__}, {args.arch}; recorded in {t1 - t0:.0f} s, compiled in "
          f"{t2 - t1:.0f} s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": line, "triton": triton.__version__, "arch": args.arch, "variants": rows}, f,
                      indent=1, default=repr)
    return 1 if any(not r["ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
