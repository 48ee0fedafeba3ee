"""A wrapper that makes any PyG message-passing layer partition-aware."""

from __future__ import annotations

import inspect
import typing
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv import (
    APPNP,
    ARMAConv,
    ChebConv,
    GATConv,
    GATv2Conv,
    GCN2Conv,
    GCNConv,
    MixHopConv,
    SGConv,
    SSGConv,
    TAGConv,
    TransformerConv,
)

from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.functional.sparse_matmul import spmm_with_cached_transpose
from lightgraph.nn.conv.split import SplitLayer, split_layer
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.typing import require_torch_sparse
from lightgraph.utilities.checks import check_choice, check_type

__all__ = ["PartitionAware"]

Adjacency = Literal["auto", "adj_t", "edge_index", "sparse_tensor"]
Normalization = Literal["auto", "gcn", "none"]
ADJACENCIES: tuple[str, ...] = get_args(Adjacency)
NORMALIZATIONS: tuple[str, ...] = get_args(Normalization)

# Layers that propagate several hops inside one call: a partition cannot serve them with
# a single halo exchange, so they are refused instead of silently computing wrong rows.
_MULTI_HOP = (APPNP, ARMAConv, ChebConv, MixHopConv, SGConv, SSGConv, TAGConv)
# Layers that normalise by node degrees internally; their degrees must be global.
_GCN_NORMALIZED = (GCNConv, GCN2Conv)


