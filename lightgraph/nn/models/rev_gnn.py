"""Deep GNNs of UniTG's evaluation: reversible RevGCN / RevGAT and the res+ ResGEN.

RevGCN and RevGAT stack grouped reversible blocks (PyG's
:class:`~torch_geometric.nn.GroupAddRev`, `"Training Graph Neural Networks with 1000
Layers" <https://arxiv.org/abs/2106.07476>`_): a block's input is recomputed from its
output during the backward pass, so the activation memory does not grow with depth.
ResGEN is the DeeperGCN design (`"DeeperGCN: All You Need to Train Deeper GCNs"
<https://arxiv.org/abs/2006.07739>`_): pre-activation residual (``res+``)
:class:`~torch_geometric.nn.GENConv` layers. :data:`DEEP_GNN_PRESETS` holds the sizes of
Table 5.4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient and
Scalable Graph Learning*, NTU 2026), whose ch. 5 is UniTG; "the thesis" below means that
one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import DeepGCNLayer, GATConv, GCNConv, GENConv, GroupAddRev

from lightgraph.utilities.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_divisible,
    check_int,
    check_rate,
)

__all__ = [
    "DEEP_GNN_PRESETS",
    "ResGEN",
    "RevGAT",
    "RevGCN",
    "SharedDropout",
    "deep_gnn_preset",
]

#: Thesis Table 5.4 (UniTG's deep GNN backbones): for every model and dataset
#: ``{"num_layers", "hidden_channels", "epochs"}``. ogbn-arxiv and ogbn-products share
#: the sizes (as do pubmed and cora); the epochs differ per dataset.
DEEP_GNN_PRESETS: dict[str, dict[str, dict[str, int]]] = {
    "RevGCN": {
        "ogbn-arxiv": {"num_layers": 112, "hidden_channels": 224, "epochs": 1000},
        "ogbn-products": {"num_layers": 112, "hidden_channels": 224, "epochs": 500},
        "pubmed": {"num_layers": 448, "hidden_channels": 80, "epochs": 1000},
        "cora": {"num_layers": 448, "hidden_channels": 80, "epochs": 1000},
    },
    "RevGAT": {
        "ogbn-arxiv": {"num_layers": 20, "hidden_channels": 256, "epochs": 2000},
        "ogbn-products": {"num_layers": 20, "hidden_channels": 256, "epochs": 500},
        "pubmed": {"num_layers": 40, "hidden_channels": 768, "epochs": 1000},
        "cora": {"num_layers": 40, "hidden_channels": 768, "epochs": 500},
    },
    "ResGEN": {
        "ogbn-arxiv": {"num_layers": 56, "hidden_channels": 128, "epochs": 2000},
        "ogbn-products": {"num_layers": 56, "hidden_channels": 128, "epochs": 1000},
        "pubmed": {"num_layers": 112, "hidden_channels": 64, "epochs": 500},
        "cora": {"num_layers": 112, "hidden_channels": 64, "epochs": 1000},
    },
}

_NORMS: tuple[str | None, ...] = ("layer", None)


def deep_gnn_preset(model: str, dataset: str) -> dict[str, int]:
    """The sizes of thesis Table 5.4 for ``model`` on ``dataset``.

    Returns ``{"num_layers": ..., "hidden_channels": ...}``, keyword arguments of the
    model's constructor (the table's epochs are in :data:`DEEP_GNN_PRESETS`).

    Example:
        >>> deep_gnn_preset("RevGCN", "ogbn-arxiv")
        {'num_layers': 112, 'hidden_channels': 224}
    """
    check_choice("deep_gnn_preset", "model", model, tuple(DEEP_GNN_PRESETS))
    table = DEEP_GNN_PRESETS[model]
    check_choice(model, "dataset", dataset, tuple(table))
    row = table[dataset]
    return {"num_layers": row["num_layers"], "hidden_channels": row["hidden_channels"]}


class SharedDropout(nn.Module):
    """Dropout whose mask is drawn once and reused until :meth:`reset`.

    A reversible block recomputes its input from its output during the backward pass;
    the recomputation is only exact if it drops the same entries as the forward pass did.
    The mask is drawn (lazily, with the shape of the input) on the first call after
    :meth:`reset` and every later call reuses it (an input of another shape draws a new
    one); the reversible models reset their masks when their forward pass starts, so one
    training step (forward + backward) sees one mask. A module shared by every layer keeps
    a single mask, so the memory it holds does not grow with depth. Identity in eval mode
    or with ``p=0``.

    Args:
        p: drop probability, in ``[0, 1)``.

    Shapes:
        - **input:** any shape (the same between resets)
        - **output:** the input's shape
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_rate("SharedDropout", "p", p)
        self.mask: Tensor | None = None

    def reset(self) -> None:
        """Forget the mask; the next call in training mode draws a new one."""
        self.mask = None

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        mask = self.mask
        if mask is None or mask.shape != x.shape or mask.device != x.device:
            keep = torch.empty_like(x).bernoulli_(1.0 - self.p)
            mask = self.mask = keep.div_(1.0 - self.p).detach()
        return x * mask.to(x.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class _GroupBlock(nn.Module):
    """One group of a reversible block: norm -> activation -> shared dropout -> conv."""

    def __init__(
        self,
        conv: nn.Module,
        channels: int,
        norm: str | None,
        act: Callable[[Tensor], Tensor],
        dropout: SharedDropout,
    ) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels) if norm == "layer" else nn.Identity()
        self.act = act
        self.dropout = dropout
        self.conv = conv

    def reset_parameters(self) -> None:
        if isinstance(self.norm, nn.LayerNorm):
            self.norm.reset_parameters()
        self.conv.reset_parameters()  # type: ignore[operator]

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv(self.dropout(self.act(self.norm(x))), edge_index)


