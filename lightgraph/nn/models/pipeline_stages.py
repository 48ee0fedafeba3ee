"""Split a deep GNN into pipeline stages of consecutive message-passing layers.

Flow parallelism (UniTG §5.3.2) places ``P`` stages of ``L / P`` consecutive layers on
``P`` workers. :func:`split_stages` cuts one of lightgraph's deep GNNs into such stages:
stage ``i`` is a module ``forward(h, edge_index) -> h'``; stage ``0`` starts with the
model's input layer, the last stage ends with its output head (the logits). The stages
hold the model's own submodules — no parameter is copied — so ``model.state_dict()``
stays the source of truth and every parameter belongs to exactly one stage.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import DeepGCNLayer

from lightgraph.nn.models.basic_gnn import BasicGNN
from lightgraph.nn.models.rev_gnn import ResGEN, SharedDropout, _RevGNN
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_choice, check_int, check_type

__all__ = [
    "SUPPORTED_MODELS",
    "pipeline_depth",
    "reset_dropout",
    "shared_dropouts",
    "split_stages",
    "stage_layer_ranges",
    "stage_width",
]

#: Model families :func:`split_stages` accepts (``BasicGNN`` without jumping knowledge).
SUPPORTED_MODELS: tuple[str, ...] = ("RevGCN", "RevGAT", "ResGEN", "BasicGNN (GCN, GraphSAGE, GAT)")

_GRAPH_CACHE_SIZE = 64


def stage_layer_ranges(num_layers: int, num_stages: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` layer range of every stage: ``num_stages`` consecutive chunks of
    ``num_layers`` layers whose sizes differ by at most one (the first ``num_layers %
    num_stages`` stages hold one layer more).

    Example:
        >>> stage_layer_ranges(7, 3)
        [(0, 3), (3, 5), (5, 7)]
    """
    check_int("stage_layer_ranges", "num_layers", num_layers)
    check_int("stage_layer_ranges", "num_stages", num_stages, high=num_layers)
    base, extra = divmod(num_layers, num_stages)
    ranges, start = [], 0
    for i in range(num_stages):
        end = start + base + (i < extra)
        ranges.append((start, end))
        start = end
    return ranges


class _Stage(nn.Module):
    """Common attributes of a pipeline stage."""

    def __init__(
        self, index: int, num_stages: int, layers: tuple[int, int], in_ch: int, out_ch: int
    ) -> None:
        super().__init__()
        self.index = index
        self.num_stages = num_stages
        self.layers_range = layers
        #: width of the stage's input rows (the model's input for stage 0)
        self.in_channels = in_ch
        #: width of the stage's output rows (the number of classes for the last stage)
        self.out_channels = out_ch

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.num_stages - 1

    def extra_repr(self) -> str:
        start, end = self.layers_range
        return f"stage={self.index}/{self.num_stages}, layers=[{start}, {end})"


class _RevStage(_Stage):
    """Stage of a RevGCN / RevGAT: [lin_in] -> reversible blocks -> [norm, act, dropout, lin_out]."""

    def __init__(self, model: _RevGNN, index: int, num_stages: int, layers: tuple[int, int]):
        first, last = index == 0, index == num_stages - 1
        hidden = model.hidden_channels
        super().__init__(
            index,
            num_stages,
            layers,
            model.in_channels if first else hidden,
            model.out_channels if last else hidden,
        )
        self.lin_in = model.lin_in if first else None
        self.blocks = nn.ModuleList(model.blocks[layers[0] : layers[1]])
        self.reversible = model.reversible
        self.act: Callable[[Tensor], Tensor] = model.act
        self.norm_out = model.norm_out if last else None
        self.out_dropout = model.out_dropout if last else None
        self.lin_out = model.lin_out if last else None

    def forward(self, h: Tensor, edge_index: Tensor) -> Tensor:
        if self.lin_in is not None:
            h = self.lin_in(h)
        elif self.reversible and len(self.blocks):
            # A reversible block frees its input's storage (and restores it in the backward
            # pass); the stage input belongs to the caller (a pipeline's receive buffer).
            h = h.clone()
        for block in self.blocks:
            h = block(h, edge_index)
        if self.lin_out is not None:
            assert self.norm_out is not None and self.out_dropout is not None
            h = self.lin_out(self.out_dropout(self.act(self.norm_out(h))))
        return h


