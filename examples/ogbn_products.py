"""GAT on ogbn-products (or a products-shaped synthetic graph): full batch on one GPU, or neighbour-sampled.

The model is the one of PyG's former OGB example ``examples/ogbn_products_gat.py`` (pyg-team/pytorch_geometric,
since removed; reported 79.45 +- 0.59 test accuracy, 10 runs): 3 GAT layers, 4 heads x 128 hidden, a linear skip
connection in every layer (``residual=True`` here; that example added a separate ``Linear``), ELU, dropout 0.5, the
last layer 4 averaged heads; Adam lr 0.001. PyG's OGB example is now ``examples/ogbn_train.py`` (``--use_gat``:
``torch_geometric.nn.models.GAT``, 2 heads x 256 hidden, lr 0.003, batches of 1024, no reported products score).
DGL's sampled GAT on products reports 78.26 +- 0.57 (5 runs).

- **Full batch** (default): every epoch is one forward/backward over all 2.45M nodes and 123.7M edges (plus
  self-loops). Our GATConv never materialises per-edge ``[E, heads, channels]`` messages, so on one large GPU
  (H200) it fits where PyG's GATConv runs out of memory; the OOM is reported as a result. The full-batch
  schedule (lr 0.005, 300 epochs, evaluation every 10) is ours: there is no published full-batch GAT recipe.
- ``--sampled``: PyG's recipe, fan-out 10, 10, 5 and batches of 512 seed nodes, 100 epochs, evaluation every 10
  epochs by layer-wise inference over full neighbourhoods. On CUDA (``--sampler static``, the default there) the
  batches are tree-sampled with fixed shapes on the GPU (:class:`cudnn_gnn.apps.static_sampler.StaticNeighborSampler`:
  each node's slots take ``min(deg, fanout)`` neighbours uniformly without replacement, as ``NeighborLoader`` draws
  them, but a node reached twice is two slots) and every step, sampling and gather included, replays one CUDA
  graph; ``--sampler pyg`` (the default on CPU) uses PyG's ``NeighborLoader``, which needs ``pyg-lib`` or
  ``torch-sparse``; on a CPU without either, ``--sampler static`` runs the same tree sampling with torch ops and
  needs nothing extra (a clear error says so, with the pip command). Each layer runs on the bipartite block it
  needs (sources within ``L - l`` hops, targets within ``L - l - 1``), as PyG's ``trim_to_layer``:
  ``conv((x_src, x_dst), edge_index, size=(n_src, n_dst))``.

    # H200: ours full batch, bf16, real size; then PyG at the largest scale it fits
    python examples/ogbn_products.py --synthetic --scale 1 --precision bf16 --epochs 5 --log products.jsonl
    python examples/ogbn_products.py --synthetic --scale 0.1 --precision bf16 --epochs 5 --model pyg-gat
    python examples/ogbn_products.py --data-root ~/ogb --runs 10 --sampled --device cuda
    python examples/ogbn_products.py --synthetic --scale 0.001 --epochs 2 --device cpu            # smoke
    python examples/ogbn_products.py --synthetic --scale 0.001 --epochs 1 --device cpu --sampled --sampler static
"""

from __future__ import annotations

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
    capture_wanted,
    captured_step,
    check_common_arguments,
    count_params,
    describe,
    finish_summary,
    grad_scaler,
    int_list,
    load_node_data,
    loader_inference,
    neighbor_loader,
    nonnegative_int,
    one_line,
    optimizer_step,
    positive_float,
    positive_int,
    probability,
    progress,
    report_seed,
    require_sampler,
    run_main,
    seed_everything,
    seeds_of,
    train_epochs,
)
from torch import Tensor

