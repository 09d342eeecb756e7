"""Which offset width makes each GAT kernel fastest: the per-kernel int64 rule against int32 and int64 everywhere.

    python benchmarks/investigations/offsets_rule.py --out offsets_rule.json --md offsets_rule.md       # GPU
    TRITON_INTERPRET=1 python benchmarks/investigations/offsets_rule.py --quick --out /tmp/o.json        # CPU smoke

The kernels compute pointer offsets in int32 where a call's sizes allow (``tuning.int64_offsets``), except where
``tuning.INT64_FASTER_TILES`` lists a kernel's tile: GAT's one-gather source pass on full 256-wide tiles and the
node-score backward on 64-wide ones, where int32 measured slower (an A/B of two trees in one call). This probe times
the same question in one process, over three rules, alternated over ``--rounds`` rounds so that clock and cache drift
fall on all three:

- ``rule``: the library as it ships;
- ``int32``: every kernel int32 where the sizes allow (the table emptied for the run);
- ``int64``: every kernel int64 (the sizes' answer forced to True for the run).

The rules are swapped by replacing the two module attributes for the duration of a measurement (a probe of the
library's rule, not a switch in it). Each measurement is ``floor_table.kernel_us``: the Triton kernels of the
``--case`` layer stacks (the arxiv step's 8 x 8 and 1 x 40 layers with attention dropout, the arxiv preset's 8 x 32
without) forward and backward, microseconds a step under the profiler, on the ogbn-arxiv-shaped graph.

Output: per case, dtype, rule and round the kernels' microseconds (``--out`` JSON), and a markdown table of the
median over rounds per kernel and rule (``--md``).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import floor_table  # noqa: E402
from _bench_common import environment, write_json  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_outputs  # noqa: E402
from cudnn_gnn.apps._util import write_text  # noqa: E402

RULES = ("rule", "int32", "int64")


@contextmanager
def offsets_rule(rule: str) -> Iterator[None]:
    """The library's offset-width rule (``"rule"``), int32 wherever sizes allow (``"int32"``), or int64 everywhere
    (``"int64"``) for the body of the ``with``."""
    from cudnn_gnn.backends.triton import tuning

    table, sizes = tuning.INT64_FASTER_TILES, tuning.int64_offsets
    if rule == "int32":
        tuning.INT64_FASTER_TILES = {}
    elif rule == "int64":
        tuning.int64_offsets = lambda shapes, launch=(): True
    try:
        yield
    finally:
        tuning.INT64_FASTER_TILES, tuning.int64_offsets = table, sizes


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table per case and dtype: each kernel's median microseconds over rounds under each rule, and the rule's
    time against the faster of the other two."""
    out = []
    for case, dtype in dict.fromkeys((r["case"], r["dtype"]) for r in rows):
        sel = [r for r in rows if r["case"] == case and r["dtype"] == dtype]
        out += [f"### {case} {dtype}", "", "| kernel | rule us | int32 us | int64 us | rule / best other |",
                "|---|---:|---:|---:|---:|"]
        for k in floor_table.KERNELS:
            med = {}
            for rule in RULES:
                vals = [sum(v for n, v in r["us"].items() if n.startswith(k)) for r in sel if r["rule"] == rule]
                med[rule] = statistics.median(vals) if vals else float("nan")
            best = min(med["int32"], med["int64"])
            ratio = med["rule"] / best if best > 0 else float("nan")
            out.append(f"| `{k}` | {med['rule']:.1f} | {med['int32']:.1f} | {med['int64']:.1f} | {ratio:.3f} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(prog="offsets_rule.py", description=__doc__.split("\n\n")[0])
    floor_table.add_case_arguments(ap, cases=["step", "preset"], dtypes=["fp32", "bf16"])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    check_outputs(ap, {"--out": args.out, "--md": args.md})
    device = floor_table.run_device(ap, args.quick)
    graph = floor_table.case_graph(device, args.quick)
    steps = 1 if args.quick else args.steps
    rows = []
    for case in args.case:
        for dtype in args.dtype:
            for rnd in range(args.rounds):
                for rule in RULES:
                    with offsets_rule(rule):
                        us = floor_table.kernel_us(case, floor_table.DTYPES[dtype], graph, steps)
                    rows.append({"case": case, "dtype": dtype, "rule": rule, "round": rnd, "us": us})
                    print(f"{case} {dtype} round {rnd} {rule}: " +
                          ", ".join(f"{k} {v:.1f}" for k, v in sorted(us.items())), flush=True)
            print(markdown([r for r in rows if r["case"] == case and r["dtype"] == dtype]), flush=True)
    out = {"environment": environment(device), "rows": rows}
    if args.out:
        write_json(args.out, out)
    if args.md:
        write_text(args.md, markdown(rows))
    return out


if __name__ == "__main__":
    main()
