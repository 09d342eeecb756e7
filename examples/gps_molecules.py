"""Train a GPS graph transformer (local GAT + global attention on cuDNN SDPA) on a small OGB molecule set.

Each layer is :class:`cudnn_gnn.layers.GPSConv`: a local GAT over the bonds (``cudnn_gnn.layers.GATConv`` when
importable, else PyG's) plus global attention among the atoms of each molecule, computed on the packed batch
(cuDNN SDPA on a GPU with cuDNN >= 9.28, else torch's flash / the reference). Metrics follow OGB: ROC-AUC for
ogbg-molbace and -molbbbp, RMSE for ogbg-molesol and -molfreesolv, on OGB's scaffold split.

    python examples/gps_molecules.py --dataset ogbg-molbace --epochs 50 --device cuda
    python examples/gps_molecules.py --dataset ogbg-molesol --epochs 2 --device cpu --limit 64   # smoke

The datasets ship with the package (``cudnn_gnn.datasets.load_ogbg``); nothing is downloaded.
"""

from __future__ import annotations  # noqa: I001 (ruff reads cudnn_gnn.layers as third-party; see report)

import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import seed_everything
from torch_geometric.loader import DataLoader
from torch_geometric.nn import global_mean_pool

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
    seed_int,
)
from cudnn_gnn.apps._progress import progress
from cudnn_gnn.apps._util import plot_curves, save_checkpoint, state_copy, write_json
from cudnn_gnn.layers.gps_conv import GPSConv

DATASETS = ("ogbg-molbace", "ogbg-molbbbp", "ogbg-molesol", "ogbg-molfreesolv")
ATOM_VOCAB = 128  # every OGB atom feature column has < 128 values (atomic number: 119)
BOND_VOCAB = 16  # every OGB bond feature column has < 16 values


def local_gat_class() -> tuple[type, str]:
    """Our cuDNN GATConv when importable, else PyG's."""
    try:
        from cudnn_gnn.layers import GATConv

        return GATConv, "cudnn_gnn.layers.GATConv"
    except ImportError:
        from torch_geometric.nn import GATConv

        return GATConv, "torch_geometric.nn.GATConv (cudnn_gnn.layers.GATConv not importable)"


class FeatureEncoder(nn.Module):
    """Sum of one embedding per categorical column (OGB's AtomEncoder/BondEncoder, without needing ``ogb``)."""

    def __init__(self, columns: int, vocab: int, channels: int) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(vocab, channels) for _ in range(columns))

    def forward(self, x: Tensor) -> Tensor:
        return sum(emb(x[:, i]) for i, emb in enumerate(self.embeddings))  # type: ignore[return-value]  # sum() starts at int 0


class GPS(nn.Module):
    def __init__(self, channels: int, layers: int, heads: int, num_tasks: int, dropout: float, backend: str) -> None:
        super().__init__()
        gat, self.local_name = local_gat_class()
        self.atom = FeatureEncoder(9, ATOM_VOCAB, channels)
        self.bond = FeatureEncoder(3, BOND_VOCAB, channels)
        self.layers = nn.ModuleList(
            GPSConv(
                channels,
                gat(channels, channels // heads, heads=heads, edge_dim=channels),
                heads=heads,
                dropout=dropout,
                attention_backend=backend,
            )
            for _ in range(layers)
        )
        self.head = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, num_tasks))

    def forward(self, data: Any) -> Tensor:
        x, edge_attr = self.atom(data.x), self.bond(data.edge_attr)
        # Once per batch, for every layer: the graph offsets and the largest graph (no host sync inside layers).
        max_num_nodes = int((data.ptr[1:] - data.ptr[:-1]).max())
        for layer in self.layers:
            x = layer(x, data.edge_index, data.batch, ptr=data.ptr, max_num_nodes=max_num_nodes, edge_attr=edge_attr)
        return self.head(global_mean_pool(x, data.batch, size=data.num_graphs))


