"""Whole training steps and epochs, PyG against ours: eager, compiled, and captured in one CUDA graph.

    python benchmarks/bench_training.py                                   # CUDA: every workload, per-batch steps
    python benchmarks/bench_training.py --workloads cora arxiv --out out/training.json --md out/training.md
    python benchmarks/bench_training.py --workloads products-sampled --epochs 2      # + two whole epochs a variant
    python benchmarks/bench_training.py --workloads papers100m-sampled --epochs 2 --epoch-variants pyg-compiled \\
        ours-captured                                                     # full papers100M: two variants' epochs
    python benchmarks/bench_training.py --device cpu                      # a seconds-long smoke run

One step is the GAT paper's model (2 layers, 8 heads x 8 and ELU, 1 output head, dropout 0.6 on the inputs and the
attention), cross-entropy on the train index, backward and a fused Adam step (``capturable=True`` where captured).
Workloads: **cora**, the real Cora graph (bundled) with its public split; **arxiv**, an ogbn-arxiv-shaped synthetic
power-law graph (169,343 nodes, ~2.3M symmetric edges, 128 features, 40 classes, every tenth node a train node;
benchmarks/_graphs.py). Variants, all in one process on the same tensors:

- ``pyg-eager``: PyG's ``GATConv`` fed the way a PyG user tuning for speed would: the self-loops added to the
  ``edge_index`` once before training and ``add_self_loops=False`` in the layers (so no per-step self-loop work, and
  ``torch.compile`` traces it: on the raw ``edge_index`` Inductor failed on the arxiv-shaped step);
- ``pyg-compiled``: the same model through ``torch.compile``;
- ``pyg-captured``: PyG's step captured whole by :class:`cudnn_gnn.apps.capture.CapturedStep` and replayed (with the
  self-loops in the ``edge_index`` and index tensors for the loss, PyG's step has no host sync either);
- ``pyg-compiled-captured``: the compiled model's step captured whole (what ``torch.compile(mode="reduce-overhead")``
  aims at, with the optimizer step in the graph too): PyG's strongest baseline;
- ``ours-eager``: our ``GATConv`` on a :class:`~cudnn_gnn.CscGraph` prepared once (``ToCscGraph``);
- ``ours-compiled``: that model through ``torch.compile``;
- ``ours-captured``: that step captured whole and replayed;
- ``ours-compiled-captured``: the compiled model's step captured whole.

Sampled workloads (one step = one batch), every variant fed by the same
:class:`cudnn_gnn.apps.static_sampler.StaticNeighborSampler` (tree sampling with fixed shapes, on the GPU):
**products-sampled**, an ogbn-products-shaped synthetic graph at full size (``--scale`` shrinks it), 512 seeds a
batch, fan-out 10, 10, 5, the products GAT (3 layers, 4 heads x 128); **papers100m-sampled**, an
ogbn-papers100M-shaped one at ``--papers-scale`` (default 1, the full 111,059,956 nodes and 1,615,685,872 edges;
below), 1024 seeds a batch, fan-out 10, 10, 5, the same model. Both graphs are drawn on the device (``make_graph``;
``graph_seconds`` in the records). PyG's layers get each block's ``edge_index`` with the
self-loops in it and ``add_self_loops=False``; the ``*-compiled`` variants compile the model's part of the step
(static shapes), sampling eager; ``*-captured`` replay the whole step, sampling and gather included (the static
shapes make PyG's step capturable too; ``pyg-compiled-captured`` with the model's part compiled).

Graph-level workloads (one step = one batch of whole graphs), every variant fed the same packed batches of one
fixed budget (:class:`cudnn_gnn.apps.static_batcher.StaticGraphBatcher`: at most ``B`` graphs, ``T`` node rows and
``E`` edges a batch, padded with sink graphs that carry no loss; packed on the host once, before the variants, and
cycled through on the device): **molecules-gps**, ogbg-molbace's training split (the bundled OGB molecules, 1,210
graphs of 10-97 atoms), 128 graphs a batch, ``examples/gps_molecules.py``'s model (3 GPS layers of 64 channels, 4
heads, dropout 0.1, categorical atom and bond encoders, mean pooling, an MLP head; ``cudnn_gnn.apps.gps.GPS``);
**ragged-gps**, 512 synthetic graphs of 10-500 nodes (uniform; 4 random in-graph edges a node, 16 float features,
4 edge features, a regression label), 32 graphs a batch, the same model with 128 channels and 2 layers. Both run
the masked loss (binary cross-entropy, squared error) and Adam. ``ours-*`` is our ``GPSConv`` with our ``GATConv`` as
the local layer on the batch's CSC graph (rebuilt every call from the batch's CSC tensors, no sort), global attention
with the budget's ``max_num_nodes`` (fixed plans), batch norms over the real tokens (``node_mask``); ``pyg-*`` is
PyG's ``GPSConv`` and ``GATConv`` on the batch's ``edge_index`` (its ``to_dense_batch`` and self-loop removal read
sizes on the host, so PyG's step is not capturable: its captured variants run eagerly, with the reason in the
record's ``note``). ``*-compiled``: the model's part (batch to predictions) through ``torch.compile(dynamic=False)``.
A record also has the budget (``max_graphs``, ``max_tokens``, ``max_edges``, ``max_nodes``) and the epoch
extrapolated from the median step.

**papers100M's scale.** Full size fits one H200 and a 10-minute call: the graph is drawn on the GPU (about 65 GB at
the peak of ``synthetic_ogbn``: the int64 COO, 26 GB, and the label passes over ``[N, 16]`` rows), sorted to an int32
CSC (about 85 GB at the peak: the COO, the int32 keys and the stable sort's int64 permutation and buffers), then the
COO goes and the float32 features (57 GB; 28 GB with ``--feature-dtype float16``) stay next to the CSC (6.9 GB):
about 65 GB resident for the eight variants, whose batches (625,664 slots) take a few GB each. Drawn on a CPU the same
graph would take about 0.4 us an edge (6.3 s for scale 0.01's 16M edges on a 2-core machine, linear from scale 0.001):
some 10 minutes, plus the sort. A full-size epoch is 1,179 batches: the per-batch timing of all eight variants fits a
call, whole epochs of all eight do not (``--epoch-variants`` picks which; the time budget guards). On a card with
less free memory (an H100's 80 GB, or what earlier workloads leave) the run takes the largest scale that fits
(:func:`fitting_scale`, from that memory model), prints a line saying so and records ``scale`` and ``scale_note``
in each of the workload's records, instead of running out of memory.

**Precision** (``--precision``; ``precision`` in every record): ``auto``, the default, runs the sampled workloads in
bf16, as the examples are run (``examples/papers100m.py --precision bf16``, ``examples/ogbn_products.py --sampled
--precision bf16``), and the full-graph ones in fp32; ``fp32`` or ``bf16`` sets every workload. bf16 is the same for
every variant: the step's forward and loss under ``torch.autocast(device, torch.bfloat16, cache_enabled=False)``,
the context :class:`CapturedStep` runs its loss in with ``autocast_dtype=torch.bfloat16`` (which the captured
variants get); backward and Adam outside it, parameters and optimizer state float32. ``--feature-dtype`` is the
sampled graphs' stored node features, float32 by default as in the examples (their ``--feature-dtype``); float16
halves the resident features, and the gathered rows are cast to float32 before the model (``sampled_loss``).

**Per batch** (every variant): CUDA-event medians, p10 and p90 of ``--repeats`` steps after ``--warmup``; a sampled row
also reports the epoch extrapolated from the median (``batches_per_epoch`` x median) and ``kernel_share``, the share
of 5 steps' wall time in which the GPU ran kernels (``torch.profiler``), and ``kernel_share_of_median``, their kernel
time per step over the unprofiled median step (the profiler adds host time to every launch). On CUDA
``top_kernels`` lists the ``--top-kernels`` kernels (and copies, memsets) with the most device time per batch over
5 more profiled steps: ``name``, ``ms`` and ``count`` a batch (kernels replayed from a CUDA graph are recorded one by
one), so that a time can be explained by its kernels (an fp32 GEMM where bf16 was meant, a kernel that dominates).

**Whole epochs** (``--epochs N``, sampled workloads, the variants of ``--epoch-variants``, default all): before its
per-batch timing, each variant runs N real epochs (every train seed once, a new device permutation each epoch, the
last batch padded) from a step built at the start of epoch 1: epoch 1's clock starts before the model is built, so
it carries the build, ``torch.compile``'s compile, the captured step's 3 warm-up steps and capture, and the Triton
kernel builds this process has not made yet (``epoch1_triton_builds``, with their seconds: in one process the first
variant on our layers builds them and the later ones find them built; a build found in Triton's disk cache,
``TRITON_CACHE_DIR``, takes milliseconds, so a cold first epoch is one variant run with an empty one). Recorded:
``epoch_seconds`` (wall, a sync at each epoch's end), ``first_epoch_ratio`` (epoch 1 over epoch 2),
``epoch1_startup_seconds`` (epoch 1's first 4 batches, one sync), the mean loss of each epoch; ours on CUDA with
``--prebuild`` builds its step's Triton kernels at the start of epoch 1 all at once in parallel processes (without:
the step's first call builds them one after another), in its clock: ``epoch1_prebuild_seconds``,
``epoch1_prebuild_variants`` and ``epoch1_prebuild_in_process`` (built by this process where its build process
failed), ``epoch1_prebuild_builds`` (each variant's kernel, seconds and whether built in-process: the slowest one
bounds the parallel builds), and ``epoch1_triton_builds`` then counts their loads from the disk cache. The
per-batch timing then continues on the same warm step (its ``first_call_ms`` is then a warm step's).

**Time budget** (``--time-budget``, seconds from the start of the run, after the imports; default 510 on CUDA, so
that a 10-minute device call ends with its results: the imports and a per-batch timing begun just before the budget
ends fit in the 90 s left): an epoch starts only where it is predicted to end within the
budget with 30 s left for each per-batch timing still to come on the workload, this variant's included (predicted:
the variant's previous epoch, or for an epoch 1 the slowest epoch 1 so far on the workload, none for the first);
a variant whose epochs do not fit records why (``epochs_skipped``), and a variant reached after the budget is spent
is skipped whole (``skipped``). The JSON (and ``--md``) is rewritten after every variant.

The peak memory is the variant's whole run above the shared input tensors (model, optimizer state, activations and,
for the captured step, the graph's private pool). On CPU the run is a smoke test: a tiny graph, the eager variants
and the captured one (which runs eagerly there, with its warning), a few steps.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import (  # noqa: E402
    TritonCompiles,
    environment,
    free_memory,
    kernel_table,
    synchronize,
    time_fn,
    write_json,
)
from _graphs import GraphSpec, make_graph  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_device, check_outputs, fraction  # noqa: E402
from cudnn_gnn.apps._util import atomic_path, write_text  # noqa: E402

VARIANTS = ("pyg-eager", "pyg-compiled", "pyg-captured", "pyg-compiled-captured", "ours-eager", "ours-compiled",
            "ours-captured", "ours-compiled-captured")
FULL_GRAPH = ("cora", "arxiv")
SAMPLED = ("products-sampled", "papers100m-sampled")
GRAPH_LEVEL = ("molecules-gps", "ragged-gps")
WORKLOADS = FULL_GRAPH + SAMPLED + GRAPH_LEVEL
PRECISIONS = ("auto", "fp32", "bf16")
FEATURE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
# (nodes, directed edges, features, classes, train share, batch size, fan-out, symmetric) of the real graphs
SAMPLED_SHAPES = {
    "products-sampled": ("ogbn-products", 2_449_029, 123_718_280, 100, 47, 196_615 / 2_449_029, 512, [10, 10, 5], True),
    "papers100m-sampled": ("ogbn-papers100M", 111_059_956, 1_615_685_872, 128, 172, 1_207_179 / 111_059_956, 1024,
                           [10, 10, 5], False),
}
ARXIV = GraphSpec(169_343, 2_315_598, exponent=0.6, ogbn="ogbn-arxiv")
TINY = GraphSpec(300, 3_000, exponent=0.6)
STARTUP_BATCHES = 4  # CapturedStep's 3 warm-up steps and its capture (and a compiled step's first compile)
PROFILED_BATCHES = 5
RESERVE_PER_VARIANT_S = 30.0  # the budget kept for each per-batch timing still to come: build, warm-up, timed steps


def precision_of(workload: str, flag: str) -> str:
    """The precision a workload runs in: ``flag``, or for ``auto`` bf16 sampled and fp32 full-graph."""
    if flag != "auto":
        return flag
    return "bf16" if workload in SAMPLED else "fp32"


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The context a step's forward and loss run in: for bf16 the autocast :class:`CapturedStep` uses
    (``cache_enabled=False``, as CUDA graphs need; same math for the eager steps, whose weights are each cast once a
    step anyway), for fp32 none."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


@dataclass
class VariantStep:
    """One variant's training step: ``run(*batch) -> loss`` (0-dim, on the device; a sampled step takes ``(seeds,
    seed_valid)``, a full-graph one nothing) and ``captured()``, whether it replays a CUDA graph."""

    run: Callable[..., Tensor]
    captured: Callable[[], bool]
    prebuilt: Any = None  # the PrebuildReport of its Triton kernels (cudnn_gnn.backends.triton.prebuild), if any


def load_workload(name: str, device: torch.device, smoke: bool) -> dict[str, Any]:
    """``{"x", "y", "idx", "edge_index", "num_nodes", "classes", "source"}`` on ``device`` (same tensors for every
    variant)."""
    gen = torch.Generator().manual_seed(0)
    if name == "cora" and not smoke:
        from cudnn_gnn.datasets import load_planetoid

        data = load_planetoid("Cora", None, normalize_features=True)[0]
        idx = data.train_mask.nonzero().view(-1)
        return {"x": data.x.to(device), "y": data.y.to(device), "idx": idx.to(device),
                "edge_index": data.edge_index.to(device), "num_nodes": data.num_nodes,
                "classes": int(data.y.max()) + 1, "source": "Cora (public split)"}
    spec = TINY if smoke else ARXIV
    g = make_graph(spec, seed=0, device=device)
    n, f_in, classes = g.num_nodes, (16 if smoke else 128), (4 if smoke else 40)
    return {"x": torch.randn(n, f_in, generator=gen).to(device), "y": torch.randint(0, classes, (n,), generator=gen).to(device),
            "idx": torch.arange(0, n, 10, device=device), "edge_index": g.edge_index, "num_nodes": n,
            "classes": classes, "source": g.source}


def load_sampled(name: str, device: torch.device, smoke: bool, scale: float,
                 feature_dtype: str = "float32") -> dict[str, Any]:
    """A sampled workload: the synthetic graph (``scale`` of the real sizes; a tiny one with ``smoke``), drawn and
    sorted to CSC on ``device``, random features (stored as ``feature_dtype``) and labels, a train split of the real
    share, and the :class:`StaticNeighborSampler` every variant is fed by."""
    from cudnn_gnn import CscGraph
    from cudnn_gnn.apps.static_sampler import StaticNeighborSampler

    ogbn, n, e, f_in, classes, share, batch, fanout, symmetric = SAMPLED_SHAPES[name]
    if smoke:
        spec, f_in, classes, batch, fanout, share = TINY, 16, 4, 16, [3, 2, 2], 0.2
    else:
        spec = GraphSpec(int(n * scale), int(e * scale), symmetric=symmetric, exponent=0.5, ogbn=ogbn,
                         ogbn_scale=scale)
    t0 = time.perf_counter()
    g = make_graph(spec, seed=0, device=device)
    n, num_edges = g.num_nodes, g.num_edges
    csc = CscGraph.from_edge_index(g.edge_index, num_nodes=n)
    colptr, row = csc.offsets, csc.indices
    del g, csc  # the COO, the permutation and the destination cache: only the CSC stays
    free_memory(device)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, f_in, generator=gen, device=device, dtype=FEATURE_DTYPES[feature_dtype])
    y = torch.randint(0, classes, (n,), generator=gen, device=device)
    train = torch.randperm(n, generator=gen, device=device)[: max(1, int(n * share))]
    sampler = StaticNeighborSampler(colptr, row, fanout=fanout, batch_size=batch, node_attrs={"x": x, "y": y},
                                    device=device)
    synchronize(device)
    source = f"{ogbn}-shaped synthetic graph, scale {scale:g}" if not smoke else "tiny power-law graph"
    return {"sampler": sampler, "train": train, "classes": classes, "num_nodes": n, "num_edges": num_edges,
            "source": source, "batches_per_epoch": sampler.num_batches(train.numel()), "in_channels": f_in,
            "feature_dtype": feature_dtype, "graph_seconds": time.perf_counter() - t0,
            "resident_bytes": sum(t.numel() * t.element_size() for t in (colptr, row, x, y, train))}


# (dataset or graph count, graphs a batch, channels, layers, heads) of the graph-level workloads; smoke: tiny
GRAPH_LEVEL_SHAPES = {"molecules-gps": ("ogbg-molbace", 128, 64, 3, 4), "ragged-gps": (512, 32, 128, 2, 4)}


def ragged_graphs(count: int, lo: int, hi: int, seed: int = 0) -> list[Any]:
    """``count`` graphs of ``lo .. hi`` nodes (uniform), 4 random edges a node within its graph, 16 float features,
    4 edge features, one regression label."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n = int(torch.randint(lo, hi + 1, (), generator=g))
        e = 4 * n
        out.append(Data(x=torch.randn(n, 16, generator=g), edge_index=torch.randint(0, n, (2, e), generator=g),
                        edge_attr=torch.randn(e, 4, generator=g), y=torch.randn(1, 1, generator=g), num_nodes=n))
    return out


