"""Sylvie's data-adaptive bit-widths: more bits for boundary nodes with larger in-degree."""

from __future__ import annotations

import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.utilities.checks import BITS


class DegreeAwareBits(BitWidthPolicy):
    """Data-adaptive quantisation of Sylvie (ICDE'24, §IV-A and Fig. 7).

    Every boundary node carries an importance :math:`p_v \\in [0, 1]`, the percentile rank
    of its *global* in-degree among all boundary nodes
    (:func:`~lightgraph.data.partition.partition_plan.boundary_importance`): equal in-degrees share
    the mid-rank of their tie, and the largest in-degree gets 1. Given the time-adaptive
    base width :math:`b_t`, the candidate widths are :math:`\\{b_t, 2b_t, \\dots, 8\\}`
    (:math:`k` of them) and a node gets the :math:`\\lfloor p_v k \\rfloor`-th candidate
    (the last one for :math:`p_v = 1`): evenly spaced importance percentiles map to
    increasing widths, so the most important nodes are protected with the most bits, and
    at :math:`b_t = 8` every node is sent with 8 bits. A node's width is the same for its
    embeddings and its gradients, and on both ends of the message.

    With mid-ranks a band holds close to its share :math:`1/k` of the boundary nodes even
    when many share an in-degree: e.g. in-degrees (1, 1, 1, 1, 2, 3, 3, 7) give
    :math:`p` = 3/14 for the four 1s, which at :math:`b_t = 1` (candidates 1, 2, 4, 8)
    stay in the lowest band (1 bit), where the highest rank of their tie (3/7) would
    send all four with 2 bits.

    Args:
        base_bits: the initial base width :math:`b_t` (Sylvie starts at :math:`b_{min} = 1`).
    """

    def __init__(self, base_bits: int = 1) -> None:
        super().__init__(base_bits)

    def candidates(self) -> tuple[int, ...]:
        return tuple(b for b in BITS if b >= self.base_bits)

    def row_bits(self, plan: HaloPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        levels = torch.tensor(self.candidates(), dtype=torch.long, device=nodes.device)
        p = plan.importance[nodes].to(nodes.device)
        index = torch.clamp((p * len(levels)).long(), max=len(levels) - 1)
        return levels[index]
