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
    (dict(ops=[]), ValueError, r"ops \(or attention\), dtypes and index_dtypes must not be empty"),
    (dict(index_dtypes=[]), ValueError, r"ops \(or attention\), dtypes and index_dtypes must not be empty"),
    (dict(attention=[(2, 8, 2)]), ValueError, r"attention must hold AttentionShape"),
    (dict(attention=[(2, 8, 0, 16)]), ValueError, "attention heads must be an int >= 1, got 0"),
    (dict(attention=[(2, 8, 2, 16, 17)]), ValueError,
     r"attention num_nodes must lie in \[max_num_nodes, num_graphs \* max_num_nodes\] = \[8, 16\], got 17"),
    (dict(attention=[(2, 8, 2, 16)], attention_dropout=1.0), ValueError,
     r"attention_dropout must be in \[0, 1\) \(a call with dropout 1 runs on flash: no cuDNN plan to build\), got 1.0"),
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


def test_attention_shapes_run_every_backward_bucket_on_the_reference_backend():
    got = cudnn_gnn.precompile((), (torch.float32, torch.bfloat16), backend="reference", device="cpu",
                               attention=[(4, 30, 2, 8), cudnn_gnn.ops.AttentionShape(5, 40, 1, 8, (40, 200))])
    assert list(got) == [
        "attention/bfloat16 4x30 2x8 N=60",  # float32 runs as bfloat16: one build
        "attention/bfloat16 5x40 1x8 N=64", "attention/bfloat16 5x40 1x8 N=128",
        "attention/bfloat16 5x40 1x8 N=192", "attention/bfloat16 5x40 1x8 N=200",
    ]


def test_attention_fills_the_plan_folder_with_what_a_run_loads(fake_cudnn, monkeypatch, tmp_path):
    """precompile(attention=...) writes the plans (forward once, a backward per node-total bucket, dropout and
    determinism as asked) that a later process's graph_attention calls load instead of building."""
    import importlib

    from cudnn_gnn.backends import _cudnn_sdpa

    from ._fake_cudnn import FakeFrontend

    ga = importlib.import_module("cudnn_gnn.ops.global_attention")
    monkeypatch.setattr(ga, "choose_backend", lambda *a: "cudnn")
    got = cudnn_gnn.precompile((), [torch.float16], backend="cudnn", device="cpu", deterministic=True,
                               attention=[(2, 50, 2, 16, (60, 100))], attention_dropout=0.1)
    assert list(got) == ["attention/float16 2x50 2x16 N=64", "attention/float16 2x50 2x16 N=100"]
    info = _cudnn_sdpa.plan_cache_info()
    assert (info.builds, info.disk_writes) == (3, 3) and len(list((tmp_path / "plans").iterdir())) == 3
    later = FakeFrontend()
    monkeypatch.setattr(_cudnn_sdpa, "_frontend", lambda: later)
    _cudnn_sdpa.clear_plan_cache()
    q = torch.randn(90, 2, 16, dtype=torch.float16, requires_grad=True)
    out = cudnn_gnn.graph_attention(q, q, q, torch.tensor([0, 45, 90]), max_num_nodes=50, dropout=0.1, training=True,
                                    backend="cudnn", deterministic=True)
    out.float().sum().backward()
    assert (later.builds, later.loads) == (0, 2)
