"""HANOI out-of-core training under a real memory budget (thesis Fig. 4.7, Table 4.1).

One command builds a synthetic graph whose on-disk partition store is at least 8x the
memory budget, then trains the same 3-layer GraphSAGE five ways:

* ``ns_mem`` -- neighbour sampling over the whole graph held in memory
  (``recipes/ns_mem.yaml``): the reference, with no memory limit and no throttle;
* ``ns_ext`` -- the same sampling over the memory-mapped store (``recipes/ns_ext.yaml``):
  the page cache is the only cache;
* ``marius`` -- random partitions, no hubs, no reuse (``recipes/marius_like.yaml``);
* ``hanoi_noreuse`` -- GAP partitions + hubs, double-buffered, reuse 1
  (``recipes/hanoi_noreuse.yaml``);
* ``hanoi`` -- the same with adaptive macro-batch reuse up to 4 (``recipes/hanoi.yaml``).

Every method but ``ns_mem`` runs inside a cgroup-v1 memory cgroup of ``--budget-gb``
(``memory.limit_in_bytes`` counts the page cache too) with reads from the store's disk
throttled to ``--throttle-mbps`` (``blkio.throttle.read_bps_device``); the page cache is
dropped before every run. The script creates the cgroups (as children of its own memory
cgroup) and removes them in ``finally``; it must run as root.

Per epoch the table gives the bytes the store reads asked for (``store read``), the bytes
the device delivered to the worker (``device read``, ``/proc/self/io``: page-cache misses
and the kernel's read-ahead) and their ratio ``dev/req`` (goal: at most 1.1; the store is
read with ``PartitionStore``'s default ``access="random"``, no read-ahead past a slice).

Each store is built once, outside any cgroup, with ``lightgraph prepare`` (``hanoi`` and
``hanoi_noreuse`` share one). Training is the recipes' ``fit`` (``lightgraph.cli``) in a
worker process; the final weights of every method are then evaluated by one more worker,
outside the cgroups, with the *same* evaluation for all: sampled inference (fanouts
``--eval-fanouts``) over the test nodes of the in-memory graph, identical seeds and batches.

The graph is :class:`WideSyntheticGraph`: the structure, labels and splits of
:class:`lightgraph.data.SyntheticGraph` (generated once and cached as a small file),
with features drawn the same way (unit-norm class centroid + Gaussian noise) but
chunk by chunk straight into one float32 array, so the features of a >10 GB store cost
no more than their own size to generate.

Defaults: 12M nodes, 36M edges, 256 features (13.0 GB per store, 8.7x the 1.5 GB
budget), 2 % training nodes (240 mini-batches per epoch), GraphSAGE hidden 64 (not the
thesis's 256: 2 CPU cores), 512 partitions with 8 per macro-batch (1/64 of the store, so
two macro-batches fit the budget next to the ~0.5 GB of the process itself), 0.1 % hubs.
The hub fraction is kept small on purpose: lightgraph picks hubs by a walk that returns
most of its mass to the training nodes, and hubs are never training targets, so the
recipe's 1 % would take every training node of this graph out of HANOI's targets.

Run (about 25 min from scratch on 2 CPU cores -- 9 of them building the three stores,
which later runs reuse -- and ~40 GB of disk under ``--workdir``)::

    python benchmarks/bench_hanoi.py
    # the I/O-bound variant (0.4 % training nodes):
    python benchmarks/bench_hanoi.py --train-ratio 0.004 --out benchmarks/results/hanoi_train0.4pct.json
    python benchmarks/bench_hanoi.py --dry-run        # tiny graph, checks the pipeline
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import lightning.pytorch as pl
import torch
from torch_geometric.data import Data

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from lightgraph.data.datasets.graph_dataset import GraphDataset  # noqa: E402

METHODS = ("ns_mem", "hanoi", "hanoi_noreuse", "marius", "ns_ext")
RECIPES = {
    "ns_mem": "ns_mem.yaml",
    "ns_ext": "ns_ext.yaml",
    "marius": "marius_like.yaml",
    "hanoi_noreuse": "hanoi_noreuse.yaml",
    "hanoi": "hanoi.yaml",
}
LABELS = {
    "ns_mem": "NS-Mem (in memory, no limit)",
    "ns_ext": "NS-Ext (mmap store)",
    "marius": "Marius-like (random parts)",
    "hanoi_noreuse": "HANOI(-r) (no reuse)",
    "hanoi": "HANOI (adaptive reuse)",
}
#: which store each method trains from (hanoi and hanoi_noreuse share the GAP store)
STORE_OF = {
    "ns_mem": "ns",
    "ns_ext": "ns",
    "marius": "marius",
    "hanoi_noreuse": "hanoi",
    "hanoi": "hanoi",
}
STORE_RECIPE = {"ns": "ns_mem", "hanoi": "hanoi", "marius": "marius"}
GB = 1e9


# ============================================================================ the graph
class WideSyntheticGraph(GraphDataset):
    """:class:`~lightgraph.data.SyntheticGraph` with wide features generated cheaply.

    The structure (edges), labels and train/val/test masks are exactly those of
    ``SyntheticGraph(num_features=1, ...)`` with the same arguments, generated once and
    cached in ``structure_dir`` (a few hundred MB). The features follow SyntheticGraph's
    recipe -- the unit-norm centroid of the node's class plus isotropic Gaussian noise of
    standard deviation ``feature_noise`` -- but are drawn in chunks of rows straight into
    one float32 ``[num_nodes, num_features]`` tensor (peak memory: the features plus the
    structure), from generators seeded by ``(seed, chunk)``, so they are deterministic.
    """

    _VERSION = 1
    _CHUNK = 1 << 18

    def __init__(
        self,
        num_nodes: int = 12_000_000,
        avg_degree: float = 3.0,
        num_classes: int = 8,
        num_features: int = 256,
        num_communities: int | None = None,
        homophily: float = 0.8,
        power_law_exponent: float = 3.5,
        feature_noise: float = 0.7,
        train_ratio: float = 0.005,
        val_ratio: float = 0.99,
        seed: int = 0,
        structure_dir: str = "bench_hanoi_structure",
    ) -> None:
        from lightgraph.data import SyntheticGraph

        if not isinstance(num_features, int) or num_features < 1:
            raise ValueError(
                f"WideSyntheticGraph: expected `num_features` >= 1 but got {num_features!r}."
            )
        self._structure = SyntheticGraph(
            num_nodes=num_nodes,
            avg_degree=avg_degree,
            num_classes=num_classes,
            num_features=1,
            num_communities=num_communities,
            homophily=homophily,
            power_law_exponent=power_law_exponent,
            feature_noise=feature_noise,
            train_ratio=train_ratio,
            val_ratio=val_ratio,
            seed=seed,
        )
        self._num_features = num_features
        self.feature_noise = float(feature_noise)
        self.seed = int(seed)
        self.structure_dir = structure_dir

    @property
    def num_features(self) -> int:
        return self._num_features

    @property
    def num_classes(self) -> int:
        return self._structure.num_classes

    def fingerprint(self) -> str:
        return (
            f"WideSyntheticGraph(v{self._VERSION},{self._structure.fingerprint()},"
            f"num_features={self._num_features},feature_noise={self.feature_noise!r})"
        )

    def _structure_file(self) -> str:
        import hashlib

        digest = hashlib.sha1(self._structure.fingerprint().encode()).hexdigest()[:16]
        return os.path.join(self.structure_dir, f"structure-{digest}.pt")

    def structure(self) -> dict[str, torch.Tensor]:
        """Edges (int32), labels and masks of the graph, from the cache file if present."""
        path = self._structure_file()
        if os.path.exists(path):
            return torch.load(path)
        data = self._structure.load()
        parts = {
            "edge_index": data.edge_index.to(torch.int32),
            "y": data.y,
            "train_mask": data.train_mask,
            "val_mask": data.val_mask,
            "test_mask": data.test_mask,
        }
        del data
        os.makedirs(self.structure_dir, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        torch.save(parts, tmp)
        os.replace(tmp, path)
        return parts

    def features(self, y: torch.Tensor) -> torch.Tensor:
        n, f = int(y.numel()), self._num_features
        gen = torch.Generator().manual_seed(self.seed)
        centroids = torch.randn(self.num_classes, f, generator=gen)
        centroids /= centroids.norm(dim=1, keepdim=True).clamp(min=1e-12)
        x = torch.empty(n, f)
        for c, lo in enumerate(range(0, n, self._CHUNK)):
            hi = min(n, lo + self._CHUNK)
            rows = x[lo:hi]
            rows.normal_(generator=torch.Generator().manual_seed(self.seed * 1_000_003 + c + 1))
            rows.mul_(self.feature_noise).add_(centroids[y[lo:hi]])
        return x

    def load(self) -> Data:
        parts = self.structure()
        edge_index = parts.pop("edge_index").long()
        x = self.features(parts["y"])
        return Data(x=x, edge_index=edge_index, num_nodes=int(x.size(0)), **parts)

    def __repr__(self) -> str:
        return f"WideSyntheticGraph({self._structure!r}, num_features={self._num_features})"


# ====================================================================== worker processes
class EpochTimer(pl.Callback):
    """Wall time and optimiser steps of every training epoch."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []
        self._tic = 0.0
        self._steps = 0
        self._first_batch = float("nan")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._steps = 0
        self._first_batch = float("nan")
        self._tic = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._steps += 1
        if self._steps == 1:
            self._first_batch = time.perf_counter() - self._tic

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.epochs.append(
            {
                "seconds": time.perf_counter() - self._tic,
                "steps": float(self._steps),
                "first_batch_seconds": self._first_batch,
            }
        )


