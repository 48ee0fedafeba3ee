"""The two readings of the Eq. 5 comparison, for every LDR-driven callback.

Sylvie's Eq. 5 (and TorchGT's threshold rule) asks for more precision when
``LDR_t < LDR_{t-delta}``; with the signed LDR (negative while the loss falls) that is a
loss now falling *faster*, while the papers' prose says "more bits when the descent
slows". ``reading`` picks one:

* ``"more_precision_when_descent_slows"``: tighten when ``LDR_t > LDR_{t-delta}``;
* ``"more_precision_when_descent_speeds_up"``: tighten when ``LDR_t < LDR_{t-delta}``.

The trajectories of AdaptiveBitWidth (bits), PipelineAdaptor (mode) and
ClusterSparsityTuner (threshold) are checked against ``reference_*`` below: plain list
arithmetic written from the papers' formulas (running loss, signed LDR, the printed
inequality and Eq. 5's guarded cases), sharing no code with lightgraph. The reference is
itself checked against trajectories derived by hand for the shared script of
``test_adaptive_bitwidth.py``; then both readings are driven by seeded random scripts
(noisy, sometimes rising losses; varying epoch times; ties) through the callbacks' hooks,
and one script through a real ``Trainer``.

Losses are multiples of 1/64 and epoch times powers of two, so float32 logging and the
fake clock reproduce them exactly and the reference sees the very same numbers.
"""

from __future__ import annotations

import json
import random

import pytest

from lightgraph.callbacks import ClusterSparsityTuner
from lightgraph.callbacks.adaptive_bitwidth import AdaptiveBitWidth
from lightgraph.callbacks.pipeline_adaptor import PipelineAdaptor
from lightgraph.functional.loss_descent_rate import LossDescentRate
from tests.callbacks.test_adaptive_bitwidth import (
    EXPECTED_BITS,
    LOSSES,
    SMOOTHING,
    TIMES,
    WINDOW,
    Clock,
    ScriptedModule,
    attach_clock,
    drive,
    make_trainer,
)
from tests.callbacks.test_cluster_sparsity_tuner import BETA_G, Module
from tests.callbacks.test_cluster_sparsity_tuner import _run as run_tuner
from tests.callbacks.test_pipeline_adaptor import EXPECTED_MODES

SLOWS = "more_precision_when_descent_slows"
SPEEDS_UP = "more_precision_when_descent_speeds_up"
READINGS = (SLOWS, SPEEDS_UP)


# ----------------------------------------------------------------------------- reference
def reference_ldr(losses: list[float], times: list[float], lam: float) -> list[float | None]:
    """Signed LDR_t = (F_t - F_{t-1}) / et_t with F_0 = L_0, F_t = lam F_{t-1} + (1 - lam) L_t."""
    running: list[float] = []
    ldr: list[float | None] = []
    for t in range(len(losses)):
        if t == 0:
            running.append(losses[0])
            ldr.append(None)
        else:
            running.append(lam * running[t - 1] + (1.0 - lam) * losses[t])
            ldr.append((running[t] - running[t - 1]) / times[t])
    return ldr


def reference_tighten(ldr: list[float | None], t: int, delta: int, reading: str) -> bool | None:
    """The inequality of Eq. 5 after epoch t (None: t <= delta, not enough history)."""
    if t <= delta:
        return None
    if reading == SPEEDS_UP:
        return ldr[t] < ldr[t - delta]  # as printed: LDR_t < LDR_{t-delta} -> 2 b_t
    return ldr[t] > ldr[t - delta]  # the prose: the descent (-LDR) became smaller