def load_graph_level(name: str, device: torch.device, smoke: bool) -> dict[str, Any]:
    """A graph-level workload: its graphs packed into one epoch of fixed-shape batches on ``device`` (the batches every
    variant is fed), and the model's settings."""
    from cudnn_gnn.apps.static_batcher import StaticGraphBatcher

    source, per_batch, channels, layers, heads = GRAPH_LEVEL_SHAPES[name]
    t0 = time.perf_counter()
    if name == "molecules-gps":
        from cudnn_gnn.datasets import load_ogbg

        ds = load_ogbg(str(source))
        graphs, task, model = ds.subset("train"), ds.task_type, {}
        label = f"{source} train split"
    else:
        graphs = ragged_graphs(24 if smoke else int(source), 10, 40 if smoke else 500)
        task, model = "regression", {"in_channels": 16, "edge_channels": 4}
        label = f"{len(graphs)} synthetic graphs of 10-{40 if smoke else 500} nodes"
    if smoke:
        graphs, per_batch, channels, layers, heads = graphs[:48], 8, 16, 1, 2
    batcher = StaticGraphBatcher(graphs, max_graphs=per_batch)
    batches = [b.to(device) for b in batcher.epoch(generator=torch.Generator().manual_seed(0))]
    b = batcher.budget
    return {"batches": batches, "budget": b, "task_type": task, "source": label, "num_graphs": len(graphs),
            "num_nodes": int(batcher.num_nodes.sum()), "num_edges": int(batcher.num_edges.sum()),
            "model": {"channels": channels, "layers": layers, "heads": heads, "num_tasks": batcher.num_tasks,
                      "dropout": 0.1, "backend": "auto", **model},
            "batches_per_epoch": len(batches), "graph_seconds": time.perf_counter() - t0}


