"""``python -m cudnn_gnn train``: the GAT paper's transductive setup on Cora (default), CiteSeer or PubMed.

Velickovic et al., *Graph Attention Networks*, ICLR 2018 (arXiv:1710.10903), section 3.3: two GAT layers, the
first with 8 heads of 8 features and ELU, the second with 1 head (8 averaged heads on PubMed) and
``concat=False``; dropout 0.6 on each layer's input and on the attention coefficients; Adam, learning rate 0.005
(0.01 on PubMed), L2 weight decay 5e-4 (0.001 on PubMed); row-normalised features. Early stopping as in the
authors' code: stop when neither validation loss nor validation accuracy has improved for ``patience`` (100)
epochs, and report the test accuracy of the last epoch at which both improved.

    python -m cudnn_gnn train                                 # Cora, our GATConv, CPU or GPU
    python -m cudnn_gnn train --dataset CiteSeer --model pyg-gat --seed 3 --json out.json
    python -m cudnn_gnn train --device cuda --backend cudnn --precision bf16

``--model gat|gatv2`` are :class:`cudnn_gnn.layers.GATConv` / ``GATv2Conv``; ``pyg-gat|pyg-gatv2`` are PyG's
own layers, trained by the same code with the same seed (their initial weights are identical: same
parameters, same initialisers, same order). :func:`train_planetoid` is the importable form (it returns a dict);
``examples/gat_cora.py`` runs it over seeds and models.

This module is the command line alone (it imports no torch, so ``--help`` and a mistyped flag answer at once);
the training is :mod:`cudnn_gnn.apps.train`.
"""

from __future__ import annotations

import argparse
from typing import Any

from cudnn_gnn._names import GAT_BACKENDS
from cudnn_gnn.apps._cli import ArgumentParser, nonnegative_int, positive_int, seed_int
from cudnn_gnn.apps._log import add_verbosity_arguments
from cudnn_gnn.apps._util import CONV_MODELS

__all__ = ["DATASET_PRESETS", "MODELS", "PRECISION_NAMES", "add_arguments", "add_resume_arguments", "build_parser"]

MODELS = CONV_MODELS
PRECISION_NAMES = ("fp32", "bf16", "fp16")

# The GAT paper's transductive hyperparameters per dataset (section 3.3).
DATASET_PRESETS: dict[str, dict[str, Any]] = {
    "Cora": {"out_heads": 1, "lr": 0.005, "weight_decay": 5e-4},
    "CiteSeer": {"out_heads": 1, "lr": 0.005, "weight_decay": 5e-4},
    "PubMed": {"out_heads": 8, "lr": 0.01, "weight_decay": 1e-3},
}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags shared by ``python -m cudnn_gnn train`` and ``examples/gat_cora.py``."""
    ap.add_argument("--dataset", choices=tuple(DATASET_PRESETS), default="Cora",
                    help="Cora and CiteSeer ship with the package; PubMed needs --data-root")
    ap.add_argument("--data-root", default=None,
                    help="folder holding <Name>/raw/ind.<name>.* (needed for PubMed); raw Planetoid files are Python "
                    "pickles that can execute code when loaded: trusted files only (the bundled Cora and CiteSeer "
                    "hold no pickle)")
    ap.add_argument("--backend", choices=GAT_BACKENDS, default="auto",
                    help="attention backend of our layers (ignored by pyg-* models)")
    ap.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ...")
    ap.add_argument("--precision", choices=PRECISION_NAMES, default="fp32", help="autocast dtype (fp32: none)")
    ap.add_argument("--epochs", type=positive_int, default=1000,
                    help="at most this many epochs (early stopping ends sooner)")
    ap.add_argument("--patience", type=positive_int, default=100, help="early-stopping patience (val loss and val acc)")
    ap.add_argument("--threads", type=nonnegative_int, default=0,
                    help="torch CPU threads of a CPU run (0: the cores that other processes leave free, from the "
                         "load average, at least 1; torch's own thread a core slows several-fold on a shared machine)")
    ap.add_argument("--no-progress", action="store_true", help="no per-epoch lines (as --log-every 0)")
    ap.add_argument("--log-every", type=nonnegative_int, default=1, metavar="N",
                    help="one history line every N epochs, and one for the last (0: none)")
    add_verbosity_arguments(ap)
    ap.add_argument("--save", metavar="PATH", default=None,
                    help="save the model of the reported epoch: torch.save({'state_dict', 'config'}) (load with "
                         "load_gat)")
    ap.add_argument("--plot", metavar="PATH", default=None, help="draw the loss/accuracy curves to a PNG")


def add_resume_arguments(ap: argparse.ArgumentParser) -> None:
    """``--checkpoint PATH`` and ``--resume PATH`` (the main job and the OGB scripts)."""
    ap.add_argument("--checkpoint", metavar="PATH", default=None,
                    help="write the training state (model, optimizer, scheduler, epoch, random generators, best "
                         "scores) to PATH after every epoch, atomically; several seeds: PATH gets -seedN")
    ap.add_argument("--resume", metavar="PATH", default=None,
                    help="continue the run whose --checkpoint is PATH (same settings; --epochs may be raised): the "
                         "result is the one the uninterrupted run gives")


def build_parser() -> ArgumentParser:
    """The parser of ``python -m cudnn_gnn train``."""
    ap = ArgumentParser(prog="python -m cudnn_gnn train", description=__doc__)
    ap.add_argument("--model", choices=MODELS, default="gat",
                    help="gat/gatv2: cudnn_gnn's layers; pyg-gat/pyg-gatv2: PyG's, same training")
    ap.add_argument("--seed", type=seed_int, default=0, help="random seed (weights, dropout)")
    add_arguments(ap)
    ap.add_argument("--json", metavar="PATH", default=None, help="also write the result as JSON")
    ap.add_argument("--capture", action=argparse.BooleanOptionalAction, default=True,
                    help="on CUDA, capture our model's training step in one CUDA graph and replay it (default: on; "
                         "eager on CPU, for pyg-* models and with --precision fp16)")
    add_resume_arguments(ap)
    return ap
