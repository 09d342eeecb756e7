"""PyG drop-in layers on the cuDNN ops (installed as ``cudnn_gnn.layers``)."""

__all__: list[str] = []
