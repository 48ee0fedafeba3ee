"""TorchGT end to end: the recipe against its dense baselines, and graph-parallel scaling.

Every run is ``lightgraph fit`` on the same node sequences (the default synthetic graph,
METIS-reordered, cut into sequences of ``--sequence-length`` tokens plus a global token),
the same Graphormer-slim (4 layers, hidden 64, 8 heads), seeds and epochs:

* ``torchgt``: ``recipes/torchgt.yaml`` -- cluster-sparse attention whose threshold
  the ``ClusterSparsityTuner`` moves along TorchGT's ladder;
* ``sparse``: the same recipe with ``kind=sparse`` (the exact topology-induced pattern,
  CSR kernels; the tuner's threshold is then unused);
* ``gp-flash``: ``recipes/torchgt_flash.yaml`` -- dense attention through
  ``scaled_dot_product_attention``;
* ``gp-raw``: ``recipes/torchgt_raw.yaml`` -- dense attention with materialised scores;
* ``torchgt`` again on 1 and 4 processes (``--scaling``): graph-parallel epoch time.

Columns: median training-step time of the slowest rank (``train_step_time``, epochs
1 onwards), epoch time (step time x sequences), the speed-up over ``gp-flash``, the final
and best validation accuracy, the test accuracy at the best validation epoch, the fraction
of steps that ran a dense kind, the threshold trajectory, and the run's wall time (process
start, data preparation and the per-epoch evaluation included).

Usage::

    python benchmarks/bench_torchgt.py --epochs 20 --out torchgt.json
    python benchmarks/bench_torchgt.py --epochs 5 --runs torchgt sparse --no-scaling
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from harness import column, fit

RUNS = {
    # name: (recipe, extra CLI flags)
    "torchgt": ("torchgt.yaml", []),
    "sparse": ("torchgt.yaml", ["--model.init_args.model.init_args.kind=sparse"]),
    "gp-flash": ("torchgt_flash.yaml", []),
    "gp-raw": ("torchgt_raw.yaml", []),
}


def summarise(name: str, rows: list[dict], wall: float, devices: int, sequences: int) -> dict:
    steps = column(rows, "train_step_time")
    val = column(rows, "val_acc")
    test = column(rows, "test_acc")
    dense = column(rows, "attention_dense")
    thresholds = column(rows, "attention_threshold")
    step = statistics.median(steps[1:] or steps)
    best = max(range(len(val)), key=val.__getitem__) if val else None
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
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--num-nodes", type=int, default=20_000)
    parser.add_argument("--sequence-length", type=int, default=4096)
    parser.add_argument("--devices", type=int, default=2, help="processes of the main runs")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--scaling", dest="scaling", action="store_true", default=True)
    parser.add_argument("--no-scaling", dest="scaling", action="store_false")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error(f"expected --epochs >= 2 but got {args.epochs}")
    sequences = -(-args.num_nodes // args.sequence_length)

    plan = [(name, args.devices) for name in args.runs]
    if args.scaling:
        plan += [("torchgt", d) for d in (1, 4) if d != args.devices]
    results = []
    with tempfile.TemporaryDirectory() as work:
        for name, devices in plan:
            recipe, flags = RUNS[name]
            label = f"{name}-p{devices}"
            rows, wall = fit(
                label,
                recipe,
                None,
                work,
                epochs=args.epochs,
                num_nodes=args.num_nodes,
                extra=[
                    *flags,
                    f"--trainer.devices={devices}",
                    f"--data.init_args.sequence_length={args.sequence_length}",
                ],
            )
            results.append(summarise(name, rows, wall, devices, sequences))
            shown = {k: v for k, v in results[-1].items() if k != "thresholds"}
            print(json.dumps(shown), flush=True)

    flash = next(
        (r for r in results if r["name"] == "gp-flash" and r["devices"] == args.devices), None
    )
    print(
        f"\nGraphormer-slim, {sequences} sequences of {args.sequence_length} tokens "
        f"({args.num_nodes} nodes), {args.epochs} epochs"
    )
    print(
        f"{'run':<10} {'procs':>5} {'step s':>8} {'epoch s':>8} {'vs flash':>9} "
        f"{'val acc':>8} {'best val':>9} {'test@best':>9} {'dense':>6} {'wall s':>7}"
    )

    def fmt(x: float | None, spec: str) -> str:
        return format(x, spec) if x is not None else "-"

    for r in results:
        speed = f"{flash['step_s'] / r['step_s']:.2f}x" if flash else "-"
        print(
            f"{r['name']:<10} {r['devices']:>5} {r['step_s']:>8.3f} {r['epoch_s']:>8.2f} "
            f"{speed:>9} {fmt(r['val_acc'], '.4f'):>8} {fmt(r['best_val_acc'], '.4f'):>9} "
            f"{fmt(r['test_acc_at_best_val'], '.4f'):>9} {fmt(r['dense_fraction'], '.2f'):>6} "
            f"{r['wall_s']:>7.0f}"
        )
    for r in results:
        if r["thresholds"]:
            trail = " ".join(f"{t:.4g}" for t in r["thresholds"])
            print(f"threshold trajectory ({r['name']}, {r['devices']} procs): {trail}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
