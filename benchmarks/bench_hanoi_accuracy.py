"""Accuracy ablation of HANOI's macro-batch sampling (thesis Tables 4.2/4.3, §4.3).

Same graph, same model, same epochs; only the first sampling stage differs:

* ``marius``: random partitions, no hubs (a MariusGNN-like partition buffer,
  ``recipes/marius_like.yaml``);
* ``metis``: METIS partitions, no hubs (clustering bias, §4.3.1);
* ``gap``: GAP partitions (label-balanced FENNEL), no hubs;
* ``hanoi``: GAP partitions + 1 % hub nodes (``recipes/hanoi.yaml``);
* ``ns-mem``: neighbour sampling over the whole graph in memory (``recipes/ns_mem.yaml``),
  the reference.

Every partition method uses 64 partitions, macro-batches of 8 (a 1/8 buffer) and reuse
1 (no adaptive reuse), so only the sampling differs. The model is a 3-layer GraphSAGE
(fanouts 15/10/5, batch 1000, lr 1e-3, dropout 0.5; hidden ``--hidden``, 128 by default
instead of the thesis' 256 to save time) evaluated with exact layer-wise inference over
the whole graph. A 2-layer MLP (``recipes/mlp.yaml``) checks that the graph matters.

For every partitioned store the script also measures, independently of the store's edge
buckets (from the original ``edge_index`` and the store's node -> partition map and hub
list), what a macro-batch keeps of the graph (Table 4.3): the fraction of the in-edges
of the macro-batch's nodes whose source is in the macro-batch too (``retention``), the
same for its training targets only, and the average in-degree inside the macro-batch;
and the label skew of the macro-batch's training targets (total-variation distance to
the global training label distribution). The count of kept edges is checked against what
``PartitionStore.read_macro_batch`` returns.

Run (about 35 min on two shared CPU cores, 5 epochs x 2 seeds)::

    python benchmarks/bench_hanoi_accuracy.py
    python benchmarks/bench_hanoi_accuracy.py --dry-run      # tiny smoke test
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
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, column  # noqa: E402
from harness import fit as harness_fit  # noqa: E402

NUM_PARTS = 64
PARTS_PER_BATCH = 8
HUB_FRACTION = 0.01

#: name -> (recipe, partitioner, hub_fraction); ``None`` partitioner = NS-Mem.
METHODS: dict[str, tuple[str, str | None, float]] = {
    "marius": ("marius_like.yaml", "random", 0.0),
    "metis": ("hanoi.yaml", "metis", 0.0),
    "gap": ("hanoi.yaml", "gap", 0.0),
    "hanoi": ("hanoi.yaml", "gap", HUB_FRACTION),
    "ns-mem": ("ns_mem.yaml", None, 0.0),
}
LABELS = {
    "marius": "Random parts, no hubs (Marius-like)",
    "metis": "METIS parts, no hubs",
    "gap": "GAP parts, no hubs",
    "hanoi": "GAP + 1% hubs (HANOI)",
    "ns-mem": "NS-Mem (whole graph)",
}


# --------------------------------------------------------------------------- configs
def dataset_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "num_nodes": args.num_nodes,
        "avg_degree": args.avg_degree,
        "homophily": args.homophily,
        "seed": 0,  # one graph; the seeds vary the partition, sampling and model init
    }


def override(method: str, seed: int, args: argparse.Namespace, workdir: str) -> dict:
    _, partitioner, hubs = METHODS[method]
    data: dict[str, Any] = {
        "dataset": {"init_args": dataset_args(args)},
        "eval_mode": "layerwise",
        "cache_dir": os.path.join(workdir, "cache"),
        "seed": seed,
        "fanouts": [15, 10, 5],
        "batch_size": 1000,
    }
    if partitioner is not None:
        data.update(
            num_parts=NUM_PARTS,
            parts_per_batch=PARTS_PER_BATCH,
            reuse=1,
            adaptive_reuse=False,
            partitioner=partitioner,
            hub_fraction=hubs,
        )
    return {
        "seed_everything": seed,
        "trainer": {
            "max_epochs": args.epochs,
            "enable_checkpointing": False,
            "check_val_every_n_epoch": args.val_every,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": workdir, "name": f"{method}-s{seed}"},
            },
            "callbacks": [
                {
                    "class_path": "lightgraph.callbacks.EpochSummary",
                    "init_args": {"every_n_epochs": 1, "keys": ["train_loss", "val_acc"]},
                }
            ],
        },
        "model": {
            "init_args": {
                "model": {"init_args": {"hidden_channels": args.hidden, "dropout": 0.5}},
                "lr": 1e-3,
            }
        },
        "data": {"init_args": data},
    }


# ---------------------------------------------------------------------- worker process
def worker(argv: list[str]) -> None:
    """``fit`` then ``test`` on the final weights, in this (child) process."""
    from lightgraph.cli import build_cli

    cli = build_cli(args=argv, run=False)
    tic = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    fit_s = time.perf_counter() - tic
    (metrics,) = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)
    print("RESULT " + json.dumps({"test_acc": float(metrics["test_acc"]), "fit_s": fit_s}))


def train(method: str, seed: int, args: argparse.Namespace, workdir: str) -> dict:
    recipe = METHODS[method][0]
    path = os.path.join(workdir, f"{method}-s{seed}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(override(method, seed, args, workdir), f)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--config",
        os.path.join(ROOT, "recipes", recipe),
        "--config",
        path,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tic = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - tic
    if proc.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed:\n{proc.stderr[-4000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    (metrics_file,) = glob.glob(
        os.path.join(workdir, f"{method}-s{seed}", "version_*", "metrics.csv")
    )
    with open(metrics_file) as f:
        rows = list(csv.DictReader(f))
    result.update(
        method=method,
        seed=seed,
        wall_s=wall,
        val_acc=column(rows, "val_acc"),
        train_loss=column(rows, "train_loss"),
    )
    return result


def train_mlp(args: argparse.Namespace, workdir: str) -> dict:
    """The graph-agnostic baseline of ``recipes/mlp.yaml`` (full batch, 100 epochs)."""
    rows, wall = harness_fit(
        "mlp",
        "mlp.yaml",
        {
            "data": {
                "init_args": {"dataset": {"init_args": dataset_args(args)}, "partitioner": "random"}
            },
            "trainer": {"callbacks": []},
        },
        workdir,
        epochs=args.mlp_epochs,
        num_nodes=args.num_nodes,
        single=True,
    )
    val, test = column(rows, "val_acc"), column(rows, "test_acc")
    best = int(np.argmax(val))
    return {"test_acc": test[-1], "test_acc_at_best_val": test[best], "wall_s": wall}


# ------------------------------------------------------------------- store statistics
def store_stats(method: str, seed: int, args: argparse.Namespace, workdir: str, data: Any) -> dict:
    """Build (or reuse) the store of ``method`` and measure its macro-batches."""
    from lightgraph.data import SyntheticGraph
    from lightgraph.data.lightning.partition_store_data_module import PartitionStoreDataModule
    from lightgraph.data.loader.macro_batch import macro_batch_schedule

    _, partitioner, hubs = METHODS[method]
    module = PartitionStoreDataModule(
        SyntheticGraph(**dataset_args(args)),
        num_parts=NUM_PARTS,
        partitioner=partitioner,
        hub_fraction=hubs,
        cache_dir=os.path.join(workdir, "cache"),
        seed=seed,
    )
    tic = time.perf_counter()
    module.prepare_data()
    module.setup("fit")
    build_s = time.perf_counter() - tic
    store = module.store
    assert store is not None
    n = store.num_nodes

    # node -> partition, in original ids, from the store's layout only.
    node_ids = store.node_ids.numpy().astype(np.int64)
    part_ptr = store.part_ptr.numpy()
    part = np.empty(n, dtype=np.int64)
    part[node_ids] = np.repeat(np.arange(NUM_PARTS), np.diff(part_ptr))
    is_hub = np.zeros(n, dtype=bool)
    is_hub[store.hubs.numpy()] = True
    src, dst = data.edge_index[0].numpy(), data.edge_index[1].numpy()
    train = data.train_mask.numpy()
    y = data.y.numpy()
    num_classes = int(y.max()) + 1
    global_dist = np.bincount(y[train], minlength=num_classes) / train.sum()
    # Partition of every node, hubs marked -1 (always in the macro-batch).
    part_h = np.where(is_hub, -1, part)

    rows = []
    checked = 0
    for epoch in range(args.epochs):
        for parts in macro_batch_schedule(NUM_PARTS, PARTS_PER_BATCH, seed, epoch):
            sel = np.zeros(NUM_PARTS + 1, dtype=bool)
            sel[parts] = True
            sel[-1] = True  # index -1: hubs
            inside = sel[part_h]
            incident = inside[dst]  # in-edges of the macro-batch's nodes
            kept = incident & inside[src]
            targets = inside & train & ~is_hub
            t_in = targets[dst]
            t_dist = np.bincount(y[targets], minlength=num_classes) / max(targets.sum(), 1)
            rows.append(
                {
                    "nodes": int(inside.sum()),
                    "retention": kept.sum() / max(incident.sum(), 1),
                    "target_retention": (t_in & inside[src]).sum() / max(t_in.sum(), 1),
                    "avg_degree": kept.sum() / max(inside.sum(), 1),
                    "label_tv": 0.5 * float(np.abs(t_dist - global_dist).sum()),
                }
            )
            if checked < 2:  # cross-check the count against the store's own read
                mb = store.read_macro_batch(parts)
                if mb.edge_index.size(1) != int(kept.sum()):
                    raise AssertionError(
                        f"{method}: store macro-batch {parts} has {mb.edge_index.size(1)} edges, "
                        f"the induced subgraph {int(kept.sum())}"
                    )
                checked += 1
    # Partition-level statistics (no macro-batching): edge cut and label skew.
    cut = float((part[src] != part[dst]).mean())
    part_tv = []
    for p in range(NUM_PARTS):
        m = (part == p) & train & ~is_hub
        dist = np.bincount(y[m], minlength=num_classes) / max(m.sum(), 1)
        part_tv.append(0.5 * float(np.abs(dist - global_dist).sum()))
    meta = store.meta.get("build_seconds", {}) if hasattr(store, "meta") else {}
    return {
        "build_s": build_s,
        "partition_s": meta.get("partition"),
        "nodes_per_macro_batch": statistics.mean(r["nodes"] for r in rows) / n,
        "retention": statistics.mean(r["retention"] for r in rows),
        "target_retention": statistics.mean(r["target_retention"] for r in rows),
        "avg_degree_in_macro_batch": statistics.mean(r["avg_degree"] for r in rows),
        "macro_batch_label_tv": statistics.mean(r["label_tv"] for r in rows),
        "edge_cut": cut,
        "partition_label_tv": statistics.mean(part_tv),
        "num_hubs": int(is_hub.sum()),
    }


# ----------------------------------------------------------------------------- main
def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=100_000)
    parser.add_argument("--avg-degree", type=float, default=7.0)
    parser.add_argument("--homophily", type=float, default=0.5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--val-every", type=int, default=1)
    parser.add_argument("--mlp-epochs", type=int, default=100, help="0: no MLP baseline")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--workdir", default=None, help="keep logs/stores here (default: tmp)")
    parser.add_argument(
        "--out", default=os.path.join(ROOT, "benchmarks", "results", "hanoi_accuracy.json")
    )
    parser.add_argument("--dry-run", action="store_true", help="tiny graph, 1 epoch, 1 seed")
    args = parser.parse_args()
    if args.dry_run:
        args.num_nodes, args.epochs, args.seeds, args.mlp_epochs = 5000, 1, [0], 5
        args.out = os.path.join(tempfile.gettempdir(), "hanoi_accuracy_dry_run.json")

    from lightgraph.data import SyntheticGraph

    start = time.perf_counter()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_hanoi_acc_")
    os.makedirs(workdir, exist_ok=True)
    data = SyntheticGraph(**dataset_args(args)).load()
    print(
        f"graph: {args.num_nodes} nodes, {data.edge_index.size(1)} directed edges "
        f"(avg degree {data.edge_index.size(1) / args.num_nodes:.2f}), homophily "
        f"{args.homophily}; GraphSAGE 3x{args.hidden}, {args.epochs} epochs, seeds {args.seeds}; "
        f"workdir {workdir}",
        flush=True,
    )

    mlp = train_mlp(args, workdir) if args.mlp_epochs > 0 else None
    if mlp is not None:
        print(f"mlp: test_acc {mlp['test_acc']:.4f} ({mlp['wall_s']:.0f} s)", flush=True)

    stats: dict[str, list[dict]] = {}
    runs: dict[str, list[dict]] = {}
    for seed in args.seeds:
        for method in args.methods:
            if METHODS[method][1] is not None:
                s = store_stats(method, seed, args, workdir, data)
                stats.setdefault(method, []).append(s)
                print(
                    f"{method} seed {seed}: store {s['build_s']:.1f} s, retention "
                    f"{s['retention']:.3f}, avg degree {s['avg_degree_in_macro_batch']:.2f}",
                    flush=True,
                )
            r = train(method, seed, args, workdir)
            runs.setdefault(method, []).append(r)
            print(
                f"{method} seed {seed}: test_acc {r['test_acc']:.4f} "
                f"(fit {r['fit_s']:.0f} s, wall {r['wall_s']:.0f} s, "
                f"elapsed {time.perf_counter() - start:.0f} s)",
                flush=True,
            )

    ref = mean_std([r["test_acc"] for r in runs["ns-mem"]])[0] if "ns-mem" in runs else None
    table = []
    for method in args.methods:
        accs = [r["test_acc"] for r in runs[method]]
        mean, std = mean_std(accs)
        row: dict[str, Any] = {
            "method": method,
            "label": LABELS[method],
            "test_acc_mean": mean,
            "test_acc_std": std,
            "test_acc": accs,
            "drop_vs_ns_mem_pts": None if ref is None else 100 * (mean - ref),
            "epoch_fit_s": statistics.mean(r["fit_s"] for r in runs[method]) / args.epochs,
        }
        if method in stats:
            for key in stats[method][0]:
                vals = [s[key] for s in stats[method] if s[key] is not None]
                row[key] = statistics.mean(vals) if vals else None
        else:
            row.update(
                retention=1.0,
                target_retention=1.0,
                avg_degree_in_macro_batch=data.edge_index.size(1) / args.num_nodes,
                nodes_per_macro_batch=1.0,
            )
        table.append(row)

    print()
    mlp_acc = "-" if mlp is None else f"{100 * mlp['test_acc']:.2f} %"
    print(
        f"MLP (features only): test acc {mlp_acc}   "
        f"[{args.num_nodes} nodes, avg degree {args.avg_degree}, homophily {args.homophily}, "
        f"GraphSAGE 3x{args.hidden}, {args.epochs} epochs, {len(args.seeds)} seed(s)]"
    )
    header = (
        f"{'method':<38} {'test acc %':>14} {'vs NS-Mem':>9} {'retain':>7} {'tgt ret':>7} "
        f"{'deg in MB':>9} {'edge cut':>8} {'label TV':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in table:
        drop = row["drop_vs_ns_mem_pts"]
        cut = row.get("edge_cut")
        tv = row.get("macro_batch_label_tv")
        print(
            f"{row['label']:<38} {100 * row['test_acc_mean']:>7.2f} ± {100 * row['test_acc_std']:<4.2f} "
            f"{'' if drop is None else f'{drop:+.2f}':>9} {row['retention']:>7.3f} "
            f"{row['target_retention']:>7.3f} {row['avg_degree_in_macro_batch']:>9.2f} "
            f"{'-' if cut is None else f'{cut:.3f}':>8} {'-' if tv is None else f'{tv:.3f}':>8}"
        )

    result = {
        "config": {
            "graph": {**dataset_args(args), "num_edges_directed": int(data.edge_index.size(1))},
            "model": f"GraphSAGE, 3 layers, hidden {args.hidden}, dropout 0.5",
            "fanouts": [15, 10, 5],
            "batch_size": 1000,
            "lr": 1e-3,
            "epochs": args.epochs,
            "seeds": args.seeds,
            "num_parts": NUM_PARTS,
            "parts_per_batch": PARTS_PER_BATCH,
            "buffer_ratio": PARTS_PER_BATCH / NUM_PARTS,
            "hub_fraction": HUB_FRACTION,
            "reuse": 1,
            "eval_mode": "layerwise",
        },
        "mlp": mlp,
        "table": table,
        "runs": runs,
        "store_stats": stats,
        "total_wall_s": time.perf_counter() - start,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nwrote {args.out} ({result['total_wall_s']:.0f} s)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
    else:
        main()
