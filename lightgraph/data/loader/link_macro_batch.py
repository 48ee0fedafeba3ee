"""HANOI's out-of-core macro-batches for link prediction.

The partition store holds the *training* graph. Each epoch reads macro-batches of
``parts_per_batch`` partitions plus the hubs, as for node tasks
(:class:`~lightgraph.data.loader.macro_batch.MacroBatchLoader`), and trains, inside each,
the positive edges it owns:

* **which edges**: a training edge ``(u, v)`` is trained in the macro-batch that holds the
  partition of its *owner* -- ``u``, the smaller id of an undirected pair -- when ``v`` is
  resident there too (in one of its partitions, or a hub). So an edge is trained at most
  once per epoch, and exactly once when its endpoints' partitions fall in the same
  macro-batch or ``v`` is a hub; the other edges wait for an epoch whose draw groups them.
  ``LoaderStats.targets`` counts the edges trained: the fraction of the training edges an
  epoch covers is measured, not assumed (MariusGNN orders its partition buffer so every
  pair of partitions meets; a random draw does not).
* **negatives** are drawn uniformly among the macro-batch's *resident* nodes (its
  partitions and the hubs), as MariusGNN does: nothing else is in memory. That is biased
  against uniform over all nodes: hubs are resident in every macro-batch, so they are drawn
  about ``num_parts / parts_per_batch`` times more often than other nodes (measured in
  ``tests/data/loader/test_link_macro_batch.py``).
* mini-batches of ``batch_size`` edges are sampled inside the macro-batch with
  ``fanouts``, the mini-batch's positive edges and their reverses excluded
  (:func:`~lightgraph.data.loader.link_neighbor.sample_link_minibatch`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.loader.base import Emit
from lightgraph.data.loader.batching import even_batches
from lightgraph.data.loader.link_neighbor import sample_link_minibatch
from lightgraph.data.loader.macro_batch import (
    LoadedMacroBatch,
    MacroBatchLoader,
)
from lightgraph.data.loader.negative_sampling import check_num_negatives
from lightgraph.functional.neighbor_sampling import NODE_BUFFER_MAX_NODES, make_node_buffer
from lightgraph.utilities.checks import check_bool
from lightgraph.utilities.random_state import make_generator


def owned_positives(mb: LoadedMacroBatch, undirected: bool) -> Tensor:
    """``[2, P]`` local ids of the training edges ``mb`` trains: those whose owner (the
    source; the smaller id of an undirected pair) is a node of ``mb``'s partitions, the
    other end being resident."""
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
            (``batch_size`` counts positive edges).
        num_negatives: negatives per positive, uniform among the resident nodes.
        undirected: the training edges are undirected (each pair trained once).
        exclude: remove each mini-batch's positive edges and their reverses from its sample.

    One process only for now: data-parallel ranks would need the per-partition edge counts
    to split the partitions evenly.
    """

    STATS_KEYS = (
        "macro_batches",
        "passes",
        "mini_batches",
        "targets",
        "nodes_loaded",
        "read_seconds",
        "wait_seconds",
    )

    def __init__(
        self,
        store: Any,
        parts_per_batch: int,
        fanouts: Sequence[int],
        batch_size: int,
        num_negatives: int = 1,
        undirected: bool = True,
        exclude: bool = True,
        reuse: int = 1,
        adaptive_reuse: bool = False,
        prefetch: bool = True,
        seed: int = 0,
    ) -> None:
        owner = "LinkMacroBatchLoader"
        self.num_negatives = check_num_negatives(owner, num_negatives)
        self.undirected = check_bool(owner, "undirected", undirected)
        self.exclude = check_bool(owner, "exclude", exclude)
        super().__init__(
            store,
            parts_per_batch,
            fanouts,
            batch_size,
            reuse=reuse,
            adaptive_reuse=adaptive_reuse,
            prefetch=prefetch,
            seed=seed,
        )

    def _target_counts(self) -> list[int] | None:
        # The partitions' edge counts are not in the store: every macro-batch's steps come
        # from the edges it holds (ceil(P / batch_size), near-equal).
        return None

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
            pos = owned_positives(mb, self.undirected)
            mb.link_positives = pos  # type: ignore[attr-defined]  # reused by later passes
        gen = make_generator(self.seed, "edges", epoch, m, p)
        order = torch.randperm(pos.size(1), generator=gen)
        batches = even_batches(order, self.batch_size)
        buffer = make_node_buffer(mb.num_nodes) if mb.num_nodes <= NODE_BUFFER_MAX_NODES else None
        for b in range(start, len(batches)):
            edges = pos[:, batches[b]]
            neg = torch.randint(
                0,
                mb.num_nodes,
                (edges.size(1), self.num_negatives),
                generator=make_generator(self.seed, "negatives", epoch, m, p, b),
            )
            batch = sample_link_minibatch(
                mb.indptr,
                mb.indices,
                mb.x,
                edges,
                neg,
                self.fanouts,
                generator=make_generator(self.seed, "sample", epoch, m, p, b),
                exclude=self.exclude,
                node_ids=mb.node_ids,
                node_buffer=buffer,
            )
            batch.macro_parts = torch.tensor(mb.parts, dtype=torch.long)
            counts = {"mini_batches": 1, "targets": int(edges.size(1))}
            after = None if final and b + 1 == len(batches) else (m, p, b + 1)
            yield Emit(batch, after, counts)
