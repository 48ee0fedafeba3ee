"""The attention pattern of one token sequence, and its query-sorted (CSR) view."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from lightgraph.functional.attention.cluster_sparse import ClusterSparseLayout
from lightgraph.functional.attention.conditions import check_conditions
from lightgraph.utilities.checks import check_graph_edge_index, describe

if TYPE_CHECKING:
    from lightgraph.functional.attention.sparse import _SparseStructure

__all__ = ["AttentionGraph", "SortedPattern", "sort_by_query"]


class SortedPattern(NamedTuple):
    """A pattern sorted by query, then key (CSR order).

    Attributes:
        edge_index: ``[2, E]`` the sorted pattern.
        edge_bucket: ``[E]`` the sorted buckets (``None`` without buckets).
        perm: ``[E]`` the sort: ``sorted = original[..., perm]``.
        ptr: ``[S + 1]`` CSR pointer: the entries of query ``i`` are ``ptr[i]:ptr[i + 1]``.
    """

    edge_index: Tensor
    edge_bucket: Tensor | None
    perm: Tensor
    ptr: Tensor


@dataclass(eq=False)
class AttentionGraph:
    """The attention pattern of one token sequence (tokens ``0 .. num_tokens - 1``).

    Entry ``e`` lets query ``edge_index[1, e]`` attend to key ``edge_index[0, e]``. The
    pattern must hold the self-loops (condition C1) and, if the model has global tokens,
    their edges. Derived data (sorted views, kernel structures, layouts, conditions) is
    cached in ``cache``: treat the graph as immutable once used, or clear ``cache``.

    Args:
        num_tokens: sequence length ``S``.
        edge_index: ``[2, E]`` long, row 0 key (source), row 1 query (target).
        edge_bucket: ``[E]`` long row of the per-head bias table for every entry (e.g. a
            shortest-path-distance bucket); ``None`` for no bias on sparse kinds.
        dense_bucket: ``[S, S]`` long bucket of every (query, key) pair, for the dense kinds
            on small sequences; ``None`` for no bias on dense kinds.
        far_bucket: bucket of the pairs a cluster-sparse transfer adds.
        num_layers: model depth ``L`` (condition C3).
        cache: derived data, filled lazily.
    """

    num_tokens: int
    edge_index: Tensor
    edge_bucket: Tensor | None = None
    dense_bucket: Tensor | None = None
    far_bucket: int = 0
    num_layers: int = 1
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    def validate(self) -> AttentionGraph:
        """Check shapes, dtypes, devices and id ranges; returns ``self``. Cached once it passes."""
        if self.cache.get("validated"):
            return self
        owner = "AttentionGraph"
        S = self.num_tokens
        if not isinstance(S, int) or S < 1:
            raise ValueError(f"{owner}: expected `num_tokens` >= 1 but got {S!r}.")
        check_graph_edge_index(
            owner, "edge_index", self.edge_index, S, unit="token", require_long=True
        )
        E, device = self.edge_index.shape[1], self.edge_index.device
        if self.edge_bucket is not None:
            b = self.edge_bucket
            if not isinstance(b, Tensor) or b.shape != (E,) or b.dtype != torch.long:
                raise ValueError(
                    f"{owner}: expected `edge_bucket` of shape [E={E}] and dtype torch.long but got "
                    f"{describe(b)}."
                )
        if self.dense_bucket is not None:
            b = self.dense_bucket
            if not isinstance(b, Tensor) or b.shape != (S, S) or b.dtype != torch.long:
                raise ValueError(
                    f"{owner}: expected `dense_bucket` of shape [S, S] = [{S}, {S}] and dtype "
                    f"torch.long but got {describe(b)}."
                )
        for name in ("edge_bucket", "dense_bucket"):
            b = getattr(self, name)
            if b is not None and b.numel():
                if b.device != device:
                    raise ValueError(
                        f"{owner}: expected `{name}` on the device of `edge_index` ({device}) but "
                        f"got {b.device}."
                    )
                if int(b.min()) < 0:
                    raise ValueError(f"{owner}: expected `{name}` >= 0 but found {int(b.min())}.")
                self.cache[("max_bucket", name)] = int(b.max())
        if not isinstance(self.far_bucket, int) or self.far_bucket < 0:
            raise ValueError(f"{owner}: expected `far_bucket` >= 0 but got {self.far_bucket!r}.")
        if not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise ValueError(f"{owner}: expected `num_layers` >= 1 but got {self.num_layers!r}.")
        self.cache["validated"] = True
        return self

    @property
    def device(self) -> torch.device:
        """The device of the pattern."""
        return self.edge_index.device

    def to(self, device: torch.device | str) -> AttentionGraph:
        """A copy on ``device`` (the condition results carry over; other cached data is rebuilt)."""

        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        out = AttentionGraph(
            self.num_tokens,
            self.edge_index.to(device),
            move(self.edge_bucket),
            move(self.dense_bucket),
            self.far_bucket,
            self.num_layers,
        )
        if "conditions" in self.cache:
            out.cache["conditions"] = self.cache["conditions"]
        return out

    def sorted_by_query(self) -> SortedPattern:
        """The pattern sorted by query, then key, with its CSR pointer (cached)."""
        cached = self.cache.get("sorted")
        if cached is None:
            self.validate()
            cached = sort_by_query(self.edge_index, self.num_tokens, self.edge_bucket)
            self.cache["sorted"] = cached
        return cached

    def conditions(self) -> dict[str, bool]:
        """Conditions C1-C3 of :func:`~lightgraph.functional.attention.check_conditions`
        for this pattern (cached)."""
        cached = self.cache.get("conditions")
        if cached is None:
            self.validate()
            cached = check_conditions(self.edge_index, self.num_tokens, self.num_layers)
            self.cache["conditions"] = cached
        return dict(cached)

    def cluster_layout(
        self, num_clusters: int, block_size: int = 16, threshold: float = 0.0
    ) -> ClusterSparseLayout:
        """The :class:`~lightgraph.functional.attention.ClusterSparseLayout` of this pattern
        (the latest one is cached)."""
        key = (num_clusters, block_size, float(threshold))
        cached = self.cache.get("cluster_layout")
        if cached is None or cached[0] != key:
            self.validate()
            layout = ClusterSparseLayout(
                self.edge_index,
                self.num_tokens,
                num_clusters,
                block_size=block_size,
                threshold=threshold,
                edge_bucket=self.edge_bucket,
                far_bucket=self.far_bucket,
            )
            cached = (key, layout)
            self.cache["cluster_layout"] = cached
        return cached[1]

    def _sparse_structure(self, num_heads: int) -> _SparseStructure:
        """The sparse kernel's CSR structure over ``num_heads`` heads (cached per count)."""
        # Imported here: the sparse kernel sorts patterns with this module's sort_by_query.
        from lightgraph.functional.attention.sparse import _SparseStructure

        key = ("sparse_structure", num_heads)
        cached = self.cache.get(key)
        if cached is None:
            pattern = self.sorted_by_query()
            cached = _SparseStructure(pattern.edge_index, self.num_tokens, num_heads)
            self.cache[key] = cached
        return cached


def sort_by_query(edge_index: Tensor, num_tokens: int, edge_bucket: Tensor | None) -> SortedPattern:
    """Sort a ``[2, E]`` pattern by query, then key (stable; no copy when already sorted).

    Args:
        edge_index: ``[2, E]`` long, row 0 key, row 1 query.
        num_tokens: sequence length ``S``.
        edge_bucket: ``[E]`` buckets sorted along, or ``None``.

    Returns:
        The :class:`SortedPattern` with its CSR pointer over ``S`` queries.
    """
    src, dst = edge_index
    key = dst * num_tokens + src
    if key.numel() < 2 or bool((key[1:] >= key[:-1]).all()):
        perm = torch.arange(key.numel(), device=key.device)
    else:
        perm = torch.argsort(key, stable=True)
        edge_index = edge_index[:, perm]
        edge_bucket = None if edge_bucket is None else edge_bucket[perm]
    counts = torch.bincount(edge_index[1], minlength=num_tokens)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    return SortedPattern(edge_index, edge_bucket, perm, ptr)