def _proc_io() -> dict[str, int]:
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f if ":" in line)}
    except OSError:
        return {}


def worker_fit(argv: list[str], weights: str) -> None:
    """``lightgraph fit`` of a recipe in this process; saves the weights, prints RESULT."""
    from lightgraph.callbacks import IOMonitor
    from lightgraph.cli import build_cli

    tic = time.perf_counter()
    cli = build_cli(args=argv, run=False)
    timer = EpochTimer()
    cli.trainer.callbacks.append(timer)
    built = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    fit_s = time.perf_counter() - built
    torch.save(cli.model.model.state_dict(), weights)
    monitor = next(c for c in cli.trainer.callbacks if isinstance(c, IOMonitor))
    result = {
        "fit_seconds": fit_s,
        "startup_seconds": built - tic,
        "epochs": timer.epochs,
        "io": monitor.history,
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "proc_io": _proc_io(),
        "train_batches_per_epoch": _full_epoch_batches(cli.datamodule),
    }
    print("RESULT " + json.dumps(result), flush=True)


def _full_epoch_batches(module: Any) -> float | None:
    """Mini-batches of one full epoch of the module's training loader (if known)."""
    loader = getattr(module, "_train_loader", None)
    with contextlib.suppress(TypeError, AttributeError):
        num_batches = getattr(loader, "num_batches", None)  # MacroBatchLoader: per epoch
        return float(num_batches(0) if num_batches is not None else len(loader))
    return None


