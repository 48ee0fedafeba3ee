"""TorchGT's attention as pure functions: the pattern type, one kernel per kind, the
conditions C1-C3 and the dispatcher :func:`attend`.

===========================  ==========================================================
module                        contents
===========================  ==========================================================
``sorted_pattern``            :class:`SortedPattern`, :func:`sort_by_query`
``pattern``                   :class:`AttentionGraph`, :func:`add_token_path`
``dense``                     :func:`dense_attention` (SDPA, "GP-Flash")
``raw``                       :func:`raw_attention` (materialised scores, "GP-Raw")
``sparse``                    :func:`sparse_attention` (topology-induced, CSR products)
``cluster_sparse_layout``     :class:`ClusterSparseLayout`, :data:`CHUNK_ELEMENTS`
``cluster_sparse``            :func:`cluster_sparse_attention`,
                              :func:`default_num_clusters`, :data:`AUTO_MIN_TILE_FILL`,
                              :data:`IMPLEMENTATIONS` (``"tiles"``, ``"flex"``)
``flex``                      :func:`cluster_flex_attention` (the layout on FlexAttention),
                              :func:`flex_available`
``conditions``                :func:`check_conditions`,
                              :data:`EXACT_HAMILTONIAN_MAX_TOKENS`
``dispatch``                  :data:`KINDS`, :data:`DENSE_KINDS`, :data:`SPARSE_KINDS`,
                              :func:`attend`, :func:`resolve_kind`, :func:`lookup_rows`,
                              :func:`dual_uses_dense`, :data:`DEFAULT_DENSE_EVERY`
===========================  ==========================================================

Each module imports only the modules listed above it (``dispatch`` runs the kernels on an
:class:`AttentionGraph`; ``pattern`` caches the kernels' structures on it).
"""

from lightgraph.functional.attention.cluster_sparse import (
    AUTO_MIN_TILE_FILL,
    CLUSTER_CACHE_DIVISOR,
    IMPLEMENTATIONS,
    NOMINAL_CACHE_BYTES,
    cluster_sparse_attention,
    default_num_clusters,
)
from lightgraph.functional.attention.cluster_sparse_layout import (
    CHUNK_ELEMENTS,
    ClusterSparseLayout,
)
from lightgraph.functional.attention.conditions import (
    EXACT_HAMILTONIAN_MAX_TOKENS,
    check_conditions,
)
from lightgraph.functional.attention.dense import dense_attention
from lightgraph.functional.attention.dispatch import (
    DEFAULT_DENSE_EVERY,
    DENSE_KINDS,
    KINDS,
    SPARSE_KINDS,
    attend,
    dual_uses_dense,
    lookup_rows,
    resolve_kind,
)
from lightgraph.functional.attention.flex import cluster_flex_attention, flex_available
from lightgraph.functional.attention.pattern import AttentionGraph, add_token_path
from lightgraph.functional.attention.raw import raw_attention
from lightgraph.functional.attention.sorted_pattern import SortedPattern, sort_by_query
from lightgraph.functional.attention.sparse import sparse_attention

__all__ = [
    "AUTO_MIN_TILE_FILL",
    "CHUNK_ELEMENTS",
    "CLUSTER_CACHE_DIVISOR",
    "DEFAULT_DENSE_EVERY",
    "DENSE_KINDS",
    "EXACT_HAMILTONIAN_MAX_TOKENS",
    "IMPLEMENTATIONS",
    "KINDS",
    "NOMINAL_CACHE_BYTES",
    "SPARSE_KINDS",
    "AttentionGraph",
    "ClusterSparseLayout",
    "SortedPattern",
    "add_token_path",
    "attend",
    "check_conditions",
    "cluster_flex_attention",
    "cluster_sparse_attention",
    "default_num_clusters",
    "dense_attention",
    "dual_uses_dense",
    "flex_available",
    "lookup_rows",
    "raw_attention",
    "resolve_kind",
    "sort_by_query",
    "sparse_attention",
]
