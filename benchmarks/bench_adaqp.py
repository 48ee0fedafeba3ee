"""AdaQP and its ablations side by side, on loopback or on a rate-limited link.

Runs, with the same graph, 3-layer GCN (hidden 256, AdaQP's setting), seeds and epochs,
all on the ring transport with 4 processes:

* ``vanilla``: FP32, synchronous;
* ``adaqp-q``: variance-aware MILP widths, synchronous (quantisation only);
* ``adaqp-p``: FP32 with the central/marginal overlap (parallelisation only);
* ``adaqp``: both (``recipes/adaqp.yaml``);
* ``random``: uniform random widths from {2, 4, 8} redrawn every period, with overlap
  (AdaQP's Table 6 baseline);
* ``sylvie``: ``recipes/sylvie.yaml`` with the same model (degree-aware widths, LDR base
  width, LDR-switched one-epoch-stale pipeline).

Columns: bytes per training epoch (all ranks, codes + scale/zero), median training-step
time of the slowest rank and its speed-up over vanilla, the share of the step spent
quantising/dequantising, assignment seconds as a share of the summed step times, final
test accuracy, and the summed training-step time until validation accuracy first reaches
``--target`` ("time to target").

Usage::

    python benchmarks/bench_adaqp.py --network loopback --epochs 100
    sudo python benchmarks/bench_adaqp.py --network netns --rate 1gbit --epochs 100
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile

from harness import column, fit, link_down, link_up, strategy

WORLD = 4


def _callbacks(*extra: dict) -> list[dict]:
    keys = ["train_loss", "val_acc", "test_acc", "comm_bytes", "assign_seconds", "train_step_time"]
    return [
        {
            "class_path": "lightgraph.callbacks.EpochSummary",
            "init_args": {"every_n_epochs": 10, "keys": keys},
        },
        {"class_path": "lightgraph.callbacks.CommunicationMonitor"},
        *extra,
    ]


def methods(period: int, hidden: int) -> list[tuple[str, str, dict]]:
    """(name, recipe, override)."""
    reassigner = {
        "class_path": "lightgraph.callbacks.BitWidthReassigner",
        "init_args": {"period": period},
    }
    milp = {
        "class_path": "lightgraph.quant.VarianceAwareBits",
        "init_args": {"group_size": 100, "lam": 0.5, "cost_model_path": "cost_model_4.json"},
    }
    random_bits = {"class_path": "lightgraph.quant.RandomBits", "init_args": {"seed": 0}}
    model = {"model": {"init_args": {"model": {"init_args": {"hidden_channels": hidden}}}}}

    def adaqp(**init_args: object) -> dict:
        extra = [reassigner] if init_args.get("quantization") is not None else []
        return {
            "trainer": {
                "strategy": strategy(transport="ring", **init_args),
                "callbacks": _callbacks(*extra),
            },
            **model,
        }

    sylvie_callbacks = _callbacks(
        {
            "class_path": "lightgraph.callbacks.AdaptiveBitWidth",
            "init_args": {"b_min": 1, "b_max": 8, "window": 5, "smoothing": 0.9},
        },
        {
            "class_path": "lightgraph.callbacks.PipelineAdaptor",
            "init_args": {"window": 5, "smoothing": 0.9},
        },
    )
    return [
        ("vanilla", "adaqp.yaml", adaqp(quantization=None, mode="sync")),
        ("adaqp-q", "adaqp.yaml", adaqp(quantization=milp, mode="sync")),
        ("adaqp-p", "adaqp.yaml", adaqp(quantization=None, mode="overlap")),
        ("adaqp", "adaqp.yaml", adaqp(quantization=milp, mode="overlap")),
        ("random", "adaqp.yaml", adaqp(quantization=random_bits, mode="overlap")),
        ("sylvie", "sylvie.yaml", {"trainer": {"callbacks": sylvie_callbacks}, **model}),
    ]


def run(name: str, recipe: str, override: dict, args: argparse.Namespace, workdir: str) -> dict:
    rows, wall = fit(
        name,
        recipe,
        override,
        workdir,
        epochs=args.epochs,
        num_nodes=args.num_nodes,
        network=args.network,
        world=WORLD,
    )
    step_all = column(rows, "train_step_time")
    warm = min(5, len(step_all) - 1)
    step = step_all[warm:]
    quant = column(rows, "comm/quant_seconds")[warm:]
    comm = column(rows, "comm_bytes")
    assign = column(rows, "assign_seconds")
    val = column(rows, "val_acc")
    reached = next((i for i, v in enumerate(val) if v >= args.target), None)
    return {
        "name": name,
        "epoch_time_s": statistics.median(step),
        "quant_share": statistics.median(quant) / statistics.median(step) if quant else 0.0,
        "bytes_per_epoch": statistics.mean(comm[warm:]) if comm else 0.0,
        "bytes_last_epoch": comm[-1] if comm else 0.0,
        "assign_s": assign[-1] if assign else 0.0,
        "assign_share": (assign[-1] / sum(step_all)) if assign else 0.0,
        "test_acc": column(rows, "test_acc")[-1],
        "epochs": len(step_all),
        "time_to_target_s": sum(step_all[: reached + 1]) if reached is not None else math.nan,
        "epochs_to_target": reached + 1 if reached is not None else None,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=("loopback", "netns"), default="loopback")
    parser.add_argument("--rate", default="1gbit", help="link rate for --network netns (tc syntax)")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--period", type=int, default=50, help="re-assignment period (epochs)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--num-nodes", type=int, default=20000)
    parser.add_argument("--target", type=float, default=0.95, help="validation accuracy target")
    parser.add_argument("--only", nargs="*", help="run only these methods")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    if args.network == "netns":
        link_up(WORLD, args.rate)
    results = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for name, recipe, override in methods(args.period, args.hidden):
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
        f"\n{args.num_nodes}-node synthetic graph, 3-layer GCN x{args.hidden}, {WORLD} processes on 2 cores, "
        f"ring, {net}, {args.epochs} epochs, period {args.period}, target val acc {args.target}"
    )
    print(
        f"{'method':<9} {'MB/epoch':>9} {'vs FP32':>8} {'epoch s':>8} {'speedup':>8} {'quant %':>8} "
        f"{'assign %':>9} {'test acc':>9} {'to target s':>12}"
    )
    for r in results:
        less = (
            vanilla["bytes_per_epoch"] / r["bytes_per_epoch"]
            if vanilla and r["bytes_per_epoch"]
            else float("nan")
        )
        speed = vanilla["epoch_time_s"] / r["epoch_time_s"] if vanilla else float("nan")
        print(
            f"{r['name']:<9} {r['bytes_per_epoch'] / 1e6:>9.2f} {less:>7.2f}x {r['epoch_time_s']:>8.3f} "
            f"{speed:>7.2f}x {100 * r['quant_share']:>7.1f}% {100 * r['assign_share']:>8.2f}% "
            f"{r['test_acc']:>9.4f} {r['time_to_target_s']:>12.1f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
