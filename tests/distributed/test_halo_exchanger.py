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


def test_setup_warms_the_quantiser_up_once_with_a_policy(monkeypatch) -> None:  # noqa: ANN001
    import importlib

    from lightgraph.quant import FixedBits

    quantize = importlib.import_module("lightgraph.functional.quantize")
    calls = []
    monkeypatch.setattr(quantize, "warmup", lambda: calls.append(1) or 0.0, raising=False)
    HaloExchanger().setup()
    assert calls == []
    HaloExchanger(policy=FixedBits(4)).setup()
    assert calls == [1]
