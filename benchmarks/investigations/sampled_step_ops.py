"""How many aten ops does one sampled training step of the example's GAT run, ours against PyG's, and where do ours
come from?

On a GPU every aten op is at least one kernel launch and ~10-20 us of host time, and a sampled step (a new graph
every batch) is partly host-bound, so the op count is a proxy for its host time that a CPU can measure. One batch
of `cudnn_gnn.apps.sampler.DeviceNeighborLoader` (run on the CPU) over a uniform random graph, fan-out 10,10,5,
1024 seeds; `examples/_common.OgbGAT` (3 layers, 4 heads x 128, trimmed blocks) forward + backward, ours on the
Triton backend with its kernel launches stubbed (the ops around them are what is counted) and PyG's `GATConv`.
Counted with a `TorchDispatchMode` on the second step (the first builds caches); ours also by the repository
function that issued each op.

Usage (from the repository root; CPU, sets ``TRITON_INTERPRET=1`` itself)::

    python benchmarks/investigations/sampled_step_ops.py [--nodes 200000] [--edges 3000000] [--no-short-rows] \
        [--out ops.json]

``--no-short-rows`` ignores the ``short_rows`` hint of the sampled blocks (``CscGraph.short_rows`` reads False), so
their row work lists are the chunked ones, as before ``a93a21c``.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
from _bench_common import environment, write_json  # noqa: E402

NO_KERNEL = frozenset({
    "view", "t", "slice", "select", "unsqueeze", "squeeze", "expand", "unbind", "as_strided", "alias", "detach",
    "permute", "transpose", "split", "split_with_sizes", "narrow", "diagonal", "empty", "new_empty", "empty_like",
    "empty_strided", "_reshape_alias", "_unsafe_view", "lift_fresh", "lift_fresh_copy", "is_nonzero", "sym_size",
    "_local_scalar_dense"})
"""Aten ops that launch no kernel on a GPU (views, allocations, metadata); the others launch at least one."""


def _launches(func: Any) -> bool:
    return str(func).split(".")[1] not in NO_KERNEL


class _Count(TorchDispatchMode):
    """Aten ops by name, and by the innermost repository function on the Python stack; ``kernel_ops`` counts the
    ops that launch a kernel on a GPU (not :data:`NO_KERNEL`), ``kernel_callers`` the same by caller."""

    def __init__(self, by_caller: bool) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.callers: collections.Counter[str] = collections.Counter()
        self.kernel_callers: collections.Counter[str] = collections.Counter()
        self.kernel_by_caller_op: collections.Counter[str] = collections.Counter()
        self.kernel_ops = 0
        self.by_caller = by_caller

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[str(func)] += 1
        launches = _launches(func)
        self.kernel_ops += launches
        if self.by_caller:
            frames = [f for f in traceback.extract_stack(limit=30)
                      if f.filename.startswith(ROOT) and "investigations" not in f.filename]
            where = f"{os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].name}" if frames else "autograd engine"
            self.callers[where] += 1
            if launches:
                self.kernel_callers[where] += 1
                self.kernel_by_caller_op[f"{where} {str(func).removeprefix('aten.')}"] += 1
        return func(*args, **(kwargs or {}))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--edges", type=int, default=3_000_000)
    ap.add_argument("--no-short-rows", action="store_true", help="ignore the blocks' short_rows hint")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="bf16: the step under torch.autocast(bfloat16), as bench_sampled.py runs it")
    ap.add_argument("--out", default="sampled_step_ops.json")
    args = ap.parse_args(argv)
    if args.no_short_rows:
        from cudnn_gnn.graph import CscGraph

        CscGraph.short_rows = property(lambda self: False)  # type: ignore[assignment,method-assign]
    os.environ["TRITON_INTERPRET"] = "1"  # read when the kernel module is first imported (launches stubbed anyway)
    from _common import OgbGAT
    from op_schema_overhead import stubbed_launches

    from cudnn_gnn import CscGraph
    from cudnn_gnn.apps.sampler import DeviceNeighborLoader

    gen = torch.Generator().manual_seed(0)
    n, e = args.nodes, args.edges
    dst = torch.randint(0, n, (e,), generator=gen)
    src = torch.randint(0, n, (e,), generator=gen)
    csc = CscGraph.from_edge_index(torch.stack([src, dst]), num_nodes=n)  # the sampler's colptr / row
    attrs = {"x": torch.randn(n, 128, generator=gen), "y": torch.randint(0, 172, (n,), generator=gen)}
    loader = DeviceNeighborLoader(csc.offsets, csc.indices, node_attrs=attrs, input_nodes=torch.arange(min(n, 50_000)),
                                  fanout=[10, 10, 5], batch_size=1024, shuffle=True, device="cpu", seed=0)
    batch = next(iter(loader))
    payload: dict[str, Any] = {"schema": "cudnn-gnn/sampled_step_ops/1", "environment": environment(torch.device("cpu")),
                               "short_rows": not args.no_short_rows, "graph": {"nodes": n, "edges": e}, "batch": {
                                   "nodes": int(batch.num_nodes), "edges": int(batch.edge_index.shape[1]),
                                   "num_sampled_nodes": list(batch.num_sampled_nodes),
                                   "num_sampled_edges": list(batch.num_sampled_edges)}, "models": {}}
    print(f"batch: {payload['batch']['nodes']:,} nodes, {payload['batch']['edges']:,} edges", flush=True)
    for name in ("gat", "pyg-gat"):
        torch.manual_seed(0)
        model = OgbGAT(name, 128, 128, 172, layers=3, heads=4, out_heads=4, dropout=0.5, norm=False,
                       activation="elu", backend="triton")

        def step(model: OgbGAT = model) -> None:
            with torch.autocast("cpu", torch.bfloat16, enabled=args.precision == "bf16"):
                out = model(batch.x, batch.edge_index, None, batch.num_sampled_nodes, batch.num_sampled_edges,
                            sampled=True)
            out[: batch.batch_size].float().sum().backward()

        with stubbed_launches():
            step()
            with _Count(by_caller=True) as count:
                step()
        rec = {"aten_ops": sum(count.ops.values()), "kernel_ops": count.kernel_ops,
               "by_op": dict(count.ops.most_common(40)), "by_caller": dict(count.callers.most_common(30)),
               "kernel_ops_by_caller": dict(count.kernel_callers.most_common(30)),
               "kernel_ops_by_caller_and_op": dict(count.kernel_by_caller_op.most_common(80))}
        payload["models"][name] = rec
        print(f"{name}: {rec['aten_ops']} aten ops a step, {rec['kernel_ops']} of them launching kernels; "
              "by caller (all / launching):", flush=True)
        for where, k in list(rec["by_caller"].items())[:14]:
            print(f"    {k:5d} {count.kernel_callers[where]:5d}  {where}", flush=True)
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
