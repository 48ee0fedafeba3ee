"""Token batches and models shared by the graph-transformer test files."""

from __future__ import annotations

import torch

from lightgraph.data import GraphSetDataModule, SyntheticGraphSet
from lightgraph.data.loader.token_batch import TokenBatch
from lightgraph.data.partition.sequences import build_sequence
from lightgraph.nn.models.graphormer import Graphormer
from lightgraph.nn.models.gt import GT

F_IN, OUT = 5, 3


def sequence(n: int = 24, seed: int = 0, pe_dim: int = 4, **kwargs) -> TokenBatch:
    """A node sequence of a random graph with random float64 features and ``lap_pe``."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, 3 * n), generator=gen)
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    x = torch.randn(n, F_IN, generator=gen, dtype=torch.float64)
    item = build_sequence(x, edge_index, y=torch.randint(0, OUT, (n,), generator=gen), **kwargs)
    item.lap_pe = torch.randn(item.num_tokens, pe_dim, generator=gen, dtype=torch.float64)
    return item


def graph_batch(batch_size: int = 4) -> TokenBatch:
    """The first training batch of a small graph set (``lap_pe`` of 4 columns)."""
    dm = GraphSetDataModule(
        SyntheticGraphSet(num_graphs=8, num_features=F_IN, feature_noise=1.0),
        batch_size=batch_size,
        pe_dim=4,
    )
    dm.setup()
    return next(iter(dm._loader("train", shuffle=False)))


def models(kind: str, task: str = "node", **kwargs) -> list[torch.nn.Module]:
    """A small float64 Graphormer and GT (seeded)."""
    torch.manual_seed(0)
    size = {"hidden_channels": 16, "num_layers": 2, "heads": 4}
    return [
        Graphormer(
            F_IN, OUT, kind=kind, task=task, dropout=0.0, attention_dropout=0.0, **size, **kwargs
        ).double(),
        GT(F_IN, OUT, kind=kind, task=task, pe_dim=4, **size, **kwargs).double(),
    ]
