"""Batch normalisation over the tokens of a sequence, synchronised over its shards."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["SequenceBatchNorm"]


class SequenceBatchNorm(nn.BatchNorm1d):
    """Batch normalisation over the tokens of a sequence, also when they are sharded.

    Without sharding this is :class:`torch.nn.BatchNorm1d`. In training, when
    :attr:`sequence_parallel` spans ``P > 1`` ranks and ``sharded`` is true, the per-channel
    sums and squared sums are all-reduced (differentiably) over its group, so the statistics
    and gradients equal those of one process holding every token.

    Attributes:
        sequence_parallel: a :class:`~lightgraph.distributed.SequenceParallel` installed by
            the training module under graph parallelism (``None``: plain batch norm).

    Shapes:
        - **input:** ``[S_r, C]`` the tokens held here
        - **output:** ``[S_r, C]``
    """

    sequence_parallel: Any = None

    def forward(self, x: Tensor, sharded: bool = False) -> Tensor:  # type: ignore[override]
        """Normalise ``x``; ``sharded``: ``x`` holds only this rank's tokens of the sequence."""
        sp = self.sequence_parallel
        if not (self.training and sharded and sp is not None and sp.world_size > 1):
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        C = x.size(1)
        local = torch.cat([x.sum(0), (x * x).sum(0), x.new_full((1,), float(x.size(0)))])
        total = all_reduce(local, group=sp.group)
        count = total[-1]
        mean = total[:C] / count
        var = (total[C : 2 * C] / count - mean * mean).clamp(min=0.0)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                m = self.momentum if self.momentum is not None else 0.1
                unbiased = var * count / (count - 1).clamp(min=1.0)
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), m)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), m)
                self.num_batches_tracked += 1
        out = (x - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out
