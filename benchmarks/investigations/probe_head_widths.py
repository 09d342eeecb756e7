"""Which head shapes (heads x channels, dtype, op, deterministic) cuDNN's GAT / GATv2 kernels launch, forward and
backward, with the library's fallback warning for failed launches turned into an error (so the raw failure is seen) and
without hub splitting, on a 2,000-node random graph.

    python benchmarks/investigations/probe_head_widths.py probe.jsonl            # first survey: both ops, fp32/bf16, no map
    python benchmarks/investigations/probe_head_widths.py probe.jsonl --set gat  # GAT fp32 widths around the failures

``--set gat`` runs each (heads, width) twice: map-less, and with returned attention (the CSC->COO map path).

One JSON line per case; a case that loses the CUDA context restarts the child at the next case. The first child
builds the kernels (``cudnn_gnn.precompile``, minutes on a fresh machine).
"""
import json
import os
import subprocess
import sys
import time

import torch

CASES = []
for op in ("gat", "gatv2"):
    for dt in ("fp32", "bf16"):
        for h, c in [(8, 32), (4, 128), (1, 512), (2, 256), (4, 160), (1, 640), (3, 200), (1, 700), (3, 250),
                     (1, 750), (2, 375), (1, 768), (6, 125), (1, 1000), (4, 256), (1, 1024), (2, 512), (8, 128),
                     (1, 2048), (16, 128), (1, 250), (1, 128), (1, 100), (3, 100), (1, 4096)]:
            CASES.append((op, dt, h, c, False))
        for h, c in [(3, 250), (1, 768), (4, 256), (1, 1024)]:
            CASES.append((op, dt, h, c, True))
CASES = [(*case, False) for case in CASES]  # + map: no
# GAT fp32 around the failing widths (250, 252, 375, 376), with and without the map: a rule for the padding.
GAT_CASES = [("gat", "fp32", h, c, False, m) for m in (False, True) for h in (1, 2, 3, 4)
             for c in (64, 96, 100, 128, 192, 200, 248, 250, 252, 256, 320, 376, 384, 448, 500, 512, 640, 768, 1000)]


def child(start, out, cases):
    import warnings

    import cudnn_gnn

    warnings.filterwarnings("error", "cuDNN's .* failed to launch", RuntimeWarning)  # the raw failure, no fallback
    dev = "cuda"
    if start == 0:
        t = time.time()
        ops = sorted({c[0] for c in cases})
        dts = [torch.float32 if d == "fp32" else torch.bfloat16 for d in sorted({c[1] for c in cases})]
        r = cudnn_gnn.precompile(ops, dts, edge_features=any(c[5] for c in cases))
        print("precompile", round(time.time() - t, 1), r, flush=True)
    n, e = 2000, 20000
    ei = torch.randint(0, n, (2, e), generator=torch.Generator().manual_seed(0)).to(dev)
    graph = cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n)
    for i in range(start, len(cases)):
        op, dt, h, c, det, with_map = cases[i]
        dtype = torch.float32 if dt == "fp32" else torch.bfloat16
        d = h * c
        rec = dict(i=i, op=op, dtype=dt, heads=h, channels=c, dim=d, det=det, map=with_map)
        t = time.time()
        try:
            x = torch.randn(n, d, device=dev, dtype=dtype, requires_grad=True)
            w = (torch.randn(d if op == "gatv2" else 2 * d, device=dev, dtype=dtype) * 0.1).requires_grad_()
            fn = cudnn_gnn.gatv2 if op == "gatv2" else cudnn_gnn.gat
            o = fn(graph, x, w, heads=h, deterministic=det, backend="cudnn", max_degree=None,
                   return_attention=with_map)
            torch.cuda.synchronize()
            rec["fwd"] = "ok"
            (o[0].float().sum() + o[1].sum() if with_map else o.float().sum()).backward()
            torch.cuda.synchronize()
            rec["bwd"] = "ok"
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rec["s"] = round(time.time() - t, 2)
        out.write(json.dumps(rec) + "\n")
        out.flush()
        if "error" in rec:  # is the context still usable?
            try:
                (torch.randn(10, device=dev) * 2).sum().item()
            except Exception:
                sys.exit(3)


def main() -> None:
    path = sys.argv[1]
    which = sys.argv[sys.argv.index("--set") + 1] if "--set" in sys.argv else "all"
    cases = GAT_CASES if which == "gat" else CASES
    if "--child" in sys.argv:
        with open(path, "a") as f:
            child(int(sys.argv[sys.argv.index("--child") + 1]), f, cases)
        sys.exit(0)
    start = 0
    while start < len(cases):
        r = subprocess.run([sys.executable, __file__, path, "--set", which, "--child", str(start)], timeout=400)
        done = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
        start = (done[-1]["i"] + 1) if done else start + 1
        if r.returncode == 0:
            break
    for rec in (json.loads(line) for line in open(path)):
        print(rec["op"], rec["dtype"], rec["heads"], rec["channels"], rec["dim"], "det" if rec["det"] else "",
              "map" if rec.get("map") else "", rec.get("fwd", "-"), rec.get("bwd", "-"), rec.get("error", "")[:150])


if __name__ == "__main__":
    main()
