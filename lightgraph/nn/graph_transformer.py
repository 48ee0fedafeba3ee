"""Graph transformers over token sequences: Graphormer and GT, with TorchGT's attention kinds.

Both models take one :class:`~lightgraph.data.node_sequence.TokenBatch` (a node sequence
or a batch of graphs) and attend with :func:`~lightgraph.nn.attention.attend` over the
batch's :class:`~lightgraph.nn.attention.AttentionGraph`: ``"dense"`` (SDPA), ``"raw"``,
topology-induced ``"sparse"``, ``"cluster_sparse"`` or dual-interleaved ``"dual"``
(TorchGT, thesis ch. 4, §4.3.2-4.3.4). Under graph parallelism (a ``SequenceParallel`` of
``P > 1`` ranks installed on the attention layers, e.g. by
:class:`~lightgraph.models.graph_transformer_module.GraphTransformerModule`) every rank holds
a shard of the tokens; token-wise layers run on the shard and each attention layer swaps
token shards for head shards with one all-to-all before attention and back after
(DeepSpeed-Ulysses, TorchGT §4.3.3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.nn.attention import KINDS, AttentionGraph, attend, dual_uses_dense

if TYPE_CHECKING:
    from lightgraph.data.node_sequence import TokenBatch
    from lightgraph.functional.sequence_parallel import SequenceParallel

__all__ = [
    "GRAPHORMER_PRESETS",
    "GT",
    "Graphormer",
    "GraphTransformerLayer",
    "MultiheadGraphAttention",
    "SequenceBatchNorm",
]

#: Graphormer configurations of TorchGT's evaluation (thesis Table 4.4):
#: ``(num_layers, hidden_channels, heads)``.
GRAPHORMER_PRESETS: dict[str, tuple[int, int, int]] = {"slim": (4, 64, 8), "large": (12, 768, 32)}
TASKS = ("node", "graph")
NORMS = ("layer", "batch")
_DENSE_KINDS = ("dense", "raw", "dual")


def _check_int(owner: str, name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{owner}: expected `{name}` to be an integer >= {low} but got {value!r}.")
    return value


def _check_rate(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{owner}: expected `{name}` in [0, 1) but got {value!r}.")
    return float(value)


def _check_kind(owner: str, kind: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"{owner}: expected `kind` to be one of {KINDS} but got {kind!r}.")
    return kind


def _check_heads(owner: str, channels: int, heads: int) -> None:
    _check_int(owner, "heads", heads)
    if channels % heads:
        raise ValueError(
            f"{owner}: expected `heads` to divide the hidden channels ({channels}) but got "
            f"heads={heads}; pick heads in "
            f"{tuple(h for h in range(1, channels + 1) if channels % h == 0)}."
        )


class MultiheadGraphAttention(nn.Module):
    """Multi-head attention over an attention graph with a learned per-head bias (TorchGT).

    .. math::
        \\mathbf{o}_i = \\mathbf{W}_O \\Big\\Vert_{h=1}^{H} \\sum_{j \\in \\mathcal{N}(i)}
        \\operatorname{softmax}_j\\Big(\\frac{(\\mathbf{W}_Q^h \\mathbf{x}_i)^\\top
        (\\mathbf{W}_K^h \\mathbf{x}_j)}{\\sqrt{d}} + b^h_{\\phi(i, j)}\\Big)
        \\mathbf{W}_V^h \\mathbf{x}_j

    with :math:`\\mathcal{N}(i)` the keys of query ``i`` in the pattern of ``kind`` and
    :math:`b_{\\phi}` the bias table row of the pair's bucket (Graphormer's spatial
    encoding, thesis Eq. 2.5). The table gets a constant ``-inf`` row appended at index
    ``num_buckets``: the *masked* bucket that keeps dense kinds inside each graph of a
    batch.

    ``kind`` and ``threshold`` may be changed between steps (e.g. by a threshold tuner).
    With ``sequence_parallel`` set to a ``SequenceParallel`` of ``P > 1`` ranks and an
    input that holds only this rank's token shard, queries, keys and values go through one
    all-to-all to ``[S, H / P, 3, d]``, attention runs over all tokens with this rank's heads
    (bias columns :meth:`SequenceParallel.head_slice`) and a second all-to-all returns the
    token shard. ``"dual"`` runs dense attention when
    :func:`~lightgraph.nn.attention.dual_uses_dense` says so at :attr:`step` (every
    ``dense_every`` training steps and whenever the pattern fails C1-C3); in evaluation only
    the conditions count. :attr:`last_dense` tells whether the latest call was dense.

    Args:
        channels: input and output channels.
        heads: attention heads (must divide ``channels``).
        kind: one of :data:`~lightgraph.nn.attention.KINDS`.
        dropout: dropout on the attention probabilities.
        dense_every: dense period of ``"dual"`` (0: only when the conditions fail).
        num_buckets: learned bias buckets (9 = the data modules' default
            ``max_distance=5`` plus 4).
        block_size: tile side of ``"cluster_sparse"``.
        num_clusters: clusters of ``"cluster_sparse"`` (``None``: TorchGT's cache rule).
        threshold: transfer threshold of ``"cluster_sparse"``, in ``[0, 1]``.
        learn_bias: learn the bias table; ``False`` keeps it at zero (masking still works).

    Shapes:
        - **input:** ``x`` ``[S_r, channels]`` (``S_r = S`` without sharding), an
          :class:`~lightgraph.nn.attention.AttentionGraph` over ``S`` tokens
        - **output:** ``[S_r, channels]``
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        kind: str = "sparse",
        dropout: float = 0.0,
        dense_every: int = 0,
        num_buckets: int = 9,
        block_size: int = 16,
        num_clusters: int | None = None,
        threshold: float = 0.0,
        learn_bias: bool = True,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        _check_int(owner, "channels", channels)
        _check_heads(owner, channels, heads)
        _check_int(owner, "dense_every", dense_every, 0)
        _check_int(owner, "num_buckets", num_buckets)
        _check_int(owner, "block_size", block_size)
        if num_clusters is not None:
            _check_int(owner, "num_clusters", num_clusters)
        self.channels, self.heads = channels, heads
        self.head_channels = channels // heads
        self.kind = kind
        self.dropout = _check_rate(owner, "dropout", dropout)
        self.dense_every = dense_every
        self.num_buckets = num_buckets
        self.block_size = block_size
        self.num_clusters = num_clusters
        self.threshold = threshold
        self.q_proj = nn.Linear(channels, channels)
        self.k_proj = nn.Linear(channels, channels)
        self.v_proj = nn.Linear(channels, channels)
        self.out_proj = nn.Linear(channels, channels)
        if learn_bias:
            self.bias_table = nn.Parameter(torch.empty(num_buckets, heads))
        else:
            self.register_buffer("bias_table", torch.zeros(num_buckets, heads))
        self.sequence_parallel: SequenceParallel | None = None
        self.name = "attention"  # label of its all-to-all traffic in the exchange stats
        self.step = 0
        self.last_dense = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        if isinstance(self.bias_table, nn.Parameter):
            nn.init.normal_(self.bias_table, std=0.02)

    @property
    def kind(self) -> str:
        return self._kind

    @kind.setter
    def kind(self, value: str) -> None:
        self._kind = _check_kind(type(self).__name__, value)

    @property
    def threshold(self) -> float:
        return self._threshold

    @threshold.setter
    def threshold(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(
                f"{type(self).__name__}: expected `threshold` in [0, 1] but got {value!r}."
            )
        self._threshold = float(value)

    def extra_repr(self) -> str:
        return f"{self.channels}, heads={self.heads}, kind={self.kind!r}"

    def full_bias_table(self) -> Tensor:
        """``[num_buckets + 1, heads]``: the table and the masked bucket's ``-inf`` row."""
        table = self.bias_table
        return torch.cat([table, table.new_full((1, self.heads), float("-inf"))])

    def _check_graph(self, graph: AttentionGraph) -> None:
        top = graph.cache.get("max_bucket")
        if top is None:
            top = max(
                int(b.max()) if b is not None and b.numel() else 0
                for b in (graph.edge_bucket, graph.dense_bucket)
            )
            top = max(top, graph.far_bucket)
            graph.cache["max_bucket"] = top
        if top > self.num_buckets:
            raise ValueError(
                f"{type(self).__name__}: the attention graph uses bucket {top} but the layer "
                f"has num_buckets={self.num_buckets} (+1 masked); build the data with a "
                f"matching `max_distance` (num_buckets = max_distance + 4)."
            )

    def resolve_kind(self, graph: AttentionGraph) -> str:
        """The kind this call runs (``"dual"`` resolved to ``"dense"`` or ``"sparse"``)."""
        if self.kind != "dual":
            return self.kind
        dense_every = self.dense_every if self.training else 0
        return "dense" if dual_uses_dense(graph, self.step, dense_every) else "sparse"

    def forward(self, x: Tensor, graph: AttentionGraph, stage: str = "train") -> Tensor:
        owner = type(self).__name__
        S, S_r = graph.num_tokens, x.size(0)
        sp = self.sequence_parallel
        sharded = S_r != S
        if sharded and (sp is None or sp.world_size == 1):
            raise ValueError(
                f"{owner}: expected all {S} tokens of the attention graph (no sequence "
                f"parallelism is installed) but got {S_r}."
            )
        self._check_graph(graph)
        H, D = self.heads, self.head_channels
        qkv = torch.stack(
            [p(x).view(S_r, H, D) for p in (self.q_proj, self.k_proj, self.v_proj)], dim=2
        )
        table = self.full_bias_table()
        if sharded and sp is not None:
            qkv = sp.to_heads(qkv, S, layer=f"{self.name}.qkv", stage=stage)
            table = table[:, sp.head_slice(H)]
        q, k, v = (t.contiguous() for t in qkv.unbind(2))
        kind = self.resolve_kind(graph)
        self.last_dense = kind in ("dense", "raw")
        out = attend(
            q,
            k,
            v,
            graph,
            kind,
            table,
            dropout_p=self.dropout if self.training else 0.0,
            num_clusters=self.num_clusters,
            block_size=self.block_size,
            threshold=self.threshold,
        )
        if sharded and sp is not None:
            out = sp.to_sequence(out, S, layer=f"{self.name}.out", stage=stage)
        out = self.out_proj(out.reshape(S_r, self.channels))
        if self.training:
            self.step += 1
            if isinstance(self.bias_table, nn.Parameter):
                # A step may not read the table (a dense kind on a sequence longer than the
                # data's `dense_limit` has no buckets; "dual" switches kinds between steps).
                # DDP requires a gradient for every parameter on every step, so the table is
                # always tied into the graph: its gradient is then exactly zero, not missing.
                out = out + 0.0 * self.bias_table.sum()
        return out


class SequenceBatchNorm(nn.BatchNorm1d):
    """Batch normalisation over the tokens of a sequence, also when they are sharded.

    Without sharding this is :class:`torch.nn.BatchNorm1d`. In training, when
    :attr:`sequence_parallel` spans ``P > 1`` ranks and ``sharded`` is true, the per-channel
    sums and squared sums are all-reduced (differentiably) over its group, so the statistics
    and gradients equal those of one process holding every token.
    """

    sequence_parallel: SequenceParallel | None = None

    def forward(self, x: Tensor, sharded: bool = False) -> Tensor:  # type: ignore[override]
        sp = self.sequence_parallel
        if not (self.training and sharded and sp is not None and sp.world_size > 1):
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        C = x.size(1)
        local = torch.cat([x.sum(0), (x * x).sum(0), x.new_full((1,), float(x.size(0)))])
        total = all_reduce(local, group=sp.group)
        count = total[-1]
        mean = total[:C] / count
        var = (total[C : 2 * C] / count - mean * mean).clamp(min=0.0)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                m = self.momentum if self.momentum is not None else 0.1
                unbiased = var * count / (count - 1).clamp(min=1.0)
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), m)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), m)
                self.num_batches_tracked += 1
        out = (x - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out


class _Norm(nn.Module):
    def __init__(self, kind: str, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels) if kind == "layer" else SequenceBatchNorm(channels)

    def forward(self, x: Tensor, sharded: bool) -> Tensor:
        if isinstance(self.norm, SequenceBatchNorm):
            return self.norm(x, sharded)
        return self.norm(x)


class GraphTransformerLayer(nn.Module):
    """One transformer block over an attention graph.

    Pre-norm (``norm_first=True``, Graphormer):

    .. math::
        \\mathbf{h}' = \\mathbf{h} + \\operatorname{MHA}(\\operatorname{N}(\\mathbf{h})),
        \\qquad \\mathbf{h}'' = \\mathbf{h}' + \\operatorname{FFN}(\\operatorname{N}(\\mathbf{h}'))

    post-norm (``norm_first=False``, GT): :math:`\\mathbf{h}' = \\operatorname{N}(\\mathbf{h}
    + \\operatorname{MHA}(\\mathbf{h}))`, :math:`\\mathbf{h}'' = \\operatorname{N}(\\mathbf{h}'
    + \\operatorname{FFN}(\\mathbf{h}'))`. ``N`` is a LayerNorm or a
    :class:`SequenceBatchNorm`; the FFN is ``Linear -> activation -> dropout -> Linear``.

    Args:
        channels: hidden channels.
        heads: attention heads.
        ffn_channels: hidden size of the FFN (default ``channels``).
        dropout: dropout after attention and FFN (and inside the FFN).
        attention_dropout: dropout on attention probabilities.
        norm: ``"layer"`` or ``"batch"``.
        norm_first: pre-norm (``True``) or post-norm.
        activation: ``"gelu"`` or ``"relu"``.
        kind, dense_every, num_buckets, block_size, num_clusters, threshold, learn_bias:
            passed to :class:`MultiheadGraphAttention`.

    Shapes:
        - **input:** ``[S_r, channels]`` and the attention graph
        - **output:** ``[S_r, channels]``
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        ffn_channels: int | None = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        norm: Literal["layer", "batch"] = "layer",
        norm_first: bool = True,
        activation: Literal["gelu", "relu"] = "gelu",
        kind: str = "sparse",
        dense_every: int = 0,
        num_buckets: int = 9,
        block_size: int = 16,
        num_clusters: int | None = None,
        threshold: float = 0.0,
        learn_bias: bool = True,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if norm not in NORMS:
            raise ValueError(f"{owner}: expected `norm` to be one of {NORMS} but got {norm!r}.")
        if activation not in ("gelu", "relu"):
            raise ValueError(
                f"{owner}: expected `activation` to be one of ('gelu', 'relu') but got "
                f"{activation!r}."
            )
        ffn_channels = channels if ffn_channels is None else ffn_channels
        _check_int(owner, "ffn_channels", ffn_channels)
        self.dropout = _check_rate(owner, "dropout", dropout)
        self.norm_first = norm_first
        self.attn = MultiheadGraphAttention(
            channels,
            heads,
            kind=kind,
            dropout=attention_dropout,
            dense_every=dense_every,
            num_buckets=num_buckets,
            block_size=block_size,
            num_clusters=num_clusters,
            threshold=threshold,
            learn_bias=learn_bias,
        )
        self.norm1 = _Norm(norm, channels)
        self.norm2 = _Norm(norm, channels)
        self.ffn_in = nn.Linear(channels, ffn_channels)
        self.ffn_out = nn.Linear(ffn_channels, channels)
        self.activation = F.gelu if activation == "gelu" else F.relu

    def _ffn(self, x: Tensor) -> Tensor:
        x = F.dropout(self.activation(self.ffn_in(x)), self.dropout, self.training)
        return self.ffn_out(x)

    def forward(self, x: Tensor, graph: AttentionGraph, stage: str = "train") -> Tensor:
        sharded = x.size(0) != graph.num_tokens
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        if self.norm_first:
            x = x + drop(self.attn(self.norm1(x, sharded), graph, stage))
            return x + drop(self._ffn(self.norm2(x, sharded)))
        x = self.norm1(x + drop(self.attn(x, graph, stage)), sharded)
        return self.norm2(x + drop(self._ffn(x)), sharded)


class _GraphTransformer(nn.Module):
    """Shared plumbing: token embedding of global tokens, layers, readout, checks."""

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
    ) -> None:
        _check_int(owner, "in_channels", in_channels)
        _check_int(owner, "out_channels", out_channels)
        _check_int(owner, "hidden_channels", hidden_channels)
        _check_int(owner, "num_layers", num_layers)
        _check_heads(owner, hidden_channels, heads)
        _check_int(owner, "max_distance", max_distance, 2)
        _check_kind(owner, kind)
        if task not in TASKS:
            raise ValueError(f"{owner}: expected `task` to be one of {TASKS} but got {task!r}.")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.num_layers, self.heads = hidden_channels, num_layers, heads
        self.task = task
        self.max_distance = max_distance
        self.num_buckets = max_distance + 4
        self.global_embedding = nn.Parameter(torch.empty(hidden_channels))
        nn.init.normal_(self.global_embedding, std=0.02)

    @property
    def attention_layers(self) -> list[MultiheadGraphAttention]:
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


class Graphormer(_GraphTransformer):
    """Graphormer (Ying et al., 2021) over TorchGT's attention kinds (thesis Eq. 2.4-2.5).

    .. math::
        \\mathbf{h}_i^{(0)} = \\mathbf{W}\\mathbf{x}_i + \\mathbf{z}^-_{\\deg^-(i)}
        + \\mathbf{z}^+_{\\deg^+(i)}, \\qquad
        \\mathbf{A}^h_{ij} = \\frac{(\\mathbf{h}_i \\mathbf{W}^h_Q)(\\mathbf{h}_j
        \\mathbf{W}^h_K)^\\top}{\\sqrt{d}} + b^h_{\\phi(i, j)}

    Centrality encoding from in/out-degrees (clipped to ``max_degree``), a spatial bias
    :math:`b_\\phi` per bucket (shortest-path distance, edge, self, global token; one table
    shared by all layers), a learned embedding for global tokens, pre-LN transformer
    layers and a final LayerNorm. ``task="node"`` returns per-token outputs,
    ``task="graph"`` the output of every graph's global token (mean of its tokens
    without one).

    ``preset`` picks a configuration of thesis Table 4.4 (``"slim"``: 4 layers, 64 hidden,
    8 heads; ``"large"``: 12 layers, 768 hidden, 32 heads); explicit sizes must then agree
    or be left ``None``. Without preset the sizes default to the slim configuration.

    Args:
        in_channels: token feature size.
        out_channels: outputs per token (node task) or per graph (graph task).
        hidden_channels, num_layers, heads: model size (``None``: from the preset).
        kind: attention kind, one of :data:`~lightgraph.nn.attention.KINDS`.
        max_degree: largest degree with its own centrality embedding.
        max_distance: largest shortest-path distance with its own bias bucket; must match
            the data module's.
        task: ``"node"`` or ``"graph"``.
        dropout: dropout on embeddings, attention outputs and FFN.
        attention_dropout: dropout on attention probabilities.
        ffn_channels: FFN hidden size (default ``hidden_channels``, as in Graphormer).
        dense_every, threshold, block_size, num_clusters: attention options (see
            :class:`MultiheadGraphAttention`).
        preset: ``"slim"``, ``"large"`` or ``None``.

    Shapes:
        - **input:** a :class:`~lightgraph.data.node_sequence.TokenBatch` with ``S_r`` tokens
        - **output:** ``[S_r, out_channels]`` (node) or ``[num_graphs, out_channels]`` (graph)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int | None = None,
        num_layers: int | None = None,
        heads: int | None = None,
        kind: str = "sparse",
        max_degree: int = 64,
        max_distance: int = 5,
        task: Literal["node", "graph"] = "node",
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        ffn_channels: int | None = None,
        dense_every: int = 0,
        threshold: float = 0.0,
        block_size: int = 16,
        num_clusters: int | None = None,
        preset: Literal["slim", "large"] | None = None,
    ) -> None:
        super().__init__()
        owner = "Graphormer"
        num_layers, hidden_channels, heads = _resolve_preset(
            owner, preset, num_layers, hidden_channels, heads
        )
        self._init_common(
            owner,
            in_channels,
            out_channels,
            hidden_channels,
            num_layers,
            heads,
            task,
            max_distance,
            kind,
        )
        _check_int(owner, "max_degree", max_degree)
        self.preset = preset
        self.max_degree = max_degree
        self.dropout = _check_rate(owner, "dropout", dropout)
        self.input = nn.Linear(in_channels, hidden_channels)
        self.in_degree = nn.Embedding(max_degree + 1, hidden_channels)
        self.out_degree = nn.Embedding(max_degree + 1, hidden_channels)
        self.layers = nn.ModuleList(
            GraphTransformerLayer(
                hidden_channels,
                heads,
                ffn_channels,
                dropout=dropout,
                attention_dropout=attention_dropout,
                norm="layer",
                norm_first=True,
                kind=kind,
                dense_every=dense_every,
                num_buckets=self.num_buckets,
                block_size=block_size,
                num_clusters=num_clusters,
                threshold=threshold,
            )
            for _ in range(num_layers)
        )
        for i, layer in enumerate(self.layers):
            layer.attn.name = f"layers.{i}.attn"
        # The spatial bias is one learned scalar per bucket and head shared by all layers.
        for layer in self.layers[1:]:
            layer.attn.bias_table = self.layers[0].attn.bias_table
        self.final_norm = nn.LayerNorm(hidden_channels)
        self.head = nn.Linear(hidden_channels, out_channels)
        nn.init.normal_(self.in_degree.weight, std=0.02)
        nn.init.normal_(self.out_degree.weight, std=0.02)

    def forward(self, batch: TokenBatch, stage: str = "train") -> Tensor:
        graph = self._check_batch(batch)
        top = self.max_degree
        h = (
            self.input(batch.x.to(self.input.weight.dtype))
            + self.in_degree(batch.in_degree.clamp(max=top))
            + self.out_degree(batch.out_degree.clamp(max=top))
        )
        h = F.dropout(self._embed_global(h, batch), self.dropout, self.training)
        for layer in self.layers:
            h = layer(h, graph, stage)
        return self.head(self._readout(self.final_norm(h), batch))


