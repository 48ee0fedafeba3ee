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
