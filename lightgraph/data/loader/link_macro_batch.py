"""HANOI's out-of-core macro-batches for link prediction.

The partition store holds the *training* graph. Each epoch reads macro-batches of at most
``parts_per_batch`` partitions plus the hubs (as for node tasks,
:class:`~lightgraph.data.loader.macro_batch.MacroBatchLoader`) and trains positive edges
inside them. Which edges an epoch trains is the ``edge_schedule``:

* ``"pairs"`` (default): **every training edge exactly once per epoch.** The epoch's
  shuffle of the partitions is cut into groups of ``parts_per_batch // 2``; every
  macro-batch is one *pair of groups*, and the epoch holds every pair (in a shuffled
  order), so the partitions of any two nodes meet in some macro-batch -- the property
  MariusGNN's buffer ordering gives its partition buckets. An edge between groups ``A`` and
  ``B`` is trained in the macro-batch ``{A, B}``; the edges inside group ``A`` are spread
  over the ``g - 1`` macro-batches holding ``A`` (each edge to one of them, by a hash of
  its endpoints and the epoch), so the macro-batches carry similar numbers of edges
  rather than the first holding each group carrying most of them (partitions keep most
  edges inside). The price is reading: with ``g = ceil(P /
  (parts_per_batch // 2))`` groups of ``P`` partitions an epoch reads ``g (g - 1) / 2``
  macro-batches, every partition ``g - 1`` times (the recipe's 64 partitions, 8 per
  macro-batch: 16 groups, 120 macro-batches, the store read 15 times).
* ``"disjoint"``: the node task's macro-batches (each partition read once per epoch). A
  training edge ``(u, v)`` is trained in the macro-batch holding the partition of its
  *owner* -- ``u``, the smaller id of an undirected pair -- when ``v`` is resident there
  too (in one of its partitions, or a hub); the other edges wait for an epoch whose draw
  groups them. An epoch covers a measured fraction of the edges (59 / 65 / 76 % on the
  recipe's graph with 2 / 4 / 8 of 16 partitions per macro-batch, docs/link_prediction.md).

``LoaderStats.targets`` counts the edges trained. In both schedules:

* **negatives** are drawn uniformly among the macro-batch's *resident* nodes (its
  partitions and the hubs), as MariusGNN does: nothing else is in memory. That is biased
  against uniform over all nodes: hubs are resident in every macro-batch, so they are
  drawn about ``num_parts / parts_per_batch`` times more often than other nodes (measured
  in ``tests/data/loader/test_link_macro_batch.py``).
* mini-batches of ``batch_size`` edges are sampled inside the macro-batch with
  ``fanouts``, the mini-batch's positive edges and their reverses excluded
  (:func:`~lightgraph.data.loader.link_neighbor.sample_link_minibatch`).
* **data-parallel ranks** each read the whole macro-batch (one process's) and train the
  ``rank``-th slice of each of one process's global mini-batches of ``world_size *
  batch_size`` edges (:func:`~lightgraph.data.loader.data_parallel.shard_batches`, the node
  task's ``rank_share="targets"``): the ranks' edges are disjoint, every rank takes the same
  steps, and at most ``world_size - 1`` edges per global step are nobody's that epoch
  (``stats.dropped_targets``). Each rank holds a whole macro-batch, so ``N`` ranks on one
  machine need ``N`` times one process's memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from lightgraph.data.loader.base import Emit
from lightgraph.data.loader.link_neighbor import sample_link_minibatch
from lightgraph.data.loader.macro_batch import (
    LoadedMacroBatch,
    MacroBatchLoader,
    PlannedMacroBatch,
    macro_batch_schedule,
)
from lightgraph.data.loader.negative_sampling import check_num_negatives
from lightgraph.functional.neighbor_sampling import NODE_BUFFER_MAX_NODES, make_node_buffer
from lightgraph.utilities.checks import check_bool, check_choice
from lightgraph.utilities.random_state import make_generator

#: Which training edges an epoch of macro-batches trains (see the module).
EdgeSchedule = Literal["pairs", "disjoint"]
EDGE_SCHEDULES: tuple[str, ...] = get_args(EdgeSchedule)


@dataclass(frozen=True)
class PairSchedule:
    """An epoch of the ``"pairs"`` schedule.

    Attributes:
        macro_batches: the partitions of every macro-batch, in training order.
        group_of_part: ``[num_parts]`` the group of every partition.
        assigned: ``[g, g]`` the macro-batch holding groups ``a`` and ``b`` (symmetric; the
            diagonal: ``-1``, or ``0`` when one macro-batch holds everything).
        holding: ``[g, g - 1]`` the macro-batches holding each group, in training order
            (the edges inside a group are spread over them).
    """

    macro_batches: list[list[int]]
    group_of_part: Tensor
    assigned: Tensor
    holding: Tensor

    def edge_macro_batch(self, group_u: Tensor, group_v: Tensor, key: Tensor, epoch: int) -> Tensor:
        """The macro-batch that trains each edge between groups ``group_u`` and
        ``group_v``; ``key``: a per-edge integer, the same for ``(u, v)`` and ``(v, u)``,
        that spreads the edges inside a group over the macro-batches holding it."""
        g = int(self.assigned.size(0))
        out = self.assigned[group_u, group_v].clone()
        inner = group_u == group_v
        if g > 1 and bool(inner.any()):
            spread = (key[inner] * 2654435761 + epoch * 40503) % (g - 1)
            out[inner] = self.holding[group_u[inner], spread]
        return out


def pair_schedule(num_parts: int, parts_per_batch: int, seed: int, epoch: int) -> PairSchedule:
    """The macro-batches of ``epoch`` in which every two partitions meet (see the module)."""
    perm = torch.randperm(num_parts, generator=make_generator(seed, "parts", epoch)).tolist()
    if parts_per_batch >= num_parts:
        groups = [perm]
    else:
        half = parts_per_batch // 2
        groups = [perm[i : i + half] for i in range(0, num_parts, half)]
    g = len(groups)
    group_of_part = torch.empty(num_parts, dtype=torch.long)
    for a, group in enumerate(groups):
        group_of_part[group] = a
    assigned = torch.full((g, g), -1, dtype=torch.long)
    holding = torch.empty(g, g - 1, dtype=torch.long)
    if g == 1:
        assigned[0, 0] = 0
        return PairSchedule([list(groups[0])], group_of_part, assigned, holding)
    pairs = [(a, b) for a in range(g) for b in range(a + 1, g)]
    order = torch.randperm(len(pairs), generator=make_generator(seed, "pairs", epoch)).tolist()
    pairs = [pairs[i] for i in order]
    seen = [0] * g
    for k, (a, b) in enumerate(pairs):
        assigned[a, b] = assigned[b, a] = k
        for c in (a, b):
            holding[c, seen[c]] = k
            seen[c] += 1
    return PairSchedule([groups[a] + groups[b] for a, b in pairs], group_of_part, assigned, holding)


def owned_positives(mb: LoadedMacroBatch, undirected: bool) -> Tensor:
    """``[2, P]`` local ids of the training edges whose owner (the source; the smaller
    original id of an undirected pair) is a node of ``mb``'s partitions, the other end
    being resident: what ``mb`` trains under the ``"disjoint"`` schedule."""
    counts = (mb.indptr[1:] - mb.indptr[:-1]).long()
    dst = torch.repeat_interleave(torch.arange(mb.num_nodes), counts)
    src = mb.indices.long()
    ids = mb.node_ids.long()
    keep = src != dst
    if undirected:  # one direction of each pair: owner = the smaller original id
        keep &= ids[src] < ids[dst]
    keep &= src < mb.num_part_nodes
    return torch.stack([src[keep], dst[keep]])


class LinkMacroBatchLoader(MacroBatchLoader):
    """Link mini-batches from HANOI's macro-batches (see the module).

    Args:
        store: the partition store of the training graph.
        parts_per_batch, fanouts, batch_size, reuse, adaptive_reuse, prefetch, seed: as
            for :class:`~lightgraph.data.loader.macro_batch.MacroBatchLoader`
            (``batch_size`` counts positive edges per rank).
        num_negatives: negatives per positive, uniform among the resident nodes.
        undirected: the training edges are undirected (each pair trained once).
        exclude: remove each mini-batch's positive edges and their reverses from its sample.
        edge_schedule: ``"pairs"`` (every training edge once per epoch; needs
            ``parts_per_batch >= 2`` unless it holds every partition) or ``"disjoint"``
            (each partition read once per epoch; the edges between macro-batches wait).
        rank, world_size: this process's data-parallel shard (see the module).
    """

    STATS_KEYS = MacroBatchLoader.STATS_KEYS

    def __init__(
        self,
        store: Any,
        parts_per_batch: int,
        fanouts: Sequence[int],
        batch_size: int,
        num_negatives: int = 1,
        undirected: bool = True,
        exclude: bool = True,
        edge_schedule: EdgeSchedule = "pairs",
        reuse: int = 1,
        adaptive_reuse: bool = False,
        prefetch: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        owner = "LinkMacroBatchLoader"
        self.num_negatives = check_num_negatives(owner, num_negatives)
        self.undirected = check_bool(owner, "undirected", undirected)
        self.exclude = check_bool(owner, "exclude", exclude)
        self.edge_schedule = check_choice(owner, "edge_schedule", edge_schedule, EDGE_SCHEDULES)
        super().__init__(
            store,
            parts_per_batch,
            fanouts,
            batch_size,
            reuse=reuse,
            adaptive_reuse=adaptive_reuse,
            prefetch=prefetch,
            seed=seed,
            rank=rank,
            world_size=world_size,
            rank_share="targets",
        )
        if self.edge_schedule == "pairs" and 1 == self.parts_per_batch < self.num_parts:
            raise ValueError(
                f"{owner}: edge_schedule='pairs' puts two groups of parts_per_batch // 2 "
                f"partitions in every macro-batch, so it needs `parts_per_batch` >= 2 (or all "
                f"{self.num_parts} partitions) but got 1; raise parts_per_batch or use "
                f"edge_schedule='disjoint'."
            )
        self._pairs: tuple[int, PairSchedule] | None = None

    def _check_data_parallel(self, owner: str) -> None:
        # Every rank reads the whole macro-batch: no per-partition counts are needed.
        self._check_fixed_reuse(owner)

    def _target_counts(self) -> list[int] | None:
        # The partitions' edge counts are not in the store: every macro-batch's steps come
        # from the edges it holds (the same count on every rank: each reads all of it).
        return None

    def pair_schedule(self, epoch: int) -> PairSchedule:
        """The ``"pairs"`` schedule of ``epoch`` (computed once per epoch)."""
        if self._pairs is None or self._pairs[0] != epoch:
            self._pairs = (
                epoch,
                pair_schedule(self.num_parts, self.parts_per_batch, self.seed, epoch),
            )
        return self._pairs[1]

    def plan(self, epoch: int) -> list[PlannedMacroBatch]:
        """The macro-batches of ``epoch`` (the same on every rank; steps unknown: ``-1``)."""
        if self.edge_schedule == "pairs":
            schedule = self.pair_schedule(epoch).macro_batches
        else:
            schedule = macro_batch_schedule(self.num_parts, self.parts_per_batch, self.seed, epoch)
        return [PlannedMacroBatch(list(parts), -1) for parts in schedule]

    def positives(self, mb: LoadedMacroBatch, epoch: int, m: int) -> Tensor:
        """``[2, P]`` local ids of the training edges macro-batch ``m`` of ``epoch`` trains."""
        pos = owned_positives(mb, self.undirected)
        if self.edge_schedule == "disjoint":
            return pos
        if mb.store_ids is None:
            raise ValueError(
                "LinkMacroBatchLoader: edge_schedule='pairs' needs every row's store id "
                "(`store_ids` of the macro-batch read)."
            )
        schedule = self.pair_schedule(epoch)
        ptr = torch.as_tensor(self.store.part_ptr, dtype=torch.long)
        part = torch.searchsorted(ptr, mb.store_ids.long(), right=True) - 1
        group = schedule.group_of_part[part]
        ids = mb.node_ids.long()
        u, v = ids[pos[0]], ids[pos[1]]
        # The same key for an edge in every macro-batch (original ids), below 2**31.
        key = (torch.minimum(u, v) * 1_000_003 + torch.maximum(u, v)) % 2_147_483_647
        which = schedule.edge_macro_batch(group[pos[0]], group[pos[1]], key, epoch)
        return pos[:, which == m]

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
        pos = getattr(mb, "link_positives", None)
        if pos is None:
            pos = self.positives(mb, epoch, m)
            mb.link_positives = pos  # type: ignore[attr-defined]  # reused by later passes
        # Every rank draws one process's order; shard_batches gives this rank its slices.
        order = torch.randperm(
            pos.size(1), generator=make_generator(self.seed, "edges", epoch, m, p)
        )
        batches = self._batches(order, -1)
        dropped = self._dropped(pos.size(1), start)
        buffer = make_node_buffer(mb.num_nodes) if mb.num_nodes <= NODE_BUFFER_MAX_NODES else None
        if start >= len(batches) and dropped:
            self.stats.dropped_targets += dropped
        for b in range(start, len(batches)):
            edges = pos[:, batches[b]]
            neg = torch.randint(
                0,
                mb.num_nodes,
                (edges.size(1), self.num_negatives),
                generator=make_generator(self.seed, *self._key("negatives", epoch, m, p, b)),
            )
            batch = sample_link_minibatch(
                mb.indptr,
                mb.indices,
                mb.x,
                edges,
                neg,
                self.fanouts,
                generator=make_generator(self.seed, *self._key("sample", epoch, m, p, b)),
                exclude=self.exclude,
                node_ids=mb.node_ids,
                node_buffer=buffer,
            )
            batch.macro_parts = torch.tensor(mb.parts, dtype=torch.long)
            counts = {"mini_batches": 1, "targets": int(edges.size(1))}
            if b == start and dropped:
                counts["dropped_targets"] = dropped
            after = None if final and b + 1 == len(batches) else (m, p, b + 1)
            yield Emit(batch, after, counts)
