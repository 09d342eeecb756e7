"""Find where cuDNN's GNN kernels stop being safe with int32 graph indices (run on a GPU).

Each case calls the raw frontend (``cudnn.gnn.mha_gat`` / ``mha_gat_v2``, bypassing cudnn-gnn's guard) with
int32 indices in a fresh subprocess, forward and backward, because an illegal memory access kills the whole
CUDA context; then the same call with int64 indices, so that a launch that does not crash but computes the wrong
answer shows up as a large ``rel_diff_*_vs_int64`` (bf16 inputs; the backward uses atomics, so ~1e-2 is noise).
Prints one JSON record per case; ``--out`` writes them all. The guard in
``cudnn_gnn/backends/cudnn.py`` (NODE_ELEMS_LIMIT, EDGE_ELEMS_LIMIT) is set from these results with a margin.

    python benchmarks/investigations/probe_int32_boundary.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, for _bench_common

from _bench_common import write_json  # noqa: E402

CHILD = r"""
import sys, torch, cudnn.gnn as cg
import cudnn_gnn
n, d, e, v2, det = (int(a) for a in sys.argv[1:6])
i = torch.arange(e, device='cuda')
ei = torch.stack([(i * 7 + 3) % n, i % n])
g = cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n, index_dtype=torch.int32, validate=False)
def run(fg):
    if det:
        fg = fg.with_reverse_csc()
    xx = x.detach().clone().requires_grad_()
    ww = w.detach().clone().requires_grad_()
    if v2:
        out = cg.mha_gat_v2(fg, xx, ww, num_heads=4, deterministic=bool(det), high_precision_grad=True)
    else:
        out = cg.mha_gat(fg, xx, ww, num_heads=4, deterministic=bool(det), high_precision_dgrad=True,
                         high_precision_wgrad=True)
    (out.float() * gout).sum().backward()
    torch.cuda.synchronize()
    return out.float(), xx.grad.float()
torch.manual_seed(0)
x = torch.randn(n, d, device='cuda', dtype=torch.bfloat16)
w = torch.randn(d if v2 else 2 * d, device='cuda', dtype=torch.bfloat16) * 0.1
gout = torch.randn(n, d, device='cuda')
o32, g32 = run(cg.CscGraph(offsets=g.offsets, indices=g.indices, num_src_nodes=n, map_csc_to_coo=g.map_csc_to_coo))
print("INT32_OK", flush=True)
o64, g64 = run(cg.CscGraph(offsets=g.offsets.long(), indices=g.indices.long(), num_src_nodes=n,
                           map_csc_to_coo=g.map_csc_to_coo.long()))
# int32 must give the int64 answer (atomics make the backward order-dependent: compare relative to scale)
rel = lambda a, b: float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
print("OK", rel(o32, o64), rel(g32, g64), flush=True)
"""

D = 256
WRONG = 0.05  # relative difference to int64 above which the int32 result counts as wrong (bf16, atomics ~1e-2)
CASES = [
    # (label, nodes, edges, v2, deterministic)
    ("N*D=2^31-2^16", 2**23 - 256, 2_000_000, 0, 0),
    ("N*D=2^31+2^16", 2**23 + 256, 2_000_000, 0, 0),
    ("N*D=1.5*2^30", 3 * 2**21, 2_000_000, 0, 0),
    ("E*D=2^31+2^20", 200_000, 2**23 + 4096, 0, 0),
    ("E*D=2^32-2^20", 200_000, 2**24 - 4096, 0, 0),
    ("E*D=2^32+2^20", 200_000, 2**24 + 4096, 0, 0),
    ("v2 E*D=2^31-2^20", 200_000, 2**23 - 4096, 1, 0),
    ("v2 E*D=2^31+2^20", 200_000, 2**23 + 4096, 1, 0),
    ("v2 E*D=2^32-2^20", 200_000, 2**24 - 4096, 1, 0),
    ("det E*D=2^31-2^20", 200_000, 2**23 - 4096, 0, 1),
    ("det E*D=2^31+2^20", 200_000, 2**23 + 4096, 0, 1),
    ("det E*D=2^32-2^20", 200_000, 2**24 - 4096, 0, 1),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    records = []
    for label, n, e, v2, det in CASES:
        t0 = time.time()
        try:
            r = subprocess.run([sys.executable, "-c", CHILD, str(n), str(D), str(e), str(v2), str(det)],
                               capture_output=True, text=True, timeout=args.timeout)
            last = (r.stdout.strip().splitlines() or [""])[-1].split()
            ran = r.returncode == 0 and last[:1] == ["OK"]
            rel_out, rel_grad = (float(last[1]), float(last[2])) if ran else (None, None)
            # safe = no crash and the int64 answer (an N*D past 2**31 ran and returned 87% errors on the H200)
            ok = ran and max(rel_out or 0.0, rel_grad or 0.0) < WRONG
            crashed_in = "" if ok else ("int32 (wrong numbers)" if ran else
                                        "int64 (after int32 ran)" if "INT32_OK" in r.stdout else "int32")
            err = "" if ok else ("int32 result differs from int64" if ran
                                 else (r.stderr.strip().splitlines() or ["?"])[-1][:300])
        except subprocess.TimeoutExpired:
            ok, err, rel_out, rel_grad, crashed_in = False, "timeout", None, None, "timeout"
        rec = dict(case=label, nodes=n, edges=e, dim=D, v2=bool(v2), deterministic=bool(det),
                   node_elems=n * D, edge_elems=e * D, ok=ok, error=err, failed_in=crashed_in,
                   rel_diff_out_vs_int64=rel_out, rel_diff_grad_x_vs_int64=rel_grad, seconds=round(time.time() - t0, 1))
        print(json.dumps(rec), flush=True)
        records.append(rec)
    if args.out:
        write_json(args.out, records)


if __name__ == "__main__":
    main()
