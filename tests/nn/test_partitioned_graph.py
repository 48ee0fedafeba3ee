import pytest
import torch

from lightgraph.data.partition import build_partition_plans
from lightgraph.nn import PartitionedGraph
from tests.graphs import tricky_graph


def test_exchange_is_identity_on_one_partition() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    assert graph.exchange(data.x) is data.x
    assert graph.num_inner == data.x.size(0)
    assert "halo=0" in repr(graph)


def test_exchanger_receives_plan_stage_and_layer() -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    calls = []

    class Fake:
        def __call__(self, x, p, stage, layer):
            calls.append((p.rank, stage, layer))
            return torch.cat([x, x.new_zeros(p.num_halo, x.size(1))])

        def overlaps(self, stage):
            return False

        def set_aggregation(self, layer, aggregation):
            pass

    graph = PartitionedGraph(plan, Fake(), stage="val")
    out = graph.exchange(plan.x, layer="layer3")
    assert out.shape == (plan.num_local, data.x.size(1))
    assert calls == [(0, "val", "layer3")]


def test_missing_exchanger_is_explained() -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[1]
    with pytest.raises(ValueError, match="strategy='boundary_exchange', devices=2"):
        PartitionedGraph(plan)
