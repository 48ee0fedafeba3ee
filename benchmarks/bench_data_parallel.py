"""Data-parallel sampled training: NS, HANOI, JOESTAR-I and JOESTAR-II on 1 vs 2 ranks.

Every system trains the same 3-layer GraphSAGE (hidden 128, fanouts 15/10/5, dropout 0.5,
lr 3e-3) from its recipe on one synthetic graph, with the same *global* batch (1000
targets per optimizer step) in three layouts:

* ``1x1``: one process, one intra-op thread, batch 1000;
* ``2x1``: two processes under Lightning's ``ddp`` strategy (gloo on the CPU), one thread
  each, batch 500 per rank -- every rank trains its own half of the epoch's targets
  (macro-batches, partition groups) and DDP averages the gradients;
* ``1x2``: one process with two intra-op threads, batch 1000 (the same two cores used by
  one process instead).

Reported per layout: the training epoch time (sampling, transfer, model; no evaluation;
the mean of the epochs after the first), the epoch throughput relative to ``1x1``, the
cores rank 0's process keeps busy (its CPU seconds per wall second, background sampling
and reading threads included), for JOESTAR-II the seconds rank 0 spent in the history
all-gathers, and the test accuracy after the last epoch (exact layer-wise inference over
the whole graph, split over the ranks, after training). The layouts run one after another, ``--repeats`` times in turn
(1x1, 2x1, 1x2, 1x1, ...), so slow phases of a shared machine hit every layout.

Goal: ``2x1`` at least 1.6x the epoch throughput of ``1x1`` (equal threads per rank), test
accuracy within 0.3 points.

Run::

    python benchmarks/bench_data_parallel.py                      # all four systems
    python benchmarks/bench_data_parallel.py --systems ns --repeats 1
    python benchmarks/bench_data_parallel.py --dry-run            # tiny graph, 2 epochs
    python benchmarks/bench_data_parallel.py --systems hanoi hanoi_targets --layouts 1x1 2x1

``hanoi`` splits every macro-batch's partitions among the ranks (``rank_share=
"partitions"``, the default); ``hanoi_targets`` has every rank read the whole macro-batch
and train its slice of each global batch (``rank_share="targets"``). ``--override
KEY=VALUE`` adds a CLI override to every run (e.g. ``data.init_args.parts_per_batch=4``).

On GPUs (one process per GPU, NCCL): ``--accelerator gpu`` compares one GPU (``1x1``) with two (``2x1``)::

    python benchmarks/bench_data_parallel.py --accelerator gpu --layouts 1x1 2x1 \\
        --num-nodes 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Adaptive reuse lets each rank decide its own number of passes, which DDP cannot allow
# (unequal step counts hang): data-parallel HANOI uses a fixed reuse factor.
HANOI_FIXED_REUSE = ["--data.init_args.adaptive_reuse=false", "--data.init_args.reuse=1"]

#: system -> (recipe, extra CLI overrides)
SYSTEMS: dict[str, tuple[str, list[str]]] = {
    "ns": ("ns.yaml", []),
    "hanoi": ("hanoi.yaml", HANOI_FIXED_REUSE),
    # Every rank reads the whole macro-batch and trains a slice of each global batch.
    "hanoi_targets": ("hanoi.yaml", [*HANOI_FIXED_REUSE, "--data.init_args.rank_share=targets"]),
    "joestar_i": ("joestar.yaml", ["--data.init_args.first_stage.init_args.num_sampler_threads=1"]),
    "joestar_ii": ("joestar_pbs.yaml", []),
    # The history replicas meet once per epoch (an exact refresh) instead of every step.
    "joestar_ii_epoch": ("joestar_pbs.yaml", ["--model.init_args.history_sync=epoch"]),
}
LAYOUTS = {"1x1": (1, 1), "2x1": (2, 1), "1x2": (1, 2)}  # name -> (ranks, threads per rank)


def worker_args(args: argparse.Namespace, system: str, ranks: int) -> list[str]:
    recipe, extra = SYSTEMS[system]
    out = [
        "--config",
        os.path.join(ROOT, "recipes", recipe),
        f"--data.init_args.dataset.init_args.num_nodes={args.num_nodes}",
        f"--data.init_args.dataset.init_args.avg_degree={args.avg_degree}",
        f"--data.init_args.dataset.init_args.train_ratio={args.train_ratio}",
        f"--data.init_args.cache_dir={args.cache}",
        f"--data.init_args.batch_size={args.global_batch // ranks}",
        f"--trainer.max_epochs={args.epochs}",
        f"--trainer.devices={ranks}",
        f"--trainer.accelerator={args.accelerator}",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.limit_val_batches=0",
        f"--trainer.default_root_dir={args.workdir}",
        f"--seed_everything={args.seed}",
        f"--data.init_args.seed={args.seed}",
        *extra,
        *(f"--{o}" for o in args.override),
    ]
    if ranks > 1 and not any(o.startswith("trainer.strategy") for o in args.override):
        out.append("--trainer.strategy=ddp")
    return out


def run_one(args: argparse.Namespace) -> None:
    """One fit (this process is rank 0; Lightning's launcher starts the others)."""
    import lightning.pytorch as pl
    import torch
    from torchmetrics.functional import accuracy

    from lightgraph.cli import build_cli

    torch.set_num_threads(args.threads)
    cli = build_cli(worker_args(args, args.system, args.ranks), run=False)
    trainer, module, dm = cli.trainer, cli.model, cli.datamodule

    class Measure(pl.Callback):
        def __init__(self) -> None:
            self.epoch_s: list[float] = []
            self.cpu_s: list[float] = []
            self.steps: list[int] = []

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self._tic = time.perf_counter()
            self._cpu = time.process_time()  # this process, all of its threads
            self._step0 = trainer.global_step

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            self.epoch_s.append(time.perf_counter() - self._tic)
            self.cpu_s.append(time.process_time() - self._cpu)
            self.steps.append(trainer.global_step - self._step0)

    measure = Measure()
    trainer.callbacks.insert(0, measure)
    trainer.fit(module, dm)
    # Every rank takes part: layer-wise inference splits the rows over the ranks.
    module.eval()
    with torch.no_grad():
        graph = dm.full_graph()
        logits = module._full_graph_logits(graph)
    if trainer.global_rank != 0:
        return
    nodes = graph.nodes("test")
    test = float(
        accuracy(logits[nodes], graph.y[nodes], task="multiclass", num_classes=dm.num_classes)
    )
    later = measure.epoch_s[1:] or measure.epoch_s
    cpu = measure.cpu_s[1:] or measure.cpu_s
    result = {
        "epoch_s": statistics.mean(later),
        "epoch_s_all": measure.epoch_s,
        # CPU seconds per wall second of rank 0's process over the same epochs: how many
        # cores it keeps busy (its background sampler or reader threads included)
        "cores_busy_rank0": sum(cpu) / sum(later),
        "steps_per_epoch": measure.steps,
        "test_acc": test,
        "ranks": args.ranks,
        "threads": torch.get_num_threads(),
    }
    history = getattr(module, "history", None)
    if history is not None:  # JOESTAR-II: the history all-gathers of rank 0, whole run
        result["history_gather_s"] = float(history.stats["gather_seconds"])
        result["history_gathered_bytes"] = float(history.stats["bytes_gathered"])
        # history_sync="epoch": the refreshes at the epochs' ends, after the epoch timer
        # stopped (a validation every epoch would do them anyway), whole run
        result["history_refresh_s"] = float(history.stats["refresh_seconds"])
    with open(args.result, "w") as f:
        json.dump(result, f)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=200_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--train-ratio", type=float, default=0.05)
    p.add_argument("--global-batch", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed_everything and the data module's seed (the graph stays the same)",
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra CLI override for every run, e.g. data.init_args.parts_per_batch=4 "
        "(repeatable)",
    )
    p.add_argument("--systems", nargs="*", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--cache", default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument(
        "--out",
        default=os.path.join(ROOT, "benchmarks", "results", "data_parallel.json"),
    )
    p.add_argument("--dry-run", action="store_true", help="tiny graph, 2 epochs, 1 repeat")
    p.add_argument("--run-one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--system", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dry_run:
        args.num_nodes, args.epochs, args.repeats = 6000, 2, 1
        args.train_ratio = max(args.train_ratio, 0.2)
        args.global_batch = 200
        if args.out.endswith("data_parallel.json"):
            args.out = os.path.join(tempfile.gettempdir(), "data_parallel_dry.json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.run_one:
        run_one(args)
        return
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_dp_")
    args.cache = args.cache or os.path.join(args.workdir, "cache")
    report: dict[str, Any] = {
        "config": {
            k: getattr(args, k)
            for k in (
                "num_nodes",
                "avg_degree",
                "train_ratio",
                "global_batch",
                "epochs",
                "repeats",
                "seed",
                "override",
            )
        },
        "machine": f"{os.cpu_count()} CPU cores, torch {args.accelerator}",
        "runs": {},
    }
    for system in args.systems:
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in args.layouts}
        for rep in range(args.repeats):
            for name in args.layouts:
                ranks, threads = LAYOUTS[name]
                path = os.path.join(args.workdir, f"{system}_{name}_{rep}.json")
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--run-one",
                    "--system",
                    system,
                    "--ranks",
                    str(ranks),
                    "--threads",
                    str(threads),
                    "--result",
                    path,
                    "--workdir",
                    os.path.join(args.workdir, f"{system}_{name}_{rep}"),
                    "--cache",
                    args.cache,
                    "--num-nodes",
                    str(args.num_nodes),
                    "--avg-degree",
                    str(args.avg_degree),
                    "--train-ratio",
                    str(args.train_ratio),
                    "--global-batch",
                    str(args.global_batch),
                    "--seed",
                    str(args.seed),
                    "--epochs",
                    str(args.epochs),
                    "--accelerator",
                    args.accelerator,
                    *(f"--override={o}" for o in args.override),
                ]
                env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
                tic = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
                if proc.returncode != 0:
                    print(f"{system} {name}: FAILED\n{proc.stderr[-3000:]}", flush=True)
                    rows[name].append({"error": proc.stderr[-3000:]})
                    continue
                with open(path) as f:
                    result = json.load(f)
                result["wall_s"] = time.perf_counter() - tic
                rows[name].append(result)
                print(
                    f"{system:10s} {name}  rep {rep}  {result['epoch_s']:7.2f} s/epoch  "
                    f"cores {result['cores_busy_rank0']:.2f}  "
                    f"steps {result['steps_per_epoch']}  test {100 * result['test_acc']:.2f}"
                    + (
                        f"  history gather {result['history_gather_s']:.2f} s"
                        f"  refresh {result.get('history_refresh_s', 0.0):.2f} s"
                        if "history_gather_s" in result
                        else ""
                    ),
                    flush=True,
                )
        summary: dict[str, Any] = {}
        for name, runs in rows.items():
            ok = [r for r in runs if "error" not in r]
            if not ok:
                summary[name] = {"error": runs[-1]["error"] if runs else "not run"}
                continue
            summary[name] = {
                "epoch_s": statistics.median(r["epoch_s"] for r in ok),
                "cores_busy_rank0": statistics.median(r["cores_busy_rank0"] for r in ok),
                "test_acc": statistics.mean(r["test_acc"] for r in ok),
                "steps_per_epoch": ok[0]["steps_per_epoch"],
                "runs": ok,
            }
            if "history_refresh_s" in ok[0]:  # per training epoch, outside epoch_s
                summary[name]["history_refresh_s_per_epoch"] = statistics.median(
                    r["history_refresh_s"] / len(r["epoch_s_all"]) for r in ok
                )
        base = summary.get("1x1", {})
        for row in summary.values():
            if "epoch_s" in row and "epoch_s" in base:
                row["throughput_vs_1x1"] = base["epoch_s"] / row["epoch_s"]
                row["test_acc_delta_points"] = 100 * (row["test_acc"] - base["test_acc"])
        report["runs"][system] = summary
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    print("\nsystem      layout  s/epoch  throughput  test acc  delta", flush=True)
    for system, summary in report["runs"].items():
        for name, row in summary.items():
            if "epoch_s" not in row:
                print(f"{system:10s}  {name}   failed")
                continue
            print(
                f"{system:10s}  {name}   {row['epoch_s']:7.2f}  "
                f"{row.get('throughput_vs_1x1', float('nan')):9.2f}x  "
                f"{100 * row['test_acc']:7.2f}  {row.get('test_acc_delta_points', 0):+.2f}"
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
