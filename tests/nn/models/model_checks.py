"""Shared checks for the model test files."""

from __future__ import annotations

import torch

from lightgraph.nn import PartitionedGraph
from tests.graphs import tricky_graph


def run_model(
    model: torch.nn.Module, num_features: int = 6
) -> tuple[torch.Tensor, PartitionedGraph]:
    data, _ = tricky_graph(1, num_features=num_features)
    graph = PartitionedGraph.from_data(data)
    model = model.double()
    out = model(data.x, graph)
    out.sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"
    return out, graph


def dropout_is_active(model: torch.nn.Module) -> bool:
    """Training mode with dropout changes the output; eval mode is deterministic."""
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    model = model.double()
    model.eval()
    a, b = model(data.x, graph), model(data.x, graph)
    assert torch.equal(a, b)
    model.train()
    torch.manual_seed(0)
    return not torch.equal(model(data.x, graph), a)
