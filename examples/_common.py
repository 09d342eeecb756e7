"""Helpers shared by the example scripts (not part of the package; the scripts import it from their folder).

Seeds and reporting (OGB's rule: mean and standard deviation over runs with different seeds, plus the number of
parameters), JSON-lines logs of per-epoch time and peak memory, full-batch and neighbour-sampled training loops.
The model the OGB scripts train is :class:`cudnn_gnn.apps.models.OgbGAT` (re-exported here).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric import seed_everything  # noqa: F401 - Python's, numpy's and torch's generators, for the scripts

from cudnn_gnn.apps._cli import (  # noqa: F401
    SEED_MAX,
    ArgumentParser,
    check_backend,
    check_data_root,
    check_device,
    check_distinct_outputs,
    check_matplotlib,
    check_output_path,
    fraction,
    int_list,
    nonnegative_float,
    nonnegative_int,
    one_line,
    positive_float,
    positive_int,
    probability,
    run_main,
    seed_int,
)
from cudnn_gnn.apps._log import LOG, add_verbosity_arguments, format_epoch, setup_logging  # noqa: F401
from cudnn_gnn.apps._progress import progress
from cudnn_gnn.apps._resume import check_config, load_checkpoint, load_optimizer, save_training, set_rng_state
from cudnn_gnn.apps._util import (  # noqa: F401
    conv_class,
    is_oom,
    output_file,
    plot_curves,
    save_checkpoint,
    state_copy,
    write_json,
)
from cudnn_gnn.apps.models import OGB_MODELS as MODELS
from cudnn_gnn.apps.models import OgbGAT  # noqa: F401 - the scripts' model, re-exported for them
from cudnn_gnn.apps.train import (  # noqa: F401
    add_resume_arguments,
    autocast,
    grad_scaler,
    optimizer_step,
    resolve_device,
)

# One implementation for the CLI and the scripts.
from cudnn_gnn.backends import GAT_BACKENDS

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
#: ``--scale`` of the synthetic graphs on a CPU unless given (the real sizes are for a GPU).
CPU_SCALE = 0.01


# ----------------------------------------------------------------------------------------------- arguments


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` -> 0..9, ``"0,3,7"`` -> [0, 3, 7], ``"4"`` -> [4] (ranges and lists may be mixed); each seed in
    ``[0, 2**32 - 1]`` and named once (two runs of one seed would write the same outputs)."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep and lo else (int(part), int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be seeds like 0-9 or 0,3,7, got {text!r}") from None
        if not 0 <= first <= SEED_MAX or not 0 <= last <= SEED_MAX:
            raise argparse.ArgumentTypeError(f"must be seeds in [0, {SEED_MAX}], got {part!r}")
        if last < first:
            raise argparse.ArgumentTypeError(f"must be increasing ranges, got {part!r}")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise argparse.ArgumentTypeError(f"must name at least one seed, got {text!r}")
    if len(set(seeds)) < len(seeds):
        raise argparse.ArgumentTypeError(f"must name each seed once, got {text!r}")
    return seeds


def add_common_arguments(ap: argparse.ArgumentParser, *, epochs: int | None, runs: int = 1,
                         eval_every: int = 1) -> None:
    """Flags every OGB script has (``epochs=None``: the script picks a default after parsing)."""
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--data-root", default=None, help="folder with the OGB download (<root>/ogbn_<name>/raw, split)")
    src.add_argument("--synthetic", action="store_true", help="an OGB-shaped seeded power-law graph (the default)")
    ap.add_argument("--scale", type=fraction, default=None,
                    help=f"--synthetic: fraction of the real node and edge counts (default: 1, the real size, on CUDA; "
                         f"{CPU_SCALE:g} on a CPU, which the real size would keep for hours)")
    ap.add_argument("--model", choices=MODELS, default="gat", help="gat: cudnn_gnn.layers.GATConv; pyg-gat: PyG's")
    ap.add_argument("--backend", choices=GAT_BACKENDS, default="auto",
                    help="attention backend of our layers (ignored by pyg-gat)")
    ap.add_argument("--device", default="auto", help="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ...")
    ap.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32", help="autocast dtype (fp32: none)")
    ap.add_argument("--epochs", type=positive_int, default=epochs,
                    help="epochs per run (default: the mode's)" if epochs is None else "epochs per run")
    ap.add_argument("--eval-every", type=positive_int, default=eval_every,
                    help="evaluate every N epochs (and after the last)")
    ap.add_argument("--seeds", type=parse_seeds, default=None, help="e.g. 0-9, each at most once (default: 0..runs-1)")
    ap.add_argument("--runs", type=positive_int, default=runs, help="number of seeds when --seeds is not given")
    ap.add_argument("--log", metavar="PATH", default=None, help="JSON lines: one per epoch (time, memory, metrics)")
    ap.add_argument("--json", metavar="PATH", default=None, help="the summary as JSON")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars, and no per-epoch lines")
    ap.add_argument("--log-every", type=nonnegative_int, default=1, metavar="N",
                    help="one history line every N epochs, and one for the last (0: none)")
    add_verbosity_arguments(ap)
    ap.add_argument("--save", metavar="PATH", default=None,
                    help="save each run's model at its best valid score (the reported one): torch.save({'state_dict', "
                         "'config'}); several seeds: PATH gets -seedN")
    ap.add_argument("--plot", metavar="PATH", default=None, help="the loss and score curves of every run as a PNG")
    add_resume_arguments(ap)


#: Flags that do not change what a run computes (outputs, display, where and how fast it runs): a run may be resumed
#: with other values. ``--epochs`` is a bound (a run can be extended); ``--seeds``/``--runs`` pick which runs, each
#: seed's checkpoint holds its own ``seed``.
RUN_ONLY = ("epochs", "device", "backend", "capture", "data_root", "json", "log", "save", "plot", "no_progress",
            "log_every", "checkpoint", "resume", "seeds", "runs", "num_workers", "eval_batch_size", "verbose", "quiet")


def resume_checkpoint(args: argparse.Namespace, seed: int) -> dict[str, Any] | None:
    """The ``--resume`` checkpoint of ``seed`` (``PATH``, or ``PATH-seedN`` with several seeds), checked against this
    run's settings (:data:`RUN_ONLY` aside); None without ``--resume``, or for a seed of several that has no file
    yet (it starts afresh). Raises ``FileNotFoundError``/``ValueError`` (:func:`check_common_arguments` turns them
    into one line)."""
    if not args.resume:
        return None
    seeds = seeds_of(args)
    path = save_path(args.resume, seed, seeds)
    if len(seeds) > 1 and not os.path.exists(path):
        return None
    ckpt = load_checkpoint(path)
    check_config(ckpt, {**vars(args), "seed": seed}, path, free=RUN_ONLY)
    return ckpt


def check_common_arguments(ap: argparse.ArgumentParser, args: argparse.Namespace) -> torch.device:
    """Every user mistake in the common flags, as one ``ap.error`` line before any data is read; the device. Sets up
    the messages' verbosity (:func:`~cudnn_gnn.apps._log.setup_logging`)."""
    setup_logging(args.verbose, args.quiet)
    check_data_root(ap, args.data_root)
    device = check_device(ap, args.device)
    if args.scale is None:
        args.scale = 1.0 if device.type == "cuda" else CPU_SCALE
    check_backend(ap, args.backend, device, ours=not args.model.startswith("pyg-"))
    for flag in ("--json", "--log", "--save"):
        check_output_path(ap, flag, getattr(args, flag[2:]))
    check_matplotlib(ap, args.plot)
    seeds = seeds_of(args)
    check_output_path(ap, "--checkpoint", args.checkpoint)
    check_distinct_outputs(ap, {"--json": args.json, "--log": args.log, "--plot": args.plot,
                                "--save": [save_path(args.save, s, seeds) for s in seeds] if args.save else None,
                                "--checkpoint": [save_path(args.checkpoint, s, seeds) for s in seeds]
                                if args.checkpoint else None})
    if args.resume:  # missing, foreign or mismatched checkpoints: refused before any data is read
        try:
            found = [resume_checkpoint(args, s) is not None for s in seeds]
        except (FileNotFoundError, ValueError) as exc:
            ap.error(one_line(exc))
        if not any(found):
            ap.error(f"--resume must name a checkpoint file, got {args.resume!r}: none of "
                     f"{', '.join(repr(save_path(args.resume, s, seeds)) for s in seeds[:3])}... exists")
    return device


