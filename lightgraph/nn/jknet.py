"""JKNet (Xu et al., 2018) on partitioned graphs."""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, JumpingKnowledge

from lightgraph.nn._basic import check_model_args
from lightgraph.nn.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph

JK_MODES = ("cat", "max", "lstm")


class JKNet(nn.Module):
    """Jumping Knowledge Network from `"Representation Learning on Graphs with Jumping
    Knowledge Networks" <https://arxiv.org/abs/1806.03536>`_ with GCN layers, partition-aware.

    .. math::
        \\mathbf{h}_v = \\operatorname{JK}\\big(\\mathbf{h}^{(1)}_v, \\dots,
        \\mathbf{h}^{(L)}_v\\big), \\quad \\mathbf{y}_v = \\mathbf{W}\\mathbf{h}_v

    Sylvie evaluates an 8-layer JKNet with hidden size 128 on Reddit
    (``num_layers=8, hidden_channels=128``).

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size of every GCN layer.
        num_layers: number of ``GCNConv`` layers.
        dropout: dropout before every layer.
        mode: layer aggregation, ``"cat"``, ``"max"`` or ``"lstm"``.

    Shapes:
        - **input:** ``[num_inner, in_channels]``, a :class:`PartitionedGraph`
        - **output:** ``[num_inner, out_channels]``
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        num_layers: int = 8,
        dropout: float = 0.5,
        mode: Literal["cat", "max", "lstm"] = "cat",
    ) -> None:
        super().__init__()
        check_model_args(
            "JKNet",
            in_channels=in_channels,
            out_channels=out_channels,
            hidden_channels=hidden_channels,
            num_layers=num_layers,
            dropout=dropout,
        )
        if mode not in JK_MODES:
            raise ValueError(f"JKNet: expected `mode` in {JK_MODES} but got {mode!r}.")
        self.convs = nn.ModuleList(
            PartitionAware(
                GCNConv(in_channels if i == 0 else hidden_channels, hidden_channels),
                name=f"layer{i}",
            )
            for i in range(num_layers)
        )
        self.jk = JumpingKnowledge(mode, channels=hidden_channels, num_layers=num_layers)
        self.lin = nn.Linear(
            hidden_channels * num_layers if mode == "cat" else hidden_channels, out_channels
        )
        self.dropout = dropout

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        layers = []
        for conv in self.convs:
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = F.relu(conv(x, graph))
            layers.append(x)
        x = self.jk(layers)
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.lin(x)
