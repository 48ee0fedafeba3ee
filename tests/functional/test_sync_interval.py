"""SyncIntervalSchedule: UniTG's Modality Collaborator Δt ladder (thesis §5.3.3) on scripted losses.

Every expected trajectory is computed here by :func:`reference`, a few lines of plain
arithmetic written from the thesis text (not from the implementation):

* :math:`F_0 = L_0`, :math:`F_j = 0.8 F_{j-1} + 0.2 L_j`;
* epoch :math:`j \\ge 1` is a fall when :math:`F_j < F_{j-1}`; a streak counts consecutive
  falls and restarts at 0 after a non-fall or after reaching ``patience`` (20);
* reaching ``patience`` moves to the next ladder fraction (the last one sticks);
* :math:`\\Delta t = \\max(1, \\operatorname{round}(r J))` epochs; the documented order lets a
  step count for the same epoch's decision: sync when the epochs since the last sync (or
  since the start) reach the :math:`\\Delta t` after the step.

The main case is also written out by hand: J = 100, a loss that falls every epoch. F_0 is
the first loss, so epochs 1..20 are the first 20 falls and the ladder steps at epochs 20,
40, 60 (and the streak that completes at 80 changes nothing: last level):

    epochs   0-19  20-39  40-59  60-99
    Δt        30     20     10      2

Syncs: 21 epochs have passed at epoch 20 (>= 20): sync at 20; 20 epochs later the step to
10 makes the count 20 >= 10: sync at 40, then 50; the step to 2 at 60 finds 10 >= 2: sync
at 60, then every second epoch: 62, 64, ..., 98.
"""

from __future__ import annotations

import json
import math

import pytest

from lightgraph.functional import SyncIntervalSchedule
from lightgraph.functional.loss_descent_rate import LossDescentRate

LADDER = (0.3, 0.2, 0.1, 0.02)


def reference(
    losses: list[float],
    total_epochs: int,
    ladder: tuple[float, ...] = LADDER,
    patience: int = 20,
    smoothing: float = 0.8,
) -> list[tuple[int, int, bool]]:
    """``(epoch, interval, synced)`` per epoch, from the thesis' rules (see the module docstring)."""
    intervals = [max(1, round(r * total_epochs)) for r in ladder]
    f_prev, streak, level, since, out = None, 0, 0, 0, []
    for j, loss in enumerate(losses):
        f = loss if f_prev is None else smoothing * f_prev + (1 - smoothing) * loss
        streak = streak + 1 if f_prev is not None and f < f_prev else 0
        f_prev = f
        if streak == patience:
            streak, level = 0, min(level + 1, len(intervals) - 1)
        since += 1
        synced = since >= intervals[level]
        if synced:
            since = 0
        out.append((j, intervals[level], synced))
    return out


def run(schedule: SyncIntervalSchedule, losses: list[float], start: int = 0) -> list[bool]:
    return [schedule.update(start + j, loss) for j, loss in enumerate(losses)]


def sync_epochs(history: list[tuple[int, int, bool]]) -> list[int]:
    return [epoch for epoch, _, synced in history if synced]


FALLING = [100.0 - j for j in range(100)]


# ----------------------------------------------------------------------------- trajectories
def test_falling_loss_steps_at_epochs_20_40_60() -> None:
    schedule = SyncIntervalSchedule(total_epochs=100)
    assert schedule.intervals == (30, 20, 10, 2) and schedule.interval == 30
    decisions = run(schedule, FALLING)
    expected_intervals = [30] * 20 + [20] * 20 + [10] * 20 + [2] * 40
    expected_syncs = [20, 40, 50, *range(60, 100, 2)]
    assert [interval for _, interval, _ in schedule.history] == expected_intervals
    assert sync_epochs(schedule.history) == expected_syncs
    assert [j for j, d in enumerate(decisions) if d] == expected_syncs
    assert schedule.history == reference(FALLING, 100)
    assert schedule.level == 3 and schedule.interval == 2
    # The streak that completed at epoch 80 restarted the counter: falls at 81..99.
    assert schedule.streak == 19


def test_level_changes_exactly_when_the_reference_steps() -> None:
    schedule = SyncIntervalSchedule(total_epochs=100)
    levels = []
    for j, loss in enumerate(FALLING):
        schedule.update(j, loss)
        levels.append(schedule.level)
    steps = [j for j in range(1, 100) if levels[j] != levels[j - 1]]
    assert steps == [20, 40, 60]


def test_running_average_is_the_shared_ldr_tracker() -> None:
    schedule = SyncIntervalSchedule(total_epochs=100)
    assert isinstance(schedule.tracker, LossDescentRate)
    assert schedule.tracker.smoothing == 0.8
    losses = [5.0, 3.0, 4.0, 1.0]
    f = None
    for j, loss in enumerate(losses):
        schedule.update(j, loss)
        f = loss if f is None else 0.8 * f + 0.2 * loss
        assert schedule.smoothed_loss == pytest.approx(f)
    assert schedule.tracker.t == len(losses) - 1


