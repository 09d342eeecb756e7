"""Registers and spills of our Triton kernels, compiled ahead of time for a GPU this machine need not have.

A kernel's registers are allocated for its largest tile, so the block size sets how many programs fit on an SM
(why the kernels walk every row in one block size). This compiles the kernels of
``cudnn_gnn/backends/triton/kernels/`` with the installed Triton for ``--arch`` (default ``sm_90a``, the H200)
through ``triton.compile`` (no GPU needed: Triton lowers to PTX on any host), runs the ``ptxas`` Triton ships with
``-v`` on the PTX (both in ``_ahead_of_time.py``), and reports per kernel and launch shape the registers a thread,
the spill bytes and the global loads by width, at :func:`launch_shape`'s shape (or every shape of ``--grid``).
Pointer arguments and the head width are marked divisible by 16, as Triton's JIT specialises them for torch's
allocations and widths such as 32. ``--i64``: the offset width the kernels are compiled for (their ``I64``
constexpr, :func:`~cudnn_gnn.backends.triton.tuning.int64_offsets`): ``false`` (the default), int32, what a call
below 2**31 elements a tensor runs (but on the tiles where
:func:`~cudnn_gnn.backends.triton.tuning.kernel_int64_offsets` gives a kernel int64); ``true``, int64; ``both``.
``compile_check.py`` compiles the variants that launches take instead.

The device's Triton matters (torch 2.11 ships 3.6; this repository's CPU CI 3.9): register allocation differs
between versions, so run it with the Triton the GPU runs, e.g. in a venv with ``pip install torch==2.13.0
triton==3.6.0 numpy``::

    PYTHONPATH=. python benchmarks/investigations/kernel_registers.py [--cases arxiv,proteins,products,sampled]
        [--kernels fwd,dst,src,gat_src] [--grid 4,8,16,32x1,2,4] [--i64 false|true|both] [--out kernel_registers.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)  # compiled, never interpreted: read when the kernels are decorated, below
import triton  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ahead_of_time import compile_ptx, ptxas_usage  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from cudnn_gnn.backends.triton import tuning  # noqa: E402
from cudnn_gnn.backends.triton.kernels import backward_dst, backward_src, forward, gat_backward  # noqa: E402
from cudnn_gnn.backends.triton.launch import CachedLaunch  # noqa: E402

FEATURE_PTRS = {"x_src_ptr", "x_dst_ptr", "edge_ptr", "ew_ptr", "attw_ptr", "dout_ptr", "dx_dst_ptr", "dx_src_ptr",
                "out_ptr"}
"""Pointers to tensors in the layer's dtype; the rest hold int32 indices (:data:`INDEX_PTRS`) or float32 data."""
INDEX_PTRS = {"work_ptr", "indices_ptr", "map_ptr", "rev_to_csc_ptr", "dst_index_ptr", "rev_dst_ptr", "offsets_ptr"}


def _jitted(kernel: Any) -> Any:
    """The ``triton.JITFunction`` of a launched kernel (the module's kernels are wrapped by ``CachedLaunch``)."""
    return kernel.fn if isinstance(kernel, CachedLaunch) else kernel


KERNELS = {
    "fwd": (_jitted(forward._fwd_kernel), dict(RETURN_ATT=False)),
    "dst": (_jitted(backward_dst._bwd_dst_kernel), dict(HAS_DATT=False, ONLY_DELTA=False)),
    "src": (_jitted(backward_src._bwd_src_kernel), dict(REV_DST=True)),
    "gat_src": (_jitted(gat_backward._bwd_gat_src_kernel), dict(REV_DST=True, HAS_DATT=False)),
}
"""Launch-shape kernel name -> (jitted kernel, the constexprs of the case that are not shape or graph flags)."""

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_layers import PRESETS  # noqa: E402


def _preset_case(name: str) -> dict[str, Any]:
    """Heads, width, dtypes, edge features and layers of ``bench_layers.py``'s preset ``name`` (its first layer)."""
    p = PRESETS[name]
    c, heads, _ = p.stack[0]
    dtypes = tuple(d for d in p.dtypes or ("fp32", "bf16") if d in ("fp32", "bf16"))
    return dict(heads=heads, c=c, dtypes=dtypes, edge=p.graph.edge_dim > 0, whole=False,
                gat_only=tuple(p.layers) == ("GAT",))


