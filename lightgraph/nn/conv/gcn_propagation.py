"""Parameter-free GCN propagation :math:`\\hat{A} X`."""

from __future__ import annotations

from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.typing import Adj, OptTensor
from torch_geometric.utils import spmm

__all__ = ["GCNPropagation"]


class GCNPropagation(MessagePassing):
    """One hop of weighted sum aggregation without a weight matrix.

    .. math::
        \\mathbf{x}'_i = \\sum_{j \\in \\mathcal{N}(i)} w_{ji} \\mathbf{x}_j

    Given the GCN-normalised adjacency (``PartitionAware(..., normalization="gcn")``
    supplies it) this is the propagation :math:`\\hat{\\mathbf{A}}\\mathbf{X}` used by SGC and
    DAGNN (`"Simplifying Graph Convolutional Networks" <https://arxiv.org/abs/1902.07153>`_).
    Without weights every edge counts 1.

    Shapes:
        - **input:** ``[num_nodes, F]``, ``edge_index`` ``[2, E]`` or ``adj_t``,
          optional ``edge_weight`` ``[E]``
        - **output:** ``[num_nodes, F]``
    """

    def __init__(self) -> None:
        super().__init__(aggr="add")

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        return self.propagate(edge_index, x=x, edge_weight=edge_weight)

    def message(self, x_j: Tensor, edge_weight: OptTensor) -> Tensor:
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Adj, x: Tensor) -> Tensor:
        return spmm(adj_t, x, reduce=self.aggr)