def seeds_of(args: argparse.Namespace) -> list[int]:
    return list(args.seeds) if args.seeds is not None else list(range(args.runs))


# ----------------------------------------------------------------------------------------------- runtime


def report_seed(seed: int, res: dict[str, Any], valid: str, test: str) -> bool:
    """Print one seed's result line; returns True when that run ran out of memory (stop the remaining seeds)."""
    if res.get("oom"):
        LOG.warning(f"seed {seed}: out of memory ({res['error']})")
        return True
    peak = f", peak {res['peak_memory_bytes'] / 2**30:.2f} GiB" if res.get("peak_memory_bytes") else ""
    per_epoch = "" if res["sec_per_epoch"] is None else f", {res['sec_per_epoch']:.3f} s/epoch"
    LOG.info(f"seed {seed}: best {valid} {res['valid']:.4f} at epoch {res['epoch']}, {test} {res['test']:.4f}"
             f"{per_epoch}{peak}")
    return False


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> int | None:
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


class JsonLines:
    """JSON-lines log of one run (no-op without a path): opening it starts a fresh file, so a second run with the
    same path never mixes its lines into the first one's. A symlink is written through, a FIFO directly."""

    def __init__(self, path: str | None) -> None:
        self.file = None
        if path is not None:
            target, direct = output_file(path)
            if not direct:
                os.makedirs(os.path.dirname(target), exist_ok=True)
            self.file = open(target, "w")  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1, as OGB's ``Logger``; 0 for one value)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return float("nan"), float("nan")
    return statistics.fmean(finite), (statistics.stdev(finite) if len(finite) > 1 else 0.0)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------- data


