"""Structural encodings of a graph for graph transformers: attention-bias buckets from
shortest-path distances, and Laplacian positional encodings.

Attention-bias buckets (rows of a model's per-head bias table), shared by every data
module of lightgraph:

===================================  ===========================================
bucket                                pairs (query ``i``, key ``j``)
===================================  ===========================================
``SELF_BUCKET = 0``                   ``i == j``
``EDGE_BUCKET = 1``                   an edge ``j -> i`` (shortest path 1)
``GLOBAL_BUCKET = 2``                 a global token and any other token
``FAR_BUCKET = 3``                    pairs added by a cluster-sparse transfer
``2 + d`` for ``2 <= d <= D``         shortest path ``d`` (longer paths clip to ``D``)
``D + 3``                             no path from ``j`` to ``i``
``D + 4 = num_buckets(D)``            *masked* (different graphs of one batch)
===================================  ===========================================

with ``D = max_distance``. A model holds ``num_buckets(D)`` learned rows and appends a
constant ``-inf`` row for the masked bucket, so dense kinds (which have no mask) never
attend across the graphs of a batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightgraph.utilities.checks import check_int

__all__ = [
    "EDGE_BUCKET",
    "FAR_BUCKET",
    "GLOBAL_BUCKET",
    "SELF_BUCKET",
    "check_max_distance",
    "distance_buckets",
    "laplacian_pe",
    "num_buckets",
]

SELF_BUCKET = 0
EDGE_BUCKET = 1
GLOBAL_BUCKET = 2
FAR_BUCKET = 3


def num_buckets(max_distance: int) -> int:
    """Learned bias buckets for ``max_distance`` (the masked bucket is this number)."""
    return max_distance + 4


def check_max_distance(owner: str, max_distance: Any) -> int:
    """A ``max_distance`` of the bucket layout: an integer in ``[2, 120]``.

    Distance 1 is the edge bucket; buckets are cached as int8.
    """
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 2:
        raise ValueError(
            f"{owner}: expected `max_distance` to be an integer >= 2 (distance 1 is the edge "
            f"bucket) but got {max_distance!r}."
        )
    if max_distance > 120:
        raise ValueError(
            f"{owner}: expected `max_distance` <= 120 (buckets are cached as int8) but got "
            f"{max_distance!r}."
        )
    return max_distance


def laplacian_pe(edge_index: Tensor, num_nodes: int, k: int, seed: int = 0) -> Tensor:
    """Dwivedi & Bresson's Laplacian positional encodings of one graph.

    The ``k`` eigenvectors of :math:`L = I - D^{-1/2} A D^{-1/2}` after the trivial one
    (smallest eigenvalues first), computed with
    :class:`torch_geometric.transforms.AddLaplacianEigenvectorPE`; graphs with fewer than
    ``k + 1`` (``k + 2`` from 100 nodes, for ARPACK) nodes get zero columns at the end.
    The sign of every eigenvector is arbitrary: models flip it at random in training.

    Args:
        edge_index: ``[2, E]`` edges of the graph.
        num_nodes: nodes of the graph.
        k: eigenvectors per node (``>= 1``).
        seed: seed of the random sign PyG draws per eigenvector.

    Returns:
        ``[num_nodes, k]`` float32.
    """
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddLaplacianEigenvectorPE

    check_int("laplacian_pe", "k", k)
    pe = torch.zeros(num_nodes, k)
    if num_nodes < 2:
        return pe
    src, dst = edge_index
    undirected = bool(
        torch.equal(
            torch.sort(src * num_nodes + dst).values, torch.sort(dst * num_nodes + src).values
        )
    )
    usable = min(k, num_nodes - 2 if num_nodes >= 100 else num_nodes - 1)
    if usable < 1:
        return pe
    transform = AddLaplacianEigenvectorPE(usable, attr_name="lap_pe", is_undirected=undirected)
    # PyG draws a random sign per eigenvector from the global generator: pin it.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        out = transform(Data(edge_index=edge_index, num_nodes=num_nodes))
    values = out.lap_pe.to(torch.float32)
    pe[:, : values.size(1)] = values
    return pe


def distance_buckets(edge_index: Tensor, num_nodes: int, max_distance: int) -> Tensor:
    """Bias buckets of all node pairs of one graph from shortest-path distances.

    ``out[i, j]`` is the bucket of query ``i`` and key ``j`` (see the module docstring):
    the length ``d`` of the shortest path from ``j`` to ``i`` along ``edge_index``
    (messages flow from row 0 to row 1), clipped to ``max_distance``, or the
    "unreachable" bucket. Distances come from a bounded breadth-first search
    (:func:`scipy.sparse.csgraph.dijkstra` with ``unweighted=True`` and
    ``limit=max_distance``); whether a longer path exists is read off the connected
    components (undirected graphs) or an unbounded search (directed graphs).

    Args:
        edge_index: ``[2, E]`` edges of the graph (row 0 source, row 1 target).
        num_nodes: nodes of the graph.
        max_distance: longer shortest paths share the bucket of this distance.

    Returns:
        ``[num_nodes, num_nodes]`` long.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components, dijkstra

    check_max_distance("distance_buckets", max_distance)
    n = num_nodes
    out = torch.full((n, n), max_distance + 3, dtype=torch.long)
    if n == 0:
        return out
    src, dst = edge_index.numpy()
    adjacency = csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
    dist = dijkstra(adjacency, directed=True, unweighted=True, limit=max_distance + 0.5)
    keys = np.sort(src.astype(np.int64) * n + dst)
    undirected = bool(np.array_equal(keys, np.sort(dst.astype(np.int64) * n + src)))
    if undirected:
        _, label = connected_components(adjacency, directed=False)
        reachable = label[:, None] == label[None, :]
    else:
        reachable = np.isfinite(dijkstra(adjacency, directed=True, unweighted=True))
    d = np.where(np.isfinite(dist), dist, max_distance)  # reachable but farther: clip
    bucket = np.where(d <= 1, d, d + 2).astype(np.int64)  # 0 self, 1 edge, d + 2 beyond
    bucket = np.where(reachable, bucket, max_distance + 3)
    # dist[j, i] runs from key j to query i: transpose to (query, key).
    out.copy_(torch.from_numpy(np.ascontiguousarray(bucket.T)))
    return out
