"""GAT / GATv2 layer benchmark: cudnn-gnn against PyTorch Geometric, in one process and one run.

Usage (see ``--help``)::

    python benchmarks/bench_layers.py                       # full run on the GPU (see below for the time)
    python benchmarks/bench_layers.py --quick               # CPU smoke test: tiny graphs, no timing claims
    python benchmarks/bench_layers.py --out out/bench.json --plot out/bench.png --md out/bench.md
    python benchmarks/bench_layers.py --backends triton     # our layer on Triton only: no cuDNN needed
    TRITON_INTERPRET=1 python benchmarks/bench_layers.py --quick --presets micro --backends triton   # CPU smoke

What is measured, per preset x layer (GAT, GATv2) x dtype (fp32, bf16 autocast) x pass (fwd, fwd+bwd):

* ``pyg``          PyG ``GATConv`` / ``GATv2Conv`` eager (``add_self_loops=False``, see below).
* ``pyg_compile``  the same module under ``torch.compile`` (default mode); compile time is the first call and
                   is reported as ``first_call_ms``, not in the median. Failures are reported as errors.
* ``reference``    ``Linear`` + ``cudnn_gnn.gat/gatv2(backend="reference")`` (small presets only).
* ``cudnn`` / ``cudnn_det``  ``Linear`` + ``cudnn_gnn.gat/gatv2(backend="cudnn")``, ``deterministic`` off/on:
                   the op-level model ("Linear + cudnn_gnn.gat"), the shape the device README measured.
* ``layer_cudnn`` / ``layer_cudnn_det`` / ``layer_reference``  ``cudnn_gnn.layers.GATConv/GATv2Conv`` with
                   the PyG layer's ``state_dict`` loaded, when ``cudnn_gnn.layers`` provides them.
* ``triton`` / ``layer_triton``  the same on our Triton kernels (``backend="triton"``), next to the cuDNN ones:
                   ``--backends`` (default ``cudnn,triton``) turns every cuDNN case into one per backend named;
                   no ``_det`` twin (Triton's backward is bitwise repeatable as it is). Only the backends a case
                   runs must be available: ``--backends triton`` needs CUDA and triton, not cuDNN. cuDNN's kernels
                   are built before timing (``--prebuild``); Triton builds each kernel variant at its first call,
                   inside the warm-up: each case records ``first_call_ms`` and, in ``triton_builds``, every variant
                   it built (kernel, constexprs, seconds).
* ``layer_triton_compile``  with ``--compile-layers``: our layer on Triton under ``torch.compile`` (default
                   mode), like for like with ``pyg_compile`` and on the same presets and passes
                   (``--compile-presets``, ``--compile-passes``); the summary adds it as its own small table
                   (compiled against compiled). Off by default: its builds would lengthen the headline run.

The summary has one row per preset x layer x dtype x pass x backend (field ``backend``), each with PyG eager and
compiled and our layer on that backend: time, peak memory, speed-up against both PyG baselines.

Time on an H200: the default run on a fresh machine took 290 s in all, 116 s of it kernel builds in parallel
processes (benchmarks/results/h200-2026-11-30-97d733c/; per preset and earlier runs in docs/performance.md,
"First-call kernel build").

Honesty rules: every implementation gets the same ``x``, edges, ``edge_attr``, weights (copied from the PyG
layer) and upstream gradient; PyG's fp32 forward output is the oracle and every other forward is checked against
it (``max_abs_diff_vs_pyg_fp32``; low precision is judged against PyG's own low-precision error).
``add_self_loops=False`` everywhere (PyG's ``torch.compile`` path needs it, and all implementations then see exactly the
same edge list; the synthetic graphs are used as generated). Our
``CscGraph`` is built once per preset before any timing, as a training loop would, and its conversion time is
reported separately (``conversion`` block); nothing else is prepared for our implementation outside the timed
call. ``fwd`` runs under ``torch.no_grad()`` (inference); ``fwd+bwd`` runs the forward with autograd and
``out.backward(grad)`` with a fixed random ``grad``; the node features do not require grad (a first layer).
``bf16`` means ``torch.autocast("cuda", torch.bfloat16)`` around the forward, parameters stay fp32.

Memory (``peak_mem_bytes``): one extra call after timing; ``torch.cuda.max_memory_allocated()`` after
``reset_peak_memory_stats()`` minus ``memory_allocated()`` just before the call. Not counted: the persistent
inputs (``x``, ``edge_index``, ``edge_attr``, the ``CscGraph`` and its caches, parameters, the upstream
gradient). Counted: everything the call allocates through torch's allocator (saved activations, workspaces,
output, parameter gradients). Memory cuDNN might allocate outside torch's allocator is not seen.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import (  # noqa: E402
    TritonCompiles,
    environment,
    free_memory,
    is_fatal,
    is_oom,
    peak_memory,
    synchronize,
    time_fn,
    write_json,
)
from _graphs import BenchGraph, GraphSpec, make_graph  # noqa: E402

import cudnn_gnn  # noqa: E402
from cudnn_gnn.apps._cli import ArgumentParser, check_device, check_outputs  # noqa: E402
from cudnn_gnn.apps._util import write_text  # noqa: E402
from cudnn_gnn.backends import GAT_BACKENDS, gat_backend  # noqa: E402
from cudnn_gnn.backends.cudnn import EDGE_ELEMS_LIMIT, NODE_ELEMS_LIMIT  # noqa: E402

LAYERS = ("GAT", "GATv2")
PASSES = ("fwd", "fwd+bwd")
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PYG_IMPLS = ("pyg", "pyg_compile")
GPU_BACKENDS = tuple(b for b in GAT_BACKENDS if b not in ("auto", "reference"))  # what --backends may name
DET_VARIANT = ("cudnn",)  # backends whose deterministic=True is other kernels (Triton's backward is always repeatable)
COMPILE_VARIANT = ("triton",)  # backends whose layer is also measured under torch.compile (`layer_<backend>_compile`)
MiB = 2**20


# ----------------------------------------------------------------------------------------------- presets
@dataclass(frozen=True)
class Preset:
    """A named workload: a graph and a stack of attention layers on it.

    ``stack`` lists ``(out_channels_per_head, heads, concat)`` per layer; ``in_channels`` feeds the first.
    One layer is the default (the benchmark measures one layer); ``products3`` is a 3-layer model.
    In ``impls`` the cuDNN names (``cudnn``, ``cudnn_det``, ``layer_cudnn``, ``layer_cudnn_det``) stand for "ours
    on a GPU backend": :func:`backend_impls` turns each into one per backend of ``--backends``.
    """

    name: str
    graph: GraphSpec
    in_channels: int
    stack: tuple[tuple[int, int, bool], ...]
    description: str
    layers: tuple[str, ...] = LAYERS
    passes: tuple[str, ...] = PASSES
    impls: tuple[str, ...] = ("pyg", "pyg_compile", "cudnn", "cudnn_det", "layer_cudnn", "layer_cudnn_det")
    dtypes: tuple[str, ...] | None = None  # None: every dtype of the run; else only these
    warmup: int = 3
    repeats: int = 20
    conv_repeats: int = 5

    @property
    def heads(self) -> int:
        return self.stack[0][1]

    @property
    def channels(self) -> int:
        return self.stack[0][0]


ARXIV = GraphSpec(169_343, 2_315_598, exponent=0.6, ogbn="ogbn-arxiv")
PRESETS: dict[str, Preset] = {
    "cora": Preset(
        "cora", GraphSpec(2_708, 10_556, exponent=0.5), 1_433, ((8, 8, True),),
        "Cora shape (2,708 nodes, 10,556 symmetric edges), 1433 -> 8 heads x 8 (the GAT paper's first layer)",
        impls=("pyg", "reference", "layer_reference", "layer_cudnn", "layer_cudnn_det"),
        warmup=5, repeats=30, conv_repeats=10,
    ),
    "arxiv": Preset(
        "arxiv", ARXIV, 128, ((32, 8, True),),
        "ogbn-arxiv shape (169,343 nodes, ~2.3M symmetric edges), Linear(128 -> 256) + attention with 8 heads x 32. "
        "One layer, the shape the device README measured with raw cuDNN calls. (DGL's arxiv GAT reference is "
        "3 layers, 3 heads x 250 hidden; the per-layer shape here is kept comparable with the README.)",
        impls=("pyg", "pyg_compile", "cudnn", "layer_cudnn", "layer_cudnn_det", "layer_cudnn_compile"), repeats=10,
    ),
    "proteins": Preset(
        "proteins",
        GraphSpec(66_267, 39_561_252, edge_dim=8, exponent=0.3, ogbn="ogbn-proteins", ogbn_scale=0.5),
        8, ((8, 8, True),),
        "ogbn-proteins shape scaled to 0.5 of its nodes: 66,267 nodes, 39.56M directed edges (mean degree ~597 "
        "as in the real graph, whose 79.1M directed edges would double every per-edge tensor), 8-dim edge "
        "features through PyG's edge_dim=8, 8 -> 8 heads x 8, in bf16.",
        impls=("pyg", "layer_cudnn", "layer_cudnn_det"), dtypes=("bf16",), warmup=1, repeats=3, conv_repeats=3,
    ),
    "products": Preset(
        "products", GraphSpec(2_449_029, 123_718_280, exponent=0.5, ogbn="ogbn-products"), 100, ((64, 4, True),),
        "ogbn-products shape (2,449,029 nodes, 123,718,280 directed edges), Linear(100 -> 256) + attention with "
        "4 heads x 64, GAT in bf16. PyG is expected to run out of memory; that is reported as 'oom'.",
        layers=("GAT",), impls=("pyg", "layer_cudnn"), dtypes=("bf16",), warmup=1, repeats=3, conv_repeats=3,
    ),
    "products3": Preset(
        "products3", GraphSpec(2_449_029, 123_718_280, exponent=0.5, ogbn="ogbn-products"), 100,
        ((64, 4, True), (64, 4, True), (47, 4, False)),
        "ogbn-products shape, full graph, a 3-layer model (100 -> 4x64 -> 4x64 -> 47 classes, heads averaged in "
        "the last layer, ELU between; PyG's ogbn_products_gat example has the same structure with 128 per head): "
        "one training step (forward+backward, no optimizer) in bf16.",
        layers=("GAT",), passes=("fwd+bwd",), impls=("pyg", "layer_cudnn"), dtypes=("bf16",), warmup=1, repeats=3,
        conv_repeats=1,
    ),
}
SWEEP_SCALES = (0.25, 1.0, 4.0)


def sweep_presets() -> list[Preset]:
    """arxiv-like graphs from 1/16 to 4x the arxiv size (mean degree kept), GAT fwd+bwd, PyG vs ours."""
    out = []
    for s in SWEEP_SCALES:
        n, e = round(ARXIV.num_nodes * s), 2 * round(ARXIV.num_edges * s / 2)
        out.append(Preset(
            f"sweep-x{s:g}", replace(ARXIV, num_nodes=n, num_edges=e, ogbn_scale=s), 128, ((32, 8, True),),
            f"arxiv-like at {s:g}x ({n:,} nodes, ~{e:,} edges), Linear(128 -> 256) + GAT 8 heads x 32",
            layers=("GAT",), passes=("fwd+bwd",), impls=("pyg", "layer_cudnn"), dtypes=("fp32",),
            warmup=2 if s >= 1 else 3, repeats=10 if s >= 1 else 20, conv_repeats=3,
        ))
    return out


QUICK_PRESETS: dict[str, Preset] = {
    "tiny": Preset("tiny", GraphSpec(300, 2_400, exponent=0.5), 16, ((8, 4, True),),
                   "CPU smoke test: 300 nodes, 2,400 edges, 16 -> 4 heads x 8",
                   impls=("pyg", "pyg_compile", "reference", "layer_reference"), warmup=1, repeats=2, conv_repeats=2),
    "tiny-edge": Preset("tiny-edge", GraphSpec(200, 1_600, edge_dim=4, exponent=0.5), 12, ((4, 2, True),),
                        "CPU smoke test with 4-dim edge features: 200 nodes, 1,600 edges, 12 -> 2 heads x 4",
                        impls=("pyg", "pyg_compile", "reference", "layer_reference"), warmup=1, repeats=2, conv_repeats=2),
    # Small enough for Triton's interpreter (every program runs in Python: ~0.3 s a forward even here).
    "micro": Preset("micro", GraphSpec(16, 48, edge_dim=4, exponent=0.5), 8, ((4, 2, True),),
                    "CPU smoke test of the GPU backends' rows (Triton under TRITON_INTERPRET=1): 16 nodes, 48 edges, "
                    "4-dim edge features, 8 -> 2 heads x 4",
                    impls=("pyg", "layer_reference", "layer_cudnn", "layer_cudnn_det"), warmup=1, repeats=1,
                    conv_repeats=1),
}
DEFAULT_PRESETS = ("cora", "arxiv", "proteins", "sweep", "products", "products3")


def resolve_presets(names: list[str], quick: bool) -> list[Preset]:
    table = QUICK_PRESETS if quick else PRESETS
    out: list[Preset] = []
    for name in names:
        if name == "sweep" and not quick:
            out.extend(sweep_presets())
        elif name in table:
            out.append(table[name])
        elif name in PRESETS or name in QUICK_PRESETS:
            out.append(PRESETS.get(name) or QUICK_PRESETS[name])
        else:
            known = ", ".join([*PRESETS, "sweep", *QUICK_PRESETS])
            raise SystemExit(f"--presets must name known presets ({known}), got {name!r}")
    return out


def impl_backend(impl: str) -> str | None:
    """The GAT backend an implementation runs on (``layer_triton`` -> ``triton``), None for PyG's own layer."""
    if impl in PYG_IMPLS:
        return None
    name = impl.removeprefix("layer_").removesuffix("_compile").removesuffix("_det")
    if name not in GAT_BACKENDS or name == "auto" or (impl.endswith("_compile") and not impl.startswith("layer_")):
        raise ValueError(f"impl must be pyg, pyg_compile, [layer_]<backend>[_det] or layer_<backend>_compile, "
                         f"got {impl!r}")
    return name