def test_noisy_loss_without_20_falls_keeps_the_first_interval() -> None:
    # A falling trend with a jump every 10th epoch: F rises at every jump.
    losses = [100.0 - j + (30.0 if j % 10 == 0 else 0.0) for j in range(100)]
    f_values = [losses[0]]
    for loss in losses[1:]:
        f_values.append(0.8 * f_values[-1] + 0.2 * loss)
    rises = [j for j in range(1, 100) if not f_values[j] < f_values[j - 1]]
    assert rises == list(range(10, 100, 10))  # at most 9 falls in a row
    schedule = SyncIntervalSchedule(total_epochs=100)
    run(schedule, losses)
    assert {interval for _, interval, _ in schedule.history} == {30}
    assert sync_epochs(schedule.history) == [29, 59, 89]  # every 30 epochs from the start
    assert schedule.level == 0
    assert schedule.history == reference(losses, 100)


def test_a_rise_resets_the_streak() -> None:
    # Falls at epochs 1..15, a rise at 16, falls again from 17: the first step is at 16 + 20.
    losses = [100.0 - j for j in range(16)] + [200.0] + [80.0 - j for j in range(83)]
    schedule = SyncIntervalSchedule(total_epochs=100)
    levels = []
    for j, loss in enumerate(losses):
        schedule.update(j, loss)
        levels.append(schedule.level)
        if j == 15:
            assert schedule.streak == 15
        if j == 16:
            assert schedule.streak == 0
    assert [j for j in range(1, 100) if levels[j] != levels[j - 1]] == [36, 56, 76]
    assert schedule.history == reference(losses, 100)


def test_flat_running_average_is_not_a_fall() -> None:
    # smoothing = 0: F_j = L_j exactly; an unchanged loss resets the streak.
    losses = [10.0, 9.0, 8.0, 8.0, 7.0, 6.0, 5.0]
    schedule = SyncIntervalSchedule(total_epochs=10, patience=3, smoothing=0.0)
    streaks = []
    for j, loss in enumerate(losses):
        schedule.update(j, loss)
        streaks.append(schedule.streak)
    assert streaks == [0, 1, 2, 0, 1, 2, 0]  # 3 falls at epoch 6: step, counter restarts
    assert schedule.level == 1


def test_last_level_sticks() -> None:
    schedule = SyncIntervalSchedule(total_epochs=100, patience=5)
    run(schedule, FALLING)
    levels = [interval for _, interval, _ in schedule.history]
    # Steps at 5, 10, 15; the later streaks (20, 25, ...) keep the last interval.
    assert levels == [30] * 5 + [20] * 5 + [10] * 5 + [2] * 85
    assert schedule.level == 3
    assert schedule.history == reference(FALLING, 100, patience=5)
    single = SyncIntervalSchedule(total_epochs=100, ladder=[0.05], patience=2)
    run(single, FALLING)
    assert {interval for _, interval, _ in single.history} == {5}
    assert sync_epochs(single.history) == list(range(4, 100, 5))


def test_step_counts_for_the_same_epochs_decision() -> None:
    # patience 5: steps at epochs 5 (-> 20), 10 (-> 10), 15 (-> 2).
    schedule = SyncIntervalSchedule(total_epochs=100, patience=5)
    run(schedule, FALLING[:20])
    history = schedule.history
    assert history[5] == (5, 20, False)  # 6 epochs since the start < 20
    assert history[10] == (10, 10, True)  # 11 epochs >= the new 10: sync at once
    assert history[15] == (15, 2, True)  # 5 epochs since the sync at 10 >= the new 2
    assert sync_epochs(history) == [10, 15, 17, 19]


def test_syncs_are_exactly_every_interval() -> None:
    for total_epochs in (7, 10, 33, 100, 250):
        for losses in (FALLING, [1.0 + j for j in range(100)]):
            schedule = SyncIntervalSchedule(total_epochs=total_epochs, patience=7)
            run(schedule, losses)
            history = schedule.history
            assert history == reference(losses, total_epochs, patience=7)
            previous = -1
            for epoch, interval, synced in history:
                if synced:
                    stepped = any(
                        history[e][1] != history[e - 1][1]
                        for e in range(max(previous, 0) + 1, epoch + 1)
                    )
                    gap = epoch - previous
                    # Without a step in between: exactly Δt; a step can make a sync overdue.
                    assert gap == interval if not stepped else gap >= interval
                    previous = epoch
            assert 99 - previous < history[-1][1]  # no overdue sync left at the end


@pytest.mark.parametrize(
    "total_epochs,expected",
    [(1, (1, 1, 1, 1)), (10, (3, 2, 1, 1)), (100, (30, 20, 10, 2)), (1000, (300, 200, 100, 20))],
)
def test_intervals_in_epochs(total_epochs: int, expected: tuple[int, ...]) -> None:
    assert SyncIntervalSchedule(total_epochs=total_epochs).intervals == expected


