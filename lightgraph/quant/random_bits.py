"""Uniformly random bit-widths: AdaQP's baseline for its variance-aware assignment."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.utilities.checks import BITS, check_bits

_MASK = (1 << 62) - 1


def _mix(x: Tensor) -> Tensor:
    # A splitmix-style integer hash on int64 (wrap-around multiplication), masked to stay
    # non-negative: cheap, vectorised and identical on every rank.
    x = (x ^ (x >> 31)) * 0x7FB5D329728EA185
    x = (x ^ (x >> 27)) * 0x81DADEF4BC2DD44D
    return (x ^ (x >> 33)) & _MASK


class RandomBits(BitWidthPolicy):
    """Every row gets a width drawn uniformly from ``choices`` (AdaQP, Table 6 baseline).

    The draw is a hash of the node's global id, the layer, the direction, the seed and a
    ``version`` counter, so sender and receiver agree without exchanging anything, and
    :meth:`redraw` (e.g. at every re-assignment period) gives a fresh sample.

    Args:
        choices: candidate widths (AdaQP uses 2, 4 and 8).
        seed: seed of the draw.
    """

    def __init__(self, choices: Sequence[int] = (2, 4, 8), seed: int = 0) -> None:
        choices = tuple(choices)
        if not choices:
            raise ValueError(
                f"RandomBits: expected a non-empty `choices` from {BITS} but got {choices!r}."
            )
        for b in choices:
            check_bits("RandomBits", "choices", b)
        super().__init__(max(choices))
        self.choices = choices
        self.seed = seed
        self.version = 0

    def redraw(self) -> None:
        """Draw new widths for every row (identically on all ranks)."""
        self.version += 1

    def row_bits(self, plan: HaloPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        salt = sum(ord(c) * 131**i for i, c in enumerate(f"{layer}/{direction}")) & 0xFFFFFFFF
        key = (
            plan.global_ids[nodes].long() * 1_000_003
            + (self.seed * 7919 + self.version) * 104_729
            + salt
        )
        index = _mix(_mix(key)) % len(self.choices)
        return torch.tensor(self.choices, dtype=torch.long, device=nodes.device)[index]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(choices={self.choices}, seed={self.seed})"
