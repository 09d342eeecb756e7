"""Train a GPS graph transformer (local GAT + global attention on cuDNN SDPA) on a small OGB molecule set.

Each layer is :class:`cudnn_gnn.layers.GPSConv`: a local GAT over the bonds (``cudnn_gnn.layers.GATConv`` when
importable, else PyG's) plus global attention among the atoms of each molecule, computed on the packed batch
(cuDNN SDPA on a GPU with cuDNN >= 9.28, else torch's flash / the reference). ``--impl pyg`` trains the same model
built from PyG's own ``GPSConv`` and ``GATConv`` (global attention through ``nn.MultiheadAttention`` on padded
graphs), the baseline. Metrics follow OGB: ROC-AUC for ogbg-molbace and -molbbbp, RMSE for ogbg-molesol and
-molfreesolv, on OGB's scaffold split; over several seeds (``--seeds 0-4`` or ``--runs 5``) the mean and standard
deviation of the test score at each run's best valid epoch. On CUDA the training batches are packed into fixed
shapes (``cudnn_gnn.apps.static_batcher``) and the whole step (forward, loss, backward, Adam) is captured once in a
CUDA graph and replayed on every batch (``--batching packed``, the default there; ``--no-capture``: the same step on
the same batches, eagerly; ``--batching pyg``: PyG's ``DataLoader`` and an eager step, the CPU default). With
``--json``, each run's entry holds its per-epoch curves (train loss, valid and test score) and whether it replayed a
CUDA graph.

    python examples/gps_molecules.py --dataset ogbg-molbace --epochs 50 --runs 5             # GPU if there is one
    python examples/gps_molecules.py --dataset ogbg-molbace --epochs 50 --runs 5 --impl pyg  # PyG's layers
    python examples/gps_molecules.py --dataset ogbg-molbace --epochs 50 --runs 5 --no-capture  # eager packed step
    python examples/gps_molecules.py --dataset ogbg-molesol --epochs 2 --device cpu --limit 64   # smoke

The datasets ship with the package (``cudnn_gnn.datasets.load_ogbg``); nothing is downloaded.
"""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import argparse
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from _common import mean_pm_std, mean_std, parse_seeds, save_path
from torch import Tensor, nn
from torch_geometric import seed_everything
from torch_geometric.loader import DataLoader

from cudnn_gnn.backends import ATTENTION_BACKENDS
from cudnn_gnn.apps._cli import (
    ArgumentParser,
    check_device,
    check_output_path,
    nonnegative_int,
    positive_float,
    positive_int,
    probability,
    run_main,
    check_matplotlib,
    check_distinct_outputs,
)
from cudnn_gnn.apps._log import LOG, add_verbosity_arguments, format_epoch, setup_logging
from cudnn_gnn.apps._progress import progress
from cudnn_gnn.apps._util import plot_curves, save_checkpoint, state_copy, write_json
from cudnn_gnn.apps.train import PRECISIONS, autocast, grad_scaler, optimizer_step
from cudnn_gnn.apps.capture import CapturedStep
from cudnn_gnn.apps.gps import GPS, IMPLS, packed_loss  # GPS(**config["model"]) rebuilds a saved model
from cudnn_gnn.apps.static_batcher import StaticGraphBatcher

DATASETS = ("ogbg-molbace", "ogbg-molbbbp", "ogbg-molesol", "ogbg-molfreesolv")
BATCHING = ("auto", "packed", "pyg")


