"""The GAT paper's transductive experiment over seeds, for our GATConv and PyG's, on Cora or CiteSeer.

Each run is ``python -m cudnn_gnn train`` (:func:`cudnn_gnn.apps.train.train_planetoid`): 2 layers, 8 heads x 8
features, ELU, dropout 0.6 on inputs and attention, 1 averaged output head, Adam lr 0.005, weight decay 5e-4,
row-normalised features, early stopping with patience 100 on validation loss and accuracy, test accuracy at the
last epoch where both improved (Velickovic et al., ICLR 2018; paper: Cora 83.0 +- 0.7, CiteSeer 72.5 +- 0.7).
Both models run with the same seeds, so they start from identical weights.

    python examples/gat_cora.py --dataset Cora --seeds 0-9 --jobs 2 --json results/gat_cora.json
    python examples/gat_cora.py --dataset CiteSeer --seeds 0-9 --jobs 2
    python examples/gat_cora.py --device cuda --backend cudnn --seeds 0-4          # our layer on cuDNN vs PyG

On a CPU, ``--jobs N`` runs N trainings at once, one thread each (faster than one run on N threads for graphs
this small). On a GPU runs go one after the other.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import sys
import time
from typing import Any

from _common import LOG, ArgumentParser, mean_pm_std, mean_std, parse_seeds, positive_int, run_main, write_json

from cudnn_gnn.apps.train import (
    MODELS,
    TrainConfig,
    add_arguments,
    check_arguments,
    format_result,
    run_config,
    save_paths,
)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="gat,pyg-gat", help=f"comma-separated, from {', '.join(MODELS)}")
    ap.add_argument("--seeds", type=parse_seeds, default="0-9", help="e.g. 0-9 or 0,1,5 (each at most once)")
    ap.add_argument("--jobs", type=positive_int, default=1, help="parallel single-threaded runs (CPU only)")
    add_arguments(ap)
    ap.add_argument("--json", metavar="PATH", default=None, help="write every run and the summary as JSON")
    ap.set_defaults(log_every=0)  # many runs: one line each (--log-every N for their epochs)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            ap.error(f"--models must be drawn from {MODELS}, got {m!r}")
    if not models or len(set(models)) < len(models):
        ap.error(f"--models must name each model once, got {args.models!r}")
    device = check_arguments(ap, args, models)
    jobs = args.jobs if device.type == "cpu" else 1

    runs = [(m, s) for m in models for s in args.seeds]
    saves, plots = save_paths(args.save, models, args.seeds), save_paths(args.plot, models, args.seeds)
    configs = [
        TrainConfig(dataset=args.dataset, model=m, backend=args.backend, device=str(device), precision=args.precision,
                    seed=s, epochs=args.epochs, patience=args.patience, data_root=args.data_root,
                    threads=1 if jobs > 1 else args.threads, progress=not args.no_progress and jobs == 1,
                    log_every=args.log_every, save=saves[i] if saves else None,
                    plot=plots[i] if plots else None).__dict__
        for i, (m, s) in enumerate(runs)
    ]
    LOG.info(f"{args.dataset}: models {', '.join(models)}, seeds {args.seeds}, device {device}, backend {args.backend}, "
          f"precision {args.precision}, {jobs} job(s)")
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []
    if jobs > 1:
        with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            for res in pool.map(run_config, configs):
                LOG.info(format_result(res))
                results.append(res)
    else:
        for cfg in configs:
            res = run_config(cfg)
            LOG.info(format_result(res))
            results.append(res)
    wall = time.perf_counter() - t0

    summary = {}
    spread = " (mean ± std)" if len(args.seeds) > 1 else ""
    print(f"\n| {args.dataset} ({device}, {args.precision}) | test acc{spread} | val acc | epochs | s/run |")
    print("| --- | --- | --- | --- | --- |")
    for m in models:
        rs = [r for r in results if r["model"] == m]
        tm, ts = mean_std([r["test_acc"] for r in rs])
        vm, vs = mean_std([r["val_acc"] for r in rs])
        em, _ = mean_std([float(r["epochs_run"]) for r in rs])
        sm, _ = mean_std([r["seconds"] for r in rs])
        summary[m] = {"test_mean": tm, "test_std": ts, "val_mean": vm, "val_std": vs, "epochs_mean": em,
                      "seconds_mean": sm, "runs": len(rs), "params": rs[0]["params"]}
        n = len(rs)
        print(f"| {m} | {mean_pm_std(tm, ts, n, digits=1)} | {mean_pm_std(vm, vs, n, digits=1)} | {em:.0f} | "
              f"{sm:.1f} |")
    std = ", std with ddof=1" if len(args.seeds) > 1 else ""
    print(f"({len(args.seeds)} seed(s) {args.seeds[0]}..{args.seeds[-1]}{std}; {wall:.0f} s wall)")
    out = {"dataset": args.dataset, "device": str(device), "backend": args.backend, "precision": args.precision,
           "seeds": args.seeds, "wall_seconds": wall, "summary": summary, "runs": results}
    write_json(args.json, out)
    return out


if __name__ == "__main__":
    sys.exit(run_main(main))