def load_node_data(name: str, args: argparse.Namespace, device: torch.device,
                   ap: argparse.ArgumentParser | None = None) -> Any:
    """The graph of ``load_ogbn(name, --data-root)`` or ``synthetic_ogbn(name, scale=--scale)`` (the default). Missing or
    corrupt files under ``--data-root`` end in one ``ap.error`` line naming them (raised as is without ``ap``)."""
    from cudnn_gnn.datasets import load_ogbn, synthetic_ogbn

    if args.data_root:
        try:
            return load_ogbn(name, args.data_root)[0]
        except (FileNotFoundError, ValueError) as exc:  # missing or corrupt files: say which, and what to do
            if ap is None:
                raise
            ap.error(f"--data-root: {one_line(exc)}")
    gen_device = device if device.type == "cuda" else torch.device("cpu")
    return synthetic_ogbn(name, scale=args.scale, seed=0, device=gen_device)[0]


def describe(data: Any, name: str, args: argparse.Namespace) -> str:
    src = f"from {args.data_root}" if args.data_root else f"synthetic, scale {args.scale:g}"
    feats = data.x.size(1) if getattr(data, "x", None) is not None else 0
    extra = f", edge features {data.edge_attr.size(1)}" if getattr(data, "edge_attr", None) is not None else ""
    return (f"{name} ({src}): {data.num_nodes:,} nodes, {data.edge_index.size(1):,} edges, {feats} features{extra}, "
            f"train/valid/test {data.train_idx.numel():,}/{data.valid_idx.numel():,}/{data.test_idx.numel():,}")


