"""Command-line checks shared by ``python -m cudnn_gnn train`` and the example scripts.

A user mistake ends in one ``parser.error`` line that names the flag and the fix (exit status 2), checked before
any data is loaded or any epoch runs; an unexpected exception is a bug: its traceback is printed with a one-line
hint to report it (:func:`run_main`, exit status 1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import torch

from cudnn_gnn.apps._util import output_file

__all__ = [
    "ArgumentParser", "HelpFormatter", "plain_text", "positive_int", "nonnegative_int", "positive_float",
    "nonnegative_float", "probability", "fraction", "int_list", "seed_int", "SEED_MAX", "check_device", "check_backend",
    "check_output_path", "check_distinct_outputs", "check_outputs", "check_data_root", "check_planetoid_root",
    "check_matplotlib", "default_threads", "run_main",
    "silence_stdout",
    "BUG_HINT",
]

BUG_HINT = ("this is a bug in cudnn-gnn, not a mistake in your command: please report it with the command line "
            "and the traceback above")


#: The largest seed every generator takes (numpy's ``np.random.seed`` stops at 2**32 - 1).
SEED_MAX = 2**32 - 1

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")  # :func:`~a.b` -> a.b (then its last part)
_LINK = re.compile(r"`([^`<]+?)\s*<([^`>]+)>`_+")  # `text <url>`_ -> text (url)


def plain_text(doc: str | None) -> str | None:
    """A docstring as plain text for ``--help``: reStructuredText markup (````code````, ``:func:`x```, links) removed.

    ``:role:`~pkg.mod.name``` becomes ``name``, ``:role:`pkg.mod.name``` stays ``pkg.mod.name``, a link
    ```text <url>`_`` becomes ``text (url)`` and ````code```` becomes ``code``.
    """
    if doc is None:
        return None

    def role(m: re.Match[str]) -> str:
        name = m.group(1)
        return name.rsplit(".", 1)[-1] if m.group(0).split("`", 1)[1].startswith("~") else name

    doc = _ROLE.sub(role, doc)
    doc = _LINK.sub(r"\1 (\2)", doc)
    return doc.replace("``", "")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written (examples keep their lines), and every option's default after its help, unless
    the default is nothing (``None``/``False``) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or "default:" in text or action.default is None or action.default is False
                or action.default is argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``<prog>: error: <message> (--help: usage)``, exit 2;
    ``--help`` shows the description as plain text (:func:`plain_text`) and every option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if "description" in kwargs:
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, **kwargs)

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


def fraction(text: str) -> float:
    """argparse type: a number in ``(0, 1]``, a share of a real dataset's size (``--scale``): above 1 the synthetic
    graph outgrows the dataset it stands for (and, on a CPU, the memory)."""
    value = _number(text, float, "a number in (0, 1]")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1] (a fraction of the real size), got {text!r}")
    return float(value)


def seed_int(text: str) -> int:
    """argparse type: a random seed, an int in ``[0, 2**32 - 1]`` (what numpy, Python and torch all accept)."""
    value = _number(text, int, f"an integer in [0, {SEED_MAX}]")
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, {SEED_MAX}], got {text!r}")
    return int(value)


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
    import torch  # here, not at import: parsing the command line (and --help) needs no torch

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
    elif dev.type == "meta":  # shapes only, no data: a run there has nothing to train or report
        ap.error(f"{flag} must be a device that holds data ('auto', 'cpu', 'cuda' or 'cuda:N'), got {device!r}")
    elif dev.type != "cpu":
        try:
            torch.empty(0, device=dev)
        except Exception as exc:  # noqa: BLE001 - any failure means the device is not usable here
            ap.error(f"{flag} {device} is not usable here ({str(exc).splitlines()[0]}); use {flag} cpu or cuda")
    return dev


def default_threads() -> int:
    """torch CPU threads for a CPU run: the cores this process may use (its CPU affinity) less those other processes
    keep busy (the 1-minute load average, rounded down), at least 1 and at most torch's default (a thread a core).

    Why not torch's default: every parallel region ends at a barrier that waits for its slowest thread, so a thread
    that another process keeps off its core stalls the whole step; on a 2-core machine shared with other jobs the
    main job on two threads took over 480 s against 36 s on one (its ops are small, a thread buys little).
    """
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        busy = int(os.getloadavg()[0])
    except (AttributeError, OSError):  # no load average on this platform
        busy = 0
    return max(1, min(torch.get_num_threads(), cores - busy))


def _cuda_reason() -> str:
    import torch

    return "torch is a CPU-only build" if torch.version.cuda is None else "no GPU or driver found"


def check_backend(ap: argparse.ArgumentParser, backend: str, device: torch.device, *, ours: bool = True,
                  flag: str = "--backend") -> None:
    """An explicit GPU backend (``cudnn``, ``triton``) needs a CUDA device and its kernels: say why not and the
    fix, through the backend's own check (:meth:`cudnn_gnn.backends.GatBackend.unavailable`)."""
    if backend in ("auto", "reference") or not ours:
        return
    from cudnn_gnn.backends import gat_backend

    if device.type != "cuda":
        if backend == "triton" and gat_backend(backend).unavailable(device) is None:
            return  # TRITON_INTERPRET=1: Triton's interpreter runs the kernels on the CPU (slowly)
        needs = "needs CUDA (or TRITON_INTERPRET=1, Triton's slow interpreter)" if backend == "triton" else \
            "runs on a GPU"
        ap.error(f"{flag} {backend} {needs}, got --device {device}; use {flag} reference (or auto) on the CPU")

    missing = gat_backend(backend).unavailable(device)
    if missing is not None:
        ap.error(f"{flag} {backend} is not available here: {missing[0]}; fix: {missing[1]} (or use {flag} auto)")


