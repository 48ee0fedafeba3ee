"""Link-prediction evaluation within a memory budget: ``Q`` query edges x ``K`` negatives.

:class:`~lightgraph.models.LinkPredictor` ranks the queries chunk by chunk, each chunk
sized from ``eval_memory_budget``; the ``[Q, K]`` scores never exist. This benchmark gives
it every node's embedding (``N x D`` random floats, allocated before the measurement: the
budget bounds the scoring, not the embeddings) and ``Q`` random queries with ``K`` drawn
negatives each, and samples the process's resident set every millisecond while it ranks
them. Reported per budget: the peak resident set above the level before ranking, its
ratio to the budget, the chunk size and the seconds. Run::

    python benchmarks/bench_link_eval_memory.py                     # 1M x 1,000, 64 and 256 MiB
    python benchmarks/bench_link_eval_memory.py --queries 20000 --budgets 16   # smoke test
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _watch(peak: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], _rss())
        time.sleep(0.001)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.data.batch import LinkEvalBatch
    from lightgraph.models import LinkPredictor
    from lightgraph.models.link_metrics import MeanReciprocalRank

    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(args.nodes, args.channels, generator=gen)
    src = torch.randint(0, args.nodes, (args.queries,), generator=gen)
    dst = torch.randint(0, args.nodes, (args.queries,), generator=gen)
    # The graph is not read: the embeddings are given.
    empty = torch.zeros(args.nodes + 1, dtype=torch.long)
    batch = LinkEvalBatch(
        "test", empty, empty[:0], h[:, :1], src, dst, num_negatives=args.negatives, seed=0
    )
    out: dict[str, Any] = {
        "nodes": args.nodes,
        "channels": args.channels,
        "queries": args.queries,
        "negatives": args.negatives,
        "threads": torch.get_num_threads(),
        "embedding_bytes": h.numel() * 4,
        "runs": [],
    }
    for budget_mib in args.budgets:
        budget = budget_mib << 20
        module = LinkPredictor(GraphSAGE(1, 8, 1, args.channels), eval_memory_budget=budget)
        # Warm up the allocator and the kernels on a few queries, then measure from there.
        module.rank_queries(h, batch, 0, min(batch.num_queries, 64))
        base = _rss()
        peak = [base]
        stop = threading.Event()

        thread = threading.Thread(target=_watch, args=(peak, stop), daemon=True)
        thread.start()
        tic = time.perf_counter()
        mrr = MeanReciprocalRank()  # as evaluation does: every chunk reduced as it comes
        for ranks in module.iter_ranks(h, batch):
            mrr.update(ranks)
        seconds = time.perf_counter() - tic
        stop.set()
        thread.join()
        over = peak[0] - base
        row = {
            "budget_bytes": budget,
            "chunk_queries": module.query_chunk(args.negatives, args.channels),
            "peak_above_base_bytes": over,
            "peak_over_budget": over / budget,
            "seconds": seconds,
            "mrr_of_random_scores": float(mrr.compute()),
        }
        out["runs"].append(row)
        print(
            f"budget {budget_mib} MiB: chunk {row['chunk_queries']} queries, peak +"
            f"{over / 2**20:.1f} MiB ({row['peak_over_budget']:.2f}x budget), {seconds:.1f} s",
            flush=True,
        )
    return out


def _forward(args: argparse.Namespace) -> list[str]:
    return [
        f"--nodes={args.nodes}",
        f"--channels={args.channels}",
        f"--queries={args.queries}",
        f"--negatives={args.negatives}",
        f"--threads={args.threads}",
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--queries", type=int, default=1_000_000)
    p.add_argument("--negatives", type=int, default=1000)
    p.add_argument(
        "--budgets", type=int, nargs="+", default=[64, 256], help="MiB, each in its own process"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if len(args.budgets) > 1:  # a fresh process per budget: freed memory stays resident
        import subprocess
        import sys

        runs = []
        for budget in args.budgets:
            cmd = [sys.executable, __file__, *_forward(args), "--budgets", str(budget)]
            text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            one = json.loads(text[text.index("{") :])
            print(f"budget {budget} MiB: {one['runs'][0]}", flush=True)
            runs += one["runs"]
        result = dict(one, runs=runs)
    else:
        result = run(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
