from __future__ import annotations

import pytest
import torch

from lightgraph.data import SyntheticGraph, partition_graph


def test_metis_cuts_fewer_edges_than_random() -> None:
    data = SyntheticGraph(num_nodes=2000, avg_degree=10, seed=1).load()
    src, dst = data.edge_index

    def cut(part: torch.Tensor) -> float:
        return float((part[src] != part[dst]).float().mean())

    metis = partition_graph(data.edge_index, data.num_nodes, 4, "metis")
    rand = partition_graph(data.edge_index, data.num_nodes, 4, "random")
    assert cut(metis) < 0.6 * cut(rand)
    for part in (metis, rand):
        sizes = torch.bincount(part, minlength=4)
        assert int(sizes.min()) > 0 and int(sizes.max()) <= 1.1 * data.num_nodes / 4


def test_random_is_balanced_and_seeded() -> None:
    ei = torch.empty(2, 0, dtype=torch.long)
    a = partition_graph(ei, 10, 3, "random", seed=5)
    b = partition_graph(ei, 10, 3, "random", seed=5)
    assert torch.equal(a, b)
    assert sorted(torch.bincount(a).tolist()) == [3, 3, 4]


def test_metis_on_graph_without_edges_fills_every_part() -> None:
    part = partition_graph(torch.empty(2, 0, dtype=torch.long), 8, 4, "metis")
    assert torch.bincount(part, minlength=4).min() > 0


def test_single_part() -> None:
    assert torch.equal(
        partition_graph(torch.tensor([[0], [1]]), 2, 1), torch.zeros(2, dtype=torch.long)
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"method": "spectral"},
            "`method` to be one of \\('metis', 'random'\\) but got 'spectral'",
        ),
        ({"num_parts": 0}, "`num_parts` >= 1 but got 0"),
        ({"num_parts": 11}, "`num_parts` <= num_nodes \\(10\\).*got num_parts=11"),
    ],
)
def test_bad_input(kwargs, match) -> None:
    args = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 10, "num_parts": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        partition_graph(**args)


def test_random_partition_does_not_copy_the_generators_communities() -> None:
    # Both default to seed 0: a random partition must still cut about (1 - 1/P) of the edges.
    data = SyntheticGraph(num_nodes=2000, avg_degree=10).load()
    part = partition_graph(data.edge_index, data.num_nodes, 4, "random")
    src, dst = data.edge_index
    assert abs(float((part[src] != part[dst]).float().mean()) - 0.75) < 0.05
