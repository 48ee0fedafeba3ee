"""LossDescentRate: Sylvie's running average, LDR sign convention and the Eq. 5 comparison."""

from __future__ import annotations

import json

import pytest

from lightgraph.functional.loss_descent_rate import LossDescentRate


def test_running_average_and_ldr_match_a_hand_computation() -> None:
    tracker = LossDescentRate(smoothing=0.9, window=5)
    # F_0 = L_0 = 2.0 (initialisation); LDR_0 is undefined.
    assert tracker.update(2.0, 0.5) is None
    assert tracker.smoothed == pytest.approx(2.0)
    assert tracker.ldr is None and tracker.descent_rate is None
    # F_1 = 0.9 * 2.0 + 0.1 * 1.0 = 1.9;  LDR_1 = (1.9 - 2.0) / 0.5 = -0.2
    assert tracker.update(1.0, 0.5) == pytest.approx(-0.2)
    assert tracker.smoothed == pytest.approx(1.9)
    # F_2 = 0.9 * 1.9 + 0.1 * 0.5 = 1.76;  LDR_2 = (1.76 - 1.9) / 2.0 = -0.07
    assert tracker.update(0.5, 2.0) == pytest.approx(-0.07)
    assert tracker.smoothed == pytest.approx(1.76)
    assert tracker.descent_rate == pytest.approx(0.07)
    assert tracker.t == 2


def test_sign_convention_falling_loss_gives_negative_ldr_positive_descent_rate() -> None:
    tracker = LossDescentRate(smoothing=0.5, window=1)
    tracker.update(1.0, 1.0)
    ldr = tracker.update(0.5, 1.0)
    assert ldr is not None and ldr < 0
    assert tracker.ldr == ldr
    assert tracker.descent_rate is not None and tracker.descent_rate > 0
    assert tracker.descent_rate == -ldr
    # A rising loss: positive LDR, negative descent rate.
    assert tracker.update(3.0, 1.0) > 0
    assert tracker.descent_rate < 0


def test_degraded_truth_table() -> None:
    # smoothing=0 makes F_t = L_t, so descent_rate_t = (L_{t-1} - L_t) / et_t.
    tracker = LossDescentRate(smoothing=0.0, window=2)
    losses = [10.0, 8.0, 6.0, 5.0, 3.0, 2.0, 1.5, 1.5, 1.0]
    times = [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0]
    # descent rates t=1..8: 2, 2, 1, 2, 2 (=1/0.5), 0.5, 0, 0.5
    # degraded(t) = rate_t < rate_{t-2} for t > 2:
    #   t=3: 1 < 2 True; t=4: 2 < 2 False; t=5: 2 < 1 False; t=6: 0.5 < 2 True;
    #   t=7: 0 < 2 True; t=8: 0.5 < 0.5 False (equal: not degraded, Eq. 5's ">=" branch)
    expected = [None, None, None, True, False, False, True, True, False]
    got = []
    for loss, seconds in zip(losses, times, strict=True):
        tracker.update(loss, seconds)
        got.append(tracker.degraded())
    assert got == expected


def test_degraded_equivalent_to_signed_ldr_comparison() -> None:
    tracker = LossDescentRate(smoothing=0.9, window=3)
    ldrs = []
    losses = [5.0, 4.0, 3.5, 3.4, 3.0, 2.9, 2.85, 2.0, 1.99, 1.98, 1.5, 1.49]
    for t, loss in enumerate(losses):
        ldrs.append(tracker.update(loss, 1.0 + 0.1 * (t % 3)))
        if t > 3:
            assert tracker.degraded() == (ldrs[t] > ldrs[t - 3])


@pytest.mark.parametrize("window", [1, 3, 5])
def test_none_until_more_than_window_epochs(window: int) -> None:
    tracker = LossDescentRate(smoothing=0.5, window=window)
    assert tracker.degraded() is None and tracker.t == -1
    for t in range(window + 1):
        tracker.update(10.0 - t, 1.0)
        assert tracker.t == t
        assert tracker.degraded() is None  # t <= window
    tracker.update(0.0, 1.0)
    assert tracker.degraded() is not None  # t = window + 1
    assert len(tracker.state_dict()["ldr"]) == window + 1


def test_state_round_trip_continues_identically() -> None:
    losses = [3.0, 2.5, 2.0, 1.8, 1.7, 1.5, 1.45, 1.2, 1.19, 1.1, 0.9]
    straight = LossDescentRate(smoothing=0.8, window=2)
    first = LossDescentRate(smoothing=0.8, window=2)
    for loss in losses[:6]:
        straight.update(loss, 0.7)
        first.update(loss, 0.7)
    state = json.loads(json.dumps(first.state_dict()))  # plain Python types only
    second = LossDescentRate(smoothing=0.8, window=2)
    second.load_state_dict(state)
    assert second.state_dict() == first.state_dict()
    for loss in losses[6:]:
        assert second.update(loss, 0.7) == straight.update(loss, 0.7)
        assert second.degraded() == straight.degraded()
    assert second.state_dict() == straight.state_dict()


