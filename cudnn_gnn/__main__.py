"""Command line: ``python -m cudnn_gnn {info,train}`` (also installed as ``cudnn-gnn``), and ``--version``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

USAGE = ("usage: python -m cudnn_gnn [--version] {info,train} [options]\n"
         "  info       versions (cudnn-gnn, torch, PyG), CUDA/GPU/cuDNN, which backend 'auto' picks and why, the fix\n"
         "  train      train GAT on Cora (default) and print the test accuracy; --help for options\n"
         "  --version  print cudnn-gnn's version")


def versions() -> dict[str, str | None]:
    """``{"cudnn_gnn", "torch", "torch_geometric"}`` versions (``None`` where a package is missing)."""
    import torch

    import cudnn_gnn

    try:
        import torch_geometric

        pyg: str | None = torch_geometric.__version__
    except ImportError:
        pyg = None
    return {"cudnn_gnn": cudnn_gnn.__version__, "torch": torch.__version__, "torch_geometric": pyg}


def _info(argv: list[str]) -> int:
    from cudnn_gnn.apps._cli import ArgumentParser

    ap = ArgumentParser(prog="python -m cudnn_gnn info",
                        description="What this machine can run, and how to get the cuDNN backend if it cannot.")
    ap.add_argument("--json", action="store_true", help="print the versions and the probe as JSON")
    args = ap.parse_args(argv)
    from cudnn_gnn.backends import backend_info

    info = backend_info()
    ver = versions()
    if args.json:
        print(json.dumps({"versions": ver, **info.as_dict()}, indent=1))
    else:
        print(f"cudnn-gnn           {ver['cudnn_gnn']}\n"
              f"torch_geometric     {ver['torch_geometric'] or 'not installed'}\n{info}")
    return 0


def _train(argv: list[str]) -> int:
    from cudnn_gnn.apps._cli import run_main
    from cudnn_gnn.apps._train_args import build_parser

    build_parser().parse_args(argv)  # --help and a mistyped flag answer here, before torch is imported (seconds)
    from cudnn_gnn.apps.train import main as train_main

    # a user mistake exits through argparse (status 2, one line); anything else is a bug: traceback + hint, status 1
    return run_main(train_main, argv, prog="python -m cudnn_gnn train")


COMMANDS: dict[str, Callable[[list[str]], int]] = {"info": _info, "train": _train}


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] == "--version":
        from cudnn_gnn import __version__  # not versions(): that imports torch, which takes seconds

        print(f"cudnn-gnn {__version__}")
        return 0
    if argv[0] not in COMMANDS:
        what = "option" if argv[0].startswith("-") else "command"
        print(f"python -m cudnn_gnn: error: unknown {what} {argv[0]!r}; choose from {', '.join(COMMANDS)} or "
              "--version (--help: usage)", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


def main(argv: list[str] | None = None) -> int:
    """Run a command; a reader that stops early (``info | head -2``) ends it quietly."""
    try:
        code = _dispatch(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader is gone: what is left goes to /dev/null
        from cudnn_gnn.apps._cli import silence_stdout

        silence_stdout()
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
