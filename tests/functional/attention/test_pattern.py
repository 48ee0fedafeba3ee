"""AttentionGraph: the sorted view, caching, moving, validation."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import AttentionGraph, check_conditions
from tests.functional.attention.common import random_pattern


def test_attention_graph_caches_and_moves() -> None:
    S = 10
    ei = random_pattern(S, 20)
    bucket = torch.arange(ei.shape[1])
    graph = AttentionGraph(S, ei, bucket)
    pattern = graph.sorted_by_query()
    assert graph.sorted_by_query() is pattern
    key = pattern.edge_index[1] * S + pattern.edge_index[0]
    assert (key[1:] > key[:-1]).all()
    assert torch.equal(pattern.edge_index, ei[:, pattern.perm])
    assert torch.equal(pattern.edge_bucket, bucket[pattern.perm])
    counts = torch.bincount(ei[1], minlength=S)
    assert pattern.ptr.tolist() == [0] + torch.cumsum(counts, 0).tolist()
    assert graph.conditions() == check_conditions(ei, S, 1)
    moved = graph.to("cpu")
    assert moved is not graph and torch.equal(moved.edge_index, ei)
    assert moved.cache["conditions"] == graph.cache["conditions"]


def test_graph_validate_rejects_bad_buckets() -> None:
    ei = torch.arange(4).repeat(2, 1)
    with pytest.raises(ValueError, match="`edge_bucket` of shape"):
        AttentionGraph(4, ei, edge_bucket=torch.zeros(3, dtype=torch.long)).validate()
    with pytest.raises(ValueError, match="`dense_bucket` of shape"):
        AttentionGraph(4, ei, dense_bucket=torch.zeros(4, 4)).validate()
    with pytest.raises(ValueError, match="`edge_bucket` >= 0"):
        AttentionGraph(4, ei, edge_bucket=-torch.ones(4, dtype=torch.long)).validate()
    with pytest.raises(ValueError, match="`num_layers` >= 1"):
        AttentionGraph(4, ei, num_layers=0).validate()
