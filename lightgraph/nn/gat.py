"""GAT (Veličković et al., 2018) on partitioned graphs."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv

from lightgraph.nn._basic import check_model_args, stacked_forward
from lightgraph.nn.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph


class GAT(nn.Module):
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
        super().__init__()
        check_model_args(
            "GAT",
            in_channels=in_channels,
            out_channels=out_channels,
            hidden_channels=hidden_channels,
            num_layers=num_layers,
            heads=heads,
            dropout=dropout,
            attention_dropout=attention_dropout,
        )
        if hidden_channels % heads:
            raise ValueError(
                f"GAT: expected `hidden_channels` ({hidden_channels}) to be divisible by `heads` ({heads})."
            )
        convs = []
        size = in_channels
        for i in range(num_layers):
            last = i == num_layers - 1
            conv = GATConv(
                size,
                out_channels if last else hidden_channels // heads,
                heads=1 if last else heads,
                concat=not last,
                dropout=attention_dropout,
            )
            convs.append(PartitionAware(conv, name=f"layer{i}"))
            size = hidden_channels
        self.convs = nn.ModuleList(convs)
        self.dropout = dropout

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        return stacked_forward(self.convs, x, self.dropout, self.training, F.elu, graph)
