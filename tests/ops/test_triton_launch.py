"""The cached launch of our Triton kernels (``cudnn_gnn.backends.triton.launch``) on a CPU: its specialization key
against the properties Triton specializes on, and its dispatch (Triton's own path for a variant's first launch and
wherever the shortcut does not apply, the compiled kernel's launcher with the whole argument list after it), with a
stand-in for a jitted kernel and for Triton's driver; and the keys of GAT's real launches, recorded under Triton's
interpreter, at two head widths of one tile. The shortcut on real kernels, bitwise against Triton's
dispatch: ``tests/gpu/test_triton_gpu.py``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")

from ..conftest import call_spec, interpret_triton_on_cpu  # noqa: E402

INTERPRETED = interpret_triton_on_cpu()

from cudnn_gnn.backends.triton import launch as tl_launch  # noqa: E402


def test_key_separates_what_triton_specializes_on():
    x = torch.zeros(64)
    base = tl_launch.args_key([x, 7, 0.5, None, True])
    assert base is not None and base == tl_launch.args_key([torch.ones(64), 9, 2.0, None, False])
    # a 4-byte offset view is not 16-byte aligned; another dtype is another signature
    assert tl_launch.args_key([x[1:], 7, 0.5, None, True]) != base
    assert tl_launch.args_key([x[4:], 7, 0.5, None, True]) == base
    assert tl_launch.args_key([x.to(torch.bfloat16), 7, 0.5, None, True]) != base
    # integers: 1 is a constant, multiples of 16 are divisible, int32 / int64 / uint64 by range
    keys = {v: tl_launch.args_key([v]) for v in (1, 7, 9, 16, 32, 2**31 - 1, 2**31, 2**31 + 1, 2**63, -16, -3)}
    assert keys[7] == keys[9] == keys[2**31 - 1] == keys[-3]
    assert keys[16] == keys[32] == keys[-16]
    assert len({keys[1], keys[7], keys[16], keys[2**31], keys[2**31 + 1], keys[2**63]}) == 6
    # bool is not an int, float is not an int, None is its own
    assert len({tl_launch.args_key([True]), tl_launch.args_key([1]), tl_launch.args_key([1.0]),
                tl_launch.args_key([None])}) == 4
    # a Parameter is a tensor; an unknown type has no key (Triton's own dispatch)
    assert tl_launch.args_key([torch.nn.Parameter(torch.zeros(64))]) == tl_launch.args_key([x])
    assert tl_launch.args_key([(x, x)]) is None


class _Compiled:
    """A stand-in for Triton's CompiledKernel: records what its launcher was called with."""

    def __init__(self, calls):
        self.calls, self.function, self.packed_metadata = calls, "cufunction", "metadata"

    def run(self, *args):
        self.calls.append(("run", args))


def _params(names: str, constexprs: str) -> list[SimpleNamespace]:
    """A JITFunction's ``params``: each parameter's ``is_constexpr``."""
    return [SimpleNamespace(name=n, is_constexpr=n in constexprs.split()) for n in names.split()]


class _Jitted:
    """A stand-in for a JITFunction of parameters ``(a, b, n, BLOCK, WIDE)``, the last two constexprs."""

    arg_names = ["a", "b", "n", "BLOCK", "WIDE"]
    params = _params("a b n BLOCK WIDE", "BLOCK WIDE")

    def __init__(self):
        self.calls, self.pre_run_hooks = [], []
        self.compiled = _Compiled(self.calls)

    def __getitem__(self, grid):
        def dispatch(*args, **kwargs):
            self.calls.append(("triton", grid, args, kwargs))
            return self.compiled
        return dispatch


@pytest.fixture
def kernel(monkeypatch):
    """A CachedLaunch around the stand-in, with the version check passed and a driver of device 3, stream 99."""
    active = SimpleNamespace(get_current_device=lambda: 3, get_current_stream=lambda device: 99 + 0 * device)
    monkeypatch.setattr(tl_launch, "driver", SimpleNamespace(active=active))
    monkeypatch.setattr(tl_launch, "_SUPPORTED", True)
    monkeypatch.setattr(tl_launch, "_hooks_active", lambda: False)
    return tl_launch.CachedLaunch(_Jitted())


