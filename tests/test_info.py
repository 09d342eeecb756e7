"""`python -m cudnn_gnn info` / backend_info(): what a user gets and the command that gets them more."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from cudnn_gnn.backends import info as backends


@pytest.fixture
def fake_env(monkeypatch):
    """Pretend to be a GPU machine with a chosen frontend and cuDNN version."""

    from cudnn_gnn.ops import plan

    monkeypatch.setattr(plan, "_warned_reference_on_gpu", False)
    # no Triton unless a test says so: these tests are about cuDNN's probe
    monkeypatch.setattr(backends, "_probe_triton", lambda cuda: (None, "the triton package is not importable"))

    def make(*, sm=(9, 0), frontend="1.32.0", backend_version=92801, gnn=True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: sm)
        monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91900)
        if frontend is None:
            monkeypatch.setitem(sys.modules, "cudnn", None)  # import fails
        else:
            mod = types.ModuleType("cudnn")
            mod.__version__ = frontend
            mod.backend_version = lambda: backend_version
            if gnn:
                mod.gnn_mha_gat_forward = mod.gnn_mha_gat_v2_forward = object()
            mod.pygraph = object()
            monkeypatch.setitem(sys.modules, "cudnn", mod)
        return backends.backend_info(refresh=True)

    yield make
    backends._probe.cache_clear()


def test_gpu_with_cudnn_928_picks_cudnn(fake_env):
    info = fake_env()
    assert info.auto_backend == "cudnn" and info.reason is None and info.sdpa_available
    assert "backend='auto'      cudnn" in str(info)


def test_auto_prefers_triton_where_both_run(fake_env, monkeypatch):
    """AUTO_ORDER: where Triton and cuDNN both run, `auto` takes Triton (faster in every benchmarked row but Cora's,
    docs/performance.md), and `info` names the order; cuDNN stays what an explicit backend="cudnn" gets."""
    from cudnn_gnn.ops.plan import choose_backend

    monkeypatch.setattr(backends, "_probe_triton", lambda cuda: ("3.6.0", None))
    info = fake_env()
    assert info.reason is None and info.auto_backend == "triton"
    assert "backend='auto'      triton (GAT and GATv2 on CUDA: the first of triton, cudnn that runs here" in str(info)
    assert choose_backend(_cuda_call("auto")).name == "triton"
    assert choose_backend(_cuda_call("cudnn")).name == "cudnn"


def test_gpu_with_torchs_older_cudnn_says_why_and_how(fake_env):
    info = fake_env(backend_version=92600)
    assert info.auto_backend == "reference"
    assert "9.26" in info.reason and ">= 9.28" in info.reason
    major = (torch.version.cuda or "13").split(".")[0]
    assert f'nvidia-cudnn-cu{major}>=9.28' in info.fix and "LD_PRELOAD" in info.fix


def test_gpu_without_frontend(fake_env):
    info = fake_env(frontend=None)
    assert info.auto_backend == "reference" and "not importable" in info.reason
    assert 'pip install --no-deps "nvidia-cudnn-frontend>=1.32"' == info.fix


def test_old_frontend_and_old_gpu(fake_env):
    assert "lacks the GNN kernels" in fake_env(frontend="1.16.0", gnn=False).reason
    info = fake_env(sm=(7, 5))
    assert "compute capability 7.5" in info.reason and info.auto_backend == "reference"


def _cuda_call(backend: str, mask_requires_grad: bool = False) -> types.SimpleNamespace:
    """What the planner reads of a call on a CUDA graph (no CUDA tensor needed)."""
    graph = types.SimpleNamespace(device=torch.device("cuda"), num_edges=3)
    return types.SimpleNamespace(graph=graph, backend=backend, dtype=torch.float32, name="gat",
                                 mask_requires_grad=mask_requires_grad)


def test_auto_on_gpu_without_cudnn_takes_triton(fake_env, monkeypatch):
    """cuDNN too old, Triton there: `auto` runs the Triton kernels, and `info` says so and why not cuDNN."""
    from cudnn_gnn.ops.plan import choose_backend

    monkeypatch.setattr(backends, "_probe_triton", lambda cuda: ("3.6.0", None))
    info = fake_env(backend_version=92600)
    assert info.auto_backend == "triton" and "the loaded cuDNN is 9.26" in info.reason
    assert "triton              3.6.0 (kernels run here)" in str(info) and "backend='auto'      triton" in str(info)
    assert choose_backend(_cuda_call("auto")).name == "triton"


def test_auto_with_a_mask_that_requires_grad_takes_the_reference(fake_env, monkeypatch):
    """An explainer's edge mask (a dropout mask requiring grad) runs where autograd reaches it, without a warning."""
    import warnings

    from cudnn_gnn.ops.plan import choose_backend

    monkeypatch.setattr(backends, "_probe_triton", lambda cuda: ("3.6.0", None))
    fake_env(backend_version=92600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose_backend(_cuda_call("auto", mask_requires_grad=True)).name == "reference"


def test_auto_on_gpu_without_cudnn_and_triton_warns_once(fake_env, monkeypatch):
    from cudnn_gnn.ops.plan import choose_backend

    fake_env(backend_version=92600)
    with pytest.warns(RuntimeWarning, match="reference backend .* because triton: .*; cudnn: the loaded cuDNN is 9.26"):
        assert choose_backend(_cuda_call("auto")).name == "reference"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose_backend(_cuda_call("auto")).name == "reference"  # once only
    with pytest.raises(RuntimeError, match="backend='cudnn' is unavailable: the loaded cuDNN is 9.26.*Fix: pip install"):
        choose_backend(_cuda_call("cudnn"))


@pytest.mark.slow
def test_cli_info_runs_and_explains():
    r = subprocess.run([sys.executable, "-m", "cudnn_gnn", "info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "backend='auto'" in r.stdout
    if not torch.cuda.is_available():
        assert "why not cudnn       no CUDA GPU" in r.stdout and "fix" in r.stdout
    r = subprocess.run([sys.executable, "-m", "cudnn_gnn", "info", "--json"], capture_output=True, text=True, timeout=120)
    assert '"auto_backend"' in r.stdout


def test_backend_choice_is_a_constant_under_compile():
    """The probe runs once at trace time (import, device queries) and its answer is a constant of the graph. On
    CPU this checks the value; the graph break it prevents (a fresh process probing under compile stopped at
    ``torch.cuda.get_device_name``) shows on a GPU, in tests/gpu's compile tests run in fresh shard processes."""
    from cudnn_gnn.backends.info import _probe, cudnn_available

    _probe.cache_clear()
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend="eager")
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if cudnn_available() else x - 1

    x = torch.zeros(2)
    picks = backends.backend_info().reason is None
    assert torch.equal(f(x), x + 1 if picks else x - 1)


def test_two_cudnn_builds_in_one_process_are_named(fake_env, monkeypatch):
    """libcudnn files mapped from two directories (torch's wheel and a preloaded build) are listed and flagged,
    with the known consequence and fix; one directory is listed without the flag."""
    torch_dir = "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib"
    libs = (f"{torch_dir}/libcudnn.so.9", "/opt/cudnn928/libcudnn.so.9", "/opt/cudnn928/libcudnn_graph.so.9")
    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: libs)
    info = fake_env()
    assert info.cudnn_dirs == ("/opt/cudnn928", torch_dir)
    text = str(info)
    assert "/opt/cudnn928: libcudnn.so.9, libcudnn_graph.so.9" in text and f"{torch_dir}: libcudnn.so.9" in text
    assert "mixed cuDNN" in text and "libcudnn_engines_precompiled" in text
    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: libs[1:])
    text = str(fake_env())
    assert "cuDNN libraries     /opt/cudnn928" in text and "mixed cuDNN" not in text


