"""``cudnn_gnn.backends.triton.prebuild`` (``_prebuild.py``) on a CPU: its argument checks, the recording (Triton's
``jit_cache_hook`` installed, nesting refused, the previous hook restored after an error, other modules' and other
threads' builds passed on), the dry run's safety (GAT and GATv2 forward and backward with every kernel launch skipped and every
op output poisoned: no kernel output is used as an index or a size), and the builds in forked processes with a
real Triton kernel compiled for sm_90 (``GPUTarget("cuda", 90, 32)``, no GPU needed: Triton lowers to PTX and runs
the ``ptxas`` it ships) in a subprocess with a driver stand-in: the variant built by its process and found in the
disk cache by the parent, a failing process's variant built by the parent, a real build error raised. On the GPU:
``tests/gpu/test_triton_prebuild_gpu.py``."""

from __future__ import annotations

import _thread
import os
import subprocess
import sys
import textwrap
import threading
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton", reason="prebuild needs the triton package: pip install triton")

from ..conftest import interpret_triton_on_cpu  # noqa: E402

interpret_triton_on_cpu()

import triton  # noqa: E402

from cudnn_gnn.backends.triton import _prebuild as pb  # noqa: E402

interpreting = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                  reason="runs the kernels on Triton's interpreter (TRITON_INTERPRET=1)")


def test_refuses_bad_arguments():
    with pytest.raises(TypeError, match="fn must be callable"):
        pb.prebuild(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="processes must be an int"):
        pb.prebuild(lambda: None, processes=True)
    with pytest.raises(ValueError, match="processes must be >= 0, got -1"):
        pb.prebuild(lambda: None, processes=-1)


@interpreting
def test_without_the_jit_nothing_runs():
    calls = []
    report = pb.prebuild(calls.append, 1)
    assert report == pb.PrebuildReport((), 0.0) and calls == []


def _hook_kwargs(module: str, data: str = '{"name": "k"}') -> dict:
    info = SimpleNamespace(module=module, name="k", jit_function=SimpleNamespace())
    return dict(key="key", repr="k[...]", fn=info, compile={"specialization_data": data}, is_manual_warmup=False,
                already_compiled=False)


def test_recording_records_ours_and_passes_the_rest_on():
    runtime = triton.knobs.runtime
    seen = []

    def previous(**kw):
        seen.append(kw["fn"].module)
        return None

    runtime.jit_cache_hook = previous
    try:
        with pb._recording("ours.kernels") as recorded:
            hook = runtime.jit_cache_hook
            assert hook(**_hook_kwargs("ours.kernels.forward")) is True  # skipped: no build, no launch
            assert hook(**_hook_kwargs("ours.kernels.forward")) is True  # the same variant once
            assert hook(**_hook_kwargs("ours.kernels.forward", '{"name": "k2"}')) is True
            assert hook(**_hook_kwargs("torch._inductor.x")) is None  # not ours: to the previous hook
            other = []
            t = threading.Thread(target=lambda: other.append(hook(**_hook_kwargs("ours.kernels.forward"))))
            t.start()
            t.join()
            assert other == [None]  # another Python thread's launch builds as usual
            # a thread Python did not start (autograd's device thread runs a CUDA backward there) is recorded
            done = threading.Event()
            native = []

            def from_native():
                native.append(hook(**_hook_kwargs("ours.kernels.backward", '{"name": "k3"}')))
                done.set()

            _thread.start_new_thread(from_native, ())
            assert done.wait(10)
            assert native == [True]
        assert [r.data for r in recorded.values()] == ['{"name": "k"}', '{"name": "k2"}', '{"name": "k3"}']
        assert seen == ["torch._inductor.x", "ours.kernels.forward"]
        assert runtime.jit_cache_hook is previous
    finally:
        runtime.jit_cache_hook = None


def test_recording_refuses_nesting_and_restores_the_hook_after_an_error():
    runtime = triton.knobs.runtime
    assert runtime.jit_cache_hook is None
    with pytest.raises(ZeroDivisionError):
        with pb._recording("ours"):
            with pytest.raises(RuntimeError, match="prebuild must not be nested"):
                with pb._recording("ours"):
                    pass
            assert runtime.jit_cache_hook is not None  # the outer recording is intact
            _ = 1 / 0
    assert runtime.jit_cache_hook is None
    with pb._recording("ours"):  # usable again
        pass
    assert runtime.jit_cache_hook is None


class _Skip:
    """A kernel whose launches do nothing (what the dry run does to a launch that needs a build)."""

    def __init__(self, launched: list[str], name: str) -> None:
        self.launched, self.name = launched, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launched.append(self.name)

        return launch


def _poisoned(real, fill):
    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(fill(t.dtype)) if t.numel() else t

    return empty


def _poison_value(dtype: torch.dtype):
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max  # an index out of every range