def test_first_launch_through_triton_then_the_launcher(kernel):
    a, b = torch.zeros(64), torch.zeros(64)
    kernel[(5, 2)](a, b, 7, BLOCK=32, WIDE=False, num_warps=4)
    kernel[(6,)](a, b, 9, BLOCK=32, WIDE=False, num_warps=4)
    calls = kernel.fn.calls
    assert calls[0] == ("triton", (5, 2), (a, b, 7), dict(BLOCK=32, WIDE=False, num_warps=4))
    # the whole argument list in signature order (constexprs too), the grid in three dimensions, the stream of the
    # current device, the compiled function and its metadata, no launch metadata or hooks
    assert calls[1] == ("run", (6, 1, 1, 99, "cufunction", "metadata", None, None, None, a, b, 9, 32, False))
    assert kernel.variants() == 1


def test_a_new_variant_goes_through_triton(kernel):
    a = torch.zeros(64)
    kernel[(1,)](a, a, 7, BLOCK=32, WIDE=False)
    kernel[(1,)](a[1:], a, 7, BLOCK=32, WIDE=False)  # unaligned
    kernel[(1,)](a, a, 16, BLOCK=32, WIDE=False)  # divisible by 16
    kernel[(1,)](a, a, 7, BLOCK=64, WIDE=False)  # another constexpr
    kernel[(1,)](a, a, 7, BLOCK=32, WIDE=False, num_warps=8)  # another launch option
    assert [c[0] for c in kernel.fn.calls] == ["triton"] * 5 and kernel.variants() == 5
    kernel[(1,)](a, a, 23, BLOCK=64, WIDE=False)
    assert kernel.fn.calls[-1][0] == "run"


class _JittedWidth(_Jitted):
    """A stand-in for a JITFunction of parameters ``(a, n, C, BLOCK)``, ``C`` a constexpr that launches pass
    positionally (as GAT's backward passes ``heads, c``)."""

    arg_names = ["a", "n", "C", "BLOCK"]
    params = _params("a n C BLOCK", "C BLOCK")


def test_a_positional_constexpr_is_keyed_by_its_value(kernel):
    """6 and 7 are one integer class (neither 1 nor a multiple of 16) and one padded tile: as a constexpr each is its
    own variant (keyed by class, a 6-wide call would launch the kernel compiled for 7)."""
    width = tl_launch.CachedLaunch(_JittedWidth())
    a = torch.zeros(64)
    width[(1,)](a, 100, 7, BLOCK=8)
    width[(1,)](a, 100, 6, BLOCK=8)
    assert [c[0] for c in width.fn.calls] == ["triton", "triton"] and width.variants() == 2
    width[(1,)](a, 200, 6, BLOCK=8)
    width[(1,)](a, 300, 7, BLOCK=8)
    assert [c[0] for c in width.fn.calls[2:]] == ["run", "run"]
    assert width.fn.calls[2][1][-4:] == (a, 200, 6, 8) and width.fn.calls[3][1][-4:] == (a, 300, 7, 8)


def test_where_the_shortcut_does_not_apply(kernel, monkeypatch):
    a = torch.zeros(64)
    kernel[(1,)](a, a, 7, BLOCK=32, WIDE=False)  # now cached
    monkeypatch.setattr(tl_launch, "_hooks_active", lambda: True)  # a profiler's launch hooks
    kernel[(1,)](a, a, 7, BLOCK=32, WIDE=False)
    monkeypatch.setattr(tl_launch, "_hooks_active", lambda: False)
    kernel.fn.pre_run_hooks.append(lambda *args, **kwargs: None)
    kernel[(1,)](a, a, 7, BLOCK=32, WIDE=False)
    kernel.fn.pre_run_hooks.clear()
    kernel[lambda meta: (1,)](a, a, 7, BLOCK=32, WIDE=False)  # a callable grid
    kernel[(1,)](a, (a, a), 7, BLOCK=32, WIDE=False)  # a tuple argument
    assert [c[0] for c in kernel.fn.calls] == ["triton"] * 5
    kernel[(1,)](a, a, 7, BLOCK=32, WIDE=False)
    assert kernel.fn.calls[-1][0] == "run"


def test_a_constexpr_left_to_its_default_is_never_cached(kernel):
    a = torch.zeros(64)
    for _ in range(2):
        kernel[(1,)](a, a, 7, BLOCK=32)  # WIDE not given: the tail of the argument list is unknown here
    assert [c[0] for c in kernel.fn.calls] == ["triton", "triton"] and kernel.variants() == 0


