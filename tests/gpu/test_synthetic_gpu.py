"""The memory-mapped synthetic datasets drawn on a GPU (``synthetic_ogbn_mmap(..., device="cuda")``, issue #16): a
valid CSC holding exactly the drawn edges, the preset's sizes and dtypes, byte-identical files for the same
arguments, and the manifest naming the device."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from cudnn_gnn.datasets._meta import OGBN_META  # noqa: E402
from cudnn_gnn.datasets.synthetic import _edge_laws, _raw_edge_chunk, _sizes, synthetic_ogbn_mmap  # noqa: E402


def test_gpu_drawn_csc_holds_exactly_the_drawn_edges(tmp_path) -> None:
    meta, scale, seed, chunk = OGBN_META["ogbn-products"], 0.002, 5, 50_000
    g = synthetic_ogbn_mmap("ogbn-products", tmp_path / "a", scale=scale, seed=seed, chunk_edges=chunk, device="cuda")
    n, raw, _ = _sizes(meta, scale)
    assert (g.num_nodes, g.num_edges) == (n, 2 * raw) and g.x.shape == (n, 100) and g.y.dtype == torch.int64
    assert int(g.colptr[0]) == 0 and int(g.colptr[-1]) == g.num_edges and bool((g.colptr.diff() >= 0).all())
    laws = _edge_laws(meta, n, raw, scale, torch.Generator(device="cuda").manual_seed(seed))
    drawn = [_raw_edge_chunk(*laws, seed, i, s, min(chunk, raw - s), True) for i, s in enumerate(range(0, raw, chunk))]
    src, dst = torch.cat([d[0] for d in drawn]).cpu(), torch.cat([d[1] for d in drawn]).cpu()
    ei = g.edge_index()
    key = lambda s, d: torch.sort(d * n + s).values  # noqa: E731
    assert torch.equal(key(ei[0], ei[1]), key(src, dst))
    assert json.loads((g.root / "manifest.json").read_text())["generated_on"] == "cuda"
    labelled = torch.cat([g.train_idx, g.valid_idx, g.test_idx])
    assert labelled.unique().numel() == labelled.numel() and int(g.y.max()) < 47

    again = synthetic_ogbn_mmap("ogbn-products", tmp_path / "b", scale=scale, seed=seed, chunk_edges=chunk,
                                device="cuda")
    for key_, path in g.files.items():
        assert path.read_bytes() == again.files[key_].read_bytes(), key_