def build_graph_step(variant: str, w: dict[str, Any], device: torch.device, precision: str) -> VariantStep:
    """One training step of ``variant`` on a graph-level workload, ``run(batch)`` for a packed batch on the device:
    the GPS model (``impl="pyg"`` for PyG's variants), the masked loss of :func:`cudnn_gnn.apps.gps.packed_loss`, fused
    Adam, the forward under ``precision``'s autocast. ``*-compiled``: the model's part through ``torch.compile`` with
    static shapes; ``*-captured``: the whole step, one :class:`CapturedStep` replay."""
    from cudnn_gnn.apps.capture import CapturedStep
    from cudnn_gnn.apps.gps import GPS, packed_loss

    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = GPS(**w["model"], impl="pyg" if variant.startswith("pyg") else "ours").to(device)
    captured = variant.endswith("captured")
    opt = torch.optim.Adam(model.parameters(), lr=0.001, fused=True if cuda else None, capturable=captured and cuda)
    forward = torch.compile(model.run_packed, dynamic=False) if "compiled" in variant else None
    loss_fn = packed_loss(model, w["budget"], w["task_type"], forward)
    if captured:
        cs = CapturedStep(loss_fn, optimizer=opt, model=model, inputs=w["batches"][0].inputs(),
                          autocast_dtype=torch.bfloat16 if precision == "bf16" else None)
        return VariantStep(lambda batch: cs(**batch.inputs()), lambda: cs.captured)

    def step(batch: Any) -> Tensor:
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = loss_fn(**batch.inputs())
        loss.backward()
        opt.step()
        return loss.detach()

    return VariantStep(step, lambda: False)


