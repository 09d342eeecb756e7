"""Plans of our cuDNN SDPA graphs kept on disk: a new process's first ragged epoch, cold against warm.

A process that meets a new batch shape makes its cuDNN SDPA plans (a forward per graphs x longest-graph bucket, a
backward per node-total bucket): it builds them, or loads them from the plan folder (``$CUDNN_GNN_CACHE_DIR/
sdpa-plans``) where an earlier process wrote them (``cudnn_gnn.backends._sdpa_plans``). This script measures what the
folder saves: one ragged "epoch" (``--batches`` batches of ``--graphs`` graphs of 10-500 nodes, each with its own node
total; forward and backward of ``cudnn_gnn.graph_attention(..., backend="cudnn")`` on bf16 q, k, v of 4 heads x 32,
the ragged preset of ``bench_graph_transformer.py``) in a fresh process, twice, with one fresh plan folder:

  cold         the folder empty: every plan is built (and written there)
  warm         the folder the cold run filled: every plan is loaded
  precompiled  (``--precompile``) another empty folder, filled first by ``cudnn_gnn.precompile(attention=[...])`` in
               a process of its own with the epoch's shapes, then the epoch in a new process

Each run reports its epoch wall time, its first batch's, every batch's, and its plan ledger
(``plan_cache_info()``: builds, disk loads, ``build_seconds``, ``load_seconds``, the host seconds spent making
plans by source). The cuDNN handle and the CUDA context are made before the epoch and timed apart (``setup_s``), so
the plan seconds are the plans' alone. The headline is ``plan_time_ratio``: the cold run's plan seconds over the warm
run's (the goal: >= 10); the first-batch and epoch ratios say what a user sees of it.

    python benchmarks/bench_sdpa_plans.py --out out/sdpa_plans.json                # GPU
    python benchmarks/bench_sdpa_plans.py --precompile --out out/sdpa_plans.json   # + the precompiled run
    python benchmarks/bench_sdpa_plans.py --quick --out /tmp/q.json   # CPU smoke: the tests' fake cuDNN, no claims

``--quick`` runs the same processes and plan folder on CPU with the fake cuDNN frontend of the tests
(``tests/ops/_fake_cudnn.py``, plain torch: it builds, serializes and loads stand-in plans), on a tiny epoch: it checks
the plumbing, not cuDNN, and its times mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

import cudnn_gnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import environment, write_json  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_outputs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_CUDNN = os.path.join(ROOT, "tests", "ops", "_fake_cudnn.py")
SHAPE = {"graphs": 128, "min_nodes": 10, "max_nodes": 500, "heads": 4, "head_dim": 32, "batches": 16}
QUICK_SHAPE = {"graphs": 6, "min_nodes": 1, "max_nodes": 20, "heads": 2, "head_dim": 8, "batches": 3}
TARGET = 10.0  # the goal: plan time >= 10x lower with the plans on disk
ROLES = ("cold", "warm", "fill", "precompiled")


class ChildFailed(RuntimeError):
    """A run's process exited with an error (its role and the tail of its output in the message)."""


# ----------------------------------------------------------------------------------------------- the epoch


def batch_sizes(shape: dict[str, Any], seed: int) -> list[list[int]]:
    """The node counts of each batch's graphs (uniform in ``[min_nodes, max_nodes]``), the same in every process."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(shape["min_nodes"], shape["max_nodes"] + 1, (shape["graphs"],), generator=g).tolist()
            for _ in range(shape["batches"])]


def attention_shapes(shape: dict[str, Any], sizes: list[list[int]]) -> list[cudnn_gnn.ops.AttentionShape]:
    """What ``precompile(attention=...)`` needs for the epoch: one shape per (graphs, longest-graph bucket), with the
    node totals of its batches as a range (the backward plans of every bucket between)."""
    from cudnn_gnn.backends._cudnn_sdpa import bucket_seqlen

    groups: dict[tuple[int, int], list[list[int]]] = {}
    for s in sizes:
        groups.setdefault((len(s), bucket_seqlen(max(s))), []).append(s)
    out = []
    for (b, _), batches in groups.items():
        largest = max(max(s) for s in batches)
        totals = [sum(s) for s in batches]
        out.append(cudnn_gnn.ops.AttentionShape(b, largest, shape["heads"], shape["head_dim"],
                                                (min(totals), max(totals))))
    return out


def _use_fake_cudnn() -> None:
    """``--quick``: our SDPA graphs on the tests' CPU fake of the frontend, and graph_attention's ``cudnn`` backend
    let through on CPU tensors (as tests/ops/test_precompile.py does)."""
    if not os.path.exists(FAKE_CUDNN):
        raise SystemExit(f"--quick needs the tests' fake cuDNN at {FAKE_CUDNN} (a source checkout)")
    spec = importlib.util.spec_from_file_location("_fake_cudnn", FAKE_CUDNN)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--quick cannot import the tests' fake cuDNN at {FAKE_CUDNN}")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    from cudnn_gnn.backends import _cudnn_sdpa

    fe = fake.FakeFrontend()
    setattr(_cudnn_sdpa, "_frontend", lambda: fe)  # noqa: B010 (a stand-in, as the tests' monkeypatch sets it)
    setattr(importlib.import_module("cudnn_gnn.ops.global_attention"), "choose_backend", lambda *a: "cudnn")  # noqa: B010


def _setup(device: torch.device) -> float:
    """Seconds to start CUDA and make this thread's cuDNN handle, done before the epoch so plan times are plans."""
    from cudnn_gnn.backends import _cudnn_sdpa

    t0 = time.perf_counter()
    torch.zeros(1, device=device)
    _cudnn_sdpa._handle(_cudnn_sdpa._frontend(), device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def _ledger() -> dict[str, Any]:
    from cudnn_gnn.backends import _cudnn_sdpa

    info = _cudnn_sdpa.plan_cache_info()
    return {**info._asdict(), "plan_s": info.build_seconds + info.load_seconds}


def run_epoch(shape: dict[str, Any], sizes: list[list[int]], device: torch.device) -> dict[str, Any]:
    """One pass over the batches (forward + backward of graph_attention on cuDNN), each timed to its end on the
    device; the plan ledger after it."""
    setup_s = _setup(device)
    batches = []
    for s in sizes:
        ptr = torch.tensor([0, *torch.tensor(s).cumsum(0).tolist()], device=device)
        q, k, v = (torch.randn(sum(s), shape["heads"], shape["head_dim"], device=device, dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        batches.append((ptr, max(s), q, k, v))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times = []
    for ptr, largest, q, k, v in batches:
        t0 = time.perf_counter()
        out = cudnn_gnn.graph_attention(q, k, v, ptr, max_num_nodes=largest, backend="cudnn")
        out.float().square().mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return {"setup_s": setup_s, "epoch_s": sum(times), "first_batch_s": times[0], "batch_s": times,
            "num_nodes": [sum(s) for s in sizes], "plans": _ledger()}


def run_fill(shape: dict[str, Any], sizes: list[list[int]], device: torch.device) -> dict[str, Any]:
    """``cudnn_gnn.precompile`` of the epoch's attention shapes (bf16, with backward) into the plan folder."""
    setup_s = _setup(device)
    shapes = attention_shapes(shape, sizes)
    t0 = time.perf_counter()
    cudnn_gnn.precompile((), [torch.bfloat16], attention=shapes, device=device)
    return {"setup_s": setup_s, "precompile_s": time.perf_counter() - t0,
            "attention_shapes": [list(s) for s in shapes], "plans": _ledger()}


def child(role: str, shape: dict[str, Any], seed: int, quick: bool, out: str) -> int:
    """One run, in the process the parent started (the plan folder from ``CUDNN_GNN_CACHE_DIR``); JSON to ``out``."""
    if quick:
        _use_fake_cudnn()
        device = torch.device("cpu")
    else:
        device = torch.device("cuda")
    sizes = batch_sizes(shape, seed)
    got = run_fill(shape, sizes, device) if role == "fill" else run_epoch(shape, sizes, device)
    from cudnn_gnn.backends._sdpa_plans import plan_dir

    got.update(role=role, plan_dir=str(plan_dir()))
    with open(out, "w") as f:
        json.dump(got, f)
    return 0


# ----------------------------------------------------------------------------------------------- the parent


def run_child(role: str, folder: str, shape: dict[str, Any], seed: int, quick: bool, timeout: float) -> dict[str, Any]:
    """Run ``role`` in a new Python process whose plan folder is ``folder/sdpa-plans``; its report."""
    fd, out = tempfile.mkstemp(prefix=f"sdpa-plans-{role}-", suffix=".json")
    os.close(fd)
    try:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", role, "--child-out", out, "--seed", str(seed),
               "--shape", json.dumps(shape)] + (["--quick"] if quick else [])
        env = {**os.environ, "CUDNN_GNN_CACHE_DIR": folder}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip()[-3000:]
            raise ChildFailed(f"the {role} run failed (exit {proc.returncode}):\n{tail}")
        with open(out) as f:
            report: dict[str, Any] = json.load(f)
        report["process_s"] = time.perf_counter() - t0
        return report
    finally:
        os.unlink(out)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def summarize(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Cold over warm (and over precompiled): plan seconds, first batch, epoch; whether every warm plan loaded."""
    cold, warm = runs["cold"], runs["warm"]
    out: dict[str, Any] = {
        "plan_time_ratio": _ratio(cold["plans"]["plan_s"], warm["plans"]["plan_s"]),
        "first_batch_ratio": _ratio(cold["first_batch_s"], warm["first_batch_s"]),
        "epoch_ratio": _ratio(cold["epoch_s"], warm["epoch_s"]),
        "target_plan_time_ratio": TARGET,
        "warm_loaded_every_plan": (warm["plans"]["builds"] == 0
                                   and warm["plans"]["disk_loads"] == cold["plans"]["builds"]),
    }
    out["target_met"] = out["plan_time_ratio"] is not None and out["plan_time_ratio"] >= TARGET
    if "precompiled" in runs:
        pre = runs["precompiled"]
        out["precompiled_plan_time_ratio"] = _ratio(cold["plans"]["plan_s"], pre["plans"]["plan_s"])
        out["precompiled_first_batch_ratio"] = _ratio(cold["first_batch_s"], pre["first_batch_s"])
        out["precompiled_loaded_every_plan"] = pre["plans"]["builds"] == 0
    return out


def _line(role: str, r: dict[str, Any]) -> str:
    p = r["plans"]
    return (f"{role:12s} epoch {r['epoch_s'] * 1e3:9.1f} ms  first batch {r['first_batch_s'] * 1e3:9.1f} ms  "
            f"plans: {p['builds']} built in {p['build_seconds'] * 1e3:8.1f} ms, {p['disk_loads']} loaded in "
            f"{p['load_seconds'] * 1e3:8.1f} ms  (setup {r['setup_s'] * 1e3:.1f} ms)")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}x"


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="bench_sdpa_plans.py", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--batches", type=int, default=SHAPE["batches"], help="batches in the epoch")
    ap.add_argument("--graphs", type=int, default=SHAPE["graphs"], help="graphs per batch")
    ap.add_argument("--seed", type=int, default=0, help="the batches' node counts")
    ap.add_argument("--precompile", action="store_true",
                    help="also a run whose plan folder cudnn_gnn.precompile(attention=...) filled first")
    ap.add_argument("--plan-dir", help="an empty (or new) folder to keep the runs' plan folders in (default: a "
                                       "temporary one, removed at the end)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds each run's process may take")
    ap.add_argument("--quick", action="store_true",
                    help="CPU smoke run on a tiny epoch with the tests' fake cuDNN; no timing claims")
    ap.add_argument("--child", choices=ROLES, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, json.loads(args.shape), args.seed, args.quick, args.child_out)

    check_outputs(ap, {"--out": args.out})  # before any run starts
    for flag, value in (("--batches", args.batches), ("--graphs", args.graphs)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    if args.plan_dir is not None and os.path.exists(args.plan_dir) and (
            not os.path.isdir(args.plan_dir) or os.listdir(args.plan_dir)):
        ap.error(f"--plan-dir must be an empty or new folder, got {args.plan_dir!r}")
    if args.quick:
        device, shape = torch.device("cpu"), dict(QUICK_SHAPE)
    else:
        if not torch.cuda.is_available():
            ap.error("a CUDA GPU is needed (or --quick for a CPU smoke run)")
        info = cudnn_gnn.backend_info()
        if not info.sdpa_available:
            ap.error(f"our cuDNN SDPA graphs cannot run here: {info.reason}; fix: {info.fix}")
        device = torch.device("cuda")
        shape = {**SHAPE, "batches": args.batches, "graphs": args.graphs}

    root = args.plan_dir or tempfile.mkdtemp(prefix="cudnn-gnn-plans-")
    os.makedirs(root, exist_ok=True)
    t0 = time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    try:
        shared = os.path.join(root, "cold-warm")
        for role in ("cold", "warm"):
            runs[role] = run_child(role, shared, shape, args.seed, args.quick, args.timeout)
            print(_line(role, runs[role]), flush=True)
        fill = None
        if args.precompile:
            folder = os.path.join(root, "precompiled")
            fill = run_child("fill", folder, shape, args.seed, args.quick, args.timeout)
            print(f"{'fill':12s} precompile {fill['precompile_s'] * 1e3:9.1f} ms  plans: {fill['plans']['builds']} "
                  "built", flush=True)
            runs["precompiled"] = run_child("precompiled", folder, shape, args.seed, args.quick, args.timeout)
            print(_line("precompiled", runs["precompiled"]), flush=True)
    except (ChildFailed, subprocess.TimeoutExpired) as e:
        print(f"bench_sdpa_plans.py: {e}", file=sys.stderr)
        return 1
    finally:
        if args.plan_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    ratios = summarize(runs)
    result = {
        "what": "a new process's first ragged epoch of graph_attention(backend='cudnn') fwd+bwd: plans built (cold) "
                "against loaded from the plan folder (warm); ratios are cold / warm",
        "quick": args.quick,
        "timing_claims": not args.quick,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (fake cuDNN)",
        "shape": {**shape, "dtype": "bfloat16", "seed": args.seed},
        "runs": runs,
        "precompile_fill": fill,
        **ratios,
        "seconds": time.perf_counter() - t0,
        "environment": environment(device),
    }
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    print(f"plan time cold / warm: {_fmt(ratios['plan_time_ratio'])} (target >= {TARGET:.0f}x)  first batch: "
          f"{_fmt(ratios['first_batch_ratio'])}  epoch: {_fmt(ratios['epoch_ratio'])}"
          + ("" if ratios["warm_loaded_every_plan"] else "  (the warm run built plans: see runs.warm.plans)")
          + ("\n(--quick CPU smoke run with a fake cuDNN: not timing claims)" if args.quick else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
