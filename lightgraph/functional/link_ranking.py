"""Ranking metrics of link prediction, as OGB defines them.

* :func:`link_ranks`: the rank of every positive among its own negatives, ties counted
  half (OGB's MRR protocol for ``ogbl-citation2``: the mean of the optimistic and the
  pessimistic rank). MRR is the mean of ``1 / rank``, Hits@K the fraction with
  ``rank <= K``.
* :func:`hits_at_k_shared`: OGB's Hits@K against one set of negatives shared by every
  positive (``ogbl-collab``, ``ogbl-ppa``): a positive hits when it scores strictly above
  the K-th best negative.
"""

from __future__ import annotations

import torch
from torch import Tensor


def link_ranks(pos: Tensor, neg: Tensor) -> Tensor:
    """``[Q]`` rank (1 = best) of each positive score ``pos[i]`` among ``neg[i]`` (``[Q, K]``).

    ``rank = 1 + (#neg > pos + #neg >= pos) / 2``: a negative tied with the positive counts
    half, so a constant scorer is not rewarded.
    """
    if pos.dim() != 1 or neg.dim() != 2 or neg.size(0) != pos.size(0):
        raise ValueError(
            f"link_ranks: expected `pos` [Q] and `neg` [Q, K] but got shapes "
            f"{tuple(pos.shape)} and {tuple(neg.shape)}."
        )
    column = pos.view(-1, 1)
    optimistic = (neg > column).sum(1)
    pessimistic = (neg >= column).sum(1)
    return 1.0 + 0.5 * (optimistic + pessimistic).to(torch.float64)


def hits_at_k_shared(pos: Tensor, neg: Tensor, k: int) -> float:
    """Fraction of the positive scores ``pos`` (``[P]``) strictly above the ``k``-th highest
    of the shared negative scores ``neg`` (``[M]``); 1.0 when there are fewer than ``k``
    negatives (OGB's convention)."""
    if k < 1:
        raise ValueError(f"hits_at_k_shared: expected `k` >= 1 but got {k}.")
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg.reshape(-1), k).values[-1]
    return float((pos > kth).to(torch.float64).mean()) if pos.numel() else 0.0