# Device bytes a sampled workload needs while it is built and while it runs (the memory model of the papers100M
# paragraph of the module docstring, measured at full size on an H200): the CSC sort's peak, about 85 GB for
# papers100M's 1.62G edges (the int64 COO, the int32 keys, the stable sort's int64 permutation and buffers), and
# the resident CSC and features plus headroom for the variants' batches, models and optimizer states.
SORT_PEAK_BYTES_PER_EDGE = 85e9 / 1_615_685_872
RUN_HEADROOM_BYTES = 8 * 2**30
FIT_MARGIN = 0.9  # the model's figures are approximate ("about"): a workload takes at most 90% of what is free


def sampled_bytes(name: str, scale: float, feature_dtype: str) -> float:
    """What ``load_sampled(name, ..., scale)`` and the variants after it need on the device at the peak."""
    _, n, e, f_in, *_ = SAMPLED_SHAPES[name]
    nodes, edges = n * scale, e * scale
    resident = edges * 4 + nodes * (4 + f_in * FEATURE_DTYPES[feature_dtype].itemsize + 8)
    return max(edges * SORT_PEAK_BYTES_PER_EDGE, resident + RUN_HEADROOM_BYTES)


def fitting_scale(name: str, scale: float, feature_dtype: str, free_bytes: int) -> tuple[float, str | None]:
    """``scale``, or where its graph would not fit ``free_bytes`` (:func:`sampled_bytes`), the largest scale of two
    significant digits that does within :data:`FIT_MARGIN`, with a line that says so (None where ``scale`` fits)."""
    need = sampled_bytes(name, scale, feature_dtype)
    if need <= FIT_MARGIN * free_bytes:
        return scale, None
    fit = scale * FIT_MARGIN * free_bytes / need
    digits = 10 ** (math.floor(math.log10(fit)) - 1)
    fit = math.floor(fit / digits) * digits
    return fit, (f"{name}: scale {scale:g} needs about {need / 2**30:.0f} GiB of device memory at its peak, more "
                 f"than {FIT_MARGIN:.0%} of the {free_bytes / 2**30:.0f} GiB free: running scale {fit:.2g}, the "
                 "largest that fits")


def build_sampled_step(variant: str, w: dict[str, Any], device: torch.device, precision: str, *,
                       prebuild: bool = True) -> VariantStep:
    """One training step of ``variant`` on a sampled workload, ``run(seeds, seed_valid)``: the batch tree-sampled
    around ``seeds`` with fixed shapes, the products GAT (3 layers, 4 heads x 128, ELU, dropout 0.5;
    ``cudnn_gnn.apps.models.OgbGAT``), masked cross-entropy, fused Adam, the forward under ``precision``'s autocast.
    PyG's layers get each block's ``edge_index`` with its self-loops in it and ``add_self_loops=False``; ours the
    block's CSC graph. ``*-compiled``: the model's part of the step (blocks to loss) through ``torch.compile`` with
    static shapes, sampling eager; ``*-captured``: the whole step, sampling and gather included, one
    :class:`CapturedStep` replay (``autocast_dtype=torch.bfloat16`` for bf16). Ours on CUDA, with ``prebuild``:
    the step's Triton kernel variants built first, all at once in parallel processes, by a dry run of one eager
    forward and backward of a copy of the model on the first train seeds (:func:`prebuild_step`)."""
    from cudnn_gnn.apps.capture import CapturedStep
    from cudnn_gnn.apps.models import OgbGAT
    from cudnn_gnn.apps.static_sampler import sampled_loss

    sampler, cuda = w["sampler"], device.type == "cuda"
    pyg = variant.startswith("pyg")
    torch.manual_seed(0)
    model = OgbGAT("pyg-gat" if pyg else "gat", w["in_channels"], 128 if cuda else 8, w["classes"],
                   layers=len(sampler.fanout), heads=4 if cuda else 2, out_heads=4 if cuda else 2, dropout=0.5,
                   norm=False, activation="elu").to(device)
    prebuilt = prebuild_step(model, sampler, w["train"], device, precision) if prebuild and cuda and not pyg else None
    captured = variant.endswith("captured")
    opt = torch.optim.Adam(model.parameters(), lr=0.001, fused=True if cuda else None, capturable=captured and cuda)
    if captured:
        B = sampler.batch_size
        cs = CapturedStep(sampled_loss(model, sampler, pyg=pyg, compile="compiled" in variant), optimizer=opt, model=model,
                          inputs={"seeds": torch.zeros(B, dtype=torch.int64, device=device),
                                  "seed_valid": torch.ones(B, dtype=torch.bool, device=device)},
                          autocast_dtype=torch.bfloat16 if precision == "bf16" else None)
        return VariantStep(lambda seeds, valid: cs(seeds=seeds, seed_valid=valid), lambda: cs.captured, prebuilt)

    loss_fn = sampled_loss(model, sampler, pyg=pyg, compile=variant.endswith("compiled"))

    def step(seeds: Tensor, valid: Tensor) -> Tensor:
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = loss_fn(seeds, valid)
        loss.backward()
        opt.step()
        return loss.detach()

    return VariantStep(step, lambda: False, prebuilt)