def backend_impls(impls: tuple[str, ...], backends: tuple[str, ...]) -> tuple[str, ...]:
    """``impls`` with every cuDNN one turned into one per backend of ``backends``, side by side
    (``layer_cudnn`` -> ``layer_cudnn``, ``layer_triton``); a ``_det`` one only for backends in ``DET_VARIANT``, a
    ``_compile`` one only for those in ``COMPILE_VARIANT``."""
    out: list[str] = []
    for impl in impls:
        if impl_backend(impl) != "cudnn":
            out.append(impl)
            continue
        out += [impl.replace("cudnn", b) for b in backends if (not impl.endswith("_det") or b in DET_VARIANT)
                and (not impl.endswith("_compile") or b in COMPILE_VARIANT)]
    return tuple(dict.fromkeys(out))


def case_impls(p: Preset, backends: tuple[str, ...], impl_filter: set[str] | None) -> list[str]:
    """The implementations one preset runs: its own, per backend, restricted by ``--impls``."""
    return [i for i in backend_impls(p.impls, backends) if impl_filter is None or i in impl_filter]


# ----------------------------------------------------------------------------------------------- models
class OpGAT(nn.Module):
    """``Linear`` + :func:`cudnn_gnn.gat` with a PyG ``GATConv``'s weights (copied, not shared).

    PyG's edge term ``att_edge . lin_edge(edge_attr)`` per head is the linear map ``edge_attr @ M`` with
    ``M[d, h] = sum_c lin_edge.weight[h*C + c, d] * att_edge[h, c]``; it is passed as a width-``H`` edge feature
    (one value per head) with unit ``a_edge``: the same math, without materialising ``[E, H*C]``.
    """

    def __init__(self, conv: nn.Module, *, backend: str, deterministic: bool) -> None:
        super().__init__()
        self.heads, self.out_channels, self.concat = conv.heads, conv.out_channels, conv.concat
        self.lin = copy.deepcopy(conv.lin)
        self.att_src = nn.Parameter(conv.att_src.detach().clone())
        self.att_dst = nn.Parameter(conv.att_dst.detach().clone())
        self.lin_edge = None if conv.lin_edge is None else copy.deepcopy(conv.lin_edge)
        self.att_edge = None if conv.lin_edge is None else nn.Parameter(conv.att_edge.detach().clone())
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())
        self.register_buffer("ones", torch.ones(self.heads), persistent=False)
        self.negative_slope = conv.negative_slope
        self.backend, self.deterministic = backend, deterministic

    def forward(self, x: Tensor, graph: cudnn_gnn.CscGraph, edge_attr: Tensor | None = None) -> Tensor:
        h, c = self.heads, self.out_channels
        xp = self.lin(x)
        w = [self.att_src.reshape(-1), self.att_dst.reshape(-1)]
        ea = None
        if self.lin_edge is not None and edge_attr is not None:
            m = torch.einsum("hcd,hc->dh", self.lin_edge.weight.view(h, c, -1), self.att_edge.view(h, c))
            ea = edge_attr @ m
            w.append(self.ones)
        out = cudnn_gnn.gat(graph, xp, torch.cat(w), heads=h, edge_attr=ea, concat=self.concat,
                            activation_alpha=self.negative_slope, deterministic=self.deterministic,
                            backend=self.backend)
        return out if self.bias is None else out + self.bias


