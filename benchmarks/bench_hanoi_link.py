"""HANOI's link prediction under a real memory budget: the store 8x (or more) the limit.

One command builds a :class:`bench_hanoi.WideSyntheticGraph` (the out-of-core benchmark's
graph: SyntheticGraph's structure, wide float32 features generated chunk by chunk), prepares
the link-prediction store of ``recipes/link_hanoi.yaml`` from it **outside** any cgroup
(``lightgraph prepare``: the split is made in memory and saved with the store of the training
graph), then trains ``recipes/link_hanoi.yaml`` **inside** a cgroup-v1 memory limit of
``--budget-gb`` (page cache included) with reads from the store's disk throttled to
``--throttle-mbps``, the page cache dropped before each run -- once per edge schedule:

* ``disjoint`` -- each partition read once per epoch: one full epoch;
* ``pairs`` -- every training edge once per epoch, the store read ``2 P / b - 1`` times
  (``P`` partitions, ``b`` per macro-batch): its first ``--pairs-batches`` mini-batches
  only (a full epoch would read the store 255 times at the defaults: 512 partitions, 4 per
  macro-batch), so its memory and read-efficiency figures are measured over those.

Per run it reports the cgroup's peak usage and fail count, the peak RSS, the bytes the
store's reads asked for, the bytes the device delivered to the worker (``/proc/self/io``)
and their ratio (goal: at most 1.1), the edges trained and the epoch time. The trained
weights (and the untrained ones) are then tested by one more worker outside the cgroups:
MRR and Hits@K of the test edges against ``eval_negatives`` uniform negatives each, over
the training and validation graph (the module's own ``test``).

Needs root (cgroups, drop_caches). Run (~25 min from scratch on 2 CPU cores; the store and
the graph's structure are reused by later runs)::

    python benchmarks/bench_hanoi_link.py
    python benchmarks/bench_hanoi_link.py --dry-run     # tiny graph: checks the pipeline
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from bench_hanoi import GB, _env, device_of, fmt_bytes, log, run_method, summarise  # noqa: E402

SCHEDULES = ("disjoint", "pairs")


def override(args: argparse.Namespace, schedule: str | None) -> dict[str, Any]:
    """The overrides of ``recipes/link_hanoi.yaml`` (``schedule=None``: prepare / test)."""
    dataset = {
        "class_path": "bench_hanoi.WideSyntheticGraph",
        "init_args": {
            "num_nodes": args.num_nodes,
            "avg_degree": args.avg_degree,
            "num_classes": args.num_classes,
            "num_features": args.num_features,
            "num_communities": max(args.num_classes, args.num_nodes // args.community_size),
            "homophily": args.homophily,
            "feature_noise": args.feature_noise,
            "seed": 0,
            "structure_dir": os.path.join(args.workdir, "structure"),
        },
    }
    data = {
        "dataset": dataset,
        "cache_dir": os.path.join(args.workdir, "stores"),
        "num_parts": args.num_parts,
        "parts_per_batch": args.parts_per_batch,
        "hub_fraction": args.hub_fraction,
        "fanouts": list(args.fanouts),
        "batch_size": args.batch_size,
        "val_ratio": args.val_ratio,
        "test_ratio": args.test_ratio,
        "eval_negatives": args.eval_negatives,
        "edge_schedule": schedule or "pairs",
        "seed": 0,
    }
    trainer: dict[str, Any] = {
        "max_epochs": 1,
        "enable_checkpointing": False,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {
                "save_dir": os.path.join(args.workdir, "logs"),
                "name": schedule or "test",
            },
        },
    }
    if schedule == "pairs" and args.pairs_batches > 0:
        trainer["limit_train_batches"] = args.pairs_batches
    return {
        "seed_everything": 0,
        "trainer": trainer,
        "model": {"init_args": {"model": {"init_args": {"hidden_channels": args.hidden}}}},
        "data": {"init_args": data},
    }


def config_args(args: argparse.Namespace, schedule: str | None) -> list[str]:
    import yaml

    name = schedule or "prepare"
    path = os.path.join(args.workdir, "configs", f"link_{name}.yaml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(override(args, schedule), f)
    return ["--config", os.path.join(ROOT, "recipes", "link_hanoi.yaml"), "--config", path]


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """``lightgraph prepare`` of the link store, outside any cgroup (reused when complete)."""
    cmd = [sys.executable, "-m", "lightgraph", "prepare", *config_args(args, None)]
    tic = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=args.workdir, env=_env(), capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - tic
    if proc.returncode != 0:
        raise RuntimeError(f"prepare failed:\n{proc.stderr[-4000:]}")
    path = [x for x in proc.stdout.splitlines() if "prepared " in x][-1].split("prepared ", 1)[1]
    path = path.strip()
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    files = {}
    for name in os.listdir(path):
        with contextlib.suppress(OSError):
            files[name] = os.path.getsize(os.path.join(path, name))
    split_bytes = files.get("link_split.pt", 0)
    return {
        "path": path,
        "bytes": sum(files.values()) - split_bytes,  # what training reads from
        "split_file_bytes": split_bytes,
        "files": files,
        "prepare_seconds": seconds,
        "build_seconds": meta.get("build_seconds"),
        "num_nodes": meta.get("num_nodes"),
        "num_edges": meta.get("num_edges"),
        "num_parts": meta.get("num_parts"),
        "num_hubs": meta.get("num_hubs"),
        "link_split": meta.get("link_split"),
    }


def worker_eval(argv: list[str], weights: dict[str, str]) -> None:
    """Test the untrained weights and every run's with the module's own test."""
    from lightgraph.cli import build_cli

    cli = build_cli(args=argv, run=False)
    module, model = cli.datamodule, cli.model
    module.prepare_data()
    module.setup("test")
    out: dict[str, Any] = {}
    for name, path in {"untrained": None, **weights}.items():
        if path is not None:
            model.model.load_state_dict(torch.load(path))
        tic = time.perf_counter()
        (metrics,) = cli.trainer.test(model, datamodule=module, verbose=False)
        out[name] = {k: float(v) for k, v in metrics.items()}
        out[name]["seconds"] = time.perf_counter() - tic
        print(f"eval {name}: {out[name]}", flush=True)
    print("RESULT " + json.dumps(out), flush=True)


def evaluate(args: argparse.Namespace, weights: dict[str, str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "eval",
        "--weights",
        json.dumps(weights),
        "--",
        *config_args(args, None),
    ]
    proc = subprocess.run(
        cmd, cwd=args.workdir, env=_env(), capture_output=True, text=True,
        timeout=args.run_timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"evaluation failed:\n{proc.stderr[-4000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workdir", default="/tmp/bench_hanoi_link")
    p.add_argument("--out", default=os.path.join(HERE, "results", "hanoi_link.json"))
    p.add_argument("--num-nodes", type=int, default=9_600_000)
    p.add_argument("--num-features", type=int, default=256)
    p.add_argument("--avg-degree", type=float, default=3.0)
    p.add_argument("--homophily", type=float, default=0.8)
    p.add_argument("--community-size", type=int, default=2000)
    p.add_argument("--num-classes", type=int, default=8)
    p.add_argument("--feature-noise", type=float, default=0.7)
    p.add_argument("--num-parts", type=int, default=512)
    p.add_argument("--parts-per-batch", type=int, default=4)
    p.add_argument("--hub-fraction", type=float, default=0.001)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--val-ratio", type=float, default=0.005)
    p.add_argument("--test-ratio", type=float, default=0.01)
    p.add_argument("--eval-negatives", type=int, default=100)
    p.add_argument("--budget-gb", type=float, default=1.25)
    p.add_argument("--throttle-mbps", type=float, default=500.0)
    p.add_argument(
        "--pairs-batches", type=int, default=1024, help="mini-batches of the pairs run (0: all)"
    )
    p.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=SCHEDULES)
    p.add_argument("--run-timeout", type=float, default=1800.0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--worker", choices=("eval",), help=argparse.SUPPRESS)
    p.add_argument("--weights", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    args.rest = [a for a in rest if a != "--"]
    if args.dry_run:
        args.num_nodes, args.num_features = min(args.num_nodes, 200_000), 32
        args.num_parts, args.parts_per_batch, args.pairs_batches = 64, 8, 8
        args.budget_gb = min(args.budget_gb, 1.0)
        args.workdir = args.workdir.rstrip("/") + "_dry"
        args.out = os.path.join(HERE, "results", "hanoi_link_dry.json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.worker == "eval":
        worker_eval(args.rest, json.loads(args.weights))
        return
    if os.geteuid() != 0:
        raise SystemExit("bench_hanoi_link.py needs root (cgroups, drop_caches).")
    start = time.perf_counter()
    os.makedirs(args.workdir, exist_ok=True)
    args.workdir = os.path.abspath(args.workdir)
    device = device_of(args.workdir)
    log(f"workdir {args.workdir} on device {device}; preparing the link store")
    store = prepare(args)
    budget = int(args.budget_gb * GB)
    ratio = store["bytes"] / budget
    log(
        f"store {fmt_bytes(store['bytes'])} = {ratio:.1f}x the budget ({store['prepare_seconds']:.0f} s)"
    )
    runs: dict[str, Any] = {}
    for schedule in args.schedules:
        log(f"run {schedule} ...")
        argv_fit = config_args(args, schedule)
        runs[schedule] = run_method(
            f"link_{schedule}", args, device, args.run_timeout, argv=argv_fit, in_memory=False
        )
        r = runs[schedule]
        if r.get("failed"):
            log(
                f"  FAILED (rc {r['returncode']}, oom {r['oom_killed']}): {r['stderr_tail'][-600:]}"
            )
        else:
            log(
                f"  epoch {[round(e['seconds'], 1) for e in r['epochs']]} s, wall {r['wall_seconds']:.0f} s"
            )
    weights = {s: r["weights"] for s, r in runs.items() if not r.get("failed")}
    log(f"testing {sorted(weights)} and the untrained weights ...")
    metrics = evaluate(args, weights)
    rows = {}
    for schedule, r in runs.items():
        row = summarise(r, args)
        if not r.get("failed"):
            row["cgroup_max_usage_over_budget"] = row["cgroup_max_usage_bytes"] / budget
            row["read_seconds_at_throttle"] = row["bytes_read_per_epoch"] / (
                args.throttle_mbps * 1e6
            )
        row["test"] = metrics.get(schedule)
        rows[schedule] = row
    head = (
        f"{'schedule':<9} {'steps':>6} {'edges':>9} {'epoch s':>8} {'store read':>11} "
        f"{'device read':>12} {'dev/req':>7} {'peak RSS':>9} {'cg max':>9} {'fails':>6} {'test MRR':>8}"
    )
    print(head)
    for schedule, row in rows.items():
        if row.get("failed"):
            print(f"{schedule:<9} FAILED")
            continue
        mrr = (row["test"] or {}).get("test_mrr", float("nan"))
        print(
            f"{schedule:<9} {row['steps_per_epoch']:>6.0f} {row['targets_per_epoch']:>9.0f} "
            f"{row['epoch_seconds']:>8.1f} {fmt_bytes(row['bytes_read_per_epoch']):>11} "
            f"{fmt_bytes(row['device_read_bytes_per_epoch']):>12} "
            f"{row['device_over_requested']:>7.3f} {fmt_bytes(row['peak_rss_bytes']):>9} "
            f"{fmt_bytes(row['cgroup_max_usage_bytes']):>9} {row['cgroup_failcnt']:>6} {mrr:>8.4f}"
        )
    untrained = metrics.get("untrained", {}).get("test_mrr", float("nan"))
    print(f"untrained test MRR {untrained:.4f}")
    ok = [r for r in rows.values() if not r.get("failed")]
    goals = {
        "store_over_budget": ratio,
        "store_ge_8x_budget": ratio >= 8,
        "all_runs_inside_the_limit": len(ok) == len(rows),
        "device_read_le_1.1x_requested": all(r["device_over_requested"] <= 1.1 for r in ok),
    }
    print("goals:", json.dumps(goals, indent=1))
    total = time.perf_counter() - start
    result = {
        "command": "python benchmarks/bench_hanoi_link.py " + " ".join(sys.argv[1:]),
        "setup": {k: v for k, v in vars(args).items() if k not in ("worker", "weights", "rest")},
        "machine": {"cpus": os.cpu_count(), "gpu": torch.cuda.is_available()},
        "store": store,
        "rows": rows,
        "test": metrics,
        "goals": goals,
        "raw": runs,
        "total_seconds": total,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    log(f"wrote {args.out} after {total / 60:.1f} min")


if __name__ == "__main__":
    main()
