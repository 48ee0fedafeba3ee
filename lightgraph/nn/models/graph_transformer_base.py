"""Shared plumbing of the graph transformers (Graphormer, GT) over TorchGT's token batches.

Both models take one :class:`~lightgraph.data.loader.token_batch.TokenBatch` (a node sequence or
a batch of graphs) and attend with :func:`~lightgraph.functional.attention.attend` over the
batch's :class:`~lightgraph.functional.attention.AttentionGraph`: ``"dense"`` (SDPA),
``"raw"``, topology-induced ``"sparse"``, ``"cluster_sparse"``, ``"auto"`` (the one of
those two whose kernel suits the pattern) or dual-interleaved ``"dual"`` (TorchGT: M. Zhang,
*Algorithm and System Co-design for Efficient and Scalable Graph Learning*, PhD thesis, NTU
2026, ch. 4, §4.3.2-4.3.4). Under graph parallelism (a
:class:`~lightgraph.distributed.SequenceParallel` of ``P > 1`` ranks installed on the
attention layers, e.g. by
:class:`~lightgraph.models.graph_transformer_module.GraphTransformerModule`) every rank holds
a shard of the tokens; token-wise layers run on the shard and each attention layer swaps
token shards for head shards with one all-to-all before attention and back after
(DeepSpeed-Ulysses, TorchGT §4.3.3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from lightgraph.functional.attention import DENSE_KINDS, KINDS, SPARSE_KINDS, AttentionGraph
from lightgraph.nn.attention.multihead_graph_attention import MultiheadGraphAttention
from lightgraph.utilities.checks import check_choice, check_divisible, check_int

if TYPE_CHECKING:
    from lightgraph.data.loader.token_batch import TokenBatch

__all__ = ["TASKS"]

#: Tasks of the graph transformers: per-token (``"node"``) or per-graph outputs.
TASKS: tuple[str, ...] = ("node", "graph")
# Kinds that may attend every pair of a batch, so need its `dense_bucket` to mask
# cross-graph pairs ("dual" runs "dense" on its dense steps).
_DENSE_KINDS = (*DENSE_KINDS, "dual")


class _GraphTransformer(nn.Module):
    """Shared plumbing: token embedding of global tokens, layers, readout, checks.

    Subclasses call :meth:`_init_common` first, build ``self.layers``, and in ``forward``
    run :meth:`_check_batch`, :meth:`_embed_global` and :meth:`_readout`.

    Attributes:
        requires_laplacian_pe: whether batches must carry ``lap_pe`` of ``pe_dim`` columns
            (the data module's ``pe_dim`` argument).
        pe_dim: Laplacian PE columns the model reads (0: none).
    """

    requires_laplacian_pe = False
    pe_dim = 0

    def _init_common(
        self,
        owner: str,
        in_channels: int,
        out_channels: int,
        hidden_channels: int,
        num_layers: int,
        heads: int,
        task: str,
        max_distance: int,
        kind: str,
        sparse_kind: str = "sparse",
    ) -> None:
        check_int(owner, "in_channels", in_channels)
        check_int(owner, "out_channels", out_channels)
        check_int(owner, "hidden_channels", hidden_channels)
        check_int(owner, "num_layers", num_layers)
        check_divisible(owner, "hidden_channels", hidden_channels, "heads", heads)
        check_int(owner, "max_distance", max_distance, 2)
        check_choice(owner, "kind", kind, KINDS)
        check_choice(owner, "sparse_kind", sparse_kind, SPARSE_KINDS)
        check_choice(owner, "task", task, TASKS)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.num_layers, self.heads = hidden_channels, num_layers, heads
        self.task = task
        self.max_distance = max_distance
        self.num_buckets = max_distance + 4
        self.global_embedding = nn.Parameter(torch.empty(hidden_channels))
        nn.init.normal_(self.global_embedding, std=0.02)

    @property
    def attention_layers(self) -> list[MultiheadGraphAttention]:
        """Every attention layer of the model."""
        return [m for m in self.modules() if isinstance(m, MultiheadGraphAttention)]

    def _check_batch(self, batch: TokenBatch) -> AttentionGraph:
        owner = type(self).__name__
        if batch.num_buckets and batch.num_buckets != self.num_buckets:
            raise ValueError(
                f"{owner}: the batch was built for {batch.num_buckets} bias buckets "
                f"(max_distance={batch.num_buckets - 4}) but the model has {self.num_buckets} "
                f"(max_distance={self.max_distance}); use the same `max_distance` for both."
            )
        if batch.x.size(1) != self.in_channels:
            raise ValueError(
                f"{owner}: expected token features with in_channels={self.in_channels} "
                f"columns but got {batch.x.size(1)}."
            )
        graph = batch.graph
        multi_graph = batch.readout_index is not None or batch.graph_index is not None
        if multi_graph and batch.num_graphs > 1 and graph.dense_bucket is None:
            dense = [a.kind for a in self.attention_layers if a.kind in _DENSE_KINDS]
            if dense:
                raise ValueError(
                    f"{owner}: kind {dense[0]!r} needs the batch's `dense_bucket` to keep "
                    f"attention inside each of its {batch.num_graphs} graphs, but the batch "
                    f"({batch.num_tokens} tokens) has none; lower `batch_size` or raise the "
                    f"data module's `dense_limit`."
                )
        if graph.num_layers != self.num_layers:
            # Condition C3 depends on the depth: re-evaluate it for this model.
            graph.num_layers = self.num_layers
            graph.cache.pop("conditions", None)
        return graph

    def _embed_global(self, h: Tensor, batch: TokenBatch) -> Tensor:
        # Always part of the graph, also for a shard without global tokens: DDP needs every
        # parameter to get a gradient on every rank.
        return torch.where(batch.is_global[:, None], self.global_embedding.to(h.dtype), h)

    def _readout(self, h: Tensor, batch: TokenBatch) -> Tensor:
        if self.task == "node":
            return h
        owner = type(self).__name__
        if batch.is_sharded:
            raise ValueError(
                f"{owner}: task='graph' needs whole graphs on every rank; graph batches are "
                f"data-parallel (GraphSetDataModule), not sharded."
            )
        if batch.readout_index is not None:
            return h[batch.readout_index]
        if batch.graph_index is None:
            return h.mean(0, keepdim=True)
        num = batch.num_graphs
        total = h.new_zeros(num, h.size(1)).index_add_(0, batch.graph_index, h)
        count = torch.bincount(batch.graph_index, minlength=num).clamp(min=1)
        return total / count[:, None].to(h.dtype)
