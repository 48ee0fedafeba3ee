"""Kept for compatibility: cluster-sparse attention moved to
:mod:`lightgraph.functional.attention.cluster_sparse` and its argument checks to
:mod:`lightgraph.utilities.checks`. This module only re-exports their former public names.

Patch :data:`~lightgraph.functional.attention.cluster_sparse.CHUNK_ELEMENTS` on the new
module: this one holds a copy.
"""

from torch import Tensor

from lightgraph.functional.attention.cluster_sparse import (
    CHUNK_ELEMENTS,
    ClusterSparseLayout,
    cluster_sparse_attention,
)
from lightgraph.utilities.checks import (
    check_bias_table,
    check_graph_edge_index,
    check_qkv,
    check_rate,
)

__all__ = [
    "CHUNK_ELEMENTS",
    "ClusterSparseLayout",
    "check_bias_table",
    "check_dropout",
    "check_edge_index",
    "check_qkv",
    "cluster_sparse_attention",
]


def check_dropout(owner: str, dropout_p: float) -> float:
    """``dropout_p`` in ``[0, 1)``; now :func:`~lightgraph.utilities.checks.check_rate`."""
    return check_rate(owner, "dropout_p", dropout_p)


def check_edge_index(owner: str, edge_index: Tensor, num_tokens: int) -> Tensor:
    """A ``[2, E]`` long pattern of token ids in ``[0, num_tokens)``; now
    :func:`~lightgraph.utilities.checks.check_graph_edge_index`."""
    return check_graph_edge_index(
        owner, "edge_index", edge_index, num_tokens, unit="token", require_long=True
    )
