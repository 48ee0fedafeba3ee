"""Affinity microbatches of UniTG's flow parallelism (§5.3.2).

The nodes are reordered so that graph clusters are contiguous (METIS), and the reordered
node range is cut into ``M`` contiguous *microbatches* — the METIS parts — that a GNN
pipeline processes one after the other. Edges between microbatches are dropped: that is
flow parallelism's trade-off, and METIS keeps the number of cut edges small.

UniTG is ch. 5 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); section numbers and "the thesis" refer to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal, get_args

import torch
from torch import Tensor

from lightgraph.data.partition.partitioner import metis_partition
from lightgraph.utilities.checks import (
    check_choice,
    check_graph_edge_index,
    check_int,
)

__all__ = [
    "AFFINITY_REORDERS",
    "AffinityMicrobatches",
    "affinity_microbatches",
    "default_num_microbatches",
]

AffinityReorder = Literal["metis", "random", "none"]
AFFINITY_REORDERS: tuple[str, ...] = get_args(AffinityReorder)

#: Target size of the sub-clusters that order the nodes inside a METIS microbatch.
CLUSTER_SIZE = 64
_RANDOM_SALT = 0xAFF1_0DE5


def default_num_microbatches(num_nodes: int, num_stages: int) -> int:
    """UniTG's number of microbatches ``M`` for a graph of ``num_nodes`` nodes and a
    pipeline of ``num_stages`` stages.

    The rule of thesis §5.3.4 (Auto Scheduler): ``16`` microbatches below ``10^4`` nodes,
    ``8`` below ``5 * 10^4``, ``4`` from ``5 * 10^4`` on; and never more microbatches than
    stages (``M <= P``, more microbatches cut more edges and cost accuracy) nor than nodes.

    Example:
        >>> default_num_microbatches(2_708, 4), default_num_microbatches(169_343, 8)
        (4, 4)
    """
    owner = "default_num_microbatches"
    check_int(owner, "num_nodes", num_nodes)
    check_int(owner, "num_stages", num_stages)
    if num_nodes < 10_000:
        rule = 16
    elif num_nodes < 50_000:
        rule = 8
    else:
        rule = 4
    return min(rule, num_stages, num_nodes)


@dataclass(frozen=True, eq=False)
class AffinityMicrobatches:
    """A graph's nodes reordered and cut into ``M`` contiguous microbatches.

    Positions refer to the new node order: microbatch ``m`` holds the positions
    ``bounds[m]:bounds[m + 1]``, i.e. the original nodes ``order[bounds[m]:bounds[m + 1]]``.
    A node's *local* id is its position minus ``bounds[m]``. For a pipeline every
    microbatch is padded to ``n_max`` rows (:meth:`pad`): padding rows are isolated (no
    edge touches them) and come after the microbatch's real rows.

    Attributes:
        order: ``[N]`` original id of the node at every new position.
        position: ``[N]`` new position of every original node (the inverse of ``order``).
        bounds: ``[M + 1]`` microbatch boundaries in the new order (``bounds[0] = 0``,
            ``bounds[M] = N``).
        edge_indices: per microbatch, the ``[2, E_m]`` local edge list of the original
            edges with both ends in the microbatch (in their original order, duplicates
            and self-loops kept).
        num_cut_edges: original edges whose ends lie in different microbatches (dropped).
    """

    order: Tensor
    position: Tensor
    bounds: Tensor
    edge_indices: tuple[Tensor, ...]
    num_cut_edges: int

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_order(
        cls, edge_index: Tensor, order: Tensor, bounds: Tensor | list[int]
    ) -> AffinityMicrobatches:
        """The microbatches given a node ``order`` and the microbatch ``bounds``.

        Every rank of a pipeline rebuilds the same microbatches from the order and bounds
        one rank computed (METIS need not be reproducible across machines).

        Args:
            edge_index: ``[2, E]`` edges in original node ids.
            order: ``[N]`` permutation, the original id at every new position.
            bounds: ``M + 1`` increasing boundaries from ``0`` to ``N`` (non-empty
                microbatches).
        """
        owner = "AffinityMicrobatches.from_order"
        order = torch.as_tensor(order).long().cpu()
        num_nodes = order.numel()
        edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes).cpu()
        if order.dim() != 1 or not torch.equal(torch.sort(order).values, torch.arange(num_nodes)):
            raise ValueError(f"{owner}: expected `order` to be a permutation of [0, {num_nodes}).")
        bounds = torch.as_tensor(bounds, dtype=torch.long).cpu()
        if (
            bounds.dim() != 1
            or bounds.numel() < 2
            or int(bounds[0]) != 0
            or int(bounds[-1]) != num_nodes
            or bool((bounds[1:] <= bounds[:-1]).any())
        ):
            raise ValueError(
                f"{owner}: expected `bounds` to increase strictly from 0 to num_nodes "
                f"({num_nodes}) but got {bounds.tolist()}."
            )
        position = torch.empty_like(order)
        position[order] = torch.arange(num_nodes)
        num_microbatches = bounds.numel() - 1
        sizes = bounds[1:] - bounds[:-1]
        part = torch.repeat_interleave(torch.arange(num_microbatches), sizes)  # by position
        src, dst = position[edge_index[0]], position[edge_index[1]]
        src_part, dst_part = part[src], part[dst]
        intra = src_part == dst_part
        edge_indices = []
        for m in range(num_microbatches):
            keep = intra & (src_part == m)
            start = bounds[m]
            edge_indices.append(torch.stack([src[keep] - start, dst[keep] - start]))
        return cls(
            order=order,
            position=position,
            bounds=bounds,
            edge_indices=tuple(edge_indices),
            num_cut_edges=int((~intra).sum()),
        )

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        return self.order.numel()

    @property
    def num_microbatches(self) -> int:
        return self.bounds.numel() - 1

    @property
    def sizes(self) -> list[int]:
        """Number of real nodes of every microbatch."""
        return (self.bounds[1:] - self.bounds[:-1]).tolist()

    @property
    def n_max(self) -> int:
        """Rows of every padded microbatch (the largest microbatch)."""
        return max(self.sizes)

    @property
    def num_kept_edges(self) -> int:
        return sum(int(e.size(1)) for e in self.edge_indices)

    def microbatch_of(self) -> Tensor:
        """``[N]`` microbatch of every original node."""
        part = torch.repeat_interleave(
            torch.arange(self.num_microbatches), torch.tensor(self.sizes)
        )
        return part[self.position]

    def padded_index(self) -> Tensor:
        """``[N]`` row of every original node in the padded layout ``[M * n_max, ...]``."""
        return self._padded_index.clone()

    @cached_property
    def _padded_index(self) -> Tensor:
        part = torch.repeat_interleave(
            torch.arange(self.num_microbatches), torch.tensor(self.sizes)
        )
        local = torch.arange(self.num_nodes) - self.bounds[part]
        row = part * self.n_max + local  # by position
        return row[self.position]

    def edge_indices_to(self, device: torch.device | str) -> list[Tensor]:
        """The local edge lists on ``device``."""
        return [e.to(device) for e in self.edge_indices]

    # ------------------------------------------------------------------ gather / scatter
    def pad(self, x: Tensor, fill: float | int = 0) -> Tensor:
        """Gather ``x`` ``[N, ...]`` (original node order) into the padded microbatch layout
        ``[M * n_max, ...]``: microbatch ``m`` occupies rows ``m * n_max`` to
        ``(m + 1) * n_max``, its nodes in the new order, padding rows set to ``fill``.
        Differentiable with respect to ``x``."""
        if not isinstance(x, Tensor) or x.dim() < 1 or x.size(0) != self.num_nodes:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"AffinityMicrobatches.pad: expected `x` with one row per node "
                f"({self.num_nodes}) but got {shape}."
            )
        index = self._padded_index.to(x.device)
        out = x.new_full((self.num_microbatches * self.n_max, *x.shape[1:]), fill)
        return out.index_copy(0, index, x)

    def unpad(self, x: Tensor) -> Tensor:
        """Inverse of :meth:`pad`: the real rows of ``x`` ``[M * n_max, ...]`` back in original
        node order ``[N, ...]``. Differentiable with respect to ``x``."""
        rows = self.num_microbatches * self.n_max
        if not isinstance(x, Tensor) or x.dim() < 1 or x.size(0) != rows:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"AffinityMicrobatches.unpad: expected `x` with M * n_max = {rows} rows but got "
                f"{shape}."
            )
        return x.index_select(0, self._padded_index.to(x.device))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.num_nodes}, "
            f"num_microbatches={self.num_microbatches}, n_max={self.n_max}, "
            f"kept_edges={self.num_kept_edges}, cut_edges={self.num_cut_edges})"
        )


def affinity_microbatches(
    edge_index: Tensor,
    num_nodes: int,
    num_microbatches: int,
    reorder: str = "metis",
    seed: int = 0,
) -> AffinityMicrobatches:
    """Reorder the nodes and cut them into ``num_microbatches`` contiguous microbatches.

    * ``"metis"``: METIS (``pymetis``) partitions the graph into ``M`` balanced parts with a
      small edge cut, the microbatches. Inside a part the nodes are ordered by a finer METIS
      clustering of the part's subgraph (sub-clusters of about :data:`CLUSTER_SIZE` nodes,
      then by original id), so clusters are contiguous in memory — the affinity-aware
      reordering of thesis §5.3.2.
    * ``"random"``: a random permutation cut into ``M`` equal chunks (the ablation baseline:
      random node ids, many cut edges).
    * ``"none"``: the original order cut into ``M`` equal chunks.

    Equal chunks differ by at most one node (the first ``N % M`` hold one more).

    Args:
        edge_index: ``[2, E]`` connectivity in original node ids (directed; METIS sees it
            symmetrised).
        num_nodes: number of nodes ``N``.
        num_microbatches: ``M``, in ``[1, N]``.
        reorder: ``"metis"``, ``"random"`` or ``"none"``.
        seed: seed of METIS and of the random permutation.

    Returns:
        The :class:`AffinityMicrobatches`.

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
    """
    owner = "affinity_microbatches"
    check_choice(owner, "reorder", reorder, AFFINITY_REORDERS)
    num_nodes = check_int(owner, "num_nodes", num_nodes)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes).cpu()
    if (
        not isinstance(num_microbatches, int)
        or isinstance(num_microbatches, bool)
        or not (1 <= num_microbatches <= num_nodes)
    ):
        raise ValueError(
            f"{owner}: expected `num_microbatches` to be an integer in [1, {num_nodes}] (every "
            f"microbatch needs a node; num_nodes = {num_nodes}) but got {num_microbatches!r}."
        )
    check_int(owner, "seed", seed, low=0)
    m = num_microbatches
    if reorder == "metis" and m > 1:
        part = metis_partition(edge_index, num_nodes, m, seed)
        order_parts, sizes = [], []
        for p in range(m):
            nodes = torch.nonzero(part == p).flatten()  # sorted original ids
            order_parts.append(_cluster_order(edge_index, part, p, nodes, seed))
            sizes.append(nodes.numel())
        order = torch.cat(order_parts)
    else:
        if reorder == "random":
            gen = torch.Generator().manual_seed(seed + _RANDOM_SALT)
            order = torch.randperm(num_nodes, generator=gen)
        elif reorder == "metis":  # one microbatch: order the whole graph by clusters
            nodes = torch.arange(num_nodes)
            order = _cluster_order(
                edge_index, torch.zeros(num_nodes, dtype=torch.long), 0, nodes, seed
            )
        else:
            order = torch.arange(num_nodes)
        base, extra = divmod(num_nodes, m)
        sizes = [base + (i < extra) for i in range(m)]
    bounds = torch.zeros(m + 1, dtype=torch.long)
    torch.cumsum(torch.tensor(sizes, dtype=torch.long), 0, out=bounds[1:])
    return AffinityMicrobatches.from_order(edge_index, order, bounds)


def _cluster_order(edge_index: Tensor, part: Tensor, p: int, nodes: Tensor, seed: int) -> Tensor:
    """``nodes`` (part ``p``) sorted by a METIS clustering of their induced subgraph."""
    count = nodes.numel()
    clusters = count // CLUSTER_SIZE
    if clusters < 2:
        return nodes
    src, dst = edge_index
    inside = (part[src] == p) & (part[dst] == p) & (src != dst)
    if not bool(inside.any()):
        return nodes
    local = torch.full((part.numel(),), -1, dtype=torch.long)
    local[nodes] = torch.arange(count)
    sub = torch.stack([local[src[inside]], local[dst[inside]]])
    cluster = metis_partition(sub, count, clusters, seed)
    return nodes[torch.argsort(cluster * count + torch.arange(count))]
