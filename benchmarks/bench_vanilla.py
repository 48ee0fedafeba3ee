"""Partition-parallel vanilla training on the default graph: 1, 2 and 4 processes.

Prints, in one run, the epoch time (forward + backward + optimiser step, the slowest
rank, median over epochs after a warm-up), the bytes exchanged per epoch (all ranks,
embeddings + gradients) and the final test accuracy of

* ``recipes/vanilla.yaml`` with ``--trainer.devices`` 1, 2 and 4,
* ``recipes/single.yaml`` (one process, the accuracy reference),
* ``recipes/mlp.yaml`` (features only: what the graph adds).

Usage::

    python benchmarks/bench_vanilla.py [--epochs 100] [--num-nodes 20000] [--out results.json]
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(
    recipe: str, devices: int | None, epochs: int, num_nodes: int, workdir: str, name: str
) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "lightgraph",
        "fit",
        "--config",
        os.path.join(ROOT, "recipes", recipe),
        f"--trainer.max_epochs={epochs}",
        f"--trainer.logger.init_args.save_dir={workdir}",
        f"--trainer.logger.init_args.name={name}",
        f"--data.init_args.dataset.init_args.num_nodes={num_nodes}",
        f"--data.init_args.cache_dir={os.path.join(workdir, 'cache')}",
        "--trainer.enable_checkpointing=false",
    ]
    if devices is not None:
        cmd.append(f"--trainer.devices={devices}")
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-4000:]}")
    (metrics_file,) = glob.glob(os.path.join(workdir, name, "version_*", "metrics.csv"))
    rows = list(csv.DictReader(open(metrics_file)))

    def column(key: str) -> list[float]:
        return [float(r[key]) for r in rows if r.get(key) not in (None, "")]

    step = column("train_step_time")
    warm = step[min(5, len(step) - 1) :]
    comm = column("comm_bytes")
    return {
        "name": name,
        "devices": devices or 1,
        "epoch_time_s": statistics.median(warm),
        "bytes_per_epoch": statistics.median(comm) if comm else 0.0,
        "test_acc": column("test_acc")[-1],
        "val_acc": column("val_acc")[-1],
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--num-nodes", type=int, default=20000)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as workdir:
        results.append(run("mlp.yaml", None, args.epochs, args.num_nodes, workdir, "mlp"))
        results.append(run("single.yaml", None, args.epochs, args.num_nodes, workdir, "single"))
        for devices in (1, 2, 4):
            results.append(
                run(
                    "vanilla.yaml",
                    devices,
                    args.epochs,
                    args.num_nodes,
                    workdir,
                    f"vanilla-{devices}p",
                )
            )

    base = next(r for r in results if r["name"] == "single")["epoch_time_s"]
    print(
        f"default synthetic graph, {args.num_nodes} nodes, {args.epochs} epochs, 2-core CPU, gloo loopback"
    )
    print(
        f"{'run':<12} {'procs':>5} {'epoch s':>9} {'vs single':>9} {'MB/epoch':>10} {'val acc':>8} {'test acc':>8} {'wall s':>7}"
    )
    for r in results:
        print(
            f"{r['name']:<12} {r['devices']:>5} {r['epoch_time_s']:>9.3f} {r['epoch_time_s'] / base:>8.2f}x "
            f"{r['bytes_per_epoch'] / 1e6:>10.2f} {r['val_acc']:>8.4f} {r['test_acc']:>8.4f} {r['wall_s']:>7.1f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
