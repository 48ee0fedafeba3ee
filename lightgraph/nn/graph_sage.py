"""GraphSAGE (Hamilton et al., 2017) on partitioned graphs."""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from lightgraph.nn._basic import check_model_args, stacked_forward
from lightgraph.nn.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph

AGGREGATIONS = ("mean", "sum", "max")


class GraphSAGE(nn.Module):
    """GraphSAGE from `"Inductive Representation Learning on Large Graphs"
    <https://arxiv.org/abs/1706.02216>`_, full-graph and partition-aware.

    .. math::
        \\mathbf{h}^{(l)}_v = \\sigma\\left(\\mathbf{W}_1 \\mathbf{h}^{(l-1)}_v + \\mathbf{W}_2
        \\cdot \\operatorname{aggr}_{u \\in \\mathcal{N}(v)} \\mathbf{h}^{(l-1)}_u\\right)

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size.
        num_layers: number of ``SAGEConv`` layers.
        dropout: dropout before every layer.
        aggr: neighbour aggregation, one of ``"mean"``, ``"sum"``, ``"max"`` (``"max"`` has
            no fused sparse kernel on CPU and is much slower and hungrier).

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
        aggr: Literal["mean", "sum", "max"] = "mean",
    ) -> None:
        super().__init__()
        check_model_args(
            "GraphSAGE",
            in_channels=in_channels,
            out_channels=out_channels,
            hidden_channels=hidden_channels,
            num_layers=num_layers,
            dropout=dropout,
        )
        if aggr not in AGGREGATIONS:
            raise ValueError(f"GraphSAGE: expected `aggr` in {AGGREGATIONS} but got {aggr!r}.")
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            PartitionAware(SAGEConv(sizes[i], sizes[i + 1], aggr=aggr), name=f"layer{i}")
            for i in range(num_layers)
        )
        self.dropout = dropout

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        return stacked_forward(self.convs, x, self.dropout, self.training, F.relu, graph)