class _ResGENStage(_Stage):
    """Stage of a ResGEN: [lin_in, GENConv 0] -> res+ layers -> [norm, act, dropout, lin_out]."""

    def __init__(self, model: ResGEN, index: int, num_stages: int, layers: tuple[int, int]):
        first, last = index == 0, index == num_stages - 1
        hidden = model.hidden_channels
        super().__init__(
            index,
            num_stages,
            layers,
            model.in_channels if first else hidden,
            model.out_channels if last else hidden,
        )
        head = cast(DeepGCNLayer, model.layers[0])
        start, end = layers
        self.lin_in = model.lin_in if first else None
        # Layer 0 is a plain GENConv (its norm and activation serve the output head).
        self.conv0 = head.conv if start == 0 else None
        self.layers = nn.ModuleList(model.layers[max(start, 1) : end])
        self.p = model.dropout
        self.norm = head.norm if last else None
        self.head_act = head.act if last else None
        self.lin_out = model.lin_out if last else None

    def forward(self, h: Tensor, edge_index: Tensor) -> Tensor:
        if self.lin_in is not None:
            h = self.lin_in(h)
        if self.conv0 is not None:
            h = self.conv0(h, edge_index)
        for layer in self.layers:
            h = layer(h, edge_index)
        if self.lin_out is not None:
            assert self.norm is not None and self.head_act is not None
            h = self.head_act(self.norm(h))
            # The shared output layer carries the model's train/eval mode.
            h = F.dropout(h, p=self.p, training=self.lin_out.training)
            h = self.lin_out(h)
        return h


class _BasicGNNStage(_Stage):
    """Stage of a :class:`BasicGNN` (no jumping knowledge): dropout -> conv -> act per layer."""

    def __init__(self, model: BasicGNN, index: int, num_stages: int, layers: tuple[int, int]):
        start, end = layers
        widths = [model.in_channels] + [model.hidden_channels] * (model.num_layers - 1)
        widths.append(model.out_channels)
        super().__init__(index, num_stages, layers, widths[start], widths[end])
        self.convs = nn.ModuleList(model.convs[start:end])
        self.activate = [i < model.num_layers - 1 for i in range(start, end)]
        self.p = model.dropout
        self.act: Callable[[Tensor], Tensor] = model.act
        self._graphs: OrderedDict[tuple, tuple[Tensor, PartitionedGraph]] = OrderedDict()

    def _graph(self, edge_index: Tensor, num_nodes: int) -> PartitionedGraph:
        # The partition-aware layers take a PartitionedGraph; build the single-partition
        # view of every edge list once (the cache holds the edge list, so its storage and
        # hence the key stay unique while cached).
        key = (edge_index.data_ptr(), tuple(edge_index.shape), num_nodes, str(edge_index.device))
        hit = self._graphs.get(key)
        if hit is not None and hit[0] is edge_index:
            self._graphs.move_to_end(key)
            return hit[1]
        cpu = edge_index.detach().long().cpu()
        data = Data(
            x=torch.zeros(num_nodes, 1),
            y=torch.zeros(num_nodes, dtype=torch.long),
            edge_index=cpu,
            train_mask=torch.zeros(num_nodes, dtype=torch.bool),
            val_mask=torch.zeros(num_nodes, dtype=torch.bool),
            test_mask=torch.zeros(num_nodes, dtype=torch.bool),
        )
        graph = PartitionedGraph.from_data(data)
        graph.plan = graph.plan.to(edge_index.device)
        self._graphs[key] = (edge_index, graph)
        while len(self._graphs) > _GRAPH_CACHE_SIZE:
            self._graphs.popitem(last=False)
        return graph

    def forward(self, h: Tensor, edge_index: Tensor) -> Tensor:
        graph = self._graph(edge_index, h.size(0))
        for conv, activate in zip(self.convs, self.activate, strict=True):
            h = F.dropout(h, p=self.p, training=conv.training)
            h = conv(h, graph)
            if activate:
                h = self.act(h)
        return h


def pipeline_depth(model: nn.Module, owner: str = "pipeline_depth") -> int:
    """The number of layers ``L`` :func:`split_stages` cuts ``model`` into: the most
    pipeline stages it can have.

    Args:
        model: a model :func:`split_stages` accepts.
        owner: the name the errors start with (a caller checking its user's model passes
            its own, e.g. ``"FlowPipeline.build"``).

    Raises:
        ValueError: for a ``BasicGNN`` with ``jk``.
        TypeError: for a model :func:`split_stages` does not support.
    """
    return _stage_builder(owner, model)[1]


def _stage_builder(owner: str, model: nn.Module) -> tuple[Callable[..., _Stage], int]:
    """The stage class for ``model`` and its number of message-passing layers."""
    check_type(owner, "model", model, nn.Module, hint=", ".join(SUPPORTED_MODELS))
    builder: Callable[[Any, int, int, tuple[int, int]], _Stage]
    if isinstance(model, _RevGNN):
        builder = _RevStage
        num_layers = model.num_layers
    elif isinstance(model, ResGEN):
        builder = _ResGENStage
        num_layers = model.num_layers
    elif isinstance(model, BasicGNN):
        if model.jk_mode is not None:
            raise ValueError(
                f"{owner}: a {type(model).__name__} with jumping knowledge (jk={model.jk_mode!r}) "
                f"reads every layer's output in its head and cannot be cut into stages; build it "
                f"with jk=None."
            )
        builder = _BasicGNNStage
        num_layers = model.num_layers
    else:
        raise TypeError(
            f"{owner}: expected `model` to be one of {SUPPORTED_MODELS} but got "
            f"{type(model).__name__}."
        )
    return builder, int(num_layers)


