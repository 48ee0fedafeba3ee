import pytest

from lightgraph.functional import ExchangeStats


def test_totals_and_reset() -> None:
    s = ExchangeStats()
    s.record("train", "layer0", "forward", 100)
    s.record("train", "layer0", "forward", 20)
    s.record("train", "layer1", "backward", 7)
    s.record("train", "layer1", "backward", 3, kind="scale")
    s.record("val", "layer0", "forward", 50)
    assert s.total() == 180
    assert s.total("train") == 130
    assert s.total("train", direction="backward") == 10
    assert s.total(kind="scale") == 3
    assert s.by_layer("train") == {
        ("layer0", "forward", "data"): 120,
        ("layer1", "backward", "data"): 7,
        ("layer1", "backward", "scale"): 3,
    }
    s.reset("val")
    assert s.total("val") == 0 and s.total() == 130
    s.reset()
    assert s.total() == 0


def test_bad_direction() -> None:
    with pytest.raises(
        ValueError, match="`direction` in \\('forward', 'backward'\\) but got 'sideways'"
    ):
        ExchangeStats().record("train", "l", "sideways", 1)
