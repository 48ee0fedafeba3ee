"""A thread-safe recorder of labelled time intervals on named lanes (e.g. ``"gnn"``, ``"lm"``).

:class:`~lightgraph.distributed.BubbleInterleaver` records the GNN stage's compute and the
language model's run segments here; :meth:`Timeline.overlaps` then checks, independently of
the interleaver's own bookkeeping, that no two of them shared the processor.
"""

from __future__ import annotations

import json
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import accumulate
from typing import Any, NamedTuple

from lightgraph.utilities.checks import check_callable, check_non_empty_str


class Interval(NamedTuple):
    """One recorded interval ``[start, end]`` in seconds of the timeline's clock."""

    lane: str
    label: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


class Timeline:
    """Thread-safe list of intervals ``(lane, label, start, end)``.

    Intervals may be recorded from any thread, in any order; queries return them sorted by
    ``(start, end)``. Two intervals overlap when they share more than an endpoint:
    ``x.start < y.end and y.start < x.end`` (so ``[0, 1]`` and ``[1, 2]`` do not overlap, and
    a zero-length interval overlaps an interval only when it lies strictly inside it).

    Args:
        clock: seconds as a float, monotonic (default :func:`time.perf_counter`); inject a
            fake one in tests. Everything stamping intervals for this timeline should read
            :meth:`now`.

    Example::

        timeline = Timeline()
        with timeline.span("gnn", "forward"):
            run_stage()
        timeline.busy_time("gnn")
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = check_callable("Timeline", "clock", clock, "e.g. time.perf_counter")
        self._lock = threading.Lock()
        self._intervals: list[Interval] = []

    def __repr__(self) -> str:
        with self._lock:
            lanes = sorted({i.lane for i in self._intervals})
            n = len(self._intervals)
        return f"{type(self).__name__}(intervals={n}, lanes={lanes})"

    def __len__(self) -> int:
        with self._lock:
            return len(self._intervals)

    # ------------------------------------------------------------------ recording
    def now(self) -> float:
        """The clock's current reading (seconds)."""
        return float(self._clock())

    def record(self, lane: str, label: str, start: float, end: float) -> Interval:
        """Add the interval ``[start, end]`` on ``lane``; returns it.

        Raises:
            ValueError: if ``lane`` is empty, ``label`` is not a string or ``end < start``.
        """
        check_non_empty_str("Timeline", "lane", lane)
        if not isinstance(label, str):
            raise ValueError(
                f"Timeline: expected `label` to be a string but got {type(label).__name__}."
            )
        start, end = float(start), float(end)
        if not end >= start:
            raise ValueError(
                f"Timeline: expected `end` >= `start` but got start={start!r}, end={end!r}."
            )
        interval = Interval(lane, label, start, end)
        with self._lock:
            self._intervals.append(interval)
        return interval

    @contextmanager
    def span(self, lane: str, label: str = "") -> Iterator[None]:
        """Record the time spent in the ``with`` block as one interval on ``lane``."""
        check_non_empty_str("Timeline", "lane", lane)
        start = self.now()
        try:
            yield
        finally:
            self.record(lane, label, start, self.now())

    def clear(self) -> None:
        """Forget every interval."""
        with self._lock:
            self._intervals.clear()

    # ------------------------------------------------------------------ queries
    def lanes(self) -> list[str]:
        """The lanes that hold intervals, sorted."""
        with self._lock:
            return sorted({i.lane for i in self._intervals})

    def intervals(self, lane: str | None = None) -> list[Interval]:
        """The intervals of ``lane`` (all lanes for ``None``), sorted by ``(start, end)``."""
        with self._lock:
            found = [i for i in self._intervals if lane is None or i.lane == lane]
        return sorted(found, key=lambda i: (i.start, i.end))

    def overlaps(self, a: str = "lm", b: str = "gnn") -> list[tuple[Interval, Interval]]:
        """Every pair ``(x, y)``, ``x`` on lane ``a`` and ``y`` on lane ``b``, that overlaps.

        Overlap means ``x.start < y.end and y.start < x.end``: touching endpoints do not
        count, nesting and partial overlap do. With ``a == b``, each unordered pair of
        distinct intervals is reported once. Pairs are sorted by ``x`` then ``y``.
        """
        xs = self.intervals(a)
        ys = xs if a == b else self.intervals(b)
        starts = [y.start for y in ys]
        # prefix_end[j] = latest end among ys[: j + 1]; lets the scan stop early.
        prefix_end = list(accumulate((y.end for y in ys), max))
        pairs: list[tuple[Interval, Interval]] = []
        for i, x in enumerate(xs):
            found = []
            j = bisect_left(starts, x.end) - 1  # ys[: j + 1] start before x ends
            while j >= 0 and prefix_end[j] > x.start:
                y = ys[j]
                if y.end > x.start and y.start < x.end and (a != b or j < i):
                    found.append(y)
                j -= 1
            pairs.extend((x, y) for y in reversed(found))
        return pairs

    def busy_time(self, lane: str) -> float:
        """Seconds covered by the union of ``lane``'s intervals (overlaps counted once)."""
        total, cur_start, cur_end = 0.0, None, None
        for i in self.intervals(lane):
            if cur_end is None or i.start > cur_end:
                if cur_end is not None:
                    total += cur_end - cur_start  # type: ignore[operator]
                cur_start, cur_end = i.start, i.end
            else:
                cur_end = max(cur_end, i.end)
        if cur_end is not None:
            total += cur_end - cur_start  # type: ignore[operator]
        return total

    # ------------------------------------------------------------------ export
    def to_chrome_trace(self) -> dict[str, Any]:
        """The intervals as a Chrome trace (``chrome://tracing``, Perfetto).

        One "complete" event (``ph="X"``) per interval, timestamps in microseconds from the
        earliest start; each lane is a named thread (``tid``) of process 0.
        """
        intervals = self.intervals()
        origin = min((i.start for i in intervals), default=0.0)
        lanes = sorted({i.lane for i in intervals})
        tid = {lane: k for k, lane in enumerate(lanes)}
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[lane], "args": {"name": lane}}
            for lane in lanes
        ]
        events.extend(
            {
                "name": i.label or i.lane,
                "cat": i.lane,
                "ph": "X",
                "pid": 0,
                "tid": tid[i.lane],
                "ts": (i.start - origin) * 1e6,
                "dur": i.duration * 1e6,
            }
            for i in intervals
        )
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def to_json(self) -> list[dict[str, Any]]:
        """The intervals as JSON-ready dicts ``{lane, label, start, end}`` (clock seconds)."""
        return [i._asdict() for i in self.intervals()]

    def dump(self, path: str | os.PathLike[str], chrome: bool = True) -> None:
        """Write :meth:`to_chrome_trace` (``chrome=True``) or :meth:`to_json` to ``path``."""
        data: Any = self.to_chrome_trace() if chrome else self.to_json()
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
