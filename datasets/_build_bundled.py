"""Build the bundled Planetoid sets, ``data/planetoid/<name>.npz``, from the original raw files (run once).

The original Planetoid files (``ind.<name>.{x,tx,allx,y,ty,ally,graph}``) are Python pickles: reading them runs
whatever code a crafted file holds. The package therefore ships Cora and CiteSeer as ``.npz`` archives of plain
arrays, read with ``np.load(..., allow_pickle=False)``, made by this script from the raw files (kimiyoung/planetoid
commit ``af6abf4``, ``data/``; see ``datasets/README.md``) through PyG's own reader, so that the archive holds exactly
the tensors ``torch_geometric.datasets.Planetoid`` builds::

    python -m cudnn_gnn.datasets._build_bundled <planetoid root holding Cora/raw and CiteSeer/raw>

Archive members (``N`` nodes, ``F`` features, ``E`` directed edges, ``nnz`` non-zero features):

- ``x_index`` ``[2, nnz]`` int32 (row, column) and ``x_value`` ``[nnz]`` float32: the non-zeros of the dense
  ``x [N, F]`` float32, row-major; ``x_shape`` ``[2]`` int64 is ``(N, F)``;
- ``edge_index`` ``[2, E]`` int64, ``y`` ``[N]`` int64, ``train_mask``/``val_mask``/``test_mask`` ``[N]`` bool.

:func:`read_bundled` turns an archive back into the ``Data`` PyG's reader gives, byte for byte (tested against the
raw files when they are at hand).
"""

from __future__ import annotations

import argparse
import os
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["planetoid_arrays", "read_bundled", "build_planetoid", "BUNDLED_MEMBERS"]

#: The members of a bundled archive, each with its dtype and number of dimensions.
BUNDLED_MEMBERS: dict[str, tuple[np.dtype, int]] = {
    "x_index": (np.dtype(np.int32), 2),
    "x_value": (np.dtype(np.float32), 1),
    "x_shape": (np.dtype(np.int64), 1),
    "edge_index": (np.dtype(np.int64), 2),
    "y": (np.dtype(np.int64), 1),
    "train_mask": (np.dtype(np.bool_), 1),
    "val_mask": (np.dtype(np.bool_), 1),
    "test_mask": (np.dtype(np.bool_), 1),
}


def planetoid_arrays(data: Data) -> dict[str, np.ndarray]:
    """The archive members of one Planetoid ``Data`` (``x`` as its non-zeros; see the module docstring)."""
    x = data.x.numpy()
    rows, cols = np.nonzero(x)  # row-major order
    return {
        "x_index": np.stack([rows, cols]).astype(np.int32),
        "x_value": x[rows, cols].astype(np.float32),
        "x_shape": np.array(x.shape, dtype=np.int64),
        "edge_index": data.edge_index.numpy().astype(np.int64),
        "y": data.y.numpy().astype(np.int64),
        **{key: data[key].numpy().astype(np.bool_) for key in ("train_mask", "val_mask", "test_mask")},
    }


def read_bundled(path: Path) -> Data:
    """The ``Data`` of a bundled archive: ``x [N, F]`` float32 (dense), ``edge_index``, ``y``, the three masks.

    Raises:
        ValueError: The archive is damaged or its members are not the ones :data:`BUNDLED_MEMBERS` lists (the file
            is named).
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in BUNDLED_MEMBERS}
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"bundled file {path} is damaged ({type(exc).__name__}: {exc}); reinstall cudnn-gnn") from exc
    for key, (dtype, ndim) in BUNDLED_MEMBERS.items():
        if arrays[key].dtype != dtype or arrays[key].ndim != ndim:
            raise ValueError(f"bundled file {path} must hold {key} as {ndim}-D {dtype}, got {arrays[key].ndim}-D "
                             f"{arrays[key].dtype}; reinstall cudnn-gnn")
    num_nodes, num_features = (int(v) for v in arrays["x_shape"])
    x = torch.zeros(num_nodes, num_features, dtype=torch.float32)
    rows, cols = torch.from_numpy(arrays["x_index"]).long()
    x[rows, cols] = torch.from_numpy(arrays["x_value"])
    data = Data(x=x, edge_index=torch.from_numpy(arrays["edge_index"]), y=torch.from_numpy(arrays["y"]))
    for key in ("train_mask", "val_mask", "test_mask"):
        data[key] = torch.from_numpy(arrays[key])
    return data


def build_planetoid(raw_root: str | os.PathLike[str], name: str, out: str | os.PathLike[str]) -> Path:
    """Read ``<raw_root>/<name>/raw/ind.<name>.*`` with PyG's reader (this unpickles them: trusted files only) and
    write the archive ``out``; check that it reads back to the same tensors.

    Returns:
        ``out`` as a ``Path``.
    """
    from torch_geometric.io import read_planetoid_data

    data = read_planetoid_data(str(Path(raw_root) / name / "raw"), name.lower())
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out_path, **planetoid_arrays(data))  # type: ignore[arg-type]
    back = read_bundled(out_path)
    if sorted(back.keys()) != sorted(data.keys()) or not all(torch.equal(back[k], data[k]) for k in data.keys()):
        raise RuntimeError(f"{out_path} does not read back to the tensors of {raw_root}/{name}")
    return out_path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build data/planetoid/{cora,citeseer}.npz from the raw Planetoid files.")
    ap.add_argument("raw_root", help="folder holding Cora/raw/ind.cora.* and CiteSeer/raw/ind.citeseer.* (trusted)")
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "data" / "planetoid"))
    args = ap.parse_args(argv)
    for name in ("Cora", "CiteSeer"):
        print(build_planetoid(args.raw_root, name, Path(args.out_dir) / f"{name.lower()}.npz"))


if __name__ == "__main__":
    main()