def worker_eval(argv: list[str], weights: dict[str, str]) -> None:
    """Test every method's final weights with one evaluation (sampled, in-memory graph)."""
    from lightgraph.cli import build_cli

    cli = build_cli(args=argv, run=False)
    module, model = cli.datamodule, cli.model
    module.prepare_data()
    module.setup("test")
    # The sampled evaluation reads the store's memory maps: read them once, in order, so
    # every method is evaluated from the page cache (outside any cgroup, no throttle).
    tic = time.perf_counter()
    store = module.store
    for name in (
        "x.npy",
        "y.npy",
        "csc_indptr.npy",
        "csc_indices.npy",
        "masks.npy",
        "node_ids.npy",
    ):
        with open(os.path.join(store.directory, name), "rb") as f:
            while f.read(64 << 20):
                pass
    warm_s = time.perf_counter() - tic
    out: dict[str, Any] = {"warm_seconds": warm_s}
    for method, path in weights.items():
        model.model.load_state_dict(torch.load(path))
        tic = time.perf_counter()
        (metrics,) = cli.trainer.test(model, datamodule=module, verbose=False)
        out[method] = {"test_acc": float(metrics["test_acc"]), "seconds": time.perf_counter() - tic}
        print(f"eval {method}: test_acc {out[method]['test_acc']:.4f}", flush=True)
    print("RESULT " + json.dumps(out), flush=True)


# ========================================================================== the cgroups
def _own_cgroup(controller: str) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    return "/"


class Cgroups:
    """A memory (and optionally blkio) cgroup-v1 pair for one run; removed by :meth:`remove`."""

    BASE = "/sys/fs/cgroup"

    def __init__(
        self,
        name: str,
        memory_limit: int | None,
        read_bps: int | None,
        device: str,
    ) -> None:
        self.paths: list[str] = []
        mem_root = os.path.join(self.BASE, "memory") + _own_cgroup("memory")
        self.memory = os.path.join(mem_root.rstrip("/"), name)
        os.mkdir(self.memory)
        self.paths.append(self.memory)
        if memory_limit is not None:
            self._write(self.memory, "memory.limit_in_bytes", str(memory_limit))
        self.blkio: str | None = None
        if read_bps is not None:
            blk_root = os.path.join(self.BASE, "blkio") + _own_cgroup("blkio")
            self.blkio = os.path.join(blk_root.rstrip("/"), name)
            os.mkdir(self.blkio)
            self.paths.append(self.blkio)
            self._write(self.blkio, "blkio.throttle.read_bps_device", f"{device} {read_bps}")
        self.device = device

    @staticmethod
    def _write(path: str, name: str, value: str) -> None:
        with open(os.path.join(path, name), "w") as f:
            f.write(value)

    @staticmethod
    def _read(path: str, name: str) -> str:
        with open(os.path.join(path, name)) as f:
            return f.read()

    def join(self) -> None:
        """Move the calling process into the cgroups (used as Popen's ``preexec_fn``)."""
        pid = str(os.getpid())
        for path in self.paths:
            self._write(path, "cgroup.procs", pid)

    def memory_stat(self) -> dict[str, int]:
        stats = {}
        for line in self._read(self.memory, "memory.stat").splitlines():
            key, value = line.split()
            stats[key] = int(value)
        return stats

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "memory_max_usage_bytes": int(self._read(self.memory, "memory.max_usage_in_bytes")),
            "memory_failcnt": int(self._read(self.memory, "memory.failcnt")),
            "memory_limit_bytes": int(self._read(self.memory, "memory.limit_in_bytes")),
            "oom_control": self._read(self.memory, "memory.oom_control").split(),
        }
        if self.blkio is not None:
            for line in self._read(self.blkio, "blkio.throttle.io_service_bytes").splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.device and parts[1] == "Read":
                    out["blkio_read_bytes"] = int(parts[2])
        return out

    def remove(self) -> None:
        for path in reversed(self.paths):
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                print(f"warning: could not remove cgroup {path}", file=sys.stderr)
        self.paths.clear()


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def device_of(path: str) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


