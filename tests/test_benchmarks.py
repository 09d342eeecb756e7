"""CPU smoke tests of the benchmark scripts (scripts, not tests of speed: no timing claims). The default run shows
every script's ``--help`` in one process and tests their helpers in-process; the scripts' ``--quick`` modes and tiny
CPU runs (a process each, tens of seconds on a 2-core CPU) are marked slow."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")


@contextlib.contextmanager
def _bench_on_path() -> Iterator[None]:
    """Import the benchmark scripts and their helpers (benchmarks/ is a folder of scripts, not a package)."""
    sys.path.insert(0, BENCH)
    try:
        yield
    finally:
        sys.path.remove(BENCH)


def _run(script: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the smoke test must not touch a GPU even where one exists
    return subprocess.run([sys.executable, os.path.join(BENCH, script), *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout)


@pytest.mark.slow
def test_bench_layers_quick_writes_valid_json(tmp_path) -> None:
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    t0 = time.perf_counter()
    proc = _run("bench_layers.py", "--quick", "--out", str(out))
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert elapsed < 60, f"--quick took {elapsed:.0f} s; it must stay well under 30 s on a 2-core CI box"
    payload = json.loads(out.read_text())  # strict JSON: NaN would not parse back as a number here
    assert payload["quick"] is True
    env = payload["environment"]
    for key in ("torch", "torch_geometric", "date", "device"):
        assert env[key] is not None, key
    recs = payload["records"]
    fields = {"preset", "layer", "impl", "dtype", "pass", "median_ms", "p10_ms", "p90_ms", "peak_mem_bytes", "status",
              "num_nodes", "num_edges", "heads", "channels"}
    assert recs and all(fields <= set(r) for r in recs)
    assert {r["preset"] for r in recs} == {"tiny", "tiny-edge"}
    assert {r["layer"] for r in recs} == {"GAT", "GATv2"} and {r["pass"] for r in recs} == {"fwd", "fwd+bwd"}
    by_impl = {}
    for r in recs:
        by_impl.setdefault(r["impl"], []).append(r)
    for impl in ("pyg", "reference"):
        assert by_impl[impl] and all(r["status"] == "ok" for r in by_impl[impl]), by_impl.get(impl)
    for r in by_impl.get("layer_reference", []):
        assert r["status"] in ("ok", "unavailable"), r
    # Same weights and inputs: every forward agrees with PyG's fp32 forward.
    checked = [r for r in recs if r["pass"] == "fwd" and r["impl"] != "pyg" and r["status"] == "ok"]
    assert checked and all(r.get("check") == "ok" for r in checked), checked
    assert len(payload["summary"]) == 8  # 2 presets x 2 layers x 1 dtype x 2 passes
    assert all(row["speedup_vs_pyg"] is not None for row in payload["summary"])
    assert "| preset | layer |" in md.read_text()
    assert {c["impl"] for c in payload["conversion"]} == {"cudnn_gnn.CscGraph.from_edge_index",
                                                          "pyg.EdgeIndex.sort_by('col')"}


def test_plot_writes_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    with _bench_on_path():
        from plot import plot
    row = {"preset": "p", "layer": "GAT", "dtype": "fp32", "pass": "fwd+bwd", "speedup_vs_pyg": 2.0,
           "mem_ratio_pyg_over_ours": 3.0, "pyg_status": "ok", "ours_status": "ok", "ours_ms": 1.0, "ours_mem": 1}
    oom = {**row, "preset": "big", "speedup_vs_pyg": None, "mem_ratio_pyg_over_ours": None, "pyg_status": "oom"}
    path = tmp_path / "p.png"
    triton = {**row, "backend": "triton", "speedup_vs_pyg": 1.5}
    plot({"summary": [{**row, "backend": "cudnn"}, triton, oom, {**row, "pass": "fwd"}], "environment": {}}, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_power_law_generator_is_exact_and_seeded() -> None:
    with _bench_on_path():
        from _graphs import power_law_edge_index
    a = power_law_edge_index(1000, 10_001, exponent=0.6, seed=3)
    b = power_law_edge_index(1000, 10_001, exponent=0.6, seed=3)
    assert a.shape == (2, 10_001) and a.dtype.is_signed and bool((a == b).all())
    assert int(a.min()) >= 0 and int(a.max()) < 1000
    half = 10_001 // 2
    assert bool((a[:, half : 2 * half] == a[:, :half].flip(0)).all())  # symmetric pairs
    deg = a[1].bincount(minlength=1000)
    assert int(deg.max()) > 5 * float(deg.float().mean())  # heavy-tailed


@pytest.mark.slow
def test_bench_sampled_quick_trains_every_variant_on_the_same_batches(tmp_path) -> None:
    """``bench_sampled.py --quick``: device-sampled batches drawn once on the CPU, PyG's layer and ours (and one
    launch-shape variant of ``--sweep``) each take a training step on
    every one of them; host time per step and, with ``--cprofile-steps``, its profile are reported."""
    proc = _run("bench_sampled.py", "--quick", "--sweep", "src:2x1", "--cprofile-steps", "1",
                "--out", str(tmp_path / "sampled.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads((tmp_path / "sampled.json").read_text())
    assert payload["quick"] is True and payload["batch_mean"]["edges"] > 0
    records = {r["variant"]: r for r in payload["records"]}
    assert set(records) == {"pyg", "ours", "ours_src_2x1"}
    assert all(r["status"] == "ok" and r["steps"] == 2 for r in records.values()), records
    assert all(r["host_ms_median"] > 0 and r["host_profile_cum_ms"] for r in records.values())


@pytest.mark.slow
def test_bench_conversion_and_profile_quick(tmp_path) -> None:
    proc = _run("bench_conversion.py", "--quick", "--out", str(tmp_path / "conv.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    conv = json.loads((tmp_path / "conv.json").read_text())
    assert all(r["status"] == "ok" for r in conv["records"]), conv["records"]
    proc = _run("profile_layers.py", "--quick", "--steps", "2", "--out", str(tmp_path / "prof.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads((tmp_path / "prof.json").read_text())["case"]["impl"] == "reference"


def test_summary_reports_oom_and_ratios() -> None:
    with _bench_on_path():
        import bench_layers as bl
        from _bench_common import is_oom
    assert is_oom(torch_oom()) and not is_oom(ValueError("x"))
    base = {"preset": "p", "layer": "GAT", "dtype": "bf16", "pass": "fwd+bwd", "num_nodes": 1, "num_edges": 1}
    recs = [
        {**base, "impl": "pyg", "status": "oom", "median_ms": None, "peak_mem_bytes": None, "error": "OOM"},
        {**base, "impl": "cudnn", "status": "ok", "median_ms": 10.0, "peak_mem_bytes": 2**20},
        {**base, "impl": "layer_cudnn", "status": "error", "median_ms": None, "peak_mem_bytes": None, "error": "boom"},
        {**base, "pass": "fwd", "impl": "pyg", "status": "ok", "median_ms": 6.0, "peak_mem_bytes": 3 * 2**20},
        {**base, "pass": "fwd", "impl": "layer_cudnn", "status": "ok", "median_ms": 2.0, "peak_mem_bytes": 2**20},
    ]
    rows = {r["pass"]: r for r in bl.summarize(recs)}
    assert rows["fwd+bwd"]["ours_impl"] == "cudnn" and rows["fwd+bwd"]["speedup_vs_pyg"] is None
    assert rows["fwd+bwd"]["pyg_status"] == "oom"
    assert rows["fwd"]["speedup_vs_pyg"] == 3.0 and rows["fwd"]["mem_ratio_pyg_over_ours"] == 3.0
    md = bl.markdown_table(bl.summarize(recs), [], timing_claims=True)
    assert "| OOM |" in md and "3.00x" in md


def torch_oom() -> BaseException:
    import torch

    return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")


@pytest.mark.slow
def test_epoch_conversion_quick_counts_one_conversion_per_training_run(tmp_path):
    """A static edge_index is converted once per training run with caching, every layer call without."""
    out = tmp_path / "conv_epoch.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "bench_epoch_conversion.py"), "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = {x["mode"]: x for x in json.loads(out.read_text())["records"]}
    assert recs["cached"]["conversions"] == 1
    assert recs["uncached"]["conversions"] == 2 * recs["uncached"]["epochs"]  # two layers, every epoch
    assert recs["csc_graph"]["conversions"] <= 2  # the transform's plan, built once


def test_prebuild_builds_each_kernel_group_the_presets_run(monkeypatch) -> None:
    """One precompile call per (edge map, index dtype) group: arxiv runs int32 kernels without the edge map in
    fp32 and bf16; proteins (bf16 only, edge features, edges x width >= 2**30) int64 kernels with the map; the
    4x sweep (GAT fp32) int64 without it. Nothing else is built."""
    import types

    import torch

    with _bench_on_path():
        import bench_layers as bl
    calls: list[tuple[list[str], tuple[torch.dtype, ...], bool, bool, tuple[torch.dtype, ...]]] = []
    expect_processes = True

    def fake_precompile(ops, dtypes, *, deterministic=False, edge_features=False, index_dtypes=(torch.int32,),
                        device=None, processes=False):
        # builds in processes of their own (the fast way on a fresh machine), except the deterministic ones,
        # which reuse what those built
        assert processes is (not deterministic and expect_processes)
        calls.append((list(ops), tuple(dtypes), edge_features, deterministic, tuple(index_dtypes)))
        return {f"{op}/{dt} {edge_features} {deterministic} {index_dtypes}": 0.0 for op in ops for dt in dtypes}

    monkeypatch.setattr(bl.cudnn_gnn, "precompile", fake_precompile)
    monkeypatch.setattr(bl.cudnn_gnn, "backend_info", lambda: types.SimpleNamespace(reason=None))
    sweep4 = next(p for p in bl.sweep_presets() if p.name == "sweep-x4")
    presets = [bl.PRESETS["arxiv"], bl.PRESETS["proteins"], sweep4]
    got = bl.prebuild_kernels(presets, ["GAT", "GATv2"], ["fp32", "bf16"], None, torch.device("cuda"))
    assert got is not None and "wall" in got
    f32, b16, i32, i64 = torch.float32, torch.bfloat16, torch.int32, torch.int64
    assert sorted((c for c in calls if not c[3]), key=str) == sorted([
        (["gat", "gatv2"], (f32, b16), False, False, (i32,)),
        (["gat"], (f32,), False, False, (i64,)),
        (["gat", "gatv2"], (b16,), True, False, (i64,)),
    ], key=str)
    assert len([c for c in calls if c[3]]) == 3  # the deterministic builds of the same groups
    calls.clear()
    expect_processes = False
    bl.prebuild_kernels([bl.PRESETS["arxiv"]], ["GAT"], ["fp32", "bf16"], {"layer_cudnn"}, torch.device("cuda"),
                        processes=False)
    assert calls == [(["gat"], (f32, b16), False, False, (i32,))]



INVESTIGATIONS = os.path.join(BENCH, "investigations")
INVESTIGATION_SCRIPTS = sorted(f for f in os.listdir(INVESTIGATIONS) if f.endswith(".py") and f[0] != "_")


def test_investigations_index_names_every_script_and_only_those() -> None:
    """benchmarks/investigations/README.md has a table row for each script in the folder, and its list of removed
    scripts names none that is still there."""
    with open(os.path.join(INVESTIGATIONS, "README.md")) as f:
        table, removed = f.read().split("\n## Removed scripts", 1)
    assert sorted(re.findall(r"^\| `([a-z0-9_]+\.py)` \|", table, re.M)) == INVESTIGATION_SCRIPTS
    gone = re.findall(r"^- `([a-z0-9_]+\.py)`", removed, re.M)
    assert gone and not set(gone) & set(INVESTIGATION_SCRIPTS), gone


def test_benchmark_scripts_show_their_help_from_the_repo_root() -> None:
    """Every script of benchmarks/ and benchmarks/investigations/ runs as `python benchmarks/x.py --help` would (its
    folder first on sys.path; an investigation finds the parent's _bench_common and _graphs through its own path
    setup): the module imports with no CUDA device visible, main() parses its flags and prints its usage. One
    process for all, so each costs its imports only."""
    scripts = [os.path.join(BENCH, f) for f in sorted(os.listdir(BENCH))  # plot.py takes two paths, no flags
               if f.endswith(".py") and f[0] != "_" and f != "plot.py"]
    scripts += [os.path.join(INVESTIGATIONS, f) for f in INVESTIGATION_SCRIPTS]
    code = f"""
