"""Link-prediction mini-batches by neighbour sampling: seed edges, negatives, and the seed
edges excluded from what the model sees.

A batch of ``B`` positive (seed) edges ``(u_i, v_i)`` and their ``[B, k]`` negative
destinations ``w_ij`` (:mod:`lightgraph.data.loader.negative_sampling`) is sampled as the
neighbourhood of every distinct endpoint -- the seed nodes, which come first in the batch,
in ascending id. **Seed-edge exclusion**: the batch's positive edges and their reverses are
removed from the sampled neighbourhood (DGL's ``exclude="reverse_id"``; PyG's
``LinkNeighborLoader`` leaves it to the split), so the model never sees the edges it is
asked to predict. The edges are removed after sampling, as DGL does: a node's sampled
in-edges may then number fewer than its fanout. With fanout ``-1`` everywhere the batch is
exact: the seeds' outputs are those of the full graph without the batch's positive edges
(and their reverses).

The batch is a PyG ``Data`` laid out as :func:`~lightgraph.data.loader.minibatch.
sample_minibatch`'s (``x``, ``edge_index``, ``n_id``, ``batch_size`` = the seed nodes,
per-hop counts), plus ``src``, ``dst`` (``[B]``) and ``neg`` (``[B, k]``): local ids of the
pairs to score, all among the first ``batch_size`` rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.loader.base import Emit
from lightgraph.data.loader.minibatch import NeighborSamplingLoader, gather_rows
from lightgraph.data.loader.negative_sampling import KnownEdges, NegativeSampler
from lightgraph.functional.neighbor_sampling import sample_neighbors
from lightgraph.utilities.checks import check_bool, check_graph_edge_index
from lightgraph.utilities.random_state import make_generator


def sample_link_minibatch(
    indptr: Tensor,
    indices: Tensor,
    x: Tensor,
    pos: Tensor,
    neg: Tensor,
    fanouts: Sequence[int],
    generator: torch.Generator | None = None,
    exclude: bool = True,
    node_ids: Tensor | None = None,
    node_buffer: Tensor | None = None,
    memory_mapped: bool = False,
) -> Data:
    """Sample the neighbourhood of a batch of positive edges and their negatives.

    Args:
        indptr, indices: CSC adjacency of the message-passing graph (in-neighbours).
        x: node features.
        pos: ``[2, B]`` positive edges (global ids): sources, destinations.
        neg: ``[B, k]`` negative destinations (global ids) of every positive's source.
        fanouts: neighbours per hop (``-1``: all).
        generator: random stream of the sampler.
        exclude: remove ``pos`` and its reverses from the sampled edges.
        node_ids: original id of every CSC node (``n_id``); identity when ``None``.
        node_buffer: the sampler's relabelling buffer (see :func:`~lightgraph.functional.
            neighbor_sampling.make_node_buffer`).
        memory_mapped: ``x`` is memory-mapped (rows read in ascending order).

    Returns:
        ``Data(x, edge_index, n_id, batch_size, num_sampled_nodes, num_sampled_edges, src,
        dst, neg)``.
    """
    src, dst = pos[0].long(), pos[1].long()
    seeds, inverse = torch.unique(torch.cat([src, dst, neg.reshape(-1)]), return_inverse=True)
    b = src.numel()
    sample = sample_neighbors(
        indptr, indices, seeds, list(fanouts), generator=generator, node_buffer=node_buffer
    )
    node, row, col = sample.node, sample.row, sample.col
    per_hop = list(sample.num_sampled_edges)
    if exclude and row.numel() and b:
        # A positive edge joins two seed nodes, and only hop 1 has seed destinations (the
        # seeds are expanded at hop 1 only): the candidates are hop 1's edges from a seed.
        size = seeds.numel()
        first = per_hop[0]
        cand = (row[:first] < size).nonzero().view(-1)
        local_src, local_dst = inverse[:b], inverse[b : 2 * b]
        excluded = torch.cat([local_src * size + local_dst, local_dst * size + local_src])
        hit = cand[torch.isin(row[cand] * size + col[cand], excluded)]
        if hit.numel():
            keep = torch.ones(row.numel(), dtype=torch.bool)
            keep[hit] = False
            row, col = row[keep], col[keep]
            per_hop = [first - int(hit.numel()), *per_hop[1:]]
    data = Data(x=gather_rows(x, node, memory_mapped), edge_index=torch.stack([row, col]))
    data.n_id = node if node_ids is None else node_ids[node]
    data.batch_size = int(seeds.numel())
    data.num_sampled_nodes = list(sample.num_sampled_nodes)
    data.num_sampled_edges = per_hop
    data.src = inverse[:b]
    data.dst = inverse[b : 2 * b]
    data.neg = inverse[2 * b :].view(neg.shape)
    return data


class LinkNeighborSamplingLoader(NeighborSamplingLoader):
    """Mini-batches of positive edges with negatives, neighbour-sampled, resumable mid-epoch.

    Neighbour sampling (:class:`~lightgraph.data.loader.minibatch.NeighborSamplingLoader`)
    over seed *edges*: every epoch shuffles the positive edges (from ``(seed, epoch)``), and
    under data parallelism each rank trains its share of them as the node loader does with
    nodes (disjoint, equally many steps; the last ``E % world_size`` edges of the epoch's
    order are left out). A batch's negatives and its sample come from random streams keyed
    by ``(seed, epoch, batch[, rank])``, so a resumed run draws the batches the
    uninterrupted run would have drawn.

    Args:
        indptr, indices: CSC adjacency of the training message-passing graph.
        x: node features.
        pos: ``[2, E]`` the positive (training) edges.
        fanouts: neighbours per hop (``-1``: all).
        batch_size: positive edges per mini-batch.
        negative_sampler: the :class:`~lightgraph.data.loader.negative_sampling.
            NegativeSampler`.
        known: the edges ``"strict"`` negatives avoid (required for them).
        exclude: remove each batch's positive edges and their reverses from its sample.
        shuffle, seed, node_ids, node_buffer, memory_mapped, rank, world_size: as for
            :class:`~lightgraph.data.loader.minibatch.NeighborSamplingLoader`.
        rel: ``[E]`` the relation type of every positive edge; each batch then carries its
            positives' as ``rel`` (the negatives share their positive's).
    """

    STATS_KEYS = ("mini_batches", "targets", "nodes_loaded", "dropped_targets")

    def __init__(
        self,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        pos: Tensor,
        fanouts: Sequence[int],
        batch_size: int,
        negative_sampler: NegativeSampler,
        known: KnownEdges | None = None,
        exclude: bool = True,
        shuffle: bool = True,
        seed: int = 0,
        node_ids: Tensor | None = None,
        node_buffer: bool | None = None,
        memory_mapped: bool = False,
        rank: int = 0,
        world_size: int = 1,
        rel: Tensor | None = None,
    ) -> None:
        owner = "LinkNeighborSamplingLoader"
        num_nodes = indptr.numel() - 1
        self.pos = check_graph_edge_index(owner, "pos", pos, num_nodes)
        if rel is not None and (rel.dim() != 1 or rel.numel() != self.pos.size(1)):
            raise ValueError(
                f"{owner}: expected `rel` to give the relation type of each of the "
                f"{self.pos.size(1)} positive edges but got shape {tuple(rel.shape)}."
            )
        self.rel = rel
        if not isinstance(negative_sampler, NegativeSampler):
            raise TypeError(
                f"{owner}: expected `negative_sampler` to be a NegativeSampler but got "
                f"{type(negative_sampler).__name__}."
            )
        if negative_sampler.mode == "strict" and known is None:
            raise ValueError(
                f"{owner}: negative_sampler mode 'strict' needs `known` (the edges to avoid)."
            )
        self.negative_sampler = negative_sampler
        self.known = known
        self.exclude = check_bool(owner, "exclude", exclude)
        super().__init__(
            indptr,
            indices,
            x,
            torch.empty(0),  # no labels: the targets are edges
            torch.arange(self.pos.size(1)),
            fanouts,
            batch_size,
            shuffle=shuffle,
            seed=seed,
            node_ids=node_ids,
            node_buffer=node_buffer,
            memory_mapped=memory_mapped,
            rank=rank,
            world_size=world_size,
        )

    def _batch_key(self, epoch: int, b: int) -> tuple[Any, ...]:
        return self._sample_key(epoch, b)[1:]

    def _epoch(self, epoch: int, position: tuple[int, ...]) -> Iterator[Emit]:
        (start,) = position
        order = self._epoch_seeds(epoch)
        count = len(self)
        dropped = self.seeds.numel() - self.world_size * order.numel()
        num_nodes = self.indptr.numel() - 1
        for b in range(start, count):
            edges = order[b * self.batch_size : (b + 1) * self.batch_size]
            pos = self.pos[:, edges]
            key = self._batch_key(epoch, b)
            neg = self.negative_sampler.sample(
                pos[0], num_nodes, make_generator(self.seed, "negatives", *key), self.known
            )
            batch = sample_link_minibatch(
                self.indptr,
                self.indices,
                self.x,
                pos,
                neg,
                self.fanouts,
                generator=make_generator(self.seed, "sample", *key),
                exclude=self.exclude,
                node_ids=self.node_ids,
                node_buffer=self._node_buffer(),
                memory_mapped=self.memory_mapped,
            )
            if self.rel is not None:
                batch.rel = self.rel[edges]
            counts = {
                "mini_batches": 1,
                "targets": int(edges.numel()),
                "nodes_loaded": int(batch.num_nodes),
            }
            if b == 0:
                counts["dropped_targets"] = dropped
            yield Emit(batch, None if b + 1 == count else (b + 1,), counts)
