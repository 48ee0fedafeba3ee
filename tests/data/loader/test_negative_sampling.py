"""Negative samplers: uniform draws pass a chi-square test, strict ones are never edges."""

from __future__ import annotations

import math

import pytest
import torch

from lightgraph.data.loader.negative_sampling import KnownEdges, NegativeSampler


def _chi2_critical(df: int, z: float = 3.719) -> float:
    """Upper 1e-4 quantile of chi-square(df) (Wilson-Hilferty; z is the normal's)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _chi2(counts: torch.Tensor) -> float:
    expected = counts.sum() / counts.numel()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("mode", ["uniform", "shared"])
def test_uniform_negatives_pass_a_chi_square_test(mode):
    n, draws = 50, 0
    counts = torch.zeros(n)
    sampler = NegativeSampler(mode, num_negatives=8)
    gen = torch.Generator().manual_seed(0)
    src = torch.arange(40) % n
    for _ in range(300):
        neg = sampler.sample(src, n, gen)
        assert neg.shape == (40, 8)
        # Shared negatives: count each batch's k draws once (the rows repeat them).
        drawn = neg[0] if mode == "shared" else neg.reshape(-1)
        counts += torch.bincount(drawn, minlength=n).float()
        draws += drawn.numel()
    assert counts.sum() == draws
    assert _chi2(counts) < _chi2_critical(n - 1)


def test_a_biased_sampler_fails_the_same_test():
    """The test can fail: draws from half the nodes are rejected."""
    counts = torch.bincount(torch.randint(0, 25, (20000,)), minlength=50).float()
    assert _chi2(counts) > _chi2_critical(49)


def test_shared_negatives_are_the_same_for_every_positive():
    neg = NegativeSampler("shared", 5).sample(
        torch.arange(7), 100, torch.Generator().manual_seed(1)
    )
    assert neg.shape == (7, 5) and bool((neg == neg[0]).all())


def _dense_ish_graph(n: int, p: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    adj = torch.rand(n, n, generator=gen) < p
    adj.fill_diagonal_(False)
    return adj.nonzero().t()


def test_strict_negatives_are_never_edges_nor_the_source():
    n = 40
    edges = _dense_ish_graph(n, 0.7, 0)  # dense: many draws must be redrawn
    known = KnownEdges(edges, n)
    adj = torch.zeros(n, n, dtype=torch.bool)
    adj[edges[0], edges[1]] = True
    sampler = NegativeSampler("strict", 6)
    gen = torch.Generator().manual_seed(2)
    for _ in range(20):
        src = torch.randint(0, n, (64,), generator=gen)
        neg = sampler.sample(src, n, gen, known)
        rows = src.view(-1, 1).expand_as(neg)
        assert not bool(adj[rows, neg].any())
        assert not bool((rows == neg).any())


def test_strict_negatives_of_a_nearly_full_row_come_from_its_only_non_neighbours():
    n = 30
    adj = torch.ones(n, n, dtype=torch.bool)
    adj.fill_diagonal_(False)
    adj[0, 17] = adj[0, 23] = False  # node 0's only non-neighbours
    known = KnownEdges(adj.nonzero().t(), n)
    neg = NegativeSampler("strict", 50).sample(
        torch.zeros(3, dtype=torch.long), n, torch.Generator().manual_seed(0), known
    )
    assert set(neg.unique().tolist()) <= {17, 23}


def test_strict_negatives_on_a_complete_row_are_an_error():
    n = 6
    adj = torch.ones(n, n, dtype=torch.bool)
    adj.fill_diagonal_(False)
    known = KnownEdges(adj.nonzero().t(), n)
    with pytest.raises(ValueError, match=r"strict.*source node 2.*all 5 other nodes"):
        NegativeSampler("strict", 1).sample(torch.tensor([2]), n, torch.Generator(), known)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_a_negative_ratio_below_one_is_named(k):
    with pytest.raises(ValueError, match=r"`num_negatives`.*>= 1"):
        NegativeSampler("uniform", k)


def test_an_unknown_mode_is_named():
    with pytest.raises(ValueError, match=r"`mode`.*uniform.*strict.*shared"):
        NegativeSampler("hard", 1)
