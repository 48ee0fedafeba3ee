"""Two-stage sampling from an on-disk partition store: macro-batches, then mini-batches.

Stage 1 (storage -> memory): every epoch the store's partitions are shuffled and cut into
macro-batches of ``parts_per_batch`` partitions; each macro-batch is read with one
contiguous read per (partition, partition) edge bucket plus the partitions' feature and
label slices, and the store's hub nodes (pinned in memory) join it with their hub<->batch
and hub<->hub edges. Stage 2 (memory only): neighbour sampling restricted to the
macro-batch subgraph, over its training nodes (hubs are never targets), in mini-batches.

A background thread reads macro-batch ``m + 1`` (and builds its CSC) while macro-batch
``m`` trains -- double buffering: at most two macro-batches are in memory. While the next
one is still loading, the current one is reused, up to ``reuse`` passes in all, each pass
with a fresh shuffle of its targets and fresh neighbour samples (data echoing at the
macro-batch level, §4.2.2 of T. Huang, *Efficient Systems for Large-Scale Graph
Representation Learning*, PhD thesis, MIT 2025, whose ch. 4 is HANOI; "the thesis"
below). With a fixed reuse factor every random draw is derived from ``(seed, epoch,
macro-batch, pass, mini-batch)``, so the prefetching loader, a serial one and a run
resumed from :meth:`MacroBatchLoader.state_dict` yield identical batches.
With ``adaptive_reuse`` the number of passes depends on how long reading takes, which is
the point, and is therefore not reproducible.

Under data parallelism every rank draws the same shuffle of the partitions, splits them
into ``world_size`` groups of nearly equal training-target count (which change with the
shuffle), and cuts *its* group, in the shuffled order, into macro-batches: each rank
reads and reuses only its own share of the store. :func:`shard_macro_batches` is that
plan, with the rule that gives every rank the same number of steps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.batching import even_batches, macro_batch_steps, split_sizes
from lightgraph.data.data_parallel import balance_groups, check_shard
from lightgraph.data.minibatch import make_generator, sample_minibatch
from lightgraph.functional.neighbor_sampling import (
    NODE_BUFFER_MAX_NODES,
    make_node_buffer,
    to_csc,
)
from lightgraph.utilities.checks import check_bool, check_fanouts, check_int

#: Most passes over one macro-batch (thesis §4.2.2 caps reuse at 4).
MAX_REUSE = 4


def check_parts_per_batch(owner: str, value: Any, num_parts: int) -> int:
    """Partitions per macro-batch: an int in ``[1, num_parts]``."""
    check_int(owner, "parts_per_batch", value, low=1)
    if value > num_parts:
        raise ValueError(
            f"{owner}: expected `parts_per_batch` in [1, {num_parts}] (the store has "
            f"{num_parts} partitions) but got {value}."
        )
    return int(value)


def check_reuse(owner: str, value: Any) -> int:
    """Passes over each macro-batch: an int in ``[1, MAX_REUSE]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REUSE:
        raise ValueError(
            f"{owner}: expected `reuse` to be an int in [1, {MAX_REUSE}] (passes over each "
            f"macro-batch) but got {value!r}."
        )
    return value


@dataclass
class LoadedMacroBatch:
    """A macro-batch in memory with its stage-2 CSC and its training targets."""

    parts: list[int]
    x: Tensor
    y: Tensor
    node_ids: Tensor
    indptr: Tensor
    indices: Tensor
    targets: Tensor  # local ids of the training nodes that are not hubs
    num_nodes: int
    num_hubs: int
    read_seconds: float


