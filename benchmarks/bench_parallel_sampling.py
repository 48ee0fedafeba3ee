"""Intra-batch parallel neighbour sampling: latency of ONE large "macro-batch" sample.

``sample_neighbors(..., num_threads=n)`` cuts every hop's frontier into ``n`` contiguous
chunks expanded concurrently (degrees, draws, edge ids, gather of the sources) and keeps
the relabelling serial. This script times one sample of a macro-batch of random seeds on
``SyntheticGraph(num_nodes=500_000, avg_degree=10)``, fanouts 15,10,5, for
``num_threads`` in 1, 2, 4 and for torch's intra-op threads left at their default or
set to 1 (the sampler's threads and torch's own OpenMP threads compete for the same
cores). It also reports the share of the serial sample spent in the (serial)
relabelling, the Amdahl bound on what the threads can give.

Run::

    python benchmarks/bench_parallel_sampling.py                  # 12,500 seeds
    python benchmarks/bench_parallel_sampling.py --batch-sizes 2000 12500 50000 --runs 7

Prints a table and writes ``benchmarks/results/parallel_sampling.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import lightgraph.functional.neighbor_sampling as ns
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.functional.neighbor_sampling import sample_neighbors, to_csc

RESULTS = Path(__file__).parent / "results" / "parallel_sampling.json"


def time_sample(indptr, indices, seeds, fanouts, threads, buffer, runs, seed) -> list[float]:
    """Seconds of ``runs`` samples of ``seeds`` (after one warm-up), each with a fresh
    generator so every run does the same work."""
    times = []
    for r in range(runs + 1):
        g = torch.Generator().manual_seed(seed + r)
        t0 = time.perf_counter()
        sample_neighbors(
            indptr, indices, seeds, fanouts, generator=g, node_buffer=buffer, num_threads=threads
        )
        if r:  # r == 0 warms up the pool and the allocator
            times.append(time.perf_counter() - t0)
    return times


def relabel_share(indptr, indices, seeds, fanouts, buffer, seed) -> tuple[float, float]:
    """(total, relabel) seconds of one serial sample, the relabelling timed apart."""
    spent = [0.0]
    call = ns._Relabel.__call__

    def timed(self, src):
        t0 = time.perf_counter()
        try:
            return call(self, src)
        finally:
            spent[0] += time.perf_counter() - t0

    ns._Relabel.__call__ = timed
    try:
        t0 = time.perf_counter()
        sample_neighbors(
            indptr,
            indices,
            seeds,
            fanouts,
            generator=torch.Generator().manual_seed(seed),
            node_buffer=buffer,
        )
        total = time.perf_counter() - t0
    finally:
        ns._Relabel.__call__ = call
    return total, spent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=500_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[12_500],
        help="seeds per macro-batch (random node ids)",
    )
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="values of sample_neighbors(num_threads=...)",
    )
    parser.add_argument("--runs", type=int, default=5, help="timed samples (median taken)")
    parser.add_argument(
        "--no-buffer",
        action="store_true",
        help="relabel with torch.unique instead of a node-sized buffer",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    default_intra = torch.get_num_threads()
    t0 = time.perf_counter()
    data = SyntheticGraph(num_nodes=args.num_nodes, avg_degree=args.avg_degree, seed=0).load()
    indptr, indices = to_csc(data.edge_index, args.num_nodes)
    del data
    print(
        f"graph: {args.num_nodes:,} nodes, {indices.numel():,} CSC edges "
        f"({time.perf_counter() - t0:.1f} s to build); cpu_count={os.cpu_count()}, "
        f"torch intra-op threads default={default_intra}"
    )
    buffer = None if args.no_buffer else torch.full((args.num_nodes,), -1, dtype=torch.long)

    rows = []
    for batch in args.batch_sizes:
        g = torch.Generator().manual_seed(args.seed)
        seeds = torch.randperm(args.num_nodes, generator=g)[:batch]
        probe = sample_neighbors(
            indptr, indices, seeds, args.fanouts, generator=g, node_buffer=buffer
        )
        total, relabel = relabel_share(indptr, indices, seeds, args.fanouts, buffer, args.seed)
        for intra in sorted({1, default_intra}):
            torch.set_num_threads(intra)
            base = None
            for threads in args.threads:
                times = time_sample(
                    indptr, indices, seeds, args.fanouts, threads, buffer, args.runs, args.seed
                )
                med = statistics.median(times)
                base = med if base is None else base
                rows.append(
                    {
                        "batch_size": batch,
                        "sampled_nodes": int(probe.node.numel()),
                        "sampled_edges": int(probe.row.numel()),
                        "torch_intra_op_threads": intra,
                        "num_threads": threads,
                        "median_ms": 1e3 * med,
                        "min_ms": 1e3 * min(times),
                        "max_ms": 1e3 * max(times),
                        "times_ms": [1e3 * t for t in times],
                        "speedup_vs_1_thread": base / med,
                        "serial_relabel_share": relabel / total,
                    }
                )
        torch.set_num_threads(default_intra)

    header = (
        f"{'seeds':>7} {'nodes':>9} {'edges':>9} {'intra-op':>8} {'threads':>7} "
        f"{'median ms':>10} {'min ms':>8} {'max ms':>8} {'speedup':>7} {'relabel':>7}"
    )
    print(
        f"\nfanouts {args.fanouts}, median of {args.runs} samples, "
        f"relabel = {'torch.unique' if args.no_buffer else 'node buffer'}; "
        f"'relabel' = share of the serial sample spent relabelling (not parallelised)"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['batch_size']:>7,} {r['sampled_nodes']:>9,} {r['sampled_edges']:>9,} "
            f"{r['torch_intra_op_threads']:>8} {r['num_threads']:>7} {r['median_ms']:>10.1f} "
            f"{r['min_ms']:>8.1f} {r['max_ms']:>8.1f} {r['speedup_vs_1_thread']:>6.2f}x "
            f"{100 * r['serial_relabel_share']:>6.0f}%"
        )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "intra-batch parallel neighbour sampling (one macro-batch)",
                "graph": {
                    "generator": "SyntheticGraph",
                    "num_nodes": args.num_nodes,
                    "avg_degree": args.avg_degree,
                    "num_csc_edges": int(indices.numel()),
                },
                "fanouts": args.fanouts,
                "runs": args.runs,
                "relabel": "torch.unique" if args.no_buffer else "node_buffer",
                "machine": {
                    "cpu_count": os.cpu_count(),
                    "torch": torch.__version__,
                    "python": platform.python_version(),
                    "default_intra_op_threads": default_intra,
                },
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
