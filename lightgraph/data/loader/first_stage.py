"""JOESTAR's two first-stage samplers: what a macro-batch is, and how an epoch is cut into them.

A :class:`FirstStageSampler` plans a rank's macro-batches of an epoch
(:meth:`~FirstStageSampler.plan`, store ids only, drawn from rank-free generators so every
rank computes every rank's share) and builds one on the host
(:meth:`~FirstStageSampler.stage_one`). :class:`~lightgraph.data.MultistageDataModule` takes
one of them as ``first_stage``; everything after stage 1 (AoT filtering, the move to the
device, stage 2, the loader) is the same for both.

* :class:`LargeBatchSampler` (LBS, JOESTAR-I): ``ratio * |train|`` seeds neighbour-sampled
  with the model's fanouts; stage 2 resamples inside that subgraph with
  ``second_stage_fanouts``.
* :class:`PartitionBatchSampler` (PBS, JOESTAR-II): ``parts_per_batch`` of ``num_parts``
  GAP partitions plus their 1-hop halo, whose hidden layers come from historical
  embeddings (``history``).

The data-parallel rules of each are stated on :class:`~lightgraph.data.MultistageDataModule`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, NamedTuple, get_args

import torch
from torch import Tensor

from lightgraph.data.loader.batching import split_sizes
from lightgraph.data.loader.data_parallel import DataParallelShard, shard_batches
from lightgraph.data.loader.macro_batch import check_parts_per_batch, shard_macro_batches
from lightgraph.data.loader.multistage import lbs_stage_one, pbs_stage_one
from lightgraph.utilities.checks import check_bool, check_fanouts, check_int
from lightgraph.utilities.random_state import make_generator

FirstStage = Literal["lbs", "pbs"]
FIRST_STAGES: tuple[str, ...] = get_args(FirstStage)


def check_ratio(owner: str, value: Any) -> float:
    """The LBS macro-batch size as a fraction of the training nodes: a number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(
            f"{owner}: expected `ratio` (LBS macro-batch size / training nodes) in (0, 1] but "
            f"got {value!r}."
        )
    return float(value)


def check_second_stage_fanouts(
    owner: str, second: Sequence[int] | None, first: list[int]
) -> list[int]:
    """LBS stage-2 fanouts: one per hop, ``-1`` (all) or at least the stage-1 fanout."""
    if second is None:
        return [-1] * len(first)
    second = check_fanouts(owner, list(second), "second_stage_fanouts")
    if len(second) != len(first):
        raise ValueError(
            f"{owner}: expected `second_stage_fanouts` to have one entry per hop "
            f"({len(first)}, like `fanouts` {first}) but got {second}."
        )
    for hop, (k2, k1) in enumerate(zip(second, first, strict=True)):
        if k2 != -1 and (k1 == -1 or k2 < k1):
            raise ValueError(
                f"{owner}: expected `second_stage_fanouts[{hop}]` to be -1 (all) or >= the "
                f"first-stage fanout {k1} (a smaller second stage would resample the macro-"
                f"batch more coarsely than stage 1) but got {k2}."
            )
    return second


class StageOnePlan(NamedTuple):
    """One macro-batch of a rank's epoch plan (store ids).

    Attributes:
        seeds: LBS: the seeds stage 1 samples from; PBS: the inner training nodes
            (ascending).
        inner: PBS: the inner nodes (ascending); ``None`` for LBS.
        order: positions in ``seeds`` in training order.
        sizes: the mini-batch sizes along ``order`` under data parallelism (LBS: the
            rank's slices of the global batches, :func:`~lightgraph.data.loader.data_parallel.
            shard_batches`; PBS: the steps of
            :func:`~lightgraph.data.loader.macro_batch.shard_macro_batches`, near-equal);
            ``None``: :func:`~lightgraph.data.loader.batching.even_batches`.
    """

    seeds: Tensor
    inner: Tensor | None
    order: Tensor
    sizes: tuple[int, ...] | None = None

    def steps(self, batch_size: int) -> int:
        """Mini-batches of this macro-batch."""
        if self.sizes is not None:
            return len(self.sizes)
        return math.ceil(self.order.numel() / batch_size)

    @property
    def trained(self) -> Tensor:
        """The seeds trained, in training order."""
        return self.seeds.index_select(0, self.order)


