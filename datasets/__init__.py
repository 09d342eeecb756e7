"""Datasets for cudnn-gnn: bundled Planetoid and OGB molecule sets, offline OGB node loaders, OGB-shaped
synthetic graphs, and OGB-style evaluators. Nothing here downloads at run time.

Node sets come as PyG's and OGB's do: a :class:`NodeDataset` of one graph (``dataset[0]``, ``len(dataset) == 1``,
``num_classes``, ``num_features``; ``get_idx_split()`` for the OGB-shaped ones).

- :func:`load_planetoid`: Cora and CiteSeer ship with the package; PubMed from a directory you provide.
- :func:`load_ogbn`, :func:`ogb_evaluator`: ogbn-arxiv/-products/-proteins/-papers100M from the ``ogb`` on-disk
  layout, cached as ``.npy`` next to the data.
- :func:`synthetic_ogbn`, :func:`degree_stats`: seeded power-law graphs with the OGB datasets' shapes.
- :func:`load_ogbg`, :func:`ogbg_evaluator`: ogbg-molbace/-molbbbp/-molesol/-molfreesolv, bundled.
"""

from cudnn_gnn.datasets.node_dataset import NodeDataset
from cudnn_gnn.datasets.ogb_graph import OgbgDataset, load_ogbg, ogbg_evaluator
from cudnn_gnn.datasets.ogb_node import load_ogbn, ogb_evaluator
from cudnn_gnn.datasets.planetoid import PLANETOID_NAMES, load_planetoid
from cudnn_gnn.datasets.synthetic import degree_stats, synthetic_ogbn

__all__ = [
    "PLANETOID_NAMES",
    "NodeDataset",
    "OgbgDataset",
    "degree_stats",
    "load_ogbg",
    "load_ogbn",
    "load_planetoid",
    "ogb_evaluator",
    "ogbg_evaluator",
    "synthetic_ogbn",
]
