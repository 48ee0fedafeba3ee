"""GroupBatchSampler: one-group mini-batches, reshuffled from (seed, epoch)."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.loader import GroupBatchSampler


def test_group_batch_sampler() -> None:
    gen = torch.Generator().manual_seed(0)
    groups = torch.randint(0, 4, (203,), generator=gen)
    sampler = GroupBatchSampler(groups, batch_size=16, seed=3)
    epochs = [list(sampler) for _ in range(3)]
    for batches in epochs:
        assert len(batches) == len(sampler)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(203))  # each node exactly once per epoch
        for b in batches:
            assert 1 <= len(b) <= 16
            assert groups[b].unique().numel() == 1  # one group per batch
        order = [int(groups[b[0]]) for b in batches]
        assert order != sorted(order)  # groups interleaved, not fed in degree order
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]  # reshuffled every epoch
    assert [b[0] for b in epochs[0]] != [b[0] for b in epochs[1]]
    sampler.set_epoch(1)
    assert list(sampler) == epochs[1]  # a function of (seed, epoch)
    ordered = list(GroupBatchSampler(groups, 16, shuffle=False))
    assert [i for b in ordered for i in b] == torch.argsort(groups, stable=True).tolist()
    dropped = list(GroupBatchSampler(groups, 16, drop_last=True))
    assert all(len(b) == 16 for b in dropped) and len(dropped) == sum(
        (groups == g).sum().item() // 16 for g in range(4)
    )
    deep = list(GroupBatchSampler(groups, 16, order="deepest_first"))
    order = [int(groups[b[0]]) for b in deep]
    assert order == sorted(order, reverse=True)
    assert sorted(i for b in deep for i in b) == list(range(203))
    with pytest.raises(ValueError, match=r"`order` to be one of \('shuffle', 'deepest_first'\)"):
        GroupBatchSampler(groups, 16, order="random")
    with pytest.raises(ValueError, match=r"GroupBatchSampler: expected `batch_size`.*got 0"):
        GroupBatchSampler(groups, 0)


def test_sampler_with_dataloader() -> None:
    groups = torch.tensor([0, 1, 0, 1, 1])
    data = torch.utils.data.TensorDataset(torch.arange(5))
    loader = torch.utils.data.DataLoader(data, batch_sampler=GroupBatchSampler(groups, 2))
    seen = [x for (b,) in loader for x in b.tolist()]
    assert sorted(seen) == [0, 1, 2, 3, 4]


# ------------------------------------------------------------------------ loss (Eq. 5.1)
