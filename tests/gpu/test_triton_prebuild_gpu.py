"""``cudnn_gnn.backends.triton.prebuild`` on a GPU, each run cold in a subprocess of its own with a fresh
``TRITON_CACHE_DIR``: after prebuilding a GAT layer's forward and backward on a copy of it, the real call builds
nothing in the process (Triton's ``jit_cache_hook`` is not called for our kernels: every variant was loaded) and
its output and gradients equal, bitwise, those of a cold run without prebuild (the dry run leaves the random
streams as they were: attention dropout on; a constant self-loop fill, since "mean" sums with atomic adds); and a
two-layer GAT step under bf16 autocast, cold with and without prebuild, with both timings printed (``-s``) and only
correctness asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.gpu

from ._requirements import compiled_triton_skip_reason  # noqa: E402

if (_reason := compiled_triton_skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

_SCRIPT = textwrap.dedent('''
    import copy, json, sys, time
    import torch, triton
    import torch.nn.functional as F
    from cudnn_gnn.backends.triton import prebuild
    from cudnn_gnn.layers import GATConv

    mode, case, out_path = sys.argv[1:4]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n, e, f = 6000, 80000, 64
    ei = torch.randint(0, n, (2, e), device=dev)
    x = torch.randn(n, f, device=dev)
    if case == "layer":
        ea = torch.randn(e, 8, device=dev)
        # a constant self-loop fill: "mean" (the default) sums edge features with PyG's scatter, atomic adds
        # whose order differs between processes, so two cold runs would differ in the last bit without prebuild
        model = GATConv(f, 32, heads=4, dropout=0.2, edge_dim=8, fill_value=0.5).to(dev)
        forward = lambda m: m(x, ei, ea)
        dtype = None
    else:
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = GATConv(f, 64, heads=4, dropout=0.2)
                self.c2 = GATConv(256, 16, heads=4, concat=False, dropout=0.2)
            def forward(self, x, ei):
                return self.c2(F.elu(self.c1(x, ei)), ei)
        model = Net().to(dev)
        forward = lambda m: m(x, ei)
        dtype = torch.bfloat16

    def step(m):
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = forward(m)
        out.float().square().mean().backward()
        return out

    builds = []
    def count(**kw):
        if str(getattr(kw.get("fn"), "module", "")).startswith("cudnn_gnn"):
            builds.append(kw["fn"].name)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    report = prebuild(step, copy.deepcopy(model)) if mode == "prebuild" else None
    t1 = time.perf_counter()
    triton.knobs.runtime.jit_cache_hook = count
    out = step(model)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    torch.save({"out": out.detach().cpu(), **{k: p.grad.cpu() for k, p in model.named_parameters()}}, out_path)
    print(json.dumps({"prebuild_s": t1 - t0, "first_step_s": t2 - t1, "total_s": t2 - t0, "builds_in_step": builds,
                      "variants": None if report is None else [tuple(v) for v in report.variants]}))
''')


def _cold(mode: str, case: str, tmp_path) -> tuple[dict, dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / f"cache-{mode}-{case}")
    out = tmp_path / f"{mode}-{case}.pt"
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, mode, case, str(out)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), torch.load(out)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_prebuilt_layer_builds_nothing_in_its_first_call_and_matches(tmp_path):
    plain, plain_t = _cold("plain", "layer", tmp_path)
    pre, pre_t = _cold("prebuild", "layer", tmp_path)
    assert plain["builds_in_step"], "a cold call without prebuild builds its kernels"
    assert pre["variants"] and pre["builds_in_step"] == []
    assert {v[0] for v in pre["variants"]} == set(plain["builds_in_step"])
    _same(pre_t, plain_t)


def test_two_layer_step_cold_with_and_without_prebuild(tmp_path):
    plain, plain_t = _cold("plain", "model", tmp_path)
    pre, pre_t = _cold("prebuild", "model", tmp_path)
    _same(pre_t, plain_t)
    assert pre["builds_in_step"] == []
    in_process = sum(1 for v in pre["variants"] if v[2])
    print(f"\ncold 2-layer GAT step (bf16 autocast), {len(pre['variants'])} variants: without prebuild "
          f"{plain['first_step_s']:.2f} s; with prebuild {pre['prebuild_s']:.2f} s + first step "
          f"{pre['first_step_s']:.2f} s = {pre['total_s']:.2f} s ({in_process} built in-process)")
