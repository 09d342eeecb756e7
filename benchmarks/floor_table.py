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
gathered tensor fits in half of L2). A second floor (*graph order*, :func:`graph_rates`) times the same gather kernel
over a node table in the case graph's own orders (each CSC edge's source, as the forward gathers; each out-edge's
destination in reverse-CSC order, as the source pass gathers) and takes that for the per-edge node-table streams:
the reuse a power-law graph offers (its hubs' rows stay in L2), which random rows do not; a kernel can beat the
first floor, not the second (short of reading less). Its bytes are counted two ways (:func:`layer_bytes`): *as coded*, what its
loads and stores move (a gathered or scattered row of fewer than 32 bytes costs a 32-byte sector; a gathered row
is read once per edge), and *compulsory*, each input read once and each output written once.

Output: per case and dtype a table per kernel (bytes compulsory and as coded, time per step, both floors and the
fraction of each), the microbenchmark's rates (measured once a run), JSON with everything (``--out``) and markdown (``--md``).
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
    bytes, table bytes, order)`` read (or scattered) one row a place, and the ``compulsory`` bytes. ``order``: the
    graph order in which a per-edge stream walks a node table (``"csc"``: each CSC edge's source, as the forward
    gathers; ``"rev"``: each out-edge's destination in reverse-CSC order, as the source pass gathers), or None
    (rows at random places)."""

    streamed: float = 0.0
    gathered: tuple[tuple[float, float, float, str | None], ...] = ()
    compulsory: float = 0.0

    def as_coded(self) -> float:
        return self.streamed + sum(rows * _sectors(row) for rows, row, _, _ in self.gathered)

    def add(self, other: KernelBytes) -> KernelBytes:
        return KernelBytes(self.streamed + other.streamed, self.gathered + other.gathered,
                           self.compulsory + other.compulsory)


def layer_bytes(layer: Layer, nodes: int, edges: int, elem: int, index: int = 4, *,
                dropout: bool = False) -> dict[str, KernelBytes]:
    """The traffic of each Triton kernel of one GAT layer's forward and one-gather backward (homogeneous graph, no
    edge features), ``elem`` the features' bytes an element, ``index`` the graph's. The per-head output is float32
    where heads are averaged (the op's own per-head output). ``dropout``: counter-based dropout (no mask read), whose
    forward writes the keep flags ``uint8 [E, H]`` in CSC order and whose source pass reads them, one ``H``-byte row
    an out-edge at its CSC position."""
    n, e, h, d = nodes, edges, layer.heads, layer.heads * layer.channels
    f = 4
    out_elem = elem if layer.concat else f
    x, scores, rows = n * d * elem, n * h * f, (n + 1) * index
    flags = e * h if dropout else 0
    fwd = KernelBytes(
        # offsets, indices, score_dst, out, lse (and the keep flags)
        streamed=rows + e * index + scores + n * d * out_elem + scores + flags,
        gathered=((e, d * elem, x, "csc"), (e, h * f, scores, "csc")),  # x_j and score_src_j per edge
        compulsory=rows + e * index + x + 2 * scores + n * d * out_elem + scores + flags)
    # the delta pass reads dout, out, score_dst and lse and writes the destinations' record (score_dst, lse, delta,
    # padding: 4 H floats a row)
    delta = KernelBytes(streamed=2 * n * d * out_elem + 2 * scores + 4 * scores,
                        compulsory=2 * n * d * out_elem + scores)
    # the source pass: x_j and score_src_j once per source; per out-edge dout_i and the record of i gathered, dz
    # written at the edge's CSC position (and the keep flags read there)
    src = KernelBytes(
        streamed=rows + 2 * e * index + x + scores + x + scores,  # work, rev_to_csc, rev_dst, x, score_src, dx, dss
        gathered=((e, d * out_elem, n * d * out_elem, "rev"), (e, 4 * h * f, 4 * scores, "rev"),
                  (e, h * f, e * h * f, None)) + (((e, h, flags, None),) if dropout else ()),
        compulsory=rows + 2 * e * index + 2 * x + 2 * scores + n * d * out_elem + 3 * scores + e * h * f + flags)
    # the segmented sum reads each edge's row index beside dz (the offsets would do: rows, not edges, compulsory)
    dst = KernelBytes(streamed=e * index + e * h * f + scores, compulsory=rows + e * h * f + scores)
    score = KernelBytes(streamed=x + 2 * scores, compulsory=x + 2 * scores)
    # the node scores' backward also reads the offsets, to complete the destination sum's rows (its crossing rows'
    # runs: a few per block of the sum, left out)
    score_bwd = KernelBytes(streamed=rows + x + 2 * scores + 2 * x, compulsory=x + 2 * scores + 2 * x)
    return dict(zip(KERNELS, (score, fwd, delta, src, dst, score_bwd)))


def _row_size(row: float) -> tuple[int, int]:
    """``(measured row size, pieces)``: ``row`` bytes rounded up to a measured size; a row past 512 bytes as that
    many 512-byte rows."""
    return next((s for s in ROW_SIZES if s >= row), ROW_SIZES[-1]), math.ceil(row / ROW_SIZES[-1])


def floor_us(kb: KernelBytes, rates: dict[str, Any], graph_order: bool = False) -> float:
    """A kernel's floor: streamed bytes at the copy rate, plus each gathered stream at the measured time of a row of
    its size (:func:`_row_size`): a random row from DRAM, or from L2 where its table fits in half of it; with
    ``graph_order``, a stream that walks a node table in a graph order at the time measured in that order on the
    case's graph (:func:`graph_rates`: the reuse a real graph offers, which random rows do not)."""
    t = kb.streamed / rates["copy_bytes_per_us"]
    for count, row, table, order in kb.gathered:
        size, pieces = _row_size(row)
        if graph_order and order is not None:
            t += count * pieces * rates["graph"][order][str(size)]
            continue
        place = "l2" if table <= rates["l2_bytes"] / 2 else "dram"
        t += count * pieces * rates[place][str(size)]
    return t


def _gather_kernel() -> Any:
    """A Triton kernel that sums the rows ``table[idx[e]]`` (one program per ``BLOCK`` indices, the rows' sum written
    once): what a gather of one row per edge costs, and nothing else."""
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

    return gather_sum


def _us_a_row(rows: int, row_bytes: int, idx: torch.Tensor, repeats: int) -> float:
    """Microseconds a row of :func:`_gather_kernel` over a float32 table of ``rows`` rows of ``row_bytes``, in the
    order of ``idx`` (int32)."""
    w = row_bytes // 4
    table = torch.randn(max(1, rows), w, device=idx.device)
    out = torch.empty(-(-idx.numel() // 64), w, device=idx.device)
    kernel = _gather_kernel()

    def run() -> None:
        kernel[(out.shape[0],)](table, idx, out, idx.numel(), W=w, BLOCK=64, num_warps=4)

    return _time_us(run, idx.device, repeats) / idx.numel()


def gather_rates(device: torch.device, quick: bool) -> dict[str, Any]:
    """The measured floor ingredients: ``{"dram" | "l2": {row bytes: us a row}, "copy_bytes_per_us", "l2_bytes"}``:
    :func:`_gather_kernel` over random rows of a DRAM-resident table (8x L2, at least 1 GiB) and an L2-resident one
    (a quarter of L2), and a device-to-device copy."""
    props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
    l2 = int(getattr(props, "L2_cache_size", 50 * 2**20)) if props is not None else 50 * 2**20
    count = 4096 if quick else 1 << 24
    rates: dict[str, Any] = {"l2_bytes": l2, "dram": {}, "l2": {}}
    for place, table_bytes in (("dram", 4096 * 64 if quick else max(8 * l2, 2**30)), ("l2", l2 // 4)):
        for row in ROW_SIZES:
            rows = max(1, table_bytes // row)
            idx = torch.randint(0, rows, (count,), device=device, dtype=torch.int32)
            rates[place][str(row)] = _us_a_row(rows, row, idx, 1 if quick else 10)
    a = torch.empty((2**24 if quick else 2**28) // 4, device=device)
    b = torch.empty_like(a)
    rates["copy_bytes_per_us"] = 2 * a.numel() * 4 / _time_us(lambda: b.copy_(a), device, 1 if quick else 10)
    return rates


def graph_rates(graph: Any, quick: bool) -> dict[str, dict[str, float]]:
    """``{"csc" | "rev": {row bytes: us a row}}``: :func:`_gather_kernel` over a node table of ``graph`` (a
    :class:`~cudnn_gnn.CscGraph`) in its two gather orders, each CSC edge's source (the forward's) and each
    out-edge's destination in reverse-CSC order (the source pass's)."""
    _, rev_to_csc = graph.reverse_csc()
    orders = {"csc": graph.indices, "rev": graph.dst_index.long()[rev_to_csc.long()]}
    return {name: {str(row): _us_a_row(graph.num_src_nodes, row, idx.to(torch.int32), 1 if quick else 10)
                   for row in ROW_SIZES} for name, idx in orders.items()}


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


def case_graph(device: torch.device, quick: bool) -> Any:
    """The cases' graph as the layers run it: ogbn-arxiv-shaped (tiny with ``quick``), a self-loop a node."""
    from cudnn_gnn.graph import CscGraph

    g = make_graph(TINY if quick else ARXIV, seed=0, device=device)
    loops = torch.arange(g.num_nodes, device=device)
    return CscGraph.from_edge_index(torch.cat([g.edge_index, torch.stack([loops, loops])], 1), num_nodes=g.num_nodes)


def kernel_us(case: str, dtype: torch.dtype, graph: Any, steps: int) -> dict[str, float]:
    """``{kernel: us a step}`` of the case's layer stack on ``graph``, forward and backward, under the profiler
    (kernel names as Triton's; empty on CPU, where the kernels run in Triton's interpreter, not as CUDA kernels)."""
    import cudnn_gnn

    layers, p = CASES[case]
    device, n = graph.offsets.device, graph.num_src_nodes
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
    return {k: us for k, (us, _) in table.items()}


def table_rows(case: str, dtype: str, us: dict[str, float], nodes: int, edges: int,
               rates: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kernel: bytes (as coded, compulsory) over the case's layers, time, the two floors (random rows;
    the graph's own gather orders, where ``rates`` has them) and the fraction of each."""
    layers, p = CASES[case]
    total: dict[str, KernelBytes] = {}
    for ly in layers:
        for name, kb in layer_bytes(ly, nodes, edges, DTYPES[dtype].itemsize, dropout=p > 0).items():
            total[name] = total[name].add(kb) if name in total else kb
    rows = []
    for name in KERNELS:
        kb = total[name]
        times = [v for k, v in us.items() if k.startswith(name)]
        t = sum(times) if times else None
        floor = floor_us(kb, rates)
        graph_floor = floor_us(kb, rates, graph_order=True) if "graph" in rates else None
        rows.append({"kernel": name, "bytes_as_coded": kb.as_coded(), "bytes_compulsory": kb.compulsory,
                     "us": t, "floor_us": floor, "fraction_of_floor": None if not t else floor / t,
                     "graph_floor_us": graph_floor,
                     "fraction_of_graph_floor": None if not t or graph_floor is None else graph_floor / t})
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [f"{result['case']}, {result['dtype']}, {result['gpu']}: {result['nodes']:,} nodes, "
             f"{result['edges']:,} edges (self-loops included)", "",
             "| kernel | MB as coded | MB compulsory | us a step | floor us, random rows | of it "
             "| floor us, graph order | of it |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def cell(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for r in result["rows"]:
        lines.append(f"| `{r['kernel']}` | {r['bytes_as_coded'] / 1e6:.1f} | {r['bytes_compulsory'] / 1e6:.1f} "
                     f"| {cell(r['us'], '.1f')} | {r['floor_us']:.1f} | {cell(r['fraction_of_floor'], '.0%')} "
                     f"| {cell(r['graph_floor_us'], '.1f')} | {cell(r['fraction_of_graph_floor'], '.0%')} |")
    rates = result["rates"]
    places = [p for p in ("dram", "l2") if p in rates] + [f"graph {o}" for o in rates.get("graph", {})]
    row_ns = {**{p: rates[p] for p in ("dram", "l2")}, **{f"graph {o}": v for o, v in rates.get("graph", {}).items()}}
    lines += ["", f"Copy: {rates['copy_bytes_per_us'] / 1e6:.2f} TB/s; a row (ns): " + "; ".join(
        f"{place} " + ", ".join(f"{row} B {row_ns[place][row] * 1e3:.2f}" for row in row_ns[place])
        for place in places), ""]
    return "\n".join(lines)


def add_case_arguments(ap: ArgumentParser, *, cases: list[str], dtypes: list[str]) -> None:
    """The flags of a script that times the cases' kernels: ``--case`` and ``--dtype`` (defaults ``cases``,
    ``dtypes``), ``--steps``, ``--quick`` (:func:`run_device`), ``--out`` (JSON) and ``--md``."""
    ap.add_argument("--case", nargs="+", default=cases, choices=sorted(CASES))
    ap.add_argument("--dtype", nargs="+", default=dtypes, choices=sorted(DTYPES))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="CPU smoke run: tiny sizes, Triton's interpreter")
    ap.add_argument("--out", default=None, help="JSON output path")
    ap.add_argument("--md", default=None, help="markdown output path")


def run_device(ap: ArgumentParser, quick: bool) -> torch.device:
    """The GPU, or with ``quick`` the CPU under Triton's interpreter (``TRITON_INTERPRET=1``, else a usage error)."""
    if quick:
        if os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("--quick runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        ap.error("a CUDA GPU is needed (or --quick for the CPU smoke run)")
    return torch.device("cuda")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(prog="floor_table.py", description=__doc__.split("\n\n")[0])
    add_case_arguments(ap, cases=["step"], dtypes=["fp32"])
    args = ap.parse_args(argv)
    check_outputs(ap, {"--out": args.out, "--md": args.md})
    device = run_device(ap, args.quick)
    rates = gather_rates(device, args.quick)
    graph = case_graph(device, args.quick)
    rates["graph"] = graph_rates(graph, args.quick)
    nodes, edges = graph.num_src_nodes, graph.num_edges
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (interpreter)"
    results = []
    for case in args.case:
        for dtype in args.dtype:
            us = kernel_us(case, DTYPES[dtype], graph, 1 if args.quick else args.steps)
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
