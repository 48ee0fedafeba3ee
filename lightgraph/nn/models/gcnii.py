"""GCNII (Chen et al., 2020) on partitioned graphs."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCN2Conv

from lightgraph.nn.conv.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_int, check_positive, check_rate

__all__ = ["GCNII"]


class GCNII(nn.Module):
    """GCNII from `"Simple and Deep Graph Convolutional Networks"
    <https://arxiv.org/abs/2007.02133>`_, partition-aware.

    .. math::
        \\mathbf{H}^{(l+1)} = \\sigma\\Big(\\big((1-\\alpha)\\hat{\\mathbf{P}}\\mathbf{H}^{(l)}
        + \\alpha\\mathbf{H}^{(0)}\\big)\\big((1-\\beta_l)\\mathbf{I} + \\beta_l
        \\mathbf{W}^{(l)}\\big)\\Big), \\quad \\beta_l = \\log(\\theta / l + 1)

    An input linear layer maps features to ``hidden_channels`` (:math:`\\mathbf{H}^{(0)}`),
    ``num_layers`` ``GCN2Conv`` layers follow, and an output linear layer maps to classes.
    Only the ``GCN2Conv`` layers exchange halo rows. Every layer also reads
    :math:`\\mathbf{H}^{(0)}`, so this is not a :class:`~lightgraph.nn.BasicGNN` stack.

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size.
        num_layers: number of ``GCN2Conv`` layers.
        dropout: dropout before every layer.
        alpha: initial-residual strength :math:`\\alpha`.
        theta: identity-mapping strength :math:`\\theta`.

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
        alpha: float = 0.1,
        theta: float = 0.5,
    ) -> None:
        super().__init__()
        check_int("GCNII", "in_channels", in_channels)
        check_int("GCNII", "out_channels", out_channels)
        check_int("GCNII", "hidden_channels", hidden_channels)
        check_int("GCNII", "num_layers", num_layers)
        self.dropout = check_rate("GCNII", "dropout", dropout)
        check_rate("GCNII", "alpha", alpha)
        check_positive("GCNII", "theta", theta)
        self.lin_in = nn.Linear(in_channels, hidden_channels)
        self.convs = nn.ModuleList(
            PartitionAware(
                GCN2Conv(hidden_channels, alpha=alpha, theta=theta, layer=i + 1), name=f"layer{i}"
            )
            for i in range(num_layers)
        )
        self.lin_out = nn.Linear(hidden_channels, out_channels)

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = x_0 = F.relu(self.lin_in(x))
        for conv in self.convs:
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = F.relu(conv(x, graph, x_0=x_0))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.lin_out(x)
