"""DAGNN (Liu et al., 2020) on partitioned graphs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.nn.conv.gcn_propagation import GCNPropagation
from lightgraph.nn.conv.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_int, check_rate

__all__ = ["DAGNN"]


class DAGNN(nn.Module):
    """Deep Adaptive Graph Neural Network from `"Towards Deeper Graph Neural Networks"
    <https://arxiv.org/abs/2007.09296>`_, partition-aware.

    .. math::
        \\mathbf{Z} = \\operatorname{MLP}(\\mathbf{X}), \\quad
        \\mathbf{H} = \\operatorname{stack}(\\mathbf{Z}, \\hat{\\mathbf{A}}\\mathbf{Z}, \\dots,
        \\hat{\\mathbf{A}}^{K}\\mathbf{Z}), \\quad
        \\mathbf{s} = \\sigma(\\mathbf{H}\\mathbf{p}), \\quad
        \\mathbf{out}_v = \\sum_k s_{v,k} \\mathbf{H}_{v,k}

    The ``K = num_layers`` propagation hops each exchange ``out_channels``-wide rows.
    Transformation and propagation are decoupled, so this is not a
    :class:`~lightgraph.nn.BasicGNN` stack.

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size of the two-layer MLP.
        num_layers: propagation depth :math:`K`.
        dropout: dropout before both MLP layers.

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
    ) -> None:
        super().__init__()
        check_int("DAGNN", "in_channels", in_channels)
        check_int("DAGNN", "out_channels", out_channels)
        check_int("DAGNN", "hidden_channels", hidden_channels)
        check_int("DAGNN", "num_layers", num_layers)
        self.dropout = check_rate("DAGNN", "dropout", dropout)
        self.lin1 = nn.Linear(in_channels, hidden_channels)
        self.lin2 = nn.Linear(hidden_channels, out_channels)
        self.props = nn.ModuleList(
            PartitionAware(GCNPropagation(), name=f"layer{k}", normalization="gcn")
            for k in range(num_layers)
        )
        self.proj = nn.Linear(out_channels, 1)

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = F.relu(self.lin1(x))
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.lin2(x)
        hops = [x]
        for prop in self.props:
            x = prop(x, graph)
            hops.append(x)
        h = torch.stack(hops, dim=1)  # [N, K + 1, C]
        score = torch.sigmoid(self.proj(h))  # [N, K + 1, 1]
        return (score * h).sum(dim=1)