class _RevGNN(nn.Module):
    """Input linear -> ``num_layers`` grouped reversible blocks -> norm, act, dropout,
    linear. Subclasses implement :meth:`init_conv` (a ``channels -> channels`` layer)."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        num_groups: int = 2,
        dropout: float = 0.0,
        act: Callable[[Tensor], Tensor] = F.relu,
        norm: str | None = "layer",
        reversible: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.in_channels = check_int(owner, "in_channels", in_channels)
        self.hidden_channels = check_int(owner, "hidden_channels", hidden_channels)
        self.out_channels = check_int(owner, "out_channels", out_channels)
        self.num_layers = check_int(owner, "num_layers", num_layers)
        self.num_groups = check_int(owner, "num_groups", num_groups, low=2)
        check_divisible(owner, "hidden_channels", hidden_channels, "num_groups", num_groups)
        self.dropout = check_rate(owner, "dropout", dropout)
        self.act = check_callable(owner, "act", act, hint="e.g. torch.nn.functional.relu")
        self.norm = check_choice(owner, "norm", norm, _NORMS)
        self.reversible = check_bool(owner, "reversible", reversible)
        group = self.hidden_channels // self.num_groups

        self.lin_in = nn.Linear(self.in_channels, self.hidden_channels)
        # One mask per group position, shared by every layer: constant memory in depth.
        drops = [SharedDropout(self.dropout) for _ in range(self.num_groups)]
        self.block_dropouts = nn.ModuleList(drops)
        self.blocks = nn.ModuleList()
        for _ in range(self.num_layers):
            groups = nn.ModuleList(
                _GroupBlock(self.init_conv(group, **kwargs), group, norm, act, drop)
                for drop in drops
            )
            self.blocks.append(GroupAddRev(groups, disable=not self.reversible))
        self.norm_out = nn.LayerNorm(self.hidden_channels) if norm == "layer" else nn.Identity()
        self.out_dropout = SharedDropout(self.dropout)
        self.lin_out = nn.Linear(self.hidden_channels, self.out_channels)

    def init_conv(self, channels: int, **kwargs: Any) -> nn.Module:
        """The message-passing layer of one group, mapping ``channels`` to ``channels``."""
        raise NotImplementedError

    def reset_dropout(self) -> None:
        """Forget every dropout mask (done when :meth:`forward` starts)."""
        for module in self.modules():
            if isinstance(module, SharedDropout):
                module.reset()

    def reset_parameters(self) -> None:
        """Re-initialise every layer."""
        self.lin_in.reset_parameters()
        for block in self.blocks:
            cast(GroupAddRev, block).reset_parameters()
        if isinstance(self.norm_out, nn.LayerNorm):
            self.norm_out.reset_parameters()
        self.lin_out.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits ``[num_nodes, out_channels]``; draws this step's dropout masks.

        The reversible blocks free their inputs during the forward pass and recompute
        them during the backward pass, which reuses this step's masks: run the backward
        pass of a training step before the next forward pass, once (no ``retain_graph``).
        """
        self.reset_dropout()
        h = self.lin_in(x)
        for block in self.blocks:
            h = block(h, edge_index)
        h = self.out_dropout(self.act(self.norm_out(h)))
        return self.lin_out(h)

    @classmethod
    def from_preset(
        cls, dataset: str, in_channels: int, out_channels: int, **kwargs: Any
    ) -> _RevGNN:
        """The model with the sizes of thesis Table 5.4 for ``dataset`` (see
        :func:`deep_gnn_preset`); ``kwargs`` go to the constructor."""
        return cls(in_channels, out_channels=out_channels, **_preset(cls.__name__, dataset, kwargs))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.hidden_channels}, "
            f"{self.out_channels}, num_layers={self.num_layers}, num_groups={self.num_groups})"
        )


