"""JKNet (Xu et al., 2018) on partitioned graphs."""

from __future__ import annotations

from typing import Any, Literal

from torch_geometric.nn import GCNConv, MessagePassing

from lightgraph.nn.models.basic_gnn import JK_MODES, BasicGNN
from lightgraph.utilities.checks import check_choice

__all__ = ["JKNet"]


class JKNet(BasicGNN):
    """Jumping Knowledge Network from `"Representation Learning on Graphs with Jumping
    Knowledge Networks" <https://arxiv.org/abs/1806.03536>`_ with GCN layers, partition-aware.

    .. math::
        \\mathbf{h}_v = \\operatorname{JK}\\big(\\mathbf{h}^{(1)}_v, \\dots,
        \\mathbf{h}^{(L)}_v\\big), \\quad \\mathbf{y}_v = \\mathbf{W}\\mathbf{h}_v

    Sylvie evaluates an 8-layer JKNet with hidden size 128 on Reddit
    (``num_layers=8, hidden_channels=128``). Every ``GCNConv`` layer maps to
    ``hidden_channels`` and is followed by ReLU; dropout precedes every layer and the
    final linear layer.

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
        check_choice("JKNet", "mode", mode, JK_MODES)
        super().__init__(in_channels, out_channels, hidden_channels, num_layers, dropout, jk=mode)

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> MessagePassing:
        return GCNConv(in_channels, out_channels, **kwargs)
