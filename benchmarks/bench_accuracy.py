"""Accuracy and loss curves of captured training steps against eager ones, over seeds.

    python benchmarks/bench_accuracy.py                                  # CUDA: Cora, CiteSeer, arxiv-shaped; 10 seeds
    python benchmarks/bench_accuracy.py --out out/accuracy.json --md out/accuracy.md --plot out/accuracy.png
    python benchmarks/bench_accuracy.py --workloads molecules            # CUDA: ogbg-molbace GPS, graph-level
    python benchmarks/bench_accuracy.py --smoke                          # CPU, seconds (no capture there: see below)

Full-graph training captures each step in one CUDA graph by default on CUDA
(:class:`cudnn_gnn.apps.capture.CapturedStep`); this checks that it learns what eager training learns. Every run goes
through the code users run, once with capture on and once with it off (``--capture`` / ``--no-capture``), for the
same seeds, so both modes of a seed start from the same weights and seed the same dropout generator:

- **Cora, CiteSeer** (real, bundled; ``--data-root`` for other copies): ``python -m cudnn_gnn train``'s
  :func:`cudnn_gnn.apps.train.train_planetoid`, the GAT paper's model and setup with its early stopping (at most
  ``--epochs``, patience ``--patience``). Compared: the test accuracy at the reported epoch (the last at which
  validation loss and accuracy both improved) and the training loss of every epoch (with dropout, as trained).
- **arxiv**: ``examples/ogbn_arxiv.py --synthetic`` (its ``main``, in-process): DGL's OGB recipe (3 layers of 3 heads x
  250, residuals, batch norm, RMSprop with a 50-epoch warm-up, the ``log(eps + CE)`` loss) on the ogbn-arxiv-shaped
  synthetic graph at full size (169,343 nodes, 2.3M edges after ``to_undirected``: the graph that
  ``benchmarks/_graphs.make_graph`` builds for the arxiv preset, from the same ``synthetic_ogbn`` call). Its labels are
  learnable: the argmax of a random linear function of hidden vectors (averaged with their in-neighbours') of which
  the features are a noisy linear image (:func:`cudnn_gnn.datasets.synthetic_ogbn`). ``--arxiv-epochs`` epochs,
  evaluation every ``--arxiv-eval-every``. Compared: the training loss of every epoch, the test accuracy at the best
  validation accuracy (what the example reports) and at the last evaluation.
- **molecules** (graph-level; not in the default ``--workloads``: its 10 seeds take about 5 minutes on an H100, past
  the time budget with the others): ``examples/gps_molecules.py --dataset ogbg-molbace --batching packed`` (its
  ``main``, in-process), the example's GPS model (3 layers of 64 channels, 4 heads: local GAT, global attention) on
  the bundled ogbg-molbace, its training split packed into batches of one fixed budget
  (:class:`cudnn_gnn.apps.static_batcher.StaticGraphBatcher`, 128 molecules), Adam, ``--molecules-epochs`` epochs;
  ``--capture`` replays the whole step in one CUDA graph, ``--no-capture`` runs it eagerly on the same batches.
  Compared: the training loss of every epoch (the mean over its batches, with dropout), the test ROC-AUC (OGB's
  scaffold split) at the best valid ROC-AUC (what the example reports) and at the last epoch.

Statistics, per workload and metric: mean +- std (ddof 1) over the seeds for each mode; the difference of the means
(captured - eager) against its standard error ``sqrt(s_c^2 / n_c + s_e^2 / n_e)`` and against the seeds' pooled
standard deviation; "within noise" when ``|difference| <= 2`` standard errors (two samples of one law stay inside
about 95% of the time); and the per-seed paired difference (same seed both ways). The loss curves get the same test
at every epoch (Cora and CiteSeer: up to the shortest run, early stopping ends runs at different epochs), summed up
as the share of epochs within 2 standard errors and the largest ``|difference| / standard error``; every run's curve
is in the JSON.

Time: the seeds run in rounds (one round: every workload, both modes, one seed), so that a cut leaves every workload
with the same seeds. A round that would end past ``--time-budget`` seconds (judged by the last round's time, the
first one's including the kernels' first-call builds) is not started; the JSON and the table say how many seeds ran.
The defaults are sized to end within 8 minutes on one H200 (the default budget, 420 s, plus start-up).

``--smoke``: a CPU run in seconds of every workload (2 seeds, 4 epochs, smaller models, a tiny arxiv-shaped graph, 16
molecules of each split). CUDA graphs capture CUDA work only, so on a CPU both modes run the same eager step (the
``--capture`` flag is passed and ignored, as it is for users): the output says so, and the per-seed results of the
two modes agree exactly, a check of the pairing and the statistics. ``--smoke --device cuda`` is the same short run
with capture on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))  # examples/ogbn_arxiv.py, gps_molecules.py and their _common

from _bench_common import environment, free_memory, write_json  # noqa: E402

from cudnn_gnn.apps._cli import (  # noqa: E402
    ArgumentParser,
    check_device,
    check_outputs,
    check_planetoid_root,
    fraction,
    positive_float,
    positive_int,
)
from cudnn_gnn.apps._util import write_text  # noqa: E402

MODES = ("captured", "eager")
WORKLOADS = ("cora", "citeseer", "arxiv", "molecules")
#: the full run's workloads: molecules (about 5 minutes of 10 seeds on an H100) would take it past its time budget
DEFAULT_WORKLOADS = ("cora", "citeseer", "arxiv")
PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer"}
MOLECULES = "ogbg-molbace"
LABELS = {"cora": "Cora", "citeseer": "CiteSeer", "arxiv": "arxiv-shaped", "molecules": f"{MOLECULES} GPS"}
#: the metrics compared, per workload: (key, table label, scale, digits)
METRICS: dict[str, list[tuple[str, str, float, int]]] = {
    **{w: [("test_acc", "test acc (%), reported epoch", 100.0, 2)] for w in PLANETOID},
    "arxiv": [("test_acc", "test acc (%), best valid", 100.0, 2),
              ("final_test_acc", "test acc (%), last evaluation", 100.0, 2)],
    "molecules": [("test_rocauc", "test ROC-AUC, best valid", 1.0, 4),
                  ("final_test_rocauc", "test ROC-AUC, last epoch", 1.0, 4)],
}
NOT_CAPTURED = "not captured in a CUDA graph"
#: the full run's settings, and the smoke run's (CPU, seconds)
DEFAULTS = {"seeds": 10, "epochs": 1000, "patience": 100, "arxiv_epochs": 100, "arxiv_eval_every": 5, "arxiv_scale": 1.0,
            "molecules_epochs": 50}
# one epoch more than CapturedStep's warm-up steps (3), so that --smoke --device cuda captures and replays (the smoke
# molecules run has one batch an epoch)
SMOKE = {"seeds": 2, "epochs": 4, "patience": 100, "arxiv_epochs": 4, "arxiv_eval_every": 1, "arxiv_scale": 0.005,
         "molecules_epochs": 4}
SMOKE_PLANETOID_MODEL = {"hidden": 4, "heads": 2}  # the paper's is 8 x 8: CiteSeer's 3,703 inputs make it slow on a CPU
SMOKE_ARXIV_MODEL = ["--layers", "2", "--heads", "2", "--hidden", "8"]
# 16 molecules of each split (both classes in each, for ROC-AUC), one batch an epoch, a small model
SMOKE_MOLECULES_MODEL = ["--limit", "16", "--batch-size", "16", "--channels", "8", "--layers", "1", "--heads", "2"]
_SHOWN: set[str] = set()  # the other warnings already shown


# ----------------------------------------------------------------------------------------------- runs


def _capture_warnings(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``fn()``'s result and the one-line reasons of the steps that were not captured (``CapturedStep``'s
    ``RuntimeWarning``); every other warning is shown as usual."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    notes = []
    for w in caught:
        if NOT_CAPTURED in str(w.message):
            notes.append(str(w.message))
        elif str(w.message) not in _SHOWN:  # once a benchmark, not once a run
            _SHOWN.add(str(w.message))
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return result, list(dict.fromkeys(notes))


def run_planetoid(name: str, data: Any, seed: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``python -m cudnn_gnn train`` run (:func:`train_planetoid`, the GAT paper's setup) on ``data``."""
    from cudnn_gnn.apps.train import TrainConfig, train_planetoid

    cfg = TrainConfig(dataset=PLANETOID[name], device=str(args.device), seed=seed, epochs=args.epochs,
                      patience=args.patience, progress=False, capture=mode == "captured",
                      **(SMOKE_PLANETOID_MODEL if args.smoke else {}))
    t0 = time.perf_counter()
    res, notes = _capture_warnings(lambda: train_planetoid(cfg, data=data))
    return {"test_acc": res["test_acc"], "val_acc": res["val_acc"], "best_epoch": res["best_epoch"],
            "epochs_run": res["epochs_run"], "seconds": time.perf_counter() - t0, "sec_per_epoch": res["sec_per_epoch"],
            "captured": bool(res["captured"]), "notes": notes, "train_loss": res["curves"]["train_loss"]}


