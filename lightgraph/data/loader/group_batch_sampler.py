"""Mini-batches of one degree group each: the LM batches of UniTG's Lazy Tuner."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.data import Sampler

from lightgraph.utilities.checks import check_bool, check_choice, check_index_tensor, check_int

__all__ = ["ORDERS", "GroupBatchSampler"]

ORDERS: tuple[str, ...] = ("shuffle", "deepest_first")


class GroupBatchSampler(Sampler[list[int]]):
    """Mini-batches of ONE group each, reshuffled every epoch (a ``batch_sampler``).

    Every epoch, the members of each group are permuted and cut into batches of at most
    ``batch_size`` (the last batch of a group may be smaller unless ``drop_last``); then the
    batches of all groups are permuted together, so neither the groups nor the nodes are
    visited in degree order. Each node appears exactly once per epoch (``drop_last=False``).

    Yields lists of positions into ``groups`` (i.e. into the training-node list), so it plugs
    into ``DataLoader(dataset, batch_sampler=...)``. The epoch advances by one on every
    ``__iter__``; :meth:`set_epoch` pins it (as ``DistributedSampler``). The shuffle is a
    function of ``(seed, epoch)`` only.

    ``order="deepest_first"`` keeps the members' shuffle but visits the groups from the
    deepest (highest centrality) to the shallowest, the schedule §5.2 of the thesis hints at
    ("requires more resources at the beginning ... Near the end of an epoch, only a few
    layers are exploited"); the default ``"shuffle"`` interleaves the groups' batches.

    Args:
        groups: ``[n]`` group id per training node (from :func:`degree_groups`).
        batch_size: nodes per batch.
        shuffle: ``False`` keeps members and groups in order (evaluation).
        drop_last: drop each group's last incomplete batch.
        seed: base seed of the shuffle.
        order: ``"shuffle"`` or ``"deepest_first"`` (only with ``shuffle=True``).
    """

    def __init__(
        self,
        groups: Tensor,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        order: str = "shuffle",
    ) -> None:
        owner = "GroupBatchSampler"
        self.groups = check_index_tensor(owner, "groups", groups).cpu()
        if self.groups.numel() and int(self.groups.min()) < 0:
            raise ValueError(
                f"{owner}: expected `groups` >= 0 but got a minimum of {int(self.groups.min())}."
            )
        self.batch_size = check_int(owner, "batch_size", batch_size)
        self.shuffle = check_bool(owner, "shuffle", shuffle)
        self.drop_last = check_bool(owner, "drop_last", drop_last)
        self.seed = check_int(owner, "seed", seed, low=0)
        self.order = check_choice(owner, "order", order, ORDERS)
        self.epoch = 0
        num = int(self.groups.max()) + 1 if self.groups.numel() else 0
        self.members = [torch.nonzero(self.groups == g).flatten() for g in range(num)]

    def set_epoch(self, epoch: int) -> None:
        """Use the shuffle of ``epoch`` on the next ``__iter__``."""
        self.epoch = check_int("GroupBatchSampler", "epoch", epoch, low=0)

    def batches(self, epoch: int | None = None) -> list[tuple[int, Tensor]]:
        """``(group id, positions)`` of every batch of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        out: list[tuple[int, Tensor]] = []
        for g, members in enumerate(self.members):
            if self.shuffle:
                members = members[torch.randperm(members.numel(), generator=gen)]
            for start in range(0, members.numel(), self.batch_size):
                chunk = members[start : start + self.batch_size]
                if self.drop_last and chunk.numel() < self.batch_size:
                    continue
                out.append((g, chunk))
        if self.shuffle and self.order == "shuffle":
            out = [out[i] for i in torch.randperm(len(out), generator=gen).tolist()]
        elif self.shuffle:  # deepest_first
            out = sorted(out, key=lambda item: -item[0])
        return out

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches(self.epoch)
        self.epoch += 1
        for _, chunk in batches:
            yield chunk.tolist()

    def __len__(self) -> int:
        if self.drop_last:
            return sum(m.numel() // self.batch_size for m in self.members)
        return sum(math.ceil(m.numel() / self.batch_size) for m in self.members)


# --------------------------------------------------------------------------- loss
