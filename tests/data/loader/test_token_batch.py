"""TokenBatch shards and moves; TokenShard, the typed shard hand-off."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lightgraph.data.loader.token_batch import TokenBatch, TokenShard
from lightgraph.data.partition.sequences import build_sequence
from lightgraph.functional.sequence_parallel import shard_range


def _item(n: int = 10) -> TokenBatch:
    ring = torch.arange(n)
    edge_index = torch.stack([ring, (ring + 1) % n])
    return build_sequence(torch.randn(n, 3), edge_index, y=torch.arange(n))


def test_token_shard_defaults_and_checks() -> None:
    assert TokenShard() == TokenShard(1, 0) and not TokenShard().is_sharded
    assert TokenShard(3, 2).is_sharded
    with pytest.raises(dataclasses.FrozenInstanceError):
        TokenShard().rank = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="TokenShard: expected `world_size`"):
        TokenShard(0, 0)
    with pytest.raises(
        ValueError, match=r"TokenShard: expected `rank` to be an integer in \[0, 1\]"
    ):
        TokenShard(2, 2)


def test_select_shard_keeps_the_whole_graph() -> None:
    item = _item()
    S = item.num_tokens
    parts = [item.select_shard(3, r) for r in range(3)]
    for r, part in enumerate(parts):
        assert part.token_range == shard_range(S, 3, r) and part.is_sharded
        assert part.graph is item.graph and part.num_tokens == S
    assert torch.equal(torch.cat([p.x for p in parts]), item.x)
    assert torch.equal(torch.cat([p.y for p in parts]), item.y)
    with pytest.raises(ValueError, match="already a shard"):
        parts[0].select_shard(2, 0)
    item.graph_index = torch.zeros(S, dtype=torch.long)
    with pytest.raises(ValueError, match="graph-level batches are data-parallel"):
        item.select_shard(2, 0)


def test_to_the_same_device_is_the_batch_itself() -> None:
    item = _item()
    assert item.to("cpu") is item and item.device == torch.device("cpu")