def prebuild_step(model: torch.nn.Module, sampler: Any, train: Tensor, device: torch.device, precision: str) -> Any:
    """Our sampled step's Triton kernel variants built all at once (:func:`cudnn_gnn.backends.triton.prebuild`): a
    dry run of the eager loss, forward and backward, of a copy of ``model`` on the first ``batch_size`` train seeds
    under ``precision``'s autocast (a compiled or captured step launches the same variants); the sampler draws from
    the device's default generator, which the dry run leaves as it was. Returns the report."""
    import copy

    from cudnn_gnn.apps.static_sampler import sampled_loss
    from cudnn_gnn.backends.triton import prebuild

    B = sampler.batch_size
    seeds = torch.zeros(B, dtype=torch.int64, device=device)
    seeds[: min(B, train.numel())] = train[:B]
    valid = torch.ones(B, dtype=torch.bool, device=device)

    def dry_run(m: torch.nn.Module) -> None:
        with autocast(device, precision):
            loss = sampled_loss(m, sampler)(seeds, valid)
        loss.backward()

    return prebuild(dry_run, copy.deepcopy(model))


def cycled(step: VariantStep, w: dict[str, Any]) -> Callable[[], Tensor]:
    """``step`` as a function of nothing for the per-batch timing: each call runs it on the workload's next batch,
    epoch after epoch (a sampled workload: a new permutation of the train seeds each; a graph-level one: its packed
    batches over again)."""

    def batches() -> Iterator[tuple[Any, ...]]:
        while True:
            if "batches" in w:
                yield from ((b,) for b in w["batches"])
            else:
                yield from w["sampler"].epoch(w["train"])

    it = batches()
    return lambda: step.run(*next(it))


class Budget:
    """The run's time budget: ``seconds`` from its construction, at the start of the run (0: none)."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds if seconds > 0 else math.inf

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def run_epochs(build: Callable[[], VariantStep], w: dict[str, Any], device: torch.device, *, epochs: int,
               budget: Budget, reserve: float, first_guess: float | None) -> tuple[VariantStep | None, dict[str, Any]]:
    """Up to ``epochs`` whole epochs of the step ``build()`` makes, built inside epoch 1's clock (see the module
    docstring). An epoch starts only where ``budget`` leaves ``reserve`` seconds after it, as predicted from the
    previous epoch (epoch 1: ``first_guess``, None: always). Returns the step (None when epoch 1 did not start) and
    the record's epoch fields."""
    sampler, train = w["sampler"], w["train"]
    seconds: list[float] = []
    losses: list[float] = []
    out: dict[str, Any] = {"epochs": epochs, "epoch_batches": sampler.num_batches(train.numel())}
    step: VariantStep | None = None
    with TritonCompiles() as builds:
        for e in range(epochs):
            guess = first_guess if e == 0 else seconds[-1]
            left = budget.left() - reserve
            if guess is not None and guess > left:
                out["epochs_skipped"] = (f"epoch {e + 1} (about {guess:.0f} s) would end past --time-budget "
                                         f"({max(left, 0.0):.0f} s left after {reserve:.0f} s kept for the per-batch "
                                         f"timings still to come)")
                break
            synchronize(device)
            t0 = time.perf_counter()
            if step is None:
                step = build()
                if step.prebuilt is not None:  # inside epoch 1's clock
                    out["epoch1_prebuild_seconds"] = step.prebuilt.seconds
                    out["epoch1_prebuild_variants"] = len(step.prebuilt.variants)
                    out["epoch1_prebuild_in_process"] = sum(v.in_process for v in step.prebuilt.variants)
                    out["epoch1_prebuild_builds"] = [v._asdict() for v in step.prebuilt.variants]
            total = torch.zeros((), dtype=torch.float32, device=device)
            n = 0
            for seeds, valid in sampler.epoch(train):
                total += step.run(seeds, valid)
                n += 1
                if e == 0 and n == STARTUP_BATCHES:
                    synchronize(device)
                    out["epoch1_startup_seconds"] = time.perf_counter() - t0
            synchronize(device)
            seconds.append(time.perf_counter() - t0)
            losses.append(float(total) / max(n, 1))
            if e == 0:
                out.setdefault("epoch1_startup_seconds", seconds[0])  # an epoch of fewer batches
                built = builds.take()
                out["epoch1_triton_builds"] = len(built)
                out["epoch1_triton_build_seconds"] = sum(b["build_s"] for b in built)
    out.update(epoch_seconds=seconds, epoch_losses=losses,
               first_epoch_ratio=seconds[0] / seconds[1] if len(seconds) > 1 else None)
    return step, out