def reference_bits(losses, times, lam, delta, reading, b_min=1, b_max=8) -> list[int]:
    """Eq. 5: b_0 = b_min; 2 b_t if tighten and b_t < b_max; b_t / 2 if not and b_t > b_min."""
    ldr = reference_ldr(losses, times, lam)
    bits = [b_min]
    for t in range(len(losses) - 1):
        tighten, b = reference_tighten(ldr, t, delta, reading), bits[-1]
        if tighten is True and b < b_max:
            bits.append(2 * b)
        elif tighten is False and b > b_min:
            bits.append(b // 2)
        else:
            bits.append(b)
    return bits


def reference_modes(losses, times, lam, delta, reading) -> list[str]:
    """§V-B: async first; epoch t + 1 is sync exactly when epoch t asks for precision."""
    ldr = reference_ldr(losses, times, lam)
    modes = ["async"]
    for t in range(len(losses) - 1):
        modes.append("sync" if reference_tighten(ldr, t, delta, reading) is True else "async")
    return modes


REFERENCE_LADDER = [0.0, 1.0, 1.5, 5.0, 7.0, 10.0]  # times beta_G; then the absolute 1


def reference_thresholds(losses, times, lam, delta, reading, beta_g) -> list[float]:
    """TorchGT: start at beta_G (position 1 of 7); tighten: previous value, else the next."""
    ldr = reference_ldr(losses, times, lam)
    position = [1]
    for t in range(len(losses) - 1):
        tighten, p = reference_tighten(ldr, t, delta, reading), position[-1]
        if tighten is True and p > 0:
            position.append(p - 1)
        elif tighten is False and p < 6:
            position.append(p + 1)
        else:
            position.append(p)
    return [1.0 if p == 6 else min(1.0, REFERENCE_LADDER[p] * beta_g) for p in position]


def random_script(seed: int, epochs: int) -> tuple[list[float], list[float]]:
    """Noisy losses (multiples of 1/64, sometimes rising or flat, steady stretches), times in {1/4..2}."""
    rng = random.Random(seed)
    losses, times = [16.0], [1.0]
    step, seconds = 0, 1.0
    for _ in range(epochs - 1):
        if rng.random() < 0.7:  # otherwise the same fall in the same time again: a tie
            step = rng.choice([-3, -1, 0, 0, 1, 2, 2, 4, 6, 9, 16])  # 64ths of a unit fall
            seconds = rng.choice([0.25, 0.5, 1.0, 1.0, 1.0, 2.0])
        losses.append(max(losses[-1] - step / 64.0, 1.0 / 64.0))
        times.append(seconds)
    return losses, times


# ----------------------------------------------------------------------------- hand tables
# The shared script (lambda = 0.5, delta = 2), descent rates -LDR_t for t = 1..16:
#   16, 16, 16, 4, 4, 8, 4, 2, 4, 1, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25
# "speeds up": tighten(t) = rate_t > rate_{t-2}, t > 2:
#   t=3: 16 > 16 F | t=4: 4 > 16 F | t=5: 4 > 16 F | t=6: 8 > 4 T | t=7: 4 > 4 F
#   t=8: 2 > 8 F | t=9: 4 > 4 F | t=10..15: F (1 > 2, 0.5 > 4, 0.5 > 1, 0.25 > 0.5 twice,
#   0.25 > 0.25)
# bits (b_min 1, b_max 8): only epoch 7 (after t=6) doubles, epoch 8 halves again.
SPEEDS_UP_BITS = [1] * 7 + [2] + [1] * 9
SPEEDS_UP_MODES = ["async"] * 7 + ["sync"] + ["async"] * 9
# ladder positions: 1 until t=3, then up 2, 3, 4 (t=3..5), down to 3 (t=6), up 4, 5, 6
# (t=7..9) and clamped at 6.
SPEEDS_UP_LEVELS = [1, 1, 1, 1, 2, 3, 4, 3, 4, 5, 6, 6, 6, 6, 6, 6, 6]
# "slows": the tables of test_adaptive_bitwidth / test_pipeline_adaptor /
# test_cluster_sparsity_tuner.
SLOWS_LEVELS = [1, 1, 1, 1, 2, 1, 0, 1, 2, 1, 2, 1, 0, 0, 0, 0, 1]
LEVELS = {SLOWS: SLOWS_LEVELS, SPEEDS_UP: SPEEDS_UP_LEVELS}
BITS = {SLOWS: EXPECTED_BITS, SPEEDS_UP: SPEEDS_UP_BITS}
MODES = {SLOWS: EXPECTED_MODES, SPEEDS_UP: SPEEDS_UP_MODES}


def _threshold(level: int) -> float:
    return [0.0, BETA_G, 1.5 * BETA_G, 5 * BETA_G, 7 * BETA_G, 10 * BETA_G, 1.0][level]


@pytest.mark.parametrize("reading", READINGS)
def test_reference_reproduces_the_hand_tables(reading: str) -> None:
    args = (LOSSES, TIMES, SMOOTHING, WINDOW, reading)
    assert reference_bits(*args) == BITS[reading]
    assert reference_modes(*args) == MODES[reading]
    assert reference_thresholds(*args, BETA_G) == pytest.approx(
        [_threshold(level) for level in LEVELS[reading]]
    )


@pytest.mark.parametrize("reading", READINGS)
def test_hand_tables_through_the_callbacks(reading: str) -> None:
    bits_cb = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING, reading=reading)
    during, _ = drive(bits_cb)
    assert [bits for bits, _ in during] == BITS[reading]
    mode_cb = PipelineAdaptor(window=WINDOW, smoothing=SMOOTHING, reading=reading)
    during, _ = drive(mode_cb)
    assert [mode for _, mode in during] == MODES[reading]
    tuner = ClusterSparsityTuner(window=WINDOW, smoothing=SMOOTHING, reading=reading)
    seen, _, _ = run_tuner(tuner, range(len(LOSSES)))
    assert [level for _, level in tuner.history] == LEVELS[reading]
    assert [a for a, _ in seen] == pytest.approx([_threshold(level) for level in LEVELS[reading]])


