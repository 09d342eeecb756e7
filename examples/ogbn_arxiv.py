"""Full-batch GAT on ogbn-arxiv (or an arxiv-shaped synthetic graph), our GATConv or PyG's.

Hyperparameters follow DGL's OGB example ``examples/pytorch/ogb/ogbn-arxiv/gat.py`` and ``models.py``
(dmlc/dgl; leaderboard entry "GAT + label reuse + self KD", base GAT 73.66 +- 0.11 test with its tricks):
3 layers, 3 heads x 250 hidden, a linear residual in every layer, batch norm, ReLU, dropout 0.75, input dropout
0.1, attention dropout 0, the last layer one head plus bias; RMSprop lr 0.002 with a linear warm-up over 50
epochs, no weight decay; the loss ``log(eps + CE) - log(eps)`` with ``eps = 1 - log 2``; the graph made
bidirected with self-loops; optional label reuse (``--use-labels``: one-hot labels of a random half of the
training nodes as input features, loss on the other half; all training labels at evaluation). Left out: DGL's
symmetric degree normalisation inside attention, edge dropout and ``no_attn_dst`` (not part of PyG's or our
GATConv), so expect a little under DGL's number. Model selection: test accuracy at the best validation accuracy.

    python examples/ogbn_arxiv.py --data-root ~/ogb --runs 10 --use-labels --device cuda --log arxiv.jsonl
    python examples/ogbn_arxiv.py --synthetic --epochs 50 --model pyg-gat --precision bf16
    python examples/ogbn_arxiv.py --synthetic --scale 0.01 --epochs 3 --device cpu      # smoke
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch
import torch.nn.functional as F
from _common import (
    LOG,
    ArgumentParser,
    JsonLines,
    OgbGAT,
    add_capture_argument,
    add_common_arguments,
    autocast,
    capture_lr,
    capture_wanted,
    captured_step,
    check_common_arguments,
    count_params,
    describe,
    finish_summary,
    grad_scaler,
    load_node_data,
    nonnegative_float,
    nonnegative_int,
    optimizer_step,
    positive_float,
    positive_int,
    probability,
    report_seed,
    run_main,
    seed_everything,
    seeds_of,
    set_lr,
    train_epochs,
)
from torch import Tensor

NAME = "ogbn-arxiv"
EPS = 1.0 - math.log(2.0)


def log_ce(logits: Tensor, y: Tensor) -> Tensor:
    """DGL's arxiv loss: ``mean(log(eps + CE) - log(eps))``, which down-weights confident mistakes."""
    ce = F.cross_entropy(logits.float(), y, reduction="none")
    return (torch.log(EPS + ce) - math.log(EPS)).mean()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(description=__doc__)
    add_common_arguments(ap, epochs=2000)
    ap.add_argument("--layers", type=positive_int, default=3, help="GAT layers")
    ap.add_argument("--heads", type=positive_int, default=3, help="attention heads per hidden layer")
    ap.add_argument("--hidden", type=positive_int, default=250, help="channels per head")
    ap.add_argument("--dropout", type=probability, default=0.75, help="dropout after each hidden layer")
    ap.add_argument("--input-drop", type=probability, default=0.1, help="dropout on the input features")
    ap.add_argument("--attn-drop", type=probability, default=0.0, help="dropout on the attention coefficients")
    ap.add_argument("--lr", type=positive_float, default=0.002, help="RMSprop learning rate")
    ap.add_argument("--wd", type=nonnegative_float, default=0.0, help="weight decay")
    ap.add_argument("--warmup", type=nonnegative_int, default=50, help="epochs of linear learning-rate warm-up")
    ap.add_argument("--use-labels", action="store_true", help="label reuse as input features (DGL's --use-labels)")
    ap.add_argument("--mask-rate", type=probability, default=0.5, help="--use-labels: share of train nodes used as labels")
    add_capture_argument(ap)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    device = check_common_arguments(ap, args)

    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    from cudnn_gnn.datasets import ogb_evaluator
    from cudnn_gnn.layers import ToCscGraph

    data = load_node_data(NAME, args, device, ap)
    LOG.info(describe(data, NAME, args))
    n = data.num_nodes
    edge_index = to_undirected(data.edge_index.to(device), num_nodes=n)  # DGL: to_bidirected (+ self-loops in conv)
    graph: Any = edge_index
    if args.model == "gat":  # our layers: convert once (CSC + self-loop form), reused by every layer and epoch
        graph = ToCscGraph()(Data(edge_index=edge_index, num_nodes=n)).csc_graph
    x = data.x.to(device).float()
    y = data.y.to(device).view(-1)
    split = {k: getattr(data, f"{k}_idx").to(device) for k in ("train", "valid", "test")}
    num_classes = int(data.num_classes)
    evaluator = ogb_evaluator(NAME)

    def acc(pred: Tensor, idx: Tensor) -> float:
        return float(evaluator.eval({"y_true": y[idx].view(-1, 1).cpu(), "y_pred": pred[idx].view(-1, 1).cpu()})["acc"])

    def with_labels(idx: Tensor) -> Tensor:
        onehot = torch.zeros(n, num_classes, device=device)
        onehot[idx, y[idx]] = 1.0
        return torch.cat([x, onehot], dim=1)

    in_channels = x.size(1) + (num_classes if args.use_labels else 0)
    log = JsonLines(args.log)
    runs: list[dict[str, Any]] = []
    params = 0
    for seed in seeds_of(args):
        seed_everything(seed)
        model = OgbGAT(args.model, in_channels, args.hidden, num_classes, layers=args.layers, heads=args.heads,
                       out_heads=1, dropout=args.dropout, input_drop=args.input_drop, attn_drop=args.attn_drop,
                       norm=True, activation="relu", backend=args.backend).to(device)
        params = count_params(model)
        capture = capture_wanted(args, device) and not args.use_labels  # label reuse draws a data-dependent split
        opt = torch.optim.RMSprop(model.parameters(), lr=capture_lr(args.lr, device, capture), weight_decay=args.wd,
                                  capturable=capture)
        scaler = grad_scaler(args.precision, device)
        captured = None if not capture else captured_step(
            args, lambda x, graph, model=model: log_ce(model(x, graph)[split["train"]], y[split["train"]]),
            optimizer=opt, inputs={"x": x, "graph": graph}, model=model)

        def step(epoch: int, model: OgbGAT = model, opt: torch.optim.Optimizer = opt, scaler: Any = scaler,
                 captured: Any = captured) -> float:
            set_lr(opt, args.lr * min(1.0, epoch / max(args.warmup, 1)))
            model.train()
            if captured is not None:
                return captured()  # type: ignore[no-any-return]
            train_idx = split["train"]
            feats = x
            if args.use_labels:
                mask = torch.rand(train_idx.numel(), device=device) < args.mask_rate
                feats, train_idx = with_labels(train_idx[mask]), train_idx[~mask]
            opt.zero_grad(set_to_none=True)
            with autocast(device, args.precision):
                out = model(feats, graph)
            loss = log_ce(out[train_idx], y[train_idx])
            optimizer_step(loss, opt, scaler)
            return loss.item()

        @torch.no_grad()
        def evaluate(model: OgbGAT = model) -> tuple[float, float, float]:
            model.eval()
            feats = with_labels(split["train"]) if args.use_labels else x
            with autocast(device, args.precision):
                pred = model(feats, graph).argmax(dim=-1)
            return acc(pred, split["train"]), acc(pred, split["valid"]), acc(pred, split["test"])

        res = train_epochs(args=args, device=device, seed=seed, label=f"{NAME} {args.model}", model=model, step=step,
                           evaluate=evaluate, log=log, optimizer=opt, scaler=scaler)
        runs.append(res)
        if report_seed(seed, res, "valid acc", "test acc"):
            break
    log.close()
    return finish_summary(NAME, args, device, "acc", runs, params, use_labels=args.use_labels)


if __name__ == "__main__":
    sys.exit(run_main(main))