class GT(_GraphTransformer):
    """GT, the graph transformer of Dwivedi & Bresson (2021), over TorchGT's attention kinds.

    .. math::
        \\mathbf{h}_i^{(0)} = \\mathbf{A}\\mathbf{x}_i + \\mathbf{C}\\boldsymbol{\\lambda}_i,
        \\qquad
        \\hat{\\mathbf{h}}_i = \\operatorname{N}\\big(\\mathbf{h}_i + \\mathbf{O}
        \\Vert_h \\textstyle\\sum_{j \\in \\mathcal{N}(i)} w^h_{ij} \\mathbf{V}^h
        \\mathbf{h}_j\\big), \\qquad
        \\mathbf{h}'_i = \\operatorname{N}\\big(\\hat{\\mathbf{h}}_i +
        \\operatorname{FFN}(\\hat{\\mathbf{h}}_i)\\big)

    with :math:`\\boldsymbol{\\lambda}_i` the ``pe_dim`` Laplacian eigenvectors of the
    token (:attr:`requires_laplacian_pe`: the data modules add ``lap_pe``), their signs
    flipped at random in training (one draw per eigenvector and step from a generator
    seeded by the step, so every graph-parallel rank flips alike), :math:`w^h_{ij}` the
    softmax of scaled dot products over the attention pattern (``"sparse"``: the graph
    neighbours, as in GT), post-norm layers with BatchNorm (default, the paper's best
    setting; synchronised over graph-parallel ranks) or LayerNorm, a ``2 x hidden`` FFN
    and an MLP head. TorchGT evaluates GT with 4 layers, 128 hidden channels and 8 heads
    (thesis Table 4.4), the defaults here.

    Args:
        in_channels: token feature size.
        out_channels: outputs per token (node task) or per graph (graph task).
        hidden_channels, num_layers, heads: model size.
        pe_dim: Laplacian eigenvectors per token.
        kind: attention kind.
        task: ``"node"`` or ``"graph"``.
        dropout, attention_dropout: dropout rates.
        norm: ``"batch"`` or ``"layer"``.
        ffn_channels: FFN hidden size (default ``2 * hidden_channels``).
        max_distance: must match the data module's (bucket layout).
        spatial_bias: also learn a per-bucket bias (off in the original GT).
        dense_every, threshold, block_size, num_clusters: attention options.
        seed: seed of the eigenvector sign flips.

    Shapes:
        - **input:** a :class:`~lightgraph.data.node_sequence.TokenBatch` with ``lap_pe``
        - **output:** ``[S_r, out_channels]`` (node) or ``[num_graphs, out_channels]`` (graph)
    """

    requires_laplacian_pe = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        num_layers: int = 4,
        heads: int = 8,
        pe_dim: int = 8,
        kind: str = "sparse",
        task: Literal["node", "graph"] = "node",
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        norm: Literal["batch", "layer"] = "batch",
        ffn_channels: int | None = None,
        max_distance: int = 5,
        spatial_bias: bool = False,
        dense_every: int = 0,
        threshold: float = 0.0,
        block_size: int = 16,
        num_clusters: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        owner = "GT"
        self._init_common(
            owner,
            in_channels,
            out_channels,
            hidden_channels,
            num_layers,
            heads,
            task,
            max_distance,
            kind,
        )
        _check_int(owner, "pe_dim", pe_dim)
        if norm not in NORMS:
            raise ValueError(f"{owner}: expected `norm` to be one of {NORMS} but got {norm!r}.")
        self.pe_dim = pe_dim
        self.dropout = _check_rate(owner, "dropout", dropout)
        self.seed = seed
        self.flips = 0
        self.input = nn.Linear(in_channels, hidden_channels)
        self.pe = nn.Linear(pe_dim, hidden_channels)
        self.layers = nn.ModuleList(
            GraphTransformerLayer(
                hidden_channels,
                heads,
                2 * hidden_channels if ffn_channels is None else ffn_channels,
                dropout=dropout,
                attention_dropout=attention_dropout,
                norm=norm,
                norm_first=False,
                activation="relu",
                kind=kind,
                dense_every=dense_every,
                num_buckets=self.num_buckets,
                block_size=block_size,
                num_clusters=num_clusters,
                threshold=threshold,
                learn_bias=spatial_bias,
            )
            for _ in range(num_layers)
        )
        for i, layer in enumerate(self.layers):
            layer.attn.name = f"layers.{i}.attn"
        if spatial_bias:
            for layer in self.layers[1:]:
                layer.attn.bias_table = self.layers[0].attn.bias_table
        half = max(hidden_channels // 2, 1)
        self.head = nn.Sequential(
            nn.Linear(hidden_channels, half), nn.ReLU(), nn.Linear(half, out_channels)
        )

    def forward(self, batch: TokenBatch, stage: str = "train") -> Tensor:
        graph = self._check_batch(batch)
        pe = batch.lap_pe
        if pe is None or pe.dim() != 2 or pe.size(1) != self.pe_dim:
            shape = None if pe is None else tuple(pe.shape)
            raise ValueError(
                f"GT: expected `batch.lap_pe` of shape [tokens, pe_dim={self.pe_dim}] but got "
                f"{shape}; data modules add it when the model sets `requires_laplacian_pe` "
                f"(outside a Trainer pass `laplacian_pe={self.pe_dim}` to the data module)."
            )
        pe = pe.to(self.pe.weight.dtype)
        if self.training:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.flips)
            sign = torch.randint(0, 2, (self.pe_dim,), generator=gen) * 2 - 1
            pe = pe * sign.to(device=pe.device, dtype=pe.dtype)
            self.flips += 1
        h = self.input(batch.x.to(self.input.weight.dtype)) + self.pe(pe)
        h = F.dropout(self._embed_global(h, batch), self.dropout, self.training)
        for layer in self.layers:
            h = layer(h, graph, stage)
        return self.head(self._readout(h, batch))


def _resolve_preset(
    owner: str,
    preset: str | None,
    num_layers: int | None,
    hidden_channels: int | None,
    heads: int | None,
) -> tuple[int, int, int]:
    if preset is None:
        base = GRAPHORMER_PRESETS["slim"]
    elif preset in GRAPHORMER_PRESETS:
        base = GRAPHORMER_PRESETS[preset]
        for name, value, expected in zip(
            ("num_layers", "hidden_channels", "heads"),
            (num_layers, hidden_channels, heads),
            base,
            strict=True,
        ):
            if value is not None and value != expected:
                raise ValueError(
                    f"{owner}: preset {preset!r} sets `{name}`={expected} but got {name}={value}; "
                    f"leave it None or drop the preset."
                )
    else:
        raise ValueError(
            f"{owner}: expected `preset` to be one of {tuple(GRAPHORMER_PRESETS)} or None but got "
            f"{preset!r}."
        )
    return (
        base[0] if num_layers is None else num_layers,
        base[1] if hidden_channels is None else hidden_channels,
        base[2] if heads is None else heads,
    )
