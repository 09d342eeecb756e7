"""What does a sampled training step of the example's GAT keep for its backward, per node and per edge of a batch?

The memory model (``cudnn_gnn.apps.distributed.estimate_memory``) predicts a GPU peak from a per-layer formula; its
activation term is what autograd keeps. This measures that term directly, on the CPU (the answer and how the
model compares: ``benchmarks/investigations/README.md``, docs/scale.md): the model of ``examples/papers100m.py``
(``_common.OgbGAT``, 3 layers of 4 x 128, residual maps, ELU, dropout; ours on the Triton backend with its kernel
launches stubbed, which changes no tensor's size, or PyG's ``GATConv``) runs forward under
``torch.autocast(bfloat16)`` on random batches laid out as a torch-sparse ``NeighborLoader`` batch (every layer on
the whole batch, ``sampled=True``), while ``torch.autograd.graph.saved_tensors_hooks`` records every tensor
autograd saves (each storage counted once). A least-squares fit over several batch shapes gives bytes per node and
per edge; ``--predict N,E`` evaluates it at a measured batch and prints it next to the memory model's activation
term for the same batch.

CPU autocast casts the same ops to bfloat16 as CUDA autocast does here (``linear``); ``elu``, ``dropout`` and the
residual and bias additions follow type promotion on both; dropout runs as CUDA runs it (``native_dropout``, a bool
mask kept). What this does not see: the transient tensors of the backward (gradients alive next to the saved
tensors at the GPU's peak), the batch inputs and the model state. Usage (from the repository root)::

    python benchmarks/investigations/memory_saved_tensors.py [--predict 288332,294952] [--out saved.json]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton kernels are stubbed; the interpreter only lets them load
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from _bench_common import environment, write_json  # noqa: E402

SHAPES = ((2_000, 2_000), (2_000, 6_000), (4_000, 4_000), (3_000, 9_000))


@contextlib.contextmanager
def cuda_like_dropout() -> Iterator[None]:
    """``F.dropout`` as CUDA runs it: ``native_dropout``, whose backward keeps a bool mask (1 byte an element). On
    the CPU ``F.dropout`` multiplies by a mask of the input's dtype and keeps that (4 bytes under fp32)."""
    import torch.nn.functional as F

    real = F.dropout

    def dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        return torch.native_dropout(x, p, True)[0] if training and p > 0 else x

    F.dropout = dropout  # type: ignore[assignment]
    try:
        yield
    finally:
        F.dropout = real


def saved_bytes(model_name: str, num_nodes: int, num_edges: int, *, features: int = 128, hidden: int = 128,
                heads: int = 4, classes: int = 172, layers: int = 3) -> dict[str, Any]:
    """Bytes autograd saves in one forward of the example's model on a random batch, by dtype and in total."""
    from _common import OgbGAT
    from op_schema_overhead import stubbed_launches

    torch.manual_seed(0)
    model = OgbGAT(model_name, features, hidden, classes, layers=layers, heads=heads, out_heads=heads, dropout=0.5,
                   norm=False, activation="elu", backend="triton")
    x = torch.randn(num_nodes, features)
    edge_index = torch.randint(0, num_nodes, (2, num_edges))
    storages: dict[int, tuple[int, str]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages.setdefault(s.data_ptr(), (s.nbytes(), str(t.dtype).removeprefix("torch.")))
        return t

    with stubbed_launches(), cuda_like_dropout(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", torch.bfloat16):
        model(x, edge_index, None, sampled=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inputs = {x.untyped_storage().data_ptr(), edge_index.untyped_storage().data_ptr()}
    kept = {ptr: v for ptr, v in storages.items() if ptr not in params and ptr not in inputs}  # what the step adds
    by_dtype: dict[str, int] = {}
    for nbytes, dtype in kept.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    return {"model": model_name, "nodes": num_nodes, "edges": num_edges, "saved_bytes": sum(by_dtype.values()),
            "by_dtype": by_dtype, "tensors": len(kept)}


def fit(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares ``saved = a + b * nodes + c * edges`` over the measured shapes."""
    a = torch.tensor([[1.0, r["nodes"], r["edges"]] for r in rows], dtype=torch.float64)
    y = torch.tensor([float(r["saved_bytes"]) for r in rows], dtype=torch.float64)
    coef = torch.linalg.lstsq(a, y.unsqueeze(1)).solution.squeeze(1)
    resid = (a @ coef - y).abs().max().item()
    return {"const": coef[0].item(), "per_node": coef[1].item(), "per_edge": coef[2].item(), "max_residual": resid}


def model_activations(model_name: str, nodes: int, edges: int) -> int:
    """The memory model's activation term for one untrimmed batch of ``nodes`` / ``edges`` (bf16 activations)."""
    from cudnn_gnn.apps.distributed import estimate_memory

    est = estimate_memory(num_nodes=10 * nodes, num_edges=10 * edges, num_features=128, num_classes=172,
                          batch_size=1024, fanout=[10, 10, 5], hidden=128, heads=4, model=model_name, act_bytes=2,
                          hop_nodes=[nodes], hop_edges=[edges], trimmed=False)
    return int(est.as_dict()["gpu_activations"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--predict", default="288332,294952", help="nodes,edges of a measured batch to evaluate the fit at")
    ap.add_argument("--out", default=None, help="JSON of every measurement and the fits")
    args = ap.parse_args(argv)
    nodes, edges = (int(v) for v in args.predict.split(","))
    payload: dict[str, Any] = {"schema": "cudnn-gnn/memory_saved_tensors/1", "environment": environment(torch.device("cpu")),
                               "shapes": SHAPES, "predict_at": {"nodes": nodes, "edges": edges}, "models": {}}
    for name in ("gat", "pyg-gat"):
        rows = [saved_bytes(name, n, e) for n, e in SHAPES]
        f = fit(rows)
        predicted = f["const"] + f["per_node"] * nodes + f["per_edge"] * edges
        formula = model_activations(name, nodes, edges)
        payload["models"][name] = {"rows": rows, "fit": f, "saved_at_predict_bytes": predicted,
                                   "memory_model_activations_bytes": formula}
        print(f"{name:8s} saved for backward: {f['per_node']:,.0f} B/node + {f['per_edge']:,.0f} B/edge "
              f"(+{f['const']:,.0f}; max residual {f['max_residual']:,.0f} B); at {nodes:,} nodes, {edges:,} edges: "
              f"{predicted / 2**30:.2f} GiB, the memory model's activation term {formula / 2**30:.2f} GiB; "
              f"by dtype at the largest shape: {rows[-1]['by_dtype']}", flush=True)
    if args.out:
        write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
