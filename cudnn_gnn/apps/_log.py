"""The messages of the main job and the example scripts: one logger, one verbosity flag, one line format per epoch.

PyG's and DGL's examples print one line an epoch (``Epoch: 010, Loss: 0.5234, Val: 0.7900, Test: 0.8000``) that
stays in the terminal and the log file as the run's history; so do ours, through :mod:`logging` (logger
``cudnn_gnn.apps``), every script in one format (:func:`format_epoch`):

    epoch 10/200: loss 0.5234, valid acc 0.7900, test acc 0.8000

- default (INFO): the run's settings, one line an epoch (``--log-every N``: every N epochs and the last), each
  seed's result;
- ``-q`` (WARNING): warnings only; ``-v`` (DEBUG): also each epoch's seconds and peak memory;
- the final result line is printed to stdout at every level (it is the program's output).

Lines go to stdout, as the examples' ``print`` did, so ``> run.log`` keeps the history with the result. Progress
bars (within an epoch: batches, inference) stay on stderr and are erased when done.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

__all__ = ["LOG", "add_verbosity_arguments", "format_epoch", "setup_logging"]

#: The scripts' logger (a library user who configures :mod:`logging` gets their lines too).
LOG = logging.getLogger("cudnn_gnn.apps")


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at the time (a redirect, pytest's capture), not the one at setup."""

    @property
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def add_verbosity_arguments(ap: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` and ``-q/--quiet`` (each may be repeated; they offset each other)."""
    ap.add_argument("-v", "--verbose", action="count", default=0,
                    help="more messages: each epoch's seconds and peak memory too")
    ap.add_argument("-q", "--quiet", action="count", default=0,
                    help="fewer messages: no settings or per-epoch lines, only warnings and the final result")


def setup_logging(verbose: int = 0, quiet: int = 0) -> None:
    """Send :data:`LOG`'s messages to stdout as bare lines, at INFO raised by ``quiet`` and lowered by ``verbose``
    steps of 10 (DEBUG .. ERROR). Calling it again replaces the level (one handler)."""
    level = min(max(logging.INFO + 10 * (quiet - verbose), logging.DEBUG), logging.ERROR)
    LOG.setLevel(level)
    if not any(isinstance(h, _StdoutHandler) for h in LOG.handlers):
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOG.addHandler(handler)
        LOG.propagate = False  # the scripts own their output: no second copy through a root handler


def format_epoch(epoch: int, epochs: int, values: dict[str, float | str | None]) -> str:
    """``epoch 10/200: loss 0.5234, valid acc 0.7900`` (floats with 4 decimals; None values left out)."""
    parts = [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items() if v is not None]
    return f"epoch {epoch}/{epochs}: " + ", ".join(parts)