def loss_fn(pred: Tensor, y: Tensor, task_type: str) -> Tensor:
    y = y.to(pred.dtype)
    labelled = ~torch.isnan(y)
    if task_type == "binary classification":
        return F.binary_cross_entropy_with_logits(pred[labelled], y[labelled])
    return F.mse_loss(pred[labelled], y[labelled])


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, evaluator: Any, device: torch.device) -> float:
    model.eval()
    ys, preds = [], []
    for data in loader:
        data = data.to(device)
        preds.append(model(data).float().cpu())
        ys.append(data.y.float().cpu())
    res = evaluator.eval({"y_true": torch.cat(ys).numpy(), "y_pred": torch.cat(preds).numpy()})
    return float(next(iter(res.values())))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", choices=DATASETS, default="ogbg-molbace", help="bundled OGB molecule set")
    ap.add_argument("--epochs", type=positive_int, default=50, help="training epochs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="'cpu', 'cuda' or 'cuda:N'")
    ap.add_argument("--backend", choices=ATTENTION_BACKENDS, default="auto", help="global attention")
    ap.add_argument("--seed", type=seed_int, default=0, help="random seed (weights, batches, --limit subsets)")
    ap.add_argument("--batch-size", type=positive_int, default=128, help="molecules per batch")
    ap.add_argument("--channels", type=positive_int, default=64, help="hidden channels (divisible by --heads)")
    ap.add_argument("--layers", type=positive_int, default=3, help="GPS layers")
    ap.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    ap.add_argument("--dropout", type=probability, default=0.1, help="dropout in every GPS layer")
    ap.add_argument("--lr", type=positive_float, default=1e-3, help="Adam learning rate")
    ap.add_argument("--limit", type=nonnegative_int, default=0, help="use N random graphs of each split (smoke tests)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    ap.add_argument("--json", metavar="PATH", default=None, help="the result as JSON")
    ap.add_argument("--save", metavar="PATH", default=None,
                    help="save the model of the reported (best valid) epoch: torch.save({'state_dict', 'config'}); "
                         "GPS(**config['model'])")
    ap.add_argument("--plot", metavar="PATH", default=None, help="the loss and score curves as a PNG")
    args = ap.parse_args(argv)
    device = check_device(ap, args.device)
    for flag in ("--json", "--save", "--plot"):
        check_output_path(ap, flag, getattr(args, flag[2:]))
    check_matplotlib(ap, args.plot)
    check_distinct_outputs(ap, {"--json": args.json, "--save": args.save, "--plot": args.plot})
    if args.channels % args.heads:
        ap.error(f"--channels must be divisible by --heads ({args.heads}), got {args.channels}")

    from cudnn_gnn.datasets import load_ogbg, ogbg_evaluator

    seed_everything(args.seed)  # Python's, numpy's and torch's generators

    ds = load_ogbg(args.dataset)
    evaluator = ogbg_evaluator(args.dataset)
    g = torch.Generator().manual_seed(args.seed)
    parts = {}
    for part in ("train", "valid", "test"):
        graphs = ds.subset(part)
        if args.limit:  # a seeded random subset keeps both classes in small splits
            graphs = [graphs[i] for i in torch.randperm(len(graphs), generator=g)[: args.limit].tolist()]
        parts[part] = graphs
    train_loader = DataLoader(parts["train"], batch_size=args.batch_size, shuffle=True, generator=g)
    loaders = {p: DataLoader(parts[p], batch_size=args.batch_size) for p in ("valid", "test")}

    model_config = dict(channels=args.channels, layers=args.layers, heads=args.heads, num_tasks=ds.num_tasks,
                        dropout=args.dropout, backend=args.backend)
    model = GPS(**model_config).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    print(
        f"{args.dataset}: {len(ds)} graphs ({', '.join(f'{p} {len(v)}' for p, v in parts.items())}), "
        f"metric {ds.eval_metric}; local conv {model.local_name}; global attention backend={args.backend!r}"
    )
    higher_better = ds.eval_metric == "rocauc"
    best: dict[str, float] = {}
    best_state: dict[str, Tensor] = {}
    curves: dict[str, list[tuple[int, float]]] = {"train loss": [], f"valid {ds.eval_metric}": [],
                                                  f"test {ds.eval_metric}": []}
    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        total, count = torch.zeros((), device=device), 0
        for data in progress(train_loader, desc=f"epoch {epoch}", enabled=not args.no_progress):
            data = data.to(device)
            loss = loss_fn(model(data), data.y, ds.task_type)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, count = total + loss.detach() * data.num_graphs, count + data.num_graphs  # no host sync per step
        valid = evaluate(model, loaders["valid"], evaluator, device)
        test = evaluate(model, loaders["test"], evaluator, device)
        if not best or (valid > best["valid"] if higher_better else valid < best["valid"]):
            best = {"epoch": epoch, "valid": valid, "test": test}
            if args.save:  # the weights whose scores are reported, not the last epoch's
                best_state = state_copy(model)
        train_loss = float(total) / max(count, 1)
        for name, value in zip(curves, (train_loss, valid, test)):
            curves[name].append((epoch, value))
        print(f"epoch {epoch:3d}  loss {train_loss:.4f}  valid {ds.eval_metric} {valid:.4f}  test {test:.4f}")
    result = {"dataset": args.dataset, "metric": ds.eval_metric, **best, "seconds": time.perf_counter() - t0}
    print(
        f"final: {args.dataset} {ds.eval_metric} valid {best['valid']:.4f} test {best['test']:.4f} "
        f"(best valid at epoch {best['epoch']}, {result['seconds']:.1f} s)"
    )
    write_json(args.json, result)
    if args.save:  # the weights of the reported (best valid) epoch, with what rebuilds the model
        save_checkpoint(args.save, best_state, {"model": model_config, "args": vars(args), **best})
    if args.plot:
        plot_curves(args.plot, curves, title=f"{args.dataset} GPS")
    return result


if __name__ == "__main__":
    sys.exit(run_main(main))
