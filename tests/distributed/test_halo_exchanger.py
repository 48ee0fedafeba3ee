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


def test_rng_state_round_trips_and_recreates_the_lazy_generator() -> None:
    import io

    cpu = torch.device("cpu")
    exchanger = HaloExchanger(seed=5)
    assert exchanger.rng_state() == {"generator": None}  # created at the first quantised row
    torch.rand(7, generator=exchanger._rng(cpu))  # quantisation noise drawn so far
    buffer = io.BytesIO()
    torch.save(exchanger.rng_state(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)  # as a checkpoint holds it
    expected = torch.rand(5, generator=exchanger._rng(cpu))
    # A fresh exchanger (resumed run: no generator yet) continues the same noise.
    resumed = HaloExchanger(seed=5)
    resumed.set_rng_state(state)
    assert torch.equal(torch.rand(5, generator=resumed._rng(cpu)), expected)
    # Without the state it would start over from the seed: the round trip can fail.
    assert not torch.equal(torch.rand(5, generator=HaloExchanger(seed=5)._rng(cpu)), expected)
    # None returns to the freshly seeded generator.
    resumed.set_rng_state({"generator": None})
    first = torch.rand(5, generator=resumed._rng(cpu))
    assert torch.equal(first, torch.rand(5, generator=HaloExchanger(seed=5)._rng(cpu)))


def test_set_rng_state_rejects_other_states() -> None:
    with pytest.raises(
        TypeError,
        match=r"HaloExchanger.set_rng_state: expected `state` to be a mapping with the keys "
        r"\['generator'\] \(from HaloExchanger.rng_state\(\)\) but got list",
    ):
        HaloExchanger().set_rng_state([1])  # type: ignore[arg-type]