def split_stages(model: nn.Module, num_stages: int) -> list[nn.Module]:
    """Cut ``model`` into ``num_stages`` pipeline stages of consecutive layers.

    The ``L`` message-passing layers (reversible blocks of :class:`RevGCN` /
    :class:`RevGAT`, GENConv layers of :class:`ResGEN`, convolutions of a
    :class:`BasicGNN`) are split into ``num_stages`` consecutive chunks whose sizes differ
    by at most one (:func:`stage_layer_ranges`). Stage ``i`` is a module
    ``forward(h: Tensor, edge_index: Tensor) -> Tensor``; stage ``0`` also runs the
    model's input layer (``lin_in``) and the last stage its output head, so composing the
    stages in order computes ``model(x, edge_index)`` (for a ``BasicGNN``, the model on
    the whole graph ``edge_index``).

    The stages hold the model's own submodules (nothing is copied): every parameter of
    ``model`` belongs to exactly one stage, training a stage trains the model, and
    ``model.state_dict()`` remains the checkpoint. Each stage has the attributes
    ``index``, ``num_stages``, ``layers_range``, ``in_channels`` and ``out_channels``
    (widths of its input and output rows).

    Dropout: a :class:`SharedDropout` (RevGCN / RevGAT) keeps its mask until reset; the
    model resets its masks when its ``forward`` starts, but the stages do not — call
    :func:`reset_dropout` once per training step (a pipeline runs several microbatches
    through a stage, and a reversible block's backward pass recomputes with the forward
    pass's mask). Stages of one model share the model's ``SharedDropout`` modules.

    Args:
        model: a :class:`~lightgraph.nn.RevGCN`, :class:`~lightgraph.nn.RevGAT`,
            :class:`~lightgraph.nn.ResGEN` or a :class:`~lightgraph.nn.BasicGNN`
            (``GCN``, ``GraphSAGE``, ``GAT``, ...) without jumping knowledge.
        num_stages: number of stages ``P``, in ``[1, L]``.

    Returns:
        ``num_stages`` modules, stage ``i`` at index ``i``.

    Raises:
        ValueError: for ``num_stages`` outside ``[1, L]`` or a ``BasicGNN`` with ``jk``.
        TypeError: for another kind of model (the message lists the supported ones).

    Example:
        >>> from lightgraph.nn import RevGCN
        >>> stages = split_stages(RevGCN(8, 16, 3, num_layers=5), 2)
        >>> [s.layers_range for s in stages]
        [(0, 3), (3, 5)]
    """
    owner = "split_stages"
    builder, num_layers = _stage_builder(owner, model)
    if (
        not isinstance(num_stages, int)
        or isinstance(num_stages, bool)
        or not (1 <= num_stages <= num_layers)
    ):
        raise ValueError(
            f"{owner}: expected `num_stages` to be an integer in [1, {num_layers}] (the "
            f"{type(model).__name__} has {num_layers} layers and every stage needs one) but got "
            f"{num_stages!r}."
        )
    ranges = stage_layer_ranges(num_layers, num_stages)
    target: Any = model  # narrowed by the isinstance checks above
    return [builder(target, i, num_stages, ranges[i]) for i in range(num_stages)]


def stage_width(stage: nn.Module, which: str) -> int:
    """``stage.in_channels`` or ``stage.out_channels`` of a stage of :func:`split_stages`."""
    check_choice("stage_width", "which", which, ("in_channels", "out_channels"))
    width = getattr(stage, which, None)
    if not isinstance(width, int):
        raise TypeError(
            f"stage_width: expected a stage of split_stages (with an int `{which}`) but got "
            f"{type(stage).__name__}."
        )
    return width


def shared_dropouts(stage: nn.Module) -> list[SharedDropout]:
    """The distinct :class:`SharedDropout` modules of ``stage`` (empty for ResGEN and
    ``BasicGNN`` stages, whose dropout draws a fresh mask on every call)."""
    seen: dict[int, SharedDropout] = {}
    for module in stage.modules():
        if isinstance(module, SharedDropout):
            seen.setdefault(id(module), module)
    return list(seen.values())


def reset_dropout(stage: nn.Module) -> None:
    """Forget the masks of ``stage``'s :class:`SharedDropout` modules.

    Call once per training step, before the stage's first forward pass: the masks drawn
    then are reused by every later call (and by the reversible blocks' recomputation in
    the backward pass) until the next reset.
    """
    for module in shared_dropouts(stage):
        module.reset()
