"""Multi-head attention over an attention graph with a learned per-head bias (TorchGT).

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from lightgraph.functional.attention import (
    DEFAULT_DENSE_EVERY,
    DENSE_KINDS,
    KINDS,
    SPARSE_KINDS,
    AttentionGraph,
    attend,
    default_num_clusters,
    resolve_kind,
)
from lightgraph.utilities.checks import (
    check_choice,
    check_divisible,
    check_fraction,
    check_int,
    check_optional_int,
    check_rate,
)

__all__ = ["MultiheadGraphAttention"]


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

    ``kind``, ``sparse_kind`` and ``threshold`` may be changed between steps (e.g. by a
    threshold tuner). With :attr:`sequence_parallel` set to a
    :class:`~lightgraph.distributed.SequenceParallel` of ``P > 1`` ranks and an input that
    holds only this rank's token shard, queries, keys and values go through one
    all-to-all to ``[S, H / P, 3, d]``, attention runs over all tokens with this rank's heads
    (bias columns :meth:`SequenceParallel.head_slice`) and a second all-to-all returns the
    token shard.

    ``"dual"`` (TorchGT's dual-interleaved attention) runs ``"dense"`` when
    :func:`~lightgraph.functional.attention.dual_uses_dense` says so at :attr:`step` --
    every ``dense_every`` training steps (``step % dense_every == 0``) and whenever the
    pattern fails C1-C3 -- and ``sparse_kind`` otherwise; in evaluation the period is
    ignored and only the conditions count. ``"auto"`` (also as ``sparse_kind``) runs
    ``"cluster_sparse"`` when the layout's tiles are at least
    :data:`~lightgraph.functional.attention.AUTO_MIN_TILE_FILL` full, else ``"sparse"``
    (:meth:`~lightgraph.functional.attention.AttentionGraph.auto_kind`). :meth:`resolve_kind`
    tells the kernel a call will run; :attr:`last_kind` is the kernel the latest call ran
    (``"dense"``, ``"raw"``, ``"sparse"`` or ``"cluster_sparse"``; ``None`` before the
    first call) and :attr:`last_dense` whether it was a dense one.

    Args:
        channels: input and output channels.
        heads: attention heads (must divide ``channels``).
        kind: one of :data:`~lightgraph.functional.attention.KINDS`.
        dropout: dropout on the attention probabilities.
        dense_every: dense period of ``"dual"`` (0: only when the conditions fail). The
            thesis gives no number; the default
            :data:`~lightgraph.functional.attention.DEFAULT_DENSE_EVERY` (11) runs about
            one training step in ten dense: on patterns that meet C1-C3 the other steps
            pay the sparse kind's cost, and the full pattern is still seen regularly. 11
            is prime, so the dense steps cycle through every sequence of an epoch unless
            their number is a multiple of 11 (see
            :func:`~lightgraph.functional.attention.dual_uses_dense`).
        num_buckets: learned bias buckets (9 = the data modules' default
            ``max_distance=5`` plus 4).
        block_size: tile side of ``"cluster_sparse"``.
        num_clusters: clusters :math:`k` of ``"cluster_sparse"``. ``None`` (default):
            :func:`~lightgraph.functional.attention.default_num_clusters` of ``channels``
            (TorchGT's cache rule on the fixed nominal 6 MiB cache: 8 at 64 channels, 5 at
            128), at most the sequence length. It depends on the configuration only, so a
            configuration attends the same pattern on every machine and any number of
            graph-parallel ranks (:meth:`cluster_count`).
        threshold: transfer threshold of ``"cluster_sparse"``, in ``[0, 1]``.
        learn_bias: learn the bias table; ``False`` keeps it at zero (masking still works).
        sparse_kind: what ``"dual"`` runs between its dense steps, one of
            :data:`~lightgraph.functional.attention.SPARSE_KINDS` (``"sparse"``,
            ``"cluster_sparse"``, ``"auto"``).

    Shapes:
        - **input:** ``x`` ``[S_r, channels]`` (``S_r = S`` without sharding), an
          :class:`~lightgraph.functional.attention.AttentionGraph` over ``S`` tokens
        - **output:** ``[S_r, channels]``
    """

    def __init__(
        self,
        channels: int,
        heads: int,
        kind: str = "sparse",
        dropout: float = 0.0,
        dense_every: int = DEFAULT_DENSE_EVERY,
        num_buckets: int = 9,
        block_size: int = 16,
        num_clusters: int | None = None,
        threshold: float = 0.0,
        learn_bias: bool = True,
        sparse_kind: str = "sparse",
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_int(owner, "channels", channels)
        check_divisible(owner, "channels", channels, "heads", heads)
        check_int(owner, "dense_every", dense_every, 0)
        check_int(owner, "num_buckets", num_buckets)
        check_int(owner, "block_size", block_size)
        self.channels, self.heads = channels, heads
        self.head_channels = channels // heads
        self.kind = kind
        self.sparse_kind = sparse_kind
        self.dropout = check_rate(owner, "dropout", dropout)
        self.dense_every = dense_every
        self.num_buckets = num_buckets
        self.block_size = block_size
        self.num_clusters = check_optional_int(owner, "num_clusters", num_clusters)
        self.threshold = threshold
        self.q_proj = nn.Linear(channels, channels)
        self.k_proj = nn.Linear(channels, channels)
        self.v_proj = nn.Linear(channels, channels)
        self.out_proj = nn.Linear(channels, channels)
        if learn_bias:
            self.bias_table = nn.Parameter(torch.empty(num_buckets, heads))
        else:
            self.register_buffer("bias_table", torch.zeros(num_buckets, heads))
        #: A :class:`~lightgraph.distributed.SequenceParallel` installed by the training
        #: module under graph parallelism (``None``: all tokens are local).
        self.sequence_parallel: Any = None
        self.name = "attention"  # label of its all-to-all traffic in the exchange stats
        self.step = 0
        #: The kernel the latest call ran (``None`` before the first call).
        self.last_kind: str | None = None
        #: Whether the latest call ran a dense kernel (``"dense"`` or ``"raw"``).
        self.last_dense = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections, zero biases, a small normal bias table."""
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        if isinstance(self.bias_table, nn.Parameter):
            nn.init.normal_(self.bias_table, std=0.02)

    @property
    def kind(self) -> str:
        """The attention kind, one of :data:`~lightgraph.functional.attention.KINDS`."""
        return self._kind

    @kind.setter
    def kind(self, value: str) -> None:
        self._kind = check_choice(type(self).__name__, "kind", value, KINDS)

    @property
    def sparse_kind(self) -> str:
        """What ``"dual"`` runs between dense steps, one of
        :data:`~lightgraph.functional.attention.SPARSE_KINDS`."""
        return self._sparse_kind

    @sparse_kind.setter
    def sparse_kind(self, value: str) -> None:
        self._sparse_kind = check_choice(type(self).__name__, "sparse_kind", value, SPARSE_KINDS)

    @property
    def threshold(self) -> float:
        """The cluster-sparse transfer threshold, in ``[0, 1]``."""
        return self._threshold

    @threshold.setter
    def threshold(self, value: float) -> None:
        self._threshold = check_fraction(type(self).__name__, "threshold", value)

    def cluster_count(self, num_tokens: int) -> int:
        """The clusters :math:`k` of ``"cluster_sparse"`` for a sequence of ``num_tokens``.

        ``num_clusters`` when set; otherwise
        :func:`~lightgraph.functional.attention.default_num_clusters` of ``channels`` (all
        heads, also when this rank computes only some of them), at most ``num_tokens``.
        """
        if self.num_clusters is not None:
            return self.num_clusters
        return min(default_num_clusters(self.channels), num_tokens)

    def extra_repr(self) -> str:
        """``channels, heads=..., kind=...`` (and the dual schedule) in the module's repr."""
        text = f"{self.channels}, heads={self.heads}, kind={self.kind!r}"
        if self.kind == "dual":
            text += f", dense_every={self.dense_every}, sparse_kind={self.sparse_kind!r}"
        return text

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
        """The kernel this call runs on ``graph``: ``"dense"``, ``"raw"``, ``"sparse"`` or
        ``"cluster_sparse"`` (``"dual"`` and ``"auto"`` resolved at :attr:`step`; the dual
        period counts in training only)."""
        return resolve_kind(
            graph,
            self.kind,
            step=self.step,
            dense_every=self.dense_every if self.training else 0,
            sparse_kind=self.sparse_kind,
            num_clusters=self.cluster_count(graph.num_tokens),
            block_size=self.block_size,
            threshold=self.threshold,
        )

    def forward(self, x: Tensor, graph: AttentionGraph, stage: str = "train") -> Tensor:
        """Attend over ``graph``.

        Args:
            x: ``[S_r, channels]`` the tokens held here (all ``S`` without sharding).
            graph: the pattern of the full sequence.
            stage: label of the all-to-all traffic in the exchange stats.

        Returns:
            ``[S_r, channels]``.
        """
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
        self.last_kind = kind
        self.last_dense = kind in DENSE_KINDS
        out = attend(
            q,
            k,
            v,
            graph,
            kind,
            table,
            dropout_p=self.dropout if self.training else 0.0,
            num_clusters=self.cluster_count(S),
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
