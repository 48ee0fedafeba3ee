"""PyG layers computed in two halves around the halo exchange (the split path of :class:`PartitionAware`).

A layer on partition ``p`` sees its inner rows :math:`\\mathbf{X}_{\\text{in}}` at once and
its halo rows :math:`\\mathbf{X}_{\\text{halo}}` only after the exchange. With the
adjacency split by source columns (:meth:`PartitionPlan.split_adj_t`),

.. math::
    \\mathbf{A}\\,\\phi(\\mathbf{X}) = \\mathbf{A}_{\\text{in}}\\,\\phi(\\mathbf{X}_{\\text{in}})
    + \\mathbf{A}_{\\text{halo}}\\,\\phi(\\mathbf{X}_{\\text{halo}})

for a row-wise transform :math:`\\phi` (a linear map, or the identity), so a layer can
transform every inner row and aggregate everything the inner rows contribute
(:meth:`SplitLayer.inner`) before the halo rows are there, and finish with the halo rows
alone (:meth:`SplitLayer.outer`): every row goes through :math:`\\phi` exactly once, every
output row through the layer's per-row dense part exactly once. Attention (``GATConv``)
normalises over all in-edges of a node, so its edges are split by destination instead:
central nodes (no halo in-neighbour) in the first half, marginal nodes in the second.

The same two calls run in every mode — synchronous, overlapped, one process — so the
forward arithmetic of the overlapped exchange equals the synchronous one by
construction; only the moment the halo rows are waited for differs. Per layer type:

* ``GCNConv``, :class:`~lightgraph.nn.conv.GCNPropagation`:
  :math:`\\mathbf{A}_{\\text{in}}\\mathbf{X}_{\\text{in}}\\mathbf{W} +
  \\mathbf{A}_{\\text{halo}}\\mathbf{X}_{\\text{halo}}\\mathbf{W} + \\mathbf{b}` (GCN
  weights from global degrees, ``improved=True`` included, or unweighted with
  ``normalization="none"``).
* ``SAGEConv`` (``aggr`` mean or sum): the neighbour sum in two halves, then
  :math:`\\mathbf{W}_l\\,\\operatorname{aggr} + \\mathbf{W}_r\\mathbf{x}_v` once per row
  (the root term in the first half).
* ``GCN2Conv``: the propagation in two halves, then its mix with
  :math:`\\mathbf{X}^{(0)}` once per row.
* ``GATConv``: :math:`\\mathbf{W}\\mathbf{x}` and the logits
  :math:`\\alpha_{\\text{src}}, \\alpha_{\\text{dst}}` once per row, the edge softmax of
  central nodes in the first half, of marginal nodes in the second.

:func:`split_layer` returns ``None`` for any other layer or option (edge features,
``cached``, projections, hooks, extra call arguments, a non-default adjacency, ...): the
wrapper then keeps its exact fallback.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv import GATConv, GCN2Conv, GCNConv, SAGEConv
from torch_geometric.utils import scatter, softmax

from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.functional.sparse_matmul import cached_transpose_spmm
from lightgraph.nn.conv.gcn_propagation import GCNPropagation

__all__ = ["SplitLayer", "split_layer"]

_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_propagate_forward_pre_hooks",
    "_propagate_forward_hooks",
    "_message_forward_pre_hooks",
    "_message_forward_hooks",
    "_aggregate_forward_pre_hooks",
    "_aggregate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks",
    "_message_and_aggregate_forward_hooks",
    "_edge_update_forward_pre_hooks",
    "_edge_update_forward_hooks",
)


class SplitLayer(ABC):
    """One PyG layer's output on a partition, in two halves around the halo exchange.

    :meth:`inner` may read only the inner rows; :meth:`outer` finishes with the halo
    rows. ``PartitionAware`` calls both in every mode, in this order, with the exchange
    started before :meth:`inner` and (in overlap mode) waited for just before
    :meth:`outer`.

    Shapes:
        - **x:** inner rows ``[num_inner, F_in]``; **halo:** ``[num_halo, F_in]``
        - **output:** ``[num_inner, F_out]``
    """

    def __init__(self, conv: MessagePassing) -> None:
        self.conv = conv

    @abstractmethod
    def inner(self, x: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]) -> Any:
        """Everything the inner rows alone determine (runs while the halo rows travel)."""

    @abstractmethod
    def outer(
        self, state: Any, halo: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]
    ) -> Tensor:
        """The layer output, from :meth:`inner`'s ``state`` and the halo rows."""


