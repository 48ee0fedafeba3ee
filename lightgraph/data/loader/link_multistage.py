"""JOESTAR's large-batch sampling (LBS) for link prediction: macro-batches of seed edges.

The epoch's training edges are shuffled and cut into macro-batches of ``ratio * |E|``
edges exactly as LBS cuts training nodes (:class:`~lightgraph.data.loader.first_stage.
LargeBatchSampler` plans both, the same under data parallelism). For a macro-batch:

* **stage 1** (host, in the loader's background thread): every edge of the macro-batch
  gets its negatives; the distinct endpoints and negatives are the stage-1 seeds, whose
  neighbourhood is sampled with the model's ``fanouts`` (:func:`~lightgraph.data.loader.
  multistage.lbs_stage_one`); the sampled subgraph, with its rows, is the macro-batch.
* **stage 2** (per mini-batch, where the model runs): the mini-batch's edges and their
  negatives are sampled inside the macro-batch with ``second_stage_fanouts`` (all
  neighbours by default) by :func:`~lightgraph.data.loader.link_neighbor.
  sample_link_minibatch`, which removes the mini-batch's positive edges and their
  reverses (seed-edge exclusion): no block of the batch holds them.

With ``-1`` fanouts in both stages a mini-batch is exact: its seeds' outputs are those of
the full graph without the mini-batch's positive edges (tested against PyG). The
training loader is the :class:`~lightgraph.data.loader.multistage.MultistageLoader` of
node tasks, yielding :class:`~lightgraph.data.loader.multistage.StagedStep`\\ s of
:class:`LinkMacroBatch`\\ es.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.loader.batching import even_batches
from lightgraph.data.loader.first_stage import StageOnePlan
from lightgraph.data.loader.link_neighbor import sample_link_minibatch
from lightgraph.data.loader.multistage import lbs_stage_one
from lightgraph.data.loader.negative_sampling import KnownEdges, NegativeSampler
from lightgraph.utilities.random_state import make_generator


@dataclass
class LinkMacroBatch:
    """A macro-batch of seed edges after stage 1 (local ids index ``node``).

    Attributes:
        epoch, index: which epoch and which macro-batch of it.
        node: global id of every macro-batch node, ``[M]``; the stage-1 seeds first.
        x: their feature rows.
        indptr, indices: CSC of the sampled macro-batch subgraph over local ids.
        pos: ``[2, E_m]`` the macro-batch's positive edges, local ids, in plan order.
        neg: ``[E_m, k]`` their negative destinations, local ids.
        batches: per mini-batch, the positions in ``pos`` of its edges.
        num_seeds: the stage-1 seeds (distinct endpoints and negatives).
        build_seconds: host time of stage 1.
        rel: ``[E_m]`` the positives' relation types, when the edges carry them.
    """

    epoch: int
    index: int
    node: Tensor
    x: Tensor
    indptr: Tensor
    indices: Tensor
    pos: Tensor
    neg: Tensor
    batches: list[Tensor]
    num_seeds: int
    build_seconds: float = 0.0
    rel: Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.node.numel())

    @property
    def num_nodes_sampled(self) -> int:
        return self.num_nodes


def build_link_macro_batch(
    graph: tuple[Tensor, Tensor, Tensor],
    pos: Tensor,
    planned: StageOnePlan,
    fanouts: list[int],
    negative_sampler: NegativeSampler,
    seed: int,
    stream: tuple[Any, ...],
    batch_size: int,
    known: KnownEdges | None = None,
    num_threads: int = 1,
    node_buffer: Tensor | None = None,
    epoch: int = 0,
    index: int = 0,
    rel: Tensor | None = None,
) -> LinkMacroBatch:
    """Stage 1 of the macro-batch ``planned`` (its ``seeds`` are edge ids into ``pos``).

    ``graph = (indptr, indices, x)`` is the training message-passing graph; ``stream``
    keys the macro-batch's random draws (negatives, stage-1 sample); ``rel``: the relation
    type of every edge of ``pos``, if any.
    """
    tic = time.perf_counter()
    indptr, indices, x = graph
    edges = pos[:, planned.seeds]
    num_nodes = indptr.numel() - 1
    neg = negative_sampler.sample(
        edges[0], num_nodes, make_generator(seed, "negatives", *stream), known
    )
    seeds, inverse = torch.unique(
        torch.cat([edges[0], edges[1], neg.reshape(-1)]), return_inverse=True
    )
    node, m_indptr, m_indices, mx, _ = lbs_stage_one(
        indptr,
        indices,
        x,
        None,
        seeds,
        fanouts,
        generator=make_generator(seed, "stage1", *stream),
        num_threads=num_threads,
        node_buffer=node_buffer,
    )
    assert mx is not None
    e = edges.size(1)
    local_pos = torch.stack([inverse[:e], inverse[e : 2 * e]])
    local_neg = inverse[2 * e :].view(neg.shape)
    order = planned.order
    if planned.sizes is None:
        batches = even_batches(order, batch_size)
    else:
        batches = list(order.split(list(planned.sizes)))
    return LinkMacroBatch(
        epoch=epoch,
        index=index,
        node=node,
        x=mx,
        indptr=m_indptr,
        indices=m_indices,
        pos=local_pos,
        neg=local_neg,
        batches=batches,
        num_seeds=int(seeds.numel()),
        build_seconds=time.perf_counter() - tic,
        rel=None if rel is None else rel[planned.seeds],
    )


def link_stage_two(
    macro: LinkMacroBatch,
    step: int,
    fanouts: list[int],
    seed: int,
    rank: int | None = None,
    exclude: bool = True,
) -> Data:
    """Stage 2: mini-batch ``step`` of ``macro`` sampled inside it, its positive edges (and
    their reverses) excluded; ``n_id`` holds global ids."""
    key = (
        (macro.epoch, macro.index, step)
        if rank is None
        else (macro.epoch, macro.index, step, "rank", rank)
    )
    edges = macro.batches[step]
    batch = sample_link_minibatch(
        macro.indptr,
        macro.indices,
        macro.x,
        macro.pos[:, edges],
        macro.neg[edges],
        fanouts,
        generator=make_generator(seed, "stage2", *key),
        exclude=exclude,
        node_ids=macro.node,
    )
    if macro.rel is not None:
        batch.rel = macro.rel[edges]
    return batch
