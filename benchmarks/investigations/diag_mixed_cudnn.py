"""Which step breaks cuDNN GAT after cuDNN SDPA in one process? Staged runs, each in a fresh process.

On the H200 environment of the device README (torch's cuDNN 9.19 wheel plus a partial cuDNN 9.28 preloaded),
``cudnn_gnn.gat`` failed with ``CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE`` after ``cudnn.sdpa_torch`` had
run, and after torch's own ``SDPBackend.CUDNN_ATTENTION``, while GAT before them and flash attention next to GAT
worked. Each scenario below is a sequence of stages run in a new interpreter; every stage records ok / the error
and the ``libcudnn*`` files the process has mapped after it (directory and name), so one run separates:

* a cuDNN handle alone (``cudnn.create_handle()``, what ``sdpa_torch`` makes first),
* loading a sublibrary alone (``libcudnn_engines_runtime_compiled`` / ``libcudnn_heuristic`` through ``ctypes``),
* the SDPA forward alone, forward and backward, SDPA before any GAT,
* torch's cuDNN attention and a torch cuDNN convolution (torch's own cuDNN calls, through the preloaded library).

Every scenario also runs a second time with one cuDNN shim (``one_shim/...``): torch preloads ``libcudnn.so.*``
from the first ``nvidia/cudnn/lib`` on ``sys.path`` (``torch/__init__.py``), so a directory put first on
``PYTHONPATH`` whose ``nvidia/cudnn/lib/libcudnn.so.9`` links to the ``LD_PRELOAD``ed library makes torch load
that same file instead of its wheel's older one. Each child runs with cuDNN's error log on stderr
(``CUDNN_LOGERR_DBG``); the lines that name an error are kept with the result.

    python benchmarks/investigations/diag_mixed_cudnn.py --out mixed.json

Needs CUDA and cuDNN >= 9.28 with its SDPA engines (the device's ``part1`` and ``part2``). The first scenario
builds the GAT kernels (minutes on a fresh machine; later processes reuse the driver's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

SCENARIOS = {
    "gat_twice": ["gat", "gat"],
    "handle": ["gat", "handle", "gat"],
    "load_runtime_compiled": ["gat", "load:libcudnn_engines_runtime_compiled.so.9", "gat"],
    "load_heuristic": ["gat", "load:libcudnn_heuristic.so.9", "gat"],
    "sdpa_forward": ["gat", "sdpa_fwd", "gat"],
    "sdpa_forward_backward": ["gat", "sdpa_fwd_bwd", "gat"],
    "sdpa_first": ["sdpa_fwd", "gat"],
    "torch_cudnn_attention": ["gat", "torch_cudnn_attention", "gat"],
    "torch_cudnn_conv": ["gat", "torch_cudnn_conv", "gat"],
}


def _libs() -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libcudnn" in line})


def _stage(name: str) -> None:
    import torch

    dev = "cuda"
    if name == "gat":
        import cudnn_gnn

        n, heads, c = 2000, 4, 16
        ei = torch.randint(0, n, (2, 16000), device=dev, generator=torch.Generator(dev).manual_seed(0))
        g = cudnn_gnn.CscGraph.from_edge_index(ei, num_nodes=n)
        x = torch.randn(n, heads * c, device=dev, requires_grad=True)
        w = torch.randn(2 * heads * c, device=dev, requires_grad=True)
        cudnn_gnn.gat(g, x, w, heads=heads, backend="cudnn").sum().backward()
    elif name == "handle":
        import cudnn

        cudnn.create_handle()
    elif name.startswith("load:"):
        import ctypes

        lib = name.split(":", 1)[1]
        dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
        path = next((os.path.join(d, lib) for d in dirs if os.path.exists(os.path.join(d, lib))), lib)
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    elif name in ("sdpa_fwd", "sdpa_fwd_bwd"):
        from cudnn_gnn.ops.global_attention import graph_attention

        sizes = [17, 250, 3, 64, 1, 120] * 8
        ptr = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device=dev)
        q = torch.randn(sum(sizes), 4, 32, device=dev, dtype=torch.bfloat16, requires_grad=name == "sdpa_fwd_bwd")
        o = graph_attention(q, q, q, ptr, backend="cudnn")
        if name == "sdpa_fwd_bwd":
            o.float().square().sum().backward()
    elif name == "torch_cudnn_attention":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q = torch.randn(2, 4, 128, 64, device=dev, dtype=torch.bfloat16)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    elif name == "torch_cudnn_conv":
        conv = torch.nn.Conv2d(8, 8, 3).to(dev)
        with torch.backends.cudnn.flags(enabled=True):
            conv(torch.randn(2, 8, 32, 32, device=dev)).sum().backward()
    else:
        raise ValueError(f"unknown stage {name!r}")
    torch.cuda.synchronize()


def child(stages: list[str]) -> None:
    out: list[dict[str, Any]] = []
    for name in stages:
        rec: dict[str, Any] = {"stage": name}
        t = time.perf_counter()
        try:
            _stage(name)
            rec["ok"] = True
        except Exception as exc:  # the finding is the error text
            rec["ok"] = False
            rec["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rec["s"] = round(time.perf_counter() - t, 2)
        rec["libs"] = _libs()
        out.append(rec)
    print("RESULT " + json.dumps(out), flush=True)


def _one_shim_env(tmp: str) -> dict[str, str] | None:
    """The environment that makes torch preload the ``LD_PRELOAD``ed ``libcudnn.so.9`` (None: nothing preloaded)."""
    shim = next((p for p in os.environ.get("LD_PRELOAD", "").split() if os.path.basename(p) == "libcudnn.so.9"), None)
    if shim is None:
        return None
    lib = os.path.join(tmp, "nvidia", "cudnn", "lib")
    os.makedirs(lib, exist_ok=True)
    link = os.path.join(lib, "libcudnn.so.9")
    if not os.path.lexists(link):
        os.symlink(os.path.realpath(shim), link)
    return {"PYTHONPATH": os.pathsep.join([tmp, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])}


def _error_lines(stderr: str) -> list[str]:
    keep = ("error", "fail", "sublibrary", "version", "dlopen", "not found", "unavailable")
    lines = [ln.strip() for ln in stderr.splitlines() if any(k in ln.lower() for k in keep)]
    return list(dict.fromkeys(lines))[-12:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="diag_mixed_cudnn.json")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child.split(","))
        return
    results: dict[str, Any] = {}
    log_env = {"CUDNN_LOGERR_DBG": "1", "CUDNN_LOGDEST_DBG": "stderr"}
    with tempfile.TemporaryDirectory(prefix="diag_mixed_cudnn-") as tmp:
        variants: list[tuple[str, dict[str, str]]] = [("", {})]
        one_shim = _one_shim_env(tmp)
        if one_shim is not None:
            variants.append(("one_shim/", one_shim))
        for prefix, extra in variants:
            for name, stages in SCENARIOS.items():
                key = prefix + name
                try:
                    r = subprocess.run([sys.executable, __file__, "--child", ",".join(stages)], capture_output=True,
                                       text=True, timeout=args.timeout, env={**os.environ, **log_env, **extra})
                    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
                    results[key] = {"stages": json.loads(line[7:])} if line else {"returncode": r.returncode}
                    results[key]["cudnn_log"] = _error_lines(r.stderr)
                    if not line:
                        results[key]["stderr_tail"] = r.stderr[-1500:]
                except subprocess.TimeoutExpired:
                    results[key] = {"timeout_s": args.timeout}
                stages_out = results[key].get("stages")
                summary = (" -> ".join(f"{s['stage']}:{'ok' if s['ok'] else 'FAIL'}" for s in stages_out)
                           if stages_out is not None else str(results[key])[:200])
                print(f"{key:34s} {summary}", flush=True)
                with open(args.out, "w") as f:
                    json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
