"""Out-of-core preparation: a graph several times larger than the memory limit, written
chunk by chunk as an ``NpyGraph``, prepared (CSC, GAP, hubs, HANOI store) and trained for
one HANOI epoch, every step inside a cgroup-v1 memory limit (page cache included).

Steps, each a separate process in a fresh memory cgroup of ``--memory-gb`` (its peak is
the cgroup's ``memory.max_usage_in_bytes``; a process the limit kills is reported):

1. ``write``: a synthetic graph (communities, class-dependent float16 features) written
   block by block with :class:`lightgraph.data.NpyGraphWriter`;
2. ``csc``: :func:`lightgraph.data.partition.on_disk_csc`, the chunked CSC on disk;
3. ``gap``: :func:`lightgraph.data.partition.partition_on_disk` (GAP over the on-disk adjacency);
4. ``hubs``: :func:`lightgraph.data.partition.select_hubs_on_disk` over the CSC of step 2;
5. ``prepare``: ``lightgraph prepare`` of ``recipes/hanoi_noreuse.yaml`` on the
   ``NpyGraph`` -- the whole store build (its own CSC, GAP, hubs and the store; the
   per-step seconds it logs in the store's ``meta.json`` are reported);
6. ``train``: ``lightgraph fit`` of the same recipe, one epoch, no evaluation.

Then, outside any cgroup, on a graph of ``--compare-scale`` times the size (one that
fits): the store built by the on-disk path against the in-memory path (``load()``, the
same graph), their times, whether the stores are byte-identical, and GAP's edge cut and
label balance from both paths.

Run as root (cgroups, ``drop_caches``)::

    python benchmarks/bench_out_of_core_prepare.py                 # 1 GiB limit, >= 8 GiB of data
    python benchmarks/bench_out_of_core_prepare.py --dry-run       # small, ~2 min
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_hanoi import Cgroups, drop_caches  # noqa: E402  (a sibling script)

GiB = 1 << 30


# ----------------------------------------------------------------------------- sizes
def graph_size(args: argparse.Namespace, scale: float = 1.0) -> dict[str, int]:
    """Nodes and edges so that edges (int32 pairs) + features (float16) + labels and
    masks take ``ratio * memory`` bytes (times ``scale``)."""
    per_node = 2 * args.features + 8 + 3 + 8 * args.avg_degree
    total = args.ratio * args.memory_gb * GiB * scale
    n = int(total // per_node)
    return {"num_nodes": n, "num_edges": int(n * args.avg_degree)}


def data_bytes(root: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for f in os.listdir(root) if f.endswith(".npy")
    )


# ---------------------------------------------------------------------------- workers
def worker_write(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from lightgraph.data import NpyGraphWriter

    n, e = args.num_nodes, args.num_edges
    classes, community = args.classes, args.community
    rng = np.random.default_rng(args.seed)
    centers = rng.standard_normal((classes, args.features)).astype(np.float32)
    # rows per feature block: at most 4M elements (16 MB of float32 temporaries each)
    block = max(1024, min(1 << 16, (1 << 22) // args.features))
    with NpyGraphWriter(
        args.root,
        num_nodes=n,
        num_edges=e,
        num_features=args.features,
        num_classes=classes,
        index_dtype="int32",
        feature_dtype=getattr(args, "feature_dtype", "float16"),
        overwrite=True,
    ) as writer:
        for lo in range(0, n, block):
            hi = min(n, lo + block)
            ids = np.arange(lo, hi)
            label = (ids // community) % classes
            x = centers[label] + 2.0 * rng.standard_normal((hi - lo, args.features), np.float32)
            writer.write_features(lo, x.astype(getattr(args, "feature_dtype", "float16")))
            writer.write_labels(lo, label.astype(np.int64))
            u = rng.random(hi - lo)
            writer.write_masks(lo, u < args.train_ratio, (u >= 0.9) & (u < 0.91), u >= 0.99)
        for lo in range(0, e, 1 << 20):
            hi = min(e, lo + (1 << 20))
            dst = rng.integers(0, n, hi - lo)
            local = rng.random(hi - lo) < args.homophily
            base = dst - dst % community
            src = np.where(
                local,
                np.minimum(base + rng.integers(0, community, hi - lo), n - 1),
                rng.integers(0, n, hi - lo),
            )
            writer.write_edges(lo, np.stack([src, dst]).astype(np.int32))
    return {"bytes": data_bytes(args.root)}


def worker_csc(args: argparse.Namespace) -> dict[str, Any]:
    from lightgraph.data import NpyGraph
    from lightgraph.data.partition import on_disk_csc

    graph = NpyGraph(args.root).on_disk()
    os.makedirs(args.work, exist_ok=True)
    indptr, indices = on_disk_csc(graph.edge_index, graph.num_nodes, args.work)
    return {"edges": int(indices.shape[0])}


def worker_gap(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from lightgraph.data import NpyGraph
    from lightgraph.data.partition import partition_on_disk

    graph = NpyGraph(args.root).on_disk()
    os.makedirs(args.work, exist_ok=True)
    part = partition_on_disk(graph, args.num_parts, method="gap", seed=0, workdir=args.work)
    np.save(os.path.join(args.work, "part.npy"), part)
    return {"parts": int(part.max()) + 1}


def worker_hubs(args: argparse.Namespace) -> dict[str, Any]:
    import glob

    import numpy as np

    from lightgraph.data import NpyGraph
    from lightgraph.data.partition import select_hubs_on_disk

    graph = NpyGraph(args.root).on_disk()
    (indptr_path,) = glob.glob(os.path.join(args.work, "**", "*indptr*.npy"), recursive=True)
    (indices_path,) = glob.glob(os.path.join(args.work, "**", "*indices*.npy"), recursive=True)
    indptr = np.load(indptr_path, mmap_mode="r")
    indices = np.load(indices_path, mmap_mode="r")
    hubs = select_hubs_on_disk(
        indptr,
        indices,
        graph.num_nodes,
        graph.train_mask,
        fraction=args.hub_fraction,
        walk_length=3,
        exclude=graph.train_mask,
    )
    return {"hubs": int(len(hubs))}


def store_config(args: argparse.Namespace, root: str, cache: str) -> list[str]:
    return [
        "--config",
        os.path.join(ROOT, "recipes", "hanoi_noreuse.yaml"),
        "--data.init_args.dataset.class_path=lightgraph.data.NpyGraph",
        f"--data.init_args.dataset.init_args.root={root}",
        f"--data.init_args.num_parts={args.num_parts}",
        f"--data.init_args.parts_per_batch={args.parts_per_batch}",
        f"--data.init_args.hub_fraction={args.hub_fraction}",
        f"--data.init_args.cache_dir={cache}",
    ]


def worker_compare(args: argparse.Namespace) -> dict[str, Any]:
    """On-disk vs in-memory store build of one graph that fits (no cgroup)."""
    import numpy as np
    import torch

    from lightgraph.data import NpyGraph, partition_graph
    from lightgraph.data.lightning.partition_store_data_module import PartitionStoreDataModule
    from lightgraph.data.partition import partition_on_disk

    class LoadOnly(NpyGraph):
        def on_disk(self):  # type: ignore[no-untyped-def]
            return None

    out: dict[str, Any] = {}
    stores = {}
    for name, cls in (("on_disk", NpyGraph), ("in_memory", LoadOnly)):
        cache = os.path.join(args.work, f"cache_{name}")
        shutil.rmtree(cache, ignore_errors=True)
        module = PartitionStoreDataModule(
            cls(args.root),
            num_parts=args.num_parts,
            partitioner="gap",
            hub_fraction=args.hub_fraction,
            cache_dir=cache,
        )
        tic = time.perf_counter()
        module.prepare_data()
        out[f"{name}_prepare_s"] = time.perf_counter() - tic
        stores[name] = module.cache_path()
    same = True
    for f in sorted(os.listdir(stores["on_disk"])):
        if f == "meta.json":
            continue
        a, b = (os.path.join(stores[k], f) for k in ("on_disk", "in_memory"))
        if os.path.isfile(a) and _sha(a) != _sha(b):
            same = False
    out["stores_identical_but_meta"] = same
    # GAP's edge cut and label balance, both paths.
    graph = NpyGraph(args.root)
    data = graph.load()
    disk = partition_on_disk(graph.on_disk(), args.num_parts, method="gap", seed=0)
    memory = partition_graph(
        data.edge_index,
        data.num_nodes,
        args.num_parts,
        method="gap",
        seed=0,
        y=data.y,
        train_mask=data.train_mask,
    ).numpy()
    out["gap_identical"] = bool(np.array_equal(disk, memory))
    for name, part in (("on_disk", disk), ("in_memory", memory)):
        p = torch.from_numpy(part)
        src, dst = data.edge_index
        out[f"{name}_edge_cut"] = float((p[src] != p[dst]).float().mean())
        train = data.train_mask
        counts = torch.zeros(args.num_parts, int(data.y.max()) + 1)
        counts.index_put_((p[train], data.y[train]), torch.ones(int(train.sum())), accumulate=True)
        share = counts / counts.sum(1, keepdim=True).clamp(min=1)
        overall = counts.sum(0) / counts.sum()
        out[f"{name}_label_tv"] = float(0.5 * (share - overall).abs().sum(1).max())
    return out


def _sha(path: str) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


WORKERS = {
    "write": worker_write,
    "csc": worker_csc,
    "gap": worker_gap,
    "hubs": worker_hubs,
    "compare": worker_compare,
}


# ------------------------------------------------------------------------------- driver
def run_step(
    name: str, cmd: list[str], limit: int | None, results: dict[str, Any], out: str | None = None
) -> None:
    tag = name.replace("/", "_")
    cg = Cgroups(f"lg_ooc_{tag}_{os.getpid()}", limit, None, "254:0") if limit else None
    drop_caches()
    tic = time.perf_counter()
    peak_rss = 0
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            preexec_fn=cg.join if cg is not None else None,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        # The cgroup's anonymous memory (not the page cache, which fills any limit), polled.
        import threading

        done = threading.Event()

        def poll() -> None:
            nonlocal peak_rss
            while not done.is_set() and cg is not None:
                try:
                    stat = cg.memory_stat()
                    peak_rss = max(peak_rss, stat.get("total_rss", 0) + stat.get("total_shmem", 0))
                except OSError:
                    pass
                time.sleep(0.05)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        _, stderr = proc.communicate()
        done.set()
        watcher.join()
        row: dict[str, Any] = {"seconds": time.perf_counter() - tic, "rc": proc.returncode}
        if cg is not None:
            row.update(cg.summary())
            row["peak_rss_bytes"] = peak_rss
    finally:
        if cg is not None:
            cg.remove()
    if proc.returncode != 0:
        row["error"] = stderr[-3000:]
    elif out is not None and os.path.exists(out):
        with open(out) as f:
            row.update(json.load(f))
    results[name] = row
    peak = row.get("memory_max_usage_bytes")
    print(
        f"{name:8s} rc {proc.returncode}  {row['seconds']:8.1f} s"
        + (f"  cgroup max usage {peak / GiB:.2f} GiB" if peak else "")
        + (f"  peak rss {peak_rss / GiB:.2f} GiB" if peak else ""),
        flush=True,
    )
    if proc.returncode != 0:
        print(stderr[-2000:], flush=True)


def worker_cmd(args: argparse.Namespace, step: str, root: str, work: str, out: str) -> list[str]:
    return [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        step,
        "--root",
        root,
        "--work",
        work,
        "--result",
        out,
        "--num-parts",
        str(args.num_parts),
        "--hub-fraction",
        str(args.hub_fraction),
        "--features",
        str(args.features),
        "--avg-degree",
        str(args.avg_degree),
        "--num-nodes",
        str(args.num_nodes),
        "--num-edges",
        str(args.num_edges),
        "--classes",
        str(args.classes),
        "--community",
        str(args.community),
        "--homophily",
        str(args.homophily),
        "--train-ratio",
        str(args.train_ratio),
        "--seed",
        str(args.seed),
        "--feature-dtype",
        getattr(args, "feature_dtype", "float16"),
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--memory-gb", type=float, default=1.0)
    p.add_argument("--ratio", type=float, default=8.2, help="data bytes / memory limit")
    p.add_argument("--avg-degree", type=int, default=48)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--community", type=int, default=4096)
    p.add_argument("--homophily", type=float, default=0.7)
    p.add_argument("--train-ratio", type=float, default=0.002)
    p.add_argument("--num-parts", type=int, default=1024)
    p.add_argument("--parts-per-batch", type=int, default=2)
    p.add_argument(
        "--hub-fraction",
        type=float,
        default=0.01,
        help="hub nodes (fraction of all nodes); their features stay in memory while training",
    )
    p.add_argument("--compare-scale", type=float, default=0.125)
    p.add_argument("--workdir", default="/var/tmp/lightgraph_ooc")
    p.add_argument(
        "--steps", nargs="*", default=["write", "csc", "gap", "hubs", "prepare", "train", "compare"]
    )
    p.add_argument(
        "--out", default=os.path.join(ROOT, "benchmarks", "results", "out_of_core_prepare.json")
    )
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--feature-dtype", default="float16", choices=["float16", "float32"])
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--root", default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--num-nodes", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--num-edges", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        result = WORKERS[args.worker](args)
        with open(args.result, "w") as f:
            json.dump(result, f)
        return
    if args.dry_run:
        args.ratio, args.num_parts = 0.5, 64
        args.train_ratio = 0.01
        if args.out.endswith("out_of_core_prepare.json"):
            args.out = "/tmp/out_of_core_prepare_dry.json"
    limit = int(args.memory_gb * GiB)
    results: dict[str, Any] = {"config": vars(args).copy(), "steps": {}}
    os.makedirs(args.workdir, exist_ok=True)
    for scale_name, scale in (("big", 1.0), ("small", args.compare_scale)):
        size = graph_size(args, scale)
        args.num_nodes, args.num_edges = size["num_nodes"], size["num_edges"]
        root = os.path.join(args.workdir, f"graph_{scale_name}")
        work = os.path.join(args.workdir, f"work_{scale_name}")
        cache = os.path.join(args.workdir, f"cache_{scale_name}")
        results[f"{scale_name}_graph"] = size
        if scale_name == "big":
            steps = [s for s in args.steps if s != "compare"]
        else:
            steps = ["write", "compare"] if "compare" in args.steps else []
        for step in steps:
            out = os.path.join(args.workdir, f"{scale_name}_{step}.json")
            key = f"{scale_name}/{step}"
            step_limit = limit if scale_name == "big" else None
            if step in WORKERS and step != "compare":  # write, csc, gap, hubs
                if step == "csc":
                    shutil.rmtree(work, ignore_errors=True)
                run_step(
                    key, worker_cmd(args, step, root, work, out), step_limit, results["steps"], out
                )
            elif step == "compare":
                run_step(key, worker_cmd(args, step, root, work, out), None, results["steps"], out)
            elif step == "prepare":
                shutil.rmtree(cache, ignore_errors=True)
                cmd = [
                    sys.executable,
                    "-m",
                    "lightgraph",
                    "prepare",
                    *store_config(args, root, cache),
                ]
                run_step(key, cmd, step_limit, results["steps"])
                metas = [
                    os.path.join(cache, d, "meta.json")
                    for d in os.listdir(cache)
                    if os.path.exists(os.path.join(cache, d, "meta.json"))
                ]
                if metas:
                    with open(metas[0]) as f:
                        meta = json.load(f)
                    results["steps"][key]["build_seconds"] = meta.get("build_seconds")
                    results["steps"][key]["store_bytes"] = sum(
                        os.path.getsize(os.path.join(os.path.dirname(metas[0]), x))
                        for x in os.listdir(os.path.dirname(metas[0]))
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
                run_step(key, cmd, step_limit, results["steps"])
            if step == "hubs":
                shutil.rmtree(work, ignore_errors=True)  # the CSC of steps 2-4: disk space
            if step == "write" and os.path.exists(root):
                results[f"{scale_name}_graph"]["data_bytes"] = data_bytes(root)
                results[f"{scale_name}_graph"]["data_over_limit"] = data_bytes(root) / limit
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    print(json.dumps(results["steps"], indent=1)[:4000])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
