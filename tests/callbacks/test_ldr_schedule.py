"""LDRSchedule, the controller under AdaptiveBitWidth and PipelineAdaptor, driven hook by hook
with a fake clock, a fake strategy and a minimal setting (an integer counter).

The counter goes up after a degraded epoch, down after a healthy one, and stays put while
there is not enough history. With ``smoothing = 0`` the running average is the loss itself
(F_t = L_t), so the descent rate is d_t = (L_{t-1} - L_t) / et_t and, with ``window = 1``,
epoch t > 1 is degraded iff d_t < d_{t-1}. By hand, for the script below:

    t      0     1     2      3     4     5
    L_t   10     8     7     6.5    3     2.9
    et_t   1     1     0.25   1     1     2
    d_t    -     2     4      0.5   3.5   0.05
    deg    -     -     no     yes   no    yes

Epoch t + 1 starts with the setting of epoch t moved by deg(t): epochs 0-2 keep the
initial 0, then 3: -1, 4: 0, 5: -1, 6: 0. The epoch times matter: with every et_t = 1,
d_2 = 1 < d_1 and epoch 3 would get +1 instead.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lightgraph.callbacks.ldr_schedule import LDRSchedule

LOSSES = [10.0, 8.0, 7.0, 6.5, 3.0, 2.9]
TIMES = [1.0, 1.0, 0.25, 1.0, 1.0, 2.0]
EXPECTED = [0, 0, 0, -1, 0, -1, 0]  # the setting of epochs 0..6
UNTIMED = 100.0  # seconds spent outside training batches (validation, logging): not counted


class Counter(LDRSchedule[int]):
    _log_key = "counter"

    def __init__(
        self,
        window: int = 1,
        smoothing: float = 0.0,
        monitor: Any = "train_loss",
        log: Any = False,
    ) -> None:
        super().__init__(window, smoothing, monitor, log)

    def _target(self, trainer, pl_module):
        target = getattr(pl_module, "target", None)
        if target is None:
            raise RuntimeError("Counter: the module has no `target`.")
        return target

    def _apply(self, target, setting: int) -> None:
        target.applied.append(setting)

    def _initial(self) -> int:
        return 0

    def _next(self, setting: int, degraded: bool | None) -> int:
        return setting if degraded is None else setting + (1 if degraded else -1)

    def _check_setting(self, setting: Any) -> int:
        if not isinstance(setting, int):
            raise ValueError(f"Counter: bad setting {setting!r}")
        return setting

    def _log_value(self, setting: int) -> float:
        return float(setting)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeStrategy:
    """Records what is broadcast; returns ``source``'s last broadcast when given (rank > 0)."""

    def __init__(self, source: FakeStrategy | None = None) -> None:
        self.source = source
        self.sent: list[Any] = []

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        assert src == 0
        self.sent.append(obj)
        return obj if self.source is None else self.source.sent[-1]


def make(source: FakeStrategy | None = None, **kwargs: Any):
    cb = Counter(**kwargs)
    clock = Clock()
    cb._clock = clock
    trainer = SimpleNamespace(current_epoch=0, callback_metrics={}, strategy=FakeStrategy(source))
    logged: list[tuple[str, float, dict]] = []
    module = SimpleNamespace(
        target=SimpleNamespace(applied=[]),
        log=lambda name, value, **kw: logged.append((name, value, kw)),
    )
    return cb, clock, trainer, module, logged


def run_epoch(cb, clock, trainer, module, epoch: int, loss: float | None, seconds: float) -> None:
    """One training epoch: two timed batches, untimed work around them, then the loss."""
    trainer.current_epoch = epoch
    cb.on_train_epoch_start(trainer, module)
    for _ in range(2):
        clock.now += UNTIMED
        cb.on_train_batch_start(trainer, module, None, 0)
        clock.now += seconds / 2
        cb.on_train_batch_end(trainer, module, None, None, 0)
    clock.now += UNTIMED  # validation
    if loss is not None:
        trainer.callback_metrics["train_loss"] = loss
    cb.on_train_epoch_end(trainer, module)


def fit(cb, clock, trainer, module, epochs: range, losses=LOSSES, times=TIMES) -> None:
    cb.setup(trainer, module, "fit")
    cb.on_train_start(trainer, module)
    for epoch in epochs:
        loss = losses[epoch] if epoch < len(losses) else None
        seconds = times[epoch] if epoch < len(times) else 1.0
        run_epoch(cb, clock, trainer, module, epoch, loss, seconds)


def test_settings_follow_the_hand_computed_table() -> None:
    cb, clock, trainer, module, _ = make()
    fit(cb, clock, trainer, module, range(6))
    trainer.current_epoch = 6
    cb.on_train_epoch_start(trainer, module)  # consumes epoch 5
    assert cb.history == list(enumerate(EXPECTED))
    assert module.target.applied == EXPECTED  # applied at the start of every epoch
    assert cb.setting == EXPECTED[-1]
    # Only the training batches were timed: (L_t, et_t) of every epoch, in order.
    assert trainer.strategy.sent == list(zip(LOSSES, TIMES, strict=True))
    assert cb.tracker.t == 5


def test_epoch_times_enter_the_decision() -> None:
    cb, clock, trainer, module, _ = make()
    fit(cb, clock, trainer, module, range(4), times=[1.0] * 6)
    assert cb.history[3] == (3, +1)  # d_2 = 1 < d_1 = 2: degraded, unlike with the real times