class OpGATv2(nn.Module):
    """``lin_l``/``lin_r`` + :func:`cudnn_gnn.gatv2` with a PyG ``GATv2Conv``'s weights (copied)."""

    def __init__(self, conv: nn.Module, *, backend: str, deterministic: bool) -> None:
        super().__init__()
        self.heads, self.concat = conv.heads, conv.concat
        self.lin_l = copy.deepcopy(conv.lin_l)
        self.lin_r = self.lin_l if conv.share_weights else copy.deepcopy(conv.lin_r)
        self.att = nn.Parameter(conv.att.detach().clone())
        self.lin_edge = None if conv.lin_edge is None else copy.deepcopy(conv.lin_edge)
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())
        self.negative_slope = conv.negative_slope
        self.backend, self.deterministic = backend, deterministic

    def forward(self, x: Tensor, graph: cudnn_gnn.CscGraph, edge_attr: Tensor | None = None) -> Tensor:
        # raw edge features and lin_edge's weight, as GATv2Conv passes them (Triton projects inside its kernels)
        ea = None if self.lin_edge is None else edge_attr
        out = cudnn_gnn.gatv2(graph, (self.lin_l(x), self.lin_r(x)), self.att.reshape(-1), heads=self.heads,
                              edge_attr=ea, lin_edge_weight=None if ea is None or self.lin_edge is None
                              else self.lin_edge.weight, concat=self.concat, activation_alpha=self.negative_slope,
                              deterministic=self.deterministic, backend=self.backend)
        return out if self.bias is None else out + self.bias


class Stack(nn.Module):
    """Attention layers applied in turn with ELU between them; ``graph`` is whatever the layers take."""

    def __init__(self, convs: list[nn.Module]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)

    def forward(self, x: Tensor, graph: Any, edge_attr: Tensor | None = None) -> Tensor:
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            x = conv(x, graph, edge_attr)
            if i < last:
                x = F.elu(x)
        return x


def pyg_stack(preset: Preset, layer: str, edge_dim: int, seed: int) -> Stack:
    from torch_geometric.nn import GATConv, GATv2Conv

    cls = GATConv if layer == "GAT" else GATv2Conv
    torch.manual_seed(seed)
    convs, fan_in = [], preset.in_channels
    for c, h, concat in preset.stack:
        convs.append(cls(fan_in, c, heads=h, concat=concat, add_self_loops=False, edge_dim=edge_dim or None))
        fan_in = c * h if concat else c
    stack = Stack(convs)
    with torch.no_grad():  # PyG zero-initialises the bias; a random one makes the output check meaningful
        for conv in stack.convs:
            if conv.bias is not None:
                conv.bias.normal_(0.0, 0.1)
    return stack


def layer_classes() -> dict[str, type] | None:
    """``{"GAT": cudnn_gnn.layers.GATConv, "GATv2": ...}`` when the layers package provides them, else None."""
    try:
        from cudnn_gnn import layers
    except Exception:  # noqa: BLE001 - layers not built yet: the layer cases are skipped
        return None
    gat, gatv2 = getattr(layers, "GATConv", None), getattr(layers, "GATv2Conv", None)
    return {"GAT": gat, "GATv2": gatv2} if gat is not None and gatv2 is not None else None


