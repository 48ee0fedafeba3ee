"""Link prediction as a LightningModule: a GNN encoder, a pair decoder, ranking evaluation.

Training takes the sampled batches of a link loader
(:class:`~lightgraph.data.loader.link_neighbor.LinkNeighborSamplingLoader`): the encoder
computes the seed nodes' embeddings, the decoder scores the batch's positive pairs and
their negatives, and the loss is binary cross-entropy over all of them (``"bce"``) or a
softmax of each positive against its own negatives (``"softmax"``).

Evaluation takes a :class:`~lightgraph.data.batch.LinkEvalBatch`: every node's embedding
is computed once, layer by layer over the split's message-passing graph
(:func:`~lightgraph.nn.layerwise.layerwise_inference`), then the queries are scored
against their negatives in chunks sized by ``eval_memory_budget`` -- the ``[Q, K]`` score
matrix never exists -- and reduced to MRR and Hits@K (OGB's definitions; the metric states
are sums, so under DDP, where every rank scores its share of the queries, they are
global).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Literal, get_args

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torchmetrics import MeanMetric

from lightgraph.data.batch import LinkEvalBatch
from lightgraph.data.loader.data_parallel import data_parallel_shard
from lightgraph.functional.link_ranking import link_ranks
from lightgraph.models.link_metrics import HitsAtK, MeanReciprocalRank
from lightgraph.nn.destination import destination_forward
from lightgraph.nn.layerwise import layerwise_inference
from lightgraph.nn.link_decoders import DistMultDecoder, DotDecoder, LinkDecoder, MLPDecoder
from lightgraph.utilities.checks import check_bool, check_choice, check_int, check_non_negative

LinkLoss = Literal["bce", "softmax"]
LINK_LOSSES: tuple[str, ...] = get_args(LinkLoss)
DecoderName = Literal["dot", "mlp", "distmult"]
DECODER_NAMES: tuple[str, ...] = get_args(DecoderName)


def _decoder(owner: str, decoder: Any, model: nn.Module, num_relations: int) -> LinkDecoder:
    if isinstance(decoder, LinkDecoder):
        return decoder
    if decoder == "dot":
        return DotDecoder()
    if decoder in ("mlp", "distmult"):
        channels = getattr(model, "out_channels", None)
        if not isinstance(channels, int):
            kind = "MLPDecoder" if decoder == "mlp" else "DistMultDecoder"
            raise ValueError(
                f"{owner}: decoder={decoder!r} needs the encoder's `out_channels` to size it; "
                f"pass a {kind}(in_channels=...) instead."
            )
        if decoder == "mlp":
            return MLPDecoder(channels)
        if num_relations < 1:
            raise ValueError(
                f"{owner}: decoder='distmult' scores each pair under its relation type and "
                f"needs `num_relations` >= 1 (the data's relation types, e.g. "
                f"--model.init_args.num_relations=4 for SyntheticGraph(num_relations=4)) but "
                f"got {num_relations}."
            )
        return DistMultDecoder(channels, num_relations)
    raise ValueError(
        f"{owner}: expected `decoder` to be one of {list(DECODER_NAMES)} or a LinkDecoder "
        f"(DotDecoder, MLPDecoder, DistMultDecoder) but got {decoder!r}."
    )


class LinkPredictor(pl.LightningModule):
    """Link prediction with any GNN encoder (see the module).

    Args:
        model: the encoder, a ``torch.nn.Module`` called as ``model(x, edge_index)``; a PyG
            ``BasicGNN`` (GraphSAGE, GCN, GAT, GIN, ...) also trims sampled batches layer by
            layer (``trim``) and evaluates layer-wise.
        decoder: ``"dot"``, ``"mlp"`` (an :class:`~lightgraph.nn.link_decoders.MLPDecoder`
            over the encoder's ``out_channels``), ``"distmult"`` (a
            :class:`~lightgraph.nn.link_decoders.DistMultDecoder` of ``num_relations``
            types: the batches must carry ``rel``) or a
            :class:`~lightgraph.nn.link_decoders.LinkDecoder`.
        loss: ``"bce"`` (binary cross-entropy over the positives and negatives) or
            ``"softmax"`` (each positive against its own negatives).
        lr, weight_decay: Adam's.
        hits_k: the cut-offs of Hits@K logged at evaluation.
        trim: compute only the rows each layer's output needs on sampled batches.
        inference_chunk_size: destination nodes per chunk of layer-wise inference.
        eval_memory_budget: bytes the scoring of a chunk of queries may hold (the gathered
            negative embeddings and their scores); the node embeddings themselves
            (``N x D`` floats) come on top.
        num_relations: relation types of the edges, for ``decoder="distmult"`` (the data
            module's ``num_relations``; 0: none). Not linked by the CLI, which would hand it
            to every model: give it with the decoder.
    """

    def __init__(
        self,
        model: nn.Module,
        decoder: LinkDecoder | DecoderName = "dot",
        loss: LinkLoss = "bce",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        hits_k: Sequence[int] = (10, 50, 100),
        trim: bool = True,
        inference_chunk_size: int = 8192,
        eval_memory_budget: int = 256 << 20,
        num_relations: int = 0,
    ) -> None:
        super().__init__()
        owner = "LinkPredictor"
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"{owner}: expected `model` to be a torch.nn.Module (e.g. "
                f"torch_geometric.nn.models.GraphSAGE) but got {type(model).__name__}."
            )
        check_choice(owner, "loss", loss, LINK_LOSSES)
        check_non_negative(owner, "lr", lr)
        check_non_negative(owner, "weight_decay", weight_decay)
        check_bool(owner, "trim", trim)
        check_int(owner, "inference_chunk_size", inference_chunk_size, low=1)
        check_int(owner, "eval_memory_budget", eval_memory_budget, low=1)
        hits_k = [check_int(owner, "hits_k", k, low=1) for k in hits_k]
        self.save_hyperparameters(ignore=["model", "decoder"])
        self.model = model
        check_int(owner, "num_relations", num_relations, low=0)
        self.decoder = _decoder(owner, decoder, model, num_relations)
        self.train_loss_metric = MeanMetric()
        self.val_loss_metric = MeanMetric()
        self.mrr = nn.ModuleDict({s: MeanReciprocalRank() for s in ("val", "test")})
        self.hits = nn.ModuleDict(
            {s: nn.ModuleList(HitsAtK(k) for k in hits_k) for s in ("val", "test")}
        )

    # ------------------------------------------------------------------------ encoder
    def encode(self, batch: Data) -> Tensor:
        """The encoder's output rows of ``batch``'s seed nodes (the first ``batch_size``)."""
        size = int(batch.batch_size)
        nodes_per_hop = getattr(batch, "num_sampled_nodes", None)
        edges_per_hop = getattr(batch, "num_sampled_edges", None)
        model = self.model
        counts = bool(self.hparams.trim) and nodes_per_hop is not None
        if counts and isinstance(model, BasicGNN) and model.jk_mode in (None, "last"):
            out, _ = destination_forward(
                model, batch.x, batch.edge_index, list(nodes_per_hop), list(edges_per_hop)
            )
        else:
            out = model(batch.x, batch.edge_index)
        return out[:size]

    def score(self, h_src: Tensor, h_dst: Tensor, rel: Tensor | None = None) -> Tensor:
        """The decoder's logits for pairs of embeddings (broadcasting)."""
        return self.decoder(h_src, h_dst, rel)

    def _loss(self, pos: Tensor, neg: Tensor) -> Tensor:
        if self.hparams.loss == "bce":
            logits = torch.cat([pos, neg.reshape(-1)])
            target = torch.cat([torch.ones_like(pos), torch.zeros(neg.numel(), device=pos.device)])
            return F.binary_cross_entropy_with_logits(logits, target)
        logits = torch.cat([pos.view(-1, 1), neg], dim=1)
        return F.cross_entropy(
            logits, torch.zeros(pos.numel(), dtype=torch.long, device=pos.device)
        )

    def forward(self, batch: Data) -> tuple[Tensor, Tensor]:
        """``(pos [B], neg [B, k])`` logits of a sampled link batch."""
        h = self.encode(batch)
        rel = getattr(batch, "rel", None)
        h_src = h[batch.src]
        pos = self.score(h_src, h[batch.dst], rel)
        neg = self.score(h_src.unsqueeze(1), h[batch.neg], None if rel is None else rel.view(-1, 1))
        return pos, neg

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        pos, neg = self(batch)
        loss = self._loss(pos, neg)
        n = int(pos.numel())
        self.train_loss_metric.update(loss.detach(), weight=n)
        self.log(
            "train_loss",
            self.train_loss_metric,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=n,
        )
        return loss

    # ------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def node_embeddings(self, batch: LinkEvalBatch) -> Tensor:
        """Every node's embedding over ``batch``'s message-passing graph, computed once:
        layer-wise for a PyG ``BasicGNN``, one full-graph call otherwise."""
        model = self.model
        if isinstance(model, BasicGNN) and model.jk_mode in (None, "last"):
            return layerwise_inference(
                model,
                batch.indptr,
                batch.indices,
                batch.x,
                chunk_size=int(self.hparams.inference_chunk_size),
                device=self.device,
            )
        was_training = model.training
        model.eval()
        try:
            counts = batch.indptr[1:] - batch.indptr[:-1]
            dst = torch.repeat_interleave(torch.arange(batch.num_nodes), counts.long())
            edge_index = torch.stack([batch.indices.long(), dst]).to(self.device)
            return model(batch.x.to(self.device), edge_index).cpu()
        finally:
            model.train(was_training)

    def query_chunk(self, num_negatives: int, channels: int) -> int:
        """Queries scored at once within ``eval_memory_budget``. Per query: the ``K + 1``
        destination ids (twice, ``int64``), their gathered embeddings, the decoder's
        intermediates (:meth:`~lightgraph.nn.link_decoders.LinkDecoder.pair_bytes`), the
        scores and the two comparisons of the ranking; and the source's embedding. The
        buffer of negative ids holds one block (``LinkEvalBatch.NEGATIVE_BLOCK x K``
        int64) when the chunk is smaller: the floor of the budget."""
        pairs = num_negatives + 1
        per_pair = 16 + 4 * channels + self.decoder.pair_bytes(channels) + 4 + 2
        per_query = pairs * per_pair + 4 * channels + 8 * num_negatives  # + its negative ids
        # 15 % of the budget is left to what the count does not model (allocator slack,
        # small temporaries); measured in benchmarks/bench_link_eval_memory.py.
        budget = int(self.hparams.eval_memory_budget) * 85 // 100
        chunk = budget // per_query
        block = LinkEvalBatch.NEGATIVE_BLOCK
        if chunk < block:  # the negative ids are held a whole block at a time
            chunk = (budget - 8 * num_negatives * block) // (per_query - 8 * num_negatives)
        return max(1, chunk)

    @torch.no_grad()
    def rank_queries(
        self, h: Tensor, batch: LinkEvalBatch, start: int = 0, stop: int | None = None
    ) -> Tensor:
        """``[stop - start]`` ranks of queries ``[start, stop)`` among their negatives
        (:meth:`iter_ranks`, concatenated: 8 bytes per query on top of the budget)."""
        stop = batch.num_queries if stop is None else stop
        parts = list(self.iter_ranks(h, batch, start, stop))
        if not parts:
            return torch.empty(0, dtype=torch.float64, device=self.device)
        return torch.cat(parts)

    @torch.no_grad()
    def iter_ranks(
        self, h: Tensor, batch: LinkEvalBatch, start: int = 0, stop: int | None = None
    ) -> Iterator[Tensor]:
        """The ranks of queries ``[start, stop)`` among their negatives, chunk by chunk,
        each chunk sized by :meth:`query_chunk` within ``eval_memory_budget``: what
        evaluation reduces into its metrics, so no tensor grows with the queries."""
        stop = batch.num_queries if stop is None else stop
        if stop <= start:
            return
        channels, pairs = int(h.size(1)), batch.num_negatives + 1
        chunk = min(self.query_chunk(batch.num_negatives, channels), stop - start)
        # Drawn negatives come in blocks: read whole blocks (several per chunk, or one
        # block split into chunks), so no block is drawn twice.
        block = batch.NEGATIVE_BLOCK
        step = chunk // block * block if chunk >= block else block
        # One buffer of each kind for every chunk: a fresh [chunk, K + 1, D] tensor per
        # chunk fragments the heap (the allocator keeps what it cannot reuse).
        negatives = torch.empty(min(step, stop - start), batch.num_negatives, dtype=torch.long)
        ids_buffer = torch.empty(chunk, pairs, dtype=torch.long)
        gathered = torch.empty(chunk * pairs, channels, dtype=h.dtype, device=h.device)
        for lo in range(start, stop, step):
            hi = min(lo + step, stop)
            neg = batch.negatives(lo, hi, out=negatives)
            for a in range(lo, hi, chunk):
                b = min(a + chunk, hi)
                # The positive is scored in the same call as its negatives: a negative
                # that is the positive's own destination then gets the same score (a tie).
                ids = ids_buffer[: b - a]
                ids[:, 0] = batch.dst[a:b]
                ids[:, 1:] = neg[a - lo : b - lo]
                emb = gathered[: (b - a) * pairs]
                torch.index_select(h, 0, ids.view(-1), out=emb)
                h_src = h[batch.src[a:b]].to(self.device).unsqueeze(1)
                rel = None if batch.rel is None else batch.rel[a:b].to(self.device).view(-1, 1)
                scores = self.score(h_src, emb.view(b - a, pairs, channels).to(self.device), rel)
                yield link_ranks(scores[:, 0], scores[:, 1:])

    @torch.no_grad()
    def iter_shared_ranks(
        self, h: Tensor, batch: LinkEvalBatch, start: int = 0, stop: int | None = None
    ) -> Iterator[Tensor]:
        """Ranks of queries ``[start, stop)`` against the negative pairs every query shares
        (``batch.shared_neg``): ``1 + #(negatives scoring at least as high)``, so Hits@K is
        OGB's (a positive above the K-th best negative). The negatives are scored once, in
        chunks, and sorted; the queries in chunks of the same size."""
        assert batch.shared_neg is not None
        stop = batch.num_queries if stop is None else stop
        pairs = batch.shared_neg
        # One pair per row: a chunk holds two embeddings and a score per pair.
        chunk = max(1, int(self.hparams.eval_memory_budget) * 85 // 100 // (8 * h.size(1) + 24))
        scores = torch.cat(
            [
                self.score(
                    h[pairs[0, a : a + chunk]].to(self.device),
                    h[pairs[1, a : a + chunk]].to(self.device),
                )
                for a in range(0, pairs.size(1), chunk)
            ]
        )
        ordered = scores.sort().values
        for a in range(start, stop, chunk):
            b = min(a + chunk, stop)
            pos = self.score(h[batch.src[a:b]].to(self.device), h[batch.dst[a:b]].to(self.device))
            at_least = ordered.numel() - torch.searchsorted(ordered, pos, right=False)
            yield 1.0 + at_least.to(torch.float64)

    def _query_share(self, num_queries: int) -> tuple[int, int]:
        """This rank's ``[start, stop)`` of the queries under data parallelism."""
        trainer = self._trainer
        if trainer is None:
            return 0, num_queries
        rank, world = data_parallel_shard(trainer)
        if world == 1 or world != int(trainer.world_size):
            return 0, num_queries
        per = math.ceil(num_queries / world)
        return min(rank * per, num_queries), min((rank + 1) * per, num_queries)

    def _evaluate(self, batch: LinkEvalBatch, stage: str) -> None:
        # node_embeddings runs the encoder in eval mode; log_ranking the decoder.
        h = self.node_embeddings(batch)
        self.log_ranking(h, batch, stage, self._query_share(batch.num_queries))

    def log_ranking(
        self, h: Tensor, batch: LinkEvalBatch, stage: str, share: tuple[int, int]
    ) -> None:
        """Rank queries ``share = [start, stop)`` of ``batch`` over the embeddings ``h``,
        reduce them into the ``stage`` metrics chunk by chunk and log them."""
        was_training = self.training
        self.eval()
        mrr, hits = self.mrr[stage], list(self.hits[stage])
        n = 0
        shared = batch.shared_neg is not None
        ranking = self.iter_shared_ranks if shared else self.iter_ranks
        try:
            for ranks in ranking(h, batch, *share):
                if not shared:  # OGB defines no MRR against shared negatives
                    mrr.update(ranks)
                for metric in hits:
                    metric.update(ranks)
                n += int(ranks.numel())
        finally:
            self.train(was_training)
        if not shared:
            self.log(f"{stage}_mrr", mrr, prog_bar=True, batch_size=max(n, 1))
        for metric in hits:
            self.log(f"{stage}_hits@{metric.k}", metric, batch_size=max(n, 1))

    def validation_step(self, batch: LinkEvalBatch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: LinkEvalBatch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )
