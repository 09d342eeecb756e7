"""Run a pytest selection as N parallel processes (``--shard I/N``) and print one combined report.

Why: cuDNN compiles each new GAT/GATv2 kernel configuration with NVRTC on its first call in a process
(40-120 s, one CPU core) and keeps the result only in that process. A GPU suite of a few dozen configurations
takes most of an hour in one process and a few minutes spread over the cores of a GPU host. The GPU itself is
shared by the shards; the tests check numbers, not time, so that is harmless.

Usage (from the repository root)::

    python tests/gpu/run_shards.py --shards 12 --out gpu-run -- tests/gpu -m gpu

Tests marked ``gpu_alone`` (those that need most of the GPU's memory) run after the shards, in one process with the
GPU to themselves (their "shard" is N in the report).

Writes ``<out>/tests.log`` (every shard's output, one after the other) and ``<out>/tests.json`` (one record per
test: outcome, seconds, shard, message), prints the failures and a one-line summary, and exits 0 only when no
test failed or errored and every shard finished.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Any


def parse_junit(path: str, shard: int) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or "") + ("\n" + node.text if node.text and tag != "skipped" else "")
                break
        out.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                    "seconds": float(case.get("time") or 0.0), "shard": shard, "message": message[-3000:]})
    return out


def _wait(procs: list[tuple[subprocess.Popen[bytes], Any]], which: Any, left: float, timed_out: list[int]) -> None:
    """Wait for the processes ``which`` of ``procs`` until ``left`` seconds have passed; kill the rest (their
    indices appended to ``timed_out``) and close every log."""
    t0 = time.perf_counter()
    for i in which:
        p, log = procs[i]
        try:
            p.wait(timeout=max(1.0, left - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            timed_out.append(i)
        log.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--out", required=True, help="folder for tests.log and tests.json")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before unfinished shards are killed")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: what to pass to pytest")
    args = ap.parse_args(argv)
    if args.shards < 1:
        ap.error(f"--shards must be >= 1, got {args.shards}")
    rest = [a for a in args.pytest_args if a != "--"] or ["tests/gpu", "-m", "gpu"]
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="shards-")
    procs = []
    t0 = time.perf_counter()
    for i in range(args.shards):
        log = open(os.path.join(work, f"shard{i}.log"), "w")
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rfEs", "--durations=0",
               f"--shard={i}/{args.shards}", f"--junitxml={os.path.join(work, f'shard{i}.xml')}", *rest]
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=False), log))
    timed_out: list[int] = []
    _wait(procs, range(args.shards), args.timeout - (time.perf_counter() - t0), timed_out)
    # then the tests marked gpu_alone (most of the GPU's memory), in one process with the GPU to themselves
    alone = args.shards
    log = open(os.path.join(work, f"shard{alone}.log"), "w")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rfEs", "--durations=0", "--alone",
           f"--junitxml={os.path.join(work, f'shard{alone}.xml')}", *rest]
    procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
    _wait(procs, [alone], args.timeout - (time.perf_counter() - t0), timed_out)
    wall = time.perf_counter() - t0

    records: list[dict[str, Any]] = []
    with open(os.path.join(args.out, "tests.log"), "w") as combined:
        for i, (p, _) in enumerate(procs):
            name = f"shard {i}/{args.shards}" if i < args.shards else "the gpu_alone tests, alone"
            combined.write(f"\n======== {name} (exit {p.returncode}"
                           f"{', killed at the timeout' if i in timed_out else ''}) ========\n")
            with open(os.path.join(work, f"shard{i}.log")) as f:
                combined.write(f.read())
            records.extend(parse_junit(os.path.join(work, f"shard{i}.xml"), i))
    counts: dict[str, int] = {}
    for r in records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    bad = [r for r in records if r["outcome"] in ("failed", "error")]
    # A shard exits 5 when its share of the selection is empty (more shards than tests): not a failure.
    broken = [i for i, (p, _) in enumerate(procs) if p.returncode not in (0, 1, 5) or i in timed_out]
    with open(os.path.join(args.out, "tests.json"), "w") as f:
        json.dump({"shards": args.shards, "pytest_args": rest, "wall_s": wall, "counts": counts,
                   "timed_out_shards": timed_out, "broken_shards": broken, "tests": records}, f, indent=1)
    for r in bad:
        print(f"FAILED {r['test']} (shard {r['shard']}, {r['seconds']:.0f} s)\n{r['message'][-1500:]}\n")
    for r in sorted(records, key=lambda r: -r["seconds"])[:15]:
        print(f"{r['seconds']:7.1f} s  {r['outcome']:7s} shard {r['shard']:2d}  {r['test']}")
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no tests ran"
    print(f"== {summary} in {wall:.0f} s over {args.shards} shards"
          f"{'; shards killed at the timeout: ' + str(timed_out) if timed_out else ''}"
          f"{'; shards that crashed: ' + str([b for b in broken if b not in timed_out]) if broken else ''}")
    return 0 if not bad and not broken else 1


if __name__ == "__main__":
    sys.exit(main())