def test_sublibrary_failure_after_cudnn_sdpa_lists_the_loaded_cudnn_directories(monkeypatch):
    from cudnn_gnn.backends import _cudnn, _cudnn_sdpa

    monkeypatch.setattr(_cudnn_sdpa, "_USED", True)
    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: ("/a/libcudnn.so.9", "/b/libcudnn.so.9"))
    exc = RuntimeError("cudnnGnnMhaGatForward failed: CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE")
    assert "libcudnn files from 2 directories: /a, /b" in str(_cudnn.explain_failure(exc))


def test_an_incomplete_cudnn_in_use_is_named_with_its_consequence(fake_env, monkeypatch, tmp_path):
    """The H200 failure (GAT after cuDNN SDPA): the cuDNN 9.28 in use lacked libcudnn_engines_precompiled. `info`
    names the missing sublibraries and the JIT-only consequence; the GAT error carries it, SDPA or not."""
    from cudnn_gnn.backends import _cudnn, _cudnn_sdpa

    partial, complete = tmp_path / "cudnn928", tmp_path / "wheel"
    partial.mkdir(), complete.mkdir()
    for name in ("libcudnn", "libcudnn_graph", "libcudnn_ext", "libcudnn_engines_runtime_compiled"):
        (partial / f"{name}.so.9").write_bytes(b"")
    for name in ("libcudnn", *backends.CUDNN_SUBLIBRARIES):
        (complete / f"{name}.so.9").write_bytes(b"")
    libs = (str(partial / "libcudnn.so.9"), str(partial / "libcudnn_graph.so.9"), str(complete / "libcudnn.so.9"))
    monkeypatch.setattr(backends, "mapped_cudnn_libraries", lambda: libs)
    text = str(fake_env())
    assert f"incomplete cuDNN    {partial} lacks libcudnn_engines_precompiled, libcudnn_engines_tensor_ir" in text
    assert "GRAPH_JIT_ONLY" in text and "nvidia-cudnn-cu13>=9.28" in text
    assert str(complete) + " lacks" not in text  # complete, and no libcudnn_graph mapped from it
    monkeypatch.setattr(_cudnn_sdpa, "_USED", False)
    exc = RuntimeError("cudnnGnnMhaGatForward failed: CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE")
    explained = str(_cudnn.explain_failure(exc))
    assert f"The cuDNN in {partial} lacks libcudnn_engines_precompiled" in explained and "GRAPH_JIT_ONLY" in explained
    for name in backends.CUDNN_SUBLIBRARIES:
        (partial / f"{name}.so.9").write_bytes(b"")
    assert "incomplete cuDNN    " not in str(fake_env())
    assert _cudnn.explain_failure(exc) is exc
