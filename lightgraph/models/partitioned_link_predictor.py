"""Partition-parallel full-graph link prediction (the boundary-exchange strategy).

Every process holds one partition of the training graph
(:class:`~lightgraph.data.lightning.partitioned_link_data_module.PartitionedLinkDataModule`)
and computes its own nodes' embeddings with a partition-aware model (halo rows through the
strategy's exchanger, so Sylvie's and AdaQP's quantised exchange apply). Pairs whose
endpoints live on other ranks are scored exactly: their rows come from the owners and the
gradients go back (:func:`~lightgraph.distributed.remote_rows.partitioned_pair_scores`).
Each epoch is one full-graph step over all training edges; evaluation gathers every
node's embedding on every rank and ranks each rank's share of the queries as
:class:`~lightgraph.models.LinkPredictor` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.data.batch import LinkEvalBatch
from lightgraph.data.lightning.partitioned_link_data_module import PartitionedLinkBatch
from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.distributed.context import ParallelContextHolder
from lightgraph.distributed.remote_rows import fetch_rows, partitioned_pair_scores
from lightgraph.models.link_predictor import DecoderName, LinkLoss, LinkPredictor
from lightgraph.models.node_classifier import bind_partition
from lightgraph.nn.link_decoders import LinkDecoder
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.random_state import make_generator


class PartitionedLinkPredictor(ParallelContextHolder, LinkPredictor):
    """Link prediction over a partitioned graph with any :mod:`lightgraph.nn` model.

    Args:
        model: a partition-aware encoder, ``model(x, graph: PartitionedGraph)`` (e.g.
            :class:`lightgraph.nn.GraphSAGE`).
        decoder, loss, lr, weight_decay, hits_k, eval_memory_budget: as for
            :class:`~lightgraph.models.LinkPredictor`.
    """

    def __init__(
        self,
        model: nn.Module,
        decoder: LinkDecoder | DecoderName = "dot",
        loss: LinkLoss = "bce",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        hits_k: Sequence[int] = (10, 50, 100),
        eval_memory_budget: int = 256 << 20,
    ) -> None:
        super().__init__(
            model, decoder, loss, lr, weight_decay, hits_k, eval_memory_budget=eval_memory_budget
        )

    def graph(self, plan: PartitionPlan, stage: str) -> PartitionedGraph:
        """Bind the strategy's halo exchanger (if any) to a partition plan."""
        return bind_partition(self, plan, stage)

    def inner_embeddings(self, batch: PartitionedLinkBatch, stage: str) -> Tensor:
        """The embeddings of this rank's own nodes, ``[num_inner, D]``."""
        return self.model(batch.plan.x, self.graph(batch.plan, stage))

    def pair_scores(
        self, h_inner: Tensor, batch: PartitionedLinkBatch, neg: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``(pos [B], neg [B, k])`` logits of this rank's positives and their negatives."""
        src, dst = batch.pos
        both = torch.cat([dst.view(-1, 1), neg], dim=1)
        scores = partitioned_pair_scores(
            h_inner, src.view(-1, 1), both, self.score, batch.owner, batch.owner_local
        )
        return scores[:, 0], scores[:, 1:]

    def negatives(self, batch: PartitionedLinkBatch) -> Tensor:
        """Uniform negative destinations of this rank's positives: drawn for all ranks'
        positives from a stream keyed by ``(seed, epoch)`` and indexed by ``pos_index``, so
        they do not depend on the number of ranks (one process draws the same)."""
        gen = make_generator(batch.seed, "negatives", self.current_epoch)
        shape = (batch.num_pairs, batch.num_negatives)
        every = torch.randint(0, batch.plan.num_nodes_global, shape, generator=gen)
        return every if batch.pos_index is None else every[batch.pos_index]

    def training_step(self, batch: PartitionedLinkBatch, batch_idx: int) -> Tensor:
        h = self.inner_embeddings(batch, "train")
        pos, neg = self.pair_scores(h, batch, self.negatives(batch))
        k = batch.num_negatives
        if self.hparams.loss == "bce":
            total = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
            total = total + F.binary_cross_entropy_with_logits(
                neg, torch.zeros_like(neg), reduction="sum"
            )
            count = batch.num_pairs * (1 + k)
        else:
            logits = torch.cat([pos.view(-1, 1), neg], dim=1)
            target = torch.zeros(pos.numel(), dtype=torch.long, device=pos.device)
            total = F.cross_entropy(logits, target, reduction="sum")
            count = batch.num_pairs
        # The ranks' partial means add up to the global one (the strategy sums gradients).
        mean = total / max(count, 1)
        self.log(
            "train_loss", mean.detach(), reduce_fx="sum", sync_dist=True, prog_bar=True,
            on_step=False, on_epoch=True, batch_size=1,
        )  # fmt: skip
        return mean

    def _evaluate(self, batch: Any, stage: str) -> None:
        if not isinstance(batch, PartitionedLinkBatch):
            return super()._evaluate(batch, stage)
        plan = batch.plan
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                h = self.inner_embeddings(batch, stage)
                n = plan.num_nodes_global
                # Every node's embedding on every rank (one exchange), then each rank ranks
                # its share of the queries; the metric states are summed over the ranks.
                every = fetch_rows(h, torch.arange(n), batch.owner, batch.owner_local)
        finally:
            self.train(was_training)
        empty = torch.zeros(n + 1, dtype=torch.long)
        queries = LinkEvalBatch(
            stage, empty, empty[:0], every, batch.pos[0], batch.pos[1], neg=batch.neg,
            num_negatives=batch.num_negatives, seed=batch.seed, shared_neg=batch.shared_neg,
        )  # fmt: skip
        per = -(-queries.num_queries // plan.num_parts)
        share = (
            min(plan.rank * per, queries.num_queries),
            min((plan.rank + 1) * per, queries.num_queries),
        )
        self.log_ranking(every, queries, stage, share)
        return None
