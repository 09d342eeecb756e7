"""Command line: ``python -m cudnn_gnn {info,train}`` (also installed as ``cudnn-gnn``)."""

from __future__ import annotations

import argparse
import json
import sys


def _info(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m cudnn_gnn info",
                                 description="What this machine can run, and how to get the cuDNN backend if it cannot.")
    ap.add_argument("--json", action="store_true", help="print the probe as JSON")
    args = ap.parse_args(argv)
    from cudnn_gnn.backends import backend_info

    info = backend_info()
    print(json.dumps(info.as_dict(), indent=1) if args.json else info)
    return 0


def _train(argv: list[str]) -> int:
    from cudnn_gnn.apps._cli import run_main
    from cudnn_gnn.apps.train import main as train_main

    # a user mistake exits through argparse (status 2, one line); anything else is a bug: traceback + hint, status 1
    return run_main(train_main, argv, prog="python -m cudnn_gnn train")


COMMANDS = {"info": _info, "train": _train}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m cudnn_gnn {info,train} [options]\n"
              "  info   torch/CUDA/GPU/cuDNN versions, which backend 'auto' picks and why, the fix\n"
              "  train  train GAT on Cora (default) and print the test accuracy; --help for options")
        return 0 if argv and argv[0] in ("-h", "--help") else (2 if argv else 0)
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