class EpochPlan(NamedTuple):
    """A rank's macro-batches of one epoch and the epoch's training targets no rank trains."""

    macros: list[StageOnePlan]
    dropped: int


class StageOneResult(NamedTuple):
    """A macro-batch built on the host: its nodes (store ids), its CSC over local ids, the
    rows gathered (``None`` when not asked for), how many nodes are inner (the rest is
    halo) and the local ids of the plan's ``seeds``."""

    node: Tensor
    indptr: Tensor
    indices: Tensor
    x: Tensor | None
    y: Tensor | None
    num_inner: int
    local_seeds: Tensor


class FirstStageSampler(ABC):
    """Stage 1 of JOESTAR's multistage sampling: plans and builds the macro-batches.

    Attributes:
        name: ``"lbs"`` or ``"pbs"``.
        sized: whether every epoch has the same number of steps (its loader then has a
            length).
        num_parts, partitioner: the partition store it trains from.
    """

    name: ClassVar[str]
    sized: ClassVar[bool]
    num_parts: int
    partitioner: str

    def history_layers(self, fanouts: Sequence[int]) -> int:
        """Hidden layers whose halo rows come from historical embeddings (none by default)."""
        return 0

    @abstractmethod
    def stage_two_fanouts(self, fanouts: list[int], owner: str = "") -> list[int]:
        """The fanouts stage 2 samples with inside a macro-batch, for the model's
        ``fanouts`` (a :class:`ValueError` naming ``owner`` where they do not fit)."""

    @abstractmethod
    def plan(
        self,
        train: Tensor,
        part_ptr: Tensor,
        epoch: int,
        shard: DataParallelShard,
        seed: int,
        batch_size: int,
    ) -> EpochPlan:
        """``shard``'s macro-batches of ``epoch`` from the training nodes ``train`` (store
        ids, ascending) and the store's partition boundaries ``part_ptr``."""

    @abstractmethod
    def stage_one(
        self,
        graph: tuple[Tensor, Tensor, Tensor | None, Tensor | None],
        planned: StageOnePlan,
        fanouts: list[int],
        seed: int,
        stream: tuple[Any, ...],
        scratch: Tensor,
    ) -> StageOneResult:
        """Build ``planned`` from ``graph = (indptr, indices, x, y)`` (``x``/``y`` ``None``:
        rows not gathered); ``stream`` keys its random draws; ``scratch`` is an ``int64
        [num_nodes]`` buffer of ``-1`` (``-1`` again on return)."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class LargeBatchSampler(FirstStageSampler):
    """LBS (JOESTAR-I): macro-batches of ``ratio * |train|`` seeds, neighbour-sampled.

    Every epoch shuffles the training nodes and cuts them into macro-batches of
    ``ceil(ratio * |train|)`` seeds; stage 1 samples each with the model's fanouts (over
    ``num_sampler_threads`` threads cooperating on one sample), stage 2 samples mini-batches
    of its seeds inside the sampled subgraph with ``second_stage_fanouts`` (all neighbours
    by default; never below the stage-1 fanout). The graph is the one-partition store in
    original order (the NS-Mem store).

    Args:
        ratio: macro-batch size as a fraction of the training nodes, in (0, 1].
        second_stage_fanouts: stage-2 neighbours per hop (``None``: all).
        num_sampler_threads: threads that cooperate on one stage-1 sample.
    """

    name = "lbs"
    sized = True
    num_parts = 1  # the NS-Mem store: one partition in original order
    partitioner = "random"

    def __init__(
        self,
        ratio: float = 0.125,
        second_stage_fanouts: Sequence[int] | None = None,
        num_sampler_threads: int = 1,
    ) -> None:
        owner = "LargeBatchSampler"
        self.ratio = check_ratio(owner, ratio)
        self.second_stage_fanouts = (
            None
            if second_stage_fanouts is None
            else check_fanouts(owner, list(second_stage_fanouts), "second_stage_fanouts")
        )
        self.num_sampler_threads = check_int(
            owner, "num_sampler_threads", num_sampler_threads, low=1
        )

    def stage_two_fanouts(self, fanouts: list[int], owner: str = "LargeBatchSampler") -> list[int]:
        return check_second_stage_fanouts(owner, self.second_stage_fanouts, fanouts)

    def plan(
        self,
        train: Tensor,
        part_ptr: Tensor,
        epoch: int,
        shard: DataParallelShard,
        seed: int,
        batch_size: int,
    ) -> EpochPlan:
        gen = make_generator(seed, "macro-order", epoch)
        order = train[torch.randperm(train.numel(), generator=gen)]
        rank, world = shard
        size = max(1, math.ceil(self.ratio * order.numel()))
        macros: list[StageOnePlan] = []
        dropped = 0
        for k, i in enumerate(range(0, order.numel(), size)):
            seeds = order[i : i + size]
            # The global training order inside the macro-batch (rank-free: every rank
            # shards the same one).
            perm = torch.randperm(
                seeds.numel(), generator=make_generator(seed, "seed-order", epoch, k)
            )
            if world == 1:
                macros.append(StageOnePlan(seeds, None, perm))
                continue
            batches = shard_batches(seeds[perm], rank, world, batch_size)
            mine = torch.cat(batches) if batches else seeds[:0]
            dropped += seeds.numel() - world * mine.numel()
            sizes = tuple(b.numel() for b in batches)
            macros.append(StageOnePlan(mine, None, torch.arange(mine.numel()), sizes))
        return EpochPlan(macros, dropped)

    def stage_one(
        self,
        graph: tuple[Tensor, Tensor, Tensor | None, Tensor | None],
        planned: StageOnePlan,
        fanouts: list[int],
        seed: int,
        stream: tuple[Any, ...],
        scratch: Tensor,
    ) -> StageOneResult:
        indptr, indices, x, y = graph
        node, m_indptr, m_indices, mx, my = lbs_stage_one(
            indptr,
            indices,
            x,
            y,
            planned.seeds,
            fanouts,
            generator=make_generator(seed, "stage1", *stream),
            num_threads=self.num_sampler_threads,
            node_buffer=scratch,
        )
        local_seeds = torch.arange(planned.seeds.numel())
        return StageOneResult(node, m_indptr, m_indices, mx, my, node.numel(), local_seeds)


class PartitionBatchSampler(FirstStageSampler):
    """PBS (JOESTAR-II): macro-batches of ``parts_per_batch`` GAP partitions plus their halo.

    Every epoch shuffles the ``num_parts`` partitions and groups them ``parts_per_batch``
    at a time; a macro-batch holds the group's nodes with all their in-edges plus their
    1-hop halo (in-neighbours outside the group, leaves). Stage 2 samples with the model's
    fanouts inside it; with ``history`` the halo's hidden representations come from
    historical embeddings owned by the model
    (:class:`~lightgraph.models.MiniBatchNodeClassifier`; see :mod:`lightgraph.nn.history`).
    A PBS epoch's step count follows its partition draw, so its loader has no length.

    Args:
        num_parts: GAP partitions of the graph, ``p``.
        parts_per_batch: partitions per macro-batch, ``b <= p``.
        history: historical embeddings for the halo's hidden layers.
    """

    name = "pbs"
    sized = False
    partitioner = "gap"

    def __init__(self, num_parts: int = 128, parts_per_batch: int = 16, history: bool = True):
        owner = "PartitionBatchSampler"
        self.num_parts = check_int(owner, "num_parts", num_parts, low=1)
        self.parts_per_batch = check_parts_per_batch(owner, parts_per_batch, self.num_parts)
        self.history = check_bool(owner, "history", history)

    def history_layers(self, fanouts: Sequence[int]) -> int:
        return len(fanouts) - 1 if self.history else 0

    def stage_two_fanouts(
        self, fanouts: list[int], owner: str = "PartitionBatchSampler"
    ) -> list[int]:
        return fanouts

    def plan(
        self,
        train: Tensor,
        part_ptr: Tensor,
        epoch: int,
        shard: DataParallelShard,
        seed: int,
        batch_size: int,
    ) -> EpochPlan:
        gen = make_generator(seed, "macro-order", epoch)
        parts = torch.randperm(self.num_parts, generator=gen)
        rank, world = shard
        ptr = part_ptr
        is_train = torch.zeros(int(ptr[-1]), dtype=torch.bool)
        is_train[train] = True
        ppb = self.parts_per_batch

        def planned(chosen: Tensor, key: tuple[Any, ...], sizes: list[int] | None) -> StageOnePlan:
            chosen = chosen.sort().values
            inner = torch.cat([torch.arange(int(ptr[p]), int(ptr[p + 1])) for p in chosen])
            seeds = inner[is_train[inner]]
            order = torch.randperm(
                seeds.numel(), generator=make_generator(seed, "seed-order", *key)
            )
            if sizes is None:
                return StageOnePlan(seeds, inner, order)
            return StageOnePlan(seeds, inner, order[: sum(sizes)], tuple(sizes))

        if world == 1:
            groups = [parts[i : i + ppb] for i in range(0, self.num_parts, ppb)]
            return EpochPlan([planned(g, (epoch, k), None) for k, g in enumerate(groups)], 0)
        # One process's macro-batches, each split among the ranks (shard_macro_batches, as
        # HANOI's loader does); every rank computes every rank's plan: no communication.
        ends = torch.cat([torch.zeros(1, dtype=torch.long), is_train.long().cumsum(0)])
        count = ends[ptr[1:].long()] - ends[ptr[:-1].long()]
        plan = shard_macro_batches(parts.tolist(), count.tolist(), ppb, batch_size, world)[rank]
        macros = [
            planned(
                torch.tensor(mb.parts), (epoch, k, "rank", rank), split_sizes(mb.targets, mb.steps)
            )
            for k, mb in enumerate(plan)
        ]
        return EpochPlan(macros, 0)

    def stage_one(
        self,
        graph: tuple[Tensor, Tensor, Tensor | None, Tensor | None],
        planned: StageOnePlan,
        fanouts: list[int],
        seed: int,
        stream: tuple[Any, ...],
        scratch: Tensor,
    ) -> StageOneResult:
        indptr, indices, x, y = graph
        inner = planned.inner
        assert inner is not None
        node, m_indptr, m_indices, mx, my, num_inner = pbs_stage_one(
            indptr, indices, x, y, inner, scratch
        )
        # Inner nodes keep the order of ``inner`` (ascending store id) and so do the seeds
        # (``plan`` filters ``inner``): their local ids are a search.
        local_seeds = torch.searchsorted(inner, planned.seeds)
        return StageOneResult(node, m_indptr, m_indices, mx, my, num_inner, local_seeds)


def first_stage_sampler(owner: str, value: Any) -> FirstStageSampler:
    """``value`` as a sampler: a :class:`FirstStageSampler`, or ``"lbs"``/``"pbs"`` for
    :class:`LargeBatchSampler`/:class:`PartitionBatchSampler` with their defaults."""
    if isinstance(value, FirstStageSampler):
        return value
    if value == "lbs":
        return LargeBatchSampler()
    if value == "pbs":
        return PartitionBatchSampler()
    raise ValueError(
        f"{owner}: expected `first_stage` to be a LargeBatchSampler, a PartitionBatchSampler "
        f"(any FirstStageSampler) or one of {list(FIRST_STAGES)} (that sampler with its "
        f"defaults) but got {value!r}."
    )