# ----------------------------------------------------------------------------- random scripts
CASES = [(seed, lam, delta) for seed in range(4) for lam, delta in ((0.0, 1), (0.5, 2), (0.9, 5))]


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize(("seed", "lam", "delta"), CASES)
def test_random_scripts_follow_the_reference(reading: str, seed: int, lam: float, delta: int):
    losses, times = random_script(seed, 80)
    args = (losses, times, lam, delta, reading)

    bits_cb = AdaptiveBitWidth(window=delta, smoothing=lam, reading=reading, log=False)
    during, _ = drive(bits_cb, losses, times)
    expected_bits = reference_bits(*args)
    assert [bits for bits, _ in during] == expected_bits
    assert len(set(expected_bits)) > 1  # the script moves the width

    narrow = AdaptiveBitWidth(b_min=2, b_max=4, window=delta, smoothing=lam, reading=reading)
    during, _ = drive(narrow, losses, times)
    assert [bits for bits, _ in during] == reference_bits(*args, b_min=2, b_max=4)

    mode_cb = PipelineAdaptor(window=delta, smoothing=lam, reading=reading, log=False)
    during, _ = drive(mode_cb, losses, times)
    expected_modes = reference_modes(*args)
    assert [mode for _, mode in during] == expected_modes
    assert {"sync", "async"} == set(expected_modes)

    tuner = ClusterSparsityTuner(window=delta, smoothing=lam, reading=reading, log=False)
    seen, _, _ = run_tuner(tuner, range(len(losses)), losses, times, Module())
    assert [a for a, _ in seen] == pytest.approx(reference_thresholds(*args, BETA_G))


@pytest.mark.parametrize(("seed", "lam", "delta"), CASES)
def test_the_readings_disagree_except_on_ties(seed: int, lam: float, delta: int) -> None:
    """Where the LDRs differ the readings tighten on opposite epochs; ties relax under both."""
    losses, times = random_script(seed, 80)
    ldr = reference_ldr(losses, times, lam)
    slows, speeds = LossDescentRate(lam, delta, SLOWS), LossDescentRate(lam, delta, SPEEDS_UP)
    opposite = ties = 0
    for t, (loss, seconds) in enumerate(zip(losses, times, strict=True)):
        slows.update(loss, seconds)
        speeds.update(loss, seconds)
        a, b = slows.more_precision(), speeds.more_precision()
        assert a == reference_tighten(ldr, t, delta, SLOWS)
        assert b == reference_tighten(ldr, t, delta, SPEEDS_UP)
        if t <= delta:
            assert a is None and b is None
        elif ldr[t] == ldr[t - delta]:
            assert a is False and b is False
            ties += 1
        else:
            assert a is (not b)
            opposite += 1
        assert slows.degraded() == speeds.degraded()  # a fact, not a reading
    assert opposite > 0
    if lam == 0.0:
        assert ties > 0  # flat stretches with equal times give equal LDRs


