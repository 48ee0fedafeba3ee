"""The base class of stacked partition-aware GNNs (cf. PyG's ``BasicGNN``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal, cast, get_args

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import JumpingKnowledge, MessagePassing

from lightgraph.nn.conv.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_callable, check_choice, check_int, check_rate

__all__ = ["BasicGNN"]

JKMode = Literal["cat", "max", "lstm"]
JK_MODES: tuple[str, ...] = get_args(JKMode)


class BasicGNN(nn.Module, ABC):
    """An abstract stack of ``num_layers`` partition-aware message-passing layers, modelled
    on PyG's :class:`~torch_geometric.nn.models.basic_gnn.BasicGNN`.

    Every layer sees dropout on its input; the activation :math:`\\sigma` follows every
    layer but the last:

    .. math::
        \\mathbf{H}^{(l)} = \\sigma\\Big(f^{(l)}\\big(\\operatorname{dropout}
        (\\mathbf{H}^{(l-1)}), \\mathcal{G}\\big)\\Big), \\quad l = 1, \\dots, L,
        \\qquad \\mathbf{Y} = f^{(L)}\\big(\\operatorname{dropout}(\\mathbf{H}^{(L-1)}),
        \\mathcal{G}\\big)

    with :math:`\\mathbf{H}^{(0)} = \\mathbf{X}`. With jumping knowledge (``jk``) every
    layer maps to ``hidden_channels`` and is activated, and a linear layer reads the
    combination of all of them (`"Representation Learning on Graphs with Jumping
    Knowledge Networks" <https://arxiv.org/abs/1806.03536>`_):
    :math:`\\mathbf{Y} = \\mathbf{W}\\operatorname{dropout}\\big(\\operatorname{JK}
    (\\mathbf{H}^{(1)}, \\dots, \\mathbf{H}^{(L)})\\big) + \\mathbf{b}`.

    Subclasses implement :meth:`init_conv`, returning the PyG layer that maps
    ``in_channels`` to ``out_channels`` features; the base wraps it in
    :class:`~lightgraph.nn.PartitionAware` named ``layer0``, ``layer1``, ... (stored in
    ``convs``), checks the common arguments and owns the forward pass. While
    :meth:`init_conv` builds the layer that maps to the model's ``out_channels``,
    ``self._is_conv_to_out`` is ``True`` (as in PyG), e.g. to give a GAT output layer a
    single head.

    Args:
        in_channels: input feature size.
        out_channels: number of classes.
        hidden_channels: hidden size.
        num_layers: number of message-passing layers.
        dropout: dropout before every layer (and before the linear layer with ``jk``).
        act: activation between layers, e.g. :func:`torch.nn.functional.relu`.
        jk: jumping-knowledge mode, ``"cat"``, ``"max"`` or ``"lstm"``; ``None``: the
            last layer maps to ``out_channels`` directly.
        **kwargs: passed on to every :meth:`init_conv` call.

    Shapes:
        - **input:** ``[num_inner, in_channels]``, a :class:`PartitionedGraph`
        - **output:** ``[num_inner, out_channels]``

    Example:
        >>> from torch_geometric.nn import GraphConv
        >>> class GraphConvNet(BasicGNN):
        ...     def init_conv(self, in_channels, out_channels, **kwargs):
        ...         return GraphConv(in_channels, out_channels, **kwargs)
        >>> GraphConvNet(16, 4, hidden_channels=32, num_layers=2, aggr="mean")
        GraphConvNet(16, 4, num_layers=2)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        num_layers: int = 3,
        dropout: float = 0.5,
        act: Callable[[Tensor], Tensor] = F.relu,
        jk: JKMode | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.in_channels = check_int(owner, "in_channels", in_channels)
        self.out_channels = check_int(owner, "out_channels", out_channels)
        self.hidden_channels = check_int(owner, "hidden_channels", hidden_channels)
        self.num_layers = check_int(owner, "num_layers", num_layers)
        self.dropout = check_rate(owner, "dropout", dropout)
        self.act = check_callable(owner, "act", act, hint="e.g. torch.nn.functional.relu")
        self.jk_mode = None if jk is None else check_choice(owner, "jk", jk, JK_MODES)

        self.convs = nn.ModuleList()
        channels = self.in_channels
        for i in range(self.num_layers):
            self._is_conv_to_out = i == self.num_layers - 1 and self.jk_mode is None
            out = self.out_channels if self._is_conv_to_out else self.hidden_channels
            conv = self.init_conv(channels, out, **kwargs)
            self.convs.append(PartitionAware(conv, name=f"layer{i}"))
            channels = self.hidden_channels
        if self.jk_mode is not None:
            hidden, depth = self.hidden_channels, self.num_layers
            self.jk = JumpingKnowledge(self.jk_mode, channels=hidden, num_layers=depth)
            width = hidden * depth if self.jk_mode == "cat" else hidden
            self.lin = nn.Linear(width, self.out_channels)

    @abstractmethod
    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> MessagePassing:
        """The PyG layer mapping ``in_channels`` to ``out_channels`` features."""

    def forward(self, x: Tensor, graph: PartitionedGraph) -> Tensor:
        xs: list[Tensor] = []
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, graph)
            if i < self.num_layers - 1 or self.jk_mode is not None:
                x = self.act(x)
            if self.jk_mode is not None:
                xs.append(x)
        if self.jk_mode is None:
            return x
        x = F.dropout(self.jk(xs), p=self.dropout, training=self.training)
        return self.lin(x)

    def reset_parameters(self) -> None:
        """Re-initialise every layer (and the jumping-knowledge head)."""
        for conv in self.convs:
            cast(PartitionAware, conv).reset_parameters()
        if self.jk_mode is not None:
            self.jk.reset_parameters()
            self.lin.reset_parameters()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
            f"num_layers={self.num_layers})"
        )
