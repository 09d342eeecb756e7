"""The training behind ``python -m cudnn_gnn train``: the GAT paper's transductive setup on Planetoid graphs.

:func:`train_planetoid` is the importable form (it returns a dict); ``examples/gat_cora.py`` runs it over seeds and
models. The setup, the models and the command line are described in :mod:`cudnn_gnn.apps._train_args` (the
parser, which imports no torch, so ``--help`` answers at once).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import seed_everything  # Python's, numpy's and torch's generators (every CUDA device's too)

from cudnn_gnn.apps._cli import (
    SEED_MAX,
    check_backend,
    check_data_root,
    check_device,
    check_distinct_outputs,
    check_matplotlib,
    check_output_path,
    check_planetoid_root,
    default_threads,
    one_line,
    run_main,
)
from cudnn_gnn.apps._log import LOG, format_epoch, setup_logging
from cudnn_gnn.apps._resume import check_config, load_checkpoint, load_optimizer, save_training, set_rng_state
from cudnn_gnn.apps._train_args import (  # noqa: F401  (add_arguments, add_resume_arguments: the examples' too)
    DATASET_PRESETS,
    MODELS,
    add_arguments,
    add_resume_arguments,
    build_parser,
)
from cudnn_gnn.apps._util import conv_class, plot_curves, save_checkpoint, state_copy, write_json

__all__ = ["DATASET_PRESETS", "MODELS", "TrainConfig", "add_arguments", "build_gat", "load_gat", "main", "run_config",
           "train_planetoid"]

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class TrainConfig:
    """One training run (every field has a ``--flag`` of the same name)."""

    dataset: str = "Cora"
    model: str = "gat"
    backend: str = "auto"
    device: str = "auto"
    precision: str = "fp32"
    seed: int = 0
    epochs: int = 1000
    patience: int = 100
    hidden: int = 8
    heads: int = 8
    out_heads: int | None = None  # None: the dataset preset
    dropout: float = 0.6
    lr: float | None = None
    weight_decay: float | None = None
    data_root: str | None = None
    threads: int = 0  # torch.set_num_threads (0: leave as is; the command line passes apps._cli.default_threads())
    progress: bool = True  # the per-epoch history lines (logged at INFO, apps/_log.py)
    log_every: int = 1  # a history line every N epochs and one for the last (0: none)
    save: str | None = None  # torch.save({"state_dict", "config"}) of the model at the reported epoch to this path
    plot: str | None = None  # the loss/accuracy curves as a PNG at this path
    capture: bool = True  # on CUDA, our models' training step captured in one CUDA graph (apps/capture.py)
    checkpoint: str | None = None  # the training state after every epoch, to this path (apps/_resume.py)
    resume: str | None = None  # continue the run a --checkpoint file holds (its epochs, generators, early stopping)


#: TrainConfig fields that do not change what a run computes (outputs, display, speed): a run may be resumed with
#: other values. ``epochs`` is a bound, so a stopped run can be extended; ``device``, ``backend`` and ``capture``
#: decide where and how the same step runs.
RUN_ONLY = ("epochs", "device", "backend", "capture", "data_root", "threads", "progress", "log_every", "save", "plot",
            "checkpoint", "resume")


class GAT(nn.Module):
    """The paper's two-layer GAT. ``conv`` is our GATConv/GATv2Conv or PyG's (same constructor)."""

    def __init__(self, conv: type, in_channels: int, num_classes: int, *, hidden: int, heads: int, out_heads: int,
                 dropout: float, conv_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.dropout = dropout
        self.conv1 = conv(in_channels, hidden, heads=heads, dropout=dropout, **conv_kwargs)
        self.conv2 = conv(hidden * heads, num_classes, heads=out_heads, concat=False, dropout=dropout, **conv_kwargs)

        self._nonzero: tuple[tuple[int, int, int, tuple[int, ...]], tuple[Tensor, Tensor] | None] | None = None

    def input_dropout(self, x: Tensor) -> Tensor:
        """``F.dropout`` on the input features, drawing only for their non-zeros when they are mostly zero.

        Bag-of-words features (Cora: 1.3% non-zero) stay zero under any mask, so dropping out the non-zeros alone
        has exactly ``F.dropout``'s distribution, at a fiftieth of the random draws: on a 2-core CPU the main
        job's training step goes from ~75 to ~30 ms. Non-zero positions are found once per input tensor and checked
        on every call (:func:`_still_nonzero`: one pass over ``x``, no copy), so writes the version counter misses
        (through numpy, ``.data``) find them again; on CUDA, for inputs that need gradients, or for dense inputs
        plain dropout is used.
        """
        if not self.training or self.dropout == 0.0 or x.is_cuda or x.requires_grad or x.dim() != 2:
            return F.dropout(x, p=self.dropout, training=self.training)
        key = (id(x), x.data_ptr(), x._version, tuple(x.shape))
        if self._nonzero is None or self._nonzero[0] != key or not _still_nonzero(x, self._nonzero[1]):
            nz = x.nonzero(as_tuple=True)
            self._nonzero = (key, (nz[0], nz[1]) if nz[0].numel() * 4 < x.numel() else None)
        where = self._nonzero[1]
        if where is None:
            return F.dropout(x, p=self.dropout, training=True)
        out = torch.zeros_like(x)
        out[where] = F.dropout(x[where], p=self.dropout, training=True)
        return out

    def forward(self, x: Tensor, edge_index: Any) -> Tensor:
        x = self.input_dropout(x)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


def _still_nonzero(x: Tensor, where: tuple[Tensor, Tensor] | None) -> bool:
    """Whether the kept non-zero positions ``where`` of ``x`` ``[N, F]`` are still exactly its non-zeros: as many
    non-zeros as positions, and none of those positions zero (a set of that size inside the non-zeros is all of
    them). ``None`` (dense input, plain dropout) is right whatever ``x`` holds now."""
    if where is None:
        return True
    return int(torch.count_nonzero(x)) == where[0].numel() and bool((x[where] != 0).all())


def build_gat(model: str, in_channels: int, num_classes: int, *, hidden: int = 8, heads: int = 8, out_heads: int = 1,
              dropout: float = 0.6, backend: str = "auto") -> GAT:
    """Build the paper's GAT with ``model`` in :data:`MODELS` (``backend`` applies to our layers only)."""
    conv, extra = conv_class(model)
    kwargs = {"backend": backend} if extra.get("backend_kw") else {}
    return GAT(conv, in_channels, num_classes, hidden=hidden, heads=heads, out_heads=out_heads, dropout=dropout,
               conv_kwargs=kwargs)