def test_interpreted_and_untested_tritons_keep_the_kernel(monkeypatch):
    jitted = _Jitted()
    assert tl_launch.cached_launch(jitted) is jitted  # not a JITFunction (the interpreter's stand-in)
    monkeypatch.setattr(tl_launch.triton, "__version__", "3.5.1")
    assert not tl_launch.fast_path_supported()
    monkeypatch.setattr(tl_launch.triton, "__version__", "3.10.0")
    assert not tl_launch.fast_path_supported()
    monkeypatch.setattr(tl_launch.triton, "__version__", "3.6.0")
    assert tl_launch.fast_path_supported()


@pytest.mark.slow
def test_every_launched_kernel_takes_the_cached_launch():
    """Outside the interpreter (a fresh process: Triton decides when it decorates), every kernel that the kernel
    module launches as ``name[grid](...)`` is a CachedLaunch, whose constexpr positions (keyed by value) are the
    kernel's constexpr parameters, and the helpers it calls from inside kernels stay plain ``JITFunction`` objects
    (Triton inlines those)."""
    import os
    import subprocess
    import sys

    code = """
import re, inspect, triton
from cudnn_gnn.backends.triton import kernels
from cudnn_gnn.backends.triton.launch import CachedLaunch, fast_path_supported
modules = kernels.KERNEL_MODULES
launched = {n for m in modules for n in re.findall(r"(_\\w+_kernel)\\[", inspect.getsource(m))}
assert len(launched) == 13, sorted(launched)
wrapped = {n for m in modules for n, v in vars(m).items() if isinstance(v, CachedLaunch)}
helpers = {n for m in modules for n, v in vars(m).items() if isinstance(v, triton.runtime.JITFunction)}
if fast_path_supported():
    assert wrapped == launched, (sorted(launched - wrapped), sorted(wrapped - launched))
    assert not helpers & launched, sorted(helpers & launched)
    for m in modules:  # each launch keys its constexprs by value: their positions, read from Triton's params
        for n, v in vars(m).items():
            if isinstance(v, CachedLaunch):
                sig = inspect.signature(v.fn.fn).parameters.values()
                assert v._constexpr_at == tuple(i for i, p in enumerate(sig) if "constexpr" in str(p.annotation)), n
                assert v._constexpr_at, n
print("ok", len(launched), len(helpers))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok 13"), proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not INTERPRETED, reason="records launches under Triton's interpreter (tests/gpu runs the compiled)")
def test_training_launches_of_two_widths_of_one_tile_are_two_variants(kernel_launches):
    """A GAT training call (no attention returned, counter-based dropout) at 1 x 7 and one at 1 x 6 on one graph (the
    GAT paper's second layer on Cora and on CiteSeer: one padded tile, 7 and 6 of one integer class), their launches
    recorded: every kernel compiled for its ``C`` (a constexpr) gets keys that differ. The forward, the delta pass and
    the source pass take ``C`` positionally; keyed by its class, each would share one variant between the widths."""
    import inspect

    from cudnn_gnn import CscGraph
    from cudnn_gnn.backends import triton as tb

    gen = torch.Generator().manual_seed(3)
    n, e = 37, 150  # sizes of no special class (not 1, not multiples of 16)
    ei = torch.cat([torch.randint(0, n, (2, e - n), generator=gen), torch.arange(n).repeat(2, 1)], 1)
    graph = CscGraph.from_edge_index(ei, num_nodes=n)

    def keys(c: int) -> dict[str, tuple]:
        kernel_launches.clear()
        x = torch.randn(n, c, generator=gen).requires_grad_()
        w = (torch.randn(2 * c, generator=gen) * 0.3).requires_grad_()
        spec = call_spec(graph, x, x, w, v2=False, heads=1, concat=True, dropout=0.6, dropout_seed=torch.tensor([7]))
        out, _ = tb.triton_gat(spec)
        out.sum().backward()
        got = {}
        for name, fn, args, kwargs in kernel_launches:
            params = inspect.signature(fn.fn).parameters.values()
            stand_in = SimpleNamespace(arg_names=[p.name for p in params], pre_run_hooks=[],
                                       params=[SimpleNamespace(is_constexpr="constexpr" in str(p.annotation))
                                               for p in params])
            c_constexpr = any(p.name == "C" and "constexpr" in str(p.annotation) for p in params)
            got[name] = (tl_launch.CachedLaunch(stand_in).key(args, kwargs, 0), c_constexpr)
        return got

    seven, six = keys(7), keys(6)
    assert seven.keys() == six.keys() and {"_bwd_gat_src_kernel", "_bwd_gat_delta_kernel"} <= seven.keys()
    for name, (key, c_constexpr) in seven.items():
        if c_constexpr:
            assert key is not None and key != six[name][0], name
