import pytest
import torch

from lightgraph.data import build_partition_plans
from lightgraph.data.partition_plan import boundary_importance
from lightgraph.quant import DegreeAwareBits
from tests.graphs import tricky_graph


def test_importance_is_the_in_degree_percentile_among_boundary_nodes() -> None:
    deg = torch.tensor([5, 1, 3, 3, 9, 0])
    p = boundary_importance(deg, torch.tensor([0, 1, 2, 3, 1]))
    # pool {0, 1, 2, 3} with degrees 5, 1, 3, 3: ranks 3, 0, 2, 2 of 3
    torch.testing.assert_close(p, torch.tensor([1.0, 0.0, 2 / 3, 2 / 3, 0.0, 0.0]))


@pytest.mark.parametrize(
    "base,expected",
    [
        (1, [1, 1, 2, 4, 8, 8]),  # candidates {1, 2, 4, 8}: quarter-wide importance bands
        (2, [2, 2, 2, 4, 8, 8]),  # candidates {2, 4, 8}: thirds
        (4, [4, 4, 4, 8, 8, 8]),
        (8, [8, 8, 8, 8, 8, 8]),  # base 8: everyone gets 8 bits regardless of importance
    ],
)
def test_levels_follow_importance_and_base(base: int, expected: list[int]) -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    plan.importance = torch.tensor([0.0, 0.2, 0.3, 0.6, 0.8, 1.0])
    bits = DegreeAwareBits(base_bits=base).row_bits(plan, torch.arange(6), "l", "forward")
    assert bits.tolist() == expected


def test_more_important_nodes_never_get_fewer_bits() -> None:
    data, part = tricky_graph(4)
    for plan in build_partition_plans(data, part, 4):
        bits = DegreeAwareBits(1).row_bits(plan, plan.send_index, "l", "forward")
        imp = plan.importance[plan.send_index]
        order = torch.argsort(imp)
        assert bool((bits[order][1:] >= bits[order][:-1]).all())


def test_base_bits_is_validated() -> None:
    with pytest.raises(
        ValueError,
        match="DegreeAwareBits: expected `base_bits` to be one of \\(1, 2, 4, 8\\) but got 3",
    ):
        DegreeAwareBits(3)
    policy = DegreeAwareBits(1)
    with pytest.raises(ValueError, match="got 16"):
        policy.base_bits = 16
