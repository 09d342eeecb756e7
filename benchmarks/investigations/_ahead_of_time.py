"""Compiling a Triton kernel ahead of time for a GPU this machine need not have, and reading ``ptxas -v``.

Shared by ``kernel_registers.py`` (registers and spills of hand-built launch shapes) and ``compile_check.py`` (every
variant that recorded launches take). Triton lowers a kernel to PTX and a cubin on any host once given a target
(``GPUTarget("cuda", 90, 32)`` for the H100 / H200; Triton appends the ``a`` of ``sm_90a`` itself); the ``ptxas``
it ships then reports a thread's registers and its spills, which the compiled kernel's metadata does not hold
without a GPU to load it on. The caller imports this before any kernel module and with ``TRITON_INTERPRET`` unset:
Triton reads it when it decorates a kernel.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

__all__ = ["compile_ptx", "ptxas", "ptxas_usage", "target"]


def ptxas() -> str:
    """The newest ``ptxas`` Triton bundles (a Triton whose PTX is newer than its ``ptxas`` ships a second one)."""
    d = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for name in ("ptxas-blackwell", "ptxas"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    raise SystemExit(f"no ptxas under {d}")


def target(arch: str) -> GPUTarget:
    """Triton's target for ``arch`` (``sm_90a`` -> CUDA capability 90, warps of 32 threads)."""
    return GPUTarget("cuda", int(re.sub(r"\D", "", arch)), 32)


def compile_ptx(fn: Any, signature: Mapping[str, str], constexprs: Mapping[tuple[int, ...], Any],
                attrs: Mapping[tuple[int, ...], Any], options: Mapping[str, Any], arch: str) -> str:
    """The PTX of ``fn`` (a ``triton.JITFunction``) compiled by ``triton.compile`` for ``arch`` (e.g. ``sm_90a``).

    ``signature``: every parameter's Triton type by name (``"*fp32"``, ``"i32"``, ``"constexpr"`` ...);
    ``constexprs`` and ``attrs``: by argument path (``(index,)``), the constant values and the attributes
    (``[["tt.divisibility", 16]]``), as ``JITFunction`` builds them for a launch; ``options``: compile options such as
    ``num_warps``. Raises whatever Triton's compiler raises (a kernel that does not compile)."""
    src = ASTSource(fn=fn, signature=dict(signature), constexprs=dict(constexprs), attrs=dict(attrs))
    compiled = triton.compile(src, target=target(arch), options=dict(options))
    return str(compiled.asm["ptx"])


def ptxas_usage(ptx: str, arch: str) -> dict[str, Any]:
    """``ptxas -v`` on ``ptx`` for ``arch``: ``registers`` a thread, ``spill_store_bytes`` and ``spill_load_bytes``
    (None where ptxas printed none), and ``ptxas_error`` (the end of its output where it failed, else None)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        run = subprocess.run([ptxas(), "-v", "--gpu-name", arch, path, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True)
    regs = re.search(r"Used (\d+) registers", run.stderr)
    stores = re.search(r"(\d+) bytes spill stores", run.stderr)
    loads = re.search(r"(\d+) bytes spill loads", run.stderr)
    return {"registers": int(regs.group(1)) if regs else None,
            "spill_store_bytes": int(stores.group(1)) if stores else None,
            "spill_load_bytes": int(loads.group(1)) if loads else None,
            "ptxas_error": None if run.returncode == 0 else run.stderr.strip()[-300:]}