def test_real_trainer_follows_the_reference_for_both_readings(tmp_path) -> None:
    losses, times = random_script(11, 30)
    for reading in READINGS:
        clock = Clock()
        callbacks = [
            AdaptiveBitWidth(window=2, smoothing=0.5, reading=reading),
            PipelineAdaptor(window=2, smoothing=0.5, reading=reading),
        ]
        attach_clock(callbacks, clock)
        module = ScriptedModule(clock, losses=losses, times=times)
        trainer = make_trainer(
            tmp_path / reading, len(losses), callbacks, enable_checkpointing=False
        )
        trainer.fit(module)
        args = (losses, times, 0.5, 2, reading)
        assert [bits for _, bits, _ in module.seen] == reference_bits(*args)
        assert [mode for _, _, mode in module.seen] == reference_modes(*args)


# ----------------------------------------------------------------------------- state
@pytest.mark.parametrize("reading", READINGS)
def test_a_resumed_run_keeps_its_reading(reading: str) -> None:
    losses, times = random_script(5, 40)
    straight = ClusterSparsityTuner(window=3, smoothing=0.5, reading=reading)
    run_tuner(straight, range(40), losses, times)

    first = ClusterSparsityTuner(window=3, smoothing=0.5, reading=reading)
    _, trainer, module = run_tuner(first, range(20), losses, times)
    checkpoint = {"callbacks": {first.state_key: first.state_dict()}}
    first.on_save_checkpoint(trainer, module, checkpoint)
    state = json.loads(json.dumps(checkpoint["callbacks"][first.state_key]))
    assert state["tracker"]["reading"] == reading

    resumed = ClusterSparsityTuner(window=3, smoothing=0.5, reading=reading)
    resumed.load_state_dict(state)
    run_tuner(resumed, range(20, 40), losses, times)
    assert resumed.history == straight.history

    other = READINGS[1 - READINGS.index(reading)]
    with pytest.raises(
        ValueError, match=rf"reading='{reading}' but this tracker has .*reading='{other}'"
    ):
        ClusterSparsityTuner(window=3, smoothing=0.5, reading=other).load_state_dict(state)


def test_a_state_saved_before_the_option_is_the_slows_reading() -> None:
    cb = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING, reading=SLOWS)
    drive(cb)
    state = json.loads(json.dumps(cb.state_dict()))
    del state["tracker"]["reading"]  # what older checkpoints hold
    restored = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING, reading=SLOWS)
    restored.load_state_dict(state)
    assert restored.history == cb.history and restored.tracker.reading == SLOWS
    with pytest.raises(ValueError, match="resume with the same settings"):
        AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING, reading=SPEEDS_UP).load_state_dict(
            state
        )


@pytest.mark.parametrize("owner", [AdaptiveBitWidth, PipelineAdaptor, ClusterSparsityTuner])
def test_the_callbacks_pass_the_reading_to_their_tracker(owner) -> None:
    for reading in READINGS:
        cb = owner(reading=reading)
        assert cb.reading == reading and cb.tracker.reading == reading


@pytest.mark.parametrize(
    "owner", [AdaptiveBitWidth, PipelineAdaptor, ClusterSparsityTuner, LossDescentRate]
)
@pytest.mark.parametrize("bad", ["paper", "prose", "", None, 1, True])
def test_a_bad_reading_is_a_clear_error(owner, bad) -> None:
    allowed = r"\('more_precision_when_descent_slows', 'more_precision_when_descent_speeds_up'\)"
    with pytest.raises(
        ValueError, match=rf"^{owner.__name__}: expected `reading` to be one of {allowed} but got "
    ):
        owner(reading=bad)


def test_the_tuner_writes_the_threshold_of_its_reading() -> None:
    # A steadily accelerating descent: every rate beats the one before (delta = 1).
    losses = [100.0 - t * t for t in range(9)]
    times = [1.0] * 9
    for reading, last in ((SPEEDS_UP, 0.0), (SLOWS, 1.0)):
        tuner = ClusterSparsityTuner(window=1, smoothing=0.0, reading=reading)
        seen, _, _ = run_tuner(tuner, range(9), losses, times, Module())
        assert seen[-1][0] == last  # all the way down to 0, or up to the absolute 1
