import pytest
import torch

from lightgraph.data import PartitionPlan
from lightgraph.quant import FixedBits
from tests.graphs import tricky_graph


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_every_row_gets_the_base_width(bits: int) -> None:
    plan = PartitionPlan.from_data(tricky_graph(1)[0])
    policy = FixedBits(bits)
    assert policy.row_bits(plan, torch.arange(7), "l", "backward").tolist() == [bits] * 7
    policy.base_bits = 2
    assert set(policy.row_bits(plan, torch.arange(3), "l", "forward").tolist()) == {2}
    assert repr(policy) == "FixedBits(base_bits=2)"


def test_rejects_other_widths() -> None:
    with pytest.raises(
        ValueError, match="FixedBits: expected `base_bits` to be one of \\(1, 2, 4, 8\\) but got 32"
    ):
        FixedBits(32)
