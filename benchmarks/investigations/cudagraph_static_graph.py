"""Cora's layer step under ``torch.compile(mode="reduce-overhead")``: the graph's tensors copied into the CUDA graph
at every replay (``plain``) against marked static with ``torch._dynamo.mark_static_address(t, guard=False)``
(``static``), and PyG's layer under the same mode, in one process, two rounds alternating.

Question: does a replayed step of ours spend its extra host time copying the ``CscGraph``'s tensors in? Per case:
CUDA-event and queued ms a step, kernels and GPU us a step and the ops with the most self CPU time (as
``cora_host.py``), the output against the eager layer on the same graph, and a second graph through the same
compiled model against the eager layer on it (a static-marked input whose address changes must make CUDA graphs
re-record, not replay the first graph).

Usage (from the repository root, on a CUDA machine)::

    python benchmarks/investigations/cudagraph_static_graph.py [--out cudagraph_static_graph.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch
from torch import Tensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _graphs import power_law_edge_index  # noqa: E402
from cora_host import CORA, build, event_ms, first_call_then_warm, host_ms, profile, step_fn  # noqa: E402

import cudnn_gnn  # noqa: E402


def graph_tensors(graph: Any) -> list[Tensor]:
    """Every tensor a ``CscGraph`` holds: its fields and its caches (tuples and dicts walked)."""
    found: list[Tensor] = []

    def walk(v: Any) -> None:
        if isinstance(v, Tensor):
            found.append(v)
        elif isinstance(v, (tuple, list)):
            for u in v:
                walk(u)
        elif isinstance(v, dict):
            for u in v.values():
                walk(u)

    for v in vars(graph).values():
        walk(v)
    return found


def mark_static(graph: Any) -> int:
    tensors = graph_tensors(graph)
    for t in tensors:
        torch._dynamo.mark_static_address(t, guard=False)
    return len(tensors)


def run(layer: str, variant: str, x: Tensor, grad: Tensor, edge_index: Tensor, edge_index2: Tensor,
        repeats: int, steps: int) -> dict[str, Any]:
    dev = x.device
    torch._dynamo.reset()
    model, graph = build(layer, "pyg" if variant == "pyg" else "triton", edge_index, dev)
    graph2: Any = edge_index2 if variant == "pyg" else cudnn_gnn.CscGraph.from_edge_index(
        edge_index2, num_nodes=CORA.num_nodes)
    eager = step_fn(model, graph, x, grad)
    for _ in range(3):  # builds the graph's caches before they are marked
        eager()
    torch.cuda.synchronize()
    marked = mark_static(graph) if variant == "static" else 0
    ref_out = model(x, graph).detach().clone()
    ref_out2 = model(x, graph2).detach().clone()
    compiled = torch.compile(model, mode="reduce-overhead")
    step = step_fn(compiled, graph, x, grad, mark=True)
    first = first_call_then_warm(step)
    rec: dict[str, Any] = {"layer": layer, "variant": variant, "marked_tensors": marked, "first_call_s": first,
                           "event_ms": event_ms(step, repeats), "host_ms": host_ms(step, steps, collect=True)}
    rec.update(profile(step, top=12))
    torch.compiler.cudagraph_mark_step_begin()
    out = compiled(x, graph).detach().clone()
    rec["max_diff_vs_eager"] = float((out - ref_out).abs().max())
    if variant == "static":
        mark_static(graph2)
    for _ in range(2):
        torch.compiler.cudagraph_mark_step_begin()
        out2 = compiled(x, graph2).detach().clone()
    rec["max_diff_second_graph"] = float((out2 - ref_out2).abs().max())
    rec["second_vs_first_graph"] = float((ref_out2 - ref_out).abs().max())
    torch._dynamo.reset()
    print(json.dumps({k: v for k, v in rec.items() if k != "top_self_cpu_us_per_step"}), flush=True)
    return rec


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default="cudagraph_static_graph.json")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    edge_index, edge_index2 = (
        power_law_edge_index(CORA.num_nodes, CORA.num_edges, exponent=0.5, symmetric=True, seed=s).to(dev)
        for s in (0, 1))
    x = torch.randn(CORA.num_nodes, 1433, device=dev)
    grad = torch.randn(CORA.num_nodes, 64, device=dev)
    recs: list[dict[str, Any]] = []
    for layer in ("GAT", "GATv2"):
        for _ in range(args.rounds):
            for variant in ("plain", "static", "pyg"):
                try:
                    recs.append(run(layer, variant, x, grad, edge_index, edge_index2, args.repeats, args.steps))
                except Exception as exc:  # noqa: BLE001 - a failure is a result here
                    print(layer, variant, "error:", type(exc).__name__, str(exc)[:500], flush=True)
                    recs.append({"layer": layer, "variant": variant, "error": f"{type(exc).__name__}: {exc}"[:1000]})
    with open(args.out, "w") as f:
        json.dump(recs, f, indent=1)
    return recs


if __name__ == "__main__":
    main()
