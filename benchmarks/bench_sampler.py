"""Neighbour sampling: time per 1000-seed batch, fanouts 15,10,5, on SyntheticGraph.

Compares lightgraph's vectorised sampler (``sample_neighbors``, relabelling through a
node-sized buffer or with ``torch.unique``; without and with replacement), the same
through ``neighbor_loader`` (sampling + gathering ``x``/``y`` into ``Data`` batches), a
naive per-node Python loop, and PyG's compiled sampler when pyg-lib or torch-sparse is
importable. A second table compares the two ways of drawing ``k`` distinct neighbours
(Floyd's algorithm vs. sorting random keys) that ``sample_neighbors`` chooses between.

Run::

    python benchmarks/bench_sampler.py                      # 100k nodes / 1M edges
    python benchmarks/bench_sampler.py --num-nodes 100000 1000000 --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import lightgraph.functional.neighbor_sampling as ns
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.loader.neighbor_sampler import neighbor_loader
from lightgraph.functional.neighbor_sampling import sample_neighbors, to_csc
from lightgraph.utilities.imports import WITH_PYG_LIB, WITH_TORCH_SPARSE

FANOUTS = [15, 10, 5]


def naive_sample(indptr, indices, seeds, fanouts, generator):
    """Reference: a Python loop over the nodes of every hop (what not to do)."""
    local = {}
    node = []
    for s in seeds.tolist():
        if s not in local:
            local[s] = len(node)
        node.append(s)
    rows, cols = [], []
    frontier = list(range(len(node)))
    for k in fanouts:
        new = []
        for v_local in frontier:
            v = node[v_local]
            nbrs = indices[indptr[v] : indptr[v + 1]]
            if 0 < k < nbrs.numel():
                nbrs = nbrs[torch.randperm(nbrs.numel(), generator=generator)[:k]]
            for u in nbrs.tolist():
                if u not in local:
                    local[u] = len(node)
                    node.append(u)
                    new.append(local[u])
                rows.append(local[u])
                cols.append(v_local)
        frontier = new
    return torch.tensor(node), torch.tensor(rows), torch.tensor(cols)


def time_batches(fn: Callable[[torch.Tensor], object], seeds: list[torch.Tensor], sync) -> float:
    """Median seconds of ``fn(seed_batch)`` over the batches (after one warm-up)."""
    fn(seeds[0])
    times = []
    for s in seeds:
        sync()
        t0 = time.perf_counter()
        fn(s)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_graph(num_nodes: int, device: str, batches: int, naive_batches: int) -> list[tuple]:
    t0 = time.perf_counter()
    data = SyntheticGraph(num_nodes=num_nodes, avg_degree=10.0, seed=0).load()
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    indptr, indices = to_csc(data.edge_index.to(device), num_nodes)
    t_csc = time.perf_counter() - t0
    deg = indptr.diff()
    print(
        f"\n# SyntheticGraph: {num_nodes:,} nodes, {data.num_edges:,} edges, max in-degree "
        f"{int(deg.max())} (generated in {t_gen:.1f} s, CSC in {t_csc:.2f} s), device {device}"
    )
    g = torch.Generator().manual_seed(0)
    seeds = [torch.randperm(num_nodes, generator=g)[:1000].to(device) for _ in range(batches)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    buffer = torch.full((num_nodes,), -1, dtype=torch.long, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    rows = []

    def add(name, fn, seed_batches=seeds):
        out = fn(seed_batches[0])
        sec = time_batches(fn, seed_batches, sync)
        if hasattr(out, "edge_index"):  # a Data batch
            n_nodes, n_edges = out.num_nodes, out.num_edges
        elif hasattr(out, "node"):  # NeighborSample or PyG's SamplerOutput
            n_nodes, n_edges = out.node.numel(), out.row.numel()
        else:  # naive: (node, row, col)
            n_nodes, n_edges = out[0].numel(), out[1].numel()
        rows.append((f"{num_nodes:,}", name, sec * 1e3, n_nodes, n_edges))
        print(f"  {name:<44} {sec * 1e3:9.1f} ms/batch")

    for replace in (False, True):
        tag = "replace" if replace else "no replace"
        add(
            f"torch, node buffer, {tag}",
            lambda s, r=replace: sample_neighbors(indptr, indices, s, FANOUTS, r, gen, buffer),
        )
        add(
            f"torch, torch.unique relabel, {tag}",
            lambda s, r=replace: sample_neighbors(indptr, indices, s, FANOUTS, r, gen),
        )

    loader_data = data if device == "cpu" else data.to(device)
    loader = neighbor_loader(loader_data, FANOUTS, batch_size=1000, shuffle=True, seed=0)
    it = iter(loader)
    add("neighbor_loader (sample + gather x, y)", lambda s: next(it))

    if naive_batches:
        cpu_ptr, cpu_idx = indptr.cpu(), indices.cpu()
        add(
            "naive per-node Python loop",
            lambda s: naive_sample(cpu_ptr, cpu_idx, s.cpu(), FANOUTS, g),
            seeds[:naive_batches],
        )

    if WITH_PYG_LIB or WITH_TORCH_SPARSE:
        from torch_geometric.sampler import NeighborSampler, NodeSamplerInput

        pyg = NeighborSampler(data, num_neighbors=FANOUTS)
        add(
            "PyG NeighborSampler (compiled)",
            lambda s: pyg.sample_from_nodes(NodeSamplerInput(None, s.cpu())),
        )
    else:
        print("  (PyG's sampler skipped: neither pyg-lib nor torch-sparse is importable)")
    return rows


def bench_selection(device: str, batches: int) -> None:
    """Floyd vs. random keys for ``k`` distinct of ``deg`` neighbours (no replacement)."""
    data = SyntheticGraph(num_nodes=100_000, avg_degree=10.0, seed=0).load()
    indptr, indices = to_csc(data.edge_index.to(device), data.num_nodes)
    g = torch.Generator().manual_seed(1)
    seeds = [torch.randperm(data.num_nodes, generator=g)[:1000].to(device) for _ in range(batches)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    buffer = torch.full((data.num_nodes,), -1, dtype=torch.long, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    default = ns._KEYS_COST
    print("\n# k distinct neighbours: Floyd vs. random keys (100k graph, ms per 1000-seed batch)")
    print(f"  {'fanouts':<14} {'auto':>9} {'Floyd only':>11} {'keys only':>10}")
    try:
        for fanouts in ([15, 10, 5], [50, 25], [100]):
            cells = []
            for cost in (default, 1 << 40, 0):  # auto; never keys; always keys
                ns._KEYS_COST = cost
                sec = time_batches(
                    lambda s, f=fanouts: sample_neighbors(
                        indptr, indices, s, f, False, gen, buffer
                    ),
                    seeds,
                    sync,
                )
                cells.append(sec * 1e3)
            print(f"  {str(fanouts):<14} {cells[0]:9.1f} {cells[1]:11.1f} {cells[2]:10.1f}")
    finally:
        ns._KEYS_COST = default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", type=int, default=20, help="timed batches per row")
    parser.add_argument("--naive-batches", type=int, default=3, help="0 skips the naive loop")
    parser.add_argument("--no-selection", action="store_true", help="skip Floyd vs. keys")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: as one loader worker)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, fanouts {FANOUTS}")
    rows = []
    for n in args.num_nodes:
        rows += bench_graph(n, args.device, args.batches, args.naive_batches)
    print(f"\n{'nodes':>10} | {'sampler':<44} | {'ms/batch':>9} | {'nodes':>7} | {'edges':>7}")
    print("-" * 92)
    for n, name, ms, nn, ne in rows:
        print(f"{n:>10} | {name:<44} | {ms:9.1f} | {nn:7d} | {ne:7d}")
    if not args.no_selection:
        bench_selection(args.device, args.batches)


if __name__ == "__main__":
    main()
