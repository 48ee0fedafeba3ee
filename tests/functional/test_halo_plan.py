"""HaloPlan: the exchange topology of one rank, checked on a tiny graph partitioned by hand.

The graph (6 nodes, rank 0 owns 0-2, rank 1 owns 3-5; ``u -> v`` = message from u to v)::

    0 -> 1    1 -> 2    3 -> 1    4 -> 2    2 -> 3    5 -> 4    0 -> 5    3 -> 4

Rank 0's inner nodes 0, 1, 2 have the remote in-neighbours 3 (-> 1) and 4 (-> 2): its halo
is [3, 4], both from rank 1. Rank 1's inner nodes 3, 4, 5 have the remote in-neighbours
2 (-> 3) and 0 (-> 5): its halo is [0, 2], both from rank 0. What a rank sends to a peer
is that peer's halo block from it, in the same order, as local ids of the sender.

Importance (Sylvie §IV-A): the boundary nodes are B = {0, 2, 3, 4} (all halo rows) with
global in-degrees d = {0: 0, 2: 2, 3: 1, 4: 2}; p_v = (|{u in B: d_u <= d_v}| - 1) / (|B| - 1)
gives p_0 = 0, p_3 = 1/3, p_2 = p_4 = 1; nodes 1 and 5 are not boundary nodes: 0.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch_geometric.data import Data

from lightgraph.data.partition import build_partition_plans
from lightgraph.functional.halo_plan import HaloPlan

EDGES = [(0, 1), (1, 2), (3, 1), (4, 2), (2, 3), (5, 4), (0, 5), (3, 4)]
PARTITION = [0, 0, 0, 1, 1, 1]

# Worked out by hand from the docstring.
EXPECTED = {
    0: {
        "num_inner": 3,
        "global_ids": [0, 1, 2, 3, 4],
        "halo_counts": [0, 2],
        "send_counts": [0, 2],
        "send_index": [0, 2],  # nodes 0 and 2: rank 1's halo, in its order
        "importance": [0.0, 0.0, 1.0, 1 / 3, 1.0],
    },
    1: {
        "num_inner": 3,
        "global_ids": [3, 4, 5, 0, 2],
        "halo_counts": [2, 0],
        "send_counts": [2, 0],
        "send_index": [0, 1],  # nodes 3 and 4: rank 0's halo, in its order
        "importance": [1 / 3, 1.0, 0.0, 0.0, 1.0],
    },
}


def tiny_plans() -> list[HaloPlan]:
    n = len(PARTITION)
    data = Data(
        x=torch.zeros(n, 2),
        y=torch.zeros(n, dtype=torch.long),
        edge_index=torch.tensor(EDGES).t().contiguous(),
        train_mask=torch.ones(n, dtype=torch.bool),
        val_mask=torch.zeros(n, dtype=torch.bool),
        test_mask=torch.zeros(n, dtype=torch.bool),
    )
    return [plan.halo for plan in build_partition_plans(data, torch.tensor(PARTITION), 2)]


@pytest.mark.parametrize("rank", [0, 1])
def test_plan_matches_the_hand_partition(rank: int) -> None:
    plan = tiny_plans()[rank]
    want = EXPECTED[rank]
    assert isinstance(plan, HaloPlan)
    assert (plan.rank, plan.num_parts, plan.num_inner) == (rank, 2, want["num_inner"])
    assert plan.global_ids.tolist() == want["global_ids"]
    assert list(plan.halo_counts) == want["halo_counts"]
    assert list(plan.send_counts) == want["send_counts"]
    assert plan.send_index.tolist() == want["send_index"]
    torch.testing.assert_close(
        plan.importance.double(), torch.tensor(want["importance"], dtype=torch.float64)
    )
    assert plan.num_halo == 2 and plan.num_local == 5
    assert plan.halo_index.tolist() == [3, 4]


def test_what_one_rank_sends_is_what_the_other_receives() -> None:
    plans = tiny_plans()
    for a, plan_a in enumerate(plans):
        offset = 0
        for b, count in enumerate(plan_a.send_counts):
            plan_b = plans[b]
            start = plan_b.num_inner + sum(plan_b.halo_counts[:a])
            sent = plan_a.global_ids[plan_a.send_index[offset : offset + count]]
            received = plan_b.global_ids[start : start + plan_b.halo_counts[a]]
            assert sent.tolist() == received.tolist(), (a, b)
            offset += count
    # Both ends of every message see the same importance (no metadata needed).
    for a, plan_a in enumerate(plans):
        b = 1 - a
        sent = plan_a.send_index
        received = plans[b].halo_index
        assert torch.equal(plan_a.importance[sent], plans[b].importance[received])


def _plan(**overrides) -> HaloPlan:
    fields = {
        "rank": 0,
        "num_parts": 2,
        "num_inner": 3,
        "send_index": torch.tensor([0, 2]),
        "send_counts": [0, 2],
        "halo_counts": [0, 2],
        "global_ids": torch.tensor([0, 1, 2, 3, 4]),
        "importance": torch.zeros(5),
    }
    fields.update(overrides)
    return HaloPlan(**fields)


def test_a_hand_built_plan_equals_the_derived_one() -> None:
    derived = tiny_plans()[0]
    built = _plan(importance=derived.importance)
    for f in dataclasses.fields(HaloPlan):
        a, b = getattr(built, f.name), getattr(derived, f.name)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, f.name


def test_a_rank_without_peers_has_an_empty_halo() -> None:
    plan = _plan(
        num_parts=1,
        num_inner=4,
        send_index=torch.zeros(0, dtype=torch.long),
        send_counts=[0],
        halo_counts=[0],
        global_ids=torch.arange(4),
        importance=torch.zeros(4),
    )
    assert plan.num_halo == 0 and plan.num_local == 4
    assert plan.halo_index.numel() == 0


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"rank": 2}, r"`rank` in \[0, 2\) but got 2"),
        ({"rank": -1}, r"`rank` in \[0, 2\) but got -1"),
        ({"send_counts": [2]}, r"`send_counts` to hold 2 non-negative counts but got \[2\]"),
        (
            {"halo_counts": [3, -1]},
            r"`halo_counts` to hold 2 non-negative counts but got \[3, -1\]",
        ),
        (
            {"send_index": torch.tensor([0, 1, 2])},
            r"`send_index` to hold sum\(send_counts\) = 2 ids but got 3",
        ),
    ],
)
def test_inconsistent_plans_are_rejected(overrides, match) -> None:
    with pytest.raises(ValueError, match="^HaloPlan: expected " + match):
        _plan(**overrides)


def test_plan_is_immutable() -> None:
    plan = _plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.rank = 1  # type: ignore[misc]