def make_layer(cls: type, conv: nn.Module, *, backend: str, deterministic: bool) -> nn.Module:
    """Our layer with the PyG layer's constructor arguments and ``state_dict`` (strict)."""
    kwargs: dict[str, Any] = dict(heads=conv.heads, concat=conv.concat, negative_slope=conv.negative_slope,
                                  dropout=0.0, add_self_loops=False, edge_dim=conv.edge_dim, bias=conv.bias is not None)
    if hasattr(conv, "share_weights"):
        kwargs["share_weights"] = conv.share_weights
    layer = cls(conv.in_channels, conv.out_channels, **kwargs, backend=backend, deterministic=deterministic)
    layer.load_state_dict(conv.state_dict(), strict=True)
    return layer.to(next(conv.parameters()).device)


_LAYER_GRAPH_INPUT: str | None = None


def layer_graph_input(classes: dict[str, type]) -> str:
    """Whether our layers take a prebuilt ``CscGraph`` ("csc") or only PyG's ``edge_index`` ("edge_index").

    Probed once on a 3-node CPU graph with the reference backend. With "edge_index", conversion (or the
    layer's own cache lookup) happens inside the timed call, as it would for a user of that API.
    """
    global _LAYER_GRAPH_INPUT
    if _LAYER_GRAPH_INPUT is None:
        from torch_geometric.nn import GATConv

        ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
        layer = make_layer(classes["GAT"], GATConv(4, 2, heads=2, add_self_loops=False), backend="reference",
                           deterministic=False)
        try:
            layer(torch.randn(3, 4), cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=3))
            _LAYER_GRAPH_INPUT = "csc"
        except Exception:  # noqa: BLE001 - any refusal means: pass edge_index
            _LAYER_GRAPH_INPUT = "edge_index"
    return _LAYER_GRAPH_INPUT


# ----------------------------------------------------------------------------------------------- cases
@dataclass
class Inputs:
    """What every implementation of one preset shares; built once, before any timing."""

    preset: Preset
    graph: BenchGraph
    x: Tensor
    csc: cudnn_gnn.CscGraph
    grad: Tensor  # upstream gradient, fp32, cast once per output dtype
    device: torch.device
    refs: dict[tuple[str, ...], Tensor] = field(default_factory=dict)  # PyG fp32 outputs, PyG low-precision errors


def build_model(impl: str, layer: str, inp: Inputs, seed: int) -> tuple[nn.Module, Any, str]:
    """``(module to call, graph argument, graph input kind)`` for one implementation."""
    edge_dim = inp.preset.graph.edge_dim
    pyg = pyg_stack(inp.preset, layer, edge_dim, seed).to(inp.device)
    ei = inp.graph.edge_index
    if impl == "pyg":
        return pyg, ei, "edge_index"
    if impl == "pyg_compile":
        return torch.compile(pyg), ei, "edge_index"
    backend = impl_backend(impl)
    assert backend is not None  # the PyG impls returned above
    det = impl.endswith("_det")
    compiled = impl.endswith("_compile")
    if not impl.startswith("layer_"):
        op = OpGAT if layer == "GAT" else OpGATv2
        convs = [op(conv, backend=backend, deterministic=det) for conv in pyg.convs]
        return Stack(convs).to(inp.device), inp.csc, "csc"
    classes = layer_classes()
    if classes is None:
        raise LookupError("cudnn_gnn.layers.GATConv/GATv2Conv not available")
    convs = [make_layer(classes[layer], conv, backend=backend, deterministic=det) for conv in pyg.convs]
    kind = layer_graph_input(classes)
    stack = Stack(convs).to(inp.device)
    return (torch.compile(stack) if compiled else stack), (inp.csc if kind == "csc" else ei), kind


def make_step(model: nn.Module, graph_arg: Any, inp: Inputs, dtype: str, pass_: str
              ) -> tuple[Callable[[], Tensor | None], Callable[[], None] | None]:
    """The timed callable and the untimed ``pre`` hook (drop parameter grads) for one case."""
    x, ea = inp.x, inp.graph.edge_attr
    cast = DTYPES[dtype]

    def autocast() -> contextlib.AbstractContextManager:
        if cast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=inp.device.type, dtype=cast)

    if pass_ == "fwd":
        def fwd() -> Tensor:
            with torch.no_grad(), autocast():
                return model(x, graph_arg, ea)
        return fwd, None

    grads: dict[torch.dtype, Tensor] = {}
    params = [p for p in model.parameters() if p.requires_grad]

    def fwd_bwd() -> None:
        with autocast():
            out = model(x, graph_arg, ea)
        g = grads.get(out.dtype)
        if g is None:  # first (warm-up) call only: the same values for every implementation, cast once
            g = grads[out.dtype] = inp.grad.to(out.dtype)
        out.backward(g)

    def drop_grads() -> None:
        for p in params:
            p.grad = None

    return fwd_bwd, drop_grads


_FATAL: str | None = None


def run_case(inp: Inputs, layer: str, impl: str, dtype: str, pass_: str, args: argparse.Namespace,
             builds: TritonCompiles | None = None) -> dict[str, Any]:
    """One measured case. ``builds``: the Triton build log; what it logged during this case (the warm-up's first
    call builds every new kernel variant) goes into ``triton_builds``, next to ``first_call_ms``."""
    global _FATAL
    p = inp.preset
    rec: dict[str, Any] = {
        "preset": p.name, "layer": layer, "impl": impl, "backend": impl_backend(impl), "dtype": dtype, "pass": pass_,
        "num_nodes": inp.graph.num_nodes, "num_edges": inp.graph.num_edges, "in_channels": p.in_channels,
        "heads": p.heads, "channels": p.channels, "edge_dim": p.graph.edge_dim, "num_layers": len(p.stack),
        "median_ms": None, "p10_ms": None, "p90_ms": None, "peak_mem_bytes": None, "status": "ok",
    }
    if _FATAL is not None:
        rec.update(status="skipped", error=f"CUDA context lost earlier: {_FATAL}")
        return rec
    if impl.startswith("layer_") and layer_classes() is None:
        rec.update(status="unavailable", error="cudnn_gnn.layers.GATConv/GATv2Conv not importable")
        return rec
    if builds is not None:
        builds.take()  # whatever came before belongs to no case
    try:
        model, graph_arg, kind = build_model(impl, layer, inp, args.seed)
        rec["graph_input"] = kind
        fn, pre = make_step(model, graph_arg, inp, dtype, pass_)
        warmup = p.warmup + (1 if impl.endswith("_compile") else 0)
        repeats = args.repeats if args.repeats is not None else p.repeats
        rec.update(time_fn(fn, device=inp.device, warmup=warmup, repeats=repeats, pre=pre))
        rec["peak_mem_bytes"] = peak_memory(fn, device=inp.device, pre=pre)
        if pass_ == "fwd":
            check_output(inp, rec, fn())
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record; the run goes on
        if is_oom(exc):
            rec.update(status="oom", error=_short(exc))
        else:
            rec.update(status="error", error=_short(exc))
            if inp.device.type == "cuda" and is_fatal(exc):
                _FATAL = _short(exc)
    finally:
        if impl.endswith("_compile"):
            torch._dynamo.reset()
        if builds is not None and (built := builds.take()):
            rec["triton_builds"] = built
    return rec


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) < 1500 else text[:1500] + " ..."