def loss_fn(pred: Tensor, y: Tensor, task_type: str) -> Tensor:
    y = y.to(pred.dtype)
    labelled = ~torch.isnan(y)
    if task_type == "binary classification":
        return F.binary_cross_entropy_with_logits(pred[labelled], y[labelled])
    return F.mse_loss(pred[labelled], y[labelled])


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, evaluator: Any, device: torch.device, precision: str) -> float:
    model.eval()
    ys, preds = [], []
    for data in loader:
        data = data.to(device)
        with autocast(device, precision):
            preds.append(model(data).float().cpu())
        ys.append(data.y.float().cpu())
    res = evaluator.eval({"y_true": torch.cat(ys).numpy(), "y_pred": torch.cat(preds).numpy()})
    return float(next(iter(res.values())))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", choices=DATASETS, default="ogbg-molbace", help="bundled OGB molecule set")
    ap.add_argument("--impl", choices=IMPLS, default="ours",
                    help="ours: cudnn_gnn's GPSConv and GATConv; pyg: PyG's GPSConv and GATConv (the baseline)")
    ap.add_argument("--epochs", type=positive_int, default=50, help="training epochs")
    ap.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu', 'cuda' or 'cuda:N'")
    ap.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32", help="autocast dtype (fp32: none)")
    ap.add_argument("--backend", choices=ATTENTION_BACKENDS, default="auto", help="global attention (--impl ours)")
    ap.add_argument("--seeds", type=parse_seeds, default=None,
                    help="e.g. 0-4, each at most once (weights, batches, --limit subsets; default: 0..runs-1)")
    ap.add_argument("--runs", type=positive_int, default=1, help="number of seeds when --seeds is not given")
    ap.add_argument("--batch-size", type=positive_int, default=128, help="molecules per batch")
    ap.add_argument("--batching", choices=BATCHING, default="auto",
                    help="packed: training batches of fixed shapes (cudnn_gnn.apps.static_batcher) and the whole step "
                         "captured in one CUDA graph (--impl ours, fp32 or bf16; on a CPU the same step runs "
                         "eagerly); pyg: PyG's DataLoader and an eager step; auto (default): packed on CUDA where it "
                         "applies, else pyg")
    ap.add_argument("--capture", action=argparse.BooleanOptionalAction, default=True,
                    help="with --batching packed on CUDA: capture the training step in one CUDA graph and replay it "
                         "(default: on); --no-capture runs the same step on the same packed batches eagerly (what "
                         "benchmarks/bench_accuracy.py compares); no effect with --batching pyg")
    ap.add_argument("--channels", type=positive_int, default=64, help="hidden channels (divisible by --heads)")
    ap.add_argument("--layers", type=positive_int, default=3, help="GPS layers")
    ap.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    ap.add_argument("--dropout", type=probability, default=0.1, help="dropout in every GPS layer")
    ap.add_argument("--lr", type=positive_float, default=1e-3, help="Adam learning rate")
    ap.add_argument("--limit", type=nonnegative_int, default=0, help="use N random graphs of each split (smoke tests)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars, and no per-epoch lines")
    ap.add_argument("--log-every", type=nonnegative_int, default=1, metavar="N",
                    help="one history line every N epochs, and one for the last (0: none)")
    add_verbosity_arguments(ap)
    ap.add_argument("--json", metavar="PATH", default=None, help="the result as JSON")
    ap.add_argument("--save", metavar="PATH", default=None,
                    help="save each run's model of its reported (best valid) epoch: torch.save({'state_dict', "
                         "'config'}); GPS(**config['model']); several seeds: PATH gets -seedN")
    ap.add_argument("--plot", metavar="PATH", default=None, help="the loss and score curves as a PNG")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(args.verbose, args.quiet)
    device = check_device(ap, args.device)
    seeds = list(args.seeds) if args.seeds is not None else list(range(args.runs))
    for flag in ("--json", "--save", "--plot"):
        check_output_path(ap, flag, getattr(args, flag[2:]))
    check_matplotlib(ap, args.plot)
    check_distinct_outputs(ap, {"--json": args.json, "--plot": args.plot,
                                "--save": [save_path(args.save, s, seeds) for s in seeds] if args.save else None})
    if args.channels % args.heads:
        ap.error(f"--channels must be divisible by --heads ({args.heads}), got {args.channels}")
    packable = args.impl == "ours" and args.precision != "fp16"
    if args.batching == "packed" and not packable:
        ap.error(f"--batching packed needs --impl ours and --precision fp32 or bf16 (a captured step cannot run fp16's "
                 f"GradScaler), got --impl {args.impl}, --precision {args.precision}")
    if args.batching == "auto":
        args.batching = "packed" if packable and device.type == "cuda" else "pyg"

    from cudnn_gnn.datasets import load_ogbg, ogbg_evaluator

    ds = load_ogbg(args.dataset)
    evaluator = ogbg_evaluator(args.dataset)
    model_config = dict(channels=args.channels, layers=args.layers, heads=args.heads, num_tasks=ds.num_tasks,
                        dropout=args.dropout, backend=args.backend, impl=args.impl)
    runs: list[dict[str, Any]] = []
    curves: dict[str, list[tuple[int, float]]] = {}
    t0 = time.perf_counter()
    for seed in seeds:
        res, seed_curves = train_seed(args, seed, ds, evaluator, model_config, device, seeds)
        runs.append(res)
        curves.update({f"seed {seed} {k}" if len(seeds) > 1 else k: v for k, v in seed_curves.items()})
        LOG.info(f"seed {seed}: best valid {ds.eval_metric} {res['valid']:.4f} at epoch {res['epoch']}, test "
                 f"{res['test']:.4f} ({res['seconds']:.1f} s)")
    (vm, vs), (tm, ts) = mean_std([r["valid"] for r in runs]), mean_std([r["test"] for r in runs])
    n = len(runs)
    result = {"dataset": args.dataset, "metric": ds.eval_metric, "impl": args.impl, "batching": args.batching,
              "precision": args.precision,
              "device": str(device), "runs": n, "valid": vm, "valid_std": vs, "test": tm, "test_std": ts,
              "epoch": statistics.fmean(r["epoch"] for r in runs), "seconds": time.perf_counter() - t0,
              "per_run": runs}
    runs_text = "1 run" if n == 1 else f"{n} runs"
    print(f"final: {args.dataset} {ds.eval_metric} ({args.impl}) over {runs_text}: valid "
          f"{mean_pm_std(vm, vs, n, scale=1.0, digits=4)}, test {mean_pm_std(tm, ts, n, scale=1.0, digits=4)} "
          f"(best valid at epoch{'s' if n > 1 else ''} {', '.join(str(r['epoch']) for r in runs)}, "
          f"{result['seconds']:.1f} s)")
    write_json(args.json, result)
    if args.plot:
        plot_curves(args.plot, curves, title=f"{args.dataset} GPS ({args.impl})")
    return result