def arxiv_argv(seed: int, mode: str, args: argparse.Namespace, log: str) -> list[str]:
    """The ``examples/ogbn_arxiv.py`` command line of one run (its defaults but for the epochs and evaluation)."""
    argv = ["--synthetic", "--scale", f"{args.arxiv_scale:g}", "--device", str(args.device), "--seeds", str(seed),
            "--epochs", str(args.arxiv_epochs), "--eval-every", str(args.arxiv_eval_every), "--no-progress",
            "--log", log, "--capture" if mode == "captured" else "--no-capture"]
    return argv + (SMOKE_ARXIV_MODEL if args.smoke else [])


def run_arxiv(seed: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``examples/ogbn_arxiv.py --synthetic`` run, its per-epoch records read from its ``--log``."""
    import ogbn_arxiv

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        argv = arxiv_argv(seed, mode, args, log)
        with contextlib.redirect_stdout(io.StringIO()):  # its per-seed lines; ours follow
            summary, notes = _capture_warnings(lambda: ogbn_arxiv.main(argv))
        with open(log) as f:
            records = [json.loads(line) for line in f if line.strip()]
    run = summary["per_run"][0]
    if run.get("oom"):
        raise RuntimeError(f"out of memory: {run['error']}")
    epochs = [r for r in records if "loss" in r]
    evals = [r for r in records if "test" in r]
    # the example does not say whether its step replayed: CapturedStep warns when it cannot capture, and captures
    # once its warm-up steps are done (our layers on CUDA in fp32, as here)
    captured = mode == "captured" and args.device.type == "cuda" and not notes and len(epochs) > _capture_warmup()
    return {"test_acc": run["test"], "val_acc": run["valid"], "best_epoch": run["epoch"],
            "final_test_acc": evals[-1]["test"], "final_val_acc": evals[-1]["valid"], "epochs_run": len(epochs),
            "seconds": time.perf_counter() - t0, "sec_per_epoch": run["sec_per_epoch"],
            "peak_memory_bytes": run["peak_memory_bytes"], "captured": captured, "notes": notes,
            "train_loss": [r["loss"] for r in epochs], "argv": [a if a != log else "LOG.jsonl" for a in argv]}


def molecules_argv(seed: int, mode: str, args: argparse.Namespace) -> list[str]:
    """The ``examples/gps_molecules.py`` command line of one run: its defaults (3 GPS layers of 64 channels, 4 heads,
    batches of 128 molecules, Adam) but for the epochs, on packed batches on every device (its ``auto`` takes PyG's
    loader on a CPU), so that the two modes differ only in the capture."""
    argv = ["--dataset", MOLECULES, "--device", str(args.device), "--seeds", str(seed), "--epochs",
            str(args.molecules_epochs), "--batching", "packed", "--no-progress", "--quiet",
            "--capture" if mode == "captured" else "--no-capture"]
    return argv + (SMOKE_MOLECULES_MODEL if args.smoke else [])


def run_molecules(seed: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``examples/gps_molecules.py`` run (its ``main``, in-process), its per-epoch curves read from its result."""
    import gps_molecules

    t0 = time.perf_counter()
    argv = molecules_argv(seed, mode, args)
    with contextlib.redirect_stdout(io.StringIO()):  # its summary line; ours follow
        summary, notes = _capture_warnings(lambda: gps_molecules.main(argv))
    run = summary["per_run"][0]
    curves, metric = run["curves"], summary["metric"]
    return {"test_rocauc": run["test"], "val_rocauc": run["valid"], "best_epoch": run["epoch"],
            "final_test_rocauc": curves[f"test {metric}"][-1], "final_val_rocauc": curves[f"valid {metric}"][-1],
            "epochs_run": len(curves["train loss"]), "seconds": time.perf_counter() - t0,
            "sec_per_epoch": run["seconds"] / max(len(curves["train loss"]), 1), "captured": bool(run["captured"]),
            "notes": notes, "train_loss": curves["train loss"], "argv": argv}


RUNNERS: dict[str, Callable[[int, str, argparse.Namespace], dict[str, Any]]] = {
    "arxiv": run_arxiv, "molecules": run_molecules}


def _capture_warmup() -> int:
    """The eager warm-up steps a :class:`CapturedStep` runs before it captures (its default)."""
    import inspect

    from cudnn_gnn.apps.capture import CapturedStep

    return int(inspect.signature(CapturedStep).parameters["warmup"].default)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every workload, both modes, seed after seed (rounds), within ``args.time_budget``."""
    t0 = time.perf_counter()
    data: dict[str, Any] = {}
    if any(w in PLANETOID for w in args.workloads):
        from cudnn_gnn.datasets import load_planetoid

        for w in args.workloads:
            if w in PLANETOID:
                data[w] = load_planetoid(PLANETOID[w], args.data_root, normalize_features=True)[0]
    runs: list[dict[str, Any]] = []
    seeds_run: list[int] = []
    last_round = 0.0
    stopped = None
    for seed in range(args.seeds):
        elapsed = time.perf_counter() - t0
        if seeds_run and elapsed + last_round > args.time_budget:
            stopped = (f"time budget: {elapsed:.0f} s spent, a round takes about {last_round:.0f} s, budget "
                       f"{args.time_budget:.0f} s; seeds {seed}..{args.seeds - 1} not run")
            print(stopped, flush=True)
            break
        r0 = time.perf_counter()
        for w in args.workloads:
            for mode in MODES:
                rec: dict[str, Any] = {"workload": w, "mode": mode, "seed": seed}
                try:
                    rec.update(RUNNERS[w](seed, mode, args) if w in RUNNERS else run_planetoid(w, data[w], seed, mode, args))
                except Exception as exc:  # noqa: BLE001 - one failing run is a result, not the end of the benchmark
                    rec["error"] = " ".join(str(exc).split())[:300]
                runs.append(rec)
                print(_run_line(rec), flush=True)
                free_memory(args.device)
        seeds_run.append(seed)
        last_round = time.perf_counter() - r0
    return {"runs": runs, "seeds_run": seeds_run, "stopped": stopped, "wall_seconds": time.perf_counter() - t0}


def _run_line(rec: dict[str, Any]) -> str:
    head = f"{LABELS[rec['workload']]:16s} {rec['mode']:8s} seed {rec['seed']:2d}: "
    if "error" in rec:
        return head + f"error: {rec['error']}"
    loss = rec["train_loss"][-1] if rec["train_loss"] else float("nan")
    score = f"test ROC-AUC {rec['test_rocauc']:.4f}" if "test_rocauc" in rec else f"test acc {100 * rec['test_acc']:.2f}%"
    return (head + f"{score} (epoch {rec['best_epoch']} of {rec['epochs_run']}), last "
            f"train loss {loss:.4f}, {rec['seconds']:.1f} s, " + ("captured" if rec["captured"] else "eager"))


# ----------------------------------------------------------------------------------------------- statistics


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for one value; NaN for none). Unlike the examples'
    ``mean_std`` it keeps non-finite values: a run that diverged must make its mode's figures NaN, not vanish."""
    if not values:
        return math.nan, math.nan
    mean = math.fsum(values) / len(values)  # not statistics.stdev: it raises on a NaN
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def compare(captured: list[float], eager: list[float], paired: list[tuple[float, float]]) -> dict[str, Any]:
    """Captured against eager values of one metric over seeds: each mode's mean +- std, the difference of the means
    against its standard error and the pooled spread, whether it is within 2 standard errors, the paired
    (same-seed) differences' mean +- std."""
    mc, sc = mean_std(captured)
    me, se = mean_std(eager)
    diff = mc - me
    se_diff = math.sqrt(sc**2 / len(captured) + se**2 / len(eager)) if captured and eager else float("nan")
    if math.isnan(diff) or math.isnan(se_diff):  # a diverged run (NaN loss) or a mode without runs: not within noise
        z = math.nan
    elif se_diff > 0:
        z = diff / se_diff
    else:  # no spread at all (one seed, or a CPU run where both modes are one computation): equal or not
        z = 0.0 if diff == 0 else math.copysign(math.inf, diff)
    pm, ps = mean_std([c - e for c, e in paired])
    return {"captured_mean": mc, "captured_std": sc, "eager_mean": me, "eager_std": se, "n_captured": len(captured),
            "n_eager": len(eager), "difference": diff, "se_difference": se_diff,
            "pooled_std": math.sqrt((sc**2 + se**2) / 2), "z": z, "within_noise": abs(z) <= 2.0,
            "paired_mean": pm, "paired_std": ps, "n_paired": len(paired)}


def _ok(runs: list[dict[str, Any]], w: str, mode: str) -> dict[int, dict[str, Any]]:
    return {r["seed"]: r for r in runs if r["workload"] == w and r["mode"] == mode and "error" not in r}


def summarize(runs: list[dict[str, Any]], workloads: list[str], device: torch.device) -> list[dict[str, Any]]:
    """Per workload: the metrics compared (:func:`compare`), the mean +- std loss curves of both modes up to the
    shortest run and their epoch-by-epoch comparison, how many runs were captured, and why the others were not."""
    out = []
    for w in workloads:
        by_mode = {m: _ok(runs, w, m) for m in MODES}
        both = sorted(set(by_mode["captured"]) & set(by_mode["eager"]))
        metrics = [key for key, *_ in METRICS[w]]
        s: dict[str, Any] = {"workload": w, "label": LABELS[w], "seeds_paired": both,
                             "runs": {m: len(by_mode[m]) for m in MODES},
                             "errors": [f"{r['mode']} seed {r['seed']}: {r['error']}" for r in runs
                                        if r["workload"] == w and "error" in r]}
        # the metrics, then where early stopping chose and ended (Cora, CiteSeer)
        for key in [*metrics, "best_epoch", "epochs_run"]:
            s[key] = compare([r[key] for r in by_mode["captured"].values()], [r[key] for r in by_mode["eager"].values()],
                             [(by_mode["captured"][i][key], by_mode["eager"][i][key]) for i in both])
        s["seconds_mean"] = {m: mean_std([r["seconds"] for r in by_mode[m].values()])[0] for m in MODES}
        s["curve"] = curve(by_mode, both)
        caps = list(by_mode["captured"].values())
        s["captured_runs"] = sum(r["captured"] for r in caps)
        notes = list(dict.fromkeys(n for r in caps for n in r["notes"]))
        if device.type != "cuda":
            notes.insert(0, f"capture needs CUDA: on {device} both modes run the same eager step")
        s["capture_notes"] = notes
        out.append(s)
    return out


def curve(by_mode: dict[str, dict[int, dict[str, Any]]], both: list[int]) -> dict[str, Any]:
    """The training loss per epoch, mean +- std over seeds for each mode up to the shortest run, each epoch's
    :func:`compare`, and the last common epoch's comparison."""
    curves = {m: [r["train_loss"] for r in by_mode[m].values()] for m in MODES}
    lengths = [len(c) for cs in curves.values() for c in cs]
    epochs = min(lengths) if lengths and all(curves.values()) else 0
    out: dict[str, Any] = {"epochs": epochs}
    if not epochs:
        return out
    per_epoch = [compare([c[e] for c in curves["captured"]], [c[e] for c in curves["eager"]],
                         [(by_mode["captured"][i]["train_loss"][e], by_mode["eager"][i]["train_loss"][e]) for i in both])
                 for e in range(epochs)]
    for m in MODES:
        out[f"{m}_mean"] = [p[f"{m}_mean"] for p in per_epoch]
        out[f"{m}_std"] = [p[f"{m}_std"] for p in per_epoch]
    out["within_noise_share"] = sum(p["within_noise"] for p in per_epoch) / epochs
    zs = [abs(p["z"]) for p in per_epoch]
    out["max_abs_z"] = math.nan if any(map(math.isnan, zs)) else max(zs)
    out["last"] = per_epoch[-1]
    return out


# ----------------------------------------------------------------------------------------------- output


def _pm(c: dict[str, Any], mode: str, scale: float, digits: int) -> str:
    return f"{scale * c[f'{mode}_mean']:.{digits}f} ± {scale * c[f'{mode}_std']:.{digits}f}"


def _row(label: str, metric: str, c: dict[str, Any], scale: float, digits: int) -> str:
    z = "-" if not math.isfinite(c["z"]) else f"{abs(c['z']):.2f}"
    return (f"| {label} | {metric} | {_pm(c, 'captured', scale, digits)} | {_pm(c, 'eager', scale, digits)} | "
            f"{scale * c['difference']:+.{digits}f} | {scale * c['se_difference']:.{digits}f} | {z} | "
            f"{'yes' if c['within_noise'] else 'no'} | {scale * c['paired_mean']:+.{digits}f} ± "
            f"{scale * c['paired_std']:.{digits}f} | {c['n_captured']} / {c['n_eager']} |")


def markdown(result: dict[str, Any]) -> str:
    """The comparison table (accuracies in %, losses as trained), with how the runs were made."""
    env, st = result["environment"], result["settings"]
    where = env["gpu"] or env["device"]
    lines = [f"Captured against eager training steps on {where}: seeds 0..{st['seeds'] - 1} asked, "
             f"{len(result['seeds_run'])} run, {result['wall_seconds']:.0f} s "
             f"(`python {' '.join(['benchmarks/bench_accuracy.py', *st['argv']])}`).", ""]
    if result["stopped"]:
        lines += [f"Stopped early: {result['stopped']}.", ""]
    lines += ["| workload | metric | captured | eager | captured - eager | its standard error | \\|diff\\| / SE | "
              "within 2 SE | paired (same seed) | runs |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in result["summary"]:
        label = s["label"]
        for key, metric, scale, digits in METRICS[s["workload"]]:
            lines.append(_row(label, metric, s[key], scale, digits))
        cv = s["curve"]
        if cv["epochs"]:
            lines.append(_row(label, f"train loss, epoch {cv['epochs']}", cv["last"], 1.0, 4))
            lines.append(f"| {label} | train loss, epochs 1-{cv['epochs']} | | | | | max {cv['max_abs_z']:.2f} | "
                         f"{100 * cv['within_noise_share']:.0f}% of epochs | | |")
    lines.append("")
    for s in result["summary"]:
        caps, secs = s["runs"]["captured"], s["seconds_mean"]
        lines.append(f"- {s['label']}: {s['captured_runs']} of {caps} captured-mode runs replayed a CUDA graph; a run "
                     f"took {secs['captured']:.1f} s captured, {secs['eager']:.1f} s eager (mean wall time, first-call kernel "
                     f"builds included); reported epoch {_pm(s['best_epoch'], 'captured', 1.0, 0)} captured, "
                     f"{_pm(s['best_epoch'], 'eager', 1.0, 0)} eager"
                     + (f"; {'; '.join(s['capture_notes'])}" if s["capture_notes"] else ""))
        lines += [f"- {s['label']}: error: {e}" for e in s["errors"]]
    ran = st["workloads"]
    settings = []
    if any(w in PLANETOID for w in ran):
        settings.append(f"Cora/CiteSeer the train command's setup, at most {st['epochs']} epochs, patience "
                        f"{st['patience']} (loss curves up to the shortest run)")
    if "arxiv" in ran:
        settings.append(f"arxiv-shaped `examples/ogbn_arxiv.py --synthetic --scale {st['arxiv_scale']:g}`, "
                        f"{st['arxiv_epochs']} epochs, evaluation every {st['arxiv_eval_every']}")
    if "molecules" in ran:
        settings.append(f"molecules `examples/gps_molecules.py --dataset {MOLECULES} --batching packed`, "
                        f"{st['molecules_epochs']} epochs, scores on OGB's scaffold split every epoch")
    lines += ["", f"Settings: {'; '.join(settings)}. Standard error of the difference: sqrt(s_c²/n_c + s_e²/n_e), "
              "std with ddof 1."]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: str) -> None:
    """One column per workload: above, the training loss per epoch, mean +- std over seeds, both modes (captured
    dashed, so that equal curves both show); below, the difference of the means with +- 2 standard errors."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    rows = [s for s in result["summary"] if s["curve"]["epochs"]]
    cols = max(len(rows), 1)
    fig, axes = plt.subplots(2, cols, figsize=(5 * cols, 7), squeeze=False, sharex="col")
    for top, bottom, s in zip(axes[0], axes[1], rows):
        cv = s["curve"]
        xs = list(range(1, cv["epochs"] + 1))
        for mode, color, style in (("eager", "tab:orange", "-"), ("captured", "tab:blue", "--")):
            mean, std = cv[f"{mode}_mean"], cv[f"{mode}_std"]
            top.plot(xs, mean, color=color, linestyle=style, label=f"{mode} ({s['runs'][mode]} seeds)")
            top.fill_between(xs, [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)], color=color,
                             alpha=0.2)
        top.set_title(f"{s['label']}: train loss, mean ± std")
        top.set_ylabel("train loss")
        top.legend()
        diff = [c - e for c, e in zip(cv["captured_mean"], cv["eager_mean"])]
        band = [2 * math.sqrt(sc**2 / s["runs"]["captured"] + se**2 / s["runs"]["eager"])
                for sc, se in zip(cv["captured_std"], cv["eager_std"])]
        bottom.plot(xs, diff, color="tab:blue", label="captured - eager")
        bottom.fill_between(xs, [-b for b in band], band, color="tab:gray", alpha=0.3, label="± 2 standard errors")
        bottom.axhline(0.0, color="black", linewidth=0.8)
        bottom.set_xlabel("epoch")
        bottom.set_ylabel("difference of the means")
        bottom.legend()
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = ArgumentParser(prog="bench_accuracy.py", description=__doc__)
    ap.add_argument("--smoke", action="store_true",
                    help=f"a run in seconds: {SMOKE['seeds']} seeds, {SMOKE['epochs']} epochs, smaller models, a tiny "
                         "arxiv-shaped graph; CPU unless --device says otherwise")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=None,
                    help=f"default: {' '.join(DEFAULT_WORKLOADS)} (molecules would take the run past its time budget); "
                         "--smoke: all of them")
    ap.add_argument("--seeds", type=positive_int, default=None,
                    help=f"seeds 0..N-1, each trained both ways (default: {DEFAULTS['seeds']}; --smoke {SMOKE['seeds']})")
    ap.add_argument("--epochs", type=positive_int, default=None,
                    help=f"Cora/CiteSeer: at most this many epochs, early stopping ends sooner (default: the train "
                         f"command's {DEFAULTS['epochs']}; --smoke {SMOKE['epochs']})")
    ap.add_argument("--patience", type=positive_int, default=None,
                    help=f"Cora/CiteSeer: early-stopping patience (default: the train command's {DEFAULTS['patience']})")
    ap.add_argument("--arxiv-epochs", type=positive_int, default=None,
                    help=f"arxiv: epochs (default: {DEFAULTS['arxiv_epochs']}; --smoke {SMOKE['arxiv_epochs']})")
    ap.add_argument("--arxiv-eval-every", type=positive_int, default=None,
                    help=f"arxiv: evaluate every N epochs and after the last (default: {DEFAULTS['arxiv_eval_every']}; "
                         f"--smoke {SMOKE['arxiv_eval_every']})")
    ap.add_argument("--arxiv-scale", type=fraction, default=None,
                    help=f"arxiv: fraction of ogbn-arxiv's size (default: {DEFAULTS['arxiv_scale']:g}; --smoke "
                         f"{SMOKE['arxiv_scale']:g})")
    ap.add_argument("--molecules-epochs", type=positive_int, default=None,
                    help=f"molecules: epochs (default: the example's {DEFAULTS['molecules_epochs']}; --smoke "
                         f"{SMOKE['molecules_epochs']})")
    ap.add_argument("--data-root", default=None,
                    help="folder holding <Name>/raw/ind.<name>.* for Cora and CiteSeer (default: the bundled copies)")
    ap.add_argument("--time-budget", type=positive_float, default=420.0,
                    help="seconds: no round of seeds is started that would end past this (judged by the last round)")
    ap.add_argument("--out", default="bench_accuracy.json", help="JSON output path")
    ap.add_argument("--md", default=None, help="also write the markdown table here")
    ap.add_argument("--plot", default=None, help="also draw the loss curves here (PNG; needs matplotlib)")
    args = ap.parse_args(argv)
    preset = SMOKE if args.smoke else DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.workloads is None:
        args.workloads = list(WORKLOADS if args.smoke else DEFAULT_WORKLOADS)
    args.device = check_device(ap, args.device or ("cpu" if args.smoke else "cuda"))
    if args.device.type != "cuda" and not args.smoke:
        ap.error(f"--device must be a CUDA device for the full benchmark (capture is CUDA-only and the arxiv-shaped "
                 f"runs take hours on a CPU), got {str(args.device)!r}; use --smoke for the CPU smoke run")
    check_outputs(ap, {"--out": args.out, "--md": args.md, "--plot": args.plot})
    check_planetoid_root(ap, [PLANETOID[w] for w in args.workloads if w in PLANETOID], args.data_root)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    settings = {k: getattr(args, k) for k in (*DEFAULTS, "workloads", "time_budget", "smoke")}
    settings["argv"] = list(sys.argv[1:] if argv is None else argv)
    print(f"captured against eager on {args.device}: {', '.join(LABELS[w] for w in args.workloads)}, seeds "
          f"0..{args.seeds - 1}, time budget {args.time_budget:.0f} s", flush=True)
    done = run_all(args)
    result = {"schema": "cudnn-gnn/bench_accuracy/1", "environment": environment(args.device), "settings": settings,
              **done, "summary": summarize(done["runs"], args.workloads, args.device)}
    write_json(args.out, result)
    table = markdown(result)
    print(table)
    if args.md:
        write_text(args.md, table)
    if args.plot:
        plot(result, args.plot)
    return result


if __name__ == "__main__":
    main()
