"""TorchGT's attention as pure functions: the pattern type, one kernel per kind, the
conditions C1-C3 and the dispatcher :func:`attend`.

===========================  ==========================================================
module                        contents
===========================  ==========================================================
``pattern``                   :class:`AttentionGraph`, :class:`SortedPattern`
``dense``                     :func:`dense_attention` (SDPA, "GP-Flash")
``raw``                       :func:`raw_attention` (materialised scores, "GP-Raw")
``sparse``                    :func:`sparse_attention` (topology-induced, CSR products)
``cluster_sparse``            :class:`ClusterSparseLayout`, :func:`cluster_sparse_attention`,
                              :func:`default_num_clusters`
``conditions``                :func:`check_conditions`, :func:`dual_uses_dense`
``dispatch``                  :data:`KINDS`, :func:`attend`
===========================  ==========================================================
"""

from lightgraph.functional.attention.cluster_sparse import (
    AUTO_MIN_TILE_FILL,
    CHUNK_ELEMENTS,
    CLUSTER_CACHE_DIVISOR,
    NOMINAL_CACHE_BYTES,
    ClusterSparseLayout,
    cluster_sparse_attention,
    default_num_clusters,
)
from lightgraph.functional.attention.conditions import check_conditions, dual_uses_dense
from lightgraph.functional.attention.dense import dense_attention
from lightgraph.functional.attention.dispatch import KINDS, attend
from lightgraph.functional.attention.pattern import AttentionGraph, SortedPattern, sort_by_query
from lightgraph.functional.attention.raw import raw_attention
from lightgraph.functional.attention.sparse import sparse_attention

__all__ = [
    "AUTO_MIN_TILE_FILL",
    "CHUNK_ELEMENTS",
    "CLUSTER_CACHE_DIVISOR",
    "KINDS",
    "NOMINAL_CACHE_BYTES",
    "AttentionGraph",
    "ClusterSparseLayout",
    "SortedPattern",
    "attend",
    "check_conditions",
    "cluster_sparse_attention",
    "default_num_clusters",
    "dense_attention",
    "dual_uses_dense",
    "raw_attention",
    "sort_by_query",
    "sparse_attention",
]
