"""Per-rank partition plans for partition-parallel full-graph training."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import MASK_NAMES, ensure_edge_index, validate_graph
from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.utilities.imports import require_torch_sparse


@dataclass
class PartitionPlan:
    """Everything one rank needs to train on its partition of a graph.

    Local node numbering: the ``num_inner`` nodes this rank owns come first (sorted by
    global id), followed by the halo nodes — remote in-neighbours of inner nodes — grouped
    by owner rank (owner 0 first) and sorted by global id inside each group. A halo
    exchange therefore receives exactly ``halo_counts[q]`` rows from every peer ``q`` and
    appends them, in order, after the inner rows.

    Attributes:
        rank: the partition this plan describes.
        num_parts: number of partitions (= world size of the exchange).
        num_nodes_global: nodes in the whole graph.
        num_inner: nodes owned by this rank.
        global_ids: ``[num_inner + num_halo]`` global id of every local node.
        halo_counts: halo nodes received from each rank (``halo_counts[rank] == 0``).
        send_index: local indices of inner nodes to send, concatenated per peer in rank
            order; peer ``q`` receives them in the order of its own halo list.
        send_counts: rows sent to each rank (``send_counts[rank] == 0``).
        edge_index: ``[2, num_local_edges]`` local ids; every edge of the global graph whose
            destination is an inner node, sources inner or halo.
        in_degree: global in-degree of every local node (all edges as given).
        importance: Sylvie's boundary-node importance in ``[0, 1]`` for every local node:
            the percentile rank of its global in-degree among all boundary nodes of the
            graph (nodes some other partition holds as halo); the highest in-degree gets 1,
            equal in-degrees share a value. Both ends of a message see the same value, so
            bit-widths derived from it need no metadata. Nodes that are not boundary nodes
            get 0.
        gcn_degree: global GCN degree of every local node: in-neighbours excluding
            self-loops plus one self-loop, exactly what PyG's ``gcn_norm`` computes on the
            whole graph.
        marginal_mask: ``[num_inner]`` inner nodes with at least one remote in-neighbour
            (they wait for the exchange); the rest are *central*.
        x, y, train_mask, val_mask, test_mask: features, labels and masks of inner nodes.
        global_counts: number of train/val/test nodes in the whole graph.
    """

    rank: int
    num_parts: int
    num_nodes_global: int
    num_inner: int
    global_ids: Tensor
    halo_counts: list[int]
    send_index: Tensor
    send_counts: list[int]
    edge_index: Tensor
    in_degree: Tensor
    importance: Tensor
    gcn_degree: Tensor
    marginal_mask: Tensor
    x: Tensor
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    global_counts: dict[str, int]
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_halo(self) -> int:
        return int(sum(self.halo_counts))

    @property
    def num_local(self) -> int:
        """Inner plus halo nodes."""
        return self.num_inner + self.num_halo

    @property
    def central_mask(self) -> Tensor:
        return ~self.marginal_mask

    @property
    def halo(self) -> HaloPlan:
        """The exchange topology of this plan (what exchangers and bit-width policies use)."""
        return self.cached(
            ("halo",),
            lambda: HaloPlan(
                rank=self.rank,
                num_parts=self.num_parts,
                num_inner=self.num_inner,
                send_index=self.send_index,
                send_counts=list(self.send_counts),
                halo_counts=list(self.halo_counts),
                global_ids=self.global_ids,
                importance=self.importance,
            ),
        )

    def cached(self, key: tuple[Any, ...], build: Any) -> Any:
        """``build()`` once per plan and ``key`` (derived views owned by the plan, keyed by content).

        Moving the plan to another device (:meth:`to`) starts a fresh cache.
        """
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    @property
    def multilabel(self) -> bool:
        return self.y.dim() == 2

    # ------------------------------------------------------------------ adjacency views
    def _row_filter(self, dst: Tensor, rows: str | None) -> Tensor | None:
        """Edge mask keeping edges into ``rows`` (``"central"`` / ``"marginal"`` inner nodes)."""
        if rows is None:
            return None
        if rows not in ("central", "marginal"):
            raise ValueError(
                f"PartitionPlan: expected `rows` in (None, 'central', 'marginal') but got {rows!r}."
            )
        mask = self.marginal_mask if rows == "marginal" else ~self.marginal_mask
        return mask[dst]

    def adj_t(self, dtype: torch.dtype = torch.float32, rows: str | None = None) -> Tensor:
        """Unweighted ``[num_inner, num_local]`` CSR adjacency (row = destination).

        ``rows="central"`` / ``"marginal"`` keeps only the edges into those inner nodes (the
        other rows are empty, the shape is unchanged), for the overlap mode.
        """
        key = ("adj_t", dtype, rows)
        if key not in self._cache:
            src, dst = self.edge_index
            keep = self._row_filter(dst, rows)
            if keep is not None:
                src, dst = src[keep], dst[keep]
            self._cache[key] = _to_csr(dst, src, None, self.num_inner, self.num_local, dtype)
        return self._cache[key]

    def local_edge_index(self, rows: str | None = None) -> Tensor:
        """The local edges, optionally only those into ``"central"`` / ``"marginal"`` nodes."""
        keep = self._row_filter(self.edge_index[1], rows)
        if keep is None:
            return self.edge_index
        key = ("edge_index", rows)
        if key not in self._cache:
            self._cache[key] = self.edge_index[:, keep]
        return self._cache[key]

    def gcn_edge_index(
        self, dtype: torch.dtype = torch.float32, rows: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """Edges with one self-loop per inner node and GCN weights from *global* degrees.

        Mirrors PyG's ``gcn_norm`` (``add_remaining_self_loops`` + symmetric
        normalisation) on the whole graph, restricted to edges into inner nodes (and to
        edges into ``rows`` if given).
        """
        key = ("gcn_edge_index", dtype)
        if key not in self._cache:
            src, dst = self.edge_index
            keep = src != dst
            loop = torch.arange(self.num_inner, device=src.device)
            src = torch.cat([src[keep], loop])
            dst = torch.cat([dst[keep], loop])
            inv_sqrt = self.gcn_degree.to(dtype).pow(-0.5)
            weight = inv_sqrt[src] * inv_sqrt[dst]
            self._cache[key] = torch.stack([src, dst])
            self._cache[("gcn_weight", dtype)] = weight
        edge_index, weight = self._cache[key], self._cache[("gcn_weight", dtype)]
        keep = self._row_filter(edge_index[1], rows)
        if keep is None:
            return edge_index, weight
        return edge_index[:, keep], weight[keep]

    def gcn_adj_t(self, dtype: torch.dtype = torch.float32, rows: str | None = None) -> Tensor:
        """``[num_inner, num_local]`` CSR of the GCN-normalised adjacency with self-loops."""
        key = ("gcn_adj_t", dtype, rows)
        if key not in self._cache:
            (src, dst), weight = self.gcn_edge_index(dtype, rows)
            self._cache[key] = _to_csr(dst, src, weight, self.num_inner, self.num_local, dtype)
        return self._cache[key]

    def split_adj_t(
        self, dtype: torch.dtype = torch.float32, gcn: bool = False, part: str = "inner"
    ) -> Tensor:
        """One column block of the ``[num_inner, num_local]`` adjacency, as CSR.

        ``part="inner"`` gives the ``[num_inner, num_inner]`` block of edges from inner
        sources, ``part="halo"`` the ``[num_inner, num_halo]`` block of edges from halo
        sources (column ``j`` is local node ``num_inner + j``; central rows are empty):

        .. math::
            \\mathbf{A} = \\begin{bmatrix} \\mathbf{A}_{\\text{inner}} &
            \\mathbf{A}_{\\text{halo}} \\end{bmatrix}, \\qquad
            \\mathbf{A}\\mathbf{H} = \\mathbf{A}_{\\text{inner}}\\mathbf{H}_{\\text{inner}}
            + \\mathbf{A}_{\\text{halo}}\\mathbf{H}_{\\text{halo}}

        so a layer can aggregate everything its inner rows contribute while the halo rows
        are in flight. ``gcn=True`` splits :meth:`gcn_adj_t` (GCN weights, self-loops),
        otherwise the unweighted :meth:`adj_t`.
        """
        if part not in ("inner", "halo"):
            raise ValueError(
                f"PartitionPlan.split_adj_t: expected `part` in ('inner', 'halo') but got {part!r}."
            )
        key = ("split_adj_t", dtype, gcn, part)
        if key not in self._cache:
            if gcn:
                (src, dst), weight = self.gcn_edge_index(dtype)
            else:
                (src, dst), weight = self.edge_index, None
            n = self.num_inner
            keep = src < n if part == "inner" else src >= n
            cols = n if part == "inner" else self.num_halo
            offset = 0 if part == "inner" else n
            self._cache[key] = _to_csr(
                dst[keep],
                src[keep] - offset,
                None if weight is None else weight[keep],
                n,
                cols,
                dtype,
            )
        return self._cache[key]

    def inverse_in_degree(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """``[num_inner, 1]`` reciprocal of every inner node's local in-edge count (at least 1).

        The edges counted are the rows of :meth:`adj_t` (duplicates included, no added
        self-loops): what a ``"mean"`` aggregation divides by.
        """
        key = ("inverse_in_degree", dtype)
        if key not in self._cache:
            deg = torch.bincount(self.edge_index[1], minlength=self.num_inner)
            self._cache[key] = 1.0 / deg.clamp(min=1).to(dtype).view(-1, 1)
        return self._cache[key]

    def attention_edge_index(self, self_loops: bool = True, rows: str | None = None) -> Tensor:
        """The local edges as PyG's ``GATConv`` sees them, optionally only those into ``rows``.

        With ``self_loops`` every existing self-loop is removed and one self-loop per inner
        node is appended (``remove_self_loops`` then ``add_self_loops``, in that order, as
        ``GATConv(add_self_loops=True)`` does on the local graph); without, the local edges
        as they are. ``rows="central"`` / ``"marginal"`` keeps the edges into those nodes.
        """
        key = ("attention_edge_index", self_loops, rows)
        if key not in self._cache:
            edge_index = self.edge_index
            if self_loops:
                src, dst = edge_index
                loop = torch.arange(self.num_inner, device=src.device)
                keep = src != dst
                edge_index = torch.stack(
                    [torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])]
                )
            keep = self._row_filter(edge_index[1], rows)
            self._cache[key] = edge_index if keep is None else edge_index[:, keep]
        return self._cache[key]

    def sparse_tensor(self, gcn: bool = False, dtype: torch.dtype = torch.float32) -> Any:
        """The ``[num_inner, num_local]`` adjacency as a ``torch_sparse.SparseTensor``.

        Needs the optional ``torch-sparse`` package; ``gcn=True`` gives the GCN-normalised
        matrix with self-loops, otherwise the unweighted one.
        """
        require_torch_sparse("PartitionPlan.sparse_tensor")
        from torch_sparse import SparseTensor

        key = ("sparse_tensor", gcn, dtype)
        if key not in self._cache:
            if gcn:
                (src, dst), value = self.gcn_edge_index(dtype)
            else:
                (src, dst), value = self.edge_index, None
            self._cache[key] = SparseTensor(
                row=dst, col=src, value=value, sparse_sizes=(self.num_inner, self.num_local)
            )
        return self._cache[key]

    def transposed(self, adj: Tensor) -> Tensor:
        """The cached CSR transpose of one of this plan's CSR views (for backward passes).

        ``adj`` must be a view this plan returned (:meth:`adj_t`, :meth:`gcn_adj_t`); the
        transpose is cached under that view's key.
        """
        for key, value in list(self._cache.items()):
            if value is adj:
                return self.cached(("transposed",) + key, lambda: adj.t().to_sparse_csr())
        raise ValueError(
            "PartitionPlan.transposed: expected `adj` to be a CSR view of this plan (adj_t, "
            "gcn_adj_t) but got a tensor the plan did not build."
        )

    # ------------------------------------------------------------------ (de)serialisation
    def to(self, device: torch.device | str, *args: Any, **kwargs: Any) -> PartitionPlan:
        """Move every tensor to ``device`` (Lightning calls this in ``batch_to_device``)."""
        if self.x.device == torch.device(device):
            return self  # keeps the cached adjacency views
        moved = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "_cache":
                moved[f.name] = {}
            elif isinstance(value, Tensor):
                moved[f.name] = value.to(device)
            else:
                moved[f.name] = value
        return PartitionPlan(**moved)

    def state_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_cache"}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PartitionPlan:
        return cls(**state)

    def save(self, path: str | os.PathLike) -> None:
        torch.save(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> PartitionPlan:
        return cls.from_state_dict(torch.load(path, weights_only=True))

    @classmethod
    def from_data(cls, data: Data) -> PartitionPlan:
        """The single-partition plan of a whole graph (no halo, nothing exchanged)."""
        return build_partition_plans(data, torch.zeros(data.x.size(0), dtype=torch.long), 1)[0]


def _to_csr(
    row: Tensor, col: Tensor, value: Tensor | None, num_rows: int, num_cols: int, dtype: torch.dtype
) -> Tensor:
    perm = torch.argsort(row * num_cols + col)
    row, col = row[perm], col[perm]
    value = (
        torch.ones(row.numel(), dtype=dtype, device=row.device)
        if value is None
        else value[perm].to(dtype)
    )
    crow = torch.zeros(num_rows + 1, dtype=torch.long, device=row.device)
    torch.cumsum(torch.bincount(row, minlength=num_rows), 0, out=crow[1:])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
        return torch.sparse_csr_tensor(
            crow, col, value, size=(num_rows, num_cols), check_invariants=False
        )


def build_partition_plans(data: Data, partition: Tensor, num_parts: int) -> list[PartitionPlan]:
    """Build the :class:`PartitionPlan` of every partition of ``data``.

    Args:
        data: a graph in the :class:`~lightgraph.data.GraphDataset` layout.
        partition: ``[num_nodes]`` owner rank of every node, values in ``[0, num_parts)``.
        num_parts: number of partitions; each must own at least one node.

    Returns:
        One plan per partition, ``plans[r].rank == r``.
    """
    from lightgraph.utilities.checks import check_int, check_type

    owner = "build_partition_plans"
    check_type(owner, "data", data, Data, "a torch_geometric Data in the GraphDataset layout")
    check_int(owner, "num_parts", num_parts, low=1)
    try:
        data = ensure_edge_index(data)
        validate_graph(data)
    except ValueError as err:  # the graph checks do not know the entry point
        msg = str(err)
        raise ValueError(f"{owner}: invalid `data`: {msg[:1].lower()}{msg[1:]}") from err
    num_nodes = data.x.size(0)
    if num_parts > num_nodes:
        raise ValueError(
            f"build_partition_plans: expected `num_parts` <= num_nodes ({num_nodes}) but got {num_parts}."
        )
    partition = torch.as_tensor(partition)
    if partition.shape != (num_nodes,) or partition.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"build_partition_plans: expected `partition` to be an integer tensor of shape "
            f"[{num_nodes}] but got shape {tuple(partition.shape)} and dtype {partition.dtype}."
        )
    partition = partition.long()
    if partition.numel() and (int(partition.min()) < 0 or int(partition.max()) >= num_parts):
        raise ValueError(
            f"build_partition_plans: expected `partition` values in [0, {num_parts - 1}] but "
            f"found values in [{int(partition.min())}, {int(partition.max())}]."
        )
    sizes = torch.bincount(partition, minlength=num_parts)
    if bool((sizes == 0).any()):
        empty = torch.nonzero(sizes == 0).flatten().tolist()
        raise ValueError(
            f"build_partition_plans: every partition must own at least one node, but partitions "
            f"{empty} are empty."
        )

    src, dst = data.edge_index
    in_degree = torch.bincount(dst, minlength=num_nodes)
    gcn_degree = torch.bincount(dst[src != dst], minlength=num_nodes) + 1

    # Position of every node inside its own partition (inner nodes sorted by global id).
    node_order = torch.argsort(partition * num_nodes + torch.arange(num_nodes), stable=True)
    part_start = torch.zeros(num_parts + 1, dtype=torch.long)
    torch.cumsum(sizes, 0, out=part_start[1:])
    inner_pos = torch.empty(num_nodes, dtype=torch.long)
    inner_pos[node_order] = torch.arange(num_nodes) - part_start[partition[node_order]]

    # Edges grouped by the partition of their destination.
    edge_order = torch.argsort(partition[dst], stable=True)
    edge_start = torch.zeros(num_parts + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(partition[dst], minlength=num_parts), 0, out=edge_start[1:])

    counts = {name: int(getattr(data, name).sum()) for name in MASK_NAMES}
    halos: list[Tensor] = []
    partial: list[dict[str, Any]] = []
    for r in range(num_parts):
        inner = node_order[part_start[r] : part_start[r + 1]]
        eids = edge_order[edge_start[r] : edge_start[r + 1]]
        s, d = src[eids], dst[eids]
        remote = partition[s] != r
        halo_key = torch.unique(
            partition[s[remote]] * num_nodes + s[remote]
        )  # sorted by (owner, id)
        halo = halo_key % num_nodes
        halos.append(halo)
        local_src = inner_pos[s].clone()
        local_src[remote] = inner.numel() + torch.searchsorted(
            halo_key, partition[s[remote]] * num_nodes + s[remote]
        )
        marginal = torch.zeros(inner.numel(), dtype=torch.bool)
        marginal[inner_pos[d[remote]]] = True
        local_ids = torch.cat([inner, halo])
        partial.append(
            dict(
                rank=r,
                num_parts=num_parts,
                num_nodes_global=num_nodes,
                num_inner=inner.numel(),
                global_ids=local_ids,
                halo_counts=torch.bincount(partition[halo], minlength=num_parts).tolist(),
                edge_index=torch.stack([local_src, inner_pos[d]]),
                in_degree=in_degree[local_ids],
                gcn_degree=gcn_degree[local_ids],
                marginal_mask=marginal,
                x=data.x[inner],
                y=data.y[inner],
                train_mask=data.train_mask[inner],
                val_mask=data.val_mask[inner],
                test_mask=data.test_mask[inner],
                global_counts=counts,
            )
        )

    importance = boundary_importance(in_degree, torch.cat(halos))
    plans = []
    for r in range(num_parts):
        partial[r]["importance"] = importance[partial[r]["global_ids"]]
        send_index, send_counts = [], []
        for q in range(num_parts):
            wanted = halos[q][partition[halos[q]] == r] if q != r else halos[q][:0]
            send_index.append(inner_pos[wanted])
            send_counts.append(wanted.numel())
        plans.append(
            PartitionPlan(send_index=torch.cat(send_index), send_counts=send_counts, **partial[r])
        )
    return plans


def boundary_importance(in_degree: Tensor, boundary_nodes: Tensor) -> Tensor:
    """Sylvie's importance factor of boundary nodes (§IV-A), zero elsewhere.

    .. math::
        p_v = \\frac{\\underline{r}_v + \\overline{r}_v}{2 (|B| - 1)}, \\quad
        \\underline{r}_v = |\\{u \\in B : d_u < d_v\\}|, \\quad
        \\overline{r}_v = |\\{u \\in B : d_u \\le d_v\\}| - 1, \\qquad v \\in B,

    for the set :math:`B` of boundary nodes and global in-degrees :math:`d`: the
    *mid-rank* of :math:`d_v` (the mean of the lowest and the highest 0-based rank its tie
    occupies in the sorted pool) scaled to :math:`[0, 1]`, except that the nodes with the
    largest in-degree get :math:`p = 1` ("boundary nodes with the maximum in-degree values
    are assigned to p = 1"). Equal in-degrees share a value; without ties this is
    :math:`\\mathrm{rank} / (|B| - 1)`. Sylvie matches the sorted in-degrees "with evenly
    distributed percentiles" and does not say where a tie goes; the mid-rank keeps the
    share of nodes in every importance band of
    :class:`~lightgraph.quant.DegreeAwareBits` close to the band's width, where the
    highest rank of the tie would lift a long run of equal low degrees (common on
    power-law graphs) into a wider band. A pool of one node, or of equal degrees, is all
    "largest": 1.

    Args:
        in_degree: ``[num_nodes]`` global in-degrees.
        boundary_nodes: global ids of boundary nodes (duplicates allowed).
    """
    pool = torch.unique(boundary_nodes)
    importance = torch.zeros(in_degree.numel(), dtype=torch.float32)
    if pool.numel() == 0:
        return importance
    deg = in_degree[pool]
    sorted_deg = torch.sort(deg).values
    lowest = torch.searchsorted(sorted_deg, deg, right=False)  # nodes with a smaller degree
    highest = torch.searchsorted(sorted_deg, deg, right=True) - 1
    p = (lowest + highest).double() / (2 * max(pool.numel() - 1, 1))
    p[deg == sorted_deg[-1]] = 1.0
    importance[pool] = p.float()
    return importance