def kernel_share(step: Callable[[], Any], device: torch.device, batches: int = PROFILED_BATCHES) -> dict[str, Any]:
    """The share of ``batches`` steps' wall time in which the GPU ran kernels (``torch.profiler``, CUDA activity:
    the union of kernel, copy and memset intervals over the window between two synchronises), and the kernel time
    per batch. None on a CPU."""
    from cudnn_gnn.apps.distributed import KernelBusyWindow

    if device.type != "cuda":
        return {"kernel_share": None, "kernel_ms_per_batch": None}
    window = KernelBusyWindow(device, start=0, count=batches)
    for i in range(batches):
        window.before(i)
        step()
        window.after(i)
    if window.fraction is None or window.busy_seconds is None:
        return {"kernel_share": None, "kernel_ms_per_batch": None}
    return {"kernel_share": window.fraction, "kernel_ms_per_batch": 1e3 * window.busy_seconds / batches}


def top_kernels(step: Callable[[], Any], device: torch.device, top: int,
                batches: int = PROFILED_BATCHES) -> dict[str, Any]:
    """The ``top`` GPU kernels (and copies, memsets) by device time per batch over ``batches`` profiled steps:
    ``[{"name", "ms", "count"}]`` per batch, most time first, and the sum over every kernel (not their union: two
    streams' overlap counts twice). None on a CPU or with ``top`` 0."""
    if device.type != "cuda" or top <= 0:
        return {"top_kernels": None}
    table = kernel_table(lambda: [step() for _ in range(batches)], batches, device, name_width=200)
    rows = sorted(table.items(), key=lambda kv: -kv[1][0])
    return {"top_kernels": [{"name": k, "ms": us / 1e3, "count": c} for k, (us, c) in rows[:top]],
            "kernels_sum_ms_per_batch": sum(us for us, _ in table.values()) / 1e3,
            "kernel_launches_per_batch": sum(c for _, c in table.values())}


