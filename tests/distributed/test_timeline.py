"""Timeline: thread-safe intervals; overlaps checked on hand-made intervals and against a
brute-force reference."""

from __future__ import annotations

import json
import random
import threading

import pytest

from lightgraph.distributed import Interval, Timeline


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(*spans: tuple[str, float, float]) -> Timeline:
    timeline = Timeline()
    for k, (lane, start, end) in enumerate(spans):
        timeline.record(lane, f"{lane}{k}", start, end)
    return timeline


def test_touching_endpoints_are_not_overlaps() -> None:
    timeline = make(("lm", 0, 1), ("gnn", 1, 2), ("lm", 2, 3), ("gnn", 3, 3), ("gnn", 0, 0))
    assert timeline.overlaps("lm", "gnn") == []
    assert timeline.overlaps("gnn", "lm") == []


def test_nested_partial_and_point_overlaps() -> None:
    timeline = make(
        ("lm", 0, 10),  # nests gnn [2, 3] and the point [5, 5]
        ("gnn", 2, 3),
        ("gnn", 5, 5),
        ("lm", 20, 22),  # partial with [21, 25]
        ("gnn", 21, 25),
        ("lm", 24, 24.5),  # nested in gnn [21, 25]
    )
    pairs = timeline.overlaps("lm", "gnn")
    spans = [((x.start, x.end), (y.start, y.end)) for x, y in pairs]
    assert spans == [
        ((0, 10), (2, 3)),
        ((0, 10), (5, 5)),
        ((20, 22), (21, 25)),
        ((24, 24.5), (21, 25)),
    ]
    assert all(x.lane == "lm" and y.lane == "gnn" for x, y in pairs)


def test_overlaps_within_one_lane_reports_each_pair_once() -> None:
    timeline = make(("lm", 0, 2), ("lm", 1, 3), ("lm", 3, 4), ("lm", 0, 2))
    pairs = timeline.overlaps("lm", "lm")
    spans = sorted(tuple(sorted(((x.start, x.end), (y.start, y.end)))) for x, y in pairs)
    assert spans == [((0, 2), (0, 2)), ((0, 2), (1, 3)), ((0, 2), (1, 3))]


@pytest.mark.parametrize("seed", range(5))
def test_overlaps_match_a_brute_force_reference(seed: int) -> None:
    rng = random.Random(seed)
    timeline = Timeline()
    for _ in range(60):
        start = rng.choice([rng.uniform(0, 50), float(rng.randint(0, 50))])
        length = rng.choice([0.0, rng.uniform(0, 5), float(rng.randint(0, 3))])
        timeline.record(rng.choice(["lm", "gnn"]), "", start, start + length)
    lm, gnn = timeline.intervals("lm"), timeline.intervals("gnn")
    expected = [(x, y) for x in lm for y in gnn if x.start < y.end and y.start < x.end]
    assert sorted(timeline.overlaps("lm", "gnn")) == sorted(expected)
    same = [(x, y) for i, x in enumerate(lm) for y in lm[:i] if x.start < y.end and y.start < x.end]
    assert sorted(timeline.overlaps("lm", "lm")) == sorted(same)


def test_busy_time_counts_the_union() -> None:
    timeline = make(("lm", 0, 2), ("lm", 1, 3), ("lm", 5, 6), ("lm", 6, 6.5), ("gnn", 0, 100))
    assert timeline.busy_time("lm") == pytest.approx(4.5)
    assert timeline.busy_time("gnn") == 100
    assert timeline.busy_time("nothing") == 0


def test_span_uses_the_injected_clock_and_queries_sort() -> None:
    clock = FakeClock()
    timeline = Timeline(clock=clock)
    clock.t = 5.0
    with timeline.span("gnn", "backward"):
        clock.t = 7.5
    clock.t = 1.0
    with timeline.span("lm", "job 1"):
        clock.t = 2.0
    assert timeline.now() == 2.0
    assert timeline.intervals() == [
        Interval("lm", "job 1", 1.0, 2.0),
        Interval("gnn", "backward", 5.0, 7.5),
    ]
    assert timeline.intervals("gnn")[0].duration == 2.5
    assert timeline.lanes() == ["gnn", "lm"] and len(timeline) == 2
    timeline.clear()
    assert timeline.intervals() == [] and len(timeline) == 0


def test_chrome_trace_and_json_dump(tmp_path) -> None:
    timeline = make(("gnn", 10.0, 10.5), ("lm", 10.5, 11.0))
    trace = timeline.to_chrome_trace()
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert set(names) == {"gnn", "lm"}
    assert [(e["name"], e["tid"], e["ts"], e["dur"]) for e in complete] == [
        ("gnn0", names["gnn"], 0.0, 500000.0),
        ("lm1", names["lm"], 500000.0, 500000.0),
    ]
    timeline.dump(tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text()) == trace
    timeline.dump(tmp_path / "intervals.json", chrome=False)
    assert json.loads((tmp_path / "intervals.json").read_text())[1] == {
        "lane": "lm",
        "label": "lm1",
        "start": 10.5,
        "end": 11.0,
    }


@pytest.mark.timeout(30)
def test_recording_from_many_threads_keeps_every_interval() -> None:
    timeline = Timeline()

    def work(k: int) -> None:
        for i in range(500):
            timeline.record("lm" if k % 2 else "gnn", f"{k}", i, i + 0.5)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(timeline) == 8 * 500
    assert len(timeline.overlaps("lm", "gnn")) == 500 * 4 * 4


def test_argument_errors() -> None:
    timeline = Timeline()
    with pytest.raises(ValueError, match=r"^Timeline: expected `end` >= `start` but got start=2.0"):
        timeline.record("lm", "x", 2.0, 1.0)
    with pytest.raises(ValueError, match="expected `lane` to be a non-empty string but got ''"):
        timeline.record("", "x", 0, 1)
    with pytest.raises(ValueError, match="expected `label` to be a string but got int"):
        timeline.record("lm", 3, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected `clock` to be a callable"):
        Timeline(clock=0.0)  # type: ignore[arg-type]