class PartitionAware(nn.Module):
    """Runs a PyG :class:`~torch_geometric.nn.conv.MessagePassing` layer on one partition.

    Before the wrapped layer runs, the inner rows ``x`` are completed with the halo rows
    of the other partitions (:meth:`PartitionedGraph.exchange`, differentiable), and the
    layer sees the partition's local graph: all edges whose destination is an inner
    node. Its output holds the inner rows only, so a stack of wrapped layers computes on
    every partition exactly what the layer computes on the whole graph:

    .. math::
        \\mathbf{H}^{(l)}_{\\text{inner}} = f\\left(\\begin{bmatrix}
        \\mathbf{H}^{(l-1)}_{\\text{inner}} \\\\ \\mathbf{H}^{(l-1)}_{\\text{halo}}
        \\end{bmatrix}, \\mathcal{E}_{\\to \\text{inner}}\\right)

    Degree normalisation must use *global* degrees: for GCN-normalised layers
    (``GCNConv``, ``GCN2Conv`` with ``normalize=True``) the wrapper turns the layer's own
    normalisation off and feeds the adjacency normalised with the plan's global degrees
    (``normalization="gcn"`` does the same for any layer taking ``edge_weight``).
    ``GCNConv(improved=True)`` is computed as PyG computes it on the whole graph's
    ``edge_index``: without edge weights, PyG's ``gcn_norm`` gives every node one self-loop
    of weight 1 (``add_remaining_self_loops`` applies its fill value to weighted edges
    only), which is what the plan's GCN weights hold.
    Layers that propagate several hops per call (``SGConv``, ``APPNP``, ``TAGConv``, ...)
    are rejected: stack one-hop layers instead.

    **Split path.** ``GCNConv``, ``SAGEConv``, ``GATConv``, ``GCN2Conv`` and
    :class:`~lightgraph.nn.conv.GCNPropagation` (with their usual options, see
    :mod:`lightgraph.nn.conv.split`) are computed in two halves around the exchange:
    first everything the inner rows determine — their transform, and the aggregation of
    inner sources — then the halo rows' transform and contribution. Every row is
    transformed once and every output row's dense part runs once. In overlap mode the
    first half runs while the halo rows travel, and in backward the halo gradients are
    sent back while the first half's gradient is computed. The same two halves run in
    every mode, so overlapped and synchronous forward passes are bit-identical. Other
    layers run whole: in overlap mode twice (central rows with zero halo rows while the
    rows travel, then marginal rows), which is exact but doubles the dense work.

    Args:
        conv: the PyG layer.
        name: label of this layer in the exchanged-bytes counters.
        adjacency: ``"adj_t"`` passes a ``[num_inner, num_local]`` torch CSR matrix (fast
            sparse-dense products for layers implementing ``message_and_aggregate``),
            ``"edge_index"`` passes local edges, ``"sparse_tensor"`` a
            ``torch_sparse.SparseTensor`` (optional ``torch-sparse`` package); ``"auto"`` picks
            ``"adj_t"`` when the layer has a fused sparse path.
        normalization: ``"gcn"``, ``"none"`` or ``"auto"`` (``"gcn"`` for GCN-normalised
            layers).
        bipartite: call the layer as ``conv((x_local, x_inner), ...)`` so it computes inner
            rows only; ``None`` decides from the type hint of the layer's ``x`` argument.
        split: use the split path where the layer has one (``False``: always run the PyG
            layer whole, as before the split path existed).

    Shapes:
        - **input:** inner rows ``[num_inner, F_in]``, a :class:`PartitionedGraph`
        - **output:** ``[num_inner, F_out]``
    """

    def __init__(
        self,
        conv: MessagePassing,
        name: str = "layer",
        adjacency: Adjacency = "auto",
        normalization: Normalization = "auto",
        bipartite: bool | None = None,
        split: bool = True,
    ) -> None:
        super().__init__()
        check_type("PartitionAware", "conv", conv, MessagePassing, hint="a torch_geometric layer")
        if isinstance(conv, _MULTI_HOP):
            raise ValueError(
                f"PartitionAware: {type(conv).__name__} propagates over several hops in one call, "
                f"which needs a halo exchange per hop; stack one-hop layers (e.g. GCNConv) instead."
            )
        check_choice("PartitionAware", "adjacency", adjacency, ADJACENCIES)
        check_choice("PartitionAware", "normalization", normalization, NORMALIZATIONS)
        self.conv = conv
        self.name = name
        if normalization == "auto":
            normalization = (
                "gcn"
                if isinstance(conv, _GCN_NORMALIZED) and getattr(conv, "normalize", False)
                else "none"
            )
        if isinstance(conv, _GCN_NORMALIZED) and getattr(conv, "normalize", False):
            if normalization == "none":
                raise ValueError(
                    f"PartitionAware: {type(conv).__name__}(normalize=True) normalises with the degrees it "
                    f"sees, which are wrong for halo rows; use normalization='gcn' (or 'auto') so the "
                    f"plan's global degrees are used, or build the layer with normalize=False."
                )
            if not getattr(conv, "add_self_loops", True):
                raise ValueError(
                    f"PartitionAware: {type(conv).__name__}(add_self_loops=False) with normalisation is not "
                    f"supported on partitions (the global GCN weights include self-loops); pass "
                    f"normalize=False and your own edge weights instead."
                )
        if normalization == "gcn" and isinstance(conv, _GCN_NORMALIZED):
            # The layer would normalise with partition-local degrees: wrong for halo rows.
            conv.normalize = False
        self.normalization: str = normalization
        if adjacency == "sparse_tensor":
            require_torch_sparse("PartitionAware(adjacency='sparse_tensor')")
        if adjacency == "auto":
            adjacency = "adj_t" if getattr(conv, "fuse", False) else "edge_index"
        self.adjacency: str = adjacency
        self.bipartite = _accepts_pair(conv) if bipartite is None else bipartite
        self.aggregation: str = _aggregation_kind(conv, normalization)
        self.split = check_type("PartitionAware", "split", split, bool)

    def forward(self, x: Tensor, graph: PartitionedGraph, **kwargs: Any) -> Tensor:
        plan = graph.plan
        if x.size(0) != plan.num_inner:
            raise ValueError(
                f"PartitionAware({self.name}): expected one row per inner node ({plan.num_inner}) "
                f"but got {x.size(0)} rows."
            )
        n = plan.num_inner
        layer = (
            split_layer(self.conv, self.adjacency, self.normalization, kwargs)
            if self.split
            else None
        )
        if layer is not None:
            return self._split(x, graph, layer, kwargs)
        if graph.overlaps and self.adjacency != "sparse_tensor":
            return self._overlapped(x, graph, kwargs)
        x_local = graph.exchange(x, layer=self.name, aggregation=self.aggregation)
        return self._compute(x_local, plan, n, dict(kwargs), None)

    def _split(
        self, x: Tensor, graph: PartitionedGraph, layer: SplitLayer, kwargs: dict[str, Any]
    ) -> Tensor:
        """The split path: inner-row half, (wait for) the halo rows, halo half."""
        transfer = graph.start_halo(x, layer=self.name, aggregation=self.aggregation)
        state = layer.inner(transfer.inner, graph.plan, kwargs)
        return layer.outer(state, transfer.halo(), graph.plan, kwargs)

    def _overlapped(self, x: Tensor, graph: PartitionedGraph, kwargs: dict[str, Any]) -> Tensor:
        """AdaQP's overlap for layers without a split path: central rows while the exchange
        is in flight, then marginal rows.

        Both passes run the layer on full-shaped inputs with the adjacency restricted to
        the rows they produce, so every output row is computed by exactly the arithmetic
        of the synchronous pass (the central pass sees zeros where halo rows will be; no
        central row reads them). The price is running the layer's dense part twice. The
        halo gradients are sent while the central pass's backward runs.
        """
        plan = graph.plan
        n = plan.num_inner
        transfer = graph.start_halo(x, layer=self.name, aggregation=self.aggregation)
        x = transfer.inner
        x_pad = torch.cat([x, x.new_zeros((plan.num_halo,) + tuple(x.shape[1:]))])
        central = self._compute(x_pad, plan, n, dict(kwargs), "central")
        x_local = transfer.local()
        marginal = self._compute(x_local, plan, n, dict(kwargs), "marginal")
        mask = plan.marginal_mask.view((-1,) + (1,) * (central.dim() - 1))
        return torch.where(mask, marginal, central)

    def _compute(
        self, x_local: Tensor, plan: PartitionPlan, n: int, kwargs: dict[str, Any], rows: str | None
    ) -> Tensor:
        adj: Any
        dtype = x_local.dtype
        if self.adjacency == "sparse_tensor":
            adj = plan.sparse_tensor(gcn=self.normalization == "gcn", dtype=dtype)
        elif self.normalization == "gcn":
            if self.adjacency == "adj_t":
                adj = plan.gcn_adj_t(dtype, rows)
            else:
                adj, weight = plan.gcn_edge_index(dtype, rows)
                kwargs["edge_weight"] = weight
        else:
            adj = (
                plan.adj_t(dtype, rows)
                if self.adjacency == "adj_t"
                else plan.local_edge_index(rows)
            )
        if self.adjacency == "adj_t":
            # PyG would transpose (and sort) the adjacency in every backward pass.
            with spmm_with_cached_transpose(adj, plan.transposed(adj)):
                out = self._call(x_local, adj, n, kwargs)
        else:
            out = self._call(x_local, adj, n, kwargs)
        if isinstance(out, tuple):  # e.g. attention weights requested
            out = out[0]
        return out[:n]

    def _call(self, x_local: Tensor, adj: Tensor, n: int, kwargs: dict[str, Any]) -> Any:
        if self.bipartite:
            return self.conv((x_local, x_local[:n]), edge_index=adj, **kwargs)
        return self.conv(x_local, edge_index=adj, **kwargs)

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, adjacency={self.adjacency!r}, "
            f"normalization={self.normalization!r}, bipartite={self.bipartite}, split={self.split}"
        )


def _aggregation_kind(conv: MessagePassing, normalization: str) -> str:
    """How the layer weighs a neighbour's row: ``"gcn"``, ``"mean"`` or ``"sum"``.

    Attention layers average their neighbours with softmax weights (``1/deg`` on
    average), so they count as ``"mean"``; max/min aggregations pick one neighbour per
    feature, also weighted at most 1, and are reported as ``"sum"``.
    """
    if normalization == "gcn":
        return "gcn"
    if isinstance(conv, GATConv | GATv2Conv | TransformerConv):
        return "mean"
    aggr = getattr(conv, "aggr", "add")
    return "mean" if aggr == "mean" else "sum"


def _accepts_pair(conv: MessagePassing) -> bool:
    """Whether the layer's ``x`` argument is typed to accept a ``(source, target)`` pair."""
    try:
        annotation = inspect.signature(type(conv).forward).parameters["x"].annotation
    except (KeyError, ValueError, TypeError):
        return False

    def has_tuple(tp: Any) -> bool:
        if typing.get_origin(tp) is tuple or tp is tuple:
            return True
        return any(has_tuple(arg) for arg in typing.get_args(tp))

    return has_tuple(annotation)
