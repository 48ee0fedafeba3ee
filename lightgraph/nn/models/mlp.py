"""A graph-agnostic MLP baseline with the models' calling convention."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_int, check_rate

__all__ = ["MLP"]


class MLP(nn.Module):
    """Multi-layer perceptron on node features alone; ignores the graph.

    .. math::
        \\mathbf{H}^{(l)} = \\operatorname{ReLU}\\big(\\operatorname{dropout}
        (\\mathbf{H}^{(l-1)})\\mathbf{W}^{(l)} + \\mathbf{b}^{(l)}\\big),
        \\quad \\mathbf{H}^{(0)} = \\mathbf{X}

    (no ReLU after the last layer). The reference every GNN must beat: it shows how much
    of the accuracy comes from the graph structure. Takes ``(x, graph)`` like the GNNs so
    recipes can swap it in.

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size.
        num_layers: number of linear layers.
        dropout: dropout before every layer.

    Shapes:
        - **input:** ``[num_inner, in_channels]`` (the graph argument is unused)
        - **output:** ``[num_inner, out_channels]``
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        check_int("MLP", "in_channels", in_channels)
        check_int("MLP", "out_channels", out_channels)
        check_int("MLP", "hidden_channels", hidden_channels)
        check_int("MLP", "num_layers", num_layers)
        self.dropout = check_rate("MLP", "dropout", dropout)
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins = nn.ModuleList(nn.Linear(sizes[i], sizes[i + 1]) for i in range(num_layers))

    def forward(self, x: Tensor, graph: PartitionedGraph | None = None) -> Tensor:
        for i, lin in enumerate(self.lins):
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = lin(x)
            if i < len(self.lins) - 1:
                x = F.relu(x)
        return x
