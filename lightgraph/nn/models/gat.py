"""GAT (Veličković et al., 2018) on partitioned graphs."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch_geometric.nn import GATConv, MessagePassing

from lightgraph.nn.models.basic_gnn import BasicGNN
from lightgraph.utilities.checks import check_divisible, check_int, check_rate

__all__ = ["GAT"]


class GAT(BasicGNN):
    """Graph Attention Network from `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_, partition-aware.

    .. math::
        \\mathbf{h}^{(l)}_v = \\sigma\\Big(\\sum_{u \\in \\mathcal{N}(v) \\cup \\{v\\}}
        \\alpha_{v,u} \\mathbf{W}^{(l)} \\mathbf{h}^{(l-1)}_u\\Big)

    Attention needs per-edge scores, so the layers run on the local edge list. Hidden
    layers concatenate ``heads`` heads of ``hidden_channels // heads`` channels; the output
    layer averages one head. Sylvie evaluates GAT with one head (the default).

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size (divisible by ``heads``).
        num_layers: number of ``GATConv`` layers.
        dropout: feature dropout before every layer.
        heads: attention heads of the hidden layers.
        attention_dropout: dropout on attention coefficients.

    Shapes:
        - **input:** ``[num_inner, in_channels]``, a :class:`PartitionedGraph`
        - **output:** ``[num_inner, out_channels]``
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        num_layers: int = 3,
        dropout: float = 0.5,
        heads: int = 1,
        attention_dropout: float = 0.0,
    ) -> None:
        check_int("GAT", "heads", heads)
        check_rate("GAT", "attention_dropout", attention_dropout)
        check_divisible("GAT", "hidden_channels", hidden_channels, "heads", heads)
        sizes = (in_channels, out_channels, hidden_channels, num_layers, dropout)
        super().__init__(*sizes, act=F.elu, heads=heads, attention_dropout=attention_dropout)

    def init_conv(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        attention_dropout: float = 0.0,
        **kwargs: Any,
    ) -> MessagePassing:
        last = self._is_conv_to_out  # the output layer averages a single head
        heads = 1 if last else heads
        return GATConv(
            in_channels,
            out_channels // heads,
            heads=heads,
            concat=not last,
            dropout=attention_dropout,
            **kwargs,
        )
