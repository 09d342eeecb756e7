"""Built-in OGB-style evaluators, used when the optional ``ogb`` package is not installed.

Each follows OGB's rules: the metric is computed per task (column) over the labelled rows (``y_true`` not
NaN) and averaged over tasks; ROC-AUC skips tasks that lack a positive or a negative label.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BuiltinEvaluator", "roc_auc", "make_evaluator", "METRICS"]

METRICS = ("acc", "rocauc", "rmse")


def roc_auc(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Area under the ROC curve of one binary task (Mann-Whitney U, ties counted half).

    Args:
        y_true: ``[n]`` labels in {0, 1}, both present.
        y_score: ``[n]`` scores; higher means more likely positive.

    Raises:
        ValueError: a score is NaN or infinite (OGB's evaluator, through scikit-learn, refuses them; ranking NaN
            would silently count it as the highest score).
    """
    y_true = np.asarray(y_true).astype(bool)
    y_score = np.asarray(y_score, dtype=np.float64)
    if not np.isfinite(y_score).all():
        raise ValueError(f"y_score must be finite, got {int(np.isnan(y_score).sum())} NaN and "
                         f"{int(np.isinf(y_score).sum())} infinite scores (as OGB's evaluator, which refuses them)")
    order = np.argsort(y_score, kind="mergesort")
    _, inverse, counts = np.unique(y_score[order], return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average_rank = ends - (counts - 1) / 2.0  # 1-based average rank of each group of tied scores
    ranks = np.empty(len(y_score), dtype=np.float64)
    ranks[order] = average_rank[inverse]
    n_pos = int(y_true.sum())
    n_neg = len(y_true) - n_pos
    return float((ranks[y_true].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _to_numpy_2d(value: Any, arg: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise TypeError(f"`{arg}` must be a numpy array or torch tensor, got {type(value).__name__}")
    if value.ndim == 1:
        value = value.reshape(-1, 1)
    if value.ndim != 2:
        raise ValueError(f"`{arg}` must be 1-D or 2-D [num_rows, num_tasks], got shape {tuple(value.shape)}")
    return value


class BuiltinEvaluator:
    """Minimal stand-in for ``ogb.nodeproppred.Evaluator`` / ``ogb.graphproppred.Evaluator``.

    Args:
        name: Dataset name (for messages and ``repr``).
        num_tasks: Expected number of task columns.
        eval_metric: ``"acc"``, ``"rocauc"`` or ``"rmse"``.

    Example:
        >>> ev = BuiltinEvaluator("ogbn-arxiv", 1, "acc")
        >>> ev.eval({"y_true": np.array([[1], [2]]), "y_pred": np.array([[1], [0]])})
        {'acc': 0.5}
    """

    def __init__(self, name: str, num_tasks: int, eval_metric: str) -> None:
        if eval_metric not in METRICS:
            raise ValueError(f"`eval_metric` must be one of {METRICS}, got {eval_metric!r}")
        self.name = name
        self.num_tasks = num_tasks
        self.eval_metric = eval_metric

    def __repr__(self) -> str:
        return f"BuiltinEvaluator(name={self.name!r}, num_tasks={self.num_tasks}, eval_metric={self.eval_metric!r})"

    @property
    def expected_input_format(self) -> str:
        """Human-readable description of the ``eval`` input, as in OGB."""
        return (
            f"==== Expected input format of Evaluator for {self.name}\n"
            "{'y_true': y_true, 'y_pred': y_pred}\n"
            f"- y_true: numpy array or torch tensor of shape (num_rows, {self.num_tasks})\n"
            f"- y_pred: numpy array or torch tensor of shape (num_rows, {self.num_tasks})\n"
            "nan entries of y_true are ignored."
        )

    def eval(self, input_dict: dict[str, Any]) -> dict[str, float]:
        """Score predictions.

        Args:
            input_dict: ``{"y_true": ..., "y_pred": ...}``, numpy arrays or torch tensors of shape
                ``[num_rows, num_tasks]`` (1-D is read as one task). For ``acc``, ``y_pred`` holds class ids;
                for ``rocauc``, scores (logits or probabilities); for ``rmse``, predicted values.

        Returns:
            ``{eval_metric: value}``, the per-task metric averaged over tasks.

        Raises:
            TypeError: ``input_dict`` is not a dict or holds other types.
            ValueError: Missing keys, shapes differ, wrong number of tasks, or (ROC-AUC) no task has both
                classes, or a labelled row of a scored task has a NaN or infinite score (as OGB's evaluator).
        """
        if not isinstance(input_dict, dict):
            raise TypeError(f"`input_dict` must be a dict, got {type(input_dict).__name__}")
        missing = [k for k in ("y_true", "y_pred") if k not in input_dict]
        if missing:
            raise ValueError(f"`input_dict` must contain 'y_true' and 'y_pred', got keys {sorted(input_dict)}")
        y_true = _to_numpy_2d(input_dict["y_true"], "y_true")
        y_pred = _to_numpy_2d(input_dict["y_pred"], "y_pred")
        if y_true.shape != y_pred.shape:
            raise ValueError(f"`y_pred` must have the shape of `y_true` {tuple(y_true.shape)}, got {tuple(y_pred.shape)}")
        if y_true.shape[1] != self.num_tasks:
            raise ValueError(f"`y_true` must have {self.num_tasks} task columns for {self.name}, got {y_true.shape[1]}")
        y_true = y_true.astype(np.float64)
        y_pred = y_pred.astype(np.float64)
        scores: list[float] = []
        for t in range(self.num_tasks):
            labelled = ~np.isnan(y_true[:, t])
            yt, yp = y_true[labelled, t], y_pred[labelled, t]
            if self.eval_metric == "rocauc":
                if (yt == 1).any() and (yt == 0).any():
                    if not np.isfinite(yp).all():
                        raise ValueError(f"`y_pred` must be finite on labelled rows (OGB's evaluator refuses NaN and "
                                         f"inf scores), got {int(np.isnan(yp).sum())} NaN and "
                                         f"{int(np.isinf(yp).sum())} infinite in task {t}")
                    scores.append(roc_auc(yt, yp))
            elif len(yt) == 0:
                raise ValueError(f"`y_true` must have a labelled row in every task, got none in task {t}")
            elif self.eval_metric == "acc":
                scores.append(float(np.mean(yt == yp)))
            else:
                scores.append(float(np.sqrt(np.mean((yt - yp) ** 2))))
        if not scores:
            raise ValueError("`y_true` must have both a positive and a negative label in some task, got none")
        return {self.eval_metric: float(sum(scores) / len(scores))}


_BACKENDS = ("auto", "ogb", "builtin")


def make_evaluator(ogb_module: str, name: str, num_tasks: int, eval_metric: str, backend: str) -> Any:
    """Return ``<ogb_module>.Evaluator(name)`` or a :class:`BuiltinEvaluator`, per ``backend``.

    Args:
        ogb_module: ``"ogb.nodeproppred"`` or ``"ogb.graphproppred"``.
        name: OGB dataset name.
        num_tasks: Task columns (for the built-in evaluator).
        eval_metric: Metric key (for the built-in evaluator).
        backend: ``"auto"`` (ogb when installed, else built-in), ``"ogb"`` or ``"builtin"``.

    Raises:
        TypeError: ``backend`` is not a str.
        ValueError: ``backend`` is not one of ``auto``, ``ogb``, ``builtin``.
        RuntimeError: ``backend="ogb"`` and the ``ogb`` package is not installed.
    """
    if not isinstance(backend, str):
        raise TypeError(f"`backend` must be a str, got {type(backend).__name__}")
    if backend not in _BACKENDS:
        raise ValueError(f"`backend` must be one of {_BACKENDS}, got {backend!r}")
    if backend != "builtin":
        import importlib
        import os

        # ogb's package import checks PyPI for a newer version (through `outdated`) unless told not to; that
        # would be a network call, so switch it off before the first import.
        os.environ.setdefault("OUTDATED_IGNORE", "1")
        try:
            module = importlib.import_module(ogb_module)
        except ImportError as exc:
            if backend == "ogb":
                raise RuntimeError(
                    f"backend='ogb' needs the optional `ogb` package ({exc}); install it with "
                    "`pip install 'cudnn-gnn[ogb]'` or use backend='builtin'"
                ) from exc
        else:
            return module.Evaluator(name)
    return BuiltinEvaluator(name, num_tasks, eval_metric)