REF_MAX_ELEMS = 2**28  # keep PyG's fp32 forward output as the oracle only up to 1 GiB
TOL = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 1e-2}  # max |diff| relative to max(1, max |ref|)


def check_output(inp: Inputs, rec: dict[str, Any], out: Tensor) -> None:
    """Compare a forward output with PyG's fp32 output (same weights and inputs).

    fp32: ``check == "ok"`` when the max abs difference is within ``TOL["fp32"]`` (relative to the output's
    scale). bf16/fp16: judged against the error of PyG's own same-precision path (practice 13): ok when within
    ``max(2 x PyG's error, TOL[dtype] x scale)``; PyG's low-precision records carry their own error too.
    """
    layer, dtype = rec["layer"], rec["dtype"]
    if rec["impl"] == "pyg" and dtype == "fp32":
        if out.numel() <= REF_MAX_ELEMS:
            inp.refs[(layer, "fp32")] = out.detach().float()
        return
    ref = inp.refs.get((layer, "fp32"))
    if ref is None:
        return
    diff = (out.float() - ref).abs().max().item() if ref.numel() else 0.0
    scale = max(ref.abs().max().item() if ref.numel() else 0.0, 1.0)
    rec["max_abs_diff_vs_pyg_fp32"] = diff
    rec["ref_max_abs"] = scale
    bound = TOL[dtype] * scale
    if rec["impl"] == "pyg":  # PyG's own low-precision error: the yardstick for ours
        inp.refs[(layer, dtype, "pyg_err")] = torch.tensor(diff)
        rec["check"] = "ok"
        return
    pyg_err = inp.refs.get((layer, dtype, "pyg_err"))
    if dtype != "fp32" and pyg_err is not None:
        bound = max(bound, 2.0 * float(pyg_err))
    rec["check"] = "ok" if diff <= bound else "MISMATCH"


def time_conversion(inp: Inputs, repeats: int) -> list[dict[str, Any]]:
    """CscGraph.from_edge_index against PyG's EdgeIndex(...).sort_by('col') on the same edges and device."""
    from torch_geometric import EdgeIndex

    ei, n = inp.graph.edge_index, inp.graph.num_nodes
    cases: dict[str, Callable[[], Any]] = {
        "cudnn_gnn.CscGraph.from_edge_index": lambda: cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n),
        "pyg.EdgeIndex.sort_by('col')": lambda: EdgeIndex(ei, sparse_size=(n, n)).sort_by("col"),
    }
    out = []
    for impl, fn in cases.items():
        rec: dict[str, Any] = {"preset": inp.preset.name, "impl": impl, "num_nodes": n, "num_edges": inp.graph.num_edges,
                               "status": "ok"}
        try:
            rec.update(time_fn(fn, device=inp.device, warmup=1, repeats=repeats))
            rec["peak_mem_bytes"] = peak_memory(fn, device=inp.device)
        except Exception as exc:  # noqa: BLE001
            rec.update(status="oom" if is_oom(exc) else "error", error=_short(exc))
        out.append(rec)
        free_memory(inp.device)
    return out


_GRAPH_CACHE: dict[GraphSpec, BenchGraph] = {}


def _tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of the distinct tensors held by a CscGraph, its derived-structure cache and what that holds (the
    reverse CSC, index-dtype copies, hub splits, layer plans): the persistent memory our graph costs."""
    import dataclasses

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, Tensor):
        key = obj.untyped_storage().data_ptr()
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(_tensor_bytes(getattr(obj, f.name, None), seen) for f in dataclasses.fields(obj))
    return 0


def build_inputs(p: Preset, device: torch.device, args: argparse.Namespace) -> tuple[Inputs, float]:
    """Graph (reused from the previous preset when it is the same spec), features, upstream grad, CscGraph."""
    t0 = time.perf_counter()
    graph = _GRAPH_CACHE.get(p.graph)
    _GRAPH_CACHE.clear()  # keep at most one graph alive between presets
    if graph is None:
        graph = make_graph(p.graph, seed=args.seed, device=device, prefer_ogbn=not args.no_ogbn)
    _GRAPH_CACHE[p.graph] = graph
    synchronize(device)
    gen_s = time.perf_counter() - t0
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed + 7)
    n = graph.num_nodes
    x = torch.randn(n, p.in_channels, generator=gen, device=device)
    c, h, concat = p.stack[-1]
    grad = torch.randn(n, c * h if concat else c, generator=gen, device=device)
    csc = cudnn_gnn.CscGraph.from_edge_index(graph.edge_index, num_nodes=n)  # cached, as a training loop would
    return Inputs(p, graph, x, csc, grad, device), gen_s


# ----------------------------------------------------------------------------------------------- summary
def _fmt_ms(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"].upper() if r["status"] in ("oom", "error") else r["status"]
    return f"{r['median_ms']:.2f}"


def _fmt_mem(r: dict[str, Any] | None) -> str:
    if r is None or r["status"] != "ok" or r.get("peak_mem_bytes") is None:
        return _fmt_ms(r) if r is not None and r["status"] != "ok" else "-"
    return f"{r['peak_mem_bytes'] / MiB:,.0f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (preset, layer, dtype, pass, backend): PyG eager / compiled, ours on that backend (the layer
    where it ran, else the op-level model) and the ratios. Every GPU backend measured gets its row, side by side;
    a group with none (a CPU run) gets one row for the reference backend."""
    groups: dict[tuple[str, str, str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["preset"], r["layer"], r["dtype"], r["pass"]), {})[r["impl"]] = r
    rows = []
    for (preset, layer, dtype, pass_), by in groups.items():
        measured = {impl_backend(i) for i in by}
        for backend in [b for b in GPU_BACKENDS if b in measured] or ["reference"]:
            rows.append(_summary_row(preset, layer, dtype, pass_, backend, by))
    return rows