def test_load_state_with_other_settings_is_an_error() -> None:
    state = LossDescentRate(smoothing=0.9, window=5).state_dict()
    with pytest.raises(ValueError, match="saved with window=5"):
        LossDescentRate(smoothing=0.9, window=3).load_state_dict(state)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"window": 0}, "LossDescentRate: expected `window` to be an integer >= 1 but got 0"),
        ({"window": 2.5}, "`window` to be an integer >= 1 but got 2.5"),
        ({"smoothing": 1.0}, r"LossDescentRate: expected `smoothing` in \[0, 1\) but got 1.0"),
        ({"smoothing": -0.1}, r"`smoothing` in \[0, 1\) but got -0.1"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        LossDescentRate(**kwargs)


def test_bad_updates() -> None:
    tracker = LossDescentRate()
    with pytest.raises(ValueError, match="finite `loss` but got nan"):
        tracker.update(float("nan"), 1.0)
    with pytest.raises(ValueError, match="`epoch_time` > 0 but got 0.0"):
        tracker.update(1.0, 0.0)
    assert tracker.t == -1  # nothing recorded


SLOWS = "more_precision_when_descent_slows"
SPEEDS_UP = "more_precision_when_descent_speeds_up"


def test_more_precision_truth_table_for_both_readings() -> None:
    # The script of test_degraded_truth_table: descent rates t=1..8 are 2, 2, 1, 2, 2, 0.5,
    # 0, 0.5 and window 2 compares rate_t with rate_{t-2} for t > 2:
    #   t=3: 1 vs 2 | t=4: 2 vs 2 (tie) | t=5: 2 vs 1 | t=6: 0.5 vs 2 | t=7: 0 vs 2
    #   t=8: 0.5 vs 0.5 (tie)
    # slows: more precision iff rate_t < rate_{t-2}; speeds up: iff rate_t > rate_{t-2};
    # ties relax under both (Eq. 5's ">=" branch).
    losses = [10.0, 8.0, 6.0, 5.0, 3.0, 2.0, 1.5, 1.5, 1.0]
    times = [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0]
    expected = {
        SLOWS: [None, None, None, True, False, False, True, True, False],
        SPEEDS_UP: [None, None, None, False, False, True, False, False, False],
    }
    for reading, table in expected.items():
        tracker = LossDescentRate(smoothing=0.0, window=2, reading=reading)
        got = []
        for loss, seconds in zip(losses, times, strict=True):
            tracker.update(loss, seconds)
            got.append(tracker.more_precision())
        assert got == table, reading


def test_default_reading_and_repr() -> None:
    tracker = LossDescentRate()
    assert tracker.reading == SLOWS
    assert repr(tracker) == (
        "LossDescentRate(smoothing=0.9, window=5, reading='more_precision_when_descent_slows', t=-1)"
    )


def test_state_keeps_the_reading() -> None:
    tracker = LossDescentRate(smoothing=0.5, window=1, reading=SPEEDS_UP)
    for loss in (4.0, 3.0, 1.0, 0.5):
        tracker.update(loss, 1.0)
    state = json.loads(json.dumps(tracker.state_dict()))
    assert state["reading"] == SPEEDS_UP
    restored = LossDescentRate(smoothing=0.5, window=1, reading=SPEEDS_UP)
    restored.load_state_dict(state)
    assert restored.more_precision() == tracker.more_precision()
    with pytest.raises(ValueError, match=f"reading='{SPEEDS_UP}' but this tracker has"):
        LossDescentRate(smoothing=0.5, window=1, reading=SLOWS).load_state_dict(state)
    del state["reading"]  # saved before the option existed: the slows reading
    with pytest.raises(ValueError, match=f"reading='{SLOWS}' but this tracker has"):
        LossDescentRate(smoothing=0.5, window=1, reading=SPEEDS_UP).load_state_dict(state)
    LossDescentRate(smoothing=0.5, window=1, reading=SLOWS).load_state_dict(state)


def test_bad_reading() -> None:
    with pytest.raises(
        ValueError,
        match=r"LossDescentRate: expected `reading` to be one of \("
        r"'more_precision_when_descent_slows', 'more_precision_when_descent_speeds_up'\) "
        r"but got 'paper'",
    ):
        LossDescentRate(reading="paper")
