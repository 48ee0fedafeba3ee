"""Affinity microbatches: an exact partition of the nodes, intra-microbatch edges checked
against the original edge list, METIS cutting fewer edges than random ids, the M rule."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lightgraph.data.datasets import generate_synthetic_graph
from lightgraph.data.partition import (
    AffinityMicrobatches,
    affinity_microbatches,
    default_num_microbatches,
)
from tests.graphs import tricky_graph


def _community_graph() -> tuple[Tensor, int]:
    data = generate_synthetic_graph(
        num_nodes=400, avg_degree=8.0, num_classes=4, num_features=4, homophily=0.9, seed=3
    )
    return data.edge_index, data.num_nodes


def _expected_edges(edge_index: Tensor, members: Tensor, num_nodes: int) -> Tensor:
    """The original edges with both ends among ``members``, in local ids (position in
    ``members``), written from the original edge list edge by edge."""
    local = {int(v): i for i, v in enumerate(members.tolist())}
    kept = [(local[s], local[d]) for s, d in edge_index.t().tolist() if s in local and d in local]
    return torch.tensor(kept, dtype=torch.long).t().reshape(2, -1)


@pytest.mark.parametrize("reorder", ["metis", "random", "none"])
@pytest.mark.parametrize("num_microbatches", [1, 3, 4])
def test_microbatches_partition_the_nodes_and_keep_the_intra_edges(
    reorder, num_microbatches
) -> None:
    data, _ = tricky_graph(num_parts=2, num_nodes=60)  # self-loops, duplicates, isolated nodes
    edge_index, n = data.edge_index, data.num_nodes
    mb = affinity_microbatches(edge_index, n, num_microbatches, reorder=reorder, seed=1)
    assert isinstance(mb, AffinityMicrobatches)
    assert mb.num_microbatches == num_microbatches and mb.num_nodes == n
    # order is a permutation and position its inverse.
    assert torch.equal(torch.sort(mb.order).values, torch.arange(n))
    assert torch.equal(mb.order[mb.position], torch.arange(n))
    # Contiguous, non-empty microbatches that cover every node exactly once.
    assert mb.bounds[0] == 0 and mb.bounds[-1] == n
    assert all(size > 0 for size in mb.sizes) and sum(mb.sizes) == n
    assert mb.n_max == max(mb.sizes)
    members = [mb.order[mb.bounds[m] : mb.bounds[m + 1]] for m in range(num_microbatches)]
    assert torch.equal(torch.sort(torch.cat(members)).values, torch.arange(n))
    owner = mb.microbatch_of()
    for m, nodes in enumerate(members):
        assert bool((owner[nodes] == m).all())
    # Local edges: exactly the original edges inside the microbatch (multiset and order).
    kept = 0
    for m, nodes in enumerate(members):
        expected = _expected_edges(edge_index, nodes, n)
        assert torch.equal(mb.edge_indices[m], expected), f"microbatch {m}"
        kept += expected.size(1)
    cut = sum(int(owner[s] != owner[d]) for s, d in edge_index.t().tolist())
    assert mb.num_cut_edges == cut and mb.num_kept_edges == kept
    assert kept + cut == edge_index.size(1)
    if num_microbatches == 1:
        assert mb.num_cut_edges == 0


def test_equal_chunks_and_identity_order() -> None:
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 0]])
    mb = affinity_microbatches(edge_index, 7, 3, reorder="none")
    assert torch.equal(mb.order, torch.arange(7))
    assert mb.sizes == [3, 2, 2] and mb.n_max == 3
    assert [e.tolist() for e in mb.edge_indices] == [[[0, 1], [1, 2]], [[0], [1]], [[0], [1]]]
    assert mb.num_cut_edges == 3  # 2->3, 4->5, 6->0
    rnd = affinity_microbatches(edge_index, 7, 3, reorder="random", seed=5)
    assert rnd.sizes == [3, 2, 2] and not torch.equal(rnd.order, torch.arange(7))
    assert torch.equal(affinity_microbatches(edge_index, 7, 3, "random", seed=5).order, rnd.order)


def test_metis_cuts_fewer_edges_than_random_ids() -> None:
    edge_index, n = _community_graph()
    for m in (2, 4):
        metis = affinity_microbatches(edge_index, n, m, reorder="metis")
        rnd = affinity_microbatches(edge_index, n, m, reorder="random")
        assert metis.num_cut_edges < 0.5 * rnd.num_cut_edges, (m, metis, rnd)
        # METIS parts are balanced (within METIS' default 3 % imbalance, rounded up).
        assert metis.n_max <= 1.05 * n / m + 1


def test_metis_order_makes_clusters_contiguous() -> None:
    """Within a microbatch, neighbours sit closer in the new order than in random order."""
    edge_index, n = _community_graph()
    metis = affinity_microbatches(edge_index, n, 1, reorder="metis")
    rnd = affinity_microbatches(edge_index, n, 1, reorder="random")

    def span(mb: AffinityMicrobatches) -> float:
        e = mb.edge_indices[0]
        return float((e[0] - e[1]).abs().double().mean())

    assert span(metis) < 0.6 * span(rnd)


def test_pad_and_unpad() -> None:
    data, _ = tricky_graph(num_parts=2, num_nodes=60)
    mb = affinity_microbatches(data.edge_index, data.num_nodes, 4, reorder="metis")
    x = torch.randn(data.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    padded = mb.pad(x, fill=-7.0)
    assert padded.shape == (4 * mb.n_max, 3)
    for m in range(4):
        start, end = int(mb.bounds[m]), int(mb.bounds[m + 1])
        block = padded[m * mb.n_max : (m + 1) * mb.n_max]
        assert torch.equal(block[: end - start], x[mb.order[start:end]].detach())
        assert bool((block[end - start :] == -7.0).all())  # padding rows
    assert torch.equal(mb.unpad(padded), x.detach())
    # Differentiable both ways.
    weight = torch.randn_like(padded)
    (padded * weight).sum().backward()
    torch.testing.assert_close(x.grad, mb.unpad(weight))
    rows = torch.randn(4 * mb.n_max, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(data.num_nodes, 3, dtype=torch.float64)
    (mb.unpad(rows) * weight).sum().backward()
    torch.testing.assert_close(rows.grad, mb.pad(weight))  # padding rows get no gradient
    labels = torch.arange(data.num_nodes)
    assert torch.equal(mb.unpad(mb.pad(labels, fill=-100)), labels)
    with pytest.raises(ValueError, match="expected `x` with one row per node \\(60\\)"):
        mb.pad(torch.zeros(59, 3))
    with pytest.raises(ValueError, match="M \\* n_max"):
        mb.unpad(torch.zeros(59, 3))


def test_from_order_rebuilds_the_same_microbatches() -> None:
    edge_index, n = _community_graph()
    mb = affinity_microbatches(edge_index, n, 3, reorder="metis", seed=2)
    again = AffinityMicrobatches.from_order(edge_index, mb.order, mb.bounds.tolist())
    assert torch.equal(again.order, mb.order) and torch.equal(again.bounds, mb.bounds)
    assert all(torch.equal(a, b) for a, b in zip(again.edge_indices, mb.edge_indices, strict=True))
    assert again.num_cut_edges == mb.num_cut_edges
    with pytest.raises(ValueError, match="`order` to be a permutation"):
        AffinityMicrobatches.from_order(edge_index, torch.zeros(n, dtype=torch.long), [0, n])
    with pytest.raises(ValueError, match="`bounds` to increase strictly from 0 to num_nodes"):
        AffinityMicrobatches.from_order(edge_index, mb.order, [0, 10, 10, n])


def test_default_number_of_microbatches() -> None:
    # 16 / 8 / 4 by graph size, never more than the stages (M <= P) nor the nodes.
    assert default_num_microbatches(9_999, 32) == 16
    assert default_num_microbatches(10_000, 32) == 8
    assert default_num_microbatches(49_999, 32) == 8
    assert default_num_microbatches(50_000, 32) == 4
    assert default_num_microbatches(2_000_000, 32) == 4
    assert default_num_microbatches(2_708, 4) == 4
    assert default_num_microbatches(2_708, 2) == 2
    assert default_num_microbatches(169_343, 8) == 4
    assert default_num_microbatches(100_000, 1) == 1
    assert default_num_microbatches(3, 8) == 3
    with pytest.raises(ValueError, match="`num_stages` to be a positive integer but got 0"):
        default_num_microbatches(100, 0)
    with pytest.raises(ValueError, match="`num_nodes` to be a positive integer but got -1"):
        default_num_microbatches(-1, 2)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            {"num_microbatches": 0},
            ValueError,
            r"`num_microbatches` to be an integer in \[1, 10\].*got 0",
        ),
        (
            {"num_microbatches": 11},
            ValueError,
            r"`num_microbatches` to be an integer in \[1, 10\].*got 11",
        ),
        ({"num_microbatches": 2.0}, ValueError, r"`num_microbatches`.*got 2.0"),
        (
            {"reorder": "rcm"},
            ValueError,
            r"`reorder` to be one of \('metis', 'random', 'none'\) but got 'rcm'",
        ),
        ({"num_nodes": 0}, ValueError, r"`num_nodes` to be a positive integer but got 0"),
        ({"edge_index": torch.tensor([[0, 10]])}, ValueError, r"`edge_index`"),
        (
            {"edge_index": torch.tensor([[0, 10], [1, 2]])},
            ValueError,
            r"node ids in `edge_index` to lie in \[0, 9\]",
        ),
        ({"seed": -1}, ValueError, r"`seed` to be an integer >= 0 but got -1"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    args = dict(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=10, num_microbatches=2)
    args.update(kwargs)
    with pytest.raises(error, match="affinity_microbatches: expected " + match):
        affinity_microbatches(**args)
