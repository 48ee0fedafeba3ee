"""Tests of the synthetic graph generator."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.datasets.synthetic_graph import (
    DEFAULT_FEATURE_NOISE,
    SyntheticGraph,
    default_num_communities,
    generate_synthetic_graph,
)

TENSOR_KEYS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask", "community")


@pytest.fixture(scope="module")
def default_graph() -> Data:
    return SyntheticGraph().load()


def _degrees(data: Data) -> torch.Tensor:
    return torch.bincount(data.edge_index[0], minlength=data.num_nodes)


def _hill_exponent(degree: torch.Tensor, k_min: float) -> float:
    """Maximum-likelihood (Hill) estimate of gamma in P(k) ~ k^-gamma for k >= k_min."""
    tail = degree[degree >= k_min].double()
    return 1.0 + tail.numel() / torch.log(tail / (k_min - 0.5)).sum().item()


def test_is_a_graph_dataset_with_static_metadata() -> None:
    graph = SyntheticGraph(num_classes=5, num_features=17, multilabel=True)
    assert isinstance(graph, GraphDataset)
    assert (graph.num_classes, graph.num_features, graph.multilabel) == (5, 17, True)
    assert SyntheticGraph().feature_noise == DEFAULT_FEATURE_NOISE


def test_default_graph_layout(default_graph: Data) -> None:
    graph = SyntheticGraph()
    validate_graph(default_graph, graph.num_classes, graph.multilabel)
    assert default_graph.num_nodes == 20000
    assert default_graph.x.dtype == torch.float32
    assert default_graph.x.shape == (20000, 64)
    assert default_graph.y.dtype == torch.long and default_graph.y.shape == (20000,)
    assert set(default_graph.y.unique().tolist()) == set(range(8))
    assert default_graph.edge_index.dtype == torch.long
    # Exactly avg_degree * num_nodes directed edges.
    assert default_graph.edge_index.size(1) == 20000 * 20


def test_undirected_sorted_no_self_loops_no_duplicates(default_graph: Data) -> None:
    row, col = default_graph.edge_index
    n = default_graph.num_nodes
    assert not bool((row == col).any())
    keys = row * n + col
    assert bool((keys[1:] > keys[:-1]).all())  # sorted by (row, col) and no duplicates
    reverse = torch.sort(col * n + row).values
    assert torch.equal(keys, reverse)


def test_same_seed_is_bit_identical_and_leaves_global_rng_alone() -> None:
    state = torch.get_rng_state()
    first = generate_synthetic_graph(num_nodes=3000, avg_degree=8.0, seed=7)
    second = SyntheticGraph(num_nodes=3000, avg_degree=8.0, seed=7).load()
    assert torch.equal(state, torch.get_rng_state())
    for key in TENSOR_KEYS:
        assert torch.equal(first[key], second[key]), key


def test_different_seeds_differ() -> None:
    first = generate_synthetic_graph(num_nodes=3000, avg_degree=8.0, seed=0)
    second = generate_synthetic_graph(num_nodes=3000, avg_degree=8.0, seed=1)
    assert first.edge_index.shape == second.edge_index.shape
    assert not torch.equal(first.edge_index, second.edge_index)
    assert not torch.equal(first.x, second.x)
    assert not torch.equal(first.train_mask, second.train_mask)


def test_degrees_are_heavy_tailed(default_graph: Data) -> None:
    degree = _degrees(default_graph).double()
    assert degree.max() >= 10 * degree.mean()
    # A power law, not a Poisson: plenty of nodes far above the mean.
    assert (degree >= 3 * degree.mean()).double().mean() > 0.02


@pytest.mark.parametrize("exponent", [2.2, 2.5, 3.0])
def test_tail_exponent_matches(exponent: float) -> None:
    data = generate_synthetic_graph(num_nodes=20000, avg_degree=20.0, power_law_exponent=exponent)
    estimate = _hill_exponent(_degrees(data), k_min=40)
    # The structural cut-off and repeated pairs steepen the tail a little.
    assert exponent - 0.15 < estimate < exponent + 0.4


def test_tail_exponent_orders_graphs() -> None:
    estimates = [
        _hill_exponent(
            _degrees(generate_synthetic_graph(num_nodes=10000, power_law_exponent=g)), 40
        )
        for g in (2.2, 3.5)
    ]
    assert estimates[0] + 0.5 < estimates[1]


@pytest.mark.parametrize("homophily", [0.0, 0.3, 0.8, 1.0])
def test_edge_homophily_matches(homophily: float) -> None:
    data = generate_synthetic_graph(num_nodes=4000, avg_degree=10.0, homophily=homophily, seed=3)
    row, col = data.edge_index
    intra = (data.community[row] == data.community[col]).double().mean().item()
    assert intra == pytest.approx(homophily, abs=1e-3)


def test_labels_follow_communities(default_graph: Data) -> None:
    assert torch.equal(default_graph.y, default_graph.community % 8)
    assert int(default_graph.community.max()) + 1 == 32  # default 4 * num_classes
    row, col = default_graph.edge_index
    agreement = (default_graph.y[row] == default_graph.y[col]).double().mean().item()
    chance = (
        (torch.bincount(default_graph.y).double() / default_graph.num_nodes).pow(2).sum().item()
    )
    assert agreement >= 0.8
    assert chance < 0.2


def test_features_are_class_dependent_but_noisy(default_graph: Data) -> None:
    x, y = default_graph.x, default_graph.y
    train, test = default_graph.train_mask, default_graph.test_mask
    centroids = torch.stack([x[train & (y == c)].mean(0) for c in range(8)])
    accuracy = (torch.cdist(x[test], centroids).argmin(1) == y[test]).double().mean().item()
    assert 2 / 8 < accuracy < 0.75


def test_masks_follow_ratios() -> None:
    data = generate_synthetic_graph(num_nodes=1000, avg_degree=5.0, train_ratio=0.5, val_ratio=0.3)
    train, val, test = data.train_mask, data.val_mask, data.test_mask
    assert (int(train.sum()), int(val.sum()), int(test.sum())) == (500, 300, 200)
    assert not bool((train & val).any() or (train & test).any() or (val & test).any())
    assert bool((train | val | test).all())


def test_multilabel_mode() -> None:
    graph = SyntheticGraph(num_nodes=5000, avg_degree=10.0, num_classes=20, multilabel=True)
    data = graph.load()
    validate_graph(data, 20, True)
    assert data.y.dtype == torch.float32 and data.y.shape == (5000, 20)
    assert set(data.y.unique().tolist()) <= {0.0, 1.0}
    labels_per_node = data.y.sum(1)
    assert 1.5 < labels_per_node.mean().item() < 3.5
    assert 0.05 < data.y.mean().item() < 0.2
    # Every node keeps its community's main label with probability ~0.9.
    main = data.y[torch.arange(5000), data.community % 20]
    assert 0.85 < main.mean().item() < 0.95
    # Features are the sum of label centroids plus noise: more labels, larger norm.
    x_norm = data.x.norm(dim=1)
    assert x_norm[labels_per_node >= 3].mean() > x_norm[labels_per_node <= 1].mean()


@pytest.mark.parametrize("multilabel", [False, True])
def test_small_graph(multilabel: bool) -> None:
    data = SyntheticGraph(num_nodes=200, multilabel=multilabel).load()
    validate_graph(data, 8, multilabel)
    assert data.edge_index.size(1) == 200 * 20
    assert default_num_communities(200, 20.0, 8) == 8
    row, col = data.edge_index
    assert (data.community[row] == data.community[col]).double().mean().item() == pytest.approx(0.8)


def test_tiny_and_sparse_graphs() -> None:
    data = generate_synthetic_graph(num_nodes=10, avg_degree=1.0, num_classes=2, num_features=3)
    validate_graph(data, 2, False)
    assert data.edge_index.size(1) == 10
    sparse = generate_synthetic_graph(num_nodes=500, avg_degree=0.5, homophily=1.0)
    validate_graph(sparse, 8, False)


def test_fingerprint_encodes_every_argument() -> None:
    base = SyntheticGraph()
    assert base.fingerprint() == SyntheticGraph(avg_degree=20).fingerprint()
    assert base.fingerprint().startswith("SyntheticGraph(v")
    changes = {
        "num_nodes": 1000,
        "avg_degree": 10.0,
        "num_classes": 4,
        "num_features": 8,
        "num_communities": 8,
        "homophily": 0.5,
        "power_law_exponent": 3.0,
        "feature_noise": 0.1,
        "multilabel": True,
        "train_ratio": 0.5,
        "val_ratio": 0.1,
        "seed": 1,
    }
    fingerprints = {base.fingerprint()}
    for key, value in changes.items():
        fingerprint = SyntheticGraph(**{key: value}).fingerprint()
        assert f"{key}={value!r}" in fingerprint
        fingerprints.add(fingerprint)
    assert len(fingerprints) == len(changes) + 1


BAD_ARGUMENTS = [
    ("num_nodes", 5),
    ("num_nodes", 2000.5),
    ("num_nodes", True),
    ("avg_degree", 0.0),
    ("avg_degree", 20000.0),
    ("avg_degree", math.inf),
    ("num_classes", 1),
    ("num_classes", "8"),
    ("num_features", 0),
    ("num_communities", 4),
    ("num_communities", 30000),
    ("homophily", 1.5),
    ("homophily", -0.1),
    ("power_law_exponent", 2.0),
    ("power_law_exponent", math.nan),
    ("feature_noise", -1.0),
    ("multilabel", "yes"),
    ("train_ratio", 0.0),
    ("train_ratio", 1.0),
    ("val_ratio", -0.1),
    ("val_ratio", 0.5),
    ("seed", -1),
    ("seed", 1.5),
]


@pytest.mark.parametrize(("name", "value"), BAD_ARGUMENTS)
def test_bad_arguments_raise(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^SyntheticGraph: expected `{name}` .* but got "):
        SyntheticGraph(**{name: value})
    with pytest.raises(ValueError, match=rf"`{name}`"):
        generate_synthetic_graph(**{name: value})