def split_layer(
    conv: MessagePassing, adjacency: str, normalization: str, kwargs: dict[str, Any]
) -> SplitLayer | None:
    """The :class:`SplitLayer` computing ``conv`` exactly, or ``None`` if there is none.

    Args:
        conv: the wrapped PyG layer (as :class:`PartitionAware` configured it).
        adjacency: the wrapper's adjacency (``"adj_t"`` or ``"edge_index"``); the split
            path serves each layer only under the adjacency ``"auto"`` picks for it.
        normalization: ``"gcn"`` or ``"none"``.
        kwargs: the extra arguments of this call.
    """
    if not _plain(conv):
        return None
    gcn = normalization == "gcn"
    if isinstance(conv, GCNPropagation):
        if adjacency == "adj_t" and not kwargs and conv.aggr == "add":
            return _Propagation(conv, gcn, transform=False)
        return None
    if isinstance(conv, GCNConv):
        if adjacency == "adj_t" and not kwargs and conv.aggr == "add" and not conv.cached:
            return _Propagation(conv, gcn, transform=True)
        return None
    if isinstance(conv, SAGEConv):
        if (
            adjacency == "adj_t"
            and not gcn
            and not kwargs
            and isinstance(conv.aggr, str)
            and conv.aggr in ("mean", "sum", "add")
            and not conv.project
            and not conv.normalize
            and conv.root_weight
        ):
            return _Sage(conv)
        return None
    if isinstance(conv, GCN2Conv):
        if (
            adjacency == "adj_t"
            and set(kwargs) == {"x_0"}
            and isinstance(kwargs["x_0"], Tensor)
            and conv.aggr == "add"
            and not conv.cached
        ):
            return _GCN2(conv, gcn)
        return None
    if isinstance(conv, GATConv):
        if (
            adjacency == "edge_index"
            and not gcn
            and not kwargs
            and conv.aggr == "add"
            and conv.lin is not None
            and conv.lin_edge is None
            and conv.edge_dim is None
        ):
            return _GAT(conv)
        return None
    return None


def _plain(conv: MessagePassing) -> bool:
    """No hooks or explanation that the split path would bypass, default message flow."""
    if getattr(conv, "flow", "source_to_target") != "source_to_target":
        return False
    if getattr(conv, "_explain", None) or getattr(conv, "_edge_mask", None) is not None:
        return False
    return not any(getattr(conv, name, None) for name in _HOOKS)


def _aggregate(plan: PartitionPlan, adj: Tensor, h: Tensor) -> Tensor:
    """``adj @ h`` for a CSR view of ``plan`` (its cached transpose serves the backward)."""
    return cached_transpose_spmm(adj, plan.transposed(adj), h)


def _no_halo(halo: Tensor) -> bool:
    """Nothing to aggregate from the halo (an empty halo needs no second product)."""
    return halo.size(0) == 0


class _Propagation(SplitLayer):
    """``GCNConv`` (``transform=True``) and ``GCNPropagation``: weighted sums of transformed rows."""

    def __init__(self, conv: MessagePassing, gcn: bool, transform: bool) -> None:
        super().__init__(conv)
        self.gcn, self.transform = gcn, transform

    def _transform(self, x: Tensor) -> Tensor:
        return self.conv.lin(x) if self.transform else x

    def inner(self, x: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]) -> Tensor:
        h = self._transform(x)
        return _aggregate(plan, plan.split_adj_t(h.dtype, self.gcn, "inner"), h)

    def outer(
        self, state: Tensor, halo: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]
    ) -> Tensor:
        out = state
        if not _no_halo(halo):
            h = self._transform(halo)
            out = out + _aggregate(plan, plan.split_adj_t(h.dtype, self.gcn, "halo"), h)
        bias = getattr(self.conv, "bias", None)
        return out if bias is None else out + bias


class _Sage(SplitLayer):
    """``SAGEConv``: :math:`\\mathbf{W}_l \\operatorname{aggr}_{u} \\mathbf{x}_u + \\mathbf{W}_r \\mathbf{x}_v`."""

    def inner(self, x: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]) -> Any:
        total = _aggregate(plan, plan.split_adj_t(x.dtype, False, "inner"), x)
        return total, self.conv.lin_r(x)

    def outer(
        self, state: Any, halo: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]
    ) -> Tensor:
        total, root = state
        if not _no_halo(halo):
            total = total + _aggregate(plan, plan.split_adj_t(halo.dtype, False, "halo"), halo)
        if self.conv.aggr == "mean":
            total = total * plan.inverse_in_degree(total.dtype)
        return self.conv.lin_l(total) + root


