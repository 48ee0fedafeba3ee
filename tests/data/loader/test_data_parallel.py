"""The data-parallel split rules, against plain-Python references."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from lightgraph.data.loader.data_parallel import (
    DataParallelShard,
    balance_groups,
    check_shard,
    data_parallel_shard,
    shard_targets,
)


def reference_shard(order: list[int], rank: int, world: int, batch: int) -> list[int]:
    """Deal the global batches of ``world * batch`` out slice by slice, as a list program."""
    keep = len(order) - len(order) % world
    kept = order[:keep]
    out: list[int] = []
    pos = 0
    while pos < keep:
        chunk = kept[pos : pos + world * batch]
        per = len(chunk) // world
        out += chunk[rank * per : (rank + 1) * per]
        pos += world * batch
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [0, 1, 7, 12, 23, 24, 25])
@pytest.mark.parametrize("batch", [1, 3, 4])
def test_shard_targets_matches_the_reference_and_splits_evenly(world, n, batch):
    order = torch.randperm(n, generator=torch.Generator().manual_seed(n + 31 * world))
    shards = [shard_targets(order, r, world, batch) for r in range(world)]
    for r, shard in enumerate(shards):
        assert shard.tolist() == reference_shard(order.tolist(), r, world, batch)
    sizes = {s.numel() for s in shards}
    assert sizes == {n // world}
    union = torch.cat(shards)
    assert union.unique().numel() == union.numel()  # disjoint
    assert n - union.numel() == n % world  # at most world - 1 dropped


def test_rank_steps_are_the_slices_of_the_global_batches():
    order = torch.arange(20)
    world, batch = 2, 3
    shards = [shard_targets(order, r, world, batch) for r in range(world)]
    steps = [list(s.split(batch)) for s in shards]
    single = list(order.split(world * batch))
    assert len(steps[0]) == len(steps[1]) == len(single)
    for i, global_batch in enumerate(single):
        assert torch.cat([steps[r][i] for r in range(world)]).tolist() == global_batch.tolist()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_balance_groups_is_a_partition_within_the_largest_weight(world):
    gen = torch.Generator().manual_seed(world)
    weights = torch.randint(0, 50, (17,), generator=gen).tolist()
    groups = balance_groups(weights, world)
    assert sorted(itertools.chain.from_iterable(groups)) == list(range(17))
    totals = [sum(weights[i] for i in g) for g in groups]
    assert max(totals) - min(totals) <= max(weights)
    assert all(g == sorted(g) for g in groups)
    assert balance_groups(weights, world) == groups


def test_data_parallel_shard_reads_the_strategy_like_lightning_loaders():
    assert data_parallel_shard(None) == DataParallelShard(0, 1)
    single = SimpleNamespace(strategy=SimpleNamespace())
    assert data_parallel_shard(single) == (0, 1)
    ddp = SimpleNamespace(
        strategy=SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 4, "rank": 3})
    )
    assert data_parallel_shard(ddp) == (3, 4)
    bad = SimpleNamespace(
        strategy=SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 2, "rank": 2})
    )
    with pytest.raises(ValueError, match=r"`rank` in \[0, 1\].*got 2"):
        data_parallel_shard(bad)


def test_check_shard_names_the_argument():
    with pytest.raises(ValueError, match="world_size"):
        check_shard("Loader", 0, 0)
    with pytest.raises(ValueError, match="rank"):
        check_shard("Loader", -1, 2)
