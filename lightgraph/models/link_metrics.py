"""Link-prediction metrics as torchmetrics ``Metric``\\ s: their states are sums, so under DDP
they are global (summed over the ranks' query shares) without gathering any scores.

Both take the ranks of :func:`~lightgraph.functional.link_ranking.link_ranks` (one per
query, ties counted half, as OGB does), computed once and shared by every metric.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

from lightgraph.utilities.checks import check_int


class MeanReciprocalRank(Metric):
    """Mean of ``1 / rank`` over the queries."""

    full_state_update = False
    higher_is_better = True

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, ranks: Tensor) -> None:
        self.total += (1.0 / ranks.to(torch.float64)).sum()
        self.count += ranks.numel()

    def compute(self) -> Tensor:
        return (self.total / self.count.clamp(min=1)).float()


class HitsAtK(Metric):
    """Fraction of the queries ranked within the top ``k`` (``rank <= k``).

    Args:
        k: the cut-off.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = check_int("HitsAtK", "k", k, low=1)
        self.add_state("hits", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, ranks: Tensor) -> None:
        self.hits += (ranks <= self.k).sum()
        self.count += ranks.numel()

    def compute(self) -> Tensor:
        return (self.hits.double() / self.count.clamp(min=1)).float()