NAME = "ogbn-products"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(description=__doc__)
    add_common_arguments(ap, epochs=None, eval_every=10)
    ap.add_argument("--sampled", action="store_true", help="NeighborLoader mini-batches (PyG's recipe)")
    ap.add_argument("--layers", type=positive_int, default=3, help="GAT layers")
    ap.add_argument("--heads", type=positive_int, default=4, help="attention heads per layer (the last averages them)")
    ap.add_argument("--hidden", type=positive_int, default=128, help="channels per head")
    ap.add_argument("--dropout", type=probability, default=0.5, help="dropout after each hidden layer")
    ap.add_argument("--lr", type=positive_float, default=None, help="default: 0.001 sampled (PyG), 0.005 full batch")
    ap.add_argument("--fanout", type=int_list, default=[10, 10, 5], help="--sampled: neighbours per layer, input side first")
    ap.add_argument("--batch-size", type=positive_int, default=512, help="--sampled: seed nodes per batch")
    ap.add_argument("--eval-batch-size", type=positive_int, default=2048, help="--sampled: nodes per inference batch")
    ap.add_argument("--num-workers", type=nonnegative_int, default=0, help="--sampled: NeighborLoader workers")
    ap.add_argument("--sampler", choices=("auto", "static", "pyg"), default="auto",
                    help="--sampled: static: StaticNeighborSampler on the device (tree sampling with fixed shapes; "
                         "sampling, gather and step captured in one CUDA graph; evaluation layer-wise over full "
                         "neighbourhoods on the device CSC); pyg: PyG's NeighborLoader; auto: static on CUDA, else pyg")
    add_capture_argument(ap)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    device = check_common_arguments(ap, args)
    if args.epochs is None:
        args.epochs = 100 if args.sampled else 300
    lr = args.lr if args.lr is not None else (0.001 if args.sampled else 0.005)
    fanout: list[int] = list(args.fanout)
    if args.sampler == "auto":
        args.sampler = "static" if device.type == "cuda" else "pyg"
    if args.sampled:
        if args.sampler == "pyg":
            try:
                require_sampler()  # fail before loading a large dataset
            except RuntimeError as exc:
                ap.error(one_line(exc))  # names --sampled and the pip command
        elif min(fanout) < 1:
            ap.error(f"--fanout must hold positive ints with --sampler static (fixed slots per node), got "
                     f"{','.join(map(str, fanout))!r}")
        elif args.precision == "fp16":
            ap.error("--precision must be bf16 or fp32 with --sampler static (fp16 needs a GradScaler, whose step "
                     "reads an overflow flag on the host), got fp16")
        if len(fanout) != args.layers:
            ap.error(f"--fanout must have one entry per layer ({args.layers}), got {','.join(map(str, fanout))!r}")

    from torch_geometric.data import Data

    from cudnn_gnn.datasets import ogb_evaluator
    from cudnn_gnn.layers import ToCscGraph

    data = load_node_data(NAME, args, device, ap)
    LOG.info(describe(data, NAME, args) + f"; {'sampled' if args.sampled else 'full batch'}, lr {lr}")
    n = data.num_nodes
    x = data.x.to(device).float()
    y = data.y.to(device).view(-1)
    split = {k: getattr(data, f"{k}_idx").to(device) for k in ("train", "valid", "test")}
    num_classes = int(data.num_classes)
    evaluator = ogb_evaluator(NAME)

    graph: Any = None
    train_loader = infer_loader = static = None
    if args.sampled and args.sampler == "static":  # the CSC, features and labels on the device once
        from cudnn_gnn import CscGraph
        from cudnn_gnn.apps.static_sampler import StaticNeighborSampler

        csc = CscGraph.from_edge_index(data.edge_index.to(device), num_nodes=n)
        static = StaticNeighborSampler(csc.offsets, csc.indices, fanout=fanout, batch_size=args.batch_size,
                                       node_attrs={"x": x, "y": y}, device=device)
        del csc
    elif args.sampled:  # samplers work on the CPU structure; features stay on the device and are gathered by n_id
        structure = Data(edge_index=data.edge_index.cpu(), num_nodes=n)
        train_loader = neighbor_loader(structure, split["train"].cpu(), fanout, args.batch_size, shuffle=True,
                                       num_workers=args.num_workers)
        infer_loader = neighbor_loader(structure, None, [-1], args.eval_batch_size, shuffle=False,
                                       num_workers=args.num_workers)
    else:
        graph = data.edge_index.to(device)
        if args.model == "gat":  # convert once (CSC + self-loop form); every layer and epoch reuses it
            graph = ToCscGraph()(Data(edge_index=graph, num_nodes=n)).csc_graph
    del data

    def acc(pred: Tensor, idx: Tensor) -> float:
        return float(evaluator.eval({"y_true": y[idx].view(-1, 1).cpu(), "y_pred": pred[idx].view(-1, 1).cpu()})["acc"])

    log = JsonLines(args.log)
    runs: list[dict[str, Any]] = []
    params = 0
    for seed in seeds_of(args):
        seed_everything(seed)
        model = OgbGAT(args.model, x.size(1), args.hidden, num_classes, layers=args.layers, heads=args.heads,
                       out_heads=args.heads, dropout=args.dropout, norm=False, activation="elu",
                       backend=args.backend).to(device)
        params = count_params(model)
        # a NeighborLoader batch has its own shapes; a static one has fixed shapes, PyG's model included
        capture = (capture_wanted(args, device) and not args.sampled) or (
            static is not None and device.type == "cuda" and bool(args.capture))
        opt = torch.optim.Adam(model.parameters(), lr=lr, capturable=capture, fused=capture or None)
        scaler = grad_scaler(args.precision, device)

        def backward(loss: Tensor, opt: torch.optim.Optimizer = opt, scaler: Any = scaler) -> None:
            optimizer_step(loss, opt, scaler)

        static_step = None
        if static is not None:
            from cudnn_gnn.apps.capture import CapturedStep
            from cudnn_gnn.apps.static_sampler import capture_ahead, sampled_loss

            static_step = CapturedStep(
                sampled_loss(model, static, pyg=args.model == "pyg-gat"), optimizer=opt, model=model, capture=capture,
                inputs={"seeds": torch.zeros(args.batch_size, dtype=torch.int64, device=device),
                        "seed_valid": torch.ones(args.batch_size, dtype=torch.bool, device=device)},
                autocast_dtype=torch.bfloat16 if args.precision == "bf16" and device.type == "cuda" else None)
            capture_ahead(static_step, static.epoch(split["train"]))  # before epoch 1; model state put back
        captured = None if not capture or args.sampled else captured_step(
            args, lambda x, graph, model=model: F.cross_entropy(model(x, graph)[split["train"]].float(),
                                                                 y[split["train"]]),
            optimizer=opt, inputs={"x": x, "graph": graph}, model=model)

        def step_full(epoch: int, model: OgbGAT = model, opt: torch.optim.Optimizer = opt,
                      captured: Any = captured) -> float:
            model.train()
            if captured is not None:
                return captured()  # type: ignore[no-any-return]
            opt.zero_grad(set_to_none=True)
            with autocast(device, args.precision):
                out = model(x, graph)
            loss = F.cross_entropy(out[split["train"]].float(), y[split["train"]])
            backward(loss)
            return loss.item()

        def step_static(epoch: int, model: OgbGAT = model, step: Any = static_step) -> float:
            """One epoch of tree-sampled batches, each step one replay (the last batch padded, masked)."""
            model.train()
            for seeds, valid in progress(static.epoch(split["train"]), total=static.num_batches(split["train"].numel()),
                                         desc=f"epoch {epoch}", enabled=not args.no_progress):
                step(seeds=seeds, seed_valid=valid)
            return step.mean_loss()  # type: ignore[no-any-return]

        def step_sampled(epoch: int, model: OgbGAT = model, opt: torch.optim.Optimizer = opt) -> float:
            model.train()
            total = torch.zeros((), device=device)
            count = 0
            for batch in progress(train_loader, desc=f"epoch {epoch}", enabled=not args.no_progress):
                n_id = batch.n_id.to(device)
                opt.zero_grad(set_to_none=True)
                with autocast(device, args.precision):
                    # pyg-lib gives per-hop counts (each layer then runs on its bipartite block); torch-sparse
                    # does not, and every layer runs on the whole sampled subgraph, as in PyG's example.
                    out = model(x[n_id], batch.edge_index.to(device), None, getattr(batch, "num_sampled_nodes", None),
                                getattr(batch, "num_sampled_edges", None), sampled=True)
                bs = batch.batch_size
                loss = F.cross_entropy(out[:bs].float(), y[n_id[:bs]])
                backward(loss)
                total += loss.detach() * bs  # no host sync per batch
                count += bs
            return float(total) / max(count, 1)

        @torch.no_grad()
        def evaluate(model: OgbGAT = model) -> tuple[float, float, float]:
            model.eval()
            if static is not None:  # every layer over full in-neighbourhoods, on the sampler's device CSC
                from cudnn_gnn.apps.inference import layerwise_inference as full_inference

                def layer(i: int, xs: Any, edge_index: Any, size: tuple[int, int]) -> Tensor:
                    with autocast(device, args.precision):
                        return model.layer(i, xs, edge_index, None, size=size)

                out = full_inference(layer, len(model.convs), x, static.colptr, static.row, device=device)
            elif args.sampled:
                out = loader_inference(model, x, infer_loader, device, args.precision, not args.no_progress)
            else:
                with autocast(device, args.precision):
                    out = model(x, graph)
            pred = out.argmax(dim=-1)
            return acc(pred, split["train"]), acc(pred, split["valid"]), acc(pred, split["test"])

        res = train_epochs(args=args, device=device, seed=seed, label=f"{NAME} {args.model}", model=model,
                           step=step_static if static is not None else step_sampled if args.sampled else step_full,
                           evaluate=evaluate, log=log, optimizer=opt, scaler=scaler)
        runs.append(res)
        del model, opt
        if report_seed(seed, res, "valid acc", "test acc"):
            break
    log.close()
    return finish_summary(NAME, args, device, "acc", runs, params, sampled=args.sampled, lr=lr)


if __name__ == "__main__":
    sys.exit(run_main(main))
