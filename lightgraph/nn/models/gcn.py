"""GCN (Kipf & Welling, 2017) on partitioned graphs."""

from __future__ import annotations

from typing import Any

from torch_geometric.nn import GCNConv, MessagePassing

from lightgraph.nn.models.basic_gnn import BasicGNN

__all__ = ["GCN"]


class GCN(BasicGNN):
    """Graph Convolutional Network from `"Semi-supervised Classification with Graph
    Convolutional Networks" <https://arxiv.org/abs/1609.02907>`_, partition-aware.

    .. math::
        \\mathbf{H}^{(l)} = \\sigma\\left(\\hat{\\mathbf{D}}^{-1/2}\\hat{\\mathbf{A}}
        \\hat{\\mathbf{D}}^{-1/2}\\mathbf{H}^{(l-1)}\\mathbf{W}^{(l)}\\right)

    with degrees :math:`\\hat{\\mathbf{D}}` of the whole graph. ``num_layers`` counts graph
    convolutions (Sylvie's Table VI "4 x 256" is ``num_layers=4, hidden_channels=256``).

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size.
        num_layers: number of ``GCNConv`` layers.
        dropout: dropout before every layer.

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
    ) -> None:
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout)

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> MessagePassing:
        return GCNConv(in_channels, out_channels, **kwargs)
