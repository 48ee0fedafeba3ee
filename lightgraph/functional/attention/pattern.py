"""The attention pattern of one token sequence, and the token path a pattern can be given."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

import lightgraph.functional.attention.cluster_sparse as _cluster_sparse
from lightgraph.functional.attention.cluster_sparse_layout import ClusterSparseLayout
from lightgraph.functional.attention.conditions import check_conditions
from lightgraph.functional.attention.sorted_pattern import SortedPattern, sort_by_query
from lightgraph.functional.attention.sparse import _SparseStructure
from lightgraph.functional.graph_encoding import FAR_BUCKET
from lightgraph.utilities.checks import check_graph_edge_index, check_int, describe

__all__ = ["AttentionGraph", "add_token_path"]


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
        """A copy on ``device`` (the condition results and ``"auto"`` decisions carry over;
        other cached data is rebuilt)."""

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
        for key, value in self.cache.items():
            if key == "conditions" or (isinstance(key, tuple) and key[0] == "auto_kind"):
                out.cache[key] = value
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

    def auto_kind(self, num_clusters: int, block_size: int = 16, threshold: float = 0.0) -> str:
        """The kind ``kind="auto"`` runs on this pattern: ``"cluster_sparse"`` when the tiles
        of :meth:`cluster_layout` are filled enough, else ``"sparse"`` (cached).

        ``"cluster_sparse"`` exactly when ``cluster_layout(num_clusters, block_size,
        threshold).tile_fill >= AUTO_MIN_TILE_FILL`` (the constant of
        :mod:`lightgraph.functional.attention.cluster_sparse`, read at every call). The
        decision depends on the pattern and these arguments only (no timing), so it is
        the same on every run, machine and graph-parallel rank; it is cached per
        arguments and constant.
        """
        min_fill = float(_cluster_sparse.AUTO_MIN_TILE_FILL)
        key = ("auto_kind", num_clusters, block_size, float(threshold), min_fill)
        cached = self.cache.get(key)
        if cached is None:
            layout = self.cluster_layout(num_clusters, block_size, threshold)
            cached = "cluster_sparse" if layout.tile_fill >= min_fill else "sparse"
            self.cache[key] = cached
        return cached

    def _sparse_structure(self, num_heads: int) -> _SparseStructure:
        """The sparse kernel's CSR structure over ``num_heads`` heads (cached per count)."""
        key = ("sparse_structure", num_heads)
        cached = self.cache.get(key)
        if cached is None:
            pattern = self.sorted_by_query()
            cached = _SparseStructure(pattern.edge_index, self.num_tokens, num_heads)
            self.cache[key] = cached
        return cached


def add_token_path(
    edge_index: Tensor,
    num_tokens: int,
    edge_bucket: Tensor | None = None,
    bucket: int = FAR_BUCKET,
) -> tuple[Tensor, Tensor | None]:
    """Add the token-order path ``0 - 1 - ... - (S-1)`` to a pattern, both directions.

    For every ``i < S - 1`` the entries ``(key i, query i + 1)`` and ``(key i + 1, query
    i)`` are added where the pattern lacks them, so the pattern holds a Hamiltonian path
    (condition C2 of :func:`~lightgraph.functional.attention.check_conditions`, then
    certified exactly by the token-order test) -- the construction of the universality
    results for sparse attention that TorchGT cites (M. Zhang, *Algorithm and System
    Co-design for Efficient and Scalable Graph Learning*, PhD thesis, NTU 2026, ch. 4). At
    most ``2 (S - 1)`` entries are added; existing entries (duplicates included) are kept.
    Added entries get ``bucket`` (default ``FAR_BUCKET`` = 3 of
    :mod:`lightgraph.functional.graph_encoding`, the bucket of attended pairs that are not
    graph edges, shared with the pairs a cluster-sparse transfer adds).

    Args:
        edge_index: ``[2, E]`` long, row 0 key (source), row 1 query (target); any order.
        num_tokens: sequence length ``S``.
        edge_bucket: ``[E]`` long buckets of the entries, or ``None``.
        bucket: bucket of the added entries (ignored without ``edge_bucket``).

    Returns:
        ``(edge_index [2, E + A], edge_bucket [E + A] or None)`` sorted by query, then key
        (stable for the input's entries), ``A <= 2 (S - 1)`` the added entries.

    Shapes:
        - **input:** edge_index ``[2, E]``, edge_bucket ``[E]``
        - **output:** edge_index ``[2, E + A]``, edge_bucket ``[E + A]``
    """
    owner = "add_token_path"
    S = check_int(owner, "num_tokens", num_tokens)
    check_graph_edge_index(owner, "edge_index", edge_index, S, unit="token", require_long=True)
    E, device = edge_index.shape[1], edge_index.device
    if edge_bucket is not None:
        if (
            not isinstance(edge_bucket, Tensor)
            or edge_bucket.shape != (E,)
            or edge_bucket.dtype != torch.long
        ):
            raise ValueError(
                f"{owner}: expected `edge_bucket` of shape [E={E}] and dtype torch.long but got "
                f"{describe(edge_bucket)}."
            )
        if edge_bucket.device != device:
            raise ValueError(
                f"{owner}: expected `edge_bucket` on the device of `edge_index` ({device}) but "
                f"got {edge_bucket.device}."
            )
    bucket = check_int(owner, "bucket", bucket, 0)
    pattern = sort_by_query(edge_index, S, edge_bucket)
    edge_index, edge_bucket = pattern.edge_index, pattern.edge_bucket
    keys = edge_index[1] * S + edge_index[0]  # sorted
    i = torch.arange(S - 1, device=device)
    # (key i+1 -> query i) has code i*S + i+1 and (key i -> query i+1) has (i+1)*S + i:
    # interleaved they are ascending.
    path = torch.stack([i * S + i + 1, (i + 1) * S + i], dim=1).reshape(-1)
    new = path[~torch.isin(path, keys)]
    if new.numel() == 0:
        return edge_index, edge_bucket
    A = new.numel()
    # Merge two sorted lists without a sort: every key's place is its rank in the other.
    new_pos = torch.searchsorted(keys, new) + torch.arange(A, device=device)
    old_pos = torch.searchsorted(new, keys) + torch.arange(E, device=device)
    out = edge_index.new_empty(2, E + A)
    out[:, old_pos] = edge_index
    out[0, new_pos], out[1, new_pos] = new % S, new // S
    out_bucket = None
    if edge_bucket is not None:
        out_bucket = edge_bucket.new_empty(E + A)
        out_bucket[old_pos] = edge_bucket
        out_bucket[new_pos] = bucket
    return out, out_bucket