def check_output_path(ap: argparse.ArgumentParser, flag: str, path: str | None) -> None:
    """Refuse an output path that cannot be written, before any work: a folder, a file under a file, a folder
    where no file can be created (outputs are written to a temporary file there and renamed), an existing file
    without write permission.

    The folder is probed by creating (and removing) a temporary file in it, or in the first existing folder above
    it when it is still to be created: permission bits alone do not tell (root, read-only mounts). A symlink is
    judged by its final target (outputs are written through it); an existing file that is not a regular one (a FIFO,
    ``/dev/stdout``) is written directly and needs write permission only. An empty path is refused (``None``: no
    output).
    """
    if path is None:
        return
    if not path:
        ap.error(f"{flag} must be a file path, got ''; leave the flag out for no output")
    full, direct = output_file(path)
    if direct:
        if not os.access(full, os.W_OK):
            ap.error(f"{flag} {path!r} cannot be written: no write permission; choose another path")
        return
    if os.path.isdir(full):
        ap.error(f"{flag} must be a file path, got the folder {path!r}; add a file name")
    parent = os.path.dirname(full)
    while not os.path.exists(parent):  # makedirs will create the missing folders: the first existing one decides
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        ap.error(f"{flag} {path!r} cannot be written: {parent!r} is a file, not a folder; choose another path")
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".cudnn_gnn-probe-"):
            pass
    except OSError as exc:
        ap.error(f"{flag} {path!r} cannot be written: no file can be created in {parent!r} ({exc.strerror}); "
                 "choose another path")
    if os.path.exists(full) and not os.access(full, os.W_OK):
        ap.error(f"{flag} {path!r} cannot be written: no write permission on the existing file; choose another path")


def check_distinct_outputs(ap: argparse.ArgumentParser, outputs: dict[str, str | Iterable[str] | None]) -> None:
    """Refuse two outputs that are one file (``--save f --json f``; two runs' ``--save`` paths), before any work.

    Args:
        ap: The parser whose ``error`` reports the clash.
        outputs: ``{flag: path, several paths (one per run) or None}``.
    """
    seen: dict[str, str] = {}
    for flag, paths in outputs.items():
        if not paths:
            continue
        for path in [paths] if isinstance(paths, str) else paths:
            key = os.path.realpath(os.path.expanduser(path))
            if key in seen:
                other = seen[key]
                what = f"{flag} writes {path!r} twice" if other == flag else f"{flag} and {other} both write {path!r}"
                ap.error(f"{what}; give each output its own path")
            seen[key] = flag