# ----------------------------------------------------------------------------- state
def test_state_dict_round_trip_mid_run_continues_identically() -> None:
    losses = [100.0 - j for j in range(16)] + [200.0] + [80.0 - j for j in range(83)]
    straight = SyncIntervalSchedule(total_epochs=100)
    run(straight, losses)

    first = SyncIntervalSchedule(total_epochs=100)
    run(first, losses[:47])
    state = json.loads(json.dumps(first.state_dict()))  # plain Python
    resumed = SyncIntervalSchedule(total_epochs=100)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == first.state_dict()
    decisions = run(resumed, losses[47:], start=47)
    assert resumed.history == straight.history
    assert decisions == [synced for _, _, synced in straight.history[47:]]
    assert resumed.state_dict() == straight.state_dict()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"total_epochs": 200}, "total_epochs=100.*total_epochs=200"),
        ({"ladder": (0.5, 0.1)}, r"ladder=\[0.3, 0.2, 0.1, 0.02\].*ladder=\[0.5, 0.1\]"),
        ({"patience": 10}, "patience=20.*patience=10"),
        ({"smoothing": 0.9}, "smoothing=0.8.*smoothing=0.9"),
    ],
)
def test_load_state_dict_rejects_other_settings(kwargs, match) -> None:
    schedule = SyncIntervalSchedule(total_epochs=100)
    run(schedule, FALLING[:5])
    other = SyncIntervalSchedule(**{"total_epochs": 100, **kwargs})
    with pytest.raises(
        ValueError, match=f"SyncIntervalSchedule: the state was saved with .*{match}"
    ):
        other.load_state_dict(schedule.state_dict())


def test_load_state_dict_rejects_broken_state() -> None:
    schedule = SyncIntervalSchedule(total_epochs=100)
    run(schedule, FALLING[:5])
    state = schedule.state_dict()
    with pytest.raises(KeyError, match=r"missing the keys \['level'\]"):
        SyncIntervalSchedule(total_epochs=100).load_state_dict(
            {k: v for k, v in state.items() if k != "level"}
        )
    with pytest.raises(ValueError, match="inconsistent state: level=7"):
        SyncIntervalSchedule(total_epochs=100).load_state_dict({**state, "level": 7})


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"total_epochs": 0}, "expected `total_epochs` to be a positive integer but got 0"),
        ({"total_epochs": 2.5}, "expected `total_epochs` to be a positive integer but got 2.5"),
        (
            {"ladder": (0.2, 0.3)},
            r"expected `ladder` to be a non-empty, strictly decreasing sequence of fractions in "
            r"\(0, 1\] but got \(0.2, 0.3\) \(ladder\[1\]=0.3 is not below ladder\[0\]=0.2\)",
        ),
        (
            {"ladder": (0.3, 0.3)},
            r"expected `ladder` .* \(ladder\[1\]=0.3 is not below ladder\[0\]=0.3",
        ),
        (
            {"ladder": (1.5, 0.1)},
            r"expected `ladder\[0\]` to be a fraction in \(0, 1\] but got 1.5",
        ),
        (
            {"ladder": (0.3, 0.0)},
            r"expected `ladder\[1\]` to be a fraction in \(0, 1\] but got 0.0",
        ),
        (
            {"ladder": (0.3, -0.1)},
            r"expected `ladder\[1\]` to be a fraction in \(0, 1\] but got -0.1",
        ),
        ({"ladder": ()}, r"expected `ladder` to be a non-empty.*but got \(\)"),
        ({"ladder": "0.3"}, r"expected `ladder` to be a non-empty.*but got '0.3'"),
        ({"patience": 0}, "expected `patience` to be a positive integer but got 0"),
        ({"smoothing": 1.0}, r"expected `smoothing` in \[0, 1\) but got 1.0"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=f"SyncIntervalSchedule: {match}"):
        SyncIntervalSchedule(**{"total_epochs": 100, **kwargs})


def test_bad_updates() -> None:
    schedule = SyncIntervalSchedule(total_epochs=100)
    schedule.update(0, 1.0)
    with pytest.raises(ValueError, match="expected `epoch` > 0 .* but got 0"):
        schedule.update(0, 1.0)
    with pytest.raises(ValueError, match="expected `epoch` to be an integer >= 0 but got -1"):
        schedule.update(-1, 1.0)
    with pytest.raises(ValueError, match="expected a finite `loss` but got nan"):
        schedule.update(1, math.nan)
    assert schedule.last_epoch == 0 and len(schedule.history) == 1  # nothing recorded
    schedule.update(5, 0.5)  # epoch ids may skip: only the number of updates counts
    assert schedule.epochs_since_sync == 2