# ----------------------------------------------------------------------------------------------- model


def hop_batch(seeds: int, fanout: list[int], gen: torch.Generator, new_share: float = 1.0
              ) -> tuple[Tensor, list[int], list[int]]:
    """A random batch laid out as PyG's sampler lays one out: ``seeds`` nodes at hop 0, each hop-``k`` node with
    ``fanout[k]`` in-edges from nodes of hops ``<= k + 1``, listed hop by hop, and ``new_share`` of hop ``k``'s edges
    bringing a new node to hop ``k + 1`` (1: no neighbour sampled twice, the most nodes a real batch of these seeds
    and fan-out has; less: repeats, as on real graphs, where a batch has fewer nodes than edges). Returns
    ``(edge_index [2, E], num_sampled_nodes, num_sampled_edges)``, on the CPU."""
    nodes = [seeds]
    for f in fanout:
        nodes.append(max(1, int(nodes[-1] * f * new_share)))
    starts = [sum(nodes[:k]) for k in range(len(nodes) + 1)]
    parts = []
    for k, f in enumerate(fanout):
        dst = torch.arange(starts[k], starts[k + 1]).repeat_interleave(f)
        parts.append(torch.stack([torch.randint(0, starts[k + 2], (dst.numel(),), generator=gen), dst]))
    return torch.cat(parts, 1), nodes, [p.shape[1] for p in parts]


def warm_up(model: OgbGAT, in_channels: int, device: torch.device, precision: str, *, num_nodes: int = 2048,
            num_edges: int = 20_000, seeds: int = 256, fanout: list[int] | None = None, prebuild: bool = False) -> float:
    """Build the kernels that sampled training and evaluation will launch, before the first epoch; returns seconds.

    Runs ``model`` itself (not a DDP wrapper: no gradient all-reduce) on a random batch, the way the training loop
    calls it (``sampled=True``, under the run's autocast): one forward and backward in training mode, one forward in
    eval mode without gradients. The batch: with ``fanout``, :func:`hop_batch` of ``seeds`` seeds (per-hop counts
    given, so every layer runs on its trimmed block, as with PyG's sampler), twice: without repeats (more nodes than
    edges) and with half the neighbours repeats (fewer nodes than edges, as on real graphs), so that a graph compiled
    for one side of a size comparison is not recompiled in epoch 1 for the other; without, ``num_nodes`` nodes and
    ``num_edges`` random edges (no per-hop counts). Triton builds its kernel variants at their first call (their
    constexprs follow the model's heads, widths, dtype and dropout, not the batch), cuDNN its own, and a model
    compiled with ``dynamic=True`` its graphs (for training and for evaluation, for every batch size); PyG's
    layers warm cuBLAS and the allocator the same way. Leaves the parameters, their gradients (None), the buffers
    (batch-norm statistics) and the CPU and CUDA random states as they were, so the training that follows is the
    one a run without the warm-up would do.

    ``prebuild`` (on CUDA): the same passes first as a dry run (:func:`cudnn_gnn.backends.triton.prebuild`), which
    builds every Triton kernel variant they need in parallel processes instead of one after another in the passes
    themselves; the build is logged."""
    t0 = time.perf_counter()
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    was_training = model.training
    gen = torch.Generator().manual_seed(0)
    batches: list[tuple[Tensor, Tensor, Any, Any]] = []
    if fanout is None:
        edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
        batches.append((torch.randn(num_nodes, in_channels, generator=gen), edge_index, None, None))
    else:
        for share in (1.0, 0.5):
            edge_index, nsn, nse = hop_batch(seeds, fanout, gen, share)
            batches.append((torch.randn(sum(nsn), in_channels, generator=gen), edge_index, nsn, nse))
    batches = [(x.to(device), edge_index.to(device), nsn, nse) for x, edge_index, nsn, nse in batches]

    def passes(m: nn.Module) -> None:
        for x, edge_index, nsn, nse in batches:
            m.train()
            with autocast(device, precision):
                out = m(x, edge_index, None, nsn, nse, sampled=True)
            out[:seeds].float().sum().backward()
            m.zero_grad(set_to_none=True)
            m.eval()
            with torch.no_grad(), autocast(device, precision):
                m(x, edge_index, None, nsn, nse, sampled=True)

    try:
        if prebuild and device.type == "cuda":  # on the model itself: what it changes (gradients, batch-norm
            # statistics from the dry run's garbage) is put back below, as the real passes' is; a copy of a model
            # compiled in place (nn.Module.compile) would still call the original
            from cudnn_gnn.backends.triton import prebuild as prebuild_kernels

            report = prebuild_kernels(passes, model)
            LOG.info(f"Triton kernels: {len(report.variants)} variants built in parallel processes in "
                     f"{report.seconds:.1f} s" + (f" ({sum(v.in_process for v in report.variants)} in this process)"
                                                  if any(v.in_process for v in report.variants) else ""))
        passes(model)
        sync(device)
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------------------------- sampling