@dataclass
class MacroBatchStats:
    """Counters of one loader, cumulative over its life (callbacks take differences)."""

    macro_batches: int = 0
    passes: int = 0
    mini_batches: int = 0
    targets: int = 0
    nodes_loaded: int = 0
    read_seconds: float = 0.0
    wait_seconds: float = 0.0
    #: Training targets left out to give every data-parallel rank the same number of steps
    #: (see :func:`shard_macro_batches`; counted when an epoch starts; 0 on one process).
    dropped_targets: int = 0
    passes_per_macro_batch: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, float]:
        return {
            "macro_batches": float(self.macro_batches),
            "passes": float(self.passes),
            "mini_batches": float(self.mini_batches),
            "targets": float(self.targets),
            "nodes_loaded": float(self.nodes_loaded),
            "read_seconds": self.read_seconds,
            "wait_seconds": self.wait_seconds,
            "dropped_targets": float(self.dropped_targets),
        }


def macro_batch_schedule(
    num_parts: int, parts_per_batch: int, seed: int, epoch: int
) -> list[list[int]]:
    """The macro-batches of ``epoch``: a shuffle of the partition ids cut into groups."""
    perm = torch.randperm(num_parts, generator=make_generator(seed, "parts", epoch)).tolist()
    return [perm[i : i + parts_per_batch] for i in range(0, num_parts, parts_per_batch)]


@dataclass(frozen=True)
class PlannedMacroBatch:
    """One macro-batch of a rank's epoch: its partitions, their training targets, how
    many of those the rank trains (all but the ones left out to equalise steps) and in how
    many mini-batches per pass (``-1``: ``ceil(n / batch_size)`` of the ``n`` targets
    read, when the store does not give per-partition counts)."""

    parts: list[int]
    targets: int
    kept: int
    steps: int = -1


def shard_macro_batches(
    perm: Sequence[int],
    counts: Sequence[int],
    parts_per_batch: int,
    batch_size: int,
    world_size: int,
) -> list[list[PlannedMacroBatch]]:
    """Every rank's macro-batches of one epoch, with equal numbers of mini-batches.

    Args:
        perm: the epoch's shuffle of the partition ids (the same on every rank).
        counts: training targets of every partition.
        parts_per_batch: partitions per macro-batch.
        batch_size: targets per mini-batch.
        world_size: number of ranks.

    The partitions are split into ``world_size`` groups of nearly equal target count:
    taken in ``perm`` order, each joins the group with the fewest targets so far
    (:func:`~lightgraph.data.data_parallel.balance_groups` with ``order=perm``), so the
    groups change with the epoch's shuffle and their totals differ by at most the largest
    partition's count ``w_max``. Rank ``r`` cuts its group, in ``perm`` order, into
    macro-batches of ``parts_per_batch`` (its last one may be smaller; so is its only one
    when it holds fewer than ``parts_per_batch`` partitions, e.g. when
    ``parts_per_batch * world_size > num_parts``).

    **The one-process step count.** Macro-batch ``m`` with ``T_m`` targets takes
    ``c_m = N * ceil(T_m / (N * b))`` near-equal mini-batches per pass
    (:func:`~lightgraph.data.batching.macro_batch_steps`, ``N = world_size``): the steps
    one process with the global batch ``N * b`` gives it, times ``N``, since each rank
    trains only ``1 / N`` of the macro-batches. ``N`` ranks thus take about as many global
    steps per epoch, of about the same global size, as one process (``ceil(T_m / b)``
    would give fewer, larger ones: 12 instead of 16 on the data-parallel benchmark's
    graph, and a point of accuracy less).

    **Equal steps.** Rank ``r`` has ``C_r = sum_m c_m`` mini-batches per pass and
    ``reuse * C_r`` per epoch. Every rank trains ``C = min_r C_r`` per pass: a rank with
    more drops its ``C_r - C`` *trailing* mini-batches of every pass, taken from its last
    macro-batch backwards -- macro-batch ``m`` giving up ``d_m`` of them keeps the targets
    of its first ``c_m - d_m`` (the same ones in every pass, so each kept target is still
    trained ``reuse`` times, in ``c_m - d_m`` mini-batches), and a macro-batch that keeps
    none is not read at all. Every mini-batch holds at most ``b`` targets, so a rank drops
    at most ``b * (C_r - C)`` targets per epoch, which is less than ``w_max + N * b * M_r``
    (``M_r``: the rank's macro-batches), since ``C_r < T_r / b + N * M_r``,
    ``C >= T_min / b`` and ``T_r - T_min <= w_max``; with as many equally large
    macro-batches on every rank (a GAP store, ``num_parts`` a multiple of ``N *
    parts_per_batch``) it drops next to nothing. The partitions are reshuffled every
    epoch, so other targets are dropped next time.

    Every rank computes every rank's plan from the same inputs: no communication.
    """
    weights = [int(counts[p]) for p in perm]
    groups = balance_groups(weights, world_size, order=list(range(len(weights))))
    plans: list[list[PlannedMacroBatch]] = []
    for group in groups:
        parts = [int(perm[i]) for i in group]  # ascending positions: the shuffled order
        plan = []
        for i in range(0, len(parts), parts_per_batch):
            chunk = parts[i : i + parts_per_batch]
            targets = sum(int(counts[p]) for p in chunk)
            steps = macro_batch_steps(targets, batch_size, world_size)
            plan.append(PlannedMacroBatch(chunk, targets, targets, steps))
        plans.append(plan)
    steps = [sum(mb.steps for mb in plan) for plan in plans]
    fewest = min(steps)
    for plan, excess in zip(plans, steps, strict=True):
        excess -= fewest
        for m in range(len(plan) - 1, -1, -1):
            if excess == 0:
                break
            mb = plan[m]
            drop = min(mb.steps, excess)
            if drop:
                left = mb.steps - drop
                kept = sum(split_sizes(mb.targets, mb.steps)[:left])
                plan[m] = PlannedMacroBatch(mb.parts, mb.targets, kept, left)
                excess -= drop
    return plans


