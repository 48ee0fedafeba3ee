"""Sequence builders: METIS order, the dense buckets of a built sequence, the token path."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.partition.partitioner import partition_graph
from lightgraph.data.partition.sequences import build_sequence, metis_order, split_sequences
from lightgraph.functional.graph_encoding import FAR_BUCKET, GLOBAL_BUCKET, SELF_BUCKET
from tests.functional.test_graph_encoding import bfs_buckets, clipped_graph

NUM_NODES = 150


def _dataset() -> SyntheticGraph:
    return SyntheticGraph(num_nodes=NUM_NODES, avg_degree=5, num_features=4, num_classes=3, seed=1)


def test_metis_order_makes_parts_contiguous() -> None:
    data = _dataset().load()
    order = metis_order(data.edge_index, NUM_NODES, 6)
    part = partition_graph(data.edge_index, NUM_NODES, 6, "metis")
    assert torch.equal(torch.sort(order).values, torch.arange(NUM_NODES))
    ordered = part[order]
    assert bool((ordered[1:] >= ordered[:-1]).all())  # every part is one contiguous range
    same = ordered[1:] == ordered[:-1]
    assert bool((order[1:][same] > order[:-1][same]).all())  # by id inside a part


def test_split_sequences_keeps_the_edges_inside_each_sequence() -> None:
    data = _dataset().load()
    order = metis_order(data.edge_index, NUM_NODES, 6)
    nodes, edges = split_sequences(data.edge_index, order, 64)
    assert [ids.numel() for ids in nodes] == [64, 64, NUM_NODES - 128]
    assert torch.equal(torch.cat(nodes), order)
    pairs = {tuple(e) for e in data.edge_index.t().tolist() if e[0] != e[1]}
    for ids, e in zip(nodes, edges, strict=True):
        inside = {(a, b) for a, b in pairs if a in set(ids.tolist()) and b in set(ids.tolist())}
        got = {(int(ids[a]), int(ids[b])) for a, b in e.t().tolist()}
        assert got == inside
        key = e[1] * ids.numel() + e[0]
        assert bool((key[1:] > key[:-1]).all())  # sorted by target then source, no duplicates


@pytest.mark.parametrize("directed", [False, True])
def test_dense_buckets_equal_brute_force_bfs(directed: bool) -> None:
    edge_index, n = clipped_graph(directed)
    expected = bfs_buckets(edge_index, n, max_distance=4)
    item = build_sequence(torch.zeros(n, 2), edge_index, max_distance=4, dense_limit=64)
    dense = item.graph.dense_bucket
    assert torch.equal(dense[1:, 1:], expected)
    assert dense[0, 0] == SELF_BUCKET
    assert bool((dense[0, 1:] == GLOBAL_BUCKET).all() and (dense[1:, 0] == GLOBAL_BUCKET).all())
    # On pattern entries the dense and the sparse buckets agree, but for the token path's
    # added pairs: FAR_BUCKET in the pattern, their shortest-path bucket in dense_bucket.
    src, dst = item.graph.edge_index
    plain = build_sequence(
        torch.zeros(n, 2), edge_index, max_distance=4, dense_limit=64, token_path=False
    )
    S = item.num_tokens
    key, plain_key = dst * S + src, plain.graph.edge_index[1] * S + plain.graph.edge_index[0]
    added = ~torch.isin(key, plain_key)
    assert added.any() and bool((item.graph.edge_bucket[added] == FAR_BUCKET).all())
    assert torch.equal(dense[dst, src][~added], item.graph.edge_bucket[~added])
    assert torch.equal(plain.graph.dense_bucket, dense)
    assert build_sequence(torch.zeros(n, 2), edge_index, dense_limit=n).graph.dense_bucket is None


@pytest.mark.parametrize("global_token", [True, False])
def test_token_pattern_adds_the_token_path(global_token: bool) -> None:
    n = 9
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, 12), generator=gen)
    edge_index = torch.cat([edge_index, torch.tensor([[2, 5], [3, 4]])], dim=1)  # path pairs
    plain = build_sequence(
        torch.zeros(n, 1), edge_index, global_token=global_token, token_path=False
    )
    item = build_sequence(torch.zeros(n, 1), edge_index, global_token=global_token)
    S = item.num_tokens
    before = {tuple(p) for p in plain.graph.edge_index.t().tolist()}
    after = dict(
        zip(
            map(tuple, item.graph.edge_index.t().tolist()),
            item.graph.edge_bucket.tolist(),
            strict=True,
        )
    )
    path = {(t, t + 1) for t in range(S - 1)} | {(t + 1, t) for t in range(S - 1)}
    assert set(after) == before | path and len(after) == item.graph.edge_index.shape[1]
    assert {after[p] for p in path - before} == {FAR_BUCKET}
    g = int(global_token)
    assert ((g + 2, g + 3) in before) and ((g + 5, g + 4) in before)  # kept with their bucket
    key = item.graph.edge_index[1] * S + item.graph.edge_index[0]
    assert bool((key[1:] > key[:-1]).all())  # still sorted by query then key, no duplicates
    # Degrees count graph edges only.
    assert torch.equal(item.in_degree, plain.in_degree)
    assert torch.equal(item.out_degree, plain.out_degree)
    assert item.graph.conditions()["c2"]
