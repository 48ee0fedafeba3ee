from __future__ import annotations

import pytest
import torch

from lightgraph.data import SyntheticGraph, partition_graph

# check_int's wording for the lower bound 1 (regex).
POSITIVE = "(a positive integer|an integer >= 1)"


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
            "`method` to be one of \\('metis', 'random', 'gap'\\) but got 'spectral'",
        ),
        ({"num_parts": 0}, "`num_parts` to be " + POSITIVE + " but got 0"),
        ({"num_parts": 2.0}, "`num_parts` to be " + POSITIVE + " but got 2.0"),
        ({"num_parts": True}, "`num_parts` to be " + POSITIVE + " but got True"),
        ({"num_parts": 11}, "`num_parts` <= num_nodes \\(10\\).*got num_parts=11"),
        ({"num_nodes": -1}, "`num_nodes` to be an integer >= 0 but got -1"),
        ({"num_nodes": "10"}, "`num_nodes` to be an integer >= 0 but got '10'"),
        # The bug this guards: ids out of range used to fail deep inside METIS/bincount with
        # "provided out is the wrong size for the accumulation".
        (
            {"edge_index": torch.tensor([[0, 10], [1, 0]])},
            "node ids in `edge_index` to lie in \\[0, 9\\] \\(num_nodes = 10\\) but found "
            "values in \\[0, 10\\]",
        ),
        (
            {"edge_index": torch.tensor([[0, -1], [1, 0]])},
            "node ids in `edge_index` to lie in \\[0, 9\\].*found values in \\[-1, 1\\]",
        ),
        (
            {"edge_index": torch.tensor([[0, 12], [1, 0]]), "method": "random"},
            "node ids in `edge_index` to lie in \\[0, 9\\]",
        ),
        (
            {"edge_index": torch.tensor([0, 1, 1, 0])},
            "`edge_index` to be an integer tensor of shape \\[2, num_edges\\] but got shape "
            "\\(4,\\) and dtype torch.int64",
        ),
        (
            {"edge_index": torch.tensor([[0, 1], [1, 0], [0, 0]])},
            "`edge_index` to be an integer tensor of shape \\[2, num_edges\\] but got shape "
            "\\(3, 2\\)",
        ),
        (
            {"edge_index": torch.tensor([[0.0, 1.0], [1.0, 0.0]])},
            "`edge_index` to be an integer tensor .* dtype torch.float32",
        ),
        (
            {"edge_index": torch.tensor([[True], [False]])},
            "`edge_index` to be an integer tensor .* dtype torch.bool",
        ),
    ],
)
def test_bad_input(kwargs, match) -> None:
    args = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 10, "num_parts": 2, **kwargs}
    with pytest.raises(ValueError, match="^partition_graph: expected " + match):
        partition_graph(**args)


def test_edge_index_must_be_a_tensor() -> None:
    with pytest.raises(
        TypeError,
        match="partition_graph: expected `edge_index` to be an integer "
        "torch.Tensor of shape \\[2, num_edges\\] but got list",
    ):
        partition_graph([[0, 1], [1, 0]], 10, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["metis", "random"])
def test_int32_edge_index_is_accepted(method) -> None:
    data = SyntheticGraph(num_nodes=200, avg_degree=6, seed=2).load()
    a = partition_graph(data.edge_index.int(), data.num_nodes, 3, method)
    b = partition_graph(data.edge_index, data.num_nodes, 3, method)
    assert a.dtype == torch.long and torch.equal(a, b)


def test_random_partition_does_not_copy_the_generators_communities() -> None:
    # Both default to seed 0: a random partition must still cut about (1 - 1/P) of the edges.
    data = SyntheticGraph(num_nodes=2000, avg_degree=10).load()
    part = partition_graph(data.edge_index, data.num_nodes, 4, "random")
    src, dst = data.edge_index
    assert abs(float((part[src] != part[dst]).float().mean()) - 0.75) < 0.05


# ------------------------------------------ build_partition_plans: checks at the entry point
# (kept here while PartitionPlan is being refactored; they only exercise the entry checks)
@pytest.mark.parametrize(
    "mutate,error,match",
    [
        (
            lambda d, p, n: ("not a graph", p, n),
            TypeError,
            "expected `data` to be a Data \\(a torch_geometric Data in the GraphDataset layout\\) "
            "but got str",
        ),
        (
            lambda d, p, n: (d, p, 0),
            ValueError,
            "expected `num_parts` to be " + POSITIVE + " but got 0",
        ),
        (
            lambda d, p, n: (d, p, "2"),
            ValueError,
            "expected `num_parts` to be " + POSITIVE + " but got '2'",
        ),
        (
            lambda d, p, n: (d, p, True),
            ValueError,
            "expected `num_parts` to be " + POSITIVE + " but got True",
        ),
        (
            lambda d, p, n: (d.update({"edge_index": d.edge_index + 100}) or d, p, n),
            ValueError,
            "invalid `data`: expected node indices in `edge_index` to lie in \\[0, 59\\] "
            "\\(num_nodes = x.size\\(0\\) = 60\\) but found values in \\[100, \\d+\\]",
        ),
        (
            lambda d, p, n: (d.update({"edge_index": d.edge_index - 1}) or d, p, n),
            ValueError,
            "invalid `data`: expected node indices in `edge_index` to lie in \\[0, 59\\].*\\[-1, ",
        ),
        (
            lambda d, p, n: (d.update({"edge_index": d.edge_index.float()}) or d, p, n),
            ValueError,
            "invalid `data`: expected `edge_index` to be a torch.long tensor of shape "
            "\\[2, num_edges\\] but got shape \\(2, \\d+\\) and dtype torch.float32",
        ),
        (
            lambda d, p, n: (d.update({"train_mask": None}) or d, p, n),
            ValueError,
            "invalid `data`: the graph has no `train_mask`",
        ),
    ],
)
def test_build_partition_plans_checks_its_arguments_first(mutate, error, match) -> None:
    from lightgraph.data.partition import build_partition_plans
    from tests.graphs import tricky_graph

    data, part = tricky_graph(2)
    data, part, num_parts = mutate(data, part, 2)
    with pytest.raises(error, match="^build_partition_plans: " + match):
        build_partition_plans(data, part, num_parts)
