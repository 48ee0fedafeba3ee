"""Per-layer choice between aggregate-then-transform, :math:`(AX)W`, and
transform-then-aggregate, :math:`A(XW)` (JOESTAR's profile-guided operation order).

For a linear aggregation :math:`A` (mean, sum, GCN's normalised sum) and a linear map
:math:`W`, :math:`(AX)W = A(XW)`: the two orders compute the same layer, but their cost
differs. Aggregating first moves ``in_channels``-wide rows along the edges and
transforms only the destination rows; transforming first transforms every source row and
moves ``out_channels``-wide rows. Backward differs too: when the layer input needs no
gradient (the first layer, fed by the raw features), aggregating first computes
:math:`AX` once in forward and never back-propagates through the aggregation, while
transforming first must compute :math:`A^\\top G` to reach :math:`W`.

The order is chosen per layer, on the layer object itself, by :func:`set_order`. The
layer keeps its class, its submodules, its parameter names and its ``state_dict`` (a
checkpoint saved in either order loads into the other, and into an untouched PyG
model); only an instance-level ``forward`` is installed while the layer runs in the
order PyG does not use natively (and removed again when set back). The layer is still
called as ``conv(x, edge_index, ...)``, so PyG's ``BasicGNN`` (``model.convs[i]``),
its per-hop trimming, lightgraph's :class:`~lightgraph.nn.PartitionAware` and
layer-wise inference run either order unchanged.

Reorderable layers (identical math in both orders, up to float rounding):

* :class:`~torch_geometric.nn.conv.SAGEConv` with ``aggr="mean"`` or ``"sum"``/
  ``"add"`` (any ``normalize``, ``root_weight``, ``project``, ``bias``). PyG aggregates
  first: ``lin_l(aggr(x_j))``. Transform-first aggregates ``x_j W_l^T`` (``lin_l``
  *without* its bias) and adds the bias once afterwards, so a node without neighbours
  gets exactly what PyG gives it: the mean over nothing is 0 and ``lin_l(0)`` is the
  bias. ``project`` (``relu(lin(x_j))``) still runs before either order.
* :class:`~torch_geometric.nn.conv.GCNConv` (any ``cached``, ``add_self_loops``,
  ``normalize``, ``improved``, ``bias``). PyG transforms first: ``propagate(lin(x))``
  then the bias. Aggregate-first propagates ``x`` with the same edge normalisation (the
  same :func:`~torch_geometric.nn.conv.gcn_conv.gcn_norm` call and the same cache)
  then applies ``lin`` and the bias.

Every other layer is *not reorderable* and is kept as it is: :func:`reorderable` is
``False``, :func:`get_order` returns ``None``, :func:`set_order` raises and
:func:`profile_layer_orders` skips it. This covers attention layers such as
:class:`~torch_geometric.nn.conv.GATConv` (the attention coefficients are computed from
the *transformed* features, so there is no aggregate-first form), ``SAGEConv`` with a
non-linear aggregation (``"max"``, ``"lstm"``, multi-aggregations), and subclasses of
``SAGEConv``/``GCNConv`` (they may change the math).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, MessagePassing, SAGEConv
from torch_geometric.nn.aggr import MeanAggregation, SumAggregation
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.dense.linear import is_uninitialized_parameter
from torch_geometric.typing import SparseTensor

from lightgraph.utilities.checks import (
    check_callable,
    check_choice,
    check_int,
    check_type,
)

__all__ = [
    "AGGREGATE_FIRST",
    "ORDERS",
    "TRANSFORM_FIRST",
    "LayerOrderProfile",
    "conv_layers",
    "get_order",
    "native_order",
    "profile_layer_orders",
    "reorderable",
    "set_order",
]

Order = Literal["aggregate_first", "transform_first"]
AGGREGATE_FIRST: Order = "aggregate_first"
TRANSFORM_FIRST: Order = "transform_first"
#: The two orders; a layer's index in this tuple is what the callback logs (0 or 1).
ORDERS: tuple[str, ...] = (AGGREGATE_FIRST, TRANSFORM_FIRST)

_REORDERABLE_HINT = "SAGEConv with aggr 'mean'/'sum', or GCNConv"


# ----------------------------------------------------------------------- the two forwards
def _sage_transform_first(
    conv: SAGEConv, x: Tensor | tuple[Tensor, Tensor | None], edge_index: Any, size: Any = None
) -> Tensor:
    """``SAGEConv.forward`` with ``lin_l`` moved before the (linear) aggregation."""
    lin = conv.lin_l
    if is_uninitialized_parameter(lin.weight):  # lazy layer: PyG's forward initialises it
        return SAGEConv.forward(conv, x, edge_index, size)
    if isinstance(x, Tensor):
        x = (x, x)
    if conv.project and hasattr(conv, "lin"):
        x = (conv.lin(x[0]).relu(), x[1])
    # Aggregate W x_j without the bias; the bias is added once per destination node, as
    # lin_l(aggr(x_j)) does (a node without neighbours: aggr = 0, lin_l(0) = bias).
    h = F.linear(x[0], lin.weight)
    out = conv.propagate(edge_index, x=(h, x[1]), size=size)
    if lin.bias is not None:
        out = out + lin.bias
    x_r = x[1]
    if conv.root_weight and x_r is not None:
        out = out + conv.lin_r(x_r)
    if conv.normalize:
        out = F.normalize(out, p=2.0, dim=-1)
    return out


def _gcn_normalised(
    conv: GCNConv, x: Tensor, edge_index: Any, edge_weight: Tensor | None
) -> tuple[Any, Tensor | None]:
    """The edge normalisation (and cache use) of ``GCNConv.forward``, verbatim."""
    if conv.normalize:
        if isinstance(edge_index, Tensor):
            cache = conv._cached_edge_index
            if cache is None:
                edge_index, edge_weight = gcn_norm(
                    edge_index,
                    edge_weight,
                    x.size(conv.node_dim),
                    conv.improved,
                    conv.add_self_loops,
                    conv.flow,
                    x.dtype,
                )
                if conv.cached:
                    conv._cached_edge_index = (edge_index, edge_weight)
            else:
                edge_index, edge_weight = cache[0], cache[1]
        elif isinstance(edge_index, SparseTensor):
            cache = conv._cached_adj_t
            if cache is None:
                edge_index = gcn_norm(
                    edge_index,
                    edge_weight,
                    x.size(conv.node_dim),
                    conv.improved,
                    conv.add_self_loops,
                    conv.flow,
                    x.dtype,
                )
                if conv.cached:
                    conv._cached_adj_t = edge_index
            else:
                edge_index = cache
    return edge_index, edge_weight


def _gcn_aggregate_first(
    conv: GCNConv, x: Tensor, edge_index: Any, edge_weight: Tensor | None = None
) -> Tensor:
    """``GCNConv.forward`` with ``lin`` moved after the (linear) propagation."""
    if isinstance(x, (tuple, list)) or is_uninitialized_parameter(conv.lin.weight):
        # PyG's own forward: its error for bipartite input, its lazy initialisation.
        return GCNConv.forward(conv, x, edge_index, edge_weight)
    edge_index, edge_weight = _gcn_normalised(conv, x, edge_index, edge_weight)
    out = conv.propagate(edge_index, x=x, edge_weight=edge_weight)
    out = conv.lin(out)
    if conv.bias is not None:
        out = out + conv.bias
    return out


class _ReorderedForward:
    """The instance-level ``forward`` of a layer running in its non-native order.

    Not an ``nn.Module`` (nothing is registered: names and ``state_dict`` are unchanged);
    a module-level class holding the layer, so the layer still deep-copies and pickles.
    """

    __slots__ = ("conv", "order")

    def __init__(self, conv: MessagePassing, order: str) -> None:
        self.conv = conv
        self.order = order

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        if type(self.conv) is SAGEConv:
            return _sage_transform_first(self.conv, *args, **kwargs)
        return _gcn_aggregate_first(self.conv, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.order} forward of {type(self.conv).__name__}>"


# ------------------------------------------------------------------------------ helpers
def native_order(conv: nn.Module) -> str | None:
    """The order PyG's own ``forward`` of ``conv`` uses; ``None`` if not reorderable."""
    if type(conv) is SAGEConv:
        if type(conv.aggr_module) in (MeanAggregation, SumAggregation):
            return AGGREGATE_FIRST
        return None
    if type(conv) is GCNConv:
        return TRANSFORM_FIRST
    return None


