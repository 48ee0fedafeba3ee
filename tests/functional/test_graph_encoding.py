"""Bias buckets from shortest paths (against a brute-force BFS) and Laplacian encodings."""

from __future__ import annotations

from collections import deque

import pytest
import torch

from lightgraph.functional.graph_encoding import (
    check_max_distance,
    distance_buckets,
    laplacian_pe,
    num_buckets,
)


def bfs_buckets(edge_index: torch.Tensor, n: int, max_distance: int) -> torch.Tensor:
    """The bucket layout with a Python BFS from every key: ``out[query, key]``."""
    out_edges = [[] for _ in range(n)]
    for j, i in edge_index.t().tolist():
        out_edges[j].append(i)
    buckets = torch.full((n, n), max_distance + 3, dtype=torch.long)
    for source in range(n):
        dist = {source: 0}
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v in out_edges[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        for target, d in dist.items():
            d = min(d, max_distance)
            buckets[target, source] = d if d <= 1 else d + 2  # (query, key)
    return buckets


def clipped_graph(directed: bool) -> tuple[torch.Tensor, int]:
    """14 nodes: a 9-hop chain (clipping), random extras, a separate component."""
    gen = torch.Generator().manual_seed(3)
    n = 14
    path = torch.stack([torch.arange(9), torch.arange(1, 10)])  # a 9-hop chain: clipping
    extra = torch.randint(0, n, (2, 6), generator=gen)
    extra[:, extra[0] >= 10] = 10  # nodes 10..13: a separate component (or isolated)
    edge_index = torch.cat([path, extra, torch.tensor([[11, 12], [12, 13]])], dim=1)
    if not directed:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    return edge_index, n


@pytest.mark.parametrize("directed", [False, True])
def test_distance_buckets_equal_brute_force_bfs(directed: bool) -> None:
    edge_index, n = clipped_graph(directed)
    expected = bfs_buckets(edge_index, n, max_distance=4)
    assert torch.equal(distance_buckets(edge_index, n, 4), expected)
    assert (expected == 4 + 3).any() and (expected == 4 + 2).any()  # unreachable and clipped


def test_laplacian_pe_shape_and_padding() -> None:
    ring = torch.arange(6)
    edge_index = torch.stack([ring, (ring + 1) % 6])
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    pe = laplacian_pe(edge_index, 6, k=8, seed=0)
    assert pe.shape == (6, 8) and pe.dtype == torch.float32
    assert pe[:, :5].abs().sum() > 0 and not pe[:, 5:].any()  # 6 nodes: 5 usable vectors
    assert torch.equal(pe, laplacian_pe(edge_index, 6, k=8, seed=0))
    assert not laplacian_pe(edge_index[:, :0], 1, k=2).any()
    with pytest.raises(ValueError, match="laplacian_pe: expected `k`"):
        laplacian_pe(edge_index, 6, k=0)


def test_bucket_layout() -> None:
    assert num_buckets(5) == 9
    assert check_max_distance("owner", 120) == 120
    with pytest.raises(ValueError, match="`max_distance` to be an integer >= 2"):
        check_max_distance("owner", 1)
    with pytest.raises(ValueError, match="`max_distance` <= 120"):
        check_max_distance("owner", 121)