def require_sampler() -> None:
    """PyG's ``NeighborLoader`` samples with ``pyg-lib`` or ``torch-sparse``; say how to get one if neither."""
    from cudnn_gnn.apps.distributed import pyg_wheel_url, sampler_available

    if not sampler_available():
        raise RuntimeError(
            "--sampled --sampler pyg needs pyg-lib or torch-sparse for PyG's NeighborLoader, and neither is "
            "installed; --sampler static needs nothing extra (tree sampling with torch ops, on the CPU too), or "
            f"install one with: pip install pyg-lib -f {pyg_wheel_url()} (or: pip install torch-sparse -f the same "
            "URL)"
        )


def neighbor_loader(graph: Any, input_nodes: Tensor | None, fanout: list[int], batch_size: int, shuffle: bool,
                    num_workers: int = 0) -> Any:
    """PyG's ``NeighborLoader`` over the CPU graph structure ``graph`` (``edge_index``, optional ``edge_attr``)."""
    require_sampler()
    from torch_geometric.loader import NeighborLoader

    return NeighborLoader(graph, num_neighbors=fanout, input_nodes=input_nodes, batch_size=batch_size,
                          shuffle=shuffle, num_workers=num_workers, persistent_workers=num_workers > 0)


@torch.no_grad()
def loader_inference(model: OgbGAT, x: Tensor, loader: Any, device: torch.device, precision: str,
                     show: bool) -> Tensor:
    """All nodes' outputs, one layer at a time over full 1-hop neighbourhoods from a ``NeighborLoader`` (PyG's
    ``inference``; the chunked one over a CSC is :func:`cudnn_gnn.apps.inference.layerwise_inference`)."""
    model.eval()
    h = x
    for i in range(len(model.convs)):
        outs = []
        for batch in progress(loader, desc=f"inference layer {i + 1}", enabled=show):
            n_id = batch.n_id.to(device)
            ea = batch.edge_attr.to(device) if getattr(batch, "edge_attr", None) is not None else None
            n_dst = batch.batch_size
            xs = h[n_id]
            with autocast(device, precision):
                out = model.layer(i, (xs, xs[:n_dst]), batch.edge_index.to(device), ea, size=(xs.size(0), n_dst))
            outs.append(out.float())
        h = torch.cat(outs)  # an unshuffled loader over all nodes yields the seeds 0..N-1 in order
    return h


# ----------------------------------------------------------------------------------------------- reporting


