"""Stopwatch: exact intervals under an injected clock."""

from __future__ import annotations

import copy
import pickle
import time

import pytest

from lightgraph.utilities.timing import Stopwatch


class FakeClock:
    """Returns ``now``; tests advance it by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_start_stop_measures_the_interval() -> None:
    clock = FakeClock()
    watch = Stopwatch(clock)
    assert not watch.running
    watch.start()
    assert watch.running
    clock.now += 2.5
    assert watch.stop() == 2.5
    assert not watch.running and clock.reads == 2


def test_elapsed_reads_without_stopping() -> None:
    clock = FakeClock(10.0)
    watch = Stopwatch(clock)
    watch.start()
    clock.now = 10.25
    assert watch.elapsed == 0.25
    clock.now = 11.0
    assert watch.elapsed == 1.0 and watch.running
    clock.now = 12.5
    assert watch.stop() == 2.5


def test_start_again_restarts_and_intervals_are_independent() -> None:
    clock = FakeClock(0.0)
    watch = Stopwatch(clock)
    watch.start()
    clock.now = 5.0
    watch.start()  # restart: the first 5 s are dropped
    clock.now = 7.0
    assert watch.stop() == 2.0
    watch.start()
    clock.now = 7.5
    assert watch.stop() == 0.5


def test_reset_drops_the_interval_without_reading_the_clock() -> None:
    clock = FakeClock()
    watch = Stopwatch(clock)
    watch.start()
    watch.reset()
    assert not watch.running and clock.reads == 1
    watch.reset()  # idempotent


def test_the_clock_can_be_swapped_while_running() -> None:
    # The LDR schedule's tests assign `_clock` after the callback is built.
    watch = Stopwatch()
    assert watch.clock is time.perf_counter
    clock = FakeClock(1.0)
    watch.clock = clock
    watch.start()
    clock.now = 4.0
    assert watch.stop() == 3.0


def test_not_running_is_a_clear_error() -> None:
    watch = Stopwatch(FakeClock())
    with pytest.raises(RuntimeError, match=r"Stopwatch: expected `start\(\)` before `stop\(\)`"):
        watch.stop()
    with pytest.raises(RuntimeError, match=r"expected `start\(\)` before `elapsed`"):
        _ = watch.elapsed
    watch.start()
    watch.stop()
    with pytest.raises(RuntimeError, match="not running"):
        watch.stop()


def test_bad_clock() -> None:
    with pytest.raises(TypeError, match="Stopwatch: expected `clock` to be a callable.*got float"):
        Stopwatch(1.0)  # type: ignore[arg-type]


def test_default_clock_is_monotonic_and_the_stopwatch_copies() -> None:
    watch = Stopwatch()
    watch.start()
    assert watch.elapsed >= 0.0
    # LightningModules and callbacks holding one are deep-copied and pickled.
    for clone in (copy.deepcopy(watch), pickle.loads(pickle.dumps(watch))):
        assert clone.running and clone.clock is time.perf_counter
        assert clone.stop() >= 0.0
    assert watch.stop() >= 0.0
    assert repr(watch) == "Stopwatch(running=False)"