import contextlib, io, json, os, runpy, sys
res = {{}}
for path in {scripts!r}:
    script = os.path.relpath(path, {BENCH!r})
    sys.argv, sys.path[0], out = [path, "--help"], os.path.dirname(path), io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        res[script] = "returned without printing its usage"
    except SystemExit as e:
        res[script] = "ok" if e.code in (0, None) and "usage:" in out.getvalue() else f"exit {{e.code}}"
    except Exception as e:  # reported per script
        res[script] = repr(e)
print(json.dumps(res))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True, timeout=300,
                          env={**_without_interpreter(), "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res == dict.fromkeys((os.path.relpath(s, BENCH) for s in scripts), "ok"), \
        {k: v for k, v in res.items() if v != "ok"}


@pytest.mark.slow
def test_host_timeline_on_the_reference_layer(tmp_path) -> None:
    """host_timeline.py on a CPU (the micro preset, our layer on the reference backend): the wrapped stages of a step
    in call order, the op's spec, plan and run inside the layer's attention call, each entry before its exit."""
    out = tmp_path / "timeline.json"
    proc = _run("investigations/host_timeline.py", "--preset", "micro", "--impl", "layer_reference", "--steps", "2",
                "--top", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["timeline"]
    order = [(r["name"], r["event"]) for r in rows]
    stages = [("gat_conv.gat", "enter"), ("gat.attention_spec", "enter"), ("gat.plan_call", "enter"), ("gat.run", "enter"),
              ("gat.run", "exit"), ("gat_conv.gat", "exit"), ("step returns", "exit")]
    assert [o for o in order if o in stages] == stages, order
    for name in {n for n, _ in order} - {"step returns"}:
        assert order.index((name, "enter")) < order.index((name, "exit")), (name, order)


def test_op_host_times_the_wiring_with_the_launchers_stubbed(tmp_path) -> None:
    """op_host.py on a CPU: GAT and GATv2 rows with a positive host time per call and the rounds asked for."""
    pytest.importorskip("triton")
    out = tmp_path / "op_host.json"
    proc = _run("investigations/op_host.py", "--device", "cpu", "--steps", "2", "--rounds", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["op"] for r in rows] == ["gat", "gatv2"]
    assert all(len(r["rounds_us"]) == 2 and 0 < r["best_us"] <= r["median_us"] for r in rows), rows


def test_offsets_rule_probe_swaps_the_rule_and_restores_it() -> None:
    """offsets_rule.py's three rules reach the kernels' I64 answers they name (the source pass on an 8 x 32 tile,
    the node-score backward on an 8 x 8 one, sizes that allow int32), and the library's rule is back afterwards."""
    sys.path.insert(0, INVESTIGATIONS)
    try:
        import offsets_rule
    finally:
        sys.path.remove(INVESTIGATIONS)
    from cudnn_gnn.backends.triton import tuning

    def answers() -> tuple[bool, bool]:
        i64 = tuning.int64_offsets([(1000, 256)])
        return (tuning.kernel_int64_offsets("gat_src", i64, 256, 32, 32),
                tuning.kernel_int64_offsets("scores_bwd", i64, 64, 8, 8))

    shipped = answers()
    assert shipped == (True, True)
    for rule, want in (("rule", (True, True)), ("int32", (False, False)), ("int64", (True, True))):
        with offsets_rule.offsets_rule(rule):
            assert answers() == want, rule
            assert tuning.kernel_int64_offsets("fwd", tuning.int64_offsets([(1000, 256)]), 256, 32, 32) == \
                (rule == "int64"), rule
        assert answers() == shipped


@pytest.mark.slow
def test_kernel_registers_compiles_for_the_gpu_on_this_cpu(tmp_path) -> None:
    """kernel_registers.py compiles a kernel for sm_90a with the installed Triton and its bundled ptxas (no GPU) and
    reports the registers of the sampled forward at its launch shape (blocks of 8 edges), with int32 and int64
    offsets (``--i64 both``: the kernels' ``I64``)."""
    pytest.importorskip("triton")
    out = tmp_path / "kr.json"
    proc = _run("investigations/kernel_registers.py", "--cases", "sampled", "--kernels", "fwd", "--i64", "both",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["BLOCK_E"], r["I64"]) for r in rows] == [(8, False), (8, True)]
    assert all(r["ptxas_error"] is None and isinstance(r["registers"], int) and r["registers"] > 0 for r in rows), rows


@pytest.mark.slow
def test_compile_check_quick_compiles_every_recorded_variant(tmp_path) -> None:
    """compile_check.py --quick records the launches of a few GAT and GATv2 calls under Triton's interpreter and
    compiles each distinct variant for sm_90a (no GPU): none fails, each has registers, the summary line counts them,
    and the variants carry the launches' own constexprs (GAT's and GATv2's forward, int32 and int64 offsets, a hub
    merge) and divisibility."""
    pytest.importorskip("triton")
    out = tmp_path / "cc.json"
    proc = _run("investigations/compile_check.py", "--quick", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    rows = payload["variants"]
    assert re.fullmatch(r"\d+ variants of \d+ kernels, 0 failed", payload["summary"]), payload["summary"]
    assert payload["summary"] in proc.stdout
    assert all(r["ok"] and r["error"] is None and r["registers"] > 0 for r in rows), [r for r in rows if not r["ok"]]
    kernels = {r["kernel"] for r in rows}
    assert {"_fwd_kernel", "_fwd_merge_kernel", "_bwd_dst_kernel", "_bwd_src_kernel", "_bwd_gat_src_kernel",
            "_node_scores_kernel"} <= kernels, kernels
    fwd = [r for r in rows if r["kernel"] == "_fwd_kernel"]
    for name in ("V2", "I64"):  # GAT and GATv2; int32 and (forced) int64 offsets
        i = list(fwd[0]["signature"]).index(name)
        assert {dict((p[0], v) for p, v in r["constexprs"])[i] for r in fwd} == {False, True}, name
    assert all(r["signature"]["x_src_ptr"] == "*fp32" and [[0], [["tt.divisibility", 16]]] in r["attrs"] for r in fwd)
    assert len({json.dumps([r[k] for k in ("kernel", "signature", "constexprs", "attrs", "options")])
                for r in rows}) == len(rows)  # deduped
    # --variants: the same variants compiled again from that file, nothing recorded
    again = tmp_path / "again.json"
    proc = _run("investigations/compile_check.py", "--variants", str(out), "--out", str(again), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    redo = json.loads(again.read_text())
    assert redo["summary"] == payload["summary"] and "recorded in 0 s" in proc.stdout
    assert [(r["kernel"], r["registers"]) for r in redo["variants"]] == [(r["kernel"], r["registers"]) for r in rows]


PLANTED_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def cast_kernel(x_ptr, y_ptr, n, HALF{annotation}, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if HALF:  # at run time both branches are compiled, and y must have one type out of both
        y = x.to(tl.float16)
    else:
        y = x
    tl.store(y_ptr + offs, y, mask=offs < n)


def run():
    x = torch.arange(10, dtype=torch.float32)
    y = torch.empty_like(x)
    cast_kernel[(1,)](x, y, 10, False, BLOCK=16)
    assert torch.equal(x, y)  # the interpreter ran it


WORKLOADS = {{"cast": run}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("annotation, failed", [("", 1), (": tl.constexpr", 0)], ids=["runtime", "constexpr"])
def test_compile_check_reports_a_kernel_that_runs_interpreted_but_does_not_compile(tmp_path, annotation,
                                                                                     failed) -> None:
    """A flag that must be a ``tl.constexpr`` (its branches give ``y`` two types) passed at run time: the interpreter
    runs the kernel, the compiler refuses it, and compile_check.py reports the variant failed, with the compiler's
    message, and exits with 1; declared constexpr, the same workload passes."""
    pytest.importorskip("triton")
    planted, out = tmp_path / "planted.py", tmp_path / "cc.json"
    planted.write_text(PLANTED_KERNEL.format(annotation=annotation))
    proc = _run("investigations/compile_check.py", "--workloads", str(planted), "--out", str(out), timeout=300)
    assert proc.returncode == failed, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["summary"] == f"1 variants of 1 kernels, {failed} failed"
    (row,) = payload["variants"]
    assert row["kernel"] == "cast_kernel" and row["ok"] is not bool(failed)
    assert row["signature"]["HALF"] == ("constexpr" if failed == 0 else "u1")
    if failed:
        assert "Mismatched type for y" in row["error"] and "FAILED cast_kernel" in proc.stdout, row["error"]


def test_triton_tuning_dataset_is_the_bundled_graph_with_a_self_loop_a_node() -> None:
    """triton_tuning's ``--dataset``: the bundled Cora graph as ``GATConv`` runs it (its 10,556 edges and a
    self-loop a node: 13,264; the longest row 169 edges)."""
    code = f"""
import runpy, torch
ns = runpy.run_path({os.path.join(INVESTIGATIONS, "triton_tuning.py")!r}, run_name="not_main")
g = ns["dataset_graph"]("Cora", torch.device("cpu"))
assert (g.num_src_nodes, g.num_dst_nodes, g.num_edges) == (2708, 2708, 13264), g
assert int(g.offsets.diff().max()) == 169 and int(g.offsets.diff().min()) >= 1
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.slow
def test_triton_launch_sweep_replaces_the_swept_kernels_shape_only() -> None:
    """triton_tuning's sweep on Triton's interpreter (a 40-node graph): one row per shape and a single default per
    (op, pass, dtype); a fwd row launches the forward with the swept shape (``TritonOptions(launch=...)``), a dst
    (src) row the destination (source) pass with it and every other kernel with its default; nothing patched."""
    code = f"""
import runpy, sys, torch
sys.path.insert(0, {BENCH!r})
from _graphs import GraphSpec
from cudnn_gnn.backends.triton import tuning as tk
ns = runpy.run_path({os.path.join(INVESTIGATIONS, "triton_tuning.py")!r}, run_name="not_main")
seen = []
real = tk.launch_config
def spy(x_src, heads, v2, kernel, gathered, launch=()):
    out = real(x_src, heads, v2, kernel, gathered, launch)
    seen.append((kernel, gathered.dtype, out[2]["BLOCK_E"], out[2]["num_warps"]))
    return out
tk.launch_config = spy
original = tk.launch_shape
rows = ns["launch_sweep"](torch.device("cpu"), 1, ["gat"], ["fwd", "src"], graph=GraphSpec(40, 160, exponent=0.5),
                          grid=((2, 4), (32, 2)))
assert tk.launch_shape is original
assert len(rows) == 12 and all("median_ms" in r and r["kernel_ms"] == 0.0 for r in rows), rows  # no CUDA kernels
for key in {{(r["pass"], r["dtype"]) for r in rows}}:
    assert sum(r["default"] for r in rows if (r["pass"], r["dtype"]) == key) == 1
def defaults(kernel):
    return {{(s[0], s[3]) for s in (original(kernel, 8, 32, False, n) for n in (4, 2))}}
swept = {{(2, 4), (32, 2)}}
shapes = lambda kernel: {{(b, w) for k, _, b, w in seen if k == kernel}}
assert shapes("fwd") == defaults("fwd") | swept, seen
assert shapes("dst") == defaults("dst"), seen  # never swept here
assert shapes("src") == defaults("src") | swept, seen
print("ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True, timeout=600, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.slow
def test_triton_launch_sweep_of_the_light_passes() -> None:
    """triton_tuning's ``--passes gat_dst,scores,scores_bwd`` on Triton's interpreter (a 40-node graph, 2 heads x 4,
    float32): GAT rows only (no GATv2 row: those kernels are GAT's), one row per shape and a single default per (pass, dtype),
    the destination sum's rows without a head group; the swept kernel takes each shape through
    ``TritonOptions(launch=...)`` (what :func:`tuning.dst_sum_shape` / :func:`tuning.node_score_shape` return to its
    launcher), the other light kernels their defaults; every pass names its kernels for ``kernel_ms``."""
    code = f"""
import runpy, sys, torch
sys.path.insert(0, {BENCH!r})
from _graphs import GraphSpec
from cudnn_gnn.backends.triton import tuning as tk
ns = runpy.run_path({os.path.join(INVESTIGATIONS, "triton_tuning.py")!r}, run_name="not_main")
assert set(ns["PASSES"]) <= set(ns["KERNEL_NAMES"]) and set(ns["LIGHT_GRIDS"]) <= set(ns["PASSES"])
seen = set()
real_dst, real_scores = tk.dst_sum_shape, tk.node_score_shape
def dst_spy(heads, launch=()):
    out = real_dst(heads, launch)
    if launch:  # a launcher's call (the sweep asks for the default with none)
        seen.add(("gat_dst", out[0], out[2]))
    return out
def scores_spy(kernel, heads, c, launch=()):
    out = real_scores(kernel, heads, c, launch)
    if launch:
        seen.add((kernel, out[0], out[4]))
    return out
tk.dst_sum_shape, tk.node_score_shape = dst_spy, scores_spy
rows = ns["launch_sweep"](torch.device("cpu"), 1, ["gat", "gatv2"], ["gat_dst", "scores", "scores_bwd"],
                          graph=GraphSpec(40, 160, exponent=0.5), heads=2, c=4, grid=((2, 1), (16, 2)),
                          dtypes=(torch.float32,))
assert len(rows) == 9 and all(r["op"] == "gat" and "median_ms" in r and r["kernel_ms"] == 0.0 for r in rows), rows
for key in {{(r["pass"], r["dtype"]) for r in rows}}:
    assert sum(r["default"] for r in rows if (r["pass"], r["dtype"]) == key) == 1
assert {{r["HG"] for r in rows if r["pass"] == "gat_dst"}} == {{None}}
assert {{r["HG"] for r in rows if r["pass"] != "gat_dst"}} == {{2}}
defaults = {{"gat_dst": (real_dst(2)[0], real_dst(2)[2])}}
defaults.update({{k: (real_scores(k, 2, 4)[0], real_scores(k, 2, 4)[4]) for k in ("scores", "scores_bwd")}})
assert defaults == {{"gat_dst": (1024, 4), "scores": (64, 2), "scores_bwd": (64, 2)}}, defaults
for kernel, default in defaults.items():
    assert {{(b, w) for k, b, w in seen if k == kernel}} == {{default, (2, 1), (16, 2)}}, seen
print("ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True, timeout=600, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def _without_interpreter() -> dict[str, str]:
    """This process's environment without TRITON_INTERPRET (tests/ops/test_triton_backend.py sets it at import)."""
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def test_backends_turn_each_cudnn_case_into_one_per_backend() -> None:
    with _bench_on_path():
        import bench_layers as bl
    arxiv = bl.PRESETS["arxiv"]
    assert bl.backend_impls(arxiv.impls, ("cudnn", "triton")) == (
        "pyg", "pyg_compile", "cudnn", "triton", "layer_cudnn", "layer_triton", "layer_cudnn_det",
        "layer_triton_compile")
    assert bl.backend_impls(arxiv.impls, ("triton",)) == ("pyg", "pyg_compile", "triton", "layer_triton",
                                                          "layer_triton_compile")
    assert bl.case_impls(arxiv, ("cudnn", "triton"), {"pyg", "layer_triton"}) == ["pyg", "layer_triton"]
    assert [bl.impl_backend(i) for i in ("pyg", "layer_triton", "cudnn_det", "layer_reference",
                                         "layer_triton_compile")] == [None, "triton", "cudnn", "reference", "triton"]
    for bad in ("layer_auto", "triton_compile"):  # compiled: the layer only
        with pytest.raises(ValueError, match="impl must be"):
            bl.impl_backend(bad)


def test_summary_adds_the_compiled_layer_against_compiled_pyg() -> None:
    """``layer_triton_compile`` joins its backend's row (``ours_compile_ms``, the ratio to ``pyg_compile``) and a
    table of its own in the markdown; rows without it add nothing."""
    with _bench_on_path():
        import bench_layers as bl
    base = {"preset": "arxiv", "layer": "GAT", "dtype": "fp32", "pass": "fwd+bwd", "num_nodes": 1, "num_edges": 1,
            "status": "ok", "peak_mem_bytes": 2**20}
    recs = [{**base, "impl": "pyg", "median_ms": 30.0}, {**base, "impl": "pyg_compile", "median_ms": 6.0},
            {**base, "impl": "layer_triton", "median_ms": 5.0}, {**base, "impl": "layer_triton_compile",
                                                                "median_ms": 3.0}]
    (row,) = bl.summarize(recs)
    assert row["backend"] == "triton" and row["ours_ms"] == 5.0 and row["ours_compile_ms"] == 3.0
    assert row["speedup_vs_pyg_compile"] == 1.2 and row["speedup_compile_vs_pyg_compile"] == 2.0
    md = bl.markdown_table([row], [], timing_claims=True)
    assert "| ours compiled ms |" in md and "| 2.00x |" in md
    (plain,) = bl.summarize(recs[:3])
    assert plain["ours_compile_ms"] is None and "ours compiled ms" not in bl.markdown_table([plain], [], True)


def test_bench_layers_refuses_unknown_or_unavailable_backends(monkeypatch, capsys) -> None:
    """--backends names GPU backends only, and one that a case would run must be available, said before any work;
    one that no case runs is never probed (the tiny presets run no GPU backend)."""
    with _bench_on_path():
        import bench_layers as bl
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(SystemExit, match="--backends must be a comma list of cudnn, triton, got 'cudnn,bogus'"):
        bl.main(["--quick", "--presets", "micro", "--backends", "cudnn,bogus"])
    with pytest.raises(SystemExit, match="--backends triton is not available here: the triton backend runs on CUDA"):
        bl.main(["--quick", "--presets", "micro", "--backends", "triton"])


def test_prebuild_skips_cudnn_when_it_is_not_asked_for(monkeypatch) -> None:
    import torch

    with _bench_on_path():
        import bench_layers as bl

    def no_probe():
        raise AssertionError("cuDNN probed for a run without cuDNN cases")

    monkeypatch.setattr(bl.cudnn_gnn, "backend_info", no_probe)
    assert bl.prebuild_kernels([bl.PRESETS["arxiv"]], ["GAT"], ["fp32"], None, torch.device("cuda"),
                               backends=("triton",)) is None


def test_summary_has_one_row_per_backend_side_by_side() -> None:
    with _bench_on_path():
        import bench_layers as bl
    base = {"preset": "p", "layer": "GAT", "dtype": "fp32", "pass": "fwd+bwd", "num_nodes": 1, "num_edges": 1,
            "status": "ok", "peak_mem_bytes": 2**20, "first_call_ms": 900.0}
    recs = [{**base, "impl": "pyg", "median_ms": 30.0, "peak_mem_bytes": 8 * 2**20},
            {**base, "impl": "pyg_compile", "median_ms": 6.0},
            {**base, "impl": "layer_cudnn", "backend": "cudnn", "median_ms": 15.0},
            {**base, "impl": "layer_cudnn_det", "backend": "cudnn", "median_ms": 25.0},
            {**base, "impl": "layer_triton", "backend": "triton", "median_ms": 10.0, "peak_mem_bytes": 2 * 2**20,
             "triton_builds": [{"kernel": "_fwd_kernel", "variant": "BLOCK_E=32", "build_s": 1.25},
                               {"kernel": "_bwd_dst_kernel", "variant": "BLOCK_E=32", "build_s": 2.5}]}]
    rows = {r["backend"]: r for r in bl.summarize(recs)}
    assert set(rows) == {"cudnn", "triton"}
    assert rows["cudnn"]["speedup_vs_pyg"] == 2.0 and rows["cudnn"]["ours_det_ms"] == 25.0
    assert rows["triton"]["speedup_vs_pyg"] == 3.0 and rows["triton"]["speedup_vs_pyg_compile"] == 0.6
    assert rows["triton"]["ours_det_ms"] is None and rows["triton"]["mem_ratio_pyg_over_ours"] == 4.0
    assert rows["triton"]["ours_first_call_ms"] == 900.0
    md = bl.markdown_table(bl.summarize(recs), [], timing_claims=True, records=recs)
    assert "| p | GAT | fp32 | fwd+bwd | cudnn | 30.00 | 6.00 | 15.00 | 25.00 | 2.00x | 0.40x |" in md
    assert "| p | GAT | fp32 | fwd+bwd | triton | 30.00 | 6.00 | 10.00 | - | 3.00x | 0.60x |" in md
    assert "| layer_triton | 900 | _fwd_kernel 1.2; _bwd_dst_kernel 2.5 |" in md


def test_triton_build_log_times_each_variant_of_our_kernels() -> None:
    """TritonCompiles through Triton's own hooks (called here as Triton calls them around a build): our kernels
    logged with their constexprs, other modules' ignored, the previous hooks chained and restored."""
    pytest.importorskip("triton")
    import types

    import triton

    with _bench_on_path():
        from _bench_common import TritonCompiles
    runtime = triton.knobs.runtime
    seen: list[str] = []
    before = runtime.jit_cache_hook

    def previous(**kw):
        seen.append(kw["fn"].name)

    runtime.jit_cache_hook = previous
    try:
        jit = types.SimpleNamespace(arg_names=["x_ptr", "BLOCK_E", "HG"])
        ours = types.SimpleNamespace(module="cudnn_gnn.backends.triton.kernels", name="_fwd_kernel", jit_function=jit)
        other = types.SimpleNamespace(module="torch._inductor", name="triton_poi", jit_function=jit)
        compile_info = {"constants": {(1,): 32, (2,): 8}, "signature": {"x_ptr": "*bf16", "BLOCK_E": "constexpr"},
                        "num_warps": 4, "num_stages": 2}
        with TritonCompiles() as log:
            for fn in (ours, other):
                runtime.jit_cache_hook(key="k", repr="r", fn=fn, compile=compile_info, is_manual_warmup=False,
                                       already_compiled=False)
                runtime.jit_post_compile_hook(key="k", repr="r", fn=fn, compile=compile_info, is_manual_warmup=False,
                                              already_compiled=False)
            built = log.take()
        assert runtime.jit_cache_hook is previous and seen == ["_fwd_kernel", "triton_poi"]
        assert [b["kernel"] for b in built] == ["_fwd_kernel"] and built[0]["build_s"] >= 0
        assert built[0]["variant"] == "BLOCK_E=32 HG=8 ptr=bf16 num_warps=4 num_stages=2"
        assert log.take() == []
    finally:
        runtime.jit_cache_hook = before


def test_triton_forward_efficiency_against_the_gather_floor() -> None:
    import types

    with _bench_on_path():
        import profile_layers as pl
    preset = types.SimpleNamespace(stack=((32, 8, True),))
    inp = types.SimpleNamespace(preset=preset, graph=types.SimpleNamespace(num_edges=2_000_000, num_nodes=150_000))
    floor = (2_000_000 + 150_000) * 256 * 2  # one bf16 source row per edge, plus the output
    eff = pl.triton_forward_efficiency(inp, "bf16", fwd_us=floor / 4.3e12 * 1e6 * 2)  # twice the floor's time
    assert eff["gather_floor_bytes"] == floor
    assert eff["fraction_of_floor"] == pytest.approx(0.5) and eff["meets_target"] is True
    assert eff["achieved_bytes_per_s"] == pytest.approx(2.15e12)
    assert pl.triton_forward_efficiency(inp, "fp32", fwd_us=floor / 4.3e12 * 1e6)["fraction_of_floor"] == \
        pytest.approx(2.0)


@pytest.mark.slow
def test_bench_layers_triton_rows_on_the_interpreter(tmp_path) -> None:
    """--backends triton on a CPU: our layer on the Triton kernels under TRITON_INTERPRET=1 (set before triton
    decorates them, so in a process of its own), next to PyG, with the record and summary layout of a GPU run."""
    pytest.importorskip("triton")
    out = tmp_path / "micro.json"
    env = {**_without_interpreter(), "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "bench_layers.py"), "--quick", "--presets", "micro",
                           "--backends", "triton", "--out", str(out)], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["environment"]["backends"] == ["triton"] and "triton_cache" in payload["environment"]
    recs = payload["records"]
    assert {r["impl"] for r in recs} == {"pyg", "layer_reference", "layer_triton"}
    assert all(r["status"] == "ok" for r in recs), [r for r in recs if r["status"] != "ok"]
    triton = [r for r in recs if r["impl"] == "layer_triton"]
    assert len(triton) == 4 and all(r["backend"] == "triton" and r["first_call_ms"] > 0 for r in triton)
    assert all(r["check"] == "ok" for r in triton if r["pass"] == "fwd")
    summary = payload["summary"]
    assert len(summary) == 4 and {r["backend"] for r in summary} == {"triton"}  # 2 layers x 2 passes
    assert all(r["ours_impl"] == "layer_triton" and r["speedup_vs_pyg"] is not None for r in summary)
    md = payload["summary_markdown"]
    assert "| micro | GATv2 | fp32 | fwd+bwd | triton |" in md and "Triton first call ms" in md


@pytest.mark.slow
def test_sampler_choose_times_both_draw_orders(tmp_path) -> None:
    """sampler_choose.py on the CPU: a round times the current _choose and the per-step one on the same loader, and
    leaves the module's _choose as it was."""
    from cudnn_gnn.datasets.synthetic import synthetic_ogbn_mmap

    root, out = tmp_path / "d", tmp_path / "choose.json"
    synthetic_ogbn_mmap("ogbn-papers100M", root, scale=3e-5, seed=0)
    proc = _run("investigations/sampler_choose.py", "--root", str(root), "--device", "cpu", "--batches", "2",
                "--rounds", "1", "--batch-size", "8", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["choose"] for r in rows] == ["at_once", "per_step"] and all(r["ms_per_batch"] > 0 for r in rows)


def test_bench_training_takes_the_largest_papers_scale_that_fits_the_card() -> None:
    """Full-size papers100M fits an H200's free memory but not an H100's: there the largest scale that fits is
    taken, with a line that says so; a scale that fits is kept as asked."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench_training as bt
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    h200, h100 = 139 * 2**30, 78 * 2**30
    assert bt.fitting_scale("papers100m-sampled", 1.0, "float32", h200) == (1.0, None)
    scale, note = bt.fitting_scale("papers100m-sampled", 1.0, "float32", h100)
    assert 0.5 < scale < 1.0 and bt.sampled_bytes("papers100m-sampled", scale, "float32") <= bt.FIT_MARGIN * h100
    assert note is not None and f"running scale {scale:.2g}, the largest that fits" in note
    assert bt.fitting_scale("papers100m-sampled", 0.1, "float32", h100) == (0.1, None)


def _floor_table():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import floor_table
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    return floor_table


def test_floor_table_counts_bytes_and_floors() -> None:
    """The byte model of one GAT layer (8 x 8 fp32 on 100 nodes, 1,000 edges): the forward gathers a 256-byte
    feature row and a 32-byte score row per edge on top of what it streams; a row of 4 bytes (one head) costs a
    whole sector as coded; compulsory counts each input once. A streamed-only kernel's floor is its bytes over the
    copy rate; a gathered stream adds the measured time of its row size, from L2 where its table fits."""
    ft = _floor_table()
    layer = ft.Layer(128, 8, 8, True)
    b = ft.layer_bytes(layer, 100, 1000, 4)
    fwd = b["_fwd_kernel"]
    assert fwd.as_coded() - fwd.streamed == 1000 * (256 + 32)
    assert fwd.compulsory < fwd.as_coded()
    one_head = ft.layer_bytes(ft.Layer(64, 1, 40, False), 100, 1000, 4)["_bwd_gat_src_kernel"]
    assert all(ft._sectors(row) == 32 for _, row, _, _ in one_head.gathered[1:])
    rates = {"copy_bytes_per_us": 1e6, "l2_bytes": 10**9,
             "dram": {str(s): 1.0 for s in ft.ROW_SIZES}, "l2": {str(s): 0.5 for s in ft.ROW_SIZES}}
    dst = b["_bwd_gat_dst_kernel"]
    assert ft.floor_us(dst, rates) == dst.streamed / 1e6
    assert ft.floor_us(fwd, rates) == fwd.streamed / 1e6 + 2 * 1000 * 0.5  # both tables fit in half of L2
    big = ft.KernelBytes(gathered=((10, 1024, 10**10, None),))
    assert ft.floor_us(big, rates) == 10 * 2 * 1.0  # a 1 KiB row from DRAM: two 512-byte rows
    # in graph order the per-edge node-table streams take the rate measured in that order; others stay random
    rates["graph"] = {"csc": {str(s): 0.25 for s in ft.ROW_SIZES}, "rev": {str(s): 0.125 for s in ft.ROW_SIZES}}
    assert ft.floor_us(fwd, rates, graph_order=True) == fwd.streamed / 1e6 + 2 * 1000 * 0.25
    src = b["_bwd_gat_src_kernel"]
    assert [order for *_, order in src.gathered] == ["rev", "rev", None]
    assert ft.floor_us(src, rates, graph_order=True) == src.streamed / 1e6 + 2 * 1000 * 0.125 + 1000 * 0.5
    # counter-based dropout: the forward writes the keep flags (E x H bytes, in order), the source pass reads an
    # 8-byte row of them per out-edge at its CSC position (a whole sector as coded)
    dropped = ft.layer_bytes(layer, 100, 1000, 4, dropout=True)
    assert dropped["_fwd_kernel"].streamed - fwd.streamed == 1000 * 8
    assert dropped["_bwd_gat_src_kernel"].gathered[-1] == (1000, 8, 1000 * 8, None)
    assert dropped["_bwd_gat_src_kernel"].as_coded() - src.as_coded() == 1000 * 32


@pytest.mark.slow
def test_floor_table_quick_runs_the_gather_kernel_and_the_layers_in_the_interpreter(tmp_path) -> None:
    """``floor_table.py --quick``: the gather microbenchmark and the two-layer step under Triton's interpreter on
    CPU (no CUDA kernel to time: the table has bytes and floors, no times), JSON and markdown written."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out, md = tmp_path / "floor.json", tmp_path / "floor.md"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "floor_table.py"), "--quick",
                           "--out", str(out), "--md", str(md)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    rows = payload["results"][0]["rows"]
    assert [r["kernel"] for r in rows] == list(_floor_table().KERNELS)
    assert all(r["bytes_as_coded"] >= r["bytes_compulsory"] > 0 and r["floor_us"] > 0 for r in rows)
    assert all(0 < r["graph_floor_us"] for r in rows) and set(payload["rates"]["graph"]) == {"csc", "rev"}
    assert "| `_fwd_kernel` |" in md.read_text()


@pytest.mark.slow
def test_every_benchmark_checks_its_outputs_and_device_before_any_work(tmp_path) -> None:
    """Each script with an output refuses a folder there (and two outputs that are one file, a device this machine
    does not have) with one line and status 2 before it builds any data: one process for all of them."""
    d = str(tmp_path)
    cases = {
        "bench_conversion.py": (["--quick", "--out", d], "--out must be a file path, got the folder"),
        "bench_epoch_conversion.py": (["--quick", "--device", "gpu"], "--device must be 'auto', 'cpu', 'cuda'"),
        "bench_layers.py": (["--quick", "--out", f"{d}/r.json", "--md", f"{d}/r.json"], "--md and --out both write"),
        "bench_sampled.py": (["--quick", "--out", d], "--out must be a file path, got the folder"),
        "bench_triton_kernels.py": (["--out", d], "--out must be a file path, got the folder"),
        "floor_table.py": (["--quick", "--out", f"{d}/r.json", "--md", f"{d}/r.json"], "--md and --out both write"),
        "profile_layers.py": (["--quick", "--out", f"{d}/r.json", "--trace", f"{d}/r.json"],
                              "--trace and --out both write"),
        "plot.py": ([f"{d}/r.json", f"{d}/r.json"], "OUT.png must differ from BENCH.json"),
        "bench_graph_transformer.py": (["--quick", "--out", f"{d}/r.json", "--md", f"{d}/r.json"],
                                       "--md and --out both write"),
        "bench_sdpa_plans.py": (["--quick", "--out", d], "--out must be a file path, got the folder"),
    }
    code = f"""
import contextlib, io, json, os, runpy, sys
res = {{}}
for script, (argv, _) in {cases!r}.items():
    path = os.path.join({BENCH!r}, script)
    sys.argv, sys.path[0], err = [path, *argv], {BENCH!r}, io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
        res[script] = [None, "ran"]
    except SystemExit as e:
        res[script] = [e.code, err.getvalue()]
print(json.dumps(res))
"""
    (tmp_path / "r.json").write_text('{"records": []}')
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True, timeout=300,
                          env={**_without_interpreter(), "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = {s: got for s, got in res.items() if got[0] != 2 or cases[s][1] not in got[1] or got[1].count("\n") != 1}
    assert not bad, bad
    assert (tmp_path / "r.json").read_text() == '{"records": []}'


def _gt_row(**extra: object) -> dict:
    row = {"preset": "molecules", "variant": "gps_gat", "dtype": "bfloat16", "num_nodes": 100, "rel_err_vs_pyg": 1e-3,
           "fwd_ms_pyg": 4.0, "fwd_ms_ours": 2.0, "fwd_bwd_ms_pyg": 9.0, "fwd_bwd_ms_ours": 3.0,
           "fwd_mib_pyg": 10.0, "fwd_mib_ours": 5.0, "fwd_bwd_mib_pyg": 30.0, "fwd_bwd_mib_ours": 10.0,
           "fwd_speedup": 2.0, "fwd_bwd_speedup": 3.0, "non_attention_share_fwd_bwd": 0.4}
    return {**row, **extra}


def test_graph_transformer_summary_and_table_with_compiled_columns() -> None:
    """bench_graph_transformer's plot rows (plot.py's schema: one per case and pass, the compiled layer as its own
    series) and markdown table, eager and compiled, and a failed compile said in the table."""
    with _bench_on_path():
        import bench_graph_transformer as gt
    compiled = _gt_row(fwd_ms_ours_compiled=1.0, fwd_bwd_ms_ours_compiled=1.5, fwd_mib_ours_compiled=4.0,
                       fwd_bwd_mib_ours_compiled=8.0)
    gt.add_compiled_ratios(compiled)
    assert compiled["fwd_bwd_compiled_speedup"] == 2.0 and compiled["fwd_bwd_compiled_vs_pyg"] == 6.0
    failed = _gt_row(variant="transformer", compiled_error="BackendCompilerFailed: boom")
    rows = gt.summary([compiled, failed], "cudnn")
    assert [(r["layer"], r["pass"]) for r in rows] == [
        ("gps_gat", "fwd"), ("gps_gat compiled", "fwd"), ("gps_gat", "fwd+bwd"), ("gps_gat compiled", "fwd+bwd"),
        ("transformer", "fwd"), ("transformer", "fwd+bwd")]
    keys = {"preset", "layer", "dtype", "backend", "pass", "speedup_vs_pyg", "mem_ratio_pyg_over_ours", "pyg_status",
            "ours_status", "ours_ms", "ours_mem"}
    assert all(keys <= set(r) for r in rows)
    assert rows[3]["speedup_vs_pyg"] == 6.0 and rows[3]["mem_ratio_pyg_over_ours"] == 30.0 / 8.0
    table = gt.markdown({"rows": [compiled, failed], "timing_claims": True})
    assert "| molecules | gps_gat | bfloat16 | 100 | 4.000 / 2.000 | 2.00x | 9.000 / 3.000 | 3.00x | 30.0 / 10.0 | 40% | " \
           "1.000 / 1.500 | 2.00x |" in table
    assert "BackendCompilerFailed: boom" in table and "not timing claims" not in table


def test_graph_transformer_graphed_columns() -> None:
    """The CUDA-graph columns: ratios against our eager layer and PyG, a ``graphed`` series in the plot rows (no
    memory: the graphs' pool is taken at capture), the table's two columns, and on a CPU the reason instead."""
    with _bench_on_path():
        import bench_graph_transformer as gt
    row = _gt_row(fwd_bwd_ms_ours_graphed=1.2)
    gt.add_compiled_ratios(row)
    assert row["fwd_bwd_graphed_speedup"] == 2.5 and row["fwd_bwd_graphed_vs_pyg"] == 7.5
    assert "fwd_graphed_speedup" not in row and "fwd_bwd_compiled_speedup" not in row
    rows = gt.summary([row], "flash")
    assert [(r["layer"], r["pass"]) for r in rows] == [
        ("gps_gat", "fwd"), ("gps_gat", "fwd+bwd"), ("gps_gat graphed", "fwd+bwd")]
    assert rows[2]["speedup_vs_pyg"] == 7.5 and rows[2]["ours_mem"] is None and rows[2]["mem_ratio_pyg_over_ours"] is None
    table = gt.markdown({"rows": [row], "timing_claims": True})
    assert "| - | - | 1.200 | 7.50x | 1.0e-03 |" in table
    import torch

    out = gt.graphed_columns(lambda t: t, torch.nn.Linear(2, 2), torch.zeros(3, 2), lambda *a: None,
                             torch.device("cpu"), 1, 1)
    assert out == {"graphed_error": "needs CUDA (torch.cuda.make_graphed_callables)"}


@pytest.mark.slow
def test_bench_graph_transformer_quick_writes_json_markdown_and_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    out, md, png = tmp_path / "gt.json", tmp_path / "gt.md", tmp_path / "gt.png"
    proc = _run("bench_graph_transformer.py", "--quick", "--out", str(out), "--md", str(md), "--plot", str(png))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["quick"] is True and payload["timing_claims"] is False and payload["environment"]["torch"]
    assert [r["variant"] for r in payload["rows"]] == ["transformer", "gps_gat", "gps_pyg_gat"]
    assert all(r["rel_err_vs_pyg"] < 1e-4 and r["fwd_ms_ours"] > 0 for r in payload["rows"])
    assert all(r["attention_fwd_bwd_ms"] > 0 and 0 <= r["non_attention_share_fwd_bwd"] <= 1 for r in payload["rows"])
    assert len(payload["summary"]) == 6 and {r["pass"] for r in payload["summary"]} == {"fwd", "fwd+bwd"}
    assert "| quick | gps_gat | float32 | 64 |" in md.read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_graph_transformer_compiled_columns_on_cpu(tmp_path) -> None:
    out = tmp_path / "gt.json"
    proc = _run("bench_graph_transformer.py", "--quick", "--compiled", "--variant", "transformer", "--out", str(out),
                timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert "compiled_error" not in row and row["compiled_rel_err_vs_ours"] < 1e-4
    assert row["fwd_bwd_ms_ours_compiled"] > 0 and row["fwd_bwd_compiled_speedup"] > 0


def _plans_run(role: str, builds: int, loads: int, build_s: float, load_s: float, first_s: float) -> dict:
    plans = {"hits": 3, "misses": builds + loads, "evictions": 0, "currsize": builds + loads, "maxsize": 128,
             "builds": builds, "disk_loads": loads, "disk_writes": builds, "disk_rejects": 0, "build_seconds": build_s,
             "load_seconds": load_s, "plan_s": build_s + load_s}
    return {"role": role, "setup_s": 0.1, "epoch_s": first_s + 1.0, "first_batch_s": first_s, "batch_s": [first_s, 1.0],
            "num_nodes": [10, 12], "plans": plans, "plan_dir": "x", "process_s": 5.0}


def test_bench_sdpa_plans_json_with_the_runs_stubbed(tmp_path, monkeypatch) -> None:
    """bench_sdpa_plans.py's parent: cold then warm in one plan folder, the precompiled run in another filled first,
    ratios cold / warm, the JSON written; a temporary plan folder removed; a non-empty --plan-dir refused."""
    with _bench_on_path():
        import bench_sdpa_plans as bp
    calls = []
    stubs = {"cold": _plans_run("cold", 5, 0, 2.0, 0.0, 2.5), "warm": _plans_run("warm", 0, 5, 0.0, 0.1, 0.6),
             "precompiled": _plans_run("precompiled", 0, 5, 0.0, 0.4, 0.9),
             "fill": {"role": "fill", "setup_s": 0.1, "precompile_s": 3.0, "attention_shapes": [[6, 20, 2, 8, [43, 99]]],
                      "plans": _plans_run("fill", 5, 0, 2.0, 0.0, 0.0)["plans"]}}

    def run_child(role, folder, shape, seed, quick, timeout):
        calls.append((role, os.path.basename(folder), quick))
        return stubs[role]

    monkeypatch.setattr(bp, "run_child", run_child)
    monkeypatch.setattr(bp, "environment", lambda device: {"torch": "x", "device": str(device)})
    out = tmp_path / "plans.json"
    assert bp.main(["--quick", "--precompile", "--out", str(out)]) == 0
    assert calls == [("cold", "cold-warm", True), ("warm", "cold-warm", True), ("fill", "precompiled", True),
                     ("precompiled", "precompiled", True)]
    payload = json.loads(out.read_text())
    assert payload["quick"] is True and payload["timing_claims"] is False and payload["environment"]["torch"]
    assert set(payload["runs"]) == {"cold", "warm", "precompiled"} and payload["precompile_fill"]["precompile_s"] == 3.0
    assert payload["plan_time_ratio"] == 20.0 and payload["precompiled_plan_time_ratio"] == 5.0
    assert payload["first_batch_ratio"] == pytest.approx(2.5 / 0.6) and payload["epoch_ratio"] == pytest.approx(3.5 / 1.6)
    assert payload["target_met"] is True and payload["warm_loaded_every_plan"] is True
    assert payload["shape"] == {**bp.QUICK_SHAPE, "dtype": "bfloat16", "seed": 0}
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("cudnn-gnn-plans-")
                and os.path.isdir(os.path.join(tempfile.gettempdir(), p, "cold-warm"))]

    stubs["warm"] = _plans_run("warm", 1, 4, 0.5, 0.1, 0.6)  # a plan the warm run rebuilt: said, ratio still given
    calls.clear()
    assert bp.main(["--quick", "--out", str(out), "--plan-dir", str(tmp_path / "kept")]) == 0
    payload = json.loads(out.read_text())
    assert payload["warm_loaded_every_plan"] is False and payload["target_met"] is False
    assert payload["plan_time_ratio"] == pytest.approx(2.0 / 0.6) and "precompiled" not in payload["runs"]
    assert (tmp_path / "kept").is_dir() and [c[0] for c in calls] == ["cold", "warm"]
    (tmp_path / "kept" / "f").write_text("")
    with pytest.raises(SystemExit) as e:
        bp.main(["--quick", "--plan-dir", str(tmp_path / "kept")])
    assert e.value.code == 2
    monkeypatch.setattr(bp.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        bp.main(["--out", str(out)])
    assert e.value.code == 2 and len(calls) == 2


@pytest.mark.slow
def test_bench_sdpa_plans_quick_runs_its_processes_on_the_fake_cudnn(tmp_path) -> None:
    """--quick: the cold run builds every plan and writes it, the warm and precompiled runs (new processes) load
    every one; the plan seconds are counted by source."""
    out = tmp_path / "plans.json"
    proc = _run("bench_sdpa_plans.py", "--quick", "--precompile", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    cold, warm, pre = (payload["runs"][r]["plans"] for r in ("cold", "warm", "precompiled"))
    assert cold["builds"] >= 2 and cold["disk_writes"] == cold["builds"] and cold["disk_loads"] == 0
    assert cold["build_seconds"] > 0 and cold["load_seconds"] == 0
    assert (warm["builds"], warm["disk_loads"], warm["build_seconds"]) == (0, cold["builds"], 0) and warm["load_seconds"] > 0
    assert pre["builds"] == 0 and pre["disk_loads"] == cold["builds"]
    assert payload["warm_loaded_every_plan"] and payload["precompiled_loaded_every_plan"]
    assert payload["plan_time_ratio"] > 0 and "plan time cold / warm" in proc.stdout
