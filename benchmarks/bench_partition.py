"""GAP vs METIS vs random partitioning of a million-node graph.

For every method and number of parts ``k`` (default 64, 256, 1024) on the default
:class:`~lightgraph.data.SyntheticGraph` (1,000,000 nodes, average degree 20, i.e.
10 M undirected edges stored as 20 M directed ones; 8 classes, 60 % training nodes)
this prints

* wall time of ``partition_graph(...)`` (GAP: ``method="gap"`` with its defaults,
  3 refinement passes; its numba kernels are loaded, or compiled the first time, by a
  warm-up call on a tiny graph that is not timed);
* peak memory: every run happens in a fresh subprocess that warms up, loads the graph,
  reads its resident set size (the baseline: interpreter, libraries, the graph), resets
  the kernel's high-water mark (``echo 5 > /proc/self/clear_refs``, so the copies made
  while loading do not hide the method's peak), partitions, and reads the high-water
  mark (``VmHWM``, what ``ru_maxrss`` reports); the table shows the difference, i.e. the
  peak resident memory of the method above the loaded graph, every temporary included
  (without ``clear_refs``, i.e. not on Linux, the baseline is ``ru_maxrss`` after loading);
* edge-cut fraction (share of undirected edges whose endpoints lie in different parts);
* label TV: mean over the parts of the total-variation distance between the part's
  training-label distribution and the global one (0 = every part mirrors the whole).

A second table times GAP alone (``k = 256``) on graphs of 1/4, 1/2 and 1 times the node
count at the same average degree (fastest of ``--repeats`` runs, against the noise of a
shared machine), to show how its time grows with |E|. The first table runs every
configuration once.

Usage (one command; about 20 minutes on 2 shared cores, METIS dominating)::

    nice python benchmarks/bench_partition.py [--num-nodes 1000000] [--parts 64 256 1024]
        [--scaling-parts 256] [--repeats 3] [--no-scaling] [--workdir /tmp/bench_partition]
        [--out results.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("gap", "metis", "random")


def graph_file(workdir: str, num_nodes: int, seed: int) -> str:
    """Generate the graph once and keep only what partitioning needs."""
    import torch

    from lightgraph.data import SyntheticGraph

    path = os.path.join(workdir, f"graph_{num_nodes}_{seed}.pt")
    if not os.path.exists(path):
        start = time.perf_counter()
        data = SyntheticGraph(num_nodes=num_nodes, seed=seed).load()
        torch.save(
            {
                "edge_index": data.edge_index,
                "y": data.y,
                "train_mask": data.train_mask,
                "num_nodes": data.num_nodes,
            },
            path,
        )
        print(
            f"generated {num_nodes:,} nodes / {data.edge_index.size(1) // 2:,} undirected edges "
            f"in {time.perf_counter() - start:.0f} s -> {path}",
            flush=True,
        )
    return path


def _memory_kb(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of this process in KiB (``ru_maxrss`` where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> int:
    """Reset the resident-set high-water mark to the current size; returns that size."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _memory_kb("VmRSS")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(path: str, method: str, num_parts: int) -> dict:
    """One measurement, in its own process (called through ``--worker``)."""
    import torch

    from lightgraph.data.partition.partitioner import partition_graph

    torch.set_num_threads(1)
    # Warm-up: imports, and GAP's numba kernels (loaded from the cache or compiled).
    tiny = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    tiny_y, tiny_mask = torch.tensor([0, 1, 0, 1]), torch.ones(4, dtype=torch.bool)
    partition_graph(tiny, 4, 2, method, y=tiny_y, train_mask=tiny_mask)

    graph = torch.load(path)
    edge_index, y, train_mask = graph["edge_index"], graph["y"], graph["train_mask"]
    num_nodes = int(graph["num_nodes"])
    gc.collect()
    base_kb = _reset_peak()
    start = time.perf_counter()
    part = partition_graph(
        edge_index, num_nodes, num_parts, method, seed=0, y=y, train_mask=train_mask
    )
    seconds = time.perf_counter() - start
    peak_kb = _memory_kb("VmHWM")

    src, dst = edge_index
    cut = float((part[src] != part[dst]).double().mean())
    labels, where = y[train_mask], part[train_mask]
    num_classes = int(labels.max()) + 1
    table = torch.zeros(num_parts, num_classes, dtype=torch.float64)
    table.index_put_((where, labels), torch.ones(labels.numel(), dtype=torch.float64), True)
    glob = table.sum(0) / table.sum()
    local = table / table.sum(1, keepdim=True).clamp(min=1)
    tv = float(0.5 * (local - glob).abs().sum(1).mean())
    sizes = torch.bincount(part, minlength=num_parts)
    return {
        "method": method,
        "parts": num_parts,
        "num_nodes": num_nodes,
        "num_edges": edge_index.size(1) // 2,
        "seconds": seconds,
        "peak_mb": (peak_kb - base_kb) / 1024,
        "baseline_mb": base_kb / 1024,
        "cut": cut,
        "label_tv": tv,
        "min_part": int(sizes.min()),
        "max_part": int(sizes.max()),
    }