def _is_read(mb: PlannedMacroBatch) -> bool:
    """Whether a rank reads ``mb``: not when every one of its targets is left out."""
    return mb.kept != 0 or mb.targets == 0


def load_macro_batch(store: Any, parts: Sequence[int]) -> LoadedMacroBatch:
    """Read ``parts`` (plus hubs) from ``store`` and build the macro-batch's CSC."""
    tic = time.perf_counter()
    mb = store.read_macro_batch(list(parts))
    n = int(mb.x.size(0))
    indptr, indices = to_csc(mb.edge_index, n)
    targets = (mb.train_mask & ~mb.is_hub).nonzero().view(-1)
    return LoadedMacroBatch(
        parts=list(parts),
        x=mb.x,
        y=mb.y,
        node_ids=mb.node_ids,
        indptr=indptr,
        indices=indices,
        targets=targets,
        num_nodes=n,
        num_hubs=int(mb.is_hub.sum()),
        read_seconds=time.perf_counter() - tic,
    )


class MacroBatchLoader:
    """Iterates mini-batches of macro-batches of an on-disk partition store.

    Args:
        store: a :class:`~lightgraph.data.partition_store.PartitionStore` (anything with
            ``num_parts`` and ``read_macro_batch(parts)``; with ``world_size > 1`` also
            ``mask(split)`` and ``part_ptr``, which give every partition's targets).
        parts_per_batch: partitions per macro-batch (``b``; at most ``store.num_parts``).
        fanouts: stage-2 neighbours per hop, outermost first (``-1`` = all).
        batch_size: training targets per mini-batch.
        reuse: passes over each macro-batch (1 = no reuse, at most 4); with
            ``adaptive_reuse`` the *most* passes.
        adaptive_reuse: after each pass, reuse the macro-batch again only while the next
            one is still being read (never more than ``reuse`` passes in all; at least 1).
            One process only: data-parallel ranks would decide different step counts.
        prefetch: read the next macro-batch in a background thread (double buffering);
            ``False`` reads it when needed (same batches with a fixed reuse factor).
        seed: base seed of every random draw.
        rank, world_size: this process's data-parallel shard. Every rank draws the same
            shuffle of the partitions, takes its group of them (balanced by training
            targets) and reads, reuses and trains only its own macro-batches; every rank
            takes the same number of steps, trailing targets of the ranks with more being
            left out (``stats.dropped_targets``; the rule and its bound are those of
            :func:`shard_macro_batches`). With ``world_size > 1`` the rank joins the key of
            every per-macro-batch random stream. Needs at least ``world_size`` partitions
            with training targets. ``world_size=1`` (the default) is the one-process
            loader.
    """

    def __init__(
        self,
        store: Any,
        parts_per_batch: int,
        fanouts: Sequence[int],
        batch_size: int,
        reuse: int = 1,
        adaptive_reuse: bool = False,
        prefetch: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        owner = "MacroBatchLoader"
        num_parts = int(store.num_parts)
        self.rank, self.world_size = check_shard(owner, rank, world_size)
        self.parts_per_batch = check_parts_per_batch(owner, parts_per_batch, num_parts)
        self.fanouts = check_fanouts(owner, fanouts)
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        self.reuse = check_reuse(owner, reuse)
        self.adaptive_reuse = check_bool(owner, "adaptive_reuse", adaptive_reuse)
        self.prefetch = check_bool(owner, "prefetch", prefetch)
        self.store = store
        self.num_parts = num_parts
        self.seed = int(seed)
        self.epoch = 0
        self._position = (0, 0, 0)  # (macro-batch, pass, mini-batch) the next batch has
        self._step = 0  # mini-batches of the epoch yielded so far
        self.stats = MacroBatchStats()
        self._counts: list[int] | None = None
        if self.world_size > 1:
            self._check_data_parallel(owner)

    def _check_data_parallel(self, owner: str) -> None:
        world = self.world_size
        if self.adaptive_reuse:
            raise ValueError(
                f"{owner}: `adaptive_reuse=True` is not supported with world_size={world}: "
                f"each rank would decide its number of passes from its own read times, the "
                f"ranks would take different numbers of steps and data-parallel training "
                f"would hang. Use a fixed `reuse` (adaptive_reuse=False) instead."
            )
        if world > self.num_parts:
            raise ValueError(
                f"{owner}: expected `world_size` <= {self.num_parts} (the store's partitions: "
                f"every rank needs at least one) but got {world}; use fewer ranks or a store "
                f"with more partitions."
            )
        counts = self._target_counts()
        if counts is None:
            raise ValueError(
                f"{owner}: with world_size={world} the `store` must give every partition's "
                f"training targets (`mask` and `part_ptr`, as a PartitionStore does) to split "
                f"the partitions among the ranks."
            )
        holding = sum(1 for c in counts if c > 0)
        if holding < world:
            raise ValueError(
                f"{owner}: expected `world_size` <= {holding} (the store's partitions that "
                f"hold training targets: every rank needs one) but got {world}."
            )

    # ------------------------------------------------------------------ schedule
    def plan(self, epoch: int) -> list[PlannedMacroBatch]:
        """This rank's macro-batches of ``epoch``, those left out entirely included.

        One process: :func:`macro_batch_schedule`, every target kept (``targets`` and
        ``kept`` are ``-1`` when the store does not give per-partition counts).
        Several: this rank's part of :func:`shard_macro_batches`.
        """
        if self.world_size == 1:
            counts = self._target_counts()
            plan = []
            for parts in macro_batch_schedule(
                self.num_parts, self.parts_per_batch, self.seed, epoch
            ):
                if counts is None:
                    plan.append(PlannedMacroBatch(parts, -1, -1))
                    continue
                targets = sum(int(counts[p]) for p in parts)
                steps = macro_batch_steps(targets, self.batch_size)
                plan.append(PlannedMacroBatch(parts, targets, targets, steps))
            return plan
        return self._all_plans(epoch)[self.rank]

    def _all_plans(self, epoch: int) -> list[list[PlannedMacroBatch]]:
        perm = torch.randperm(self.num_parts, generator=make_generator(self.seed, "parts", epoch))
        counts = self._target_counts()
        assert counts is not None  # checked in __init__
        return shard_macro_batches(
            perm.tolist(), counts, self.parts_per_batch, self.batch_size, self.world_size
        )

    def dropped_targets(self, epoch: int) -> int:
        """Training targets no rank trains in ``epoch`` (0 for one process; the same number
        on every rank: each computes every rank's plan)."""
        if self.world_size == 1:
            return 0
        return sum(mb.targets - mb.kept for plan in self._all_plans(epoch) for mb in plan)

    def _read_plan(self, epoch: int) -> list[PlannedMacroBatch]:
        """The macro-batches this rank reads in ``epoch`` (not those it leaves out)."""
        return [mb for mb in self.plan(epoch) if _is_read(mb)]

    def schedule(self, epoch: int) -> list[list[int]]:
        """The partitions of every macro-batch this rank reads in ``epoch``."""
        return [mb.parts for mb in self._read_plan(epoch)]

    def _target_counts(self) -> list[int] | None:
        """Training targets (non-hub training nodes) of every partition, if the store says."""
        if self._counts is None and hasattr(self.store, "mask") and hasattr(self.store, "part_ptr"):
            train = self.store.mask("train").clone()
            hubs = getattr(self.store, "hub_store_ids", None)
            if hubs is not None and hubs.numel():
                train[hubs.long()] = False
            ptr = torch.as_tensor(self.store.part_ptr, dtype=torch.long)
            cum = torch.cat([torch.zeros(1, dtype=torch.long), train.long().cumsum(0)])
            self._counts = (cum[ptr[1:]] - cum[ptr[:-1]]).tolist()
        return self._counts

    def __len__(self) -> int:
        """Mini-batches per epoch (of this rank) with a fixed reuse factor (unknown with
        adaptive reuse)."""
        counts = self._target_counts()
        if counts is None or self.adaptive_reuse:
            raise TypeError("MacroBatchLoader: the number of mini-batches is not known in advance.")
        return self.reuse * sum(mb.steps for mb in self.plan(self.epoch))

    def _key(self, *keys: Any) -> tuple[Any, ...]:
        """A random stream's key: with several ranks, the rank's own."""
        return keys if self.world_size == 1 else (*keys, "rank", self.rank)

    def _cut(self, order: Tensor, steps: int) -> list[Tensor]:
        """``order`` in ``steps`` near-equal mini-batches (``-1``: ``even_batches`` at
        ``batch_size``; no small tail either way)."""
        if steps < 0:
            return even_batches(order, self.batch_size)
        return list(order.tensor_split(steps)) if steps else []

    def _kept_targets(self, mb: LoadedMacroBatch, epoch: int, m: int, kept: int) -> Tensor:
        """The ``kept`` targets of macro-batch ``m`` trained in every pass (a random
        subset, in local order, drawn once per macro-batch)."""
        if kept < 0 or kept >= mb.targets.numel():
            return mb.targets
        gen = make_generator(self.seed, *self._key("keep", epoch, m))
        keep = torch.randperm(mb.targets.numel(), generator=gen)[:kept]
        return mb.targets[keep.sort().values]

    # ------------------------------------------------------------------ iteration
    def _minibatches(
        self,
        mb: LoadedMacroBatch,
        targets: Tensor,
        epoch: int,
        m: int,
        p: int,
        start: int,
        final: bool,
        steps: int,
    ) -> Iterator[Data]:
        gen = make_generator(self.seed, *self._key("targets", epoch, m, p))
        order = targets[torch.randperm(targets.numel(), generator=gen)]
        batches = self._cut(order, steps)
        count = len(batches)
        # Stage 2 relabels through a buffer the size of the macro-batch (in memory: its
        # features are gathered with index_select).
        buffer = None
        if mb.num_nodes <= NODE_BUFFER_MAX_NODES:
            buffer = make_node_buffer(mb.num_nodes)
        for b in range(start, count):
            seeds = batches[b]
            batch = sample_minibatch(
                mb.indptr,
                mb.indices,
                mb.x,
                mb.y,
                seeds,
                self.fanouts,
                generator=make_generator(self.seed, *self._key("sample", epoch, m, p, b)),
                node_ids=mb.node_ids,
                node_buffer=buffer,
            )
            batch.macro_parts = torch.tensor(mb.parts, dtype=torch.long)
            self.stats.mini_batches += 1
            if final and b + 1 == count:
                # The epoch is over once its last batch is out: Lightning may never ask again.
                self.epoch, self._position, self._step = epoch + 1, (0, 0, 0), 0
            else:
                self._position = (m, p, b + 1)
                self._step += 1
            yield batch

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        start_m, start_p, start_b = self._position
        plan = self.plan(epoch)
        if self._step == 0 and self._position == (0, 0, 0):
            self.stats.dropped_targets += self.dropped_targets(epoch)
        reads = [mb for mb in plan if _is_read(mb)]
        schedule = [mb.parts for mb in reads]
        pool = ThreadPoolExecutor(1, thread_name_prefix="macro-batch") if self.prefetch else None

        def submit(m: int) -> Future[LoadedMacroBatch] | None:
            if pool is None or m >= len(schedule):
                return None
            return pool.submit(load_macro_batch, self.store, schedule[m])

        try:
            pending = submit(start_m)
            for m in range(start_m, len(schedule)):
                tic = time.perf_counter()
                mb = (
                    pending.result()
                    if pending is not None
                    else load_macro_batch(self.store, schedule[m])
                )
                self.stats.wait_seconds += time.perf_counter() - tic
                self.stats.read_seconds += mb.read_seconds
                self.stats.macro_batches += 1
                self.stats.nodes_loaded += mb.num_nodes
                pending = submit(m + 1)
                targets = self._kept_targets(mb, epoch, m, reads[m].kept)
                p = start_p if m == start_m else 0
                while True:
                    first = start_b if (m == start_m and p == start_p) else 0
                    self.stats.passes += 1
                    sizes = [x.numel() for x in self._cut(targets, reads[m].steps)]
                    self.stats.targets += sum(sizes[first:])
                    last_macro = m + 1 == len(schedule)
                    # The last macro-batch has no successor to wait for: adaptive reuse stops.
                    final = last_macro and (p + 1 >= self.reuse or self.adaptive_reuse)
                    yield from self._minibatches(
                        mb, targets, epoch, m, p, first, final, reads[m].steps
                    )
                    p += 1
                    if final or p >= self.reuse:
                        break
                    if self.adaptive_reuse and (pending is None or pending.done()):
                        break
                    self._position = (m, p, 0)
                self.stats.passes_per_macro_batch.append(p)
                if self.epoch == epoch:
                    self._position = (m + 1, 0, 0)
                del mb
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        if self.epoch == epoch:  # nothing (more) to yield this epoch
            self.epoch, self._position, self._step = epoch + 1, (0, 0, 0), 0

    # Lightning saves and restores iterables that have these two methods (mid-epoch resume).
    # It saves rank 0's state and every rank loads it. The ranks' macro-batches differ, so
    # (macro-batch, pass, mini-batch) differs between ranks at the same step; ``step`` (the
    # mini-batches of the epoch already yielded) is the same integer on every rank and is
    # what a rank of several resumes from. One process resumes from the position itself,
    # which also holds with adaptive reuse.
    def state_dict(self) -> dict[str, Any]:
        m, p, b = self._position
        return {
            "epoch": self.epoch,
            "macro_batch": m,
            "pass": p,
            "mini_batch": b,
            "step": self._step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self._step = int(state["step"])
        if self.world_size == 1:
            self._position = (
                int(state["macro_batch"]),
                int(state["pass"]),
                int(state["mini_batch"]),
            )
        else:
            self._position = self._position_of(self.epoch, self._step)

    def _position_of(self, epoch: int, step: int) -> tuple[int, int, int]:
        """This rank's (macro-batch, pass, mini-batch) after ``step`` mini-batches of ``epoch``."""
        for m, mb in enumerate(self._read_plan(epoch)):
            count = mb.steps
            if step < self.reuse * count:
                return (m, step // count, step % count)
            step -= self.reuse * count
        return (len(self._read_plan(epoch)), 0, 0)
