"""Attention layers of graph transformers.

:class:`MultiheadGraphAttention` is the layer; the pattern type and the kernels it runs
live in :mod:`lightgraph.functional.attention` and are re-exported here, so
``from lightgraph.nn.attention import AttentionGraph, attend`` keeps working.
"""

from lightgraph.functional.attention import (
    CHUNK_ELEMENTS,
    CLUSTER_CACHE_DIVISOR,
    KINDS,
    NOMINAL_CACHE_BYTES,
    AttentionGraph,
    ClusterSparseLayout,
    SortedPattern,
    attend,
    check_conditions,
    cluster_sparse_attention,
    default_num_clusters,
    dense_attention,
    dual_uses_dense,
    raw_attention,
    sparse_attention,
)
from lightgraph.nn.attention.multihead_graph_attention import MultiheadGraphAttention

__all__ = [
    "CHUNK_ELEMENTS",
    "CLUSTER_CACHE_DIVISOR",
    "KINDS",
    "NOMINAL_CACHE_BYTES",
    "AttentionGraph",
    "ClusterSparseLayout",
    "MultiheadGraphAttention",
    "SortedPattern",
    "attend",
    "check_conditions",
    "cluster_sparse_attention",
    "default_num_clusters",
    "dense_attention",
    "dual_uses_dense",
    "raw_attention",
    "sparse_attention",
]