def _preset(owner: str, dataset: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    sizes = deep_gnn_preset(owner, dataset)
    for name, expected in sizes.items():
        value = kwargs.get(name, expected)
        if value != expected:
            raise ValueError(
                f"{owner}: preset {dataset!r} sets `{name}`={expected} but got {name}={value!r}; "
                f"leave it out or drop the preset."
            )
    return {**kwargs, **sizes}


class RevGCN(_RevGNN):
    """Reversible GCN from `"Training Graph Neural Networks with 1000 Layers"
    <https://arxiv.org/abs/2106.07476>`_, with activation memory constant in depth.

    The features are split into ``num_groups`` groups :math:`\\mathbf{X}_1, \\dots,
    \\mathbf{X}_C` and every block computes (:class:`~torch_geometric.nn.GroupAddRev`)

    .. math::
        \\mathbf{X}'_0 = \\sum_{i=2}^{C} \\mathbf{X}_i, \\qquad
        \\mathbf{X}'_i = f_i(\\mathbf{X}'_{i-1}) + \\mathbf{X}_i, \\qquad
        f_i(\\mathbf{H}) = \\operatorname{GCNConv}\\big(\\operatorname{dropout}
        (\\sigma(\\operatorname{LayerNorm}(\\mathbf{H})))\\big)

    which is inverted exactly during the backward pass to recompute the block input
    instead of storing it. A linear layer maps the input to ``hidden_channels``; the last
    block's output goes through LayerNorm, :math:`\\sigma`, dropout and a linear layer.
    Dropout uses :class:`SharedDropout`: one mask per group, drawn when :meth:`forward`
    starts and shared by every layer and by the recomputation.

    :meth:`from_preset` builds the configurations of thesis Table 5.4 (112 layers of 224
    channels on ogbn-arxiv / -products, 448 of 80 on pubmed / cora).

    Args:
        in_channels: input feature size.
        hidden_channels: hidden size (divisible by ``num_groups``).
        out_channels: number of classes.
        num_layers: number of reversible blocks.
        num_groups: number of groups :math:`C` (>= 2); every group conv maps
            ``hidden_channels // num_groups`` channels.
        dropout: dropout in every block and before the output layer.
        act: activation, e.g. :func:`torch.nn.functional.relu`.
        norm: ``"layer"`` (LayerNorm) or ``None``.
        reversible: ``False`` runs the same blocks keeping their activations (a
            reference for memory and gradients).
        **kwargs: passed on to every :class:`~torch_geometric.nn.GCNConv`.

    Shapes:
        - **input:** ``[num_nodes, in_channels]``, ``edge_index [2, num_edges]``
        - **output:** ``[num_nodes, out_channels]``

    Example:
        >>> RevGCN(16, 32, 4, num_layers=8)
        RevGCN(16, 32, 4, num_layers=8, num_groups=2)
    """

    def init_conv(self, channels: int, **kwargs: Any) -> nn.Module:
        return GCNConv(channels, channels, **kwargs)


class RevGAT(_RevGNN):
    """Reversible GAT (`"Training Graph Neural Networks with 1000 Layers"
    <https://arxiv.org/abs/2106.07476>`_), the blocks of :class:`RevGCN` with
    :class:`~torch_geometric.nn.GATConv` group layers.

    Every group layer concatenates ``heads`` heads of
    ``hidden_channels // (num_groups * heads)`` channels, so its width stays
    ``hidden_channels // num_groups``. Attention dropout is not offered: the
    recomputation during the backward pass would draw a different pattern and the
    inverse would not be exact.

    :meth:`from_preset` builds the configurations of thesis Table 5.4 (20 layers of 256
    channels on ogbn-arxiv / -products, 40 of 768 on pubmed / cora; the table gives no
    head count, pass ``heads``).

    Args:
        in_channels: input feature size.
        hidden_channels: hidden size (divisible by ``num_groups * heads``).
        out_channels: number of classes.
        num_layers: number of reversible blocks.
        num_groups: number of groups (>= 2).
        heads: attention heads of every group layer.
        dropout: dropout in every block and before the output layer.
        act: activation, e.g. :func:`torch.nn.functional.relu`.
        norm: ``"layer"`` (LayerNorm) or ``None``.
        reversible: ``False`` runs the same blocks keeping their activations.
        **kwargs: passed on to every :class:`~torch_geometric.nn.GATConv`.

    Shapes:
        - **input:** ``[num_nodes, in_channels]``, ``edge_index [2, num_edges]``
        - **output:** ``[num_nodes, out_channels]``
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        num_groups: int = 2,
        heads: int = 1,
        dropout: float = 0.0,
        act: Callable[[Tensor], Tensor] = F.relu,
        norm: str | None = "layer",
        reversible: bool = True,
        **kwargs: Any,
    ) -> None:
        check_int("RevGAT", "heads", heads)
        check_int("RevGAT", "num_groups", num_groups, low=2)
        check_divisible(
            "RevGAT", "hidden_channels", hidden_channels, "num_groups * heads", num_groups * heads
        )
        self.heads = heads
        super().__init__(
            in_channels,
            hidden_channels,
            out_channels,
            num_layers,
            num_groups=num_groups,
            dropout=dropout,
            act=act,
            norm=norm,
            reversible=reversible,
            heads=heads,
            **kwargs,
        )

    def init_conv(self, channels: int, heads: int = 1, **kwargs: Any) -> nn.Module:
        return GATConv(channels, channels // heads, heads=heads, concat=True, **kwargs)


class ResGEN(nn.Module):
    """Deep residual GENConv network (DeeperGCN, `"DeeperGCN: All You Need to Train
    Deeper GCNs" <https://arxiv.org/abs/2006.07739>`_), as in PyG's ogbn-proteins example.

    A linear layer maps the input to ``hidden_channels``; the first layer is a plain
    :class:`~torch_geometric.nn.GENConv`, every later one a pre-activation residual
    :class:`~torch_geometric.nn.DeepGCNLayer` (``block="res+"``):

    .. math::
        \\mathbf{H}^{(l)} = \\mathbf{H}^{(l-1)} + \\operatorname{GENConv}^{(l)}\\big(
        \\operatorname{dropout}(\\sigma(\\operatorname{LayerNorm}(\\mathbf{H}^{(l-1)})))\\big)

    and the output is :math:`\\mathbf{W}\\operatorname{dropout}(\\sigma(\\operatorname
    {LayerNorm}(\\mathbf{H}^{(L)}))) + \\mathbf{b}` (the first layer's norm and activation,
    as in DeeperGCN). Not reversible: the activation memory grows with depth (use
    ``checkpoint=True`` to recompute the convolutions instead).

    :meth:`from_preset` builds the configurations of thesis Table 5.4 (56 layers of 128
    channels on ogbn-arxiv / -products, 112 of 64 on pubmed / cora).

    Args:
        in_channels: input feature size.
        hidden_channels: hidden size.
        out_channels: number of classes.
        num_layers: number of GENConv layers.
        dropout: dropout before every res+ convolution and the output layer.
        act: activation, e.g. :func:`torch.nn.functional.relu`.
        aggr: GENConv aggregation, e.g. ``"softmax"`` (learnable temperature) or ``"mean"``.
        learn_t: learn the softmax temperature.
        mlp_layers: layers of GENConv's MLP.
        checkpoint: recompute every res+ convolution in the backward pass
            (``DeepGCNLayer(ckpt_grad=True)``).
        **kwargs: passed on to every :class:`~torch_geometric.nn.GENConv`.

    Shapes:
        - **input:** ``[num_nodes, in_channels]``, ``edge_index [2, num_edges]``
        - **output:** ``[num_nodes, out_channels]``

    Example:
        >>> ResGEN(16, 32, 4, num_layers=3)
        ResGEN(16, 32, 4, num_layers=3)
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        dropout: float = 0.0,
        act: Callable[[Tensor], Tensor] = F.relu,
        aggr: str = "softmax",
        learn_t: bool = True,
        mlp_layers: int = 2,
        checkpoint: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        owner = "ResGEN"
        self.in_channels = check_int(owner, "in_channels", in_channels)
        self.hidden_channels = check_int(owner, "hidden_channels", hidden_channels)
        self.out_channels = check_int(owner, "out_channels", out_channels)
        self.num_layers = check_int(owner, "num_layers", num_layers)
        self.dropout = check_rate(owner, "dropout", dropout)
        self.act = check_callable(owner, "act", act, hint="e.g. torch.nn.functional.relu")
        check_int(owner, "mlp_layers", mlp_layers)
        check_bool(owner, "learn_t", learn_t)
        check_bool(owner, "checkpoint", checkpoint)
        hidden = self.hidden_channels

        self.lin_in = nn.Linear(self.in_channels, hidden)
        self.layers = nn.ModuleList()
        for i in range(self.num_layers):
            conv = GENConv(
                hidden,
                hidden,
                aggr=aggr,
                learn_t=learn_t,
                num_layers=mlp_layers,
                norm="layer",
                **kwargs,
            )
            layer = DeepGCNLayer(
                conv,
                nn.LayerNorm(hidden),
                _Activation(act),
                block="res+",
                dropout=self.dropout,
                ckpt_grad=checkpoint and i > 0,
            )
            self.layers.append(layer)
        self.lin_out = nn.Linear(hidden, self.out_channels)

    def reset_parameters(self) -> None:
        """Re-initialise every layer."""
        self.lin_in.reset_parameters()
        for layer in self.layers:
            cast(DeepGCNLayer, layer).reset_parameters()
        self.lin_out.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits ``[num_nodes, out_channels]``."""
        h = self.lin_in(x)
        first = cast(DeepGCNLayer, self.layers[0])
        assert first.conv is not None and first.norm is not None and first.act is not None
        h = first.conv(h, edge_index)
        for layer in self.layers[1:]:
            h = layer(h, edge_index)
        h = first.act(first.norm(h))
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.lin_out(h)

    @classmethod
    def from_preset(
        cls, dataset: str, in_channels: int, out_channels: int, **kwargs: Any
    ) -> ResGEN:
        """The model with the sizes of thesis Table 5.4 for ``dataset`` (see
        :func:`deep_gnn_preset`); ``kwargs`` go to the constructor."""
        return cls(in_channels, out_channels=out_channels, **_preset("ResGEN", dataset, kwargs))

    def __repr__(self) -> str:
        return (
            f"ResGEN({self.in_channels}, {self.hidden_channels}, {self.out_channels}, "
            f"num_layers={self.num_layers})"
        )


class _Activation(nn.Module):
    """A functional activation as a module (DeepGCNLayer expects a module)."""

    def __init__(self, fn: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)
