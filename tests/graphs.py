"""Small hand-built graphs shared by the tests."""

from __future__ import annotations

import torch
from torch_geometric.data import Data


def tricky_graph(
    num_parts: int, num_nodes: int = 60, num_features: int = 6, num_classes: int = 3, seed: int = 0
) -> tuple[Data, torch.Tensor]:
    """A directed random graph with the corner cases partitioning must survive.

    * node 0 (partition 0) has in-neighbours only in other partitions;
    * the last 5 nodes are isolated;
    * a few self-loops, one of them duplicated, and duplicate edges.

    Returns the graph and the injected partition vector (``node % num_parts``).
    """
    gen = torch.Generator().manual_seed(seed)
    active = num_nodes - 5
    ei = torch.randint(0, active, (2, 4 * num_nodes), generator=gen)
    ei = ei[:, ei[1] != 0]  # node 0: rebuilt below from remote sources only
    remote = torch.tensor([j for j in range(1, active) if j % num_parts != 0][:4], dtype=torch.long)
    to_zero = torch.stack([remote, torch.zeros_like(remote)])
    loops = torch.tensor([[3, 3, 7, 11], [3, 3, 7, 11]])
    dup = ei[:, :5]
    edge_index = torch.cat([ei, to_zero, loops, dup], dim=1)
    n = num_nodes
    data = Data(
        x=torch.randn(n, num_features, generator=gen, dtype=torch.float64),
        y=torch.randint(0, num_classes, (n,), generator=gen),
        edge_index=edge_index,
        train_mask=torch.rand(n, generator=gen) < 0.6,
        val_mask=torch.rand(n, generator=gen) < 0.2,
        test_mask=torch.rand(n, generator=gen) < 0.2,
    )
    partition = torch.arange(n) % num_parts
    return data, partition


def hop_ordered_sample(
    edges: list[tuple[int, int]], seeds: list[int], num_hops: int
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int]]:
    """Every in-neighbour (over ``edges``, ``(source, target)`` pairs) of every node up to
    ``num_hops`` hops from ``seeds``, in PyG's hop-ordered layout: nodes ordered by the hop
    that first reached them, edges grouped by the hop of their target.

    Returns ``(nodes, local edge_index, nodes per hop, edges per hop)``.
    """
    hop = {s: 0 for s in seeds}
    order, frontier = list(seeds), list(seeds)
    nodes_per_hop, edges_per_hop, sampled = [len(seeds)], [], []
    for h in range(num_hops):
        new, count = [], 0
        for v in frontier:
            for u, w in edges:
                if w != v:
                    continue
                sampled.append((u, v))
                count += 1
                if u not in hop:
                    hop[u] = h + 1
                    new.append(u)
                    order.append(u)
        nodes_per_hop.append(len(new))
        edges_per_hop.append(count)
        frontier = new
    pos = {n: i for i, n in enumerate(order)}
    local = torch.tensor([[pos[u] for u, _ in sampled], [pos[v] for _, v in sampled]])
    return torch.tensor(order), local, nodes_per_hop, edges_per_hop
