"""TorchGT end to end: the recipe against its dense baselines, and graph-parallel scaling.

Every run is ``lightgraph fit`` on the same node sequences (the default synthetic graph,
METIS-reordered, cut into sequences of ``--sequence-length`` tokens plus a global token),
the same Graphormer-slim (4 layers, hidden 64, 8 heads), seeds and epochs:

* ``torchgt``: ``recipes/torchgt.yaml`` -- the paper's full system: dual attention
  (dense every ``dense_every`` steps) over the cluster-sparse layout, whose threshold the
  ``ClusterSparsityTuner`` moves along TorchGT's ladder;
* ``sparse``: the same recipe with ``kind=sparse`` (the exact topology-induced pattern,
  CSR kernels, never dense; the tuner's threshold is then unused);
* ``gp-flash``: ``recipes/torchgt_flash.yaml`` -- dense attention through
  ``scaled_dot_product_attention``;
* ``gp-raw``: ``recipes/torchgt_raw.yaml`` -- dense attention with materialised scores;
* ``torchgt`` again on 1 and 4 processes (``--scaling``): graph-parallel epoch time.

Convergence comparison (``--convergence``: these four runs, no scaling runs), on the same
sequences:

* ``dense``: ``recipes/torchgt_flash.yaml`` (GP-Flash, the dense baseline);
* ``sparse-only``: ``recipes/torchgt.yaml`` with ``kind=sparse``;
* ``dual``: ``recipes/torchgt.yaml`` with ``kind=dual``, ``sparse_kind=sparse`` (sparse
  steps, dense every ``dense_every`` steps and whenever C1-C3 fail; the tuner's
  threshold is unused);
* ``dual-cs-tuner``: ``recipes/torchgt.yaml`` with ``kind=dual``,
  ``sparse_kind=cluster_sparse`` (the recipe's own setting, spelled out): the sparse steps
  run the cluster-sparse kernel at the threshold the recipe's ``ClusterSparsityTuner``
  moves.

Every run names its ``kind`` (and the dual runs their ``sparse_kind``) explicitly, so the
comparison does not depend on the recipe's defaults; ``dense_every`` is the recipe's (11)
unless ``--dense-every`` is given.

``sparse_kind`` (and ``--dense-every``) are passed to the dual runs only. ``--token-path
on|off`` sets ``NodeSequenceDataModule(token_path=...)`` for every run of the invocation
(default: the data module's own default), so ``dual`` can certify condition C2;
``--locality F`` builds every run's graph with ``SyntheticGraph(locality=F)`` (locally
dense clusters, see ``docs/datasets.md``).

Per epoch every run records (``epochs`` in the JSON; a callback of this file,
:class:`EpochClock`, is added to every run to log the times): the epoch's wall time
(training steps plus the validation pass, ``epoch_s``), the wall time since training
started (``fit_s``), the median training step of the slowest rank (``step_s``),
training loss, validation and test accuracy, the share of training steps that ran dense
attention (``attention_dense_fraction``, or the mean of the per-step ``attention_dense``
where the module does not log it) and the cluster-sparse threshold.

Columns of the summary: median training-step time of the slowest rank
(``train_step_time``, epochs 1 onwards), epoch time (step time x sequences), the speed-up
over the dense baseline (``gp-flash`` or ``dense``), the final and best validation
accuracy, the test accuracy at the best validation epoch, the fraction of steps that ran
a dense kind, the wall time of training until validation accuracy first reached
``--target-acc`` (``t@acc``), and the run's wall time (process start, data preparation and
the per-epoch evaluation included). Then the threshold trajectories and, with
``--per-epoch``, every run's epochs.

Usage::

    python benchmarks/bench_torchgt.py --epochs 20 --out torchgt.json
    python benchmarks/bench_torchgt.py --epochs 5 --runs torchgt sparse --no-scaling
    python benchmarks/bench_torchgt.py --convergence --epochs 20 --per-epoch \\
        --out benchmarks/results/torchgt_convergence.json
    python benchmarks/bench_torchgt.py --convergence --locality 0.9 --epochs 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import lightning.pytorch as pl
from harness import column, fit
from lightning.pytorch.callbacks import Callback

MODEL = "--model.init_args.model.init_args"
DATASET = "--data.init_args.dataset.init_args"
RUNS = {
    # name: (recipe, extra CLI flags)
    "torchgt": ("torchgt.yaml", []),
    "sparse": ("torchgt.yaml", [f"{MODEL}.kind=sparse"]),
    "gp-flash": ("torchgt_flash.yaml", []),
    "gp-raw": ("torchgt_raw.yaml", []),
    # The convergence comparison.
    "dense": ("torchgt_flash.yaml", []),
    "sparse-only": ("torchgt.yaml", [f"{MODEL}.kind=sparse"]),
    "dual": ("torchgt.yaml", [f"{MODEL}.kind=dual", f"{MODEL}.sparse_kind=sparse"]),
    "dual-cs-tuner": (
        "torchgt.yaml",
        [f"{MODEL}.kind=dual", f"{MODEL}.sparse_kind=cluster_sparse"],
    ),
}
CONVERGENCE = ("dense", "sparse-only", "dual", "dual-cs-tuner")
DUAL_RUNS = ("dual", "dual-cs-tuner")
DENSE_BASELINES = ("gp-flash", "dense")


class EpochClock(Callback):
    """Logs ``epoch_time`` (the epoch's training steps and its validation pass, seconds)
    and ``fit_time`` (seconds since training started) at the end of every epoch.

    Added to every run (``--trainer.callbacks+=bench_torchgt.EpochClock``). Lightning runs
    the end-of-epoch validation before ``on_train_epoch_end``, so both include it; the
    slowest rank's value is logged.
    """

    def __init__(self) -> None:
        self._fit_start = self._epoch_start = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter()
        for key, value in (
            ("epoch_time", now - self._epoch_start),
            ("fit_time", now - self._fit_start),
        ):
            pl_module.log(
                key,
                value,
                reduce_fx="max",
                sync_dist=True,
                on_step=False,
                on_epoch=True,
                batch_size=1,
            )


def _float(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    return None if value in (None, "") else float(value)


def per_epoch(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per epoch from the CSV rows (the last value of every key in the epoch)."""
    keys = {
        "epoch_s": "epoch_time",
        "fit_s": "fit_time",
        "step_s": "train_step_time",
        "train_loss": "train_loss",
        "val_acc": "val_acc",
        "test_acc": "test_acc",
        "dense_fraction": "attention_dense_fraction",
        "threshold": "attention_threshold",
    }
    epochs: dict[int, dict[str, Any]] = {}
    dense_steps: dict[int, list[float]] = {}
    for row in rows:
        if row.get("epoch") in (None, ""):
            continue
        e = int(float(row["epoch"]))
        record = epochs.setdefault(e, {"epoch": e})
        for name, key in keys.items():
            value = _float(row, key)
            if value is not None:
                record[name] = value
        step_dense = _float(row, "attention_dense")
        if step_dense is not None:
            dense_steps.setdefault(e, []).append(step_dense)
    for e, record in epochs.items():
        if "dense_fraction" not in record and dense_steps.get(e):
            record["dense_fraction"] = sum(dense_steps[e]) / len(dense_steps[e])
    return [epochs[e] for e in sorted(epochs)]


def time_to_accuracy(epochs: list[dict[str, Any]], target: float) -> float | None:
    """Training wall time (``fit_s``) at the first epoch whose validation accuracy >= target."""
    for record in epochs:
        if record.get("val_acc", -1.0) >= target and "fit_s" in record:
            return record["fit_s"]
    return None


def summarise(
    name: str,
    rows: list[dict],
    wall: float,
    devices: int,
    sequences: int,
    target_acc: float | None = None,
) -> dict:
    steps = column(rows, "train_step_time")
    val = column(rows, "val_acc")
    test = column(rows, "test_acc")
    dense = column(rows, "attention_dense")
    thresholds = column(rows, "attention_threshold")
    step = statistics.median(steps[1:] or steps)
    best = max(range(len(val)), key=val.__getitem__) if val else None
    epochs = per_epoch(rows)
    return {
        "name": name,
        "devices": devices,
        "step_s": step,
        "epoch_s": step * sequences,
        "val_acc": val[-1] if val else None,
        "best_val_acc": val[best] if best is not None else None,
        "test_acc_at_best_val": test[best] if best is not None and best < len(test) else None,
        "test_acc": test[-1] if test else None,
        "dense_fraction": sum(dense) / len(dense) if dense else None,
        "thresholds": thresholds,
        "time_to_target_s": None if target_acc is None else time_to_accuracy(epochs, target_acc),
        "wall_s": wall,
        "epochs": epochs,
    }


def run_flags(name: str, args: argparse.Namespace) -> list[str]:
    """The run's own flags, then the data flags shared by every run of the invocation."""
    _, flags = RUNS[name]
    flags = [*flags, "--trainer.callbacks+=bench_torchgt.EpochClock"]
    if name in DUAL_RUNS and args.dense_every is not None:
        flags.append(f"{MODEL}.dense_every={args.dense_every}")
    if args.token_path is not None:
        flags.append(f"--data.init_args.token_path={args.token_path == 'on'}")
    if args.locality > 0:
        flags += [
            f"{DATASET}.locality={args.locality}",
            f"{DATASET}.locality_scale={args.locality_scale}",
        ]
    return flags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--num-nodes", type=int, default=20_000)
    parser.add_argument("--sequence-length", type=int, default=4096)
    parser.add_argument("--devices", type=int, default=2, help="processes of the main runs")
    parser.add_argument("--runs", nargs="+", default=None, choices=list(RUNS))
    parser.add_argument(
        "--convergence",
        action="store_true",
        help=f"run {', '.join(CONVERGENCE)} (unless --runs is given) without scaling runs",
    )
    parser.add_argument("--scaling", dest="scaling", action="store_true", default=None)
    parser.add_argument("--no-scaling", dest="scaling", action="store_false")
    parser.add_argument(
        "--dense-every",
        type=int,
        default=None,
        help="dual runs' dense period (default: the model's)",
    )
    parser.add_argument(
        "--token-path",
        choices=("on", "off"),
        default=None,
        help="NodeSequenceDataModule token_path for every run (default: the data module's)",
    )
    parser.add_argument("--locality", type=float, default=0.0, help="SyntheticGraph locality")
    parser.add_argument("--locality-scale", type=float, default=16.0)
    parser.add_argument(
        "--target-acc", type=float, default=0.8, help="report the training time to this val acc"
    )
    parser.add_argument("--per-epoch", action="store_true", help="print every run's epochs")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error(f"expected --epochs >= 1 but got {args.epochs}")
    if args.runs is None:
        args.runs = list(CONVERGENCE) if args.convergence else list(RUNS)[:4]
    if args.scaling is None:
        args.scaling = not args.convergence
    sequences = -(-args.num_nodes // args.sequence_length)
    # The runs load EpochClock from this file.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, here)

    plan = [(name, args.devices) for name in args.runs]
    if args.scaling:
        plan += [("torchgt", d) for d in (1, 4) if d != args.devices]
    results = []
    with tempfile.TemporaryDirectory() as work:
        for name, devices in plan:
            recipe, _ = RUNS[name]
            label = f"{name}-p{devices}"
            rows, wall = fit(
                label,
                recipe,
                None,
                work,
                epochs=args.epochs,
                num_nodes=args.num_nodes,
                extra=[
                    *run_flags(name, args),
                    f"--trainer.devices={devices}",
                    f"--data.init_args.sequence_length={args.sequence_length}",
                ],
            )
            results.append(summarise(name, rows, wall, devices, sequences, args.target_acc))
            shown = {k: v for k, v in results[-1].items() if k not in ("thresholds", "epochs")}
            print(json.dumps(shown), flush=True)

    flash = next(
        (r for r in results if r["name"] in DENSE_BASELINES and r["devices"] == args.devices),
        None,
    )
    graph = f"{args.num_nodes} nodes" + (
        f", locality {args.locality:g}" if args.locality > 0 else ""
    )
    print(
        f"\nGraphormer-slim, {sequences} sequences of {args.sequence_length} tokens "
        f"({graph}), {args.epochs} epochs"
    )
    print(
        f"{'run':<14} {'procs':>5} {'step s':>8} {'epoch s':>8} {'vs flash':>9} "
        f"{'val acc':>8} {'best val':>9} {'test@best':>9} {'dense':>6} "
        f"{'t@' + format(args.target_acc, 'g'):>8} {'wall s':>7}"
    )

    def fmt(x: float | None, spec: str) -> str:
        return format(x, spec) if x is not None else "-"

    for r in results:
        speed = f"{flash['step_s'] / r['step_s']:.2f}x" if flash else "-"
        print(
            f"{r['name']:<14} {r['devices']:>5} {r['step_s']:>8.3f} {r['epoch_s']:>8.2f} "
            f"{speed:>9} {fmt(r['val_acc'], '.4f'):>8} {fmt(r['best_val_acc'], '.4f'):>9} "
            f"{fmt(r['test_acc_at_best_val'], '.4f'):>9} {fmt(r['dense_fraction'], '.2f'):>6} "
            f"{fmt(r['time_to_target_s'], '.1f'):>8} {r['wall_s']:>7.0f}"
        )
    for r in results:
        if r["thresholds"]:
            trail = " ".join(f"{t:.4g}" for t in r["thresholds"])
            print(f"threshold trajectory ({r['name']}, {r['devices']} procs): {trail}")
    if args.per_epoch:
        for r in results:
            print(f"\n{r['name']} ({r['devices']} procs), per epoch:")
            print(
                f"{'epoch':>5} {'epoch s':>8} {'fit s':>8} {'step s':>7} {'loss':>7} "
                f"{'val acc':>8} {'test acc':>8} {'dense':>6} {'threshold':>10}"
            )
            for e in r["epochs"]:
                print(
                    f"{e['epoch']:>5} {fmt(e.get('epoch_s'), '.2f'):>8} "
                    f"{fmt(e.get('fit_s'), '.1f'):>8} {fmt(e.get('step_s'), '.3f'):>7} "
                    f"{fmt(e.get('train_loss'), '.4f'):>7} {fmt(e.get('val_acc'), '.4f'):>8} "
                    f"{fmt(e.get('test_acc'), '.4f'):>8} {fmt(e.get('dense_fraction'), '.2f'):>6} "
                    f"{fmt(e.get('threshold'), '.4g'):>10}"
                )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
