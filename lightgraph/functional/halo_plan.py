"""The exchange topology of one rank: which rows it sends to and receives from each peer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class HaloPlan:
    """Who sends which rows to whom in one rank's halo exchange.

    This is the part of a :class:`~lightgraph.data.PartitionPlan` that exchangers and
    bit-width policies depend on: the topology of the exchange plus the global node
    properties both ends of a message share (so a policy computes the same width on
    the sending and on the receiving rank without metadata). It holds no features, no
    labels and no local graph.

    Local numbering: ``num_inner`` inner rows first, then the halo rows grouped by owner
    rank (owner 0 first); a rank receives ``halo_counts[q]`` rows from peer ``q`` and
    sends ``send_counts[q]`` rows (local ids ``send_index`` grouped per peer).

    Attributes:
        rank: this rank.
        num_parts: ranks in the exchange.
        num_inner: rows this rank owns.
        send_index: ``[sum(send_counts)]`` local ids of inner rows sent, grouped per peer.
        send_counts: rows sent to each peer (``send_counts[rank] == 0``).
        halo_counts: rows received from each peer (``halo_counts[rank] == 0``).
        global_ids: ``[num_inner + num_halo]`` global id of every local row.
        importance: ``[num_inner + num_halo]`` Sylvie's boundary-node importance in
            ``[0, 1]`` (0 for nodes no other rank holds).
    """

    rank: int
    num_parts: int
    num_inner: int
    send_index: Tensor
    send_counts: list[int]
    halo_counts: list[int]
    global_ids: Tensor
    importance: Tensor

    def __post_init__(self) -> None:
        owner = "HaloPlan"
        if not 0 <= self.rank < self.num_parts:
            raise ValueError(
                f"{owner}: expected `rank` in [0, {self.num_parts}) but got {self.rank!r}."
            )
        for name in ("send_counts", "halo_counts"):
            counts = getattr(self, name)
            if len(counts) != self.num_parts or any(c < 0 for c in counts):
                raise ValueError(
                    f"{owner}: expected `{name}` to hold {self.num_parts} non-negative counts "
                    f"but got {counts!r}."
                )
        if self.send_index.numel() != sum(self.send_counts):
            raise ValueError(
                f"{owner}: expected `send_index` to hold sum(send_counts) = "
                f"{sum(self.send_counts)} ids but got {self.send_index.numel()}."
            )

    @property
    def num_halo(self) -> int:
        return int(sum(self.halo_counts))

    @property
    def num_local(self) -> int:
        return self.num_inner + self.num_halo

    @property
    def halo_index(self) -> Tensor:
        """Local ids of the halo rows (``num_inner .. num_local - 1``)."""
        return self.num_inner + torch.arange(self.num_halo, device=self.send_index.device)
