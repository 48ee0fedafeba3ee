"""Data-parallel shards of sampled training: which targets, macro-batches or partition
groups each rank trains in an epoch.

Lightning injects a ``DistributedSampler`` only into ``torch.utils.data.DataLoader``; the
sampled loaders of lightgraph are resumable iterables of their own, so they split the work
themselves, with the rank and the number of replicas Lightning's own loaders use: the
strategy's ``distributed_sampler_kwargs`` (``{"num_replicas": N, "rank": r}`` under
``ddp``, ``ddp_spawn``, ``ddp_fork``, ``fsdp``, ... on any backend and any number of
nodes; absent on a single device). Strategies that are not data parallel in the usual
sense (graph parallelism: every rank holds a token shard of the *same* sequences) say so
through the same property.

Every split here is a pure function of the epoch's global order, which every rank draws
from the same ``(seed, epoch)`` generator, so the ranks agree on it without talking, a
resumed run draws the same shards, and one process (``world_size=1``) keeps its order.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from lightgraph.data.loader.batching import even_batches
from lightgraph.utilities.checks import check_int


class DataParallelShard(NamedTuple):
    """This process's place among the data-parallel replicas."""

    rank: int = 0
    world_size: int = 1


def data_parallel_shard(trainer: Any) -> DataParallelShard:
    """``(rank, world_size)`` of the data-parallel replicas ``trainer`` runs.

    Read from ``trainer.strategy.distributed_sampler_kwargs`` -- the rank and replica count
    Lightning gives its own ``DistributedSampler`` -- and ``(0, 1)`` without a trainer or
    for a strategy that has no such property (one device).
    """
    if trainer is None:
        return DataParallelShard()
    kwargs = getattr(getattr(trainer, "strategy", None), "distributed_sampler_kwargs", None)
    if not kwargs:
        return DataParallelShard()
    world = int(kwargs.get("num_replicas", 1))
    rank = int(kwargs.get("rank", 0))
    return check_shard("data_parallel_shard", rank, world)


def check_shard(owner: str, rank: Any, world_size: Any) -> DataParallelShard:
    """A checked :class:`DataParallelShard`."""
    world = check_int(owner, "world_size", world_size, low=1)
    rank = check_int(owner, "rank", rank, low=0)
    if rank >= world:
        raise ValueError(
            f"{owner}: expected `rank` in [0, {world - 1}] (world_size={world}) but got {rank}."
        )
    return DataParallelShard(rank, world)


def shard_targets(order: Tensor, rank: int, world_size: int, batch_size: int) -> Tensor:
    """Rank ``rank``'s share of an epoch's target ``order`` (every rank passes the same).

    The order is cut into consecutive *global batches* of ``world_size * batch_size``
    targets and rank ``r`` takes the ``r``-th ``batch_size`` slice of each: its step ``i``
    holds the ``r``-th slice of global batch ``i``, so ``N`` ranks with batch ``b`` train
    the global batches one process with batch ``N * b`` would. The last, shorter global
    batch is split evenly; the ``len(order) % world_size`` targets at its end (at most
    ``world_size - 1``) are dropped for this epoch -- the order is reshuffled every epoch,
    so it drops others next time. Every rank gets ``len(order) // world_size`` targets,
    hence the same number of steps. ``world_size=1`` returns ``order`` itself.
    """
    if world_size == 1:
        return order
    n = order.numel() // world_size * world_size
    step = world_size * batch_size
    full = n // step * step
    head = order[:full].view(-1, world_size, batch_size)[:, rank].reshape(-1)
    tail = order[full:n].view(world_size, -1)[rank]
    return torch.cat([head, tail])


def shard_batches(order: Tensor, rank: int, world_size: int, batch_size: int) -> list[Tensor]:
    """Rank ``rank``'s mini-batches of one macro-batch's training ``order`` (every rank
    passes the same).

    The *global* mini-batches are the ones one process with batch ``world_size *
    batch_size`` trains: :func:`~lightgraph.data.loader.batching.even_batches` of ``order``
    (near-equal sizes, none above ``world_size * batch_size``). Rank ``r``'s step ``i`` is
    the ``r``-th of ``world_size`` equal slices of global batch ``i``; the ``len % world_size``
    targets at the end of each global batch (at most ``world_size - 1`` per step) are
    nobody's this epoch, and a global batch shorter than ``world_size`` gives no step on
    any rank. So every rank takes the same number of steps, and ``N`` ranks averaging their
    gradients take the steps of the one process. ``world_size=1`` gives
    ``even_batches(order, batch_size)``.
    """
    out = []
    for batch in even_batches(order, world_size * batch_size):
        per = batch.numel() // world_size
        if per:
            out.append(batch[rank * per : (rank + 1) * per])
    return out


def balance_groups(
    weights: list[int], world_size: int, order: list[int] | None = None
) -> list[list[int]]:
    """Split items ``0 .. len(weights) - 1`` into ``world_size`` groups of nearly equal total
    weight (longest-processing-time greedy: heaviest first, each to the lightest group;
    ties to the lower index), each group in ascending item order.

    ``order`` places the items in that order instead of heaviest first (e.g. an epoch's
    shuffle, so that the groups change from epoch to epoch; heaviest first balances
    tighter but gives the same groups for the same weights).

    The groups' totals differ by at most the largest single weight, in any order (an item
    only ever joins the lightest group). Deterministic: every rank computes the same groups
    from the same weights and order.
    """
    if order is None:
        order = sorted(range(len(weights)), key=lambda i: (-int(weights[i]), i))
    groups: list[list[int]] = [[] for _ in range(world_size)]
    totals = [0] * world_size
    for i in order:
        g = min(range(world_size), key=lambda r: (totals[r], r))
        groups[g].append(i)
        totals[g] += int(weights[i])
    return [sorted(g) for g in groups]