# ======================================================================= configurations
def dataset_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "class_path": "bench_hanoi.WideSyntheticGraph",
        "init_args": {
            "num_nodes": args.num_nodes,
            "avg_degree": args.avg_degree,
            "num_classes": args.num_classes,
            "num_features": args.num_features,
            "num_communities": max(args.num_classes, args.num_nodes // args.community_size),
            "homophily": args.homophily,
            "power_law_exponent": args.power_law_exponent,
            "feature_noise": args.feature_noise,
            "train_ratio": args.train_ratio,
            "val_ratio": round(1.0 - args.train_ratio - args.test_ratio, 12),
            "seed": 0,
            "structure_dir": os.path.join(args.workdir, "structure"),
        },
    }


def override(method: str, args: argparse.Namespace, *, evaluation: bool = False) -> dict:
    data: dict[str, Any] = {
        "dataset": dataset_config(args),
        "cache_dir": os.path.join(args.workdir, "stores"),
        "eval_mode": "sampled",
        "eval_fanouts": list(args.eval_fanouts),
        "eval_batch_size": args.eval_batch_size,
        "fanouts": [15, 10, 5],
        "batch_size": 1000,
        "seed": 0,
    }
    if STORE_OF[method] != "ns":
        data.update(num_parts=args.num_parts, parts_per_batch=args.parts_per_batch)
        if method != "marius":
            data["hub_fraction"] = args.hub_fraction
    trainer: dict[str, Any] = {
        "max_epochs": args.epochs,
        "enable_checkpointing": False,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": os.path.join(args.workdir, "logs"), "name": method},
        },
    }
    if method == "ns_ext" and args.ns_ext_batches > 0 and not evaluation:
        trainer["max_epochs"] = 1
        trainer["limit_train_batches"] = args.ns_ext_batches
    return {
        "seed_everything": 0,
        "trainer": trainer,
        "model": {
            "init_args": {
                "model": {"init_args": {"hidden_channels": args.hidden, "dropout": 0.5}},
                "lr": 1e-3,
            }
        },
        "data": {"init_args": data},
    }