def reorderable(conv: nn.Module) -> bool:
    """Whether ``conv`` can run in both orders with identical math (see the module doc).

    A layer whose ``forward`` was replaced on the instance by something else than
    :func:`set_order` is not reorderable either (that replacement is kept as it is).
    """
    if native_order(conv) is None:
        return False
    override = conv.__dict__.get("forward")
    return override is None or isinstance(override, _ReorderedForward)


def get_order(conv: nn.Module) -> str | None:
    """``"aggregate_first"`` or ``"transform_first"``: the order ``conv`` runs in now;
    ``None`` for a layer that is not reorderable (it runs as it always did)."""
    if not reorderable(conv):
        return None
    override = conv.__dict__.get("forward")
    return override.order if override is not None else native_order(conv)


def set_order(conv: nn.Module, order: str) -> None:
    """Run ``conv`` in ``order`` (``"aggregate_first"`` or ``"transform_first"``) from now on.

    Its parameters, buffers and ``state_dict`` keys do not change. Setting PyG's native
    order removes the replacement ``forward``: the layer is then PyG's, untouched.

    Raises:
        ValueError: ``order`` is not one of :data:`ORDERS`, or ``conv`` is not
            reorderable (e.g. ``GATConv``, ``SAGEConv(aggr="max")``).
    """
    check_choice("set_order", "order", order, ORDERS)
    check_type("set_order", "conv", conv, nn.Module, hint=_REORDERABLE_HINT)
    if not reorderable(conv):
        detail = type(conv).__name__
        if isinstance(conv, SAGEConv):
            detail += f"(aggr={conv.aggr!r})"
        raise ValueError(
            f"set_order: expected `conv` to be a reorderable layer ({_REORDERABLE_HINT}, "
            f"a linear aggregation) but got {detail}; it is kept in its own order."
        )
    if order == native_order(conv):
        conv.__dict__.pop("forward", None)
    else:
        conv.forward = _ReorderedForward(conv, order)


