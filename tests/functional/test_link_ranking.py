"""MRR and Hits@K against OGB's definitions, written here from OGB's evaluator
(``ogb.linkproppred.Evaluator``: ``_eval_mrr`` for per-positive negatives, ``_eval_hits``
for shared ones), on random scores with ties."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightgraph.functional.link_ranking import hits_at_k_shared, link_ranks
from lightgraph.models.link_metrics import HitsAtK, MeanReciprocalRank


def _ogb_mrr(y_pred_pos: np.ndarray, y_pred_neg: np.ndarray) -> dict[str, float]:
    """OGB's MRR protocol: optimistic rank counts negatives strictly above, pessimistic
    those at or above; the rank is their mean plus one."""
    y_pred_pos = y_pred_pos.reshape(-1, 1)
    optimistic = (y_pred_neg > y_pred_pos).sum(axis=1)
    pessimistic = (y_pred_neg >= y_pred_pos).sum(axis=1)
    ranking = 0.5 * (optimistic + pessimistic) + 1
    return {
        "mrr": float((1.0 / ranking).mean()),
        "hits@1": float((ranking <= 1).mean()),
        "hits@3": float((ranking <= 3).mean()),
        "hits@10": float((ranking <= 10).mean()),
    }


def _ogb_hits(y_pred_pos: np.ndarray, y_pred_neg: np.ndarray, k: int) -> float:
    if len(y_pred_neg) < k:
        return 1.0
    kth = np.sort(y_pred_neg)[-k]
    return float((y_pred_pos > kth).mean())


@pytest.mark.parametrize("levels", [None, 5])  # None: continuous scores; 5: many ties
def test_mrr_and_hits_equal_ogb_on_random_scores(levels):
    rng = np.random.default_rng(0)
    q, k = 500, 40
    pos = rng.standard_normal(q)
    neg = rng.standard_normal((q, k))
    if levels:
        pos, neg = np.round(pos * levels) / levels, np.round(neg * levels) / levels
    want = _ogb_mrr(pos, neg)
    ranks = link_ranks(torch.from_numpy(pos), torch.from_numpy(neg))
    mrr = MeanReciprocalRank()
    mrr.update(ranks)
    assert float(mrr.compute()) == pytest.approx(want["mrr"], rel=1e-6)
    for cut in (1, 3, 10):
        hits = HitsAtK(cut)
        # In two updates: the states add up.
        hits.update(ranks[:123])
        hits.update(ranks[123:])
        assert float(hits.compute()) == pytest.approx(want[f"hits@{cut}"], rel=1e-6)


def test_a_constant_scorer_is_not_rewarded():
    ranks = link_ranks(torch.zeros(4), torch.zeros(4, 9))
    assert torch.equal(ranks, torch.full((4,), 5.5, dtype=torch.float64))


@pytest.mark.parametrize("k", [1, 20, 50, 100])
def test_shared_negative_hits_equal_ogb(k):
    rng = np.random.default_rng(1)
    pos, neg = rng.standard_normal(300), rng.standard_normal(80) + 0.5
    got = hits_at_k_shared(torch.from_numpy(pos), torch.from_numpy(neg), k)
    assert got == pytest.approx(_ogb_hits(pos, neg, k))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match=r"`pos` \[Q\] and `neg` \[Q, K\]"):
        link_ranks(torch.zeros(3), torch.zeros(4, 2))


@pytest.mark.parametrize("levels", [None, 4])
def test_equal_to_ogbs_own_evaluator_where_it_is_installed(levels):
    """The formulas above, against OGB's ``Evaluator`` itself (optional: ``pip install ogb``)."""
    evaluate = pytest.importorskip("ogb.linkproppred")
    rng = np.random.default_rng(3)
    pos, neg = rng.standard_normal(400), rng.standard_normal((400, 30))
    if levels:
        pos, neg = np.round(pos * levels) / levels, np.round(neg * levels) / levels
    out = evaluate.Evaluator("ogbl-citation2").eval(
        {"y_pred_pos": torch.from_numpy(pos), "y_pred_neg": torch.from_numpy(neg)}
    )
    ranks = link_ranks(torch.from_numpy(pos), torch.from_numpy(neg))
    assert float((1 / ranks).mean()) == pytest.approx(float(out["mrr_list"].mean()), rel=1e-6)
    for cut in (1, 3, 10):
        want = float(out[f"hits@{cut}_list"].mean())
        assert float((ranks <= cut).double().mean()) == pytest.approx(want, rel=1e-6)
    shared = rng.standard_normal(200)
    collab = evaluate.Evaluator("ogbl-collab")  # Hits@50 against shared negatives
    want = collab.eval(
        {"y_pred_pos": torch.from_numpy(pos), "y_pred_neg": torch.from_numpy(shared)}
    )
    assert hits_at_k_shared(torch.from_numpy(pos), torch.from_numpy(shared), 50) == pytest.approx(
        want["hits@50"]
    )
