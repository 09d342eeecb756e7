"""Shared fixtures: index dtypes and a named catalogue of test graphs (STYLE practice 12)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
import torch

if TYPE_CHECKING:  # imported where used: collecting the tests imports no cudnn_gnn module
    from cudnn_gnn import CscGraph
    from cudnn_gnn.spec import AttentionSpec


def _shuffled(ei: torch.Tensor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return ei[:, torch.randperm(ei.shape[1], generator=g)]


def _power_law(n: int, e: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.2)
    dst = torch.multinomial(w, e, replacement=True, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    return torch.stack([src, dst])


# name -> (edge_index [2, E], num_src, num_dst)
GRAPHS: dict[str, Callable[[], tuple[torch.Tensor, int, int]]] = {
    "empty": lambda: (torch.empty(2, 0, dtype=torch.long), 4, 4),
    "no_nodes": lambda: (torch.empty(2, 0, dtype=torch.long), 0, 0),
    "single_edge": lambda: (torch.tensor([[1], [0]]), 2, 2),
    "zero_in_degree": lambda: (torch.tensor([[0, 1, 2, 0], [1, 1, 3, 3]]), 5, 5),
    "self_loops": lambda: (torch.tensor([[0, 1, 2, 2, 0], [0, 1, 2, 0, 1]]), 3, 3),
    "multi_edges": lambda: (torch.tensor([[0, 0, 0, 1, 2, 2], [1, 1, 1, 0, 0, 0]]), 3, 3),
    "bipartite": lambda: (torch.tensor([[0, 4, 2, 5, 1, 3, 6], [0, 1, 1, 2, 0, 2, 1]]), 7, 3),
    "bipartite_more_dst": lambda: (torch.tensor([[0, 1, 0, 1], [0, 3, 4, 2]]), 2, 5),
    "unsorted_coo": lambda: (_shuffled(torch.randint(0, 12, (2, 40), generator=torch.Generator().manual_seed(1))), 12, 12),
    "power_law": lambda: (_shuffled(_power_law(30, 150)), 30, 30),
}


@pytest.fixture(params=sorted(GRAPHS))
def graph_case(request: pytest.FixtureRequest) -> tuple[str, torch.Tensor, int, int]:
    ei, ns, nd = GRAPHS[request.param]()
    return request.param, ei, ns, nd


@pytest.fixture(params=[torch.int32, torch.int64], ids=["int32", "int64"])
def index_dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


def interpret_triton_on_cpu(gpu_suite: str | None = None) -> bool:
    """Run the calling test module's Triton kernels under Triton's interpreter where no CUDA GPU is present.

    Call it at the top of the module, before anything imports ``cudnn_gnn.backends.triton.kernels``: Triton reads
    ``TRITON_INTERPRET`` when it decorates the kernels, once a process (with CUDA present it stays as the user set
    it). With ``gpu_suite`` (what runs the compiled kernels instead), the module skips unless the interpreter is on.
    Returns whether it is on."""
    import os
    import sys

    if not torch.cuda.is_available() and "cudnn_gnn.backends.triton.kernels" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    on = os.environ.get("TRITON_INTERPRET") == "1"
    if gpu_suite is not None and not on:
        pytest.skip(f"CUDA is present and TRITON_INTERPRET is not 1: {gpu_suite} runs the compiled kernels; set "
                    "TRITON_INTERPRET=1 to run this file on the interpreter", allow_module_level=True)
    return on


class KernelLaunches(list[tuple[str, Any, tuple, dict]]):
    """What :func:`kernel_launches` records: ``(kernel name, kernel, args, kwargs)`` a launch, in order.
    ``launching``: True while a recorded kernel runs (under the interpreter its own torch ops run then, which a
    recorder of torch ops leaves out: they are no launch on a GPU)."""

    launching = False

    @property
    def names(self) -> list[str]:
        """The launched kernels' names, in order."""
        return [name for name, *_ in self]


@pytest.fixture
def kernel_launches(monkeypatch: pytest.MonkeyPatch) -> KernelLaunches:
    """Every launch of the Triton kernel modules' kernels, in order (each kernel wrapped by a recording spy that
    launches it): :class:`KernelLaunches`."""
    from cudnn_gnn.backends.triton import kernels

    seen = KernelLaunches()

    class _Spy:
        def __init__(self, real: Any, name: str) -> None:
            self.real, self.name = real, name

        def __getitem__(self, grid: Any) -> Callable[..., Any]:
            def launch(*args: Any, **kwargs: Any) -> Any:
                seen.append((self.name, self.real, args, kwargs))
                seen.launching = True
                try:
                    return self.real[grid](*args, **kwargs)
                finally:
                    seen.launching = False
            return launch

    for module in kernels.KERNEL_MODULES:
        for name, real in list(vars(module).items()):
            if name.endswith("_kernel") and hasattr(real, "__getitem__"):
                monkeypatch.setattr(module, name, _Spy(real, name))
    return seen


