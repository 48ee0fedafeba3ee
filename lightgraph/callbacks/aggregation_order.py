"""JOESTAR's profile-guided operation order: aggregate-first or transform-first, per layer."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import lightning.pytorch as pl
from torch import nn
from torch_geometric.nn.models.basic_gnn import BasicGNN
from typing_extensions import override

from lightgraph.nn.aggregation_order import (
    AGGREGATE_FIRST,
    ORDERS,
    TRANSFORM_FIRST,
    conv_layers,
    native_order,
    profile_layer_orders,
    reorderable,
    set_order,
)
from lightgraph.nn.destination import profile_destination_orders
from lightgraph.utilities.checks import check_bool, check_callable, check_int

_OWNER = "AggregationOrder"


class AggregationOrder(pl.Callback):
    """Choose, per GNN layer, between aggregate-then-transform :math:`(AX)W` and
    transform-then-aggregate :math:`A(XW)` by timing both on the batches the module trains on.

    On the first ``profile_batches`` training batches it sees (the first batches of the
    first epoch), before the module trains on the batch, the callback runs
    :func:`lightgraph.nn.aggregation_order.profile_layer_orders` on ``pl_module.model``
    with the batch's ``x``, ``edge_index`` and -- when the module trims, as
    :class:`~lightgraph.models.MiniBatchNodeClassifier` does for PyG ``BasicGNN`` models
    -- its ``num_sampled_nodes``/``num_sampled_edges``: forward + backward of every
    reorderable layer on its actual input, in both orders. When the module runs
    destination-only layers (``MiniBatchNodeClassifier`` with a PyG ``BasicGNN``), each
    layer is timed the way training runs it instead
    (:func:`lightgraph.nn.destination.profile_destination_orders`): on its destination
    rows only, over the bipartite block (a CSR ``adj_t`` on the CPU). Once profiled, each layer is
    set to the order with the smaller total time (PyG's native order on a tie) with
    :func:`~lightgraph.nn.aggregation_order.set_order`, which leaves parameter names and
    ``state_dict`` unchanged. Both orders compute the same layer (up to float rounding),
    so training is unaffected except in speed. Layers that are not reorderable (e.g.
    ``GATConv``) are kept as they are.

    Under several processes rank 0's choice is broadcast, so all ranks run the same
    orders. The choice (and the measured times) are checkpointed: a resumed run applies
    them at the start of training and does not profile again.

    Logged (epoch level, once per epoch once the choice is known):
    ``aggregation_order/layer{i}`` (0: aggregate-first, 1: transform-first) for every
    reorderable layer and, when profiled, ``aggregation_order/layer{i}/aggregate_first_ms``
    and ``aggregation_order/layer{i}/transform_first_ms`` (forward + backward of layer
    ``i``, mean over the profiled batches of the median over ``repeats``).

    Args:
        profile_batches: training batches to profile before choosing.
        orders: a fixed choice instead of profiling: one entry per layer of the model
            (``model.convs``), each ``"aggregate_first"``, ``"transform_first"`` or
            ``None`` (keep the layer as it is; the entry of a non-reorderable layer must
            be ``None``). Takes precedence over a checkpointed choice.
        repeats: timed runs per layer and order on each profiled batch.
        warmup: untimed runs per layer and order before the timed ones.
        timer: the clock (seconds), e.g. injected by tests.
        log: log the choice and the times.
    """

    def __init__(
        self,
        profile_batches: int = 1,
        orders: Sequence[str | None] | None = None,
        repeats: int = 3,
        warmup: int = 1,
        timer: Callable[[], float] = time.perf_counter,
        log: bool = True,
    ) -> None:
        super().__init__()
        self.profile_batches = check_int(_OWNER, "profile_batches", profile_batches, low=1)
        self.repeats = check_int(_OWNER, "repeats", repeats, low=1)
        self.warmup = check_int(_OWNER, "warmup", warmup, low=0)
        self.timer = check_callable(_OWNER, "timer", timer, hint="e.g. time.perf_counter")
        # Not `self.log`: Lightning overwrites every callback's `log` attribute with the
        # LightningModule's `log` method when the fit starts.
        self.log_metrics = check_bool(_OWNER, "log", log)
        self.forced = orders is not None
        #: The chosen order of every layer (``None``: kept as is); ``None`` until chosen.
        self.orders: list[str | None] | None = None
        if orders is not None:
            self.orders = _check_orders(orders)
        #: Summed seconds per layer and order over the profiled batches.
        self.times: dict[int, dict[str, float]] = {}
        self.profiled = 0
        self._logged_epoch: int | None = None

    # -------------------------------------------------------------------------- hooks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        layers = conv_layers(_model(pl_module))
        if self.forced:
            self._check_fits(layers)
            self._apply(pl_module)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.orders is not None:  # forced, or restored from a checkpoint
            self._check_fits(conv_layers(_model(pl_module)))
            self._apply(pl_module)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.orders is None and self.profiled < self.profile_batches:
            self._profile(pl_module, batch)
            if self.profiled >= self.profile_batches:
                self._decide(trainer, pl_module)
        if (
            self.orders is not None
            and self.log_metrics
            and self._logged_epoch != trainer.current_epoch
        ):
            self._log(pl_module)
            self._logged_epoch = trainer.current_epoch

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # An epoch shorter than `profile_batches`: choose from what was profiled.
        if self.orders is None and self.profiled > 0:
            self._decide(trainer, pl_module)

    # ---------------------------------------------------------------------- internals
    def _profile(self, pl_module: pl.LightningModule, batch: Any) -> None:
        model = _model(pl_module)
        x = getattr(batch, "x", None)
        edge_index = getattr(batch, "edge_index", None)
        if x is None or edge_index is None:
            raise RuntimeError(
                f"{_OWNER}: expected the training batch to have `x` and `edge_index` (a "
                f"torch_geometric.data.Data, as MiniBatchNodeClassifier trains on) but got "
                f"{type(batch).__name__}; pass `orders` to choose without profiling."
            )
        nodes = getattr(batch, "num_sampled_nodes", None)
        edges = getattr(batch, "num_sampled_edges", None)
        hparams = getattr(pl_module, "hparams", {})
        trims = bool(hparams.get("trim", True)) and isinstance(model, BasicGNN)
        if not trims or nodes is None or edges is None:
            nodes = edges = None
        # MiniBatchNodeClassifier's model_step runs a trimmed BasicGNN with jk None or
        # "last" layer by layer, each on its destinations.
        layered = hasattr(pl_module, "model_step") and getattr(model, "jk_mode", None) in (
            None,
            "last",
        )
        # A module running destination-only layers is timed on the same blocks.
        destination = nodes is not None and edges is not None and layered
        profiler = profile_destination_orders if destination else profile_layer_orders
        profile = profiler(
            model,
            x,
            edge_index,
            nodes,
            edges,
            repeats=self.repeats,
            timer=self.timer,
            warmup=self.warmup,
        )
        for i, layer in profile.items():
            total = self.times.setdefault(i, dict.fromkeys(ORDERS, 0.0))
            for order in ORDERS:
                total[order] += layer.time(order)
        self.profiled += 1

    def _decide(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        layers = conv_layers(_model(pl_module))
        orders: list[str | None] = []
        for i, conv in enumerate(layers):
            total = self.times.get(i)
            if total is None or not reorderable(conv):
                orders.append(None)
                continue
            native = cast(str, native_order(conv))
            other = TRANSFORM_FIRST if native == AGGREGATE_FIRST else AGGREGATE_FIRST
            orders.append(other if total[other] < total[native] else native)
        # All ranks run rank 0's choice.
        self.orders, self.times, self.profiled = trainer.strategy.broadcast(
            (orders, self.times, self.profiled), src=0
        )
        self._apply(pl_module)

    def _check_fits(self, layers: list[nn.Module]) -> None:
        assert self.orders is not None
        if len(self.orders) != len(layers):
            raise ValueError(
                f"{_OWNER}: expected `orders` to have one entry per layer of the model "
                f"({len(layers)}) but got {len(self.orders)}: {self.orders!r}."
            )
        for i, (order, conv) in enumerate(zip(self.orders, layers, strict=True)):
            if order is not None and not reorderable(conv):
                raise ValueError(
                    f"{_OWNER}: expected `orders[{i}]` to be None (layer {i}, "
                    f"{type(conv).__name__}, is not reorderable) but got {order!r}."
                )

    def _apply(self, pl_module: pl.LightningModule) -> None:
        assert self.orders is not None
        for order, conv in zip(self.orders, conv_layers(_model(pl_module)), strict=False):
            if order is not None:
                set_order(conv, order)

    def _log(self, pl_module: pl.LightningModule) -> None:
        assert self.orders is not None
        for i, order in enumerate(self.orders):
            if order is None:
                continue
            kw: dict[str, Any] = {"on_step": False, "on_epoch": True, "batch_size": 1}
            pl_module.log(f"aggregation_order/layer{i}", float(ORDERS.index(order)), **kw)
            total = self.times.get(i)
            if total is not None and self.profiled:
                for o in ORDERS:
                    ms = 1000.0 * total[o] / self.profiled
                    pl_module.log(f"aggregation_order/layer{i}/{o}_ms", ms, **kw)

    # -------------------------------------------------------------------------- state
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "orders": None if self.orders is None else list(self.orders),
            "times": {int(i): dict(t) for i, t in self.times.items()},
            "profiled": self.profiled,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.times = {int(i): dict(t) for i, t in state_dict.get("times", {}).items()}
        self.profiled = int(state_dict.get("profiled", 0))
        if not self.forced:
            saved = state_dict.get("orders")
            self.orders = None if saved is None else _check_orders(saved)


def _check_orders(orders: Any) -> list[str | None]:
    if isinstance(orders, str) or not isinstance(orders, Sequence) or len(orders) == 0:
        raise ValueError(
            f"{_OWNER}: expected `orders` to be a non-empty list with one entry per layer, "
            f"each one of {ORDERS + (None,)}, but got {orders!r}."
        )
    for i, order in enumerate(orders):
        if order is not None and order not in ORDERS:
            raise ValueError(
                f"{_OWNER}: expected `orders[{i}]` to be one of {ORDERS + (None,)} but got "
                f"{order!r}."
            )
    return list(orders)


def _model(pl_module: pl.LightningModule) -> nn.Module:
    model = getattr(pl_module, "model", None)
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{_OWNER}: expected the LightningModule to hold its GNN as `model` (a "
            f"torch.nn.Module, e.g. MiniBatchNodeClassifier(GraphSAGE(...))) but got "
            f"{type(model).__name__} on {type(pl_module).__name__}."
        )
    return model
