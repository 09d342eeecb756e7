"""The one-launch check of a packed batch's graph offsets (:func:`cudnn_gnn.backends.triton.packed_offsets.checked_offsets`),
on CPU under Triton's interpreter: against the torch ops it replaces, on good and bad offsets (within one block and
across blocks), inside :func:`cudnn_gnn.graph_attention` where a sync is costly, through ``torch.library.opcheck``
and ``torch.compile(fullgraph=True)``."""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("triton", reason="the offsets check runs on Triton: pip install triton")

from ..conftest import interpret_triton_on_cpu  # noqa: E402

interpret_triton_on_cpu("tests/gpu/test_graph_attention_gpu.py")

from cudnn_gnn.backends.triton import packed_offsets as offsets  # noqa: E402
from cudnn_gnn.backends.triton.kernels.packed_offsets import OFFSETS_BLOCK  # noqa: E402
from cudnn_gnn.ops.global_attention import graph_attention  # noqa: E402

ga = importlib.import_module("cudnn_gnn.ops.global_attention")


def _torch_check(ptr: torch.Tensor, n: int, max_nodes: int) -> tuple[torch.Tensor, bool]:
    """What graph_attention's torch ops compute: the safe layout, and whether ptr was bad."""
    sizes = ptr[1:] - ptr[:-1]
    bad = bool(ptr[0] != 0) or bool(ptr[-1] != n) or bool((sizes < 0).any()) or bool((sizes > max_nodes).any())
    safe = torch.cummax(ptr.clamp(0, n), 0).values
    return torch.cat([safe.new_zeros(1), safe[1:-1], safe.new_full((1,), n)]), bad


def _ptr(sizes: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.long)


def _cases() -> list[tuple[str, torch.Tensor, int, int]]:
    g = torch.Generator().manual_seed(0)
    many = torch.randint(0, 9, (OFFSETS_BLOCK + 700,), generator=g).tolist()  # crosses a block boundary
    good = _ptr(many)
    n = int(good[-1])
    cases = [("one graph", _ptr([7]), 7, 7), ("small", _ptr([3, 0, 5, 1]), 9, 5), ("two blocks", good, n, 8)]
    bad_first = _ptr([3, 4]) + 1
    cases.append(("first not 0", bad_first, 8, 4))
    cases.append(("last not n", _ptr([3, 4]), 8, 4))
    cases.append(("decreasing", torch.tensor([0, 5, 2, 9]), 9, 7))
    cases.append(("negative", torch.tensor([0, -3, 4, 6]), 6, 7))
    cases.append(("past n", torch.tensor([0, 4, 12, 6]), 6, 8))
    cases.append(("graph > max_nodes", _ptr([3, 6, 2]), 11, 5))
    late = good.clone()
    late[OFFSETS_BLOCK + 300] = late[OFFSETS_BLOCK + 299] - 1  # a decrease in the second block only
    cases.append(("decrease in block 2", late, n, 8))
    carry = good.clone()
    carry[OFFSETS_BLOCK - 2] = n  # the running maximum must carry into the next block
    cases.append(("maximum carried over blocks", carry, n, n))
    return cases


@pytest.mark.parametrize("name,ptr,n,max_nodes", _cases(), ids=[c[0] for c in _cases()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_torch_ops(name, ptr, n, max_nodes, dtype):
    safe, flag = offsets.checked_offsets(ptr, n, max_nodes, dtype)
    want_safe, want_bad = _torch_check(ptr, n, max_nodes)
    assert torch.equal(safe, want_safe), name
    assert flag.dtype == dtype and flag.shape == (1,)
    assert bool(torch.isnan(flag)) == want_bad, name
    if not want_bad:
        assert float(flag) == 0.0


def test_graph_attention_without_a_sync_uses_one_launch_and_keeps_results(monkeypatch):
    """Where a sync is costly and max_num_nodes is given, graph_attention checks ptr with the one launch: a good batch's
    output and gradients equal the synced call's, a bad batch's output is NaN."""
    monkeypatch.setattr(ga, "_sync_is_costly", lambda device: True)
    launches = []
    real = offsets.checked_offsets
    monkeypatch.setattr(offsets, "checked_offsets", lambda *a: launches.append(a) or real(*a))
    q = torch.randn(9, 2, 8, requires_grad=True)
    ptr = torch.tensor([0, 2, 2, 9])
    out = graph_attention(q, q, q, ptr, max_num_nodes=7, backend="reference")
    assert len(launches) == 1
    q2 = q.detach().requires_grad_()
    want = graph_attention(q2, q2, q2, ptr, backend="reference")  # synced path
    torch.testing.assert_close(out, want)
    out.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(q.grad, q2.grad)
    for bad, m in ((torch.tensor([0, 5, 2, 9]), 7), (torch.tensor([0, 2, 2, 9]), 6), (torch.tensor([0, 2, 2, 8]), 7)):
        assert torch.isnan(graph_attention(q, q, q, bad, max_num_nodes=m, backend="reference")).all()
    # a batch= call keeps the torch ops (they check batch too)
    graph_attention(q, q, q, None, batch=torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1]), num_graphs=2, max_num_nodes=7,
                    backend="reference")
    assert len(launches) == 4


def test_opcheck_and_compile():
    ptr = _ptr([3, 0, 5])
    torch.library.opcheck(offsets._checked_offsets_op, (ptr, 8, 5, torch.float32))

    def f(p: torch.Tensor) -> torch.Tensor:
        safe, flag = offsets.checked_offsets(p, 8, 5, torch.float32)
        return safe.float() + flag

    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(ptr), f(ptr))