def summarize(name: str, model_name: str, metric: str, runs: list[dict[str, Any]], params: int) -> dict[str, Any]:
    """OGB-style summary: mean +- std of the best-valid run results, and #params."""
    vm, vs = mean_std([r["valid"] for r in runs])
    tm, ts = mean_std([r["test"] for r in runs])
    times = [r["sec_per_epoch"] for r in runs if r.get("sec_per_epoch") is not None]
    peaks = [r["peak_memory_bytes"] for r in runs if r.get("peak_memory_bytes") is not None]
    return {"dataset": name, "model": model_name, "metric": metric, "runs": len(runs), "params": params,
            "valid_mean": vm, "valid_std": vs, "test_mean": tm, "test_std": ts,
            "sec_per_epoch": statistics.fmean(times) if times else None,
            "peak_memory_bytes": max(peaks) if peaks else None, "oom": any(r.get("oom") for r in runs),
            "per_run": runs}


def mean_pm_std(mean: float, std: float, runs: int, *, scale: float = 100.0, digits: int = 2) -> str:
    """``"81.23 ± 0.45"`` over several runs, ``"81.23"`` for one (a single run has no spread to show)."""
    m, d = f"{scale * mean:.{digits}f}", f"{scale * std:.{digits}f}"
    return m if runs < 2 else f"{m} ± {d}"


def print_summary(s: dict[str, Any]) -> None:
    """The final line (stdout, at every verbosity): mean ± std over runs (OGB's report), the mean alone for one."""
    if s.get("oom") and not math.isfinite(s["test_mean"]):
        print(f"final: {s['dataset']} {s['model']}: out of memory, #params {s['params']:,}")
        return
    mem = f", peak {s['peak_memory_bytes'] / 2**30:.2f} GiB" if s.get("peak_memory_bytes") else ""
    epoch = f", {s['sec_per_epoch']:.3f} s/epoch" if s.get("sec_per_epoch") is not None else ""
    runs = "1 run" if s["runs"] == 1 else f"{s['runs']} runs"
    print(f"final: {s['dataset']} {s['model']} over {runs}: valid {s['metric']} "
          f"{mean_pm_std(s['valid_mean'], s['valid_std'], s['runs'])}, test "
          f"{mean_pm_std(s['test_mean'], s['test_std'], s['runs'])}, #params {s['params']:,}{epoch}{mem}")


def finish_summary(name: str, args: argparse.Namespace, device: torch.device, metric: str, runs: list[dict[str, Any]],
                   params: int, **extra: Any) -> dict[str, Any]:
    """The summary over all seeds (:func:`summarize`) with the run's settings and ``extra``; printed, and written to
    ``--json`` when given."""
    summary = summarize(name, args.model, metric, runs, params)
    summary.update(precision=args.precision, backend=args.backend, device=str(device), synthetic=not args.data_root,
                   scale=None if args.data_root else args.scale, epochs=args.epochs, **extra)
    curves = {f"seed {r['seed']} {k}": v for r in runs for k, v in r.pop("_curves", {}).items()}
    print_summary(summary)
    write_json(args.json, summary)
    if args.plot:
        plot_curves(args.plot, curves, title=f"{name} {args.model}")
    return summary


def save_path(path: str, seed: int, seeds: list[int]) -> str:
    """``--save PATH`` for one seed: PATH itself for a single run, else ``<stem>-seed<N><suffix>``."""
    if len(seeds) <= 1:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}-seed{seed}{ext}"