def config_args(method: str, args: argparse.Namespace, *, evaluation: bool = False) -> list[str]:
    import yaml

    path = os.path.join(args.workdir, "configs", f"{method}{'-eval' if evaluation else ''}.yaml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(override(method, args, evaluation=evaluation), f)
    return ["--config", os.path.join(ROOT, "recipes", RECIPES[method]), "--config", path]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": HERE + (os.pathsep + path if path else "")}


# ========================================================================= orchestration
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_stores(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """``lightgraph prepare`` of each store (outside any cgroup); reused when complete."""
    import numpy as np

    stores = {}
    needed = {"ns"} | {STORE_OF[m] for m in args.methods}
    for store, method in STORE_RECIPE.items():
        if store not in needed:
            continue
        cmd = [sys.executable, "-m", "lightgraph", "prepare", *config_args(method, args)]
        tic = time.perf_counter()
        proc = subprocess.run(
            cmd, cwd=args.workdir, env=_env(), capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - tic
        if proc.returncode != 0:
            raise RuntimeError(f"prepare {store} failed:\n{proc.stderr[-4000:]}")
        line = [x for x in proc.stdout.splitlines() if "prepared " in x][-1]
        path = line.split("prepared ", 1)[1].strip()
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
        files = {}
        for name in os.listdir(path):
            with contextlib.suppress(OSError):
                files[name] = os.path.getsize(os.path.join(path, name))
        masks = np.load(os.path.join(path, "masks.npy"), mmap_mode="r")
        hub_ids = np.load(os.path.join(path, "hub_store_ids.npy")).astype(np.int64)
        stores[store] = {
            "path": path,
            "train_nodes": int(masks[:, 0].sum()),
            "training_nodes_among_hubs": int(masks[hub_ids, 0].sum()) if hub_ids.size else 0,
            "bytes": sum(files.values()),
            "files": files,
            "prepare_seconds": seconds,
            "build_seconds": meta.get("build_seconds"),
            "num_nodes": meta.get("num_nodes"),
            "num_edges": meta.get("num_edges"),
            "num_parts": meta.get("num_parts"),
            "num_hubs": meta.get("num_hubs"),
            "num_part_edges": meta.get("num_part_edges"),
            "num_hub_edges": meta.get("num_hub_edges"),
        }
        log(
            f"store {store}: {stores[store]['bytes'] / GB:.2f} GB in {path} "
            f"({seconds:.0f} s, incl. reuse check)"
        )
    return stores


def macro_batch_retention(store_path: str, parts_per_batch: int) -> dict[str, float]:
    """What a random macro-batch keeps of its nodes' in-edges (from the store's buckets).

    For a non-hub node, the expected fraction of its in-edges whose source is in the
    same macro-batch: its own partition's bucket, the other ``b - 1`` partitions' buckets
    (each of the ``k - 1`` others equally likely) and every edge from a hub (pinned).
    """
    import numpy as np

    edge_ptr = np.load(os.path.join(store_path, "edge_ptr.npy"))
    hub_ptr = np.load(os.path.join(store_path, "hub_edge_ptr.npy"))
    with open(os.path.join(store_path, "meta.json")) as f:
        meta = json.load(f)
    k = int(meta["num_parts"])
    buckets = np.diff(edge_ptr).reshape(k, k).astype(np.float64)
    diag = float(np.trace(buckets))
    off = float(buckets.sum()) - diag
    hub_to_node = float(np.diff(hub_ptr)[0::2].sum())
    b = parts_per_batch
    kept = diag + off * (b - 1) / max(k - 1, 1) + hub_to_node
    return {
        "intra_partition_edge_fraction": diag / float(meta["num_edges"]),
        "expected_in_edges_kept": kept / (diag + off + hub_to_node),
    }


def run_method(
    method: str,
    args: argparse.Namespace,
    device: str,
    timeout: float,
    argv: list[str] | None = None,
    in_memory: bool | None = None,
) -> dict[str, Any]:
    """Train ``method`` in its cgroups (fresh page cache); returns its measurements.

    ``argv``: the ``lightgraph fit`` arguments (default: ``method``'s recipe and overrides);
    ``in_memory``: run without the cgroups' limits (default: for ``ns_mem``)."""
    weights = os.path.join(args.workdir, "weights", f"{method}.pt")
    os.makedirs(os.path.dirname(weights), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(weights)
    shutil.rmtree(os.path.join(args.workdir, "logs", method), ignore_errors=True)
    if in_memory is None:
        in_memory = method == "ns_mem"
    limit = None if in_memory else int(args.budget_gb * GB)
    read_bps = None if in_memory else int(args.throttle_mbps * 1e6)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "fit",
        "--weights",
        weights,
        "--",
        *(config_args(method, args) if argv is None else argv),
    ]
    drop_caches()
    name = f"bench_hanoi_{method}_{os.getpid()}"
    groups = Cgroups(name, limit, read_bps, device)
    peak = {"rss": 0, "rss_plus_mapped": 0, "usage": 0}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                st = groups.memory_stat()
                peak["rss"] = max(peak["rss"], st.get("rss", 0))
                peak["rss_plus_mapped"] = max(
                    peak["rss_plus_mapped"], st.get("rss", 0) + st.get("mapped_file", 0)
                )
                peak["usage"] = max(peak["usage"], st.get("rss", 0) + st.get("cache", 0))
            stop.wait(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    proc = None
    try:
        load_before = os.getloadavg()
        tic = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=args.workdir,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=groups.join,
        )
        poller.start()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise RuntimeError(
                f"{method} exceeded its {timeout:.0f} s time limit:\n{err[-3000:]}"
            ) from None
        wall = time.perf_counter() - tic
        load = {"loadavg_before": load_before, "loadavg_after": os.getloadavg()}
        stop.set()
        poller.join()
        summary = groups.summary()
        if proc.returncode != 0:
            killed = proc.returncode < 0 and -proc.returncode == signal.SIGKILL
            return {
                "method": method,
                "failed": True,
                "returncode": proc.returncode,
                "oom_killed": bool(killed and summary["memory_failcnt"] > 0),
                "stderr_tail": err[-3000:],
                "wall_seconds": wall,
                "cgroup": summary,
                "peak_rss_bytes": peak["rss"],
                **load,
            }
        line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
        result = json.loads(line[len("RESULT ") :])
        result.update(
            method=method,
            failed=False,
            wall_seconds=wall,
            cgroup=summary,
            peak_rss_bytes=peak["rss"],
            peak_rss_plus_mapped_bytes=peak["rss_plus_mapped"],
            weights=weights,
            budget_bytes=limit,
            throttle_bps=read_bps,
            **load,
        )
        return result
    finally:
        stop.set()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        groups.remove()


def evaluate(args: argparse.Namespace, weights: dict[str, str], timeout: float) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "eval",
        "--weights",
        json.dumps(weights),
        "--",
        *config_args("ns_mem", args, evaluation=True),
    ]
    proc = subprocess.run(
        cmd, cwd=args.workdir, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"evaluation failed:\n{proc.stderr[-4000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


# ============================================================================= reporting
def summarise(r: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Per-epoch figures of one run (means over its epochs)."""
    if r.get("failed"):
        return {"method": r["method"], "failed": True}
    # Epoch 0 is a warm-up (imports paged in, numba compiled, ...) and, for a loader
    # without __len__ (HANOI's adaptive reuse), Lightning draws its first batch before
    # on_train_epoch_start, outside the epoch's timer and IOMonitor's counters. With two
    # or more epochs the figures are means over the epochs after the first.
    skip = 1 if len(r["epochs"]) > 1 else 0
    epochs = r["epochs"][skip:]
    io = r["io"][skip:]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    epoch_s = mean([e["seconds"] for e in epochs])
    steps = mean([e["steps"] for e in epochs])
    targets = mean([h.get("targets", float("nan")) for h in io])
    row: dict[str, Any] = {
        "method": r["method"],
        "failed": False,
        "epochs_run": len(r["epochs"]),
        "epochs_measured": len(epochs),
        "epoch_seconds": epoch_s,
        "epoch_seconds_all": [e["seconds"] for e in r["epochs"]],
        "steps_per_epoch": steps,
        "targets_per_epoch": targets,
        "targets_per_second": targets / epoch_s if epoch_s > 0 else float("nan"),
        "bytes_read_per_epoch": mean([h.get("bytes_read", 0.0) for h in io]),
        "read_calls_per_epoch": mean([h.get("read_calls", 0.0) for h in io]),
        "pages_touched_per_epoch": mean([h.get("pages_touched", 0.0) for h in io]),
        "device_read_bytes_per_epoch": mean([h.get("device_read_bytes", 0.0) for h in io]),
        "device_over_requested": device_over_requested(io),
        "normalized_working_set": mean([h.get("normalized_working_set", float("nan")) for h in io]),
        "wait_seconds_per_epoch": mean([h.get("wait_seconds", 0.0) for h in io]),
        "passes_per_epoch": mean([h.get("passes", float("nan")) for h in io]),
        "macro_batches_per_epoch": mean([h.get("macro_batches", float("nan")) for h in io]),
        "peak_rss_bytes": r["peak_rss_bytes"],
        "ru_maxrss_bytes": r["ru_maxrss_bytes"],
        "cgroup_max_usage_bytes": r["cgroup"]["memory_max_usage_bytes"],
        "cgroup_failcnt": r["cgroup"]["memory_failcnt"],
        "blkio_read_bytes_total": r["cgroup"].get("blkio_read_bytes"),
        "process_read_bytes_total": r["proc_io"].get("read_bytes"),
        "setup_seconds": r["fit_seconds"] - sum(e["seconds"] for e in r["epochs"]),
        "wall_seconds": r["wall_seconds"],
        "loadavg_after": r.get("loadavg_after"),
    }
    full = r.get("train_batches_per_epoch")
    if r["method"] == "ns_ext" and args.ns_ext_batches > 0:
        per_batch = epoch_s / steps
        row["limited_to_batches"] = args.ns_ext_batches
        row["full_epoch_batches"] = full
        row["seconds_per_batch"] = per_batch
        row["extrapolated_epoch_seconds"] = per_batch * full if full else None
    return row


def device_over_requested(io: list[dict[str, float]]) -> float:
    """Bytes the device delivered over the bytes the epochs asked for (1 is ideal).

    Asked for: the partition store's explicit reads (``bytes_read``) or, for a
    memory-mapped graph (NS-Ext), the bytes of the rows and neighbour lists sampling
    touched (``bytes_requested``). Delivered: ``/proc/self/io`` ``read_bytes`` of the
    worker (page-cache misses and the kernel's read-ahead).
    """
    device = sum(h.get("device_read_bytes", 0.0) for h in io)
    asked = sum(h.get("bytes_read", 0.0) or h.get("bytes_requested", 0.0) for h in io)
    return device / asked if asked > 0 else float("nan")


def fmt_bytes(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B"


def table(rows: list[dict[str, Any]], accs: dict[str, Any], ref_epoch: float) -> str:
    head = (
        f"{'method':<30} {'epoch s':>9} {'xNS-Mem':>8} {'steps':>6} {'targets/s':>9} "
        f"{'store read':>11} {'pages':>10} {'device read':>12} {'dev/req':>7} {'calls':>7} "
        f"{'wait s':>7} "
        f"{'peak RSS':>9} {'cg max use':>10} {'test acc':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        m = r["method"]
        if r.get("failed"):
            lines.append(f"{LABELS[m]:<30} FAILED (see JSON)")
            continue
        epoch = r.get("extrapolated_epoch_seconds") or r["epoch_seconds"]
        mark = "*" if "extrapolated_epoch_seconds" in r else " "
        acc = accs.get(m, {}).get("test_acc")
        lines.append(
            f"{LABELS[m]:<30} {epoch:>8.1f}{mark} {epoch / ref_epoch:>8.2f} "
            f"{r['steps_per_epoch']:>6.0f} {r['targets_per_second']:>9.0f} "
            f"{fmt_bytes(r['bytes_read_per_epoch']):>11} {r['pages_touched_per_epoch']:>10.0f} "
            f"{fmt_bytes(r['device_read_bytes_per_epoch']):>12} "
            f"{r['device_over_requested']:>7.3f} {r['read_calls_per_epoch']:>7.0f} "
            f"{r['wait_seconds_per_epoch']:>7.1f} {fmt_bytes(r['peak_rss_bytes']):>9} "
            f"{fmt_bytes(r['cgroup_max_usage_bytes']):>10} "
            f"{(f'{100 * acc:.2f}' if acc is not None else 'n/a'):>8}"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workdir", default="/tmp/bench_hanoi", help="stores, logs, weights (big)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "hanoi.json"))
    p.add_argument("--num-nodes", type=int, default=12_000_000)
    p.add_argument("--num-features", type=int, default=256)
    p.add_argument("--avg-degree", type=float, default=3.0)
    p.add_argument("--power-law-exponent", type=float, default=3.5)
    p.add_argument("--homophily", type=float, default=0.8)
    p.add_argument("--community-size", type=int, default=2000, help="nodes per community")
    p.add_argument("--num-classes", type=int, default=8)
    p.add_argument("--feature-noise", type=float, default=0.7)
    p.add_argument("--train-ratio", type=float, default=0.02)
    p.add_argument("--test-ratio", type=float, default=0.003)
    p.add_argument("--hidden", type=int, default=64, help="GraphSAGE hidden size (thesis: 256)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--num-parts", type=int, default=512)
    p.add_argument("--parts-per-batch", type=int, default=8)
    p.add_argument("--hub-fraction", type=float, default=0.001)
    p.add_argument("--budget-gb", type=float, default=1.5)
    p.add_argument("--throttle-mbps", type=float, default=500.0, help="MB/s (1e6 bytes)")
    p.add_argument(
        "--ns-ext-batches",
        type=int,
        default=8,
        help="NS-Ext trains this many mini-batches and its epoch is extrapolated (0: full epochs)",
    )
    p.add_argument("--eval-fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--eval-batch-size", type=int, default=4096)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--run-timeout", type=float, default=1200.0, help="seconds per method")
    p.add_argument(
        "--dry-run", action="store_true", help="tiny graph, 1 epoch: checks the pipeline"
    )
    p.add_argument("--worker", choices=("fit", "eval"), help=argparse.SUPPRESS)
    p.add_argument("--weights", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    args.rest = [a for a in rest if a != "--"]
    if args.dry_run:
        args.num_nodes = min(args.num_nodes, 200_000)
        args.num_features = min(args.num_features, 64)
        args.train_ratio, args.test_ratio = 0.02, 0.02
        args.num_parts, args.parts_per_batch = 64, 8
        args.epochs = 1
        args.budget_gb = min(args.budget_gb, 1.0)
        args.ns_ext_batches = 2
        args.workdir = args.workdir.rstrip("/") + "_dry"
        args.out = os.path.join(HERE, "results", "hanoi_dry.json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.worker == "fit":
        worker_fit(args.rest, args.weights)
        return
    if args.worker == "eval":
        worker_eval(args.rest, json.loads(args.weights))
        return
    if os.geteuid() != 0:
        raise SystemExit("bench_hanoi.py needs root (cgroups, drop_caches).")
    start = time.perf_counter()
    os.makedirs(args.workdir, exist_ok=True)
    args.workdir = os.path.abspath(args.workdir)
    device = device_of(args.workdir)
    log(f"workdir {args.workdir} on device {device}; building stores")
    stores = build_stores(args)
    ret = {
        s: macro_batch_retention(stores[s]["path"], args.parts_per_batch)
        for s in ("hanoi", "marius")
        if s in stores
    }
    budget = int(args.budget_gb * GB)
    ratio = max(store["bytes"] for store in stores.values()) / budget
    log(f"store / budget = {ratio:.1f}x; stores built after {time.perf_counter() - start:.0f} s")
    runs: dict[str, dict[str, Any]] = {}
    for method in args.methods:
        log(f"run {method} ...")
        runs[method] = run_method(method, args, device, args.run_timeout)
        r = runs[method]
        if r.get("failed"):
            log(
                f"  {method} FAILED (rc {r['returncode']}, oom {r['oom_killed']}): {r['stderr_tail'][-400:]}"
            )
        else:
            log(
                f"  {method}: epochs {[round(e['seconds'], 1) for e in r['epochs']]} s, wall {r['wall_seconds']:.0f} s"
            )
    weights = {
        m: r["weights"]
        for m, r in runs.items()
        if not r.get("failed") and not (m == "ns_ext" and args.ns_ext_batches > 0)
    }
    log(f"evaluating {sorted(weights)} ...")
    accs = evaluate(args, weights, args.run_timeout) if weights else {}
    rows = [summarise(runs[m], args) for m in args.methods]
    by = {r["method"]: r for r in rows}
    ref = by.get("ns_mem", {}).get("epoch_seconds") or float("nan")
    print()
    print(table(rows, accs, ref))
    print("* extrapolated from the first mini-batches (NS-Ext, see --ns-ext-batches)")

    goals: dict[str, Any] = {}
    h, ns, ext = by.get("hanoi"), by.get("ns_mem"), by.get("ns_ext")
    if h and ns and not h.get("failed") and not ns.get("failed"):
        goals["hanoi_over_ns_mem_epoch"] = h["epoch_seconds"] / ns["epoch_seconds"]
        goals["hanoi_le_1.3x_ns_mem"] = goals["hanoi_over_ns_mem_epoch"] <= 1.3
        if "hanoi" in accs and "ns_mem" in accs:
            diff = 100 * (accs["hanoi"]["test_acc"] - accs["ns_mem"]["test_acc"])
            goals["hanoi_minus_ns_mem_acc_points"] = diff
            goals["hanoi_acc_within_0.3"] = abs(diff) <= 0.3
    if h and ext and not h.get("failed") and not ext.get("failed"):
        ext_epoch = ext.get("extrapolated_epoch_seconds") or ext["epoch_seconds"]
        goals["ns_ext_over_hanoi_epoch"] = ext_epoch / h["epoch_seconds"]
        goals["hanoi_ge_10x_faster_than_ns_ext"] = goals["ns_ext_over_hanoi_epoch"] >= 10
    rate = args.throttle_mbps * 1e6
    physical: dict[str, Any] = {}
    if h and not h.get("failed"):
        physical["hanoi_store_bytes"] = stores["hanoi"]["bytes"]
        physical["hanoi_store_read_seconds_at_throttle"] = stores["hanoi"]["bytes"] / rate
        physical["hanoi_bytes_read_per_epoch"] = h["bytes_read_per_epoch"]
        physical["hanoi_epoch_read_seconds_at_throttle"] = h["bytes_read_per_epoch"] / rate
        physical["hanoi_epoch_over_physical_limit"] = h["epoch_seconds"] / (
            h["bytes_read_per_epoch"] / rate
        )
        physical["hanoi_epoch_over_store_read"] = h["epoch_seconds"] / (
            stores["hanoi"]["bytes"] / rate
        )
        physical["hanoi_device_read_bytes_per_epoch"] = h["device_read_bytes_per_epoch"]
        physical["hanoi_device_over_requested"] = h["device_over_requested"]
        goals["hanoi_device_read_le_1.1x_requested"] = h["device_over_requested"] <= 1.1
    print()
    print("goals:", json.dumps(goals, indent=1))
    print("physical limit:", json.dumps(physical, indent=1))
    print("macro-batch edge retention:", json.dumps(ret, indent=1))
    total = time.perf_counter() - start
    print(f"total wall time {total / 60:.1f} min")

    result = {
        "command": "python benchmarks/bench_hanoi.py " + " ".join(sys.argv[1:]),
        "setup": {k: v for k, v in vars(args).items() if k not in ("worker", "weights", "rest")},
        "machine": {"cpus": os.cpu_count(), "gpu": torch.cuda.is_available()},
        "evaluation": (
            f"sampled, fanouts {args.eval_fanouts}, batch {args.eval_batch_size}, test nodes of "
            "the in-memory graph, same seeds for every method (run outside the cgroups)"
        ),
        "stores": stores,
        "store_over_budget": ratio,
        "macro_batch_retention": ret,
        "rows": rows,
        "accuracy": accs,
        "goals": goals,
        "physical_limit": physical,
        "raw": runs,
        "total_seconds": total,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
