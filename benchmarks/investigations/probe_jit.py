"""What cuDNN's first-call kernel build for GAT/GATv2 depends on, and whether builds overlap across threads.

cuDNN 9.28 compiles the GNN kernels with NVRTC on the first call of each configuration in a process and keeps them
in memory only. This probe times first calls (GPU synchronised) in one fresh process:

1. a baseline configuration, then the same configuration on a graph 250x larger (does size enter the key?);
2. three new configurations started together in three threads (does the build release the GIL, so that a
   warm-up can build several configurations at once?);
3. one knob changed at a time: heads, features, index dtype, edge features, returned attention, backward,
   deterministic backward.

Usage: ``python benchmarks/investigations/probe_jit.py --out probe_jit.json`` (on a GPU with the cuDNN backend).
Prints one line per step and rewrites the JSON after each, so a run stopped at a time limit still leaves what it measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, for _bench_common

from _bench_common import environment, write_json  # noqa: E402

import cudnn_gnn  # noqa: E402


def _graph(n: int, e: int, index_dtype: torch.dtype) -> cudnn_gnn.CscGraph:
    g = torch.Generator().manual_seed(n + e)
    ei = torch.randint(0, n, (2, e), generator=g).cuda()
    return cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n, index_dtype=index_dtype)


def call(op: str = "gat", dtype: torch.dtype = torch.float32, d: int = 64, heads: int = 4, n: int = 200,
         e: int = 1000, index_dtype: torch.dtype = torch.int32, edge_dim: int = 0, attention: bool = False,
         backward: bool = False, deterministic: bool = False) -> float:
    """Seconds for one synchronised call of the described configuration."""
    g = _graph(n, e, index_dtype)
    x = torch.randn(n, d, device="cuda", dtype=dtype, requires_grad=backward)
    w_len = d if op == "gatv2" else 2 * d + edge_dim
    w = torch.randn(w_len, device="cuda", dtype=dtype, requires_grad=backward)
    ea = torch.randn(e, edge_dim, device="cuda", dtype=dtype) if edge_dim else None
    fn = cudnn_gnn.gatv2 if op == "gatv2" else cudnn_gnn.gat
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.set_grad_enabled(backward):
        out = fn(g, x, w, heads=heads, edge_attr=ea, return_attention=attention, backend="cudnn",
                 deterministic=deterministic)
        if attention:
            out = out[0]
        if backward:
            out.float().sum().backward()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="probe_jit.json")
    args = ap.parse_args()
    env = environment(torch.device("cuda"))
    result: dict[str, Any] = {"schema": "cudnn-gnn/probe_jit/1", "environment": env, "steps": []}
    t_start = time.perf_counter()

    def record(name: str, seconds: float, **extra: Any) -> None:
        result["steps"].append({"step": name, "seconds": seconds, **extra})
        result["wall_s"] = time.perf_counter() - t_start
        print(f"{name:48s} {seconds:8.2f} s {extra if extra else ''}", flush=True)
        write_json(args.out, result)

    record("baseline gat fp32 D=64 H=4 fwd (first call)", call())
    record("same again (built)", call())
    record("same, graph 250x larger (50k nodes, 250k edges)", call(n=50_000, e=250_000))

    trio = {"gatv2 fp32 D=64 H=4 fwd": dict(op="gatv2"), "gat bf16 D=64 H=4 fwd": dict(dtype=torch.bfloat16),
            "gat fp32 D=32 H=2 fwd": dict(d=32, heads=2)}
    own: dict[str, float] = {}

    def worker(name: str, kw: dict[str, Any]) -> None:
        own[name] = call(**kw)

    threads = [threading.Thread(target=worker, args=item) for item in trio.items()]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record("three new configurations in three threads (wall)", time.perf_counter() - t0, each=own)

    for name, kw in [
        ("heads 8 (D=64)", dict(heads=8)),
        ("features D=128 (H=4)", dict(d=128)),
        ("int64 indices", dict(index_dtype=torch.int64)),
        ("edge features (De=8)", dict(edge_dim=8)),
        ("returned attention", dict(attention=True)),
        ("forward + backward", dict(backward=True)),
        ("forward + deterministic backward", dict(backward=True, deterministic=True)),
        ("forward + backward again (built)", dict(backward=True)),
    ]:
        record(name, call(**kw))
    print(f"done in {time.perf_counter() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