class _GCN2(SplitLayer):
    """``GCN2Conv``: :math:`\\big((1-\\alpha)\\hat{\\mathbf{P}}\\mathbf{X} + \\alpha\\mathbf{X}^{(0)}\\big)
    \\big((1-\\beta)\\mathbf{I} + \\beta\\mathbf{W}\\big)` (two weights when not shared)."""

    def __init__(self, conv: GCN2Conv, gcn: bool) -> None:
        super().__init__(conv)
        self.gcn = gcn

    def inner(self, x: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]) -> Tensor:
        return _aggregate(plan, plan.split_adj_t(x.dtype, self.gcn, "inner"), x)

    def outer(
        self, state: Tensor, halo: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]
    ) -> Tensor:
        conv = self.conv
        x = state
        if not _no_halo(halo):
            x = x + _aggregate(plan, plan.split_adj_t(halo.dtype, self.gcn, "halo"), halo)
        # GCN2Conv.forward from here on (out-of-place, the same operations)
        x = x * (1 - conv.alpha)
        x_0 = conv.alpha * kwargs["x_0"][: x.size(0)]
        if conv.weight2 is None:
            out = x + x_0
            return torch.addmm(out, out, conv.weight1, beta=1.0 - conv.beta, alpha=conv.beta)
        out = torch.addmm(x, x, conv.weight1, beta=1.0 - conv.beta, alpha=conv.beta)
        return out + torch.addmm(x_0, x_0, conv.weight2, beta=1.0 - conv.beta, alpha=conv.beta)


class _GAT(SplitLayer):
    """``GATConv``: transform and logits once per row; edge softmax of central, then marginal nodes."""

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor]:
        conv = self.conv
        h = conv.lin(x).view(-1, conv.heads, conv.out_channels)
        return h, (h * conv.att_src).sum(dim=-1)

    def _attend(
        self, edge_index: Tensor, h_src: Tensor, a_src: Tensor, a_dst: Tensor, n: int
    ) -> Tensor | None:
        """Attention-weighted sum over ``edge_index`` into ``[n, H, C]`` (``None``: no edges)."""
        if edge_index.size(1) == 0:
            return None
        conv = self.conv
        src, dst = edge_index
        alpha = a_src.index_select(0, src) + a_dst.index_select(0, dst)
        alpha = F.leaky_relu(alpha, conv.negative_slope)
        alpha = softmax(alpha, dst, None, n)
        alpha = F.dropout(alpha, p=conv.dropout, training=conv.training)
        msg = alpha.unsqueeze(-1) * h_src.index_select(0, src)
        return scatter(msg, dst, 0, dim_size=n, reduce="sum")

    def inner(self, x: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]) -> Any:
        conv = self.conv
        h, a_src = self._project(x)
        a_dst = (h * conv.att_dst).sum(dim=-1)
        res = conv.res(x) if conv.res is not None else None
        edges = plan.attention_edge_index(conv.add_self_loops, "central")
        central = self._attend(edges, h, a_src, a_dst, x.size(0))
        return h, a_src, a_dst, res, central

    def outer(
        self, state: Any, halo: Tensor, plan: PartitionPlan, kwargs: dict[str, Any]
    ) -> Tensor:
        conv = self.conv
        h, a_src, a_dst, res, out = state
        n = h.size(0)
        if not _no_halo(halo):
            h_halo, a_halo = self._project(halo)
            h, a_src = torch.cat([h, h_halo]), torch.cat([a_src, a_halo])
        edges = plan.attention_edge_index(conv.add_self_loops, "marginal")
        marginal = self._attend(edges, h, a_src, a_dst, n)
        # Central and marginal rows are disjoint: adding a zero row is exact.
        if out is None:
            out = marginal if marginal is not None else h.new_zeros(n, *h.shape[1:])
        elif marginal is not None:
            out = out + marginal
        out = out.view(-1, conv.heads * conv.out_channels) if conv.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        if conv.bias is not None:
            out = out + conv.bias
        return out
