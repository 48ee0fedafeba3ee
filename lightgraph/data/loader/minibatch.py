"""Sampled mini-batches as PyG ``Data``, and a resumable whole-graph neighbour-sampling loader.

:func:`sample_minibatch` turns a neighbour sample (:func:`lightgraph.functional.
neighbor_sampling.sample_neighbors`) into the :class:`~torch_geometric.data.Data` a PyG
``NeighborLoader`` would yield: the seeds first (``batch_size`` of them), ``n_id``,
``edge_index`` with messages flowing ``edge_index[0] -> edge_index[1]``, and the
per-hop counts PyG's ``BasicGNN`` uses to trim each layer.

:class:`NeighborSamplingLoader` iterates over seed nodes of one graph -- in memory, or
memory-mapped from an on-disk store (the NS-Ext baseline) -- with a per-epoch shuffle
and per-batch random streams derived from ``(seed, epoch, batch)``, so that a run
resumed from its :meth:`~NeighborSamplingLoader.state_dict` draws exactly the batches
the uninterrupted run would have drawn. Under data parallelism (``rank``, ``world_size``)
each rank trains its :func:`~lightgraph.data.loader.data_parallel.shard_targets` share of every
epoch's order. It relabels through a node buffer (up to
:data:`~lightgraph.functional.neighbor_sampling.NODE_BUFFER_MAX_NODES` nodes) and gathers
in-memory features with one ``index_select``; only memory-mapped features are read in
ascending row order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.loader.base import Emit, ResumableLoader
from lightgraph.data.loader.data_parallel import check_shard, shard_targets
from lightgraph.functional.neighbor_sampling import (
    NODE_BUFFER_MAX_NODES,
    make_node_buffer,
    sample_neighbors,
)
from lightgraph.utilities.checks import check_bool, check_fanouts, check_int
from lightgraph.utilities.random_state import make_generator


def gather_rows(x: Tensor, node: Tensor, memory_mapped: bool = False) -> Tensor:
    """``x[node]``.

    In memory this is one ``index_select`` (faster than sorting first; docs/benchmarks.md
    has the measurement). For ``memory_mapped`` features (e.g.
    :meth:`~lightgraph.data.PartitionStore.features`, a ``numpy.memmap``) the rows are
    read in ascending order of ``node`` instead: sequential page accesses. Both give the
    same rows.
    """
    if not memory_mapped:
        return x.index_select(0, node)
    order = torch.argsort(node)
    rows = torch.empty(node.numel(), x.size(1), dtype=x.dtype)
    rows[order] = x[node[order]]
    return rows


def sample_minibatch(
    indptr: Tensor,
    indices: Tensor,
    x: Tensor,
    y: Tensor,
    seeds: Tensor,
    fanouts: Sequence[int],
    generator: torch.Generator | None = None,
    node_ids: Tensor | None = None,
    node_buffer: Tensor | None = None,
    memory_mapped: bool = False,
) -> Data:
    """Sample the ``len(fanouts)``-hop neighbourhood of ``seeds`` and gather its rows.

    Args:
        indptr, indices: CSC adjacency (in-neighbours of each node), possibly memory-mapped.
        x, y: node features and labels indexed by the CSC's node ids.
        seeds: the target nodes (they come first in the batch).
        fanouts: neighbours per node per hop, outermost hop first (``-1`` = all).
        generator: random stream of the sampler.
        node_ids: global id of every CSC node (for ``n_id``); identity when ``None``.
        node_buffer: the sampler's relabelling buffer
            (:func:`~lightgraph.functional.neighbor_sampling.make_node_buffer`); ``None``:
            relabel with ``torch.unique`` (slower, same sample).
        memory_mapped: ``x`` is memory-mapped: read its rows in ascending order
            (:func:`gather_rows`).

    Returns:
        ``Data(x, y, edge_index, n_id, batch_size, num_sampled_nodes, num_sampled_edges)``.
    """
    sample = sample_neighbors(
        indptr, indices, seeds, list(fanouts), generator=generator, node_buffer=node_buffer
    )
    node = sample.node
    data = Data(
        x=gather_rows(x, node, memory_mapped),
        y=y[node],
        edge_index=torch.stack([sample.row, sample.col]),
    )
    data.n_id = node if node_ids is None else node_ids[node]
    data.batch_size = int(seeds.numel())
    data.num_sampled_nodes = list(sample.num_sampled_nodes)
    data.num_sampled_edges = list(sample.num_sampled_edges)
    return data


class NeighborSamplingLoader(ResumableLoader):
    """Mini-batches of neighbour samples over one graph, resumable mid-epoch.

    Args:
        indptr, indices: CSC adjacency of the graph (in memory or memory-mapped).
        x, y: node features and labels (in memory or memory-mapped).
        seeds: the nodes to iterate over (training, validation or test nodes).
        fanouts: neighbours per hop (``-1`` = all).
        batch_size: seeds per mini-batch.
        shuffle: reshuffle ``seeds`` every epoch (from ``(seed, epoch)``).
        seed: base seed of the shuffles and of the sampler's random streams.
        node_ids: global id of every node (``n_id`` of the batches).
        on_batch: called with every batch (``Data``) before it is yielded, e.g. to count
            the pages a memory-mapped graph touched.
        node_buffer: relabel through an ``int64`` node-sized buffer (8 bytes per node,
            allocated on first use); ``None``: when the graph has at most
            :data:`~lightgraph.functional.neighbor_sampling.NODE_BUFFER_MAX_NODES` nodes,
            else ``torch.unique``. The batches are the same either way.
        memory_mapped: ``x`` is memory-mapped (read its rows in ascending order); in
            memory one ``index_select`` is faster. The batches are the same either way.
        rank, world_size: this process's data-parallel shard. Every rank shuffles the
            seeds the same way (from ``(seed, epoch)``) and trains its
            :func:`~lightgraph.data.loader.data_parallel.shard_targets` share: the ``rank``-th
            ``batch_size`` slice of every global batch of ``world_size * batch_size``
            seeds, so the ranks' epochs are disjoint and equally long; the last
            ``len(seeds) % world_size`` seeds of the epoch's order are left out
            (``stats["dropped_targets"]``). With ``world_size > 1`` the rank joins the key
            of every per-batch random stream, so the ranks draw independent samples.
            ``world_size=1`` (the default) is the one-process loader.
    """

    STATS_KEYS = ("mini_batches", "targets", "nodes_loaded", "dropped_targets")

    def __init__(
        self,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        y: Tensor,
        seeds: Tensor,
        fanouts: Sequence[int],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        node_ids: Tensor | None = None,
        on_batch: Any = None,
        node_buffer: bool | None = None,
        memory_mapped: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        owner = "NeighborSamplingLoader"
        self.rank, self.world_size = check_shard(owner, rank, world_size)
        self.fanouts = check_fanouts(owner, fanouts)
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        self.shuffle = check_bool(owner, "shuffle", shuffle)
        self.seed = int(seed)
        self.indptr, self.indices, self.x, self.y = indptr, indices, x, y
        self.seeds = seeds.to(torch.long)
        self.node_ids = node_ids
        self.on_batch = on_batch
        self.memory_mapped = check_bool(owner, "memory_mapped", memory_mapped)
        if node_buffer is None:
            node_buffer = indptr.numel() - 1 <= NODE_BUFFER_MAX_NODES
        self.use_node_buffer = check_bool(owner, "node_buffer", node_buffer)
        self._buffer: Tensor | None = None
        super().__init__(world_size=self.world_size, prefetch=False)

    def __len__(self) -> int:
        """Mini-batches per epoch (of this rank)."""
        return math.ceil(self.seeds.numel() // self.world_size / self.batch_size)

    def _node_buffer(self) -> Tensor | None:
        if self.use_node_buffer and self._buffer is None:
            self._buffer = make_node_buffer(self.indptr.numel() - 1, self.indptr.device)
        return self._buffer

    def _order(self, epoch: int) -> Tensor:
        if not self.shuffle:
            return self.seeds
        perm = torch.randperm(
            self.seeds.numel(), generator=make_generator(self.seed, "order", epoch)
        )
        return self.seeds[perm]

    def _epoch_seeds(self, epoch: int) -> Tensor:
        """This rank's seeds of ``epoch``, in training order."""
        return shard_targets(self._order(epoch), self.rank, self.world_size, self.batch_size)

    def _sample_key(self, epoch: int, b: int) -> tuple[Any, ...]:
        if self.world_size == 1:
            return ("sample", epoch, b)
        return ("sample", epoch, b, "rank", self.rank)

    def _epoch(self, epoch: int, position: tuple[int, ...]) -> Iterator[Emit]:
        (start,) = position
        order = self._epoch_seeds(epoch)
        count = len(self)
        # Every rank has the same share: what the shares leave out (n % world_size),
        # counted with the epoch's first batch.
        dropped = self.seeds.numel() - self.world_size * order.numel()
        for b in range(start, count):
            seeds = order[b * self.batch_size : (b + 1) * self.batch_size]
            batch = sample_minibatch(
                self.indptr,
                self.indices,
                self.x,
                self.y,
                seeds,
                self.fanouts,
                generator=make_generator(self.seed, *self._sample_key(epoch, b)),
                node_ids=self.node_ids,
                node_buffer=self._node_buffer(),
                memory_mapped=self.memory_mapped,
            )
            if self.on_batch is not None:
                self.on_batch(batch)
            counts = {
                "mini_batches": 1,
                "targets": int(seeds.numel()),
                "nodes_loaded": int(batch.num_nodes),
            }
            if b == 0:
                counts["dropped_targets"] = dropped
            yield Emit(batch, None if b + 1 == count else (b + 1,), counts)

    def _locate(self, epoch: int, step: int) -> tuple[int, ...]:
        return (step,)  # every rank has the same number of batches
