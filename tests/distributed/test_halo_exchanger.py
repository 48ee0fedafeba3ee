import pytest
import torch

from lightgraph.data import build_partition_plans
from lightgraph.distributed import HaloExchanger
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph


def _fetch(rank: int, world: int) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    exchanger = HaloExchanger(transport="ring")
    x = data.x[plan.global_ids[: plan.num_inner]]
    out = exchanger(x, plan, stage="train", layer="l")
    return {"out": out, "ids": plan.global_ids, "bytes": exchanger.stats.total("train", "forward")}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_fetches_the_global_rows_of_the_halo() -> None:
    data, _ = tricky_graph(3)
    for r in run_distributed(_fetch, 3, timeout=50):
        assert torch.equal(r["out"], data.x[r["ids"]])
        assert r["bytes"] > 0


def test_bad_transport() -> None:
    with pytest.raises(ValueError, match="HaloExchanger: expected `transport`"):
        HaloExchanger(transport="pigeon")
