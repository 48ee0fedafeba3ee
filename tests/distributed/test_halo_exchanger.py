import pytest
import torch

from lightgraph.data.partition import build_partition_plans
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
    # created at the first quantised row; nothing carried before the first training exchange
    assert exchanger.rng_state() == {"generator": None, "buffers": []}
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
    # None returns to the freshly seeded generator (a state saved without "buffers", as
    # before the exchanger carried them, restores the generator only).
    resumed.set_rng_state({"generator": None})
    first = torch.rand(5, generator=resumed._rng(cpu))
    assert torch.equal(first, torch.rand(5, generator=HaloExchanger(seed=5)._rng(cpu)))


def test_set_rng_state_rejects_other_states() -> None:
    with pytest.raises(
        TypeError,
        match=r"HaloExchanger.set_rng_state: expected `state` to be a mapping with the keys "
        r"\['buffers', 'generator'\] \(from HaloExchanger.rng_state\(\)\) but got list",
    ):
        HaloExchanger().set_rng_state([1])  # type: ignore[arg-type]


def _carried(**changes: object) -> dict:
    entry = {
        "layer": "conv0",
        "direction": "forward",
        "rows": torch.zeros(2, 3),
        "send_index": torch.tensor([0, 1]),
        "send_counts": [0, 2],
        "recv_index": None,
        "recv_counts": [0, 2],
        "send_bits": None,
        "recv_bits": None,
        "num_halo": 2,
    }
    entry.update(changes)
    return {"generator": None, "buffers": [entry]}


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ({"generator": None, "buffers": {}}, TypeError, r"state\['buffers'\] to be a list"),
        (
            {"generator": None, "buffers": [{"layer": "conv0"}]},
            TypeError,
            r"state\['buffers'\]\[0\] to be a mapping with the keys \['direction', 'layer', ",
        ),
        (_carried(direction="sideways"), ValueError, r".* a direction \('forward' or 'backward'\)"),
        (_carried(rows=None), TypeError, r"state\['buffers'\]\[0\]\['rows'\] to be a tensor but"),
        (
            _carried(send_bits=[1]),
            TypeError,
            r".*\['send_bits'\] to be a tensor or None but got list",
        ),
        (
            _carried(recv_counts=2),
            TypeError,
            r".*\['recv_counts'\] to be a list of ints but got int",
        ),
    ],
)
def test_set_rng_state_rejects_malformed_carried_rows(state, error, match) -> None:  # noqa: ANN001
    exchanger = HaloExchanger()
    with pytest.raises(error, match=f"HaloExchanger.set_rng_state: expected {match}"):
        exchanger.set_rng_state(state)
    assert not exchanger._buffers
    exchanger.set_rng_state(_carried())  # well-formed: carried into the next epoch
    assert list(exchanger._buffers) == [("conv0", "forward")]
    assert exchanger.rng_state()["buffers"][0]["num_halo"] == 2


def test_restored_rows_move_to_the_exchange_device_at_their_first_use() -> None:
    from lightgraph.distributed.halo_messages import HaloMessages
    from lightgraph.functional.halo_exchange import Ready

    exchanger = HaloExchanger(mode="async")
    exchanger.set_rng_state(_carried(rows=torch.arange(6.0).reshape(2, 3)))
    # This epoch's layout lives on the plan's device ("meta" stands in for a GPU here).
    device = torch.device("meta")
    msgs = HaloMessages(torch.tensor([0, 1], device=device), [0, 2], None, [0, 2], None, None, 2)
    started = []

    def start() -> Ready:
        started.append(1)
        return Ready(torch.zeros(2, 3, device=device))

    stale, used = exchanger.transfer(("conv0", "forward"), start, msgs)
    assert started == [1]  # this epoch's rows are sent for the next one ...
    assert stale.device == device and used.send_index.device == device  # ... the carried used
    assert exchanger._buffers[("conv0", "forward")][1] is msgs
