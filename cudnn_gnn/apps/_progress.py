"""The one progress bar of the main job, the examples and the benchmarks.

- Not a terminal (a log file, CI, a pipe): no bar (tqdm's ``disable=None``), so logs are not flooded; with
  ``log_every=N`` one plain line every ``N`` steps instead (and one for the last step), so a long run is not
  silent either (:func:`default_log_every`: about twenty lines a run).
- A run that ends early (early stopping, out of memory) closes at 100%: the total is set to what was done.
- ``leave=False``: a closed bar is erased, so nothing is left half-drawn above the result lines.
- Without tqdm installed, the same object does nothing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Progress", "default_log_every", "progress"]


def default_log_every(total: int | None) -> int:
    """Steps between progress lines off a terminal: about twenty lines over ``total`` steps (0: no lines)."""
    return max(1, math.ceil(total / 20)) if total else 0


class Progress:
    """A tqdm bar (or nothing) with ``update``, ``set_postfix``, iteration and a ``close`` that completes it."""

    def __init__(self, iterable: Iterable[Any] | None, total: int | None, desc: str, enabled: bool,
                 file: Any = None, log_every: int = 0) -> None:
        self.iterable = iterable
        self.bar: Any = None
        self.total, self.desc, self.file = total, desc, file
        self.n = self.logged = 0
        self.postfix: dict[str, Any] = {}
        self.log_every = log_every if enabled else 0
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
        else:
            self.log_every = 0  # the bar shows it

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
        """Whether a bar is drawn or lines are logged (skip work that only feeds them, such as ``loss.item()``)."""
        return self.bar is not None or self.log_every > 0

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.log_every and (self.n - self.logged >= self.log_every or self.n == self.total):
            self._log()

    def set_postfix(self, **kwargs: Any) -> None:
        self.postfix = kwargs
        if self.bar is not None:
            self.bar.set_postfix(**kwargs, refresh=False)

    def _log(self) -> None:
        """One line: ``<desc>: <n>/<total> k=v, ...`` (the postfix set last)."""
        total = f"/{self.total}" if self.total else ""
        extra = ", ".join(f"{k}={v}" for k, v in self.postfix.items())
        print(f"{self.desc}: {self.n}{total}" + (f" {extra}" if extra else ""), file=self.file or sys.stderr,
              flush=True)
        self.logged = self.n

    def close(self) -> None:
        """Finish the bar: a run that stopped early is shown complete (total = steps done), then erased; off a
        terminal, the last step's line if it was not logged yet."""
        if self.log_every and self.n > self.logged:
            self._log()
        self.log_every = 0
        bar, self.bar = self.bar, None
        if bar is None:
            return
        if bar.total is not None and bar.n < bar.total:
            bar.total = bar.n
            bar.refresh()
        bar.close()


def progress(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
             enabled: bool = True, file: Any = None, log_every: int = 0) -> Progress:
    """A progress bar over ``iterable`` (or a manual one of ``total`` steps) on ``file`` (default stderr); off a
    terminal, a line every ``log_every`` manual steps (0: none). See the module docstring."""
    return Progress(iterable, total, desc, enabled, file, log_every)
