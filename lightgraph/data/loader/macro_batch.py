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

Under data parallelism every rank draws the same shuffle of the partitions and cuts it
into the macro-batches one process would train; each macro-batch's partitions are split
among the ranks (balanced by training targets), every rank reads, reuses and trains only
its share, and every global step takes one mini-batch from each rank's share of the same
macro-batch, as one process would take its global batch from the whole macro-batch.
:func:`shard_macro_batches` is that plan (``rank_share="partitions"``, the default). With
``rank_share="targets"`` every rank reads the whole macro-batch instead and trains its
slice of each of one process's global mini-batches: one process's sampling, at ``N``
times the reads and memory of a machine (see :class:`MacroBatchLoader`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from lightgraph.data.loader.base import Emit, Moved, ResumableLoader
from lightgraph.data.loader.batching import even_batches, macro_batch_steps, split_sizes
from lightgraph.data.loader.data_parallel import balance_groups, check_shard, shard_batches
from lightgraph.data.loader.minibatch import sample_minibatch
from lightgraph.functional.neighbor_sampling import (
    NODE_BUFFER_MAX_NODES,
    make_node_buffer,
    to_csc,
)
from lightgraph.utilities.checks import check_bool, check_choice, check_fanouts, check_int
from lightgraph.utilities.random_state import make_generator

#: Most passes over one macro-batch (thesis §4.2.2 caps reuse at 4).
MAX_REUSE = 4

#: What data-parallel ranks divide among themselves in every macro-batch.
RankShare = Literal["partitions", "targets"]
RANK_SHARES: tuple[str, ...] = get_args(RankShare)


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
    num_part_nodes: int = -1  # nodes of ``parts`` (the first rows); the rest are hubs
    store_ids: Tensor | None = None  # every row's store id


def macro_batch_schedule(
    num_parts: int, parts_per_batch: int, seed: int, epoch: int
) -> list[list[int]]:
    """The macro-batches of ``epoch``: a shuffle of the partition ids cut into groups."""
    perm = torch.randperm(num_parts, generator=make_generator(seed, "parts", epoch)).tolist()
    return [perm[i : i + parts_per_batch] for i in range(0, num_parts, parts_per_batch)]


@dataclass(frozen=True)
class PlannedMacroBatch:
    """One macro-batch of a rank's epoch: the partitions it reads, their training targets
    and in how many mini-batches per pass it trains them (``-1``: ``ceil(n /
    batch_size)`` of the ``n`` targets read, when the store does not give per-partition
    counts; ``targets`` is then ``-1`` too)."""

    parts: list[int]
    targets: int
    steps: int = -1


def shard_macro_batches(
    perm: Sequence[int],
    counts: Sequence[int],
    parts_per_batch: int,
    batch_size: int,
    world_size: int,
) -> list[list[PlannedMacroBatch]]:
    """Every rank's macro-batches of one epoch: one process's macro-batches, each split
    among the ranks.

    Args:
        perm: the epoch's shuffle of the partition ids (the same on every rank).
        counts: training targets of every partition.
        parts_per_batch: partitions per macro-batch of the ``world_size`` ranks together.
        batch_size: targets per mini-batch and rank.
        world_size: number of ranks ``N``.

    **One process's macro-batches.** ``perm`` is cut into macro-batches of
    ``P = max(parts_per_batch, N)`` consecutive partitions, as one process cuts it
    (:func:`macro_batch_schedule`; the same macro-batches whenever ``parts_per_batch >=
    N``). A macro-batch with fewer than ``N`` partitions that hold training targets (the
    last one, when ``num_parts`` is not a multiple of ``P``) joins the one before it.

    **Split among the ranks.** Each macro-batch's partitions are split into ``N`` shares
    of nearly equal target count: taken in ``perm`` order, each joins the share with the
    fewest targets so far (:func:`~lightgraph.data.loader.data_parallel.balance_groups`; shares
    differ by at most the largest partition's count, every share holds targets, and the
    shares change with the epoch's shuffle).
    Rank ``r`` reads only its share -- about ``P / N`` partitions, so ``N`` ranks on one
    machine hold together what one process holds -- and reuses it ``reuse`` times.

    **One process's steps.** A macro-batch of ``T`` targets takes ``c = ceil(T / (N * b))``
    steps on every rank -- the steps one process with the global batch ``N * b`` gives it
    -- each rank cutting its share into ``c`` near-equal mini-batches (at most one per
    target: ``c`` is capped by the smallest share). So every global step takes its ``N``
    mini-batches from the same macro-batch, as one process does, every rank takes the same
    number of steps by construction, and no target is left out.

    Why a share of each macro-batch rather than whole macro-batches per rank: stage 2
    samples inside the macro-batch, so a rank batch of ``b`` drawn from ``P`` partitions
    overlaps less than one process's batch of ``N * b`` drawn from them. On the
    data-parallel benchmark's graph (200k nodes, 64 partitions, 8 per macro-batch, global
    batch 1000) whole macro-batches per rank made two ranks sample 1.49x the nodes and
    1.29x the edges of one process; shares of 4 partitions sample 1.01x and 1.03x.

    Every rank computes every rank's plan from the same inputs: no communication.
    """
    world = int(world_size)
    size = max(int(parts_per_batch), world)

    def short(chunk: list[int]) -> bool:  # fewer than N partitions that hold targets
        return sum(1 for p in chunk if counts[p] > 0) < world

    chunks: list[list[int]] = []
    for i in range(0, len(perm), size):
        chunk = [int(p) for p in perm[i : i + size]]
        if chunks and short(chunk):
            chunks[-1].extend(chunk)
        else:
            chunks.append(chunk)
    if len(chunks) > 1 and short(chunks[0]):
        chunks[1][:0] = chunks.pop(0)  # a first chunk short of targets joins the next
    plans: list[list[PlannedMacroBatch]] = [[] for _ in range(world)]
    for chunk in chunks:
        weights = [int(counts[p]) for p in chunk]
        shares = balance_groups(weights, world, order=list(range(len(chunk))))
        totals = [sum(weights[i] for i in share) for share in shares]
        steps = min(macro_batch_steps(sum(totals), world * int(batch_size)), min(totals))
        for r, share in enumerate(shares):
            parts = [chunk[i] for i in share]  # ascending positions: the shuffled order
            plans[r].append(PlannedMacroBatch(parts, totals[r], steps))
    return plans


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
        num_part_nodes=int(mb.num_part_nodes),
        store_ids=mb.store_ids,
    )