def resolved_config(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as a dict with the dataset preset's values filled in (``out_heads``, ``lr``, ``weight_decay``)."""
    preset = DATASET_PRESETS[cfg.dataset]
    return {**asdict(cfg), "out_heads": preset["out_heads"] if cfg.out_heads is None else cfg.out_heads,
            "lr": preset["lr"] if cfg.lr is None else cfg.lr,
            "weight_decay": preset["weight_decay"] if cfg.weight_decay is None else cfg.weight_decay}


def load_resume(cfg: TrainConfig, path: str) -> dict[str, Any]:
    """The checkpoint at ``path`` (``cfg.resume``), refused (``ValueError`` naming each difference) when written under
    settings other than ``cfg``'s (:data:`RUN_ONLY` fields aside)."""
    ckpt = load_checkpoint(path)
    check_config(ckpt, resolved_config(cfg), path, free=RUN_ONLY)
    return ckpt


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for bf16/fp16 (CUDA, or CPU), nothing for fp32."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> Any:
    """A ``GradScaler`` for float16 autocast on CUDA (its gradients underflow otherwise), else ``None``."""
    return torch.amp.GradScaler("cuda") if precision == "fp16" and device.type == "cuda" else None


def optimizer_step(loss: Tensor, opt: torch.optim.Optimizer, scaler: Any = None) -> None:
    """Backward and step, through a ``GradScaler`` when one is given (float16 autocast)."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


def train_planetoid(cfg: TrainConfig, *, data: Any = None) -> dict[str, Any]:
    """Train one model with the paper's setup and early stopping; returns the result as a dict.

    Args:
        cfg: The run's settings.
        data: A preloaded ``Data`` (row-normalised features, public split) to skip loading; default: load
            ``cfg.dataset`` with :func:`cudnn_gnn.datasets.load_planetoid`.

    Returns:
        ``{"test_acc", "val_acc", "val_loss", "best_epoch", "epochs_run", "seconds", "sec_per_epoch", "params",
        "peak_memory_bytes" (CUDA only, else None), "captured", "curves", **config}``. ``captured``: whether the
        training step replayed a CUDA graph; ``curves``: ``{"train_loss", "val_loss", "val_acc", "test_acc"}``,
        each a list of ``epochs_run`` floats, epoch 1 first (the training loss is the step's, with dropout).
    """
    if cfg.model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {cfg.model!r}")
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {cfg.precision!r}")
    if cfg.dataset not in DATASET_PRESETS:
        raise ValueError(f"dataset must be one of {tuple(DATASET_PRESETS)}, got {cfg.dataset!r}")
    for name in ("epochs", "patience"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not 0 <= cfg.seed <= SEED_MAX:
        raise ValueError(f"seed must be an int in [0, {SEED_MAX}], got {cfg.seed!r}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    resolved = resolved_config(cfg)
    out_heads, lr, weight_decay = resolved["out_heads"], resolved["lr"], resolved["weight_decay"]
    ckpt = load_resume(cfg, cfg.resume) if cfg.resume else None  # refused before any data is read
    device = resolve_device(cfg.device)

    if data is None:
        from cudnn_gnn.datasets import load_planetoid

        data = load_planetoid(cfg.dataset, cfg.data_root, normalize_features=True)[0]
    data = data.to(device)
    ours = not cfg.model.startswith("pyg-")
    edge_index: Any = data.edge_index
    if ours:  # convert once: CSC plus the self-loop form, kept on the graph (no per-forward conversion)
        from torch_geometric.data import Data

        from cudnn_gnn.layers import ToCscGraph

        edge_index = ToCscGraph()(Data(edge_index=data.edge_index, num_nodes=data.num_nodes)).csc_graph

    seed_everything(cfg.seed)
    if data.y.is_floating_point() or data.y.is_complex() or data.y.dtype == torch.bool:
        raise TypeError(f"data.y must hold integer class ids, got dtype {data.y.dtype}")
    if tuple(data.y.shape) != (data.num_nodes,):
        raise ValueError(f"data.y must have shape (num_nodes={data.num_nodes},): one class id per node, got "
                         f"{tuple(data.y.shape)}")
    lowest, highest = torch.stack([data.y.min(), data.y.max()]).tolist()  # one read: the class count, and a check
    if lowest < 0:  # cross-entropy would index before the logits (on CUDA a device-side assert)
        raise ValueError(f"data.y must hold class ids >= 0, got {lowest}")
    num_classes = highest + 1
    model = build_gat(cfg.model, data.num_features, num_classes, hidden=cfg.hidden, heads=cfg.heads,
                      out_heads=out_heads, dropout=cfg.dropout, backend=cfg.backend).to(device)
    # captured: our layers on a prepared graph, on CUDA, without float16's GradScaler (its step syncs)
    captured = cfg.capture and ours and device.type == "cuda" and cfg.precision != "fp16"
    if captured:  # Adam's state on the device, so that its step replays; fused: one launch for every parameter
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay, capturable=True, fused=True)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    scaler = grad_scaler(cfg.precision, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    masks = (data.train_mask, data.val_mask, data.test_mask)
    # once: indexing with a mask syncs on every use, an index does not
    train_idx, val_idx, test_idx = (m.nonzero().view(-1) for m in masks)
    step = None
    if captured:
        from cudnn_gnn.apps.capture import CapturedStep

        step = CapturedStep(lambda x, y, graph: F.cross_entropy(model(x, graph)[train_idx].float(), y[train_idx]),
                            optimizer=opt, inputs={"x": data.x, "y": data.y, "graph": edge_index}, model=model,
                            autocast_dtype=PRECISIONS[cfg.precision])

    best_acc, best_loss = -1.0, float("inf")  # running maxima/minima (the authors' vacc_mx / vlss_mn)
    chosen = {"best_epoch": 0, "val_acc": 0.0, "val_loss": float("inf"), "test_acc": 0.0}
    bad, epoch, before = 0, 0, 0.0
    keep = bool(cfg.save or cfg.checkpoint)  # the weights of the reported epoch: for --save, kept in checkpoints
    best_state = state_copy(model) if keep else None
    curves: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "val_acc": [], "test_acc": []}  # per epoch
    if ckpt is not None:  # where the checkpoint's run stopped: its weights, optimizer, generators, early stopping
        model.load_state_dict(ckpt["model"])
        load_optimizer(opt, ckpt["optimizer"])
        if scaler is not None and ckpt["scaler"] is not None:
            scaler.load_state_dict(ckpt["scaler"])
        st = ckpt["state"]
        best_acc, best_loss, chosen, bad, curves = st["best_acc"], st["best_loss"], st["chosen"], st["bad"], st["curves"]
        epoch, before = ckpt["epoch"], st["seconds"]
        best_state = {k: v.to(device) for k, v in st["best_state"].items()} if keep else None
        set_rng_state(ckpt["rng"])
    log_every = cfg.log_every if cfg.progress else 0
    t0 = time.perf_counter()
    start = epoch + 1 if bad < cfg.patience else cfg.epochs + 1  # a checkpoint of a run that stopped early: done
    for epoch in range(start, cfg.epochs + 1):
        t_epoch = time.perf_counter()
        model.train()
        if step is not None:
            loss = step()
        else:
            opt.zero_grad(set_to_none=True)
            with autocast(device, cfg.precision):
                out = model(data.x, edge_index)
            loss = F.cross_entropy(out[train_idx].float(), data.y[train_idx])
            optimizer_step(loss, opt, scaler)

        model.eval()
        with torch.no_grad(), autocast(device, cfg.precision):
            logits = model(data.x, edge_index).float()
        pred = logits.argmax(dim=-1)
        metrics = [loss.detach().float(), F.cross_entropy(logits[val_idx], data.y[val_idx])]
        metrics += [(pred[i] == data.y[i]).float().mean() for i in (val_idx, test_idx)]
        # kept on the device, read back together once an epoch (the training loss too: no sync of its own)
        train_loss, val_loss, val_acc, test_acc = torch.stack(metrics).tolist()

        if val_acc >= best_acc or val_loss <= best_loss:
            if val_acc >= best_acc and val_loss <= best_loss:
                chosen = {"best_epoch": epoch, "val_acc": val_acc, "val_loss": val_loss, "test_acc": test_acc}
                if keep:  # the weights whose test accuracy is reported, not the last epoch's
                    best_state = state_copy(model)
            best_acc, best_loss = max(val_acc, best_acc), min(val_loss, best_loss)
            bad = 0
        else:
            bad += 1
        for name, value in zip(curves, (train_loss, val_loss, val_acc, test_acc)):
            curves[name].append(value)
        if log_every and (epoch % log_every == 0 or epoch == cfg.epochs or bad >= cfg.patience):
            LOG.info(f"seed {cfg.seed} " + format_epoch(epoch, cfg.epochs, {
                "loss": train_loss, "val loss": val_loss, "val acc": val_acc, "test acc": test_acc,
                "test acc at best": chosen["test_acc"]}))
            peak = f", peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB" if device.type == "cuda" else ""
            LOG.debug(f"seed {cfg.seed} epoch {epoch}: {time.perf_counter() - t_epoch:.3f} s{peak}")
        if cfg.checkpoint:
            state = {"best_acc": best_acc, "best_loss": best_loss, "chosen": chosen, "bad": bad, "curves": curves,
                     "seconds": before + time.perf_counter() - t0, "best_state": best_state}
            save_training(cfg.checkpoint, config=resolved, epoch=epoch, model=model, optimizer=opt, scaler=scaler,
                          state=state)
        if bad >= cfg.patience:
            break
    seconds = before + time.perf_counter() - t0
    if bad >= cfg.patience and epoch < cfg.epochs:
        LOG.info(f"seed {cfg.seed}: early stop after epoch {epoch} (no better val loss or val acc for {cfg.patience} "
                 f"epochs); reporting epoch {chosen['best_epoch']}")
    if cfg.save:
        config = {**asdict(cfg), "in_channels": data.num_features, "num_classes": num_classes, "out_heads": out_heads,
                  "lr": lr, "weight_decay": weight_decay, "epoch": chosen["best_epoch"], "test_acc": chosen["test_acc"]}
        save_checkpoint(cfg.save, best_state if best_state is not None else model, config)
    if cfg.plot:
        plot_curves(cfg.plot, {name.replace("_", " "): list(enumerate(values, 1)) for name, values in curves.items()},
                    title=f"{cfg.dataset} {cfg.model} seed {cfg.seed}")
    return {
        **asdict(cfg),
        "out_heads": out_heads,
        "lr": lr,
        "weight_decay": weight_decay,
        "device": str(device),
        **chosen,
        "epochs_run": epoch,
        "seconds": seconds,
        "sec_per_epoch": seconds / max(epoch, 1),
        "params": sum(p.numel() for p in model.parameters()),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "captured": step is not None and step.captured,
        "curves": curves,
    }


def load_gat(path: str | os.PathLike[str], *, map_location: Any = "cpu") -> tuple[GAT, dict[str, Any]]:
    """The model a ``--save PATH`` run wrote, rebuilt from its config, with the weights of the reported epoch (the
    last at which validation loss and accuracy both improved: ``config["epoch"]``, test accuracy
    ``config["test_acc"]``); and the config."""
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    cfg = ckpt["config"]
    model = build_gat(cfg["model"], cfg["in_channels"], cfg["num_classes"], hidden=cfg["hidden"], heads=cfg["heads"],
                      out_heads=cfg["out_heads"], dropout=cfg["dropout"], backend=cfg["backend"])
    model.load_state_dict(ckpt["state_dict"])
    return model, cfg


def run_config(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`train_planetoid` from a plain dict (a picklable entry point for process pools)."""
    return train_planetoid(TrainConfig(**config))


def check_arguments(ap: argparse.ArgumentParser, args: argparse.Namespace, models: list[str]) -> torch.device:
    """Every user mistake in the shared flags, as one ``ap.error`` line before any work; returns the device. Sets up
    the messages' verbosity (:func:`~cudnn_gnn.apps._log.setup_logging`)."""
    setup_logging(args.verbose, args.quiet)
    if args.dataset == "PubMed" and args.data_root is None:
        ap.error("--dataset PubMed needs --data-root (PubMed is not bundled; see cudnn_gnn/datasets/README.md)")
    check_data_root(ap, args.data_root)
    device = check_device(ap, args.device)
    check_backend(ap, args.backend, device, ours=any(not m.startswith("pyg-") for m in models))
    check_output_path(ap, "--json", args.json)
    check_output_path(ap, "--save", args.save)
    check_matplotlib(ap, args.plot)
    check_distinct_outputs(ap, {"--json": args.json, "--save": save_paths(args.save, models, args.seeds),
                                "--plot": save_paths(args.plot, models, args.seeds)})
    if args.threads == 0 and device.type == "cpu":
        args.threads = default_threads()
    check_planetoid_root(ap, [args.dataset], args.data_root)  # a folder without the files: each missing one named
    return device


def save_paths(path: str | None, models: list[str], seeds: list[int]) -> list[str]:
    """``--save``/``--plot`` PATH of every run: PATH itself for one run, else ``<stem>-<model>-seed<N><ext>``."""
    if not path:
        return []
    if len(models) * len(seeds) == 1:
        return [path]
    root, ext = os.path.splitext(path)
    return [f"{root}-{m}-seed{s}{ext}" for m in models for s in seeds]


def format_result(res: dict[str, Any]) -> str:
    return (f"{res['dataset']} {res['model']} seed {res['seed']}: test accuracy {100 * res['test_acc']:.2f}% "
            f"(val acc {100 * res['val_acc']:.2f}% at epoch {res['best_epoch']}, {res['epochs_run']} epochs, "
            f"{res['seconds']:.1f} s on {res['device']})")


def main(argv: list[str] | None = None) -> int:
    """``python -m cudnn_gnn train [options]``; prints a final ``test accuracy`` line and returns 0."""
    ap = build_parser()
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    args.seeds = [args.seed]
    device = check_arguments(ap, args, [args.model])
    check_output_path(ap, "--checkpoint", args.checkpoint)
    check_distinct_outputs(ap, {"--json": args.json, "--save": args.save, "--plot": args.plot,
                                "--checkpoint": args.checkpoint})

    cfg = TrainConfig(dataset=args.dataset, model=args.model, backend=args.backend, device=str(device),
                      precision=args.precision, seed=args.seed, epochs=args.epochs, patience=args.patience,
                      data_root=args.data_root, threads=args.threads, progress=not args.no_progress,
                      log_every=args.log_every, save=args.save, plot=args.plot, capture=args.capture,
                      checkpoint=args.checkpoint, resume=args.resume)
    if cfg.resume:  # a missing, foreign or mismatched checkpoint is refused before any data is read
        try:
            load_resume(cfg, cfg.resume)
        except (FileNotFoundError, ValueError) as exc:
            ap.error(one_line(exc))
    backend = args.backend if not args.model.startswith("pyg-") else "PyG's message passing"
    LOG.info(f"GAT paper setup on {cfg.dataset}: model {cfg.model} ({backend}), device {device}, precision {cfg.precision}, "
          f"seed {cfg.seed}, up to {cfg.epochs} epochs, patience {cfg.patience}")
    res = train_planetoid(cfg)
    write_json(args.json, res)
    print(f"final: {format_result(res)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, prog="python -m cudnn_gnn train"))