def with_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``edge_index [2, E]`` with its self-loops replaced by one per node ``[2, E' + N]``: PyG's own self-loop rule,
    applied once before training instead of in every forward."""
    from torch_geometric.utils import add_self_loops, remove_self_loops

    return add_self_loops(remove_self_loops(edge_index)[0], num_nodes=num_nodes)[0]


def build_step(variant: str, w: dict[str, Any], device: torch.device, precision: str) -> VariantStep:
    """One full-graph training step of ``variant`` on workload ``w`` (a fresh model with seed 0's weights), the
    forward under ``precision``'s autocast."""
    from torch_geometric.data import Data

    from cudnn_gnn.apps.capture import CapturedStep
    from cudnn_gnn.apps.train import build_gat
    from cudnn_gnn.layers import ToCscGraph

    ours = variant.startswith("ours")
    torch.manual_seed(0)
    model = build_gat("gat" if ours else "pyg-gat", w["x"].shape[1], w["classes"]).to(device)
    graph: Any = w["edge_index"]
    if ours:
        graph = ToCscGraph()(Data(edge_index=graph, num_nodes=w["num_nodes"])).csc_graph
    else:  # the self-loops once, as ToCscGraph does for ours
        from torch_geometric.nn import GATConv as PygGATConv

        graph = with_self_loops(graph, w["num_nodes"])
        for m in model.modules():
            if isinstance(m, PygGATConv):
                m.add_self_loops = False
    cuda = device.type == "cuda"
    captured = variant.endswith("captured")
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4, fused=True if cuda else None,
                           capturable=captured and cuda)
    x, y, idx = w["x"], w["y"], w["idx"]
    if ours and "compiled" in variant:
        # one eager forward and backward first, as docs/usage.md asks of a compiled model: the graph keeps the
        # structures an eager call builds (work lists, reverse CSC); first asked for inside the trace, they would be
        # rebuilt (sorted) in every compiled step
        model(x, graph).sum().backward()
        model.zero_grad(set_to_none=True)
    forward: Callable[..., Tensor] = torch.compile(model) if "compiled" in variant else model
    if captured:
        cs = CapturedStep(lambda x, y, graph: F.cross_entropy(forward(x, graph)[idx], y[idx]), optimizer=opt,
                          inputs={"x": x, "y": y, "graph": graph}, model=model,
                          autocast_dtype=torch.bfloat16 if precision == "bf16" else None)
        return VariantStep(lambda: cs(), lambda: cs.captured)

    def step() -> Tensor:
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = F.cross_entropy(forward(x, graph)[idx], y[idx])
        loss.backward()
        opt.step()
        return loss.detach()

    return VariantStep(step, lambda: False)


def memory_mark(device: torch.device) -> int | None:
    """Reset the peak statistics and return the bytes allocated now (None on CPU)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings, as the JSON records them."""
    return {"precision": {name: precision_of(name, args.precision) for name in args.workloads},
            "feature_dtype": args.feature_dtype, "scale": args.scale, "papers_scale": args.papers_scale,
            "variants": args.variants, "epochs": args.epochs, "epoch_variants": args.epoch_variants,
            "warmup": args.warmup, "prebuild": args.prebuild, "repeats": args.repeats, "time_budget_s": args.time_budget,
            "top_kernels": args.top_kernels}


def measure(rec: dict[str, Any], variant: str, name: str, w: dict[str, Any], device: torch.device,
            args: argparse.Namespace, budget: Budget, reserve: float, first_epochs: list[float]) -> VariantStep | None:
    """Fill ``rec`` with one variant's measurements: whole epochs (sampled, asked for), then per-batch times, kernel
    share and top kernels; returns the step (to be dropped by the caller before the next variant)."""
    sampled, graph_level = name in SAMPLED, name in GRAPH_LEVEL
    builder = build_graph_step if graph_level else build_sampled_step if sampled else build_step
    build = functools.partial(builder, variant, w, device, rec["precision"],
                              **({"prebuild": args.prebuild} if sampled else {}))
    step: VariantStep | None = None
    if sampled and args.epochs:
        if variant in args.epoch_variants:
            step, epochs = run_epochs(build, w, device, epochs=args.epochs, budget=budget, reserve=reserve,
                                      first_guess=max(first_epochs) if first_epochs else None)
            rec.update(epochs)
            if rec["epoch_seconds"]:
                first_epochs.append(rec["epoch_seconds"][0])
        else:
            rec["epochs_skipped"] = "not in --epoch-variants"
    if step is None:
        step = build()
    timed = cycled(step, w) if sampled or graph_level else step.run
    rec.update(time_fn(timed, device=device, warmup=args.warmup, repeats=args.repeats))
    if graph_level:
        b = w["budget"]
        rec.update(kernel_share(timed, device), max_graphs=b.max_graphs, max_tokens=b.max_tokens,
                   max_edges=b.max_edges, max_nodes=b.max_nodes, num_graphs=w["num_graphs"],
                   batches_per_epoch=w["batches_per_epoch"],
                   epoch_seconds_extrapolated=rec["median_ms"] * w["batches_per_epoch"] / 1e3)
    if sampled:
        sampler = w["sampler"]
        rec.update(kernel_share(timed, device), batch_size=sampler.batch_size, fanout=sampler.fanout,
                   slots_per_batch=sampler.num_slots, batches_per_epoch=w["batches_per_epoch"],
                   epoch_seconds_extrapolated=rec["median_ms"] * w["batches_per_epoch"] / 1e3)
        if rec["kernel_ms_per_batch"] is not None:  # the profiler slows the host: also per timed step
            rec["kernel_share_of_median"] = min(1.0, rec["kernel_ms_per_batch"] / rec["median_ms"])
    rec.update(top_kernels(timed, device, args.top_kernels))
    return step


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    smoke = device.type != "cuda"
    budget = Budget(args.time_budget)
    result: dict[str, Any] = {"environment": environment(device), "settings": settings(args), "records": []}
    records: list[dict[str, Any]] = result["records"]
    for name in args.workloads:
        sampled = name in SAMPLED
        scale = args.papers_scale if name == "papers100m-sampled" else args.scale
        scale_note = None
        if sampled and not smoke:  # what earlier workloads leave cached is handed back first
            free_memory(device)
            scale, scale_note = fitting_scale(name, scale, args.feature_dtype, torch.cuda.mem_get_info(device)[0])
            if scale_note is not None:
                print(scale_note, flush=True)
        if name in GRAPH_LEVEL:
            w = load_graph_level(name, device, smoke)
        else:
            w = load_sampled(name, device, smoke, scale, args.feature_dtype) if sampled else \
                load_workload(name, device, smoke)
        first_epochs: list[float] = []  # epoch-1 seconds of this workload's variants so far (the budget's guess)
        for k, variant in enumerate(args.variants):
            rec: dict[str, Any] = {"workload": name, "variant": variant, "graph": w["source"],
                                   "precision": precision_of(name, args.precision), "num_nodes": w["num_nodes"],
                                   "num_edges": w["num_edges"] if "num_edges" in w else int(w["edge_index"].shape[1])}
            if name in GRAPH_LEVEL:
                rec["graph_seconds"] = w["graph_seconds"]
            if sampled:
                rec.update(feature_dtype=w["feature_dtype"], graph_seconds=w["graph_seconds"],
                           resident_graph_bytes=w["resident_bytes"], scale=scale, scale_note=scale_note)
            step: VariantStep | None = None
            if budget.left() <= 0:
                rec["skipped"] = f"the --time-budget of {args.time_budget:g} s was spent before this variant"
            else:
                try:
                    base = memory_mark(device)
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always", RuntimeWarning)
                        step = measure(rec, variant, name, w, device, args, budget,
                                       RESERVE_PER_VARIANT_S * (len(args.variants) - k), first_epochs)
                    # the whole variant's peak: model, optimizer state, activations and, captured, the graph's pool
                    # (a replay allocates nothing, so one step's own peak would miss it)
                    rec["peak_memory_bytes"] = None if base is None else torch.cuda.max_memory_allocated(device) - base
                    notes = [str(c.message) for c in caught if "not captured" in str(c.message)]
                    rec["captured"] = bool(step is not None and step.captured())
                    if notes:
                        rec["note"] = notes[0]
                except Exception as exc:  # noqa: BLE001 - one failing variant is a result, not the end of the run
                    rec["error"] = " ".join(str(exc).split())[:300]
            records.append(rec)
            print(summary_line(rec), flush=True)
            step = None
            free_memory(device)
            # every variant builds a fresh model: compile it afresh, as a user's process would, rather than share
            # Dynamo's per-function recompile limit (8) with the variants before it (seven in one process hit it)
            torch._dynamo.reset()
            write_outputs(result, args)  # after every variant: a call that runs out of time keeps what it measured
        w = {}
        free_memory(device)
    return result


def summary_line(rec: dict[str, Any]) -> str:
    """One printed line per record: the median step, the epochs, or why none."""
    head = f"{rec['workload']:18s} {rec['variant']:21s} {rec['precision']:4s} "
    if "median_ms" not in rec:
        return head + rec.get("error", rec.get("skipped", ""))
    line = head + f"{rec['median_ms']:8.3f} ms"
    if rec.get("epoch_seconds"):
        line += "  epochs " + ", ".join(f"{s:.2f}" for s in rec["epoch_seconds"]) + " s"
        if rec.get("epoch1_prebuild_variants") is not None:
            slowest = max(rec.get("epoch1_prebuild_builds") or (), key=lambda b: b["seconds"], default=None)
            line += (f" (epoch 1: {rec['epoch1_prebuild_variants']} kernel variants prebuilt in "
                     f"{rec['epoch1_prebuild_seconds']:.2f} s")
            if slowest is not None:
                line += f", the slowest {slowest['kernel']} {slowest['seconds']:.2f} s"
            line += ")"
    if rec.get("epochs_skipped"):
        line += f"  (epochs: {rec['epochs_skipped']})"
    return line


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def markdown(result: dict[str, Any]) -> str:
    """One row per workload and variant: the precision, the median step time (and its ratio to PyG eager), peak
    memory, captured or not, the kernels' share, the epoch extrapolated and the epochs run; then the epoch notes
    and, per captured variant, its top kernels a batch."""
    lines = ["| workload | variant | precision | step (ms, median) | p10-p90 | vs pyg-eager | peak memory (MiB) | "
             "captured | kernels / wall | epoch (s, extrapolated) | epochs (s) | epoch 1 / 2 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    records = result["records"]
    base = {r["workload"]: r.get("median_ms") for r in records if r["variant"] == "pyg-eager"}
    for r in records:
        if "median_ms" not in r:
            why = f"error: {r['error']}" if "error" in r else f"skipped: {r.get('skipped', '?')}"
            lines.append(f"| {r['workload']} | {r['variant']} | {r['precision']} | {why} | | | | | | | | |")
            continue
        b = base.get(r["workload"])
        ratio = f"{b / r['median_ms']:.2f}x" if b else "-"
        mem = _fmt(None if r.get("peak_memory_bytes") is None else r["peak_memory_bytes"] / 2**20, ".1f")
        share = _fmt(None if r.get("kernel_share") is None else 100 * r["kernel_share"], ".0f", "%")
        epochs = ", ".join(f"{s:.2f}" for s in r.get("epoch_seconds") or []) or "-"
        lines.append(f"| {r['workload']} | {r['variant']} | {r['precision']} | {r['median_ms']:.3f} | "
                     f"{r['p10_ms']:.3f}-{r['p90_ms']:.3f} | {ratio} | {mem} | {'yes' if r.get('captured') else 'no'} "
                     f"| {share} | {_fmt(r.get('epoch_seconds_extrapolated'), '.2f')} | {epochs} | "
                     f"{_fmt(r.get('first_epoch_ratio'), '.2f', 'x')} |")
    notes = [f"- {r['workload']} {r['variant']}: epochs not run: {r['epochs_skipped']}" for r in records
             if r.get("epochs_skipped")]
    if notes:
        lines += [""] + notes
    for r in records:
        if r.get("top_kernels") and r["variant"].endswith("captured"):
            lines += ["", f"Top kernels of {r['workload']} {r['variant']} ({r['precision']}), a batch: "
                          f"{r['kernels_sum_ms_per_batch']:.2f} ms in {r['kernel_launches_per_batch']:.0f} kernels",
                      "", "| kernel | ms | count |", "| --- | ---: | ---: |"]
            lines += [f"| `{k['name'][:110]}` | {k['ms']:.3f} | {k['count']:.0f} |" for k in r["top_kernels"][:10]]
    return "\n".join(lines) + "\n"


def write_outputs(result: dict[str, Any], args: argparse.Namespace) -> str:
    """Write the JSON and (``--md``) the markdown table; return the table."""
    write_json(args.out, result)
    table = markdown(result)
    if args.md:
        write_text(args.md, table)
    return table


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in result["records"]))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), squeeze=False)
    for ax, name in zip(axes[0], workloads):
        rows = [r for r in result["records"] if r["workload"] == name and "median_ms" in r]
        ax.bar([r["variant"] for r in rows], [r["median_ms"] for r in rows], color="tab:blue")
        ax.set_title(f"{name} ({rows[0]['precision'] if rows else '-'}): one training step")
        ax.set_ylabel("ms (median)")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=120)
    finally:
        plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = ArgumentParser(prog="bench_training.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N'")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="autocast of every variant's forward: auto (default) is bf16 for the sampled workloads, as "
                         "the examples run them, and fp32 for the full-graph ones")
    ap.add_argument("--feature-dtype", choices=tuple(FEATURE_DTYPES), default="float32",
                    help="stored dtype of the sampled graphs' node features (the examples' --feature-dtype and "
                         "default)")
    ap.add_argument("--scale", type=fraction, default=1.0, help="products-sampled: fraction of the real graph's size")
    ap.add_argument("--papers-scale", type=fraction, default=1.0,
                    help="papers100m-sampled: fraction of the real graph's size (1: 111M nodes, 1.6G edges, the "
                         "largest that fits a 10-minute call on an H200; 0.1: 11.1M nodes, 162M edges)")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=None,
                    help="default: all on CUDA; on CPU the eager ones and the captured one (which runs eagerly)")
    ap.add_argument("--epochs", type=int, default=0,
                    help="sampled workloads: whole epochs per variant before its per-batch timing, epoch 1 with the "
                         "step's build, compile and capture (0: none; 2 gives the first-epoch ratio)")
    ap.add_argument("--epoch-variants", nargs="+", choices=VARIANTS, default=None,
                    help="the variants that run --epochs (default: all the run's variants)")
    ap.add_argument("--prebuild", action="store_true",
                    help="sampled workloads, ours on CUDA: build the step's Triton kernels first all at once in "
                         "parallel processes (cudnn_gnn.backends.triton.prebuild, forks this process) instead of one "
                         "after another in the step's first call")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default: 10 on CUDA, 4 on CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="timed steps (default: 50 on CUDA, 3 on CPU)")
    ap.add_argument("--top-kernels", type=int, default=15,
                    help="CUDA: the kernels with the most device time per batch to record per variant (0: no profile)")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds from the start: epochs that would end later are skipped and variants that would "
                         "start later too, each saying so (default: 510 on CUDA, none on CPU; 0: none)")
    ap.add_argument("--out", default="bench_training.json", help="JSON output path (rewritten after every variant)")
    ap.add_argument("--md", default=None, help="also write the markdown table here")
    ap.add_argument("--plot", default=None, help="also draw a bar chart here (needs matplotlib)")
    args = ap.parse_args(argv)
    args.device = str(check_device(ap, args.device))  # before any data is built, as every output path below
    check_outputs(ap, {"--out": args.out, "--md": args.md, "--plot": args.plot})
    cuda = torch.device(args.device).type == "cuda"
    if args.variants is None:
        args.variants = list(VARIANTS) if cuda else ["pyg-eager", "ours-eager", "ours-captured"]
    if args.epoch_variants is None:
        args.epoch_variants = list(args.variants)
    args.warmup = args.warmup if args.warmup is not None else (10 if cuda else 4)  # > CapturedStep's warm-up + 1
    args.repeats = args.repeats if args.repeats is not None else (50 if cuda else 3)
    args.time_budget = args.time_budget if args.time_budget is not None else (510.0 if cuda else 0.0)
    if args.warmup < 4:
        ap.error(f"--warmup must be >= 4 (the captured step warms up 3 steps and captures on the 4th), got {args.warmup}")
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    for flag, value in (("--epochs", args.epochs), ("--top-kernels", args.top_kernels),
                        ("--time-budget", args.time_budget)):
        if value < 0:
            ap.error(f"{flag} must be >= 0, got {value}")
    missing = [v for v in args.epoch_variants if v not in args.variants]
    if missing:
        ap.error(f"--epoch-variants must be among the run's --variants ({' '.join(args.variants)}), got "
                 f"{' '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run(args)
    print(write_outputs(result, args))
    if args.plot:
        plot(result, args.plot)
    return result


if __name__ == "__main__":
    main()
