import pytest
import torch

from lightgraph.data import build_partition_plans
from lightgraph.quant import RandomBits
from tests.graphs import tricky_graph


def test_both_ends_agree_and_the_draw_is_uniform() -> None:
    data, part = tricky_graph(3, num_nodes=3000)
    plans = build_partition_plans(data, part, 3)
    policy = RandomBits(seed=4)
    by_node: dict[int, int] = {}
    for p in plans:
        sent = policy.row_bits(p, p.send_index, "layer1", "forward")
        recv = policy.row_bits(p, torch.arange(p.num_inner, p.num_local), "layer1", "forward")
        for ids, bits in ((p.global_ids[p.send_index], sent), (p.global_ids[p.num_inner :], recv)):
            for node, b in zip(ids.tolist(), bits.tolist(), strict=True):
                assert by_node.setdefault(node, b) == b  # sender and receiver see the same width
    counts = torch.bincount(torch.tensor(list(by_node.values())), minlength=9)[[2, 4, 8]].double()
    assert counts.sum() > 1000
    expected = counts.sum() / 3
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 13.8  # chi-square, 2 degrees of freedom, p = 0.001


def test_layers_directions_and_redraws_differ() -> None:
    data, part = tricky_graph(2, num_nodes=2000)
    plan = build_partition_plans(data, part, 2)[0]
    policy = RandomBits()
    nodes = torch.arange(plan.num_inner)
    a = policy.row_bits(plan, nodes, "layer0", "forward")
    assert not torch.equal(a, policy.row_bits(plan, nodes, "layer1", "forward"))
    assert not torch.equal(a, policy.row_bits(plan, nodes, "layer0", "backward"))
    assert torch.equal(a, policy.row_bits(plan, nodes, "layer0", "forward"))
    policy.redraw()
    assert not torch.equal(a, policy.row_bits(plan, nodes, "layer0", "forward"))
    assert set(a.tolist()) == {2, 4, 8}


def test_bad_choices() -> None:
    with pytest.raises(
        ValueError, match="RandomBits: expected `choices` to be one of \\(1, 2, 4, 8\\) but got 3"
    ):
        RandomBits(choices=(2, 3))
    with pytest.raises(ValueError, match="non-empty `choices`"):
        RandomBits(choices=())