CASES: dict[str, dict[str, Any]] = {
    **{name: _preset_case(name) for name in ("arxiv", "proteins", "products")},
    # examples/papers100m.py's sampled model (--heads 4 --hidden 128, bf16): blocks rebuilt every call, rows whole
    "sampled": dict(heads=4, c=128, dtypes=("bf16",), edge=False, whole=True, gat_only=True),
}


def compile_kernel(fn: Any, dtype: str, consts: dict[str, Any], num_warps: int, arch: str) -> dict[str, Any]:
    """Compile ``fn`` with ``consts`` for ``arch``; registers, spills and global loads of the result."""
    sig: dict[str, str] = {}
    for n in fn.arg_names:
        if n in consts:
            sig[n] = "constexpr"
        elif n in FEATURE_PTRS:
            sig[n] = "*" + dtype
        elif n in INDEX_PTRS:
            sig[n] = "*i32"
        elif n.endswith("_ptr"):
            sig[n] = "*fp32"
        else:
            sig[n] = "fp32" if n == "alpha" else "i32"
    attrs: dict[tuple[int, ...], Any] = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in fn.arg_names
             if sig[n].startswith("*") or n == "C"}
    ptx = compile_ptx(fn, sig, {(fn.arg_names.index(n),): v for n, v in consts.items()}, attrs,
                      {"num_warps": num_warps}, arch)
    usage = ptxas_usage(ptx, arch)
    return {"registers": usage["registers"], "spill_store_bytes": usage["spill_store_bytes"],
            "global_loads": dict(collections.Counter(re.findall(r"ld\.global[a-z0-9.]*", ptx))),
            "ptxas_error": usage["ptxas_error"]}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--kernels", default=",".join(KERNELS), help="comma list among " + ", ".join(KERNELS))
    ap.add_argument("--grid", default=None,
                    help="BLOCK_E list x num_warps list, e.g. 4,8,16,32x1,2,4: compile every shape of the grid with "
                         "instead of launch_shape's (candidates for a sweep on the device)")
    ap.add_argument("--i64", choices=("false", "true", "both"), default="false",
                    help="the kernels' offset width (I64): false, int32, as a call of fewer than 2**31 elements a "
                         "tensor runs them (the default); true, int64; both")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        spec = CASES[case]
        for v2 in (False,) if spec.get("gat_only") else (False, True):
            for dtype in spec["dtypes"]:
                elem = 4 if dtype == "fp32" else 2
                # the kernels a step launches: GAT's one-gather backward on a static graph, the two-gather one on
                # sampled blocks and for GATv2 (cudnn_gnn.backends.triton.gat_one_gather)
                names = ("fwd", "gat_src") if not v2 and not spec["whole"] else ("fwd", "dst", "src")
                for kname in (n for n in names if n in args.kernels.split(",")):
                    fn, extra = KERNELS[kname]
                    block_e, hg, block_c, warps = tuning.launch_shape(kname, spec["heads"], spec["c"], v2, elem)
                    if args.grid is None:  # launch_shape's shape
                        shapes = [(block_e, warps)]
                    else:
                        edges, warp_list = args.grid.split("x")
                        shapes = [(int(b), int(w)) for b in edges.split(",") for w in warp_list.split(",")]
                    widths = {"false": (False,), "true": (True,), "both": (False, True)}[args.i64]
                    for (block_e, warps), i64 in ((shape, i64) for shape in shapes for i64 in widths):
                        consts = dict(V2=v2, HAS_MAP=spec["edge"], HAS_EDGE=spec["edge"], DE=0, HAS_MASK=False, ACT=1,
                                      WHOLE=spec["whole"], HG=hg, BLOCK_C=block_c, BLOCK_E=block_e, I64=i64, **extra)
                        consts.update(H=spec["heads"], C=spec["c"])  # where the kernel takes them as constexprs
                        constexprs = {fn.arg_names[i] for i in fn.constexprs}
                        consts = {n: v for n, v in consts.items() if n in constexprs}
                        rec = compile_kernel(fn, dtype, consts, warps, args.arch)
                        row = {"case": case, "layer": "GATv2" if v2 else "GAT", "dtype": dtype, "kernel": kname,
                               "BLOCK_E": block_e, "num_warps": warps, "I64": i64, "triton": triton.__version__,
                               "arch": args.arch, **rec}
                        rows.append(row)
                        print(f"{case:8s} {row['layer']:5s} {dtype} {kname:7s} BLOCK_E {block_e:2d} "
                              f"warps {warps} {'int64' if i64 else 'int32'}: {rec['registers']} registers, "
                              f"{rec['spill_store_bytes']} B spilled", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
