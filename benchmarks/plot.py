"""Plot a ``bench_layers.py`` JSON: speed-up and memory ratio of cudnn-gnn over PyG eager, per preset.

Usage::

    python benchmarks/plot.py bench_layers.json bench_layers.png

Top row: speed-up (PyG median time / ours) for forward+backward and forward; bottom row: peak-memory ratio
(PyG / ours). One group of bars per preset, one bar per layer x dtype x backend (our layer on cuDNN, on
Triton, ...: one colour per layer x dtype, one hatch per backend, side by side). A bar above the dashed line at
1 means cudnn-gnn is faster (or leaner). Where PyG ran out of memory there is no ratio; the group is labelled
"PyG OOM" with our time or memory written instead.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["plot"]

MiB = 2**20
HATCH = {"triton": "//", "reference": ".."}  # cuDNN's bars are plain


def _series(summary: list[dict[str, Any]], pass_: str, key: str) -> tuple[list[str], list[str], dict]:
    presets: list[str] = []
    combos: list[str] = []
    values: dict[tuple[str, str], tuple[float | None, str]] = {}
    for row in summary:
        if row["pass"] != pass_:
            continue
        if row["preset"] not in presets:
            presets.append(row["preset"])
        combo = " ".join(str(v) for v in (row["layer"], row["dtype"], row.get("backend")) if v)
        if combo not in combos:
            combos.append(combo)
        note = ""
        if row.get(key) is None:
            if row.get("pyg_status") == "oom" and row.get("ours_status") == "ok":
                ours = row["ours_ms"] if key.startswith("speedup") else (row.get("ours_mem") or 0) / 2**30
                unit = " ms" if key.startswith("speedup") else " GiB"
                note = f"PyG OOM\nours {ours:.0f}{unit}" if ours is not None else "PyG OOM"
            elif row.get("ours_status") not in (None, "ok"):
                note = f"ours {row['ours_status']}"
            elif row.get("pyg_status") not in (None, "ok"):
                note = f"PyG {row['pyg_status']}"
        values[(row["preset"], combo)] = (row.get(key), note)
    return presets, combos, values


def plot(payload: dict[str, Any], path: str) -> None:
    """Write the 2x2 figure for ``payload`` (the dict ``bench_layers.main`` returns / writes) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = payload.get("summary", [])
    env = payload.get("environment", {})
    panels = [("fwd+bwd", "speedup_vs_pyg", "speed-up vs PyG eager, forward+backward"),
              ("fwd", "speedup_vs_pyg", "speed-up vs PyG eager, forward"),
              ("fwd+bwd", "mem_ratio_pyg_over_ours", "peak memory PyG / ours, forward+backward"),
              ("fwd", "mem_ratio_pyg_over_ours", "peak memory PyG / ours, forward")]
    fig, axes = plt.subplots(2, 2, figsize=(16, 9), squeeze=False)
    for ax, (pass_, key, title) in zip(axes.flat, panels):
        presets, combos, values = _series(summary, pass_, key)
        ax.set_title(title, fontsize=11)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        if not presets:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            continue
        width = 0.8 / max(len(combos), 1)
        colours = list(dict.fromkeys(c.rsplit(" ", 1)[0] if c.count(" ") > 1 else c for c in combos))
        for j, combo in enumerate(combos):
            base, _, backend = combo.rpartition(" ") if combo.count(" ") > 1 else (combo, "", "")
            xs, ys = [], []
            for i, preset in enumerate(presets):
                v, note = values.get((preset, combo), (None, ""))
                x = i - 0.4 + width * (j + 0.5)
                if v is not None:
                    xs.append(x)
                    ys.append(v)
                    ax.text(x, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
                elif note:
                    ax.text(x, 1.05, note, ha="center", va="bottom", fontsize=6, rotation=90, color="firebrick")
            ax.bar(xs, ys, width=width, label=combo, color=f"C{colours.index(base) % 10}",
                   hatch=HATCH.get(backend, ""), edgecolor="white" if backend in ("", "cudnn") else "black")
        ax.set_xlim(-0.6, len(presets) - 0.4)
        ax.set_xticks(range(len(presets)))
        ax.set_xticklabels(presets, rotation=20, ha="right", fontsize=9)
        ax.set_ylabel("x (higher is better for cudnn-gnn)")
        ax.legend(fontsize=8)
    quick = " (--quick CPU smoke run: not timing claims)" if payload.get("quick") else ""
    fig.suptitle(
        f"cudnn-gnn vs PyG {env.get('torch_geometric')} on {env.get('gpu') or env.get('device')}; torch {env.get('torch')}, "
        f"cuDNN {env.get('cudnn_backend_version')}, frontend {env.get('cudnn_frontend')}; {env.get('date')}{quick}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    from cudnn_gnn.apps._cli import ArgumentParser, check_outputs

    ap = ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", metavar="BENCH.json", help="a bench_layers.py JSON")
    ap.add_argument("png", metavar="OUT.png", help="the chart to write")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(args.bench):
        ap.error(f"BENCH.json must be an existing file, got {args.bench!r}")
    if os.path.realpath(args.bench) == os.path.realpath(args.png):
        ap.error(f"OUT.png must differ from BENCH.json (the chart would replace the results), got {args.png!r} for both")
    check_outputs(ap, {"OUT.png": args.png}, plots=("OUT.png",))
    with open(args.bench) as f:
        payload = json.load(f)
    plot(payload, args.png)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
