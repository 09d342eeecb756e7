"""The one progress bar of the examples and the benchmarks (within an epoch: batches, inference chunks); the run's
history, one line an epoch, goes through :mod:`cudnn_gnn.apps._log`.

- Not a terminal (a log file, CI, a pipe): no bar (tqdm's ``disable=None``), so logs are not flooded.
- A run that ends early (early stopping, out of memory) closes at 100%: the total is set to what was done.
- ``leave=False``: a closed bar is erased, so nothing is left half-drawn above the result lines.
- Without tqdm installed, the same object does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Progress", "progress"]


class Progress:
    """A tqdm bar (or nothing) with ``update``, ``set_postfix``, iteration and a ``close`` that completes it."""

    def __init__(self, iterable: Iterable[Any] | None, total: int | None, desc: str, enabled: bool,
                 file: Any = None) -> None:
        self.iterable = iterable
        self.bar: Any = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm is optional: no bar
            return
        # disable=None: tqdm draws only when the stream is a terminal
        self.bar = tqdm(iterable, total=total, desc=desc, disable=None, leave=False, dynamic_ncols=True,
                        file=file)
        if self.bar.disable:
            self.bar = None

    def __iter__(self) -> Iterator[Any]:
        if self.bar is not None:
            try:
                yield from self.bar
            finally:
                self.close()
        else:
            yield from (self.iterable or ())

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def active(self) -> bool:
        """Whether a bar is drawn (skip work that only feeds it, such as ``loss.item()``)."""
        return self.bar is not None

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def set_postfix(self, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.set_postfix(**kwargs, refresh=False)

    def close(self) -> None:
        """Finish the bar: a run that stopped early is shown complete (total = steps done), then erased."""
        bar, self.bar = self.bar, None
        if bar is None:
            return
        if bar.total is not None and bar.n < bar.total:
            bar.total = bar.n
            bar.refresh()
        bar.close()


def progress(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
             enabled: bool = True, file: Any = None) -> Progress:
    """A progress bar over ``iterable`` (or a manual one of ``total`` steps) on ``file`` (default stderr). See the
    module docstring."""
    return Progress(iterable, total, desc, enabled, file)
