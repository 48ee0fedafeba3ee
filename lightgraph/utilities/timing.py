"""Wall-clock timing of steps and epochs with an injectable clock.

:class:`Stopwatch` is what the training modules time ``train_step_time`` with and what
the LDR-driven callbacks accumulate an epoch's training time with. Its clock is a
plain attribute, so tests swap in a fake one and get exact values::

    ticks = iter([1.0, 3.5])
    watch = Stopwatch(clock=lambda: next(ticks))
    watch.start()
    assert watch.stop() == 2.5
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lightgraph.utilities.checks import check_callable

__all__ = ["Clock", "Stopwatch"]

#: A monotonic clock in seconds, like :func:`time.perf_counter`.
Clock = Callable[[], float]


class Stopwatch:
    """Measures the seconds between :meth:`start` and :meth:`stop`.

    Args:
        clock: returns the current time in seconds (default :func:`time.perf_counter`);
            replace :attr:`clock` at any time (tests inject a fake clock).

    Attributes:
        clock: the clock read by :meth:`start`, :meth:`stop` and :attr:`elapsed`.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = (
            time.perf_counter if clock is None else check_callable("Stopwatch", "clock", clock)
        )
        self._start: float | None = None

    @property
    def running(self) -> bool:
        """Whether :meth:`start` was called and :meth:`stop` (or :meth:`reset`) not since."""
        return self._start is not None

    def start(self) -> None:
        """Start timing (again, from now, if already running)."""
        self._start = self.clock()

    @property
    def elapsed(self) -> float:
        """Seconds since :meth:`start`, without stopping."""
        return self.clock() - self._started("elapsed")

    def stop(self) -> float:
        """Stop timing; the seconds since :meth:`start`."""
        seconds = self.clock() - self._started("stop()")
        self._start = None
        return seconds

    def reset(self) -> None:
        """Stop timing without reading the clock (a started interval is dropped)."""
        self._start = None

    def _started(self, what: str) -> float:
        if self._start is None:
            raise RuntimeError(
                f"Stopwatch: expected `start()` before `{what}` but the stopwatch is not running."
            )
        return self._start

    def __repr__(self) -> str:
        return f"Stopwatch(running={self.running})"