def test_every_rank_decides_from_rank_zeros_loss_and_time() -> None:
    rank0 = make()
    rank1 = make(source=rank0[2].strategy)
    noisy_losses = [loss + 5.0 * (-1) ** t for t, loss in enumerate(LOSSES)]
    noisy_times = [3.0] * 6
    for cb, _clock, trainer, module, _ in (rank0, rank1):
        cb.setup(trainer, module, "fit")
        cb.on_train_start(trainer, module)
    for epoch in range(7):
        for (cb, clock, trainer, module, _), losses, times in (
            (rank0, LOSSES, TIMES),
            (rank1, noisy_losses, noisy_times),
        ):
            if epoch < 6:
                run_epoch(cb, clock, trainer, module, epoch, losses[epoch], times[epoch])
            else:
                trainer.current_epoch = epoch
                cb.on_train_epoch_start(trainer, module)
    assert rank0[0].history == rank1[0].history == list(enumerate(EXPECTED))
    assert rank1[2].strategy.sent[0] == (noisy_losses[0], 3.0)  # what rank 1 offered


def test_logging_reports_the_setting_of_every_epoch() -> None:
    cb, clock, trainer, module, logged = make(log=True)
    fit(cb, clock, trainer, module, range(6))
    trainer.current_epoch = 6
    cb.on_train_epoch_start(trainer, module)
    assert [(name, value) for name, value, _ in logged] == [("counter", float(s)) for s in EXPECTED]
    assert all(kw["on_epoch"] and not kw["on_step"] for _, _, kw in logged)
    quiet = make(log=False)
    fit(*quiet[:4], range(2))
    assert quiet[4] == []


def test_a_missing_monitor_is_a_clear_error() -> None:
    cb, clock, trainer, module, _ = make(monitor="my_loss")
    fit(cb, clock, trainer, module, range(1))  # logs `train_loss`, not `my_loss`
    trainer.current_epoch = 1
    with pytest.raises(RuntimeError, match=r"did not log `my_loss` in training epoch 0") as info:
        cb.on_train_epoch_start(trainer, module)
    assert "self.log('my_loss'" in str(info.value)


def test_a_resumed_run_takes_the_same_decisions() -> None:
    straight = make()
    fit(*straight[:4], range(6))
    straight[2].current_epoch = 6
    straight[0].on_train_epoch_start(straight[2], straight[3])

    first = make()
    cb, clock, trainer, module, _ = first
    fit(cb, clock, trainer, module, range(3))  # stops after epoch 2, its loss not yet used
    checkpoint = {"callbacks": {cb.state_key: cb.state_dict()}}
    cb.on_save_checkpoint(trainer, module, checkpoint)
    assert checkpoint["callbacks"][cb.state_key]["pending"]["loss"] == LOSSES[2]

    resumed = make()  # a new process: no callback_metrics from the first run
    cb2, clock2, trainer2, module2, _ = resumed
    cb2.load_state_dict(checkpoint["callbacks"][cb2.state_key])
    assert cb2.setting == EXPECTED[2]
    fit(cb2, clock2, trainer2, module2, range(3, 6))
    trainer2.current_epoch = 6
    cb2.on_train_epoch_start(trainer2, module2)
    assert cb2.history == straight[0].history == list(enumerate(EXPECTED))
    # on_train_start re-applied the restored setting before epoch 3 started.
    assert module2.target.applied[0] == EXPECTED[2]


def test_an_unknown_loss_left_from_a_checkpoint_is_skipped_with_a_warning() -> None:
    first = make()
    cb, clock, trainer, module, _ = first
    fit(cb, clock, trainer, module, range(3))
    state = cb.state_dict()  # written without on_save_checkpoint: the loss of epoch 2 is unknown
    resumed = make()
    cb2, clock2, trainer2, module2, _ = resumed
    cb2.load_state_dict(state)
    cb2.setup(trainer2, module2, "fit")
    cb2.on_train_start(trainer2, module2)
    trainer2.current_epoch = 3
    with pytest.warns(UserWarning, match="`train_loss` of epoch 2 is unknown"):
        cb2.on_train_epoch_start(trainer2, module2)
    assert cb2.tracker.t == 1  # epochs 0 and 1 only
    assert cb2.history[-1] == (3, EXPECTED[2])  # unchanged setting


def test_restarting_an_epoch_replaces_its_history_entry() -> None:
    cb, clock, trainer, module, _ = make()
    fit(cb, clock, trainer, module, range(2))
    trainer.current_epoch = 1  # e.g. resumed mid-epoch 1
    cb._pending = None
    cb.on_train_epoch_start(trainer, module)
    assert [epoch for epoch, _ in cb.history] == [0, 1]


def test_setup_fails_before_training_when_there_is_nothing_to_drive() -> None:
    cb, _, trainer, _, _ = make()
    bare = SimpleNamespace()
    with pytest.raises(RuntimeError, match="has no `target`"):
        cb.setup(trainer, bare, "fit")
    cb.setup(trainer, bare, "validate")  # only fitting needs a target


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"window": 0}, "Counter: expected `window` to be an integer >= 1 but got 0"),
        ({"window": True}, "`window` to be an integer >= 1 but got True"),
        ({"smoothing": 1.0}, r"Counter: expected `smoothing` in \[0, 1\) but got 1.0"),
        ({"smoothing": -0.1}, r"`smoothing` in \[0, 1\)"),
        ({"monitor": ""}, "Counter: expected `monitor` to be a non-empty metric name but got ''"),
        ({"monitor": None}, "`monitor` to be a non-empty metric name but got None"),
        ({"log": 1}, r"Counter: expected `log` to be one of \(True, False\) but got 1"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        Counter(**kwargs)


def test_state_dict_round_trip() -> None:
    cb, clock, trainer, module, _ = make()
    fit(cb, clock, trainer, module, range(4))
    other = Counter()
    other.load_state_dict(cb.state_dict())
    assert other.state_dict() == cb.state_dict()
    with pytest.raises(ValueError, match="bad setting 'x'"):
        other.load_state_dict({**cb.state_dict(), "setting": "x"})