def _summary_row(preset: str, layer: str, dtype: str, pass_: str, backend: str, by: dict[str, dict[str, Any]]
                 ) -> dict[str, Any]:
    def pick(order: tuple[str, ...]) -> dict[str, Any] | None:
        present = [by[i] for i in order if i in by and by[i]["status"] != "unavailable"]
        ok = [r for r in present if r["status"] == "ok"]
        return ok[0] if ok else (present[0] if present else None)

    pyg, comp = by.get("pyg"), by.get("pyg_compile")
    ours, det = pick((f"layer_{backend}", backend)), pick((f"layer_{backend}_det", f"{backend}_det"))
    ours_comp = by.get(f"layer_{backend}_compile")

    def ms(r: dict[str, Any] | None) -> float | None:
        return r["median_ms"] if r is not None and r["status"] == "ok" else None

    def mem(r: dict[str, Any] | None) -> float | None:
        return r["peak_mem_bytes"] if r is not None and r["status"] == "ok" else None

    return {
        "preset": preset, "layer": layer, "dtype": dtype, "pass": pass_, "backend": backend,
        "num_nodes": (ours or pyg or {}).get("num_nodes"), "num_edges": (ours or pyg or {}).get("num_edges"),
        "pyg_status": None if pyg is None else pyg["status"], "pyg_ms": ms(pyg), "pyg_mem": mem(pyg),
        "pyg_compile_status": None if comp is None else comp["status"], "pyg_compile_ms": ms(comp),
        "ours_impl": None if ours is None else ours["impl"], "ours_status": None if ours is None else ours["status"],
        "ours_ms": ms(ours), "ours_mem": mem(ours), "ours_first_call_ms": None if ours is None else ours.get("first_call_ms"),
        "ours_det_impl": None if det is None else det["impl"], "ours_det_ms": ms(det), "ours_det_mem": mem(det),
        "speedup_vs_pyg": _ratio(ms(pyg), ms(ours)),
        "speedup_vs_pyg_compile": _ratio(ms(comp), ms(ours)),
        "speedup_det_vs_pyg": _ratio(ms(pyg), ms(det)),
        "ours_compile_status": None if ours_comp is None else ours_comp["status"], "ours_compile_ms": ms(ours_comp),
        "speedup_compile_vs_pyg_compile": _ratio(ms(comp), ms(ours_comp)),
        "mem_ratio_pyg_over_ours": _ratio(mem(pyg), mem(ours)),
        "checks": sorted({r.get("check") for r in (pyg, comp, ours, det) if r is not None and r.get("check")}),
        "_rows": {"pyg": pyg, "pyg_compile": comp, "ours": ours, "ours_det": det, "ours_compile": ours_comp},
    }


def markdown_table(rows: list[dict[str, Any]], conversions: list[dict[str, Any]], timing_claims: bool,
                   records: list[dict[str, Any]] | None = None) -> str:
    """The summary as markdown: one line per backend of each case (PyG's columns repeated, so that every line
    reads alone), the graph conversions, and the first calls of the Triton cases with the kernels they built."""
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    lines = [
        "| preset | layer | dtype | pass | backend | PyG ms | PyG compiled ms | ours ms | ours det. ms | speed-up vs PyG "
        "| vs PyG compiled | PyG peak MiB | ours peak MiB | PyG / ours memory |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        k = r["_rows"]
        op = k["ours"] is not None and not k["ours"]["impl"].startswith("layer_")
        ours = _fmt_ms(k["ours"]) + (" (op)" if op else "")
        lines.append(
            f"| {r['preset']} | {r['layer']} | {r['dtype']} | {r['pass']} | {r.get('backend', '-')} | {_fmt_ms(k['pyg'])} "
            f"| {_fmt_ms(k['pyg_compile'])} | {ours} | {_fmt_ms(k['ours_det'])} | {x(r['speedup_vs_pyg'])} "
            f"| {x(r['speedup_vs_pyg_compile'])} | {_fmt_mem(k['pyg'])} | {_fmt_mem(k['ours'])} "
            f"| {x(r['mem_ratio_pyg_over_ours'])} |"
        )
    compiled = [r for r in rows if r["_rows"].get("ours_compile") is not None]
    if compiled:
        lines += ["", "| preset | layer | dtype | pass | backend | PyG compiled ms | ours compiled ms | ours eager ms "
                  "| compiled vs PyG compiled |", "|---|---|---|---|---|---:|---:|---:|---:|"]
        for r in compiled:
            k = r["_rows"]
            lines.append(f"| {r['preset']} | {r['layer']} | {r['dtype']} | {r['pass']} | {r['backend']} "
                         f"| {_fmt_ms(k['pyg_compile'])} | {_fmt_ms(k['ours_compile'])} | {_fmt_ms(k['ours'])} "
                         f"| {x(r['speedup_compile_vs_pyg_compile'])} |")
    if conversions:
        lines += ["", "| preset | graph conversion | edges | median ms |", "|---|---|---:|---:|"]
        for c in conversions:
            lines.append(f"| {c['preset']} | {c['impl']} | {c['num_edges']:,} | {_fmt_ms(c)} |")
    triton = [r for r in records or [] if r.get("backend") == "triton" and r["status"] == "ok"]
    if triton:
        lines += ["", "| preset | layer | dtype | pass | impl | Triton first call ms | kernels built in it (s) |",
                  "|---|---|---|---|---|---:|---|"]
        for r in triton:
            built = "; ".join(f"{b['kernel']} {b['build_s']:.1f}" for b in r.get("triton_builds", [])) or "none"
            lines.append(f"| {r['preset']} | {r['layer']} | {r['dtype']} | {r['pass']} | {r['impl']} "
                         f"| {r['first_call_ms']:,.0f} | {built} |")
    lines += [
        "",
        "ms: median over the repeats (CUDA events, after warm-up: first calls, with Triton's kernel builds, are not "
        "in it); ours: cudnn-gnn's `cudnn_gnn.layers.*Conv` on the backend of its line ((op): Linear + "
        "`cudnn_gnn.gat/gatv2`), deterministic=False; ours det.: deterministic=True (cuDNN only: Triton's backward "
        "is bitwise repeatable as it is). Speed-up and memory columns are PyG / ours (> 1: cudnn-gnn faster / "
        "leaner). Peak MiB: memory allocated at the peak of one call above what existed before it (inputs, graph, "
        "parameters not counted). OOM: torch.cuda.OutOfMemoryError on this GPU. Triton first call: the wall time "
        "of a case's first call, which builds the kernel variants it is the first to use (each variant's "
        "constexprs in the JSON's `triton_builds`; none under TRITON_INTERPRET=1).",
    ]
    if not timing_claims:
        lines.insert(0, "_--quick smoke run on CPU: the figures below are not timing claims._\n")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = ArgumentParser(prog="bench_layers.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="CPU smoke test: tiny presets, reference + PyG, no timing claims")
    ap.add_argument("--out", default=None, help="JSON output path (default: bench_layers.json, or bench_quick.json)")
    ap.add_argument("--md", default=None, help="markdown table path (default: the JSON path with .md)")
    ap.add_argument("--plot", default=None, help="also write this PNG (benchmarks/plot.py)")
    ap.add_argument("--presets", default=None,
                    help=f"comma list (default {','.join(DEFAULT_PRESETS)}; quick: tiny,tiny-edge)")
    ap.add_argument("--dtypes", default=None, help="comma list of fp32, bf16, fp16 (default fp32,bf16; quick: fp32)")
    ap.add_argument("--layers", default="GAT,GATv2", help="comma list of GAT, GATv2")
    ap.add_argument("--backends", default=",".join(GPU_BACKENDS),
                    help=f"comma list of the GPU backends our layer runs on, side by side (default "
                         f"{','.join(GPU_BACKENDS)}); each must be available here (--backends triton needs CUDA and "
                         f"triton only, or TRITON_INTERPRET=1 with --quick)")
    ap.add_argument("--impls", default=None, help="comma list restricting each preset's implementations")
    ap.add_argument("--prebuild", default="processes", choices=("processes", "threads", "off"),
                    help="build the cuDNN kernels before timing: in parallel processes (default), in threads of this "
                         "process, or not at all (first calls then build inside the warm-up). Triton builds each "
                         "kernel variant at its first call, inside the warm-up: reported, never timed")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per case (default: per preset)")
    ap.add_argument("--compile-presets", default="arxiv", help="presets with a pyg_compile baseline ('' for none)")
    ap.add_argument("--compile-layers", action="store_true",
                    help="also our layer under torch.compile (layer_<backend>_compile) where pyg_compile runs")
    ap.add_argument("--compile-passes", default="fwd+bwd", help="passes with a pyg_compile baseline")
    ap.add_argument("--device", default=None, help="default: cuda if available, cpu with --quick")
    ap.add_argument("--no-ogbn", action="store_true", help="always use benchmarks/_graphs.py's generator")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.device = check_device(ap, args.device or ("cpu" if args.quick else "auto"))
    args.out = args.out or ("bench_quick.json" if args.quick else "bench_layers.json")
    args.md = args.md or os.path.splitext(args.out)[0] + ".md"
    check_outputs(ap, {"--out": args.out, "--md": args.md, "--plot": args.plot})
    return args


def prebuild_kernels(presets: list[Preset], layers: list[str], dtypes: list[str], impl_filter: set[str] | None,
                     device: torch.device, processes: bool = True,
                     backends: tuple[str, ...] = GPU_BACKENDS) -> dict[str, float] | None:
    """Build every cuDNN kernel the run will call (``cudnn_gnn.precompile``), so that no timed case pays a
    first-call build. With ``processes`` each build first runs in a process of its own, all at once
    (``precompile(processes=True)``: on a fresh H200 107 s against 472 s in threads), so the run waits for the
    slowest build instead of the sum. Nothing (not even cuDNN's probe) where the run has no cuDNN case."""
    impls = {i for p in presets for i in case_impls(p, backends, impl_filter)}
    if device.type != "cuda" or not any(impl_backend(i) == "cudnn" for i in impls):
        return None
    if cudnn_gnn.backend_info().reason is not None:  # no cuDNN GAT here
        return None
    def torch_dtype(d: str) -> torch.dtype:
        return torch.float32 if d == "fp32" else DTYPES[d]

    # The kernels differ by op, dtype, edge map (calls with edge features pass it) and index dtype (int64 where
    # edges x width reach 2**30: proteins, the 4x sweep, products). One precompile call per (edge map, index
    # dtype) group, all at once, each building what the presets of its group run.
    groups: dict[tuple[bool, torch.dtype], tuple[set[str], set[str]]] = {}
    for p in presets:
        ops_p = {op for op, name in (("gat", "GAT"), ("gatv2", "GATv2")) if name in layers and name in p.layers}
        dts_p = {d for d in (p.dtypes or dtypes) if d in dtypes}
        if not ops_p or not dts_p or not any(impl_backend(i) == "cudnn" for i in case_impls(p, backends, impl_filter)):
            continue
        width = max(h * c for c, h, _ in p.stack)
        big = max(p.graph.num_nodes, 1) * width >= NODE_ELEMS_LIMIT or p.graph.num_edges * width >= EDGE_ELEMS_LIMIT
        ops_g, dts_g = groups.setdefault((bool(p.graph.edge_dim), torch.int64 if big else torch.int32), (set(), set()))
        ops_g |= ops_p
        dts_g |= dts_p
    order = {"fp32": 0, "bf16": 1, "fp16": 2}
    jobs = [(sorted(o), [torch_dtype(d) for d in sorted(t, key=order.__getitem__)], e, it)
            for (e, it), (o, t) in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))]
    t0 = time.perf_counter()
    got: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=max(len(jobs), 1)) as pool:
        futures = [pool.submit(cudnn_gnn.precompile, o, dts, edge_features=e, index_dtypes=(it,), device=device,
                               processes=processes) for o, dts, e, it in jobs]
        for f in futures:
            got.update(f.result())
    if any(i.endswith("_det") and impl_backend(i) == "cudnn" for i in impls):
        for o, dts, e, it in jobs:
            got.update({f"{k} deterministic": v for k, v in cudnn_gnn.precompile(
                o, dts, deterministic=True, edge_features=e, index_dtypes=(it,), device=device).items()})
    got["wall"] = time.perf_counter() - t0
    print(f"# cuDNN kernels built in {got['wall']:.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in got.items()),
          flush=True)
    return got


