"""Applications on top of the library (the `python -m cudnn_gnn train` main job)."""

__all__: list[str] = []
