"""PipelineAdaptor: Sylvie's §V-B sync/async schedule, by hand, through a Trainer, on 2 ranks, resumed.

The scripted losses and times, the fake strategies and the tiny module come from
``test_adaptive_bitwidth.py`` (see the derivation of ``DEGRADED`` there).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from lightning.pytorch.callbacks import Callback

from lightgraph.callbacks.adaptive_bitwidth import AdaptiveBitWidth
from lightgraph.callbacks.pipeline_adaptor import PipelineAdaptor
from lightgraph.distributed.context import ParallelContext
from tests.callbacks.test_adaptive_bitwidth import (
    DEGRADED,
    EPOCHS,
    EXPECTED_BITS,
    LOSSES,
    RANK1_LOSS_OFFSET,
    RANK1_TIMES,
    SMOOTHING,
    WINDOW,
    Clock,
    DriverModule,
    ScriptedModule,
    _resume_run,
    attach_clock,
    drive,
    make_trainer,
    run_two_ranks,
)

# §V-B: async by default; epoch t+1 runs sync exactly when degraded(t) (t > delta):
#   epochs 0-3: async (epoch 0 by default, then t <= delta)
#   epoch 4: degraded(3) False -> async; epochs 5, 6: degraded(4), degraded(5) True -> sync
#   epochs 7, 8: False -> async; epoch 9: degraded(8) True -> sync; epoch 10: False -> async
#   epochs 11-15: degraded(10..14) True -> sync; epoch 16: degraded(15) False -> async
A, S = "async", "sync"
EXPECTED_MODES = [A, A, A, A, A, S, S, A, A, S, A, S, S, S, S, S, A]


def test_expected_modes_follow_the_degraded_table() -> None:
    assert EXPECTED_MODES == [A] + [S if d else A for d in DEGRADED[:-1]]


def test_trajectory_follows_section_5b() -> None:
    cb = PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING)
    during, exchanger = drive(cb)
    assert cb.history == list(enumerate(EXPECTED_MODES))
    assert [mode for _, mode in during] == EXPECTED_MODES  # applied to the exchanger
    assert exchanger.policy.base_bits == 8  # untouched


def test_real_trainer_gives_the_same_trajectory(tmp_path) -> None:
    clock = Clock()
    cb = PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING)
    attach_clock([cb], clock)
    module = ScriptedModule(clock)
    trainer = make_trainer(tmp_path, EPOCHS, [cb], enable_checkpointing=False)
    trainer.fit(module)
    assert cb.history == list(enumerate(EXPECTED_MODES))
    assert [(epoch, mode) for epoch, _, mode in module.seen] == list(enumerate(EXPECTED_MODES))
    assert float(trainer.callback_metrics["pipeline_sync"]) == 0.0  # last epoch async


def test_both_callbacks_together_resume_exactly(tmp_path) -> None:
    def make() -> list[Callback]:
        return [
            AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING),
            PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING),
        ]

    n = 8
    straight, first, resumed = _resume_run(tmp_path, make, n)
    assert straight == [
        list(enumerate(EXPECTED_BITS[: 2 * n])),
        list(enumerate(EXPECTED_MODES[: 2 * n])),
    ]
    for s, f, r in zip(straight, first, resumed, strict=True):
        assert f == s[:n]
        assert r[:n] == f  # restored
        assert f + r[n:] == s  # continued exactly


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_take_identical_decisions(tmp_path) -> None:
    alone = PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING)
    drive(alone, [loss + RANK1_LOSS_OFFSET for loss in LOSSES], RANK1_TIMES)
    assert [mode for _, mode in alone.history] != EXPECTED_MODES  # rank 1 alone would differ

    records = run_two_ranks(
        tmp_path,
        lambda: [
            AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING),
            PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING),
        ],
    )
    expected_seen = [
        [epoch, bits, mode]
        for epoch, (bits, mode) in enumerate(zip(EXPECTED_BITS, EXPECTED_MODES, strict=True))
    ]
    for record in records:
        bits, modes = record["histories"]
        assert bits == [list(item) for item in enumerate(EXPECTED_BITS)]
        assert modes == [list(item) for item in enumerate(EXPECTED_MODES)]
        assert record["seen"] == expected_seen


def test_needs_an_exchanger() -> None:
    cb = PipelineAdaptor()
    with pytest.raises(
        RuntimeError,
        match=r"PipelineAdaptor needs the halo exchanger of a boundary-exchange strategy, "
        r"e.g. BoundaryExchangeStrategy\(mode='async'\)",
    ):
        cb.setup(SimpleNamespace(strategy=SimpleNamespace()), None, "fit")


def test_module_without_a_context_counts_as_missing() -> None:
    # No strategy attached a context (or it attached an empty one): nothing to drive.
    no_context = ScriptedModule(Clock())
    assert no_context.parallel_context == ParallelContext()
    empty = DriverModule(None, [])
    for module in (no_context, empty):
        with pytest.raises(RuntimeError, match="PipelineAdaptor needs"):
            PipelineAdaptor().setup(SimpleNamespace(strategy=SimpleNamespace()), module, "fit")


def test_state_dict_round_trip() -> None:
    cb = PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING)
    drive(cb)
    state = json.loads(json.dumps(cb.state_dict()))
    other = PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING)
    other.load_state_dict(state)
    assert other.state_dict() == cb.state_dict()
    state["setting"] = "sometimes"
    with pytest.raises(ValueError, match="one of \\('sync', 'async'\\) but got 'sometimes'"):
        other.load_state_dict(state)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"window": -1}, "PipelineAdaptor: expected `window` to be an integer >= 1 but got -1"),
        ({"window": True}, "PipelineAdaptor: expected `window` to be an integer >= 1 but got True"),
        ({"smoothing": 1}, r"PipelineAdaptor: expected `smoothing` in \[0, 1\) but got 1"),
        ({"monitor": None}, "PipelineAdaptor: expected `monitor` to be a non-empty metric name"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        PipelineAdaptor(**kwargs)
