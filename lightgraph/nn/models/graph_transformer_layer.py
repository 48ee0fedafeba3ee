"""One transformer block over an attention graph (pre- or post-norm, LayerNorm or BatchNorm)."""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.functional.attention import DEFAULT_DENSE_EVERY, AttentionGraph
from lightgraph.nn.attention.multihead_graph_attention import MultiheadGraphAttention
from lightgraph.nn.norm.sequence_batch_norm import SequenceBatchNorm
from lightgraph.utilities.checks import check_choice, check_int, check_rate

__all__ = ["NORMS", "GraphTransformerLayer"]

#: Normalisations of :class:`GraphTransformerLayer`.
NORMS: tuple[str, ...] = ("layer", "batch")
_ACTIVATIONS = ("gelu", "relu")


class _Norm(nn.Module):
    """A LayerNorm or a :class:`SequenceBatchNorm` behind one call signature."""

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
        kind, dense_every, num_buckets, block_size, num_clusters, threshold, learn_bias,
            sparse_kind: passed to :class:`MultiheadGraphAttention`.

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
        check_choice(owner, "norm", norm, NORMS)
        check_choice(owner, "activation", activation, _ACTIVATIONS)
        ffn_channels = channels if ffn_channels is None else ffn_channels
        check_int(owner, "ffn_channels", ffn_channels)
        self.dropout = check_rate(owner, "dropout", dropout)
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
            sparse_kind=sparse_kind,
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
        """One block over ``graph``; ``x`` holds this rank's ``[S_r, channels]`` tokens."""
        sharded = x.size(0) != graph.num_tokens
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        if self.norm_first:
            x = x + drop(self.attn(self.norm1(x, sharded), graph, stage))
            return x + drop(self._ffn(self.norm2(x, sharded)))
        x = self.norm1(x + drop(self.attn(x, graph, stage)), sharded)
        return self.norm2(x + drop(self._ffn(x)), sharded)
