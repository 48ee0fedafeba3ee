"""Preparation under a memory budget at papers100M scale: a graph several times larger
than a memory cgroup, prepared (``lightgraph prepare``: validate, GAP, hubs, the HANOI
store) and trained for one HANOI epoch inside the cgroup, next to the physical floor of
a two-pass build (reading the graph's files twice from disk, cold, in the same cgroup).

Scales (``--scale``):

* ``20m``: 20M nodes, 200M directed edges (int32 ids), 144 float32 features -- 12.7 GB
  of files -- in a 1.5 GiB cgroup;
* ``100m``: 100M nodes, 1B directed edges (int32 ids), 32 float16 features -- 14.8 GB
  -- in a cgroup of an eighth of the files (1.85 GB);
* ``10m``: a tenth of ``100m`` (1.5 GB) in an eighth of its files, for profiling;
* ``dry``: 1M nodes, 10M edges, 16 float16 features in 768 MiB (a few minutes).

Every step runs in a fresh process in a fresh memory cgroup (cgroup v1; the page cache
counts) after ``drop_caches``; the cgroup's max usage and its peak anonymous memory are
reported, as are the stage lines of the store's ``meta.json`` (time, peak anonymous
memory each stage added) and the disk the preparation used at most (free space sampled
every half second: the work files, the spill files and the store) and in the end (the
store). Run as root::

    python benchmarks/bench_prepare_budget.py --scale 20m
    python benchmarks/bench_prepare_budget.py --scale dry
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_out_of_core_prepare import (  # noqa: E402  (a sibling script)
    GiB,
    data_bytes,
    run_step,
    store_config,
    worker_cmd,
)

SCALES: dict[str, dict[str, Any]] = {
    "20m": {
        "num_nodes": 20_000_000,
        "num_edges": 200_000_000,
        "features": 144,
        "feature_dtype": "float32",
        "memory_bytes": int(1.5 * GiB),
    },
    "100m": {
        "num_nodes": 100_000_000,
        "num_edges": 1_000_000_000,
        "features": 32,
        "feature_dtype": "float16",
        "memory_bytes": None,  # an eighth of the files
    },
    "10m": {
        "num_nodes": 10_000_000,
        "num_edges": 100_000_000,
        "features": 32,
        "feature_dtype": "float16",
        "memory_bytes": None,  # an eighth of the files
    },
    "dry": {
        "num_nodes": 1_000_000,
        "num_edges": 10_000_000,
        "features": 16,
        "feature_dtype": "float16",
        "memory_bytes": 768 << 20,
    },
}


class DiskWatch:
    """The least free space of ``path``'s file system while the block runs (sampled)."""

    def __init__(self, path: str, interval: float = 0.5) -> None:
        self.path = path
        self.interval = interval
        self.start = shutil.disk_usage(path).free
        self.least = self.start
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._done.wait(self.interval):
            self.least = min(self.least, shutil.disk_usage(self.path).free)

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.end = shutil.disk_usage(self.path).free

    def summary(self) -> dict[str, int]:
        return {
            "disk_peak_used_bytes": self.start - self.least,
            "disk_kept_bytes": self.start - self.end,
        }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", choices=sorted(SCALES), default="dry")
    p.add_argument("--workdir", default="/var/tmp/lightgraph_budget")
    p.add_argument("--steps", nargs="*", default=["write", "read2x", "prepare", "train"])
    p.add_argument("--num-parts", type=int, default=1024)
    p.add_argument("--parts-per-batch", type=int, default=2)
    p.add_argument("--hub-fraction", type=float, default=0.01)
    p.add_argument("--train-ratio", type=float, default=0.002)
    p.add_argument(
        "--memory-budget",
        default=None,
        help="prepare's --memory_budget (e.g. 512MB; default: prepare's own default)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the cache of an earlier, interrupted prepare: its finished stages resume",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    scale = SCALES[args.scale]
    # what worker_cmd / store_config read
    args.num_nodes, args.num_edges = scale["num_nodes"], scale["num_edges"]
    args.features, args.feature_dtype = scale["features"], scale["feature_dtype"]
    args.avg_degree = args.num_edges // args.num_nodes
    args.classes, args.community, args.homophily, args.seed = 16, 4096, 0.7, 0
    out_path = args.out or os.path.join(
        ROOT, "benchmarks", "results", f"prepare_budget_{args.scale}.json"
    )
    root = os.path.join(args.workdir, f"graph_{args.scale}")
    cache = os.path.join(args.workdir, f"cache_{args.scale}")
    os.makedirs(args.workdir, exist_ok=True)
    results: dict[str, Any] = {"config": vars(args).copy(), "steps": {}}
    if os.path.exists(out_path):  # steps of an earlier run with the same scale are kept
        with open(out_path) as f:
            earlier = json.load(f)
        results["steps"].update(earlier.get("steps", {}))
        results.update({k: v for k, v in earlier.items() if k not in ("config", "steps")})

    def save() -> None:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    for step in args.steps:
        limit = scale["memory_bytes"]
        if limit is None and os.path.exists(root):
            limit = data_bytes(root) // 8
        if step == "write":
            out = os.path.join(args.workdir, f"{args.scale}_write.json")
            run_step(
                "write", worker_cmd(args, "write", root, root, out), None, results["steps"], out
            )
            results["graph"] = {
                "num_nodes": args.num_nodes,
                "num_edges": args.num_edges,
                "features": f"{args.features} x {args.feature_dtype}",
                "data_bytes": data_bytes(root),
            }
        elif step == "read2x":
            files = " ".join(
                os.path.join(root, f) for f in sorted(os.listdir(root)) if f.endswith(".npy")
            )
            cmd = ["sh", "-c", f"cat {files} > /dev/null && cat {files} > /dev/null"]
            run_step("read2x", cmd, limit, results["steps"])
        elif step == "prepare":
            if not args.resume:
                shutil.rmtree(cache, ignore_errors=True)
            cmd = [sys.executable, "-m", "lightgraph", "prepare", *store_config(args, root, cache)]
            if args.memory_budget is not None:
                cmd += ["--memory_budget", args.memory_budget]
            with DiskWatch(args.workdir) as disk:
                run_step("prepare", cmd, limit, results["steps"])
            results["steps"]["prepare"].update(disk.summary())
            metas = [
                os.path.join(cache, d, "meta.json")
                for d in (os.listdir(cache) if os.path.isdir(cache) else [])
                if os.path.exists(os.path.join(cache, d, "meta.json"))
            ]
            if metas:
                with open(metas[0]) as f:
                    meta = json.load(f)
                results["steps"]["prepare"]["stages"] = meta.get("build_stages")
                results["steps"]["prepare"]["memory_budget"] = meta.get("memory_budget")
                store = os.path.dirname(metas[0])
                results["steps"]["prepare"]["store_bytes"] = sum(
                    os.path.getsize(os.path.join(store, x)) for x in os.listdir(store)
                )
        elif step == "train":
            cmd = [
                sys.executable,
                "-m",
                "lightgraph",
                "fit",
                *store_config(args, root, cache),
                "--trainer.max_epochs=1",
                "--trainer.limit_val_batches=0",
                "--trainer.logger=false",
                "--trainer.enable_checkpointing=false",
                "--trainer.callbacks=[]",
            ]
            run_step("train", cmd, limit, results["steps"])
        else:
            raise SystemExit(f"unknown step {step!r}; expected write, read2x, prepare or train")
        if limit is not None:
            results["memory_limit_bytes"] = limit
        save()
    steps = results["steps"]
    if "prepare" in steps and "read2x" in steps:
        results["prepare_over_read2x"] = steps["prepare"]["seconds"] / steps["read2x"]["seconds"]
        save()
    print(json.dumps({k: v for k, v in results.items() if k != "config"}, indent=1)[:6000])
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
