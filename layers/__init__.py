"""PyG drop-in layers on the cuDNN ops (installed as ``cudnn_gnn.layers``)."""

from .convert import convert, to_pyg
from .gat_conv import GATConv
from .gatv2_conv import GATv2Conv
from .gps_conv import GPSConv
from .graph_transformer import GraphTransformerBlock
from .transforms import ToCscGraph

__all__: list[str] = [
    "GATConv",
    "GATv2Conv",
    "GPSConv",
    "GraphTransformerBlock",
    "convert",
    "to_pyg",
    "ToCscGraph",
]
