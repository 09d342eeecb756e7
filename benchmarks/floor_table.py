"""Each Triton kernel of a GAT layer stack against its floor on this GPU: bytes, time, fraction of the floor.

    python benchmarks/floor_table.py --case step preset --dtype fp32 bf16 --out floor.json --md floor.md
    python benchmarks/floor_table.py --quick          # CPU smoke run: tiny sizes, kernels under Triton's interpreter

Cases, on the ogbn-arxiv-shaped synthetic graph (169,343 nodes, 2,315,598 edges plus a self-loop a node, as the
layers run it): ``step``, the two GAT layers of the training step of ``bench_training.py`` (128 -> 8 x 8
concatenated, 64 -> 1 x 40 averaged, attention dropout 0.6 drawn in-kernel); ``preset``, the arxiv layer preset of
``bench_layers.py`` (128 -> 8 x 32, no dropout). Each layer is ``Linear`` then :func:`cudnn_gnn.gat` (the Triton
backend, GAT's one-gather backward), forward and backward, profiled over ``--steps`` steps.

**The floor.** A gather microbenchmark (:func:`gather_rates`, a Triton kernel that sums random rows of a table) measures
how long a random row takes on this GPU, for rows of 64, 128, 256 and 512 bytes, from a table far larger than L2
(DRAM-resident) and from one that fits in it (L2-resident); a device-to-device copy measures the streaming rate.
A kernel's floor is its streamed bytes over the copy rate plus, for each stream of rows it gathers per edge, the
edges times the measured time of a row of that size (rounded up to 64 bytes; from the L2-resident table where the
gathered tensor fits in half of L2). Its bytes are counted two ways (:func:`layer_bytes`): *as coded*, what its
loads and stores move (a gathered or scattered row of fewer than 32 bytes costs a 32-byte sector; a gathered row
is read once per edge), and *compulsory*, each input read once and each output written once.

Output: per case and dtype a table per kernel (bytes compulsory and as coded, time per step, floor, fraction of the
floor), the microbenchmark's rates (measured once a run), JSON with everything (``--out``) and markdown (``--md``).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import environment, kernel_table, synchronize, write_json  # noqa: E402
from _graphs import GraphSpec, make_graph  # noqa: E402

from cudnn_gnn.apps._cli import ArgumentParser, check_outputs  # noqa: E402
from cudnn_gnn.apps._util import write_text  # noqa: E402

SECTOR = 32
ROW_SIZES = (64, 128, 256, 512)
ARXIV = GraphSpec(169_343, 2_315_598, exponent=0.6, ogbn="ogbn-arxiv")
TINY = GraphSpec(200, 1_500, exponent=0.6)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Layer:
    """One GAT layer: ``in_channels -> heads x channels``, concatenated or averaged."""

    in_channels: int
    heads: int
    channels: int
    concat: bool


CASES: dict[str, tuple[tuple[Layer, ...], float]] = {
    "step": ((Layer(128, 8, 8, True), Layer(64, 1, 40, False)), 0.6),
    "preset": ((Layer(128, 8, 32, True),), 0.0),
}
KERNELS = ("_node_scores_kernel", "_fwd_kernel", "_bwd_gat_delta_kernel", "_bwd_gat_src_kernel",
           "_bwd_gat_dst_kernel", "_node_scores_bwd_kernel")


def _sectors(row_bytes: float) -> float:
    """What a row read or written at a random place costs: whole 32-byte sectors."""
    return math.ceil(row_bytes / SECTOR) * SECTOR


@dataclass
class KernelBytes:
    """One kernel's traffic: ``streamed`` bytes (read or written in order), ``gathered`` streams ``(rows, row
    bytes, table bytes)`` read (or scattered) one row a place, and the ``compulsory`` bytes."""

    streamed: float = 0.0
    gathered: tuple[tuple[float, float, float], ...] = ()
    compulsory: float = 0.0

    def as_coded(self) -> float:
        return self.streamed + sum(rows * _sectors(row) for rows, row, _ in self.gathered)

    def add(self, other: KernelBytes) -> KernelBytes:
        return KernelBytes(self.streamed + other.streamed, self.gathered + other.gathered,
                           self.compulsory + other.compulsory)


def layer_bytes(layer: Layer, nodes: int, edges: int, elem: int, index: int = 4) -> dict[str, KernelBytes]:
    """The traffic of each Triton kernel of one GAT layer's forward and one-gather backward (homogeneous graph, no
    edge features, counter-based dropout: no mask bytes), ``elem`` the features' bytes an element, ``index`` the
    graph's. The per-head output is float32 where heads are averaged (the op's own per-head output)."""
    n, e, h, d = nodes, edges, layer.heads, layer.heads * layer.channels
    f = 4
    out_elem = elem if layer.concat else f
    x, scores, rows = n * d * elem, n * h * f, (n + 1) * index
    fwd = KernelBytes(
        streamed=rows + e * index + scores + n * d * out_elem + scores,  # offsets, indices, score_dst, out, lse
        gathered=((e, d * elem, x), (e, h * f, scores)),  # x_j and score_src_j per edge
        compulsory=rows + e * index + x + 2 * scores + n * d * out_elem + scores)
    delta = KernelBytes(streamed=rows + 2 * n * d * out_elem + scores, compulsory=rows + 2 * n * d * out_elem + scores)
    # the source pass: x_j and score_src_j once per source; per out-edge dout_i, score_dst_i, lse_i, delta_i
    # gathered and dz written at the edge's CSC position
    src = KernelBytes(
        streamed=rows + 2 * e * index + x + scores + x + scores,  # work, rev_to_csc, rev_dst, x, score_src, dx, dss
        gathered=((e, d * out_elem, n * d * out_elem), (e, h * f, scores), (e, h * f, scores), (e, h * f, scores),
                  (e, h * f, e * h * f)),
        compulsory=rows + 2 * e * index + 2 * x + 2 * scores + n * d * out_elem + 3 * scores + e * h * f)
    dst = KernelBytes(streamed=rows + e * h * f + scores, compulsory=rows + e * h * f + scores)
    score = KernelBytes(streamed=x + 2 * scores, compulsory=x + 2 * scores)
    score_bwd = KernelBytes(streamed=x + 2 * scores + 2 * x, compulsory=x + 2 * scores + 2 * x)
    return dict(zip(KERNELS, (score, fwd, delta, src, dst, score_bwd)))


def floor_us(kb: KernelBytes, rates: dict[str, Any]) -> float:
    """A kernel's floor: streamed bytes at the copy rate, each gathered stream at the measured time of a random row
    of its size (rounded up to 64 bytes, at most 512 a row counted as whole 512-byte rows) from DRAM, or from L2
    where its table fits in half of it."""
    t = kb.streamed / rates["copy_bytes_per_us"]
    for count, row, table in kb.gathered:
        place = "l2" if table <= rates["l2_bytes"] / 2 else "dram"
        size = next((s for s in ROW_SIZES if s >= row), ROW_SIZES[-1])
        pieces = math.ceil(row / ROW_SIZES[-1])  # a row past 512 bytes: that many 512-byte rows
        t += count * pieces * rates[place][str(size)]
    return t


def gather_rates(device: torch.device, quick: bool) -> dict[str, Any]:
    """The measured floor ingredients: ``{"dram" | "l2": {row bytes: us a row}, "copy_bytes_per_us", "l2_bytes"}``:
    a Triton kernel sums random rows of a float32 table (one program per 64 rows, the rows' sum written once), from
    a DRAM-resident table (8x L2, at least 1 GiB) and an L2-resident one (a quarter of L2)."""
    import triton
    import triton.language as tl

    @triton.jit
    def gather_sum(table_ptr, idx_ptr, out_ptr, n, W: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        e = pid * BLOCK + tl.arange(0, BLOCK)
        m = e < n
        rows = tl.load(idx_ptr + e, mask=m, other=0).to(tl.int64)
        cols = tl.arange(0, W)
        v = tl.load(table_ptr + rows[:, None] * W + cols[None, :], mask=m[:, None], other=0.0)
        # tl.reduce with the standard combine, not tl.sum (a @triton.jit function, which the interpreter cannot call
        # where triton was imported before TRITON_INTERPRET=1 was set)
        tl.store(out_ptr + pid * W + cols, tl.reduce(v, 0, tl.standard._sum_combine))

    props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
    l2 = int(getattr(props, "L2_cache_size", 50 * 2**20)) if props is not None else 50 * 2**20
    count = 4096 if quick else 1 << 24
    rates: dict[str, Any] = {"l2_bytes": l2, "dram": {}, "l2": {}}
    for place, table_bytes in (("dram", 4096 * 64 if quick else max(8 * l2, 2**30)), ("l2", l2 // 4)):
        for row in ROW_SIZES:
            w = row // 4
            table = torch.randn(max(1, table_bytes // row), w, device=device)
            idx = torch.randint(0, table.shape[0], (count,), device=device, dtype=torch.int32)
            out = torch.empty(triton.cdiv(count, 64), w, device=device)

            def run(table: torch.Tensor = table, idx: torch.Tensor = idx, out: torch.Tensor = out,
                    w: int = w) -> None:
                gather_sum[(out.shape[0],)](table, idx, out, count, W=w, BLOCK=64, num_warps=4)

            rates[place][str(row)] = _time_us(run, device, 1 if quick else 10) / count
            del table, idx, out
    a = torch.empty((2**24 if quick else 2**28) // 4, device=device)
    b = torch.empty_like(a)
    rates["copy_bytes_per_us"] = 2 * a.numel() * 4 / _time_us(lambda: b.copy_(a), device, 1 if quick else 10)
    return rates


def _time_us(fn: Any, device: torch.device, repeats: int) -> float:
    """Median microseconds of ``fn()`` after one warm-up call (CUDA events; a host clock on CPU)."""
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[len(times) // 2]


def kernel_us(case: str, dtype: torch.dtype, device: torch.device, quick: bool, steps: int
              ) -> tuple[dict[str, float], int, int]:
    """``({kernel: us a step}, nodes, edges)`` of the case's layer stack, forward and backward, under the profiler
    (kernel names as Triton's; empty on CPU, where the kernels run in Triton's interpreter, not as CUDA kernels)."""
    import cudnn_gnn
    from cudnn_gnn.graph import CscGraph

    layers, p = CASES[case]
    g = make_graph(TINY if quick else ARXIV, seed=0, device=device)
    n = g.num_nodes
    loops = torch.arange(n, device=device)
    graph = CscGraph.from_edge_index(torch.cat([g.edge_index, torch.stack([loops, loops])], 1), num_nodes=n)
    gen = torch.Generator(device=device).manual_seed(0)
    x0 = torch.randn(n, layers[0].in_channels, device=device, generator=gen, dtype=dtype)
    lins = [torch.nn.Linear(ly.in_channels, ly.heads * ly.channels, bias=False).to(device, dtype) for ly in layers]
    atts = [(torch.randn(2 * ly.heads * ly.channels, device=device, generator=gen) * 0.1).to(dtype).requires_grad_()
            for ly in layers]

    def step() -> None:
        h = x0
        for ly, lin, att in zip(layers, lins, atts):
            h = cudnn_gnn.gat(graph, lin(h), att, heads=ly.heads, concat=ly.concat, dropout=p, training=p > 0,
                              backend="triton")
            h = torch.nn.functional.elu(h)
        h.float().square().mean().backward()

    for _ in range(2):  # builds, work lists, the reverse CSC
        step()
    table = kernel_table(lambda: [step() for _ in range(steps)], steps, device)
    return {k: us for k, (us, _) in table.items()}, n, graph.num_edges


def table_rows(case: str, dtype: str, us: dict[str, float], nodes: int, edges: int,
               rates: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kernel: bytes (as coded, compulsory) over the case's layers, time, floor, fraction of it."""
    layers, _ = CASES[case]
    total: dict[str, KernelBytes] = {}
    for ly in layers:
        for name, kb in layer_bytes(ly, nodes, edges, DTYPES[dtype].itemsize).items():
            total[name] = total[name].add(kb) if name in total else kb
    rows = []
    for name in KERNELS:
        kb = total[name]
        t = next((v for k, v in us.items() if k.startswith(name)), None)
        floor = floor_us(kb, rates)
        rows.append({"kernel": name, "bytes_as_coded": kb.as_coded(), "bytes_compulsory": kb.compulsory,
                     "us": t, "floor_us": floor, "fraction_of_floor": None if not t else floor / t})
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [f"{result['case']}, {result['dtype']}, {result['gpu']}: {result['nodes']:,} nodes, "
             f"{result['edges']:,} edges (self-loops included)", "",
             "| kernel | MB as coded | MB compulsory | us a step | floor us | of floor |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        us = "-" if r["us"] is None else f"{r['us']:.1f}"
        frac = "-" if r["fraction_of_floor"] is None else f"{r['fraction_of_floor']:.0%}"
        lines.append(f"| `{r['kernel']}` | {r['bytes_as_coded'] / 1e6:.1f} | {r['bytes_compulsory'] / 1e6:.1f} | {us} "
                     f"| {r['floor_us']:.1f} | {frac} |")
    rates = result["rates"]
    lines += ["", f"Copy: {rates['copy_bytes_per_us'] / 1e6:.2f} TB/s; a random row (ns): " + "; ".join(
        f"{place} " + ", ".join(f"{row} B {rates[place][row] * 1e3:.2f}" for row in rates[place])
        for place in ("dram", "l2")), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(prog="floor_table.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", nargs="+", default=["step"], choices=sorted(CASES))
    ap.add_argument("--dtype", nargs="+", default=["fp32"], choices=sorted(DTYPES))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="CPU smoke run: tiny sizes, Triton's interpreter")
    ap.add_argument("--out", default=None, help="JSON output path")
    ap.add_argument("--md", default=None, help="markdown output path")
    args = ap.parse_args(argv)
    check_outputs(ap, {"--out": args.out, "--md": args.md})
    if args.quick:
        if os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("--quick runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1")
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        ap.error("a CUDA GPU is needed (or --quick for the CPU smoke run)")
    else:
        device = torch.device("cuda")
    rates = gather_rates(device, args.quick)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (interpreter)"
    results = []
    for case in args.case:
        for dtype in args.dtype:
            us, nodes, edges = kernel_us(case, DTYPES[dtype], device, args.quick, 1 if args.quick else args.steps)
            results.append({"case": case, "dtype": dtype, "gpu": gpu, "nodes": nodes, "edges": edges,
                            "rates": rates, "rows": table_rows(case, dtype, us, nodes, edges, rates)})
            print(markdown(results[-1]), flush=True)
    out = {"environment": environment(device), "rates": rates, "results": results}
    if args.out:
        write_json(args.out, out)
    if args.md:
        write_text(args.md, "\n".join(markdown(r) for r in results))
    return out


if __name__ == "__main__":
    main()