@interpreting
@pytest.mark.parametrize(("op", "gat_backward"), [("gat", "one_gather"), ("gat", "two_gather"), ("gatv2", "auto")])
def test_dry_run_uses_no_kernel_output_as_an_index_or_a_size(monkeypatch, op, gat_backward):
    """Every launch skipped and every tensor the ops allocate (``torch.empty``, ``new_empty``) filled with NaN or an
    out-of-range index: forward and backward still run, on CPU, where an out-of-range index raises."""
    import cudnn_gnn
    from cudnn_gnn import CscGraph
    from cudnn_gnn.backends.triton import TritonOptions, use_options
    from cudnn_gnn.backends.triton._runtime import kernels

    g = torch.Generator().manual_seed(0)
    n, heads, c = 30, 2, 8
    ei = torch.randint(0, n, (2, 120), generator=g)
    graph = CscGraph.from_edge_index(ei, num_nodes=n)
    d = heads * c
    x = torch.randn(n, d, generator=g, requires_grad=True)
    w = torch.randn(d if op == "gatv2" else 2 * d + heads, generator=g, requires_grad=True)
    edge = torch.randn(graph.num_edges, d if op == "gatv2" else heads, generator=g, requires_grad=True)
    fn = getattr(cudnn_gnn, op)

    def step():
        with use_options(TritonOptions(gat_backward=gat_backward)):
            out = fn(graph, x, w, heads=heads, edge_attr=edge, backend="triton", dropout=0.3, training=True)
        out.float().sum().backward()
        return out

    step()  # the graph's structures (work lists, reverse CSC) built for real, as a model's earlier calls would
    launched: list[str] = []
    for module in kernels().KERNEL_MODULES:
        for name, value in list(vars(module).items()):
            if name.endswith("_kernel") and hasattr(value, "__getitem__"):
                monkeypatch.setattr(module, name, _Skip(launched, name))
    monkeypatch.setattr(torch, "empty", _poisoned(torch.empty, _poison_value))
    monkeypatch.setattr(torch.Tensor, "new_empty", _poisoned(torch.Tensor.new_empty, _poison_value))
    x.grad = w.grad = edge.grad = None
    out = step()
    assert launched and out.shape == (n, d)
    assert x.grad is not None and w.grad is not None and edge.grad is not None


_CHILD_SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class Stub:  # the parent's driver: a device, a stream and the sm_90 target, no GPU
        def get_current_device(self): return 0
        def get_current_stream(self, device=None): return 0
        def get_current_target(self): return GPUTarget("cuda", 90, 32)

    driver.set_active(Stub())
    sys.path.insert(0, sys.argv[1])
    import probe_kernels as pk
    from cudnn_gnn.backends.triton import _prebuild as pb
    from cudnn_gnn.backends.triton.launch import CachedLaunch

    def files():
        root = os.environ["TRITON_CACHE_DIR"]
        return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns for d, _, fs in os.walk(root) for f in fs}

    result = {}
    launch = CachedLaunch(pk.add_one)
    with pb._recording("probe_kernels") as recorded:
        launch[(4,)](torch.zeros(64), 64, BLOCK=16)
        launch[(4,)](torch.zeros(64), 64, BLOCK=16)
        pk.add_one[(4,)](torch.zeros(64), 64, BLOCK=32)
    result["recorded"] = [r.kernel for r in recorded.values()]
    result["cached_variants"] = launch.variants()  # a skipped launch leaves no variant behind
    result["held"] = len(pk.add_one.device_caches[0][0])
    variants = list(recorded.values())
    built = pb._build(variants[:1], 2)
    after_child = files()
    result["built"] = [tuple(b) for b in built]
    result["held_after"] = len(pk.add_one.device_caches[0][0])
    pk.add_one.device_caches[0][0].clear()
    t = time.perf_counter()
    pk.add_one.preload(variants[0].data)
    result["disk_hit_s"] = time.perf_counter() - t
    result["cache_unchanged"] = files() == after_child and len(after_child) > 0

    def fail(*args):  # a build process that fails: the parent builds the variant itself
        raise RuntimeError("no")
    pb._child_build = fail
    result["fallback"] = [tuple(b) for b in pb._build(variants[1:], 2)]

    with pb._recording("probe_kernels") as recorded:
        pk.broken[(1,)](torch.zeros(4), BLOCK=4)
    try:
        pb._build(list(recorded.values()), 2)
        result["error"] = None
    except Exception as exc:
        result["error"] = type(exc).__name__
    print(json.dumps(result))
''')

_PROBE = textwrap.dedent('''
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1, mask=m)

    @triton.jit
    def broken(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), undefined_name)
''')


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the build processes are forked (no os.fork here)")
def test_builds_in_forked_processes_and_falls_back(tmp_path):
    """A real kernel compiled for sm_90 without a GPU: built in a forked process into a fresh ``TRITON_CACHE_DIR``,
    found there by the parent (no file rewritten); a failing build process leaves its variant to the parent, and a
    kernel that does not compile raises Triton's error in the parent."""
    import json

    (tmp_path / "probe_kernels.py").write_text(_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = subprocess.run([sys.executable, "-c", _CHILD_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0 and "ptxas" in proc.stderr:
        pytest.skip(f"Triton cannot build for sm_90 here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["recorded"] == ["add_one", "add_one"]  # BLOCK=16 once (two launches), BLOCK=32
    assert got["cached_variants"] == 0 and got["held"] == 0
    assert [(k, p) for k, _, p in got["built"]] == [("add_one", False)]  # built by its process
    assert got["held_after"] == 1  # loaded into this process
    assert got["cache_unchanged"]  # the parent's load was a disk hit: nothing built again
    assert [(k, p) for k, _, p in got["fallback"]] == [("add_one", True)]
    assert got["error"] is not None and got["error"] != "RuntimeError"  # the compiler's own error