def conv_layers(model: nn.Module) -> list[nn.Module]:
    """The message-passing layers of ``model``, in layer order (index = layer number).

    ``model.convs`` for PyG ``BasicGNN`` models (an entry wrapping a PyG layer in a
    ``conv`` attribute, as :class:`~lightgraph.nn.PartitionAware` does, is unwrapped);
    ``[model]`` for a single layer; otherwise every outermost ``MessagePassing`` submodule.
    """
    if isinstance(model, MessagePassing):
        return [model]
    convs = getattr(model, "convs", None)
    if isinstance(convs, nn.ModuleList | Sequence):
        out = []
        for layer in convs:
            inner = getattr(layer, "conv", None)
            out.append(inner if isinstance(inner, MessagePassing) else layer)
        return out
    found: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside:
            continue
        if isinstance(module, MessagePassing):
            found.append(module)
            inside.update(id(m) for m in module.modules())
    return found


# ---------------------------------------------------------------------------- profiling
@dataclass(frozen=True)
class LayerOrderProfile:
    """Forward + backward time of one layer in each order (seconds of ``timer``, median
    over the repeats) and the faster order (PyG's native order on a tie)."""

    aggregate_first: float
    transform_first: float
    faster: str
    #: whether the layer input required grad while timed (``False`` for layer 0).
    input_requires_grad: bool

    def time(self, order: str) -> float:
        return self.aggregate_first if order == AGGREGATE_FIRST else self.transform_first


def _map_tensors(value: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, tuple | list):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


#: Called with ``(layer, args, kwargs)`` when a layer is run.
LayerRecorder = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]
#: ``observe(layers, record)``: a context manager inside which every run of one of
#: ``layers`` is reported to ``record``.
LayerObserver = Callable[[list[nn.Module], LayerRecorder], AbstractContextManager[Any]]


