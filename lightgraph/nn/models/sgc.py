"""SGC (Wu et al., 2019) on partitioned graphs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.nn.conv.gcn_propagation import GCNPropagation
from lightgraph.nn.conv.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_int, check_rate

__all__ = ["SGC"]


class SGC(nn.Module):
    """Simplified Graph Convolution from `"Simplifying Graph Convolutional Networks"
    <https://arxiv.org/abs/1902.07153>`_, partition-aware.

    .. math::
        \\mathbf{Y} = \\hat{\\mathbf{A}}^{K} \\mathbf{X} \\mathbf{W} + \\mathbf{b}

    The product is evaluated as :math:`\\hat{\\mathbf{A}}^{K}(\\mathbf{X}\\mathbf{W})`, so each
    of the ``K = num_layers`` hops exchanges ``out_channels``-wide rows instead of
    ``in_channels``-wide ones; the bias is added after propagation, which keeps the result
    equal to PyG's ``SGConv``. One linear map and parameter-free hops: not a
    :class:`~lightgraph.nn.BasicGNN` stack.

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        num_layers: propagation depth :math:`K`.
        dropout: dropout on the input features.

    Shapes:
        - **input:** ``[num_inner, in_channels]``, a :class:`PartitionedGraph`
        - **output:** ``[num_inner, out_channels]``
    """

    def __init__(
        self, in_channels: int, out_channels: int, num_layers: int = 2, dropout: float = 0.0
    ) -> None:
        super().__init__()
        check_int("SGC", "in_channels", in_channels)
        check_int("SGC", "out_channels", out_channels)
        check_int("SGC", "num_layers", num_layers)
        self.dropout = check_rate("SGC", "dropout", dropout)
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.props = nn.ModuleList(
            PartitionAware(GCNPropagation(), name=f"layer{k}", normalization="gcn")
            for k in range(num_layers)
        )

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.lin(x)
        for prop in self.props:
            x = prop(x, graph)
        return x + self.bias