def check_outputs(ap: argparse.ArgumentParser, outputs: dict[str, str | None], *,
                  plots: Iterable[str] = ("--plot",)) -> None:
    """Every output flag of a script at once, before any work: each path writable (:func:`check_output_path`; the
    flags in ``plots`` also need matplotlib, :func:`check_matplotlib`) and no two of them one file
    (:func:`check_distinct_outputs`: ``--out r.json --md r.json`` would leave the table where the results were).

    Args:
        ap: The parser whose ``error`` reports the first mistake.
        outputs: ``{flag: path or None}`` (None: that output is not written).
        plots: The flags of ``outputs`` that are drawn with matplotlib.
    """
    plots = set(plots)
    for flag, path in outputs.items():
        if flag in plots:
            check_matplotlib(ap, path, flag)
        else:
            check_output_path(ap, flag, path)
    check_distinct_outputs(ap, dict(outputs))


def check_data_root(ap: argparse.ArgumentParser, root: str | None, flag: str = "--data-root") -> None:
    """``--data-root`` must be an existing folder."""
    if root is None:
        return
    full = os.path.expanduser(root)
    if not os.path.isdir(full):
        what = "is a file" if os.path.exists(full) else "does not exist"
        ap.error(f"{flag} must be an existing folder, got {root!r} ({what}); pass the folder holding the dataset")


def check_planetoid_root(ap: argparse.ArgumentParser, names: Iterable[str], root: str | None,
                         flag: str = "--data-root") -> None:
    """``--data-root`` must be a folder holding the raw files of every Planetoid dataset in ``names`` (the loader
    names each missing or damaged one); ``None`` reads the bundled copies. Checked before any work, by loading each
    dataset once (Cora and CiteSeer take well under a second)."""
    check_data_root(ap, root, flag)
    if root is None:
        return
    from cudnn_gnn.datasets import load_planetoid

    for name in names:
        try:
            load_planetoid(name, root)
        except (FileNotFoundError, ValueError) as exc:
            ap.error(f"{flag}: {one_line(exc)}")


def check_matplotlib(ap: argparse.ArgumentParser, path: str | None, flag: str = "--plot") -> None:
    """``--plot`` needs matplotlib (and a writable path)."""
    if path is None:
        return
    check_output_path(ap, flag, path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        ap.error(f"{flag} needs matplotlib, which is not installed; install it with: pip install matplotlib")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())


def silence_stdout() -> None:
    """Point stdout at ``/dev/null``, so that Python's flush at exit does not complain about a reader that went away
    (``python -m cudnn_gnn info | head -2``)."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run_main(main: Callable[[list[str]], Any], argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Run a script's ``main(argv)`` as a program: 0 on success, argparse's status on a user mistake, 130 on
    Ctrl-C, 0 quietly when the reader of stdout goes away, 1 with one line on running out of memory (host or GPU:
    a setting too large for this machine, not a bug), and on any other unexpected exception its traceback plus
    :data:`BUG_HINT` and status 1."""
    from cudnn_gnn.apps._util import is_oom

    prog = prog or os.path.basename(sys.argv[0])
    try:
        res = main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``... | head``): end quietly
        silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - out of memory, or a bug: show it, and say so
        if is_oom(exc):
            print(f"{prog}: out of memory: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; this "
                  "machine cannot hold the run at these settings: use a smaller --scale, batch or model",
                  file=sys.stderr)
            return 1
        traceback.print_exc()
        print(f"{prog}: {BUG_HINT}", file=sys.stderr)
        return 1
    return res if isinstance(res, int) and not isinstance(res, bool) else 0
