"""AttentionGraph: the sorted view, caching, moving, validation; add_token_path."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import AttentionGraph, add_token_path, check_conditions
from lightgraph.functional.graph_encoding import FAR_BUCKET
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
    picked = graph.auto_kind(2, 4)
    moved = graph.to("cpu")
    assert moved is not graph and torch.equal(moved.edge_index, ei)
    assert moved.cache["conditions"] == graph.cache["conditions"]
    assert moved.auto_kind(2, 4) == picked
    assert "cluster_layout" not in moved.cache  # the decision came along, no layout rebuilt


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


@pytest.mark.parametrize("seed", range(6))
def test_add_token_path_adds_exactly_the_missing_path_pairs(seed: int) -> None:
    S = 9 + seed
    ei = random_pattern(S, 3 * S, seed=seed)
    ei = torch.cat([ei, ei[:, :2]], dim=1)  # duplicates are kept
    ei = torch.cat([ei, torch.tensor([[0, 4], [1, 3]])], dim=1)  # some path pairs, one way
    bucket = torch.randint(0, 3, (ei.shape[1],), generator=torch.Generator().manual_seed(seed))
    out, out_bucket = add_token_path(ei, S, bucket, bucket=7)
    before = {(int(j), int(i)) for j, i in ei.t()}
    path = {(i, i + 1) for i in range(S - 1)} | {(i + 1, i) for i in range(S - 1)}
    added = path - before
    assert 0 < len(added) <= 2 * (S - 1)
    assert out.shape[1] == ei.shape[1] + len(added)
    key = out[1] * S + out[0]
    assert bool((key[1:] >= key[:-1]).all())  # sorted by query, then key
    old = sorted(zip(ei[0].tolist(), ei[1].tolist(), bucket.tolist(), strict=True))
    new = sorted(zip(out[0].tolist(), out[1].tolist(), out_bucket.tolist(), strict=True))
    assert new == sorted(old + [(j, i, 7) for j, i in added])
    # Without buckets the same entries; twice is once; the default bucket is FAR_BUCKET.
    plain, none = add_token_path(ei, S)
    assert none is None and torch.equal(plain, out)
    again, again_bucket = add_token_path(out, S, out_bucket)
    assert torch.equal(again, out) and torch.equal(again_bucket, out_bucket)
    assert set(add_token_path(ei, S, bucket)[1][~torch.isin(key, ei[1] * S + ei[0])].tolist()) == {
        FAR_BUCKET
    }
    assert check_conditions(out, S, 1)["c2"]


def test_add_token_path_edge_cases() -> None:
    single = torch.zeros(2, 1, dtype=torch.long)
    out, bucket = add_token_path(single, 1, torch.zeros(1, dtype=torch.long))
    assert torch.equal(out, single) and bucket.tolist() == [0]
    empty = torch.zeros(2, 0, dtype=torch.long)
    out, _ = add_token_path(empty, 3)
    assert out.tolist() == [[1, 0, 2, 1], [0, 1, 1, 2]]
    with pytest.raises(ValueError, match="`num_tokens` to be a positive integer but got 0"):
        add_token_path(empty, 0)
    with pytest.raises(ValueError, match=r"`edge_bucket` of shape \[E=1\]"):
        add_token_path(single, 1, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="`bucket` to be an integer >= 0 but got -1"):
        add_token_path(single, 1, bucket=-1)
    with pytest.raises(ValueError, match="add_token_path"):
        add_token_path(single + 3, 2)
