"""Sampling one batch with 1 vs 2 torch intra-op threads, on an idle and on a loaded machine.

``sample_neighbors`` is many small tensor operations; torch's intra-op threads add a
hand-off to each, and when the cores are busy the OpenMP team waits for a descheduled
thread. This measures one batch (fanouts 15/10/5, 1000 random seeds, median of the batches
after two warm-ups) of a uniform random graph (average in-degree 10) with
``intra_op_threads`` 1 and 2, relabelling through the node buffer and with
``torch.unique``; ``--load`` runs the same with one busy-looping Python process beside it
(started here and ended by its process id). The result chose ``intra_op_threads=1`` as
``sample_neighbors``'s default (docs/benchmarks.md, "Sampler threads").

    python benchmarks/bench_sampler_threads.py --num-nodes 1000000 200000
    python benchmarks/bench_sampler_threads.py --num-nodes 1000000 --load
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from lightgraph.functional.neighbor_sampling import make_node_buffer, sample_neighbors, to_csc


def batch_ms(indptr, indices, threads: int, buffer, reps: int) -> float:
    num_nodes = indptr.numel() - 1
    times = []
    for r in range(reps):
        seeds = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(r))[:1000]
        tic = time.perf_counter()
        sample_neighbors(
            indptr,
            indices,
            seeds,
            [15, 10, 5],
            generator=torch.Generator().manual_seed(r),
            node_buffer=buffer,
            intra_op_threads=threads,
        )
        times.append(time.perf_counter() - tic)
    return 1e3 * statistics.median(times[2:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--load", action="store_true", help="one busy-looping process beside it")
    args = p.parse_args()
    busy = None
    if args.load:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(1.0)
    try:
        print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores", flush=True)
        for n in args.num_nodes:
            g = torch.Generator().manual_seed(0)
            indptr, indices = to_csc(torch.randint(0, n, (2, 10 * n), generator=g), n)
            buffer = make_node_buffer(n)
            for threads in (1, 2):
                with_buffer = batch_ms(indptr, indices, threads, buffer, args.reps)
                with_unique = batch_ms(indptr, indices, threads, None, args.reps)
                print(
                    f"{n:>9} nodes  {'loaded' if busy else 'as is':6s}  threads={threads}  "
                    f"node buffer {with_buffer:7.1f} ms  torch.unique {with_unique:7.1f} ms",
                    flush=True,
                )
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


if __name__ == "__main__":
    main()
