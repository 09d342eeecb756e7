"""Command-line checks shared by ``python -m cudnn_gnn train`` and the example scripts.

A user mistake ends in one ``parser.error`` line that names the flag and the fix (exit status 2), checked before
any data is loaded or any epoch runs; an unexpected exception is a bug: its traceback is printed with a one-line
hint to report it (:func:`run_main`, exit status 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import torch

__all__ = [
    "ArgumentParser", "positive_int", "nonnegative_int", "positive_float", "nonnegative_float", "probability", "int_list",
    "check_device", "check_backend", "check_output_path", "check_data_root", "check_matplotlib", "run_main",
    "BUG_HINT",
]

BUG_HINT = ("this is a bug in cudnn-gnn, not a mistake in your command: please report it with the command line "
            "and the traceback above")


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``<prog>: error: <message> (--help: usage)``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help: usage)\n")


def _number(text: str, kind: type, what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = _number(text, int, "an integer >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(value)


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    value = _number(text, int, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return int(value)


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    value = _number(text, float, "a number > 0")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return float(value)


def nonnegative_float(text: str) -> float:
    """argparse type: a finite float >= 0."""
    value = _number(text, float, "a number >= 0")
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return float(value)


def probability(text: str) -> float:
    """argparse type: a float in [0, 1]."""
    value = _number(text, float, "a number in [0, 1]")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return float(value)


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated ints, each >= 1 or -1 (all neighbours), e.g. ``10,10,5``."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}") from None
    if any(v < 1 and v != -1 for v in values):
        raise argparse.ArgumentTypeError(f"must be comma-separated integers >= 1 (or -1: all), got {text!r}")
    return values


def check_device(ap: argparse.ArgumentParser, device: str, flag: str = "--device") -> torch.device:
    """``auto`` -> cuda when available, else cpu; refuse devices this machine does not have."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        ap.error(f"{flag} must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            ap.error(f"{flag} {device}: no CUDA GPU is visible to torch here ({_cuda_reason()}); use {flag} cpu "
                     "(or auto), or run on a machine with an NVIDIA GPU and a CUDA build of torch")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            ap.error(f"{flag} must name one of the {torch.cuda.device_count()} GPU(s) (cuda:0 .. "
                     f"cuda:{torch.cuda.device_count() - 1}), got {device!r}")
    elif dev.type != "cpu":
        try:
            torch.empty(0, device=dev)
        except Exception as exc:  # noqa: BLE001 - any failure means the device is not usable here
            ap.error(f"{flag} {device} is not usable here ({str(exc).splitlines()[0]}); use {flag} cpu or cuda")
    return dev


def _cuda_reason() -> str:
    return "torch is a CPU-only build" if torch.version.cuda is None else "no GPU or driver found"


def check_backend(ap: argparse.ArgumentParser, backend: str, device: torch.device, *, ours: bool = True,
                  flag: str = "--backend") -> None:
    """An explicit GPU backend (``cudnn``, ``triton``) needs a CUDA device and its kernels: say why not and the
    fix, through the backend's own check (:meth:`cudnn_gnn.backends.GatBackend.unavailable`)."""
    if backend in ("auto", "reference") or not ours:
        return
    if device.type != "cuda":
        ap.error(f"{flag} {backend} runs on a GPU, got --device {device}; use {flag} reference (or auto) on the CPU")
    from cudnn_gnn.backends import gat_backend

    missing = gat_backend(backend).unavailable(device)
    if missing is not None:
        ap.error(f"{flag} {backend} is not available here: {missing[0]}; fix: {missing[1]} (or use {flag} auto)")


def check_output_path(ap: argparse.ArgumentParser, flag: str, path: str | None) -> None:
    """Refuse an output path that cannot be written, before any work: a folder, a file under a file, a folder
    without write permission."""
    if not path:
        return
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        ap.error(f"{flag} must be a file path, got the folder {path!r}; add a file name")
    parent = os.path.dirname(full)
    while not os.path.exists(parent):  # makedirs will create the missing folders: the first existing one decides
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        ap.error(f"{flag} {path!r} cannot be written: {parent!r} is a file, not a folder; choose another path")
    target = full if os.path.exists(full) else parent
    if not os.access(target, os.W_OK):
        ap.error(f"{flag} {path!r} cannot be written: no write permission on {target!r}; choose another path")


def check_data_root(ap: argparse.ArgumentParser, root: str | None, flag: str = "--data-root") -> None:
    """``--data-root`` must be an existing folder."""
    if root is None:
        return
    full = os.path.expanduser(root)
    if not os.path.isdir(full):
        what = "is a file" if os.path.exists(full) else "does not exist"
        ap.error(f"{flag} must be an existing folder, got {root!r} ({what}); pass the folder holding the dataset")


def check_matplotlib(ap: argparse.ArgumentParser, path: str | None, flag: str = "--plot") -> None:
    """``--plot`` needs matplotlib (and a writable path)."""
    if not path:
        return
    check_output_path(ap, flag, path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        ap.error(f"{flag} needs matplotlib, which is not installed; install it with: pip install matplotlib")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())


def run_main(main: Callable[[list[str]], Any], argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Run a script's ``main(argv)`` as a program: 0 on success, argparse's status on a user mistake, 130 on
    Ctrl-C, and on an unexpected exception its traceback plus :data:`BUG_HINT` and status 1."""
    prog = prog or os.path.basename(sys.argv[0])
    try:
        res = main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - a bug: show it, and say so
        traceback.print_exc()
        print(f"{prog}: {BUG_HINT}", file=sys.stderr)
        return 1
    return res if isinstance(res, int) and not isinstance(res, bool) else 0
