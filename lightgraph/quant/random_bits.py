"""Random bit-widths per message: AdaQP's baseline for its variance-aware assignment."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.utilities.checks import BITS, check_bits


def message_stream_seed(
    seed: int, version: int, layer: str, direction: str, owner: int, holder: int
) -> int:
    """Seed of the random stream of the message ``owner -> holder`` (one layer, one direction).

    A keyed hash (BLAKE2b), identical in every process — unlike Python's salted
    :func:`hash` — so both ends of the message seed the same generator.
    """
    key = f"{seed}\x1f{version}\x1f{layer}\x1f{direction}\x1f{owner}\x1f{holder}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


class RandomBits(BitWidthPolicy):
    """A random width for every message row (AdaQP, Table 6 baseline).

    AdaQP's random baseline draws a width from :math:`\\{2, 4, 8\\}` independently for
    every *message*: a row of node :math:`u` sent by its owner :math:`o` to a holder
    :math:`h` in one layer and direction. A node held by two peers therefore gets two
    independent widths, one per message. The widths of the message
    :math:`o \\to h` are the first ``send_counts[h]`` draws of a generator seeded with

    .. math::
        s_{o,h} = \\mathrm{BLAKE2b}(\\text{seed},\\ \\text{version},\\ \\text{layer},\\
        \\text{direction},\\ o,\\ h),

    taken in message order (the owner's ``send_index`` block for :math:`h`, which is the
    holder's halo block from :math:`o`, row for row): width :math:`b_i` is the choice
    whose cumulative-probability interval contains the :math:`i`-th uniform draw. The
    owner computes the stream for its send lists, the holder for its halo blocks, and
    both get the same widths without exchanging anything. The backward message of the
    same rows (gradients, holder to owner) uses the stream of the same pair under the
    direction ``"backward"``, so it is independent of the forward draw.
    :meth:`redraw` (:class:`~lightgraph.callbacks.BitWidthReassigner`, every period)
    increments ``version``: a fresh, independent sample on every rank.

    Widths depend on the device pair, not on the node alone: the policy answers
    :meth:`message_bits`, and :meth:`row_bits` is refused.

    Args:
        choices: candidate widths (AdaQP: 2, 4 and 8).
        probabilities: probability of each choice, in the order of ``choices``
            (non-negative, summing to 1); ``None`` draws uniformly, as AdaQP.
        seed: seed of the draw.
    """

    def __init__(
        self,
        choices: Sequence[int] = (2, 4, 8),
        probabilities: Sequence[float] | None = None,
        seed: int = 0,
    ) -> None:
        owner = "RandomBits"
        choices = tuple(choices)
        if not choices:
            raise ValueError(
                f"{owner}: expected a non-empty `choices` from {BITS} but got {choices!r}."
            )
        for b in choices:
            check_bits(owner, "choices", b)
        if probabilities is None:
            probs = tuple(1.0 / len(choices) for _ in choices)
        else:
            probs = tuple(probabilities)
            if len(probs) != len(choices) or not all(
                isinstance(p, int | float)
                and not isinstance(p, bool)
                and math.isfinite(p)
                and p >= 0
                for p in probs
            ):
                raise ValueError(
                    f"{owner}: expected `probabilities` to hold {len(choices)} finite non-negative "
                    f"numbers (one per choice in {choices}) but got {probabilities!r}."
                )
            if abs(sum(probs) - 1.0) > 1e-6:
                raise ValueError(
                    f"{owner}: expected `probabilities` to sum to 1 but got {probabilities!r} "
                    f"(sum {sum(probs)!r})."
                )
            probs = tuple(float(p) for p in probs)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"{owner}: expected `seed` to be an integer but got {seed!r}.")
        super().__init__(max(choices))
        self.choices = choices
        self.probabilities = probs
        self.seed = seed
        self.version = 0

    def redraw(self) -> None:
        """Draw new widths for every message (identically on all ranks)."""
        self.version += 1

    def draw(self, owner: int, holder: int, count: int, layer: str, direction: str) -> Tensor:
        """Widths of the ``count`` rows of the message ``owner -> holder`` (``torch.long``, CPU).

        The same on every rank: this is what both ends of the message evaluate.
        """
        gen = torch.Generator().manual_seed(
            message_stream_seed(self.seed, self.version, layer, direction, owner, holder)
        )
        u = torch.rand(count, generator=gen, dtype=torch.float64)
        edges = torch.tensor(self.probabilities, dtype=torch.float64).cumsum(0)
        index = torch.searchsorted(edges, u, right=True).clamp_(max=len(self.choices) - 1)
        return torch.tensor(self.choices, dtype=torch.long)[index]

    def row_bits(self, plan: HaloPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        raise TypeError(
            "RandomBits: widths are drawn per message (node and device pair), not per node; use "
            "message_bits(plan, layer, direction)."
        )

    def message_bits(self, plan: HaloPlan, layer: str, direction: str) -> tuple[Tensor, Tensor]:
        device = plan.send_index.device
        me = plan.rank
        # This rank owns the rows it sends (send_index, grouped per holder q) and holds
        # the halo rows (grouped per owner q); the alignment is the same in both directions.
        send = [
            self.draw(me, q, count, layer, direction) for q, count in enumerate(plan.send_counts)
        ]
        recv = [
            self.draw(q, me, count, layer, direction) for q, count in enumerate(plan.halo_counts)
        ]
        empty = torch.zeros(0, dtype=torch.long)
        return (
            torch.cat(send).to(device) if send else empty.to(device),
            torch.cat(recv).to(device) if recv else empty.to(device),
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(choices={self.choices}, probabilities={self.probabilities}, "
            f"seed={self.seed})"
        )
