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
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

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
        }


def macro_batch_schedule(
    num_parts: int, parts_per_batch: int, seed: int, epoch: int
) -> list[list[int]]:
    """The macro-batches of ``epoch``: a shuffle of the partition ids cut into groups."""
    perm = torch.randperm(num_parts, generator=make_generator(seed, "parts", epoch)).tolist()
    return [perm[i : i + parts_per_batch] for i in range(0, num_parts, parts_per_batch)]


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
            ``num_parts`` and ``read_macro_batch(parts)``).
        parts_per_batch: partitions per macro-batch (``b``; at most ``store.num_parts``).
        fanouts: stage-2 neighbours per hop, outermost first (``-1`` = all).
        batch_size: training targets per mini-batch.
        reuse: passes over each macro-batch (1 = no reuse, at most 4); with
            ``adaptive_reuse`` the *most* passes.
        adaptive_reuse: after each pass, reuse the macro-batch again only while the next
            one is still being read (never more than ``reuse`` passes in all; at least 1).
        prefetch: read the next macro-batch in a background thread (double buffering);
            ``False`` reads it when needed (same batches with a fixed reuse factor).
        seed: base seed of every random draw.
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
    ) -> None:
        owner = "MacroBatchLoader"
        num_parts = int(store.num_parts)
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
        self.stats = MacroBatchStats()
        self._counts: list[int] | None = None

    # ------------------------------------------------------------------ schedule
    def schedule(self, epoch: int) -> list[list[int]]:
        return macro_batch_schedule(self.num_parts, self.parts_per_batch, self.seed, epoch)

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
        """Mini-batches per epoch with a fixed reuse factor (unknown with adaptive reuse)."""
        counts = self._target_counts()
        if counts is None or self.adaptive_reuse:
            raise TypeError("MacroBatchLoader: the number of mini-batches is not known in advance.")
        total = 0
        for parts in self.schedule(self.epoch):
            targets = sum(int(counts[p]) for p in parts)
            total += self.reuse * math.ceil(targets / self.batch_size)
        return total

    # ------------------------------------------------------------------ iteration
    def _minibatches(
        self, mb: LoadedMacroBatch, epoch: int, m: int, p: int, start: int, final: bool
    ) -> Iterator[Data]:
        gen = make_generator(self.seed, "targets", epoch, m, p)
        order = mb.targets[torch.randperm(mb.targets.numel(), generator=gen)]
        count = math.ceil(order.numel() / self.batch_size)
        # Stage 2 relabels through a buffer the size of the macro-batch (in memory: its
        # features are gathered with index_select).
        buffer = None
        if mb.num_nodes <= NODE_BUFFER_MAX_NODES:
            buffer = make_node_buffer(mb.num_nodes)
        for b in range(start, count):
            seeds = order[b * self.batch_size : (b + 1) * self.batch_size]
            batch = sample_minibatch(
                mb.indptr,
                mb.indices,
                mb.x,
                mb.y,
                seeds,
                self.fanouts,
                generator=make_generator(self.seed, "sample", epoch, m, p, b),
                node_ids=mb.node_ids,
                node_buffer=buffer,
            )
            batch.macro_parts = torch.tensor(mb.parts, dtype=torch.long)
            self.stats.mini_batches += 1
            if final and b + 1 == count:
                # The epoch is over once its last batch is out: Lightning may never ask again.
                self.epoch, self._position = epoch + 1, (0, 0, 0)
            else:
                self._position = (m, p, b + 1)
            yield batch

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        start_m, start_p, start_b = self._position
        schedule = self.schedule(epoch)
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
                p = start_p if m == start_m else 0
                while True:
                    first = start_b if (m == start_m and p == start_p) else 0
                    self.stats.passes += 1
                    self.stats.targets += max(mb.targets.numel() - first * self.batch_size, 0)
                    last_macro = m + 1 == len(schedule)
                    # The last macro-batch has no successor to wait for: adaptive reuse stops.
                    final = last_macro and (p + 1 >= self.reuse or self.adaptive_reuse)
                    yield from self._minibatches(mb, epoch, m, p, first, final)
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
            self.epoch, self._position = epoch + 1, (0, 0, 0)

    # Lightning saves and restores iterables that have these two methods (mid-epoch resume).
    def state_dict(self) -> dict[str, Any]:
        m, p, b = self._position
        return {"epoch": self.epoch, "macro_batch": m, "pass": p, "mini_batch": b}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self._position = (int(state["macro_batch"]), int(state["pass"]), int(state["mini_batch"]))
