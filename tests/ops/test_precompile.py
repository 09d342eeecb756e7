"""cudnn_gnn.precompile: the calls it makes, its errors; the cuDNN builds themselves are checked in tests/gpu."""

from __future__ import annotations

import pytest
import torch

import cudnn_gnn


def test_runs_every_op_and_dtype_in_threads_on_the_reference_backend():
    got = cudnn_gnn.precompile(("gat", "gatv2"), (torch.float32, torch.bfloat16), backend="reference", device="cpu")
    assert list(got) == ["gat/float32", "gat/bfloat16", "gatv2/float32", "gatv2/bfloat16"]
    assert all(isinstance(s, float) and s >= 0 for s in got.values())


def test_deterministic_forward_only():
    got = cudnn_gnn.precompile(["gat"], [torch.float16], backward=False, deterministic=True, backend="reference",
                               device="cpu")
    assert list(got) == ["gat/float16"]


def test_edge_features_build_both_call_forms(monkeypatch):
    """edge_features=True adds the calls with edge features (they pass cuDNN the edge map): GAT one per head,
    as GATConv's folded edge logits, GATv2 one per feature."""
    import importlib

    pre = importlib.import_module("cudnn_gnn.ops.precompile")  # the module (the package re-exports the function)

    seen = []

    def spy(fn):
        def call(graph, x, w, *, heads, edge_attr, **kw):
            seen.append((fn.__name__, None if edge_attr is None else edge_attr.shape[1], w.shape[0]))
            return fn(graph, x, w, heads=heads, edge_attr=edge_attr, **kw)
        return call

    monkeypatch.setattr(pre, "_OPS", {k: spy(f) for k, f in pre._OPS.items()})
    got = cudnn_gnn.precompile(("gat", "gatv2"), [torch.float32], edge_features=True, backend="reference",
                               device="cpu", max_workers=1)
    assert list(got) == ["gat/float32", "gat/float32 edge", "gatv2/float32", "gatv2/float32 edge"]
    assert seen == [("gat", None, 32), ("gat", 2, 34), ("gatv2", None, 16), ("gatv2", 16, 16)]


def test_index_dtypes_build_on_graphs_stored_in_each(monkeypatch):
    """The index dtype is a kernel parameter (int64 kernels for big graphs): each requested one gets its calls."""
    import importlib

    pre = importlib.import_module("cudnn_gnn.ops.precompile")
    seen = []

    def spy(fn):
        def call(graph, x, w, **kw):
            seen.append((fn.__name__, graph.index_dtype))
            return fn(graph, x, w, **kw)
        return call

    monkeypatch.setattr(pre, "_OPS", {k: spy(f) for k, f in pre._OPS.items()})
    got = cudnn_gnn.precompile(["gat"], [torch.float32], index_dtypes=(torch.int32, torch.int64), backend="reference",
                               device="cpu", max_workers=1)
    assert list(got) == ["gat/float32", "gat/float32 int64"]
    assert seen == [("gat", torch.int32), ("gat", torch.int64)]


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    (dict(ops=["gcn"]), ValueError, "ops must name 'gat' or 'gatv2', got 'gcn'"),
    (dict(dtypes=[torch.float64]), ValueError, "dtypes must be float32, float16 or bfloat16, got torch.float64"),
    (dict(ops=[]), ValueError, "ops, dtypes and index_dtypes must not be empty"),
    (dict(index_dtypes=[]), ValueError, "ops, dtypes and index_dtypes must not be empty"),
    (dict(index_dtypes=[torch.int16]), ValueError, "index_dtypes must hold torch.int32 and/or torch.int64"),
    (dict(backward=1), TypeError, "backward must be a bool"),
    (dict(edge_features="yes"), TypeError, "edge_features must be a bool"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cudnn_gnn.precompile(**{"backend": "reference", "device": "cpu", **kwargs})


def test_cudnn_on_cpu_says_why():
    with pytest.raises(RuntimeError, match="backend='cudnn' is unavailable: cuDNN's GNN kernels need CUDA tensors"):
        cudnn_gnn.precompile(["gat"], [torch.float32], device="cpu")


@pytest.mark.slow
def test_processes_run_each_build_in_a_process_of_its_own(monkeypatch):
    """processes=True starts one process per build, with that build's arguments;
    then builds in this process too (same keys as without processes); each key's seconds include its process."""
    import importlib
    import subprocess

    pre = importlib.import_module("cudnn_gnn.ops.precompile")
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def spy_popen(argv, **kw):
        started.append(list(argv[3:]))
        return real_popen(argv, **kw)

    monkeypatch.setattr(pre.subprocess, "Popen", spy_popen)
    got = cudnn_gnn.precompile(["gat"], [torch.float32], edge_features=True, index_dtypes=(torch.int64,),
                               backward=True, deterministic=True, backend="reference", device="cpu", processes=True)
    assert started == [["gat", "float32", "0", "int64", "1", "1", "cpu", "reference"],
                       ["gat", "float32", "1", "int64", "1", "1", "cpu", "reference"]]
    assert list(got) == ["gat/float32 int64", "gat/float32 edge int64"]
    assert all(s > 0.1 for s in got.values())  # a process imports torch: well above an in-process CPU build


@pytest.mark.slow
def test_build_processes_exit_cleanly_and_run_one_build(monkeypatch):
    """A build process runs exactly its job (the edge call only, for an edge job) and exits 0; a bad job exits
    non-zero without raising here (this process then builds it and raises the real error)."""
    import importlib

    pre = importlib.import_module("cudnn_gnn.ops.precompile")
    seen = []
    monkeypatch.setattr(pre, "_precompile_jobs", lambda jobs, **kw: seen.append((jobs, kw)))
    pre._child_main(["gatv2", "bfloat16", "1", "int32", "0", "1", "cpu", "reference"])
    assert seen == [([("gatv2", torch.bfloat16, True, torch.int32)],
                     dict(backward=False, deterministic=True, device=torch.device("cpu"), backend="reference",
                          max_workers=1, processes=False))]
    monkeypatch.undo()
    done = pre._build_in_processes([("gat", torch.float32, True, torch.int32), ("nope", torch.float32, False, torch.int32)],
                                   True, False, torch.device("cpu"), "reference")
    assert done[0][1] == 0 and done[1][1] != 0


def test_processes_must_be_a_bool():
    with pytest.raises(TypeError, match="processes"):
        cudnn_gnn.precompile(["gat"], [torch.float32], backend="reference", device="cpu", processes="yes")
