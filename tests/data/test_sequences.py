"""Sequence builders: METIS order, the dense buckets of a built sequence."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.partitioner import partition_graph
from lightgraph.data.sequences import build_sequence, metis_order, split_sequences
from lightgraph.data.synthetic_graph import SyntheticGraph
from lightgraph.functional.graph_encoding import GLOBAL_BUCKET, SELF_BUCKET
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
    # On pattern entries the dense and the sparse buckets agree.
    src, dst = item.graph.edge_index
    assert torch.equal(dense[dst, src], item.graph.edge_bucket)
    assert build_sequence(torch.zeros(n, 2), edge_index, dense_limit=n).graph.dense_bucket is None
