"""Hub selection against a dense matrix power of the lazy reverse walk."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightgraph.data.partition.hubs import hub_scores, select_hubs


def dense_scores(edge_index, num_nodes, train_mask, walk_length, laziness) -> np.ndarray:
    """Ã^L e_B with Ã = lambda I + (1 - lambda) A D_in^-1 built densely (sources keep
    the walker), raised with np.linalg.matrix_power."""
    adj = np.zeros((num_nodes, num_nodes))
    np.add.at(adj, (edge_index[0].numpy(), edge_index[1].numpy()), 1.0)
    in_degree = adj.sum(0)
    walk = np.where(in_degree > 0, adj / np.where(in_degree > 0, in_degree, 1.0), np.eye(num_nodes))
    trans = laziness * np.eye(num_nodes) + (1 - laziness) * walk
    assert np.allclose(trans.sum(0), 1.0)  # column-stochastic
    return np.linalg.matrix_power(trans, walk_length) @ train_mask.numpy().astype(float)


def _graph(num_nodes=40, num_edges=120, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)  # loops, repeats
    edge_index[1][edge_index[1] == 0] = 1  # node 0 has no in-neighbours
    train_mask = torch.rand(num_nodes, generator=gen) < 0.3
    return edge_index, train_mask


@pytest.mark.parametrize(
    "walk_length,laziness", [(0, 0.5), (1, 0.5), (3, 0.5), (4, 0.0), (2, 0.9), (3, 1.0)]
)
def test_scores_equal_dense_matrix_power(walk_length, laziness):
    edge_index, train_mask = _graph(seed=walk_length)
    got = hub_scores(edge_index, 40, train_mask, walk_length, laziness)
    want = dense_scores(edge_index, 40, train_mask, walk_length, laziness)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert math.isclose(float(got.sum()), int(train_mask.sum()))  # the walk keeps its mass


@pytest.mark.parametrize("fraction", [0.05, 0.1, 0.25, 0.5])
def test_hubs_are_the_top_scored_nodes_of_the_dense_walk(fraction):
    edge_index, train_mask = _graph(num_nodes=60, num_edges=200, seed=1)
    hubs = select_hubs(edge_index, 60, train_mask, fraction=fraction)
    want = dense_scores(edge_index, 60, train_mask, 3, 0.5)
    assert hubs.dtype == torch.long and torch.equal(hubs, hubs.sort().values)
    assert hubs.numel() == math.ceil(fraction * 60) == len(set(hubs.tolist()))
    chosen = np.zeros(60, dtype=bool)
    chosen[hubs.numpy()] = True
    assert want[chosen].min() >= want[~chosen].max() - 1e-12
    # Without near-ties the set is exactly the dense top-k.
    top = np.sort(np.argsort(-want, kind="stable")[: hubs.numel()])
    assert np.array_equal(hubs.numpy(), top)


def test_hand_computed_path():
    # 0 -> 1 -> 2, walk from node 2: half stays, half steps back to its in-neighbour 1.
    edge_index = torch.tensor([[0, 1], [1, 2]])
    train = torch.tensor([False, False, True])
    assert hub_scores(edge_index, 3, train, 1, 0.5).tolist() == [0.0, 0.5, 0.5]
    # Two steps: 0.25 at 2, 0.25 + 0.25 at 1, 0.25 at 0.
    assert hub_scores(edge_index, 3, train, 2, 0.5).tolist() == [0.25, 0.5, 0.25]
    assert select_hubs(edge_index, 3, train, fraction=0.3, walk_length=2).tolist() == [1]


def test_ties_go_to_smaller_ids_and_fraction_bounds():
    edge_index = torch.empty(2, 0, dtype=torch.long)
    train = torch.tensor([False, True, False, True, True, False])
    # No edges: scores are the training mask; 2 of the 3 tied training nodes, lowest ids.
    assert select_hubs(edge_index, 6, train, fraction=0.3).tolist() == [1, 3]
    assert select_hubs(edge_index, 6, train, fraction=0.0).numel() == 0
    assert select_hubs(edge_index, 6, train, fraction=1.0).tolist() == list(range(6))
    assert select_hubs(edge_index, 6, train, fraction=0.01).tolist() == [1]  # ceil


def test_hubs_prefer_the_in_neighbours_of_many_training_nodes():
    # A star whose centre 0 feeds 20 training leaves: the centre is the top hub.
    leaves = torch.arange(1, 21)
    edge_index = torch.stack([torch.zeros(20, dtype=torch.long), leaves])
    train = torch.ones(21, dtype=torch.bool)
    train[0] = False
    assert select_hubs(edge_index, 21, train, fraction=0.01).tolist() == [0]


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            {"fraction": -0.1},
            ValueError,
            "select_hubs: expected `fraction` in \\[0, 1\\] but got -0.1",
        ),
        (
            {"fraction": 1.5},
            ValueError,
            "select_hubs: expected `fraction` in \\[0, 1\\] but got 1.5",
        ),
        ({"laziness": 1.2}, ValueError, "`laziness` in \\[0, 1\\] but got 1.2"),
        ({"walk_length": -1}, ValueError, "`walk_length` to be an integer >= 0 but got -1"),
        ({"walk_length": 2.0}, ValueError, "`walk_length` to be an integer >= 0 but got 2.0"),
        (
            {"train_mask": torch.ones(3)},
            ValueError,
            "`train_mask` to be a boolean tensor of shape \\(3,\\)",
        ),
        (
            {"train_mask": torch.ones(4, dtype=torch.bool)},
            ValueError,
            "shape \\(3,\\) but got shape \\(4,\\)",
        ),
        ({"train_mask": [True, False, True]}, TypeError, "`train_mask` to be a Tensor"),
        (
            {"edge_index": torch.tensor([[0, 3], [1, 0]])},
            ValueError,
            "node ids in `edge_index` to lie in \\[0, 2\\]",
        ),
    ],
)
def test_bad_input(kwargs, error, match):
    args = {
        "edge_index": torch.tensor([[0, 1], [1, 2]]),
        "num_nodes": 3,
        "train_mask": torch.tensor([True, False, True]),
    }
    args.update(kwargs)
    with pytest.raises(error, match=match):
        select_hubs(**args)


def test_exclude_keeps_nodes_out_and_takes_the_next_best() -> None:
    g = torch.Generator().manual_seed(7)
    n = 200
    edge_index = torch.randint(0, n, (2, 1200), generator=g)
    train = torch.rand(n, generator=g) < 0.3
    scores = hub_scores(edge_index, n, train, walk_length=3).numpy()
    hubs = select_hubs(edge_index, n, train, fraction=0.05, walk_length=3, exclude=train)
    assert hubs.numel() == 10 and not train[hubs].any()
    eligible = [v for v in np.argsort(-scores, kind="stable").tolist() if not train[v]]
    assert hubs.tolist() == sorted(eligible[:10])
    # Fewer eligible nodes than asked: all of them.
    almost_all = torch.ones(n, dtype=torch.bool)
    almost_all[:3] = False
    assert select_hubs(edge_index, n, train, fraction=0.5, exclude=almost_all).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="exclude"):
        select_hubs(edge_index, n, train, exclude=train[:10])