def measure(path: str, method: str, num_parts: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", path, method, str(num_parts)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} k={num_parts} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-nodes", type=int, default=1_000_000)
    parser.add_argument("--parts", type=int, nargs="*", default=[64, 256, 1024])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--scaling-parts", type=int, default=256)
    parser.add_argument("--no-scaling", action="store_true")
    parser.add_argument(
        "--repeats", type=int, default=3, help="scaling runs per size (the fastest is shown)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="/tmp/bench_partition")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    parser.add_argument(
        "--worker", nargs=3, metavar=("GRAPH", "METHOD", "PARTS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        path, method, parts = args.worker
        print(json.dumps(worker(path, method, int(parts))))
        return

    os.makedirs(args.workdir, exist_ok=True)
    path = graph_file(args.workdir, args.num_nodes, args.seed)
    rows = []
    header = (
        f"{'method':<8}{'k':>6}{'time s':>10}{'peak MB':>10}{'edge cut':>10}{'label TV':>10}"
        f"{'parts min/max':>16}"
    )
    if args.parts:
        print(
            f"\n{args.num_nodes:,}-node SyntheticGraph (peak MB = resident high-water mark "
            "above the loaded graph)"
        )
        print(header)
    for k in args.parts:
        for method in args.methods:
            r = measure(path, method, k)
            rows.append(r)
            print(
                f"{method:<8}{k:>6}{r['seconds']:>10.1f}{r['peak_mb']:>10.0f}{r['cut']:>10.3f}"
                f"{r['label_tv']:>10.3f}{r['min_part']:>8}/{r['max_part']:<7}",
                flush=True,
            )
        by = {r["method"]: r for r in rows if r["parts"] == k}
        if "gap" in by and "metis" in by:
            speed = by["metis"]["seconds"] / by["gap"]["seconds"]
            memory = by["gap"]["peak_mb"] / max(by["metis"]["peak_mb"], 1e-9)
            print(
                f"  k={k}: GAP is {speed:.1f}x faster than METIS with {memory:.2f}x its peak "
                f"memory (goal: >= 5x faster, <= 0.20x memory)",
                flush=True,
            )

    if not args.no_scaling:
        k = args.scaling_parts
        print(f"\nGAP time vs |E| (k={k}, same average degree, fastest of {args.repeats} runs)")
        print(f"{'nodes':>10}{'|E|':>12}{'time s':>10}{'ns/edge':>10}{'peak MB':>10}")
        for n in sorted({args.num_nodes // 4, args.num_nodes // 2, args.num_nodes}):
            graph = graph_file(args.workdir, n, args.seed)
            r = min(
                (measure(graph, "gap", k) for _ in range(max(args.repeats, 1))),
                key=lambda row: row["seconds"],
            )
            r["scaling"] = True
            rows.append(r)
            print(
                f"{n:>10,}{r['num_edges']:>12,}{r['seconds']:>10.2f}"
                f"{1e9 * r['seconds'] / r['num_edges']:>10.0f}{r['peak_mb']:>10.0f}",
                flush=True,
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
