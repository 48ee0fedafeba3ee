"""GraphSAGE (Hamilton et al., 2017) on partitioned graphs."""

from __future__ import annotations

from typing import Any, Literal

from torch_geometric.nn import MessagePassing, SAGEConv

from lightgraph.nn.models.basic_gnn import BasicGNN
from lightgraph.utilities.checks import check_choice

__all__ = ["GraphSAGE"]

AGGREGATIONS = ("mean", "sum", "max")


class GraphSAGE(BasicGNN):
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
        check_choice("GraphSAGE", "aggr", aggr, AGGREGATIONS)
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout, aggr=aggr)

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> MessagePassing:
        return SAGEConv(in_channels, out_channels, **kwargs)
