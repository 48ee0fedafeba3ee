"""The two readings of Sylvie's Eq. 5 over long runs, on a plateauing and on a smooth graph.

Sylvie's Eq. 5 and TorchGT's threshold tuner compare the signed Loss Descent Rate of
epoch ``t`` with that of epoch ``t - delta``; the printed inequality and the papers' prose
disagree on which way round more precision is asked for. Every LDR-driven callback takes
``reading``:

* ``slows``: ``"more_precision_when_descent_slows"`` (the prose);
* ``speeds_up``: ``"more_precision_when_descent_speeds_up"`` (the inequality as printed).

Runs (every one ``lightgraph fit`` in a subprocess, 2 processes, the same graph, model,
seeds and epochs):

* ``sylvie-<reading>``: ``recipes/sylvie.yaml`` (degree-aware widths, ring exchange,
  ``AdaptiveBitWidth`` + ``PipelineAdaptor``, delta = 5, lambda = 0.9) with that reading;
* ``vanilla``: ``recipes/vanilla.yaml``, synchronous FP32 (the bytes and accuracy
  reference);
* ``torchgt-<reading>``: ``recipes/torchgt.yaml`` (Graphormer-slim, cluster-sparse
  attention, ``ClusterSparsityTuner`` with delta = 10) with that reading.

Two graphs (``--graph``), both 3,000 nodes by default:

* ``hard``: 16 classes, homophily 0.5, feature noise 1.0 and 25 % label noise
  (``SyntheticGraph(label_noise=0.25)``: a quarter of the labels redrawn uniformly). The
  training loss falls for about 60 epochs, then plateaus under dropout noise for the rest
  of the run;
* ``smooth``: the recipes' graph (8 classes, homophily 0.5, feature noise 0.7, no label
  noise), whose loss keeps falling, ever more slowly.

Recorded per run and epoch: base bit-width, pipeline mode, threshold (ladder position),
bytes sent (all ranks), training loss, validation and test accuracy; per run: mean bytes
per epoch, final test accuracy, the test accuracy at the best validation epoch, the
share of synchronous epochs, the median step time. Plots are written as small
hand-made SVG files (no plotting library) into ``--plots``.

Usage::

    python benchmarks/bench_ldr_readings.py --graph hard --epochs 300 --seeds 0 1 2 \\
        --out benchmarks/results/ldr_readings_hard.json --plots docs/img
    python benchmarks/bench_ldr_readings.py --graph smooth --runs sylvie vanilla \\
        --epochs 300 --seeds 0 1 2 --out benchmarks/results/ldr_readings_smooth.json \\
        --plots docs/img
    # plots and tables again from saved results
    python benchmarks/bench_ldr_readings.py --load benchmarks/results/ldr_readings_hard.json \\
        --plots docs/img
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
from typing import Any

from harness import fit

READINGS = {
    "slows": "more_precision_when_descent_slows",
    "speeds_up": "more_precision_when_descent_speeds_up",
}
COLORS = {
    "slows": "#1f77b4",
    "speeds_up": "#d62728",
    "vanilla": "#555555",
}
WORLD = 2
#: Generator settings of the two graphs (the rest: SyntheticGraph's defaults, seed 0).
GRAPHS = {
    # 16 classes, 25 % of the labels redrawn: the loss falls for ~60 epochs, then plateaus
    # under dropout noise (accuracy ceiling 1 - 0.25 * 15/16 = 0.77).
    "hard": {"num_classes": 16, "homophily": 0.5, "feature_noise": 1.0, "label_noise": 0.25},
    # recipes/sylvie.yaml's graph (smaller): a smooth, long convergence.
    "smooth": {"num_classes": 8, "homophily": 0.5, "feature_noise": 0.7, "label_noise": 0.0},
}


# ----------------------------------------------------------------------------- runs
def graph_config(args: argparse.Namespace) -> dict[str, Any]:
    """The SyntheticGraph of the runs (see GRAPHS; CLI flags override)."""
    return {
        "class_path": "lightgraph.data.SyntheticGraph",
        "init_args": {
            "num_nodes": args.num_nodes,
            "num_classes": args.num_classes,
            "homophily": args.homophily,
            "feature_noise": args.feature_noise,
            "label_noise": args.label_noise,
            "seed": 0,
        },
    }


def _summary(every: int, keys: list[str]) -> dict:
    return {
        "class_path": "lightgraph.callbacks.EpochSummary",
        "init_args": {"every_n_epochs": every, "keys": keys},
    }


def sylvie_override(reading: str | None, args: argparse.Namespace, seed: int) -> dict:
    keys = ["train_loss", "val_acc", "test_acc", "comm_bytes", "bitwidth", "pipeline_sync"]
    callbacks: list[dict] = [_summary(50, keys)]
    if reading is not None:
        common = {"window": 5, "smoothing": 0.9, "reading": READINGS[reading]}
        callbacks += [
            {
                "class_path": "lightgraph.callbacks.AdaptiveBitWidth",
                "init_args": {"b_min": 1, "b_max": 8, **common},
            },
            {"class_path": "lightgraph.callbacks.PipelineAdaptor", "init_args": common},
        ]
    return {
        "seed_everything": seed,
        "trainer": {"devices": WORLD, "callbacks": callbacks},
        "data": {"init_args": {"dataset": graph_config(args)}},
    }


def torchgt_override(reading: str, args: argparse.Namespace, seed: int) -> dict:
    keys = ["train_loss", "val_acc", "test_acc", "attention_threshold"]
    tuner = {
        "class_path": "lightgraph.callbacks.ClusterSparsityTuner",
        "init_args": {"window": 10, "smoothing": 0.9, "reading": READINGS[reading]},
    }
    return {
        "seed_everything": seed,
        "trainer": {"devices": WORLD, "callbacks": [_summary(50, keys), tuner]},
        "data": {
            "init_args": {
                "dataset": graph_config(args),
                "sequence_length": args.sequence_length,
            }
        },
    }


def per_epoch(rows: list[dict[str, Any]], key: str) -> list[float | None]:
    """``key`` by epoch (``None`` where an epoch did not log it)."""
    values: dict[int, float] = {}
    for row in rows:
        if row.get(key) not in (None, "") and row.get("epoch") not in (None, ""):
            values[int(float(row["epoch"]))] = float(row[key])
    if not values:
        return []
    return [values.get(epoch) for epoch in range(max(values) + 1)]


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def summarise(name: str, kind: str, reading: str | None, seed: int, rows, wall) -> dict:
    trace = {
        key: [_round(v) for v in per_epoch(rows, key)]
        for key in (
            "train_loss",
            "val_acc",
            "test_acc",
            "comm_bytes",
            "bitwidth",
            "pipeline_sync",
            "sparsity_level",
            "attention_threshold",
            "train_step_time",
        )
    }
    val = [v for v in trace["val_acc"] if v is not None]
    test = [v for v in trace["test_acc"] if v is not None]
    best = max(range(len(val)), key=val.__getitem__) if val else None
    comm = [v for v in trace["comm_bytes"] if v is not None]
    sync = [v for v in trace["pipeline_sync"] if v is not None]
    steps = [v for v in trace["train_step_time"] if v is not None]
    return {
        "name": name,
        "kind": kind,
        "reading": reading,
        "seed": seed,
        "epochs": len([v for v in trace["train_loss"] if v is not None]),
        "bytes_per_epoch": statistics.mean(comm) if comm else None,
        "final_test_acc": test[-1] if test else None,
        "test_acc_at_best_val": test[best] if best is not None and best < len(test) else None,
        "best_val_acc": val[best] if best is not None else None,
        "mean_test_acc_last50": statistics.mean(test[-50:]) if test else None,
        "sync_share": statistics.mean(sync) if sync else None,
        "step_s": statistics.median(steps[1:] or steps) if steps else None,
        "wall_s": wall,
        "trace": trace,
    }


def run_all(args: argparse.Namespace) -> list[dict]:
    plan: list[tuple[str, str, str | None, int]] = []
    for seed in args.seeds:
        if "sylvie" in args.runs:
            plan += [(f"sylvie-{r}-s{seed}", "sylvie", r, seed) for r in READINGS]
        if "vanilla" in args.runs:
            plan.append((f"vanilla-s{seed}", "vanilla", None, seed))
        if "torchgt" in args.runs:
            plan += [(f"torchgt-{r}-s{seed}", "torchgt", r, seed) for r in READINGS]
    results = []
    with tempfile.TemporaryDirectory() as work:
        for name, kind, reading, seed in plan:
            if kind == "torchgt":
                recipe, override = "torchgt.yaml", torchgt_override(reading, args, seed)
                nodes = args.torchgt_num_nodes
            else:
                recipe = "sylvie.yaml" if kind == "sylvie" else "vanilla.yaml"
                override = sylvie_override(reading, args, seed)
                nodes = args.num_nodes
            rows, wall = fit(
                name, recipe, override, work, epochs=args.epochs, num_nodes=nodes, world=WORLD
            )
            result = summarise(name, kind, reading, seed, rows, wall)
            results.append(result)
            shown = {k: v for k, v in result.items() if k != "trace"}
            print(json.dumps(shown), flush=True)
    return results


# ----------------------------------------------------------------------------- tables
def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def _std(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return statistics.stdev(present) if len(present) > 1 else 0.0


def _best_epoch(values: list[float | None]) -> int:
    return max(range(len(values)), key=lambda i: -1.0 if values[i] is None else values[i])


def table(results: list[dict], config: dict) -> str:
    lines = [
        f"{config['num_nodes']}-node {config.get('graph', 'hard')} synthetic graph "
        f"({config['num_classes']} classes, "
        f"homophily {config['homophily']}, feature noise {config['feature_noise']}, label noise "
        f"{config['label_noise']}), {WORLD} processes, {config['epochs']} epochs, "
        f"seeds {config['seeds']}",
        "",
        "Sylvie full (GCN, boundary exchange), mean over seeds (+- std):",
        f"{'run':<18} {'MB/epoch':>9} {'vs FP32':>8} {'sync %':>7} {'final test':>16} "
        f"{'test@best val':>16} {'mean bits':>9}",
    ]
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(r["name"].rsplit("-s", 1)[0], []).append(r)
    vanilla = groups.get("vanilla")
    fp32 = _mean([r["bytes_per_epoch"] for r in vanilla]) if vanilla else None
    for name, runs in groups.items():
        if runs[0]["kind"] == "torchgt":
            continue
        mb = _mean([r["bytes_per_epoch"] for r in runs])
        ratio = f"{fp32 / mb:.1f}x" if fp32 and mb else "-"
        sync = _mean([r["sync_share"] for r in runs])
        bits = _mean([_mean(r["trace"]["bitwidth"]) for r in runs])
        final = [r["final_test_acc"] for r in runs]
        at_best = [r["test_acc_at_best_val"] for r in runs]
        lines.append(
            f"{name:<18} {mb / 1e6 if mb else 0.0:>9.3f} {ratio:>8} "
            f"{'-' if sync is None else f'{100 * sync:.0f}':>7} "
            f"{_mean(final):>8.4f}+-{_std(final):.4f} {_mean(at_best):>8.4f}+-{_std(at_best):.4f} "
            f"{'-' if bits is None else f'{bits:.2f}':>9}"
        )
    early = int(config.get("early", 60))
    low = max(0, early - 5)
    lines += [
        "",
        f"The descent phase, epochs 0-{early - 1} (mean over seeds; loss: train loss averaged "
        f"over epochs {low}-{early + 4}; test: test accuracy at epoch {early}):",
        f"{'run':<18} {'MB/epoch':>9} {'vs FP32':>8} {'sync %':>7} {'mean bits':>9} "
        f"{'loss':>16} {'test':>16}",
    ]
    fp32_early = (
        _mean([_mean(r["trace"]["comm_bytes"][:early]) for r in vanilla]) if vanilla else None
    )
    for name, runs in groups.items():
        if runs[0]["kind"] == "torchgt" or len(runs[0]["trace"]["train_loss"]) <= early + 4:
            continue
        mb = _mean([_mean(r["trace"]["comm_bytes"][:early]) for r in runs])
        ratio = f"{fp32_early / mb:.1f}x" if fp32_early and mb else "-"
        sync = _mean([_mean(r["trace"]["pipeline_sync"][:early]) for r in runs])
        bits = _mean([_mean(r["trace"]["bitwidth"][:early]) for r in runs])
        loss = [_mean(r["trace"]["train_loss"][low : early + 5]) for r in runs]
        test = [r["trace"]["test_acc"][early] for r in runs]
        lines.append(
            f"{name:<18} {mb / 1e6 if mb else 0.0:>9.3f} {ratio:>8} "
            f"{'-' if sync is None else f'{100 * sync:.0f}':>7} "
            f"{'-' if bits is None else f'{bits:.2f}':>9} "
            f"{_mean(loss):>8.4f}+-{_std(loss):.4f} {_mean(test):>8.4f}+-{_std(test):.4f}"
        )
    torch_groups = {k: v for k, v in groups.items() if v[0]["kind"] == "torchgt"}
    if torch_groups:
        lines += [
            "",
            "TorchGT threshold tuner (Graphormer-slim, cluster-sparse), mean over seeds (+- std):",
            f"{'run':<20} {'mean level':>10} {'final level':>11} {'step s':>7} "
            f"{'final test':>16} {'test@best val':>16} {'best epoch':>10}",
        ]
        for name, runs in torch_groups.items():
            level = _mean([_mean(r["trace"]["sparsity_level"]) for r in runs])
            last = _mean([r["trace"]["sparsity_level"][-1] for r in runs])
            step = _mean([r["step_s"] for r in runs])
            final = [r["final_test_acc"] for r in runs]
            at_best = [r["test_acc_at_best_val"] for r in runs]
            when = _mean([_best_epoch(r["trace"]["val_acc"]) for r in runs])
            lines.append(
                f"{name:<20} {level:>10.2f} {last:>11.1f} {step:>7.3f} "
                f"{_mean(final):>8.4f}+-{_std(final):.4f} {_mean(at_best):>8.4f}+-{_std(at_best):.4f} "
                f"{when:>10.0f}"
            )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- SVG plots
def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw), default=raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + 1e-9 * step:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def svg_chart(
    path: str,
    title: str,
    xlabel: str,
    ylabel: str,
    series: list[dict],
    *,
    y_range: tuple[float, float] | None = None,
    y_ticks: list[float] | None = None,
    y_tick_labels: list[str] | None = None,
    scatter: bool = False,
    width: int = 720,
    height: int = 320,
) -> None:
    """A line (or scatter) chart with axes, ticks, labels and a legend, as SVG.

    ``series``: ``{"label", "x", "y", "color"}`` (``None`` values in ``y`` are skipped).
    """
    left, right, top, bottom = 64, 170, 34, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [
        (x, y)
        for s in series
        for x, y in zip(s["x"], s["y"], strict=True)
        if y is not None and x is not None
    ]
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x_low, x_high = min(xs), max(xs)
    if scatter:
        pad = 0.05 * (x_high - x_low or 1.0)
        x_low, x_high = x_low - pad, x_high + pad
    y_low, y_high = y_range if y_range else (min(ys), max(ys))
    if not y_range:
        pad = 0.05 * (y_high - y_low or 1.0)
        y_low, y_high = y_low - pad, y_high + pad
    x_span, y_span = (x_high - x_low) or 1.0, (y_high - y_low) or 1.0

    def px(x: float) -> float:
        return left + (x - x_low) / x_span * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y_low) / y_span * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left + plot_w / 2:.1f}" y="20" text-anchor="middle" font-size="14">'
        f"{_escape(title)}</text>",
    ]
    ticks = y_ticks if y_ticks is not None else _nice_ticks(y_low, y_high)
    labels = y_tick_labels if y_tick_labels is not None else [_fmt(t) for t in ticks]
    for tick, label in zip(ticks, labels, strict=True):
        if y_low - 1e-9 <= tick <= y_high + 1e-9:
            y = py(tick)
            out.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                'stroke="#e0e0e0"/>'
            )
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for tick in _nice_ticks(x_low, x_high, 6):
        if x_low - 1e-9 <= tick <= x_high + 1e-9:
            x = px(tick)
            out.append(
                f'<line x1="{x:.1f}" y1="{top + plot_h}" x2="{x:.1f}" y2="{top + plot_h + 5}" '
                'stroke="black"/>'
            )
            out.append(
                f'<text x="{x:.1f}" y="{top + plot_h + 18}" text-anchor="middle">{_fmt(tick)}</text>'
            )
    out.append(
        f'<polyline points="{left},{top} {left},{top + plot_h} {left + plot_w},{top + plot_h}" '
        'fill="none" stroke="black"/>'
    )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 10}" text-anchor="middle">'
        f"{_escape(xlabel)}</text>"
    )
    out.append(
        f'<text x="16" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + plot_h / 2:.1f})">{_escape(ylabel)}</text>'
    )
    for i, s in enumerate(series):
        pts = [(px(x), py(y)) for x, y in zip(s["x"], s["y"], strict=True) if y is not None]
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        if scatter:
            for x, y in pts:
                out.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{s["color"]}" '
                    'fill-opacity="0.8"/>'
                )
        elif pts:
            coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(
                f'<polyline points="{coords}" fill="none" stroke="{s["color"]}" '
                f'stroke-width="1.3"{dash}/>'
            )
        ly = top + 12 + 18 * i
        lx = left + plot_w + 12
        if scatter:
            out.append(f'<circle cx="{lx + 10}" cy="{ly - 4}" r="4" fill="{s["color"]}"/>')
        else:
            out.append(
                f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 20}" y2="{ly - 4}" '
                f'stroke="{s["color"]}" stroke-width="2"{dash}/>'
            )
        out.append(f'<text x="{lx + 26}" y="{ly}">{_escape(s["label"])}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _rolling(values: list[float | None], width: int) -> list[float | None]:
    out: list[float | None] = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - width + 1) : i + 1] if v is not None]
        out.append(statistics.mean(window) if window else None)
    return out


def plots(results: list[dict], directory: str, seed: int, tag: str) -> list[str]:
    """Write the SVG plots ``ldr_readings_<tag>_<what>.svg``; returns their paths."""
    os.makedirs(directory, exist_ok=True)

    def target(name: str) -> str:
        return os.path.join(directory, f"ldr_readings_{tag}_{name}.svg")

    written = []

    def pick(kind: str, reading: str | None) -> dict | None:
        return next(
            (
                r
                for r in results
                if r["kind"] == kind and r["reading"] == reading and r["seed"] == seed
            ),
            None,
        )

    sylvie = {r: pick("sylvie", r) for r in READINGS}
    vanilla = pick("vanilla", None)
    if all(sylvie.values()):
        path = target("bits")
        svg_chart(
            path,
            f"Sylvie base bit-width b_t, 10-epoch mean (seed {seed})",
            "epoch",
            "base bit-width",
            [
                {
                    "label": r,
                    "x": list(range(len(run["trace"]["bitwidth"]))),
                    "y": _rolling(run["trace"]["bitwidth"], 10),
                    "color": COLORS[r],
                }
                for r, run in sylvie.items()
            ],
            y_range=(0.0, 8.4),
            y_ticks=[1, 2, 4, 8],
        )
        written.append(path)

        path = target("sync")
        svg_chart(
            path,
            f"Sylvie share of synchronous epochs, 10-epoch mean (seed {seed})",
            "epoch",
            "sync share",
            [
                {
                    "label": r,
                    "x": list(range(len(run["trace"]["pipeline_sync"]))),
                    "y": _rolling(run["trace"]["pipeline_sync"], 10),
                    "color": COLORS[r],
                }
                for r, run in sylvie.items()
            ],
            y_range=(0.0, 1.0),
        )
        written.append(path)

        series = [
            {
                "label": r,
                "x": list(range(len(run["trace"]["comm_bytes"]))),
                "y": [None if v is None else v / 1e6 for v in run["trace"]["comm_bytes"]],
                "color": COLORS[r],
            }
            for r, run in sylvie.items()
        ]
        if vanilla:
            series.append(
                {
                    "label": "vanilla FP32",
                    "x": list(range(len(vanilla["trace"]["comm_bytes"]))),
                    "y": [None if v is None else v / 1e6 for v in vanilla["trace"]["comm_bytes"]],
                    "color": COLORS["vanilla"],
                    "dash": "4 3",
                }
            )
        path = target("bytes")
        svg_chart(
            path,
            f"Bytes sent per epoch, all ranks (seed {seed})",
            "epoch",
            "MB per epoch",
            series,
            y_range=(0.0, max(v for s in series for v in s["y"] if v is not None) * 1.05),
        )
        written.append(path)

        series = [
            {
                "label": f"{r} train loss",
                "x": list(range(len(run["trace"]["train_loss"]))),
                "y": run["trace"]["train_loss"],
                "color": COLORS[r],
            }
            for r, run in sylvie.items()
        ]
        if vanilla:
            series.append(
                {
                    "label": "vanilla train loss",
                    "x": list(range(len(vanilla["trace"]["train_loss"]))),
                    "y": vanilla["trace"]["train_loss"],
                    "color": COLORS["vanilla"],
                    "dash": "4 3",
                }
            )
        path = target("loss")
        svg_chart(path, f"Training loss (seed {seed})", "epoch", "train_loss", series)
        written.append(path)

    points = [r for r in results if r["kind"] in ("sylvie", "vanilla") and r["bytes_per_epoch"]]
    if points:
        series = []
        for key, label in (("slows", "sylvie slows"), ("speeds_up", "sylvie speeds_up")):
            runs = [r for r in points if r["kind"] == "sylvie" and r["reading"] == key]
            series.append(
                {
                    "label": label,
                    "x": [r["bytes_per_epoch"] / 1e6 for r in runs],
                    "y": [r["test_acc_at_best_val"] for r in runs],
                    "color": COLORS[key],
                }
            )
        runs = [r for r in points if r["kind"] == "vanilla"]
        if runs:
            series.append(
                {
                    "label": "vanilla FP32",
                    "x": [r["bytes_per_epoch"] / 1e6 for r in runs],
                    "y": [r["test_acc_at_best_val"] for r in runs],
                    "color": COLORS["vanilla"],
                }
            )
        path = target("acc_vs_bytes")
        svg_chart(
            path,
            "Test accuracy (at best validation) vs bytes per epoch, every seed",
            "MB per epoch (mean over the run)",
            "test accuracy",
            [s for s in series if s["x"]],
            scatter=True,
        )
        written.append(path)

    tuner = {r: pick("torchgt", r) for r in READINGS}
    if all(tuner.values()):
        path = target("threshold")
        svg_chart(
            path,
            f"TorchGT threshold ladder position, 10-epoch mean (seed {seed})",
            "epoch",
            "ladder position",
            [
                {
                    "label": r,
                    "x": list(range(len(run["trace"]["sparsity_level"]))),
                    "y": _rolling(run["trace"]["sparsity_level"], 10),
                    "color": COLORS[r],
                }
                for r, run in tuner.items()
            ],
            y_range=(-0.2, 6.2),
            y_ticks=[0, 1, 2, 3, 4, 5, 6],
            y_tick_labels=["0", "bG", "1.5bG", "5bG", "7bG", "10bG", "1"],
        )
        written.append(path)
    return written


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--num-nodes", type=int, default=3000)
    parser.add_argument("--torchgt-num-nodes", type=int, default=1024)
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument(
        "--graph",
        choices=sorted(GRAPHS),
        default="hard",
        help="hard: plateauing, noisy loss; smooth: the recipes' graph, smoothly converging",
    )
    parser.add_argument("--num-classes", type=int, default=None, help="overrides --graph")
    parser.add_argument("--homophily", type=float, default=None, help="overrides --graph")
    parser.add_argument("--feature-noise", type=float, default=None, help="overrides --graph")
    parser.add_argument("--label-noise", type=float, default=None, help="overrides --graph")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["sylvie", "vanilla", "torchgt"],
        choices=["sylvie", "vanilla", "torchgt"],
    )
    parser.add_argument("--out", default=None, help="write the results (with traces) as JSON")
    parser.add_argument(
        "--load", nargs="+", default=None, help="read results from these JSON files instead"
    )
    parser.add_argument("--early", type=int, default=60, help="epochs of the descent-phase table")
    parser.add_argument("--plots", default=None, help="write SVG plots into this folder")
    parser.add_argument("--plot-seed", type=int, default=None, help="seed of the trace plots")
    args = parser.parse_args()
    for key, value in GRAPHS[args.graph].items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    if args.load:
        config, results = {}, []
        for path in args.load:  # e.g. the same graph run with other seeds
            with open(path) as f:
                saved = json.load(f)
            seeds = config.get("seeds", []) + saved["config"]["seeds"]
            config = {**saved["config"], **config, "seeds": seeds}
            results += saved["results"]
        config["early"] = args.early
    else:
        if args.epochs < 2:
            parser.error(f"expected --epochs >= 2 but got {args.epochs}")
        results = run_all(args)
        config = {k: v for k, v in vars(args).items() if k not in ("load", "out", "plots")}
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"config": config, "results": results}, f)
    print()
    print(table(results, config))
    if args.plots:
        seed = args.plot_seed if args.plot_seed is not None else config["seeds"][0]
        tag = f"{config.get('graph', 'hard')}{round(config['num_nodes'] / 1000)}k"
        for path in plots(results, args.plots, seed, tag):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
