"""Which segment reduction the reference backend should use over each destination's incoming edges: the
``scatter_reduce`` (max) + ``index_add`` (sum) it uses today, torch's ``segment_reduce`` over the CSC offsets, or
``torch_scatter.segment_csr`` where it is installed (issue #17: keep the faster as the default).

    python benchmarks/investigations/segment_ops.py [--edges 1166243] [--nodes 169343] [--heads 8] [--out seg.json]

Times the two reductions of a segment softmax (max, then sum of exponentials) over ``[E, H]`` float32 values
and the weighted aggregation ``[E, H, C] -> [N, H, C]``, forward and backward, on CUDA where available, else CPU.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(0)
    dst = torch.sort(torch.randint(0, args.nodes, (args.edges,), generator=g))[0].to(dev)
    counts = torch.bincount(dst, minlength=args.nodes)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    logits = torch.randn(args.edges, args.heads, device=dev, requires_grad=True)
    msg = torch.randn(args.edges, args.heads, args.channels, device=dev, requires_grad=True)
    n, h = args.nodes, args.heads

    def index_ops() -> torch.Tensor:  # what backends/reference.py does
        idx = dst.unsqueeze(-1).expand_as(logits)
        m = logits.new_full((n, h), float("-inf")).scatter_reduce(0, idx, logits, "amax", include_self=True).detach()
        e = torch.exp(logits - m.index_select(0, dst))
        z = e.new_zeros(n, h).index_add(0, dst, e)
        out = msg.new_zeros(n, h, args.channels).index_add(0, dst, msg * (e / z.index_select(0, dst)).unsqueeze(-1))
        return out

    def torch_segment() -> torch.Tensor:
        m = torch.segment_reduce(logits, "max", offsets=offsets, axis=0, unsafe=True).detach()
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(logits - m.index_select(0, dst))
        z = torch.segment_reduce(e, "sum", offsets=offsets, axis=0, unsafe=True)
        a = e / z.index_select(0, dst)
        return torch.segment_reduce(msg * a.unsqueeze(-1), "sum", offsets=offsets, axis=0, unsafe=True)

    impls = {"index_add/scatter_reduce": index_ops, "torch.segment_reduce": torch_segment}
    try:
        from torch_scatter import segment_csr

        def scatter_csr() -> torch.Tensor:
            m = segment_csr(logits, offsets, reduce="max").detach()
            e = torch.exp(logits - m.index_select(0, dst))
            z = segment_csr(e, offsets, reduce="sum")
            return segment_csr(msg * (e / z.index_select(0, dst)).unsqueeze(-1), offsets, reduce="sum")

        impls["torch_scatter.segment_csr"] = scatter_csr
    except ImportError:
        print("torch_scatter is not installed: its row is skipped")

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    ref = index_ops().detach()
    rows = []
    for name, fn in impls.items():
        torch.testing.assert_close(fn().detach(), ref, atol=1e-4, rtol=1e-4)
        times = {}
        for mode in ("fwd", "fwd+bwd"):
            fn().sum().backward() if mode == "fwd+bwd" else fn()
            sync()
            t = time.perf_counter()
            for _ in range(args.repeats):
                out = fn()
                if mode == "fwd+bwd":
                    out.sum().backward()
            sync()
            times[mode] = (time.perf_counter() - t) / args.repeats * 1e3
        rows.append(dict(device=dev.type, impl=name, fwd_ms=times["fwd"], fwd_bwd_ms=times["fwd+bwd"]))
        print(f"{dev.type}: {name:28s} fwd {times['fwd']:8.2f} ms   fwd+bwd {times['fwd+bwd']:8.2f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(args=vars(args), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