@contextmanager
def observe_module_calls(layers: list[nn.Module], record: LayerRecorder) -> Iterator[None]:
    """Report every call of one of ``layers`` (its module forward pre-hook) to ``record``."""

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        record(module, args, kwargs)

    handles = [layer.register_forward_pre_hook(hook, with_kwargs=True) for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _capture_inputs(
    model: nn.Module,
    targets: list[nn.Module],
    forward: Callable[[], Any],
    observe: LayerObserver = observe_module_calls,
) -> dict[int, tuple[tuple[Any, ...], dict[str, Any], bool]]:
    """Run ``forward()`` once and record, for every target layer, the (detached) arguments
    of its first run (as ``observe`` reports it) and whether its input requires grad in
    training.

    The model runs in its current mode (dropout, trimming and all) with autograd on, so
    each layer sees the input it sees in training, ``requires_grad`` included: ``False``
    for a layer fed the raw features, ``True`` after any layer with parameters. Buffers
    (e.g. batch-norm statistics) are restored afterwards.
    """
    captured: dict[int, tuple[tuple[Any, ...], dict[str, Any], bool]] = {}
    position = {id(conv): i for i, conv in enumerate(targets)}

    def detach(t: Tensor) -> Tensor:
        return t.detach()

    def record(module: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        index = position.get(id(module))
        if index is not None and index not in captured and a:
            needs_grad = any(t.requires_grad for t in _flat(a[0]))
            captured[index] = (_map_tensors(a, detach), _map_tensors(kw, detach), needs_grad)

    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        with observe(targets, record), torch.enable_grad():
            forward()  # the graph is dropped at once: nothing runs backward
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
    return captured


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_layer_orders(
    model: nn.Module,
    x: Tensor,
    edge_index: Any,
    num_sampled_nodes: Sequence[int] | None = None,
    num_sampled_edges: Sequence[int] | None = None,
    repeats: int = 3,
    timer: Callable[[], float] = time.perf_counter,
    warmup: int = 1,
) -> dict[int, LayerOrderProfile]:
    """Time forward + backward of every reorderable layer of ``model`` in both orders.

    ``model(x, edge_index)`` (with ``num_sampled_nodes_per_hop``/``num_sampled_edges_per_hop``
    when the per-hop counts are given, i.e. PyG's trimming) runs forward once to
    record each layer's actual input on this batch -- the output of the preceding layers,
    activation, norm and dropout included. Then each layer alone runs forward and
    backward (:func:`torch.autograd.grad` to the layer's parameters, so no ``.grad`` of
    the model is touched) on that input, alternating the orders, ``warmup`` untimed then
    ``repeats`` timed runs per order; a layer's time is the median.

    Each layer's input requires grad exactly when it does in training (as recorded in
    that run): the input of layer 0 -- the raw features -- does *not*, the input of
    every later layer does. So in layer 0 with aggregation first, autograd never runs
    the aggregation's backward: the aggregated features :math:`AX` depend on no tensor
    that needs a gradient, and only the transform's weight gradient
    :math:`G^\\top (AX)` is computed. Transform-first must back-propagate through the
    aggregation even there (:math:`A^\\top G` reaches :math:`W`). In later layers both
    orders back-propagate through the aggregation (to reach the previous layer). (Features
    that do require grad, e.g. learnable embeddings, are timed with their gradient.)

    Random streams and buffers are left as they were, and every layer is back in its
    original order afterwards: this measures, :func:`set_order` decides.

    Args:
        model: a GNN, e.g. a PyG ``BasicGNN`` (layers: :func:`conv_layers`).
        x: node features of a batch.
        edge_index: its edges (anything the model takes as second argument).
        num_sampled_nodes, num_sampled_edges: per-hop counts of a sampled batch (both or
            neither).
        repeats: timed runs per layer and order.
        timer: clock returning seconds (injectable, e.g. to force a decision in tests).
        warmup: untimed runs per layer and order before the timed ones.

    Returns:
        ``{layer index: LayerOrderProfile}`` for the reorderable layers (others are
        absent).
    """
    owner = "profile_layer_orders"
    check_type(owner, "model", model, nn.Module, hint="e.g. torch_geometric.nn.models.GraphSAGE")
    check_type(owner, "x", x, Tensor)
    repeats = check_int(owner, "repeats", repeats, low=1)
    warmup = check_int(owner, "warmup", warmup, low=0)
    check_callable(owner, "timer", timer, hint="e.g. time.perf_counter")
    if (num_sampled_nodes is None) != (num_sampled_edges is None):
        raise ValueError(
            f"{owner}: expected `num_sampled_nodes` and `num_sampled_edges` to be both given "
            f"or both None but got {type(num_sampled_nodes).__name__} and "
            f"{type(num_sampled_edges).__name__}."
        )
    kwargs: dict[str, Any] = {}
    if num_sampled_nodes is not None and num_sampled_edges is not None:
        kwargs["num_sampled_nodes_per_hop"] = [int(n) for n in num_sampled_nodes]
        kwargs["num_sampled_edges_per_hop"] = [int(e) for e in num_sampled_edges]

    return profile_captured_orders(
        model,
        lambda: model(x, edge_index, **kwargs),
        lambda conv, args, kw: conv(*args, **kw),
        repeats=repeats,
        timer=timer,
        warmup=warmup,
        device=x.device,
    )


def profile_captured_orders(
    model: nn.Module,
    forward: Callable[[], Any],
    call: Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], Tensor],
    repeats: int = 3,
    timer: Callable[[], float] = time.perf_counter,
    warmup: int = 1,
    device: torch.device | None = None,
    observe: LayerObserver = observe_module_calls,
) -> dict[int, LayerOrderProfile]:
    """The timing core of :func:`profile_layer_orders`, for any way of running the layers.

    ``forward()`` runs the model once (autograd on, random streams and buffers restored
    afterwards) while ``observe`` reports each run of a reorderable layer of
    :func:`conv_layers` (by default its module call); the arguments of every layer's
    first run are kept, and ``call(layer, args, kwargs)`` then runs it on them, forward
    and backward, in both orders. E.g.
    :func:`lightgraph.nn.destination.profile_destination_orders` times each layer as
    training on a sampled mini-batch runs it: on its destination rows only.
    """
    layers = [(i, conv) for i, conv in enumerate(conv_layers(model)) if reorderable(conv)]
    if not layers:
        return {}
    original = {i: cast(str, get_order(conv)) for i, conv in layers}  # all reorderable
    on_device = device if device is not None else torch.device("cpu")
    devices = [on_device] if on_device.type == "cuda" else []
    result: dict[int, LayerOrderProfile] = {}
    with torch.random.fork_rng(devices=devices):
        captured = _capture_inputs(model, [c for _, c in layers], forward, observe)
        try:
            for position, (i, conv) in enumerate(layers):
                if position not in captured:  # not called on this batch
                    continue
                # As in training: layer 0 gets the raw features, which need no gradient.
                args, kw, needs_grad = captured[position]
                params = [p for p in conv.parameters() if p.requires_grad]

                def run(
                    conv=conv, args=args, kw=kw, params=params, needs_grad=needs_grad
                ) -> Tensor:
                    inp = _map_tensors(
                        args[0],
                        lambda t: t.detach().requires_grad_(needs_grad and t.is_floating_point()),
                    )
                    out = call(conv, (inp, *args[1:]), kw)
                    leaves = params + (
                        [t for t in _flat(inp) if t.requires_grad] if needs_grad else []
                    )
                    if leaves and out.requires_grad:
                        torch.autograd.grad(
                            out, leaves, grad_outputs=torch.ones_like(out), allow_unused=True
                        )
                    return out

                times: dict[str, list[float]] = {order: [] for order in ORDERS}
                for order in ORDERS:
                    set_order(conv, order)
                    for _ in range(warmup):
                        run()
                for _ in range(repeats):
                    for order in ORDERS:
                        set_order(conv, order)
                        _sync(on_device)
                        start = timer()
                        run()
                        _sync(on_device)
                        times[order].append(float(timer() - start))
                median = {order: statistics.median(times[order]) for order in ORDERS}
                native = cast(str, native_order(conv))
                other = TRANSFORM_FIRST if native == AGGREGATE_FIRST else AGGREGATE_FIRST
                faster = other if median[other] < median[native] else native
                result[i] = LayerOrderProfile(
                    aggregate_first=median[AGGREGATE_FIRST],
                    transform_first=median[TRANSFORM_FIRST],
                    faster=faster,
                    input_requires_grad=needs_grad,
                )
        finally:
            for i, conv in layers:
                set_order(conv, original[i])
    return result


def _flat(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _flat(v)]
    return []
