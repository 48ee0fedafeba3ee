"""Sylvie and its baselines side by side, on loopback and on a 1 Gbit/s link.

Runs, with the same graph, GCN, seeds and epochs, and prints one table per network:

* ``single``: one process, the accuracy reference (``recipes/single.yaml``);
* ``vanilla``: FP32 synchronous exchange (``recipes/vanilla.yaml``);
* ``fixed-8/4/2/1``: every message quantised to a fixed width, synchronous;
* ``sylvie-bits``: Sylvie's degree-aware widths + LDR-adapted base width, synchronous;
* ``sylvie``: the full system (``recipes/sylvie.yaml``: bits + pipeline adaptor);
* ``pipegcn``: always asynchronous FP32 (``recipes/pipegcn.yaml``);
* ``bnsgcn``: boundary-node sampling, p = 0.1 (``recipes/bnsgcn.yaml``).

Columns: bytes sent per training epoch (all ranks; payload + quantisation parameters),
the median training-step time of the slowest rank, its share spent quantising and
dequantising, the final global test accuracy and the epochs run.

``--network netns`` runs every multi-process method with each rank in its own Linux
network namespace, joined by a bridge and rate-limited with ``tc`` (needs root; the
namespaces are created by ``benchmarks/netns_link.sh`` and removed afterwards).

Usage::

    python benchmarks/bench_sylvie.py --network loopback --epochs 60
    sudo python benchmarks/bench_sylvie.py --network netns --rate 1gbit --epochs 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from harness import column, fit, link_down, link_up
from harness import strategy as _strategy

WORLD = 4


def _callbacks(*extra: dict) -> list[dict]:
    keys = [
        "train_loss",
        "val_acc",
        "test_acc",
        "comm_bytes",
        "bitwidth",
        "pipeline_sync",
        "train_step_time",
    ]
    return [
        {
            "class_path": "lightgraph.callbacks.EpochSummary",
            "init_args": {"every_n_epochs": 10, "keys": keys},
        },
        {"class_path": "lightgraph.callbacks.CommunicationMonitor"},
        *extra,
    ]


ADAPTIVE = {
    "class_path": "lightgraph.callbacks.AdaptiveBitWidth",
    "init_args": {"b_min": 1, "b_max": 8, "window": 5, "smoothing": 0.9},
}
ADAPTOR = {
    "class_path": "lightgraph.callbacks.PipelineAdaptor",
    "init_args": {"window": 5, "smoothing": 0.9},
}


def methods() -> list[tuple[str, str, dict | None]]:
    """(name, recipe, override config or None)."""
    fixed = [
        (
            f"fixed-{b}",
            "vanilla.yaml",
            {
                "trainer": {
                    "strategy": _strategy(
                        quantization={
                            "class_path": "lightgraph.quant.FixedBits",
                            "init_args": {"base_bits": b},
                        }
                    ),
                    "callbacks": _callbacks(),
                }
            },
        )
        for b in (8, 4, 2, 1)
    ]
    degree = {"class_path": "lightgraph.quant.DegreeAwareBits", "init_args": {"base_bits": 1}}
    return [
        ("single", "single.yaml", None),
        ("vanilla", "vanilla.yaml", {"trainer": {"callbacks": _callbacks()}}),
        *fixed,
        (
            "sylvie-bits",
            "sylvie.yaml",
            {
                "trainer": {
                    "strategy": _strategy(transport="ring", quantization=degree, mode="sync"),
                    "callbacks": _callbacks(ADAPTIVE),
                }
            },
        ),
        ("sylvie", "sylvie.yaml", {"trainer": {"callbacks": _callbacks(ADAPTIVE, ADAPTOR)}}),
        ("pipegcn", "pipegcn.yaml", {"trainer": {"callbacks": _callbacks()}}),
        ("bnsgcn", "bnsgcn.yaml", {"trainer": {"callbacks": _callbacks()}}),
    ]


def run(
    name: str, recipe: str, override: dict | None, args: argparse.Namespace, workdir: str
) -> dict:
    rows, wall = fit(
        name,
        recipe,
        override,
        workdir,
        epochs=args.epochs,
        num_nodes=args.num_nodes,
        network=args.network,
        world=WORLD,
        single=name == "single",
    )
    warm = min(5, args.epochs - 1)
    step = column(rows, "train_step_time")[warm:]
    quant = column(rows, "comm/quant_seconds")[warm:]
    comm = column(rows, "comm_bytes")[warm:]
    bits = column(rows, "bitwidth")
    return {
        "name": name,
        "epoch_time_s": statistics.median(step),
        "quant_share": statistics.median(quant) / statistics.median(step) if quant else 0.0,
        "bytes_per_epoch": statistics.mean(comm) if comm else 0.0,
        "test_acc": column(rows, "test_acc")[-1],
        "epochs": len(column(rows, "train_loss")),
        "final_bits": bits[-1] if bits else None,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=("loopback", "netns"), default="loopback")
    parser.add_argument("--rate", default="1gbit", help="link rate for --network netns (tc syntax)")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--num-nodes", type=int, default=20000)
    parser.add_argument("--only", nargs="*", help="run only these methods")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    if args.network == "netns":
        link_up(WORLD, args.rate)
    results = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for name, recipe, override in methods():
                if args.only and name not in args.only:
                    continue
                results.append(run(name, recipe, override, args, workdir))
                print(json.dumps(results[-1]), flush=True)
    finally:
        if args.network == "netns":
            link_down(WORLD)

    vanilla = next((r for r in results if r["name"] == "vanilla"), None)
    net = f"{args.rate} link (network namespaces)" if args.network == "netns" else "loopback"
    print(
        f"\n{args.num_nodes}-node synthetic graph, 3-layer GCN, {WORLD} processes on 2 cores, {net}, {args.epochs} epochs"
    )
    print(
        f"{'method':<12} {'MB/epoch':>9} {'vs FP32':>8} {'epoch s':>8} {'speedup':>8} {'quant %':>8} {'test acc':>9} {'epochs':>7}"
    )
    for r in results:
        less = (
            vanilla["bytes_per_epoch"] / r["bytes_per_epoch"]
            if vanilla and r["bytes_per_epoch"]
            else float("nan")
        )
        speed = vanilla["epoch_time_s"] / r["epoch_time_s"] if vanilla else float("nan")
        print(
            f"{r['name']:<12} {r['bytes_per_epoch'] / 1e6:>9.2f} {less:>7.1f}x {r['epoch_time_s']:>8.3f} {speed:>7.2f}x "
            f"{100 * r['quant_share']:>7.1f}% {r['test_acc']:>9.4f} {r['epochs']:>7d}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