class MacroBatchLoader(ResumableLoader):
    """Iterates mini-batches of macro-batches of an on-disk partition store.

    Args:
        store: a :class:`~lightgraph.data.store.partition_store.PartitionStore` (anything with
            ``num_parts`` and ``read_macro_batch(parts)``; with ``world_size > 1`` also
            ``mask(split)`` and ``part_ptr``, which give every partition's targets).
        parts_per_batch: partitions per macro-batch (``b``; at most ``store.num_parts``;
            with several ranks, of all the ranks together).
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
            shuffle of the partitions and cuts it into the same macro-batches of
            ``max(parts_per_batch, world_size)`` partitions; it reads, reuses and trains
            only its share of each (about ``1 / world_size`` of its partitions, balanced
            by training targets), in the number of steps one process with the global
            batch ``world_size * batch_size`` would take, so every rank takes the same
            number of steps and no target is left out (:func:`shard_macro_batches`).
            With ``world_size > 1`` the rank joins the key of every per-macro-batch
            random stream. Needs at least ``world_size`` partitions with training
            targets. ``world_size=1`` (the default) is the one-process loader.
        rank_share: what the ranks divide in every macro-batch (``world_size > 1`` only):

            * ``"partitions"`` (default): the partitions, as above. A machine's ranks
              read and hold one process's bytes, but a rank samples only inside its
              share, so the edges between two ranks' shares are never sampled (the
              accuracy cost is measured in docs/benchmarks.md, "Data-parallel sampled
              training").
            * ``"targets"``: every rank reads the whole macro-batch (one process's,
              ``parts_per_batch`` partitions) and trains the ``rank``-th slice of each of
              one process's global mini-batches (global batch ``world_size *
              batch_size``; :func:`~lightgraph.data.loader.data_parallel.shard_batches`). The
              ranks sample from the whole macro-batch, as one process does -- with every
              neighbour (fanout ``-1``) they train one process's weights -- at
              ``world_size`` times the reads and memory per machine. At most
              ``world_size - 1`` targets per global step are left out that pass (and a
              macro-batch with fewer than ``world_size`` targets gives no step), counted in
              ``stats.dropped_targets``.
    """

    STATS_KEYS = (
        "macro_batches",
        "passes",
        "mini_batches",
        "targets",
        "nodes_loaded",
        "read_seconds",
        "wait_seconds",
        "dropped_targets",
    )
    POSITION_SIZE = 3

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
        rank_share: RankShare = "partitions",
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
        self.rank_share = check_choice(owner, "rank_share", rank_share, RANK_SHARES)
        self.store = store
        self.num_parts = num_parts
        self.seed = int(seed)
        # position: (macro-batch, pass, mini-batch) of the next batch
        super().__init__(world_size=self.world_size, prefetch=self.prefetch)
        self._counts: list[int] | None = None
        if self.world_size > 1:
            self._check_data_parallel(owner)

    def _check_fixed_reuse(self, owner: str) -> None:
        """Data-parallel ranks need the same passes: no adaptive reuse."""
        if self.adaptive_reuse:
            raise ValueError(
                f"{owner}: `adaptive_reuse=True` is not supported with world_size="
                f"{self.world_size}: each rank would decide its number of passes from its own "
                f"read times, the ranks would take different numbers of steps and "
                f"data-parallel training would hang. Use a fixed `reuse` (adaptive_reuse=False) "
                f"instead."
            )

    def _check_data_parallel(self, owner: str) -> None:
        world = self.world_size
        self._check_fixed_reuse(owner)
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
        ``steps`` are ``-1`` when the store does not give per-partition counts).
        Several: this rank's part of :func:`shard_macro_batches`; with
        ``rank_share="targets"`` one process's macro-batches, each with the steps of its
        :func:`~lightgraph.data.loader.data_parallel.shard_batches`.
        """
        if self.world_size == 1 or self.rank_share == "targets":
            counts = self._target_counts()
            plan = []
            for parts in macro_batch_schedule(
                self.num_parts, self.parts_per_batch, self.seed, epoch
            ):
                if counts is None:
                    plan.append(PlannedMacroBatch(parts, -1))
                    continue
                targets = sum(int(counts[p]) for p in parts)
                if self.world_size == 1:
                    steps = macro_batch_steps(targets, self.batch_size)
                else:  # the global batches with at least one target per rank
                    steps = sum(size >= self.world_size for size in self._global_sizes(targets))
                plan.append(PlannedMacroBatch(parts, targets, steps))
            return plan
        return self._all_plans(epoch)[self.rank]

    def _all_plans(self, epoch: int) -> list[list[PlannedMacroBatch]]:
        perm = torch.randperm(self.num_parts, generator=make_generator(self.seed, "parts", epoch))
        counts = self._target_counts()
        assert counts is not None  # checked in __init__
        return shard_macro_batches(
            perm.tolist(), counts, self.parts_per_batch, self.batch_size, self.world_size
        )

    def schedule(self, epoch: int) -> list[list[int]]:
        """The partitions of every macro-batch this rank reads in ``epoch``."""
        return [mb.parts for mb in self.plan(epoch)]

    def _target_counts(self) -> list[int] | None:
        """Training targets (non-hub training nodes) of every partition, if the store says."""
        if self._counts is None and hasattr(self.store, "mask") and hasattr(self.store, "part_ptr"):
            # Partition by partition over the (memory-mapped) mask, less the training hubs:
            # memory is one partition's slice and the hubs, not a copy per node.
            train = self.store.mask("train")
            ptr = torch.as_tensor(self.store.part_ptr, dtype=torch.long)
            counts = torch.tensor(
                [
                    int(train[a:b].sum())
                    for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)
                ],
                dtype=torch.long,
            )
            hubs = getattr(self.store, "hub_store_ids", None)
            if hubs is not None and hubs.numel():
                hubs = hubs.long()
                trained = hubs[train[hubs]]
                part = torch.searchsorted(ptr, trained, right=True) - 1
                counts -= torch.bincount(part, minlength=len(counts))
            self._counts = counts.tolist()
        return self._counts

    def num_batches(self, epoch: int | None = None) -> int:
        """Mini-batches (of this rank) of ``epoch`` (default: the current one) with a fixed
        reuse factor.

        The count depends on the epoch's partition draw (a macro-batch of ``n`` targets
        takes ``ceil(n / batch_size)`` steps), so it changes from epoch to epoch; that is
        why the loader has no ``len()``."""
        counts = self._target_counts()
        if counts is None or self.adaptive_reuse:
            raise TypeError(
                "MacroBatchLoader: the number of mini-batches is not known in advance "
                "(adaptive reuse, or a store without per-partition target counts)."
            )
        epoch = self.epoch if epoch is None else int(epoch)
        return self.reuse * sum(mb.steps for mb in self.plan(epoch))

    def __len__(self) -> int:
        # Lightning reads a loader's length once and then validates after that many
        # batches of every epoch: an epoch with fewer steps would skip validation and one
        # with more would validate before its end. Without a length it validates when
        # the epoch's batches run out, whatever their number.
        raise TypeError(
            "MacroBatchLoader: the number of mini-batches changes with every epoch's "
            "partition draw, so the loader has no length; `num_batches(epoch)` gives it "
            "with a fixed reuse factor."
        )

    def _key(self, *keys: Any) -> tuple[Any, ...]:
        """A random stream's key: with several ranks, the rank's own."""
        return keys if self.world_size == 1 else (*keys, "rank", self.rank)

    def _global_sizes(self, n: int) -> list[int]:
        """Sizes of one process's global mini-batches of a pass over ``n`` targets (at the
        global batch ``world_size * batch_size``, as :func:`even_batches` cuts them)."""
        return split_sizes(n, macro_batch_steps(n, self.world_size * self.batch_size))

    def _dropped(self, n: int, first: int) -> int:
        """Targets of a pass over ``n`` that no rank trains from mini-batch ``first`` on:
        with ``rank_share="targets"``, ``len % world_size`` of every global batch (all of
        one shorter than ``world_size``, which gives no step)."""
        if self.world_size == 1 or self.rank_share != "targets":
            return 0
        world = self.world_size
        return sum(
            size % world if size >= world else size for size in self._global_sizes(n)[first:]
        )

    def _batches(self, order: Tensor, steps: int) -> list[Tensor]:
        """This rank's mini-batches of the target ``order`` of one pass.

        ``rank_share="targets"``: the rank's slices of one process's global batches
        (``order`` is the same on every rank). Otherwise ``order`` in ``steps`` near-equal
        mini-batches (``-1``: ``even_batches`` at ``batch_size``; no small tail either
        way)."""
        if self.world_size > 1 and self.rank_share == "targets":
            return shard_batches(order, self.rank, self.world_size, self.batch_size)
        if steps < 0:
            return even_batches(order, self.batch_size)
        return list(order.tensor_split(steps)) if steps else []

    # ------------------------------------------------------------------ iteration
    def _minibatches(
        self,
        mb: LoadedMacroBatch,
        epoch: int,
        m: int,
        p: int,
        start: int,
        final: bool,
        steps: int,
    ) -> Iterator[Emit]:
        """Pass ``p`` over macro-batch ``m`` from mini-batch ``start``; ``final``: the
        epoch's last pass. The pass's dropped targets count with its first batch."""
        targets = mb.targets
        # rank_share="targets": every rank draws one process's order of the macro-batch
        key = ("targets", epoch, m, p)
        gen = make_generator(self.seed, *(key if self.rank_share == "targets" else self._key(*key)))
        order = targets[torch.randperm(targets.numel(), generator=gen)]
        batches = self._batches(order, steps)
        count = len(batches)
        dropped = self._dropped(targets.numel(), start)
        if start >= count:
            self.stats.dropped_targets += dropped
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
            counts = {"mini_batches": 1, "targets": int(seeds.numel())}
            if b == start and dropped:
                counts["dropped_targets"] = dropped
            after = None if final and b + 1 == count else (m, p, b + 1)
            yield Emit(batch, after, counts)

    def _load(self, parts: list[int], pending: Future[LoadedMacroBatch] | None) -> LoadedMacroBatch:
        tic = time.perf_counter()
        mb = pending.result() if pending is not None else load_macro_batch(self.store, parts)
        self.stats.wait_seconds += time.perf_counter() - tic
        self.stats.read_seconds += mb.read_seconds
        self.stats.macro_batches += 1
        self.stats.nodes_loaded += mb.num_nodes
        return mb

    def _epoch(self, epoch: int, position: tuple[int, ...]) -> Iterator[Emit | Moved]:
        start_m, start_p, start_b = position
        reads = self.plan(epoch)
        schedule = [mb.parts for mb in reads]

        def submit(m: int) -> Future[LoadedMacroBatch] | None:
            if not self.prefetch or m >= len(schedule):
                return None
            return self.prefetcher.submit(load_macro_batch, self.store, schedule[m])

        pending = submit(start_m)
        try:
            for m in range(start_m, len(schedule)):
                mb = self._load(schedule[m], pending)
                pending = submit(m + 1)
                p = start_p if m == start_m else 0
                ended = False
                while True:
                    first = start_b if (m == start_m and p == start_p) else 0
                    self.stats.passes += 1
                    last_macro = m + 1 == len(schedule)
                    # The last macro-batch has no successor to wait for: adaptive reuse stops.
                    final = last_macro and (p + 1 >= self.reuse or self.adaptive_reuse)
                    for item in self._minibatches(mb, epoch, m, p, first, final, reads[m].steps):
                        ended = item.after is None
                        yield item
                    p += 1
                    if final or p >= self.reuse:
                        break
                    if self.adaptive_reuse and (pending is None or pending.done()):
                        break
                    yield Moved((m, p, 0))
                self.stats.passes_per_macro_batch.append(p)
                if not ended:
                    yield Moved((m + 1, 0, 0))
                del mb
        finally:
            if pending is not None and not pending.cancel():
                wait([pending])  # a read under way finishes inside this epoch's counters

    def _locate(self, epoch: int, step: int) -> tuple[int, int, int]:
        """This rank's (macro-batch, pass, mini-batch) after ``step`` mini-batches of ``epoch``."""
        plan = self.plan(epoch)
        for m, mb in enumerate(plan):
            count = mb.steps
            if step < self.reuse * count:
                return (m, step // count, step % count)
            step -= self.reuse * count
        return (len(plan), 0, 0)