def train_seed(args: Any, seed: int, ds: Any, evaluator: Any, model_config: dict[str, Any], device: torch.device,
               seeds: list[int]) -> tuple[dict[str, Any], dict[str, list[tuple[int, float]]]]:
    """One run: seeded weights, batches and ``--limit`` subsets; returns its best-valid result and its curves (and
    saves the model of that epoch with ``--save``)."""
    seed_everything(seed)  # Python's, numpy's and torch's generators
    g = torch.Generator().manual_seed(seed)
    parts = {}
    for part in ("train", "valid", "test"):
        graphs = ds.subset(part)
        if args.limit:  # a seeded random subset keeps both classes in small splits
            graphs = [graphs[i] for i in torch.randperm(len(graphs), generator=g)[: args.limit].tolist()]
        parts[part] = graphs
    train_loader = DataLoader(parts["train"], batch_size=args.batch_size, shuffle=True, generator=g)
    loaders = {p: DataLoader(parts[p], batch_size=args.batch_size) for p in ("valid", "test")}
    model = GPS(**model_config).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    scaler = grad_scaler(args.precision, device)
    if seed == seeds[0]:
        LOG.info(f"{args.dataset}: {len(ds)} graphs ({', '.join(f'{p} {len(v)}' for p, v in parts.items())}), "
                 f"metric {ds.eval_metric}; local conv {model.local_name}; global attention "
                 f"{'nn.MultiheadAttention (PyG)' if args.impl == 'pyg' else f'backend={args.backend!r}'}; "
                 f"device {device}, precision {args.precision}, seeds {seeds}")
    higher_better = ds.eval_metric == "rocauc"
    best: dict[str, Any] = {}
    best_state: dict[str, Tensor] = {}
    curves: dict[str, list[tuple[int, float]]] = {"train loss": [], f"valid {ds.eval_metric}": [],
                                                  f"test {ds.eval_metric}": []}
    t0 = time.perf_counter()
    step = packed_step(args, model, opt, parts["train"], ds.task_type, device) if args.batching == "packed" else None
    for epoch in range(1, args.epochs + 1):
        model.train()
        total, count = torch.zeros((), device=device), 0
        if step is not None:  # fixed-shape batches, one captured step (after its warm-up) replayed per batch
            batcher, captured = step
            plan = batcher.plan(torch.randperm(len(batcher), generator=g))  # every graph once, shuffled
            for ids in progress(plan, desc=f"epoch {epoch}", enabled=not args.no_progress):
                captured(**batcher.pack(ids).to(device, non_blocking=True).inputs())
            total, count = torch.tensor(captured.mean_loss(reset=True)), 1  # the mean over the epoch's batches
        else:
            for data in progress(train_loader, desc=f"epoch {epoch}", enabled=not args.no_progress):
                data = data.to(device)
                opt.zero_grad()
                with autocast(device, args.precision):
                    pred = model(data)
                loss = loss_fn(pred.float(), data.y, ds.task_type)
                optimizer_step(loss, opt, scaler)
                total, count = total + loss.detach() * data.num_graphs, count + data.num_graphs  # no host sync
        valid = evaluate(model, loaders["valid"], evaluator, device, args.precision)
        test = evaluate(model, loaders["test"], evaluator, device, args.precision)
        if not best or (valid > best["valid"] if higher_better else valid < best["valid"]):
            best = {"epoch": epoch, "valid": valid, "test": test}
            if args.save:  # the weights whose scores are reported, not the last epoch's
                best_state = state_copy(model)
        train_loss = float(total) / max(count, 1)
        for name, value in zip(curves, (train_loss, valid, test)):
            curves[name].append((epoch, value))
        if not args.no_progress and args.log_every and (epoch % args.log_every == 0 or epoch == args.epochs):
            LOG.info(f"seed {seed} " + format_epoch(epoch, args.epochs, {
                "loss": train_loss, f"valid {ds.eval_metric}": valid, f"test {ds.eval_metric}": test}))
    if args.save:  # the weights of the reported (best valid) epoch, with what rebuilds the model
        save_checkpoint(save_path(args.save, seed, seeds), best_state,
                        {"model": model_config, "args": {**vars(args), "seed": seed}, **best})
    result = {"seed": seed, **best, "seconds": time.perf_counter() - t0,
              "captured": step is not None and step[1].captured,  # whether its batches replayed a CUDA graph
              "curves": {name: [v for _, v in points] for name, points in curves.items()}}  # per epoch, from 1
    return result, curves


def packed_step(args: Any, model: nn.Module, opt: torch.optim.Optimizer, graphs: list[Any], task_type: str,
                device: torch.device) -> tuple[StaticGraphBatcher, CapturedStep]:
    """The training graphs packed into batches of one fixed budget (``--batch-size`` graphs, tokens and edges sized
    to the split) and the step that trains on them, captured once and replayed on every batch."""
    batcher = StaticGraphBatcher(graphs, max_graphs=args.batch_size)
    first = batcher.pack(batcher.plan()[0]).to(device)
    step = CapturedStep(packed_loss(model, batcher.budget, task_type), optimizer=opt, inputs=first.inputs(),
                        model=model, autocast_dtype=PRECISIONS[args.precision], capture=args.capture)
    b = batcher.budget
    LOG.info(f"packed batches: at most {b.max_graphs} graphs, {b.max_tokens - 1} atoms, {b.max_edges} bonds; "
             f"{batcher.num_batches()} a train epoch; the step "
             + (f"captured in a CUDA graph after {step.warmup} warm-up steps" if device.type == "cuda" and args.capture
                else "eager (--no-capture)" if not args.capture else "eager (no CUDA graph on a CPU)"))
    return batcher, step


if __name__ == "__main__":
    sys.exit(run_main(main))
