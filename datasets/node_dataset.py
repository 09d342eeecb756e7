"""The dataset object of a one-graph node-level task, shaped like PyG's ``Planetoid`` and OGB's
``PygNodePropPredDataset``: ``dataset[0]`` is the graph, ``len(dataset) == 1``, ``num_classes`` and
``num_features`` answer, ``get_idx_split()`` where the task has OGB's split.

It is a ``torch_geometric.data.InMemoryDataset`` holding the one ``Data`` it was given (no ``root``, no download, no
processing, nothing written), so PyG's own machinery applies unchanged: ``transform`` runs on every ``dataset[0]``,
``dataset.x`` / ``dataset.y`` read the graph's attributes, ``dataset.to(device)`` moves it in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch_geometric.data import Data, InMemoryDataset

__all__ = ["NodeDataset"]


class NodeDataset(InMemoryDataset):
    """One graph for node-level learning, as PyG and OGB hand it out.

    Args:
        data: The graph: a ``Data`` with ``x`` (if the task has node features), ``edge_index``, ``y`` and either
            masks (``train_mask`` ...) or OGB's index split (``train_idx``/``valid_idx``/``test_idx``).
        name: The dataset's name (``repr`` shows ``<name>(<args>)``: ``Cora()``, ``ogbn-arxiv()``).
        args: What ``repr`` shows between the parentheses (how a generated graph was made).
        num_classes: The number of classes (OGB's ``num_classes``); ``None``: inferred from ``y`` as PyG does.
        meta: Further plain attributes of the dataset, e.g. OGB's ``num_tasks``, ``task_type``, ``eval_metric``.
        transform: Applied to the graph on every ``dataset[0]`` (PyG's ``transform``).

    Example:
        >>> from cudnn_gnn.datasets import load_planetoid
        >>> dataset = load_planetoid("Cora")
        >>> dataset, len(dataset), dataset.num_classes, dataset.num_features, dataset[0].num_nodes
        (Cora(), 1, 7, 1433, 2708)
    """

    def __init__(self, data: Data, *, name: str, args: str = "", num_classes: int | None = None,
                 meta: dict[str, Any] | None = None, transform: Callable[[Data], Data] | None = None) -> None:
        if not isinstance(data, Data):
            raise TypeError(f"`data` must be a torch_geometric.data.Data, got {type(data).__name__}")
        super().__init__(None, transform=transform, log=False)
        self._data = data  # one graph: slices None, so len() == 1 and get(0) is a shallow copy of it
        self.name = name
        self._args = args
        self._num_classes = num_classes
        for key, value in (meta or {}).items():
            setattr(self, key, value)

    @property
    def num_classes(self) -> int:
        """The number of classes: OGB's figure for OGB sets (``y`` there is ``[N, 1]`` or multi-task), else
        inferred from ``y`` as PyG's ``InMemoryDataset`` does."""
        if self._num_classes is not None:
            return self._num_classes
        return super().num_classes

    def get_idx_split(self) -> dict[str, torch.Tensor]:
        """OGB's split: ``{"train", "valid", "test"}`` -> ``[n] int64`` node indices."""
        data = self._data
        if data is None or "train_idx" not in data:
            raise AttributeError(f"{self!r} has no OGB index split (it has masks: dataset[0].train_mask ...)")
        return {"train": data.train_idx, "valid": data.valid_idx, "test": data.test_idx}

    def __repr__(self) -> str:
        return f"{self.name}({self._args})"
