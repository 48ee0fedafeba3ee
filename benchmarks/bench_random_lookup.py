"""The memory's limit for a pass of random lookups: nanoseconds per independent random
read of an ``int32`` array of ``N`` entries (a compiled loop summing ``a[idx[i]]`` over
uniformly random ``idx``), next to a sequential read of the same array.

GAP's passes, the hub walk and the store writer's edge passes each read a per-node array
at the positions the edges name: at a billion edges, a pass of one lookup per neighbour
slot costs at least ``slots x`` this time, however it is written. Run::

    python benchmarks/bench_random_lookup.py
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numba
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@numba.njit(nogil=True, cache=False)
def _gather_sum(array, index):  # pragma: no cover - numba
    total = 0
    for i in range(index.shape[0]):
        total += array[index[i]]
    return total


@numba.njit(nogil=True, cache=False)
def _sequential_sum(array):  # pragma: no cover - numba
    total = 0
    for i in range(array.shape[0]):
        total += array[i]
    return total


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000_000, 100_000_000])
    p.add_argument("--lookups", type=int, default=50_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--out", default=os.path.join(ROOT, "benchmarks", "results", "random_lookup.json")
    )
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    results = []
    for n in args.sizes:
        array = np.arange(n, dtype=np.int32)
        index = rng.integers(0, n, args.lookups).astype(np.int32)
        _gather_sum(array, index[:10])
        _sequential_sum(array[:10])
        random_ns, sequential_ns = [], []
        for _ in range(args.repeats):
            tic = time.perf_counter()
            _gather_sum(array, index)
            random_ns.append((time.perf_counter() - tic) / args.lookups * 1e9)
            tic = time.perf_counter()
            _sequential_sum(array)
            sequential_ns.append((time.perf_counter() - tic) / n * 1e9)
        row = {
            "entries": n,
            "array_bytes": array.nbytes,
            "random_ns_per_lookup": sorted(random_ns),
            "sequential_ns_per_entry": sorted(sequential_ns),
        }
        results.append(row)
        print(
            f"int32[{n:,}] ({array.nbytes / 1e6:.0f} MB): random {min(random_ns):.1f}-"
            f"{max(random_ns):.1f} ns/lookup, sequential {min(sequential_ns):.2f} ns/entry"
        )
    with open(args.out, "w") as f:
        json.dump({"lookups": args.lookups, "results": results}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