def train_epochs(*, args: argparse.Namespace, device: torch.device, seed: int, label: str,
                 step: Callable[[int], float], evaluate: Callable[[], tuple[float, float, float]],
                 log: JsonLines, higher_better: bool = True, model: nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None,
                 scaler: Any = None) -> dict[str, Any]:
    """The epoch loop every OGB script shares: time and peak memory per epoch (JSON lines), evaluation every
    ``--eval-every`` epochs, the test score at the best valid score, one history line an epoch
    (:func:`~cudnn_gnn.apps._log.format_epoch`). A CUDA out-of-memory error ends the run and is reported
    (``{"oom": True, "error": ...}``) instead of raised, so a baseline that does not fit is a result, not a crash.
    With ``--save`` the ``model`` of the reported (best valid) evaluation is saved with ``vars(args)``, its epoch and
    its constructor arguments (``model.config``); the curves for ``--plot`` come back under ``"_curves"``.

    With ``--checkpoint`` the training state (``model``, ``optimizer``, ``scheduler``, ``scaler``, random generators,
    this loop's best scores, times and curves) is written after every epoch; with ``--resume`` it is read back here,
    after whatever the script did before the loop (a captured step's warm-up included: the optimizer's tensors are
    refilled in place), and the loop goes on from the next epoch as the uninterrupted run would."""
    best = {"epoch": 0, "train": float("nan"), "valid": -math.inf if higher_better else math.inf, "test": float("nan")}
    times: list[float] = []
    peaks: list[int] = []
    curves: dict[str, list[tuple[int, float]]] = {"loss": [], "train": [], "valid": [], "test": []}
    kept: dict[str, Any] = {}
    first = 1
    ckpt = resume_checkpoint(args, seed)
    if ckpt is not None:
        if model is None or optimizer is None:
            raise ValueError("train_epochs(model=, optimizer=) must be given to resume, got None")
        model.load_state_dict(ckpt["model"])
        load_optimizer(optimizer, ckpt["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(ckpt["scheduler"])
        if scaler is not None and ckpt["scaler"] is not None:
            scaler.load_state_dict(ckpt["scaler"])
        st = ckpt["state"]
        best, times, peaks = st["best"], st["times"], st["peaks"]
        curves = {k: [tuple(p) for p in v] for k, v in st["curves"].items()}  # type: ignore[misc]
        if st.get("best_state") is not None:
            kept["state"] = {k: v.to(device) for k, v in st["best_state"].items()}
        set_rng_state(ckpt["rng"])
        first = ckpt["epoch"] + 1
        LOG.info(f"{label} seed {seed}: resumed after epoch {ckpt['epoch']} from {save_path(args.resume, seed, seeds_of(args))}")

    def keep_best() -> None:  # the weights whose scores are reported, for --save (and kept in checkpoints)
        if (args.save or args.checkpoint) and model is not None:
            kept["state"] = state_copy(model)

    def checkpoint(epoch: int) -> None:
        if not args.checkpoint or model is None or optimizer is None:
            return
        save_training(save_path(args.checkpoint, seed, seeds_of(args)), config={**vars(args), "seed": seed},
                      epoch=epoch, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                      state={"best": best, "times": times, "peaks": peaks, "curves": curves,
                             "best_state": kept.get("state")})

    try:
        _epoch_loop(args, device, seed, first, step, evaluate, log, higher_better, best, times, peaks, curves,
                    keep_best, checkpoint)
    except RuntimeError as err:  # torch.OutOfMemoryError is one
        if not is_oom(err):
            raise
        if device.type == "cuda":
            torch.cuda.empty_cache()
        message = str(err).splitlines()[0]
        log.write({"seed": seed, "model": args.model, "oom": True, "error": message})
        return {"seed": seed, "oom": True, "error": message, "epoch": 0, "valid": float("nan"), "test": float("nan"),
                "sec_per_epoch": None, "peak_memory_bytes": None}
    if args.save and model is not None:
        config = {**vars(args), "seed": seed, "model_config": getattr(model, "config", None), "epoch": best["epoch"],
                  "valid": best["valid"], "test": best["test"]}
        save_checkpoint(save_path(args.save, seed, seeds_of(args)), kept.get("state", model), config)
    # Epoch 1 carries one-off costs (cuDNN plan building, allocator warm-up): leave it out when there are more.
    steady = times[1:] if len(times) > 1 else times
    return {"seed": seed, **best, "sec_per_epoch": statistics.fmean(steady) if steady else None,
            "peak_memory_bytes": max(peaks, default=None), "_curves": curves}


def _epoch_loop(args: argparse.Namespace, device: torch.device, seed: int, first: int, step: Callable[[int], float],
                evaluate: Callable[[], tuple[float, float, float]], log: JsonLines, higher_better: bool,
                best: dict[str, Any], times: list[float], peaks: list[int],
                curves: dict[str, list[tuple[int, float]]], on_best: Callable[[], None],
                on_epoch_end: Callable[[int], None]) -> None:
    log_every = 1 if args.log_every is None else args.log_every
    shown: dict[str, float | None] = {"loss": None, "train": None, "valid": None, "test": None}
    for epoch in range(first, args.epochs + 1):
        reset_peak(device)
        sync(device)
        t0 = time.perf_counter()
        loss = step(epoch)
        sync(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        epoch_peak = peak_bytes(device)  # of the training step alone
        record: dict[str, Any] = {"seed": seed, "model": args.model, "epoch": epoch, "loss": loss, "epoch_seconds": dt,
                                  "peak_memory_bytes": epoch_peak}
        if epoch_peak is not None:
            peaks.append(epoch_peak)
        curves["loss"].append((epoch, loss))
        shown["loss"] = loss
        if epoch % args.eval_every == 0 or epoch == args.epochs:
            train_s, valid_s, test_s = evaluate()
            record.update(train=train_s, valid=valid_s, test=test_s)
            for key, value in (("train", train_s), ("valid", valid_s), ("test", test_s)):
                curves[key].append((epoch, value))
            if (valid_s > best["valid"]) if higher_better else (valid_s < best["valid"]):
                best.update(epoch=epoch, train=train_s, valid=valid_s, test=test_s)
                on_best()
            shown.update(train=train_s, valid=valid_s, test=test_s)
        log.write(record)
        on_epoch_end(epoch)
        if not args.no_progress and log_every and (epoch % log_every == 0 or epoch == args.epochs):
            LOG.info(f"seed {seed} " + format_epoch(epoch, args.epochs, shown))
            mem = "" if epoch_peak is None else f", peak {epoch_peak / 2**30:.2f} GiB"
            LOG.debug(f"seed {seed} epoch {epoch}: training step {dt:.3f} s{mem}")


def add_capture_argument(ap: argparse.ArgumentParser) -> None:
    """``--capture/--no-capture``: the full-graph training step captured in one CUDA graph (default on)."""
    ap.add_argument("--capture", action=argparse.BooleanOptionalAction, default=True,
                    help="full graph on CUDA: capture our model's training step in one CUDA graph and replay it "
                         "(default: on; eager on CPU, for pyg-gat and with --precision fp16)")


def capture_wanted(args: argparse.Namespace, device: torch.device) -> bool:
    """Whether ``--capture`` applies: our layers (on a prepared CscGraph) on CUDA, without float16's GradScaler, whose
    step reads an overflow flag on the host."""
    return bool(args.capture) and not args.model.startswith("pyg-") and device.type == "cuda" \
        and args.precision != "fp16"


def capture_lr(lr: float, device: torch.device, capture: bool) -> float | Tensor:
    """The optimizer's learning rate: a device tensor for a captured step (a replay reads its current value, so a
    schedule can change it between replays), else the float."""
    return torch.tensor(lr, device=device) if capture else lr


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's learning rate, in place where it is a tensor (see :func:`capture_lr`)."""
    for group in opt.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def captured_step(args: argparse.Namespace, loss_fn: Callable[..., Tensor], *, optimizer: torch.optim.Optimizer,
                  inputs: dict[str, Any], model: nn.Module) -> Callable[[], float]:
    """The full-graph training step as a :class:`~cudnn_gnn.apps.capture.CapturedStep` (``loss_fn(**inputs)`` under
    the run's autocast); calling it runs one step and returns its loss."""
    from cudnn_gnn.apps.capture import CapturedStep

    step = CapturedStep(loss_fn, optimizer=optimizer, inputs=inputs, model=model,
                        autocast_dtype=PRECISIONS[args.precision])
    return lambda: float(step())