def syncs_outside(found: list[str], check: Callable[..., object]) -> list[str]:
    """The syncs of ``found`` (:func:`cudnn_gnn.apps.capture.host_syncs`'s ``"<op> at <file:line>: <why>"``) that
    are not inside function ``check`` (a value check that runs only where a sync is cheap, on a CPU). Asserts that
    ``found`` is not empty: the check's own sync is seen, so filtering it out is not vacuous."""
    import inspect
    import os

    assert found, "no sync seen: the CPU-only check did not run"
    lines, first = inspect.getsourcelines(check)
    source = os.path.realpath(inspect.getsourcefile(check) or "")
    rest = []
    for sync in found:
        path, line = sync.split(" at ")[1].split(": ")[0].rsplit(":", 1)
        if os.path.realpath(path) != source or not first <= int(line) < first + len(lines):
            rest.append(sync)
    return rest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard", default=None, metavar="I/N",
        help="run shard I of N (0-based) of the collected tests, to spread cuDNN's first-call kernel builds "
             "(single-threaded, 40-120 s each) over N processes; tests marked slow all go to shard 0, the rest "
             "round-robin over the other shards; tests marked gpu_alone go to none (see --alone). "
             "tests/gpu/run_shards.py drives this.")
    parser.addoption(
        "--alone", action="store_true", default=False,
        help="run only the tests marked gpu_alone (those that need most of the GPU's memory), which --shard leaves "
             "out: tests/gpu/run_shards.py runs them in one process after the shards, with the GPU to themselves.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spec = config.getoption("--shard")
    if config.getoption("--alone"):
        if spec is not None:
            raise pytest.UsageError("--alone and --shard exclude each other: --alone runs what the shards leave out")
        _keep(config, items, [it for it in items if it.get_closest_marker("gpu_alone") is not None])
        return
    if spec is None:
        return
    try:
        index, count = (int(s) for s in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard must be I/N with integers 0 <= I < N, got {spec!r}") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"--shard must be I/N with integers 0 <= I < N, got {spec!r}")
    shared = [it for it in items if it.get_closest_marker("gpu_alone") is None]  # --alone runs the others
    keep = []
    fast = [it for it in shared if it.get_closest_marker("slow") is None]
    position = {id(it): k for k, it in enumerate(fast)}
    for it in shared:
        if count == 1:
            shard = 0
        elif id(it) not in position:
            shard = 0
        else:
            shard = 1 + position[id(it)] % (count - 1)
        if shard == index:
            keep.append(it)
    _keep(config, items, keep)


def _keep(config: pytest.Config, items: list[pytest.Item], keep: list[pytest.Item]) -> None:
    """Run ``keep`` of ``items`` (in place), reporting the rest as deselected."""
    kept = {id(it) for it in keep}
    drop = [it for it in items if id(it) not in kept]
    items[:] = keep
    if drop:
        config.hook.pytest_deselected(items=drop)


def call_spec(graph: CscGraph, x_src: torch.Tensor, x_dst: torch.Tensor, attn_weights: torch.Tensor,
              edge_attr: torch.Tensor | None = None, dropout_mask: torch.Tensor | None = None, *, v2: bool, heads: int,
              concat: bool, activation_name: str = "leaky_relu", activation_alpha: float = 0.2,
              return_attention: bool = False, lin_edge_weight: torch.Tensor | None = None, dropout: float = 0.0,
              dropout_seed: torch.Tensor | None = None) -> AttentionSpec:
    """The :class:`~cudnn_gnn.spec.AttentionSpec` a backend gets from the planner, built from a backend test's
    tensors as they are (``x_dst`` may be ``x_src`` itself or a view; no validation, as the backends trust the spec),
    for calling a backend's functional op (``triton_gat``, ``reference.mha_gat``, ``build_call``) directly.
    ``dropout`` with ``dropout_seed`` (int64 ``[1]``): counter-based dropout, as the spec carries it in training."""
    from cudnn_gnn.spec import AttentionSpec

    return AttentionSpec(
        v2=v2, graph=graph, x_src=x_src, x_dst=x_dst, attn_weights=attn_weights, heads=heads, edge_attr=edge_attr,
        lin_edge_weight=lin_edge_weight, concat=concat, activation=activation_name,
        activation_alpha=float(activation_alpha), dropout_mask=dropout_mask, dropout=dropout,
        dropout_seed=dropout_seed, return_attention=return_attention,
        deterministic=False, grad_precision="auto", backend="triton", max_degree=None)


@pytest.fixture
def example_main(monkeypatch):
    """``example_main(name)`` -> the ``main(argv)`` of ``examples/<name>.py`` (its folder on sys.path for
    ``_common``, which is dropped from ``sys.modules`` afterwards)."""
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "examples"
    monkeypatch.syspath_prepend(str(folder))

    def _main(name: str) -> Callable[..., object]:
        spec = importlib.util.spec_from_file_location(f"example_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module.main  # type: ignore[no-any-return]

    yield _main
    sys.modules.pop("_common", None)


@pytest.fixture
def aten_ops() -> Callable[[Callable[[], object]], dict[str, int]]:
    """``aten_ops(fn)`` -> how many times ``fn()`` called each aten op (by packet name, e.g. ``"sort"``), counted
    below autograd (forward and backward ops alike)."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.counts: Counter[str] = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    def count(fn: Callable[[], object]) -> dict[str, int]:
        with _Count() as mode:
            fn()
        return dict(mode.counts)

    return count