def _run_preset(p: Preset, device: torch.device, args: argparse.Namespace, layers: list[str], dtypes: list[str],
                impls: list[str], compile_presets: set[str], compile_passes: set[str], builds: TritonCompiles | None,
                preset_info: dict[str, Any], records: list[dict[str, Any]], conversions: list[dict[str, Any]]) -> None:
    """Every case of one preset, appended to ``records`` (and its graph conversions to ``conversions``)."""
    t_preset = time.perf_counter()
    info: dict[str, Any] = {"description": p.description, "in_channels": p.in_channels,
                            "stack": [list(s) for s in p.stack], "warmup": p.warmup, "repeats": args.repeats or p.repeats}
    preset_info[p.name] = info
    if _FATAL is not None:
        info["status"] = f"skipped: CUDA context lost earlier: {_FATAL}"
        return
    try:
        inp, gen_s = build_inputs(p, device, args)
    except Exception as exc:  # noqa: BLE001 - e.g. OOM generating the graph: record and go on
        info["status"] = f"{'oom' if is_oom(exc) else 'error'}: {_short(exc)}"
        print(f"{p.name}: could not build inputs: {info['status']}", flush=True)
        free_memory(device)
        return
    info.update(num_nodes=inp.graph.num_nodes, num_edges=inp.graph.num_edges, graph_source=inp.graph.source,
                graph_generation_s=gen_s, status="ok")
    print(f"## {p.name}: {inp.graph.num_nodes:,} nodes, {inp.graph.num_edges:,} edges ({inp.graph.source})", flush=True)
    conv = time_conversion(inp, p.conv_repeats)
    conversions.extend(conv)
    for c in conv:
        print(f"   conversion {c['impl']:40s} {_fmt_ms(c):>10} ms", flush=True)
    for layer in [lay for lay in p.layers if lay in layers]:
        for dtype in dtypes:
            if p.dtypes is not None and dtype not in p.dtypes and any(d in dtypes for d in p.dtypes):
                continue  # the preset is measured in its own dtypes (e.g. products in bf16)
            for pass_ in p.passes:
                for impl in impls:
                    if impl.endswith("_compile") and (p.name not in compile_presets or pass_ not in compile_passes):
                        continue
                    if impl.startswith("layer_") and impl.endswith("_compile") and not args.compile_layers:
                        continue
                    rec = run_case(inp, layer, impl, dtype, pass_, args, builds)
                    free_memory(device)
                    records.append(rec)
                    mem = "" if rec.get("peak_mem_bytes") is None else f"{rec['peak_mem_bytes'] / MiB:10,.0f} MiB"
                    chk = f" diff={rec['max_abs_diff_vs_pyg_fp32']:.1e} {rec['check']}" if "check" in rec else ""
                    err = f"  {rec['error'][:160]}" if rec.get("error") else ""
                    unit = " ms" if rec["status"] == "ok" else "   "
                    print(f"   {layer:6s} {dtype:5s} {pass_:8s} {impl:16s} {_fmt_ms(rec):>10}{unit} {mem}{chk}{err}",
                          flush=True)
    info["graph_cache_mib"] = round(_tensor_bytes(inp.csc) / MiB, 1)
    del inp
    free_memory(device)
    info["wall_s"] = time.perf_counter() - t_preset


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    quick = args.quick
    device = args.device
    if device.type == "cpu" and not quick:
        raise SystemExit("the full benchmark needs a CUDA GPU; use --quick for the CPU smoke test")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    names = (args.presets or ("tiny,tiny-edge" if quick else ",".join(DEFAULT_PRESETS))).split(",")
    presets = resolve_presets([n.strip() for n in names if n.strip()], quick)
    dtypes = (args.dtypes or ("fp32" if quick else "fp32,bf16")).split(",")
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"--dtypes must be a comma list of {', '.join(DTYPES)}, got {d!r}")
    layers = [s for s in args.layers.split(",") if s]
    impl_filter = None if args.impls is None else set(args.impls.split(","))
    backends = tuple(b for b in args.backends.split(",") if b)
    if not backends or any(b not in GPU_BACKENDS for b in backends):
        raise SystemExit(f"--backends must be a comma list of {', '.join(GPU_BACKENDS)}, got {args.backends!r}")
    # Only the backends some case runs must be there: --backends triton never asks for cuDNN.
    used = [b for b in GPU_BACKENDS if any(impl_backend(i) == b for p in presets for i in case_impls(p, backends, impl_filter))]
    for b in used:
        missing = gat_backend(b).unavailable(device)
        if missing is not None:
            raise SystemExit(f"--backends {b} is not available here: {missing[0]}; fix: {missing[1]} "
                             f"(or leave {b} out of --backends)")
    compile_presets = {s for s in args.compile_presets.split(",") if s}
    compile_passes = set(args.compile_passes.split(","))
    out_path, md_path = args.out, args.md

    if quick and device.type == "cpu":
        torch.set_num_threads(1)  # tiny graphs: threads only add spin contention on a shared 2-core CI box
    torch.manual_seed(args.seed)
    env = environment(device)
    env["backends"] = used
    if "triton" in used:
        env["triton_cache"] = _triton_cache()
    classes = layer_classes()
    env["layers_available"] = classes is not None
    env["layer_graph_input"] = layer_graph_input(classes) if classes is not None else None
    print(f"# cudnn-gnn layer benchmark on {env.get('gpu') or device}; torch {env['torch']}, PyG "
          f"{env['torch_geometric']}, cuDNN {env.get('cudnn_backend_version')}, frontend {env.get('cudnn_frontend')}; "
          f"layers {'available (' + str(env['layer_graph_input']) + ')' if classes else 'not available'}; "
          f"backends {','.join(used) or '-'}", flush=True)

    records: list[dict[str, Any]] = []
    conversions: list[dict[str, Any]] = []
    preset_info: dict[str, Any] = {}
    t_run = time.perf_counter()
    env["precompile_s"] = (None if args.prebuild == "off" else
                           prebuild_kernels(presets, layers, dtypes, impl_filter, device, processes=args.prebuild == "processes",
                                            backends=backends))
    payload: dict[str, Any] = {}
    with contextlib.ExitStack() as hooks:
        builds = hooks.enter_context(TritonCompiles()) if "triton" in used else None
        for p in presets:
            _run_preset(p, device, args, layers, dtypes, case_impls(p, backends, impl_filter), compile_presets,
                        compile_passes, builds, preset_info, records, conversions)
            # Write what we have after every preset: a later crash still leaves valid JSON behind.
            payload = _payload(env, preset_info, records, conversions, quick, time.perf_counter() - t_run)
            write_json(out_path, payload)
            write_text(md_path, payload["summary_markdown"] + "\n")

    payload = _payload(env, preset_info, records, conversions, quick, time.perf_counter() - t_run)
    write_json(out_path, payload)
    write_text(md_path, payload["summary_markdown"] + "\n")
    print("\n" + payload["summary_markdown"], flush=True)
    print(f"\nwrote {out_path} and {md_path} ({payload['wall_s']:.0f} s)", flush=True)
    if args.plot:
        from plot import plot

        plot(payload, args.plot)
        print(f"wrote {args.plot}", flush=True)
    return payload


