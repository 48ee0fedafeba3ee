"""One bit-width for every boundary message."""

from __future__ import annotations

import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.quant.bit_width_policy import BitWidthPolicy


class FixedBits(BitWidthPolicy):
    """Every row is quantised to ``base_bits`` bits (1, 2, 4 or 8).

    With :class:`~lightgraph.callbacks.AdaptiveBitWidth` the width becomes Sylvie's
    purely time-adaptive :math:`b_t`.

    Args:
        base_bits: the bit-width.
    """

    def row_bits(self, plan: HaloPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        return torch.full((nodes.numel(),), self.base_bits, dtype=torch.long, device=nodes.device)