def _triton_cache() -> dict[str, Any]:
    """Where Triton keeps its built kernels, and how many files were there before this run: with none, every
    first call below built its kernels from scratch; with some, a build may have been a load from disk."""
    try:
        import triton

        path = triton.knobs.cache.dir
    except (ImportError, AttributeError):
        path = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    files = sum(len(f) for _, _, f in os.walk(path)) if os.path.isdir(path) else 0
    return {"dir": path, "files_at_start": files}


def _payload(env: dict[str, Any], presets: dict[str, Any], records: list[dict[str, Any]],
             conversions: list[dict[str, Any]], quick: bool, wall_s: float) -> dict[str, Any]:
    rows = summarize(records)
    md = markdown_table(rows, conversions, timing_claims=not quick and env["device"].startswith("cuda"), records=records)
    summary = [{k: v for k, v in r.items() if k != "_rows"} for r in rows]
    return {
        "schema": "cudnn-gnn/bench_layers/1",
        "quick": quick,
        "environment": env,
        "presets": presets,
        "records": records,
        "conversion": conversions,
        "summary": summary,
        "summary_markdown": md,
        "triton_builds": [{k: r[k] for k in ("preset", "layer", "dtype", "pass", "impl", "first_call_ms")} | b
                          for r in records for b in r.get("triton_builds", [])],
        "wall_s": wall_s,
        "notes": {
            "ratios": "speedup_* = PyG median ms / ours median ms (>1: ours faster); mem_ratio_pyg_over_ours = PyG peak "
                      "/ ours peak (>1: ours leaner). One summary row per backend ('backend'); its 'ours' = "
                      "layer_<backend> if it ran, else the op-level <backend> model.",
            "triton": "Triton builds each kernel variant at its first call, in the warm-up (never in a median): "
                      "first_call_ms of the case, build_s of each variant (records' triton_builds, listed again in "
                      "the top-level triton_builds). environment.triton_cache.files_at_start > 0: builds may have "
                      "been loads from Triton's disk cache.",
            "memory": "peak_mem_bytes = max_memory_allocated during one call minus memory_allocated just before it: "
                      "persistent inputs, graph (+caches), parameters and the upstream gradient are not counted.",
            "self_loops": "add_self_loops=False for every implementation; graphs are used exactly as generated.",
            "bf16": "torch.autocast(bfloat16) around the forward; parameters fp32.",
        },
    }


if __name__ == "__main__":
    main()
