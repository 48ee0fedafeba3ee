"""The controller shared by the Loss-Descent-Rate driven callbacks (Sylvie §V, TorchGT §4.3.4)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Generic, TypeVar

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightgraph.distributed.context import parallel_context
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.loss_descent_rate import (
    DEFAULT_READING,
    LossDescentRate,
    check_reading,
    check_smoothing,
    check_window,
)
from lightgraph.utilities.checks import check_bool, check_choice
from lightgraph.utilities.timing import Clock, Stopwatch

SettingT = TypeVar("SettingT", int, str)

#: Measure :math:`et_t` as the wall time of the epoch's training batches (the papers').
WALL = "wall"
#: Count :math:`et_t` as the number of the epoch's training batches (deterministic).
STEPS = "steps"
#: Count :math:`et_t` as the bytes rank 0's exchange sent in the epoch's training batches
#: (deterministic).
BYTES = "bytes"
#: Where an epoch's cost :math:`et_t`, the denominator of the LDR, comes from.
TIME_SOURCES: tuple[str, ...] = (WALL, STEPS, BYTES)
#: The time source of every LDR-driven callback unless told otherwise.
DEFAULT_TIME_SOURCE = WALL
_UNITS = {WALL: "second", STEPS: "batch", BYTES: "byte"}  # what an LDR is "per"


def check_time_source(owner: str, time_source: str) -> str:
    """Validate where the epoch cost comes from (one of :data:`TIME_SOURCES`)."""
    return check_choice(owner, "time_source", time_source, TIME_SOURCES)


def exchange_stats(pl_module: Any) -> ExchangeStats | None:
    """The byte counters of the exchange a lightgraph strategy runs for ``pl_module``.

    The halo exchanger's (``BoundaryExchangeStrategy``) or the sequence-parallel
    all-to-alls' (``GraphParallelStrategy``); ``None`` when the module has neither.
    """
    context = parallel_context(pl_module)
    for exchange in (context.halo_exchanger, context.sequence_parallel):
        stats = getattr(exchange, "stats", None)
        if isinstance(stats, ExchangeStats):
            return stats
    return None


class LDRSchedule(Callback, Generic[SettingT]):
    """Shared machinery of Sylvie's LDR-driven controllers (§V-A, §V-B).

    Subclasses choose a *setting* (the base bit-width, the pipeline mode, the threshold
    ladder position) for every training epoch from the
    :class:`~lightgraph.functional.loss_descent_rate.LossDescentRate` of the previous
    epochs: :meth:`_next` gets the tracker's
    :meth:`~lightgraph.functional.loss_descent_rate.LossDescentRate.more_precision`, whose
    answer depends on ``reading`` (``"more_precision_when_descent_slows"`` or
    ``"more_precision_when_descent_speeds_up"``; see the tracker). The timeline of epoch
    :math:`t`:

    * ``on_train_batch_start`` / ``on_train_batch_end``: :math:`et_t` accumulates the cost
      of the epoch's training batches, as ``time_source`` says (validation is not
      counted): their wall time (``"wall"``, seconds), their number (``"steps"``) or the
      bytes this rank's exchange sent during them (``"bytes"``);
    * ``on_train_epoch_end``: epoch :math:`t` becomes *pending*;
    * ``on_train_epoch_start`` of epoch :math:`t + 1`: the epoch-level ``monitor`` value of
      epoch :math:`t` is read from ``trainer.callback_metrics`` (epoch-level metrics logged
      in ``LightningModule.on_train_epoch_end`` are complete only then), rank 0's
      :math:`(L_t, et_t)` is broadcast, every rank updates its tracker with the same values
      and so takes the same decision, and the setting of epoch :math:`t + 1` is applied.

    Checkpoints store the tracker (with its ``window``, ``smoothing`` and ``reading``:
    resuming with other values is an error), the setting, the history and the pending
    epoch. A checkpoint written between the end of epoch :math:`t` and the start of
    :math:`t + 1` (``ModelCheckpoint`` at train-epoch end, ``trainer.save_checkpoint``
    after ``fit``) also stores :math:`L_t`, read from ``trainer.callback_metrics`` in
    :meth:`on_save_checkpoint`, so a resumed run takes exactly the decision the
    uninterrupted run would have taken.

    **Replay.** With ``time_source="wall"`` every decision depends on measured times: two
    runs, or a run and its resumption, decide alike only while the measured times happen
    to order the descent rates alike. ``"steps"`` and ``"bytes"`` are counted, not
    measured: given the same losses they give the same readings and decisions, on every
    rank (rank 0's count is broadcast) and after resuming (the count of an unfinished
    epoch is checkpointed with the rest). The ``time_source`` is checkpointed; resuming
    with another one is an error, since the kept LDRs would mix units.
    """

    _log_key: str = ""

    def __init__(
        self,
        window: int,
        smoothing: float,
        monitor: str,
        log: bool,
        reading: str = DEFAULT_READING,
        time_source: str = DEFAULT_TIME_SOURCE,
    ) -> None:
        owner = type(self).__name__
        self.window = check_window(owner, window)
        self.smoothing = check_smoothing(owner, smoothing)
        self.reading = check_reading(owner, reading)
        self.time_source = check_time_source(owner, time_source)
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(
                f"{owner}: expected `monitor` to be a non-empty metric name but got {monitor!r}."
            )
        self.monitor = monitor
        # Not `self.log`: Lightning overwrites every callback's `log` attribute with the
        # LightningModule's `log` method when the fit starts.
        self.log_metrics = check_bool(owner, "log", log)
        self.tracker = LossDescentRate(
            smoothing=self.smoothing, window=self.window, reading=self.reading
        )
        #: The setting in force (``None`` before the first training epoch).
        self.setting: SettingT | None = None
        #: ``(epoch, setting)`` for every training epoch started, across resumes.
        self.history: list[tuple[int, SettingT]] = []
        # Times each training batch ("wall"); its clock is `_clock` (tests inject a fake one).
        self._batch_timer = Stopwatch()
        # The exchange's byte count when the running training batch started ("bytes").
        self._batch_bytes: int | None = None
        # The cost of the current epoch's training batches so far, in the time source's unit.
        self._epoch_time = 0.0
        # A finished epoch not yet fed to the tracker: {"epoch", "time", "loss"}.
        self._pending: dict[str, Any] | None = None
        self._epochs_started = 0  # in the current `fit`

    @property
    def _clock(self) -> Clock:
        """The clock the training batches are timed with (default ``time.perf_counter``)."""
        return self._batch_timer.clock

    @_clock.setter
    def _clock(self, clock: Clock) -> None:
        self._batch_timer.clock = clock

    # ---------------------------------------------------------------- subclass interface
    @abstractmethod
    def _target(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Any:
        """The object the setting is written to; raises a clear error if there is none."""

    @abstractmethod
    def _apply(self, target: Any, setting: SettingT) -> None:
        """Write ``setting`` to ``target``."""

    @abstractmethod
    def _initial(self) -> SettingT:
        """The setting of epoch 0."""

    @abstractmethod
    def _next(self, setting: SettingT, more_precision: bool | None) -> SettingT:
        """The setting of epoch :math:`t + 1` from that of epoch :math:`t` and the LDR test.

        ``more_precision`` is the tracker's answer for epoch :math:`t` under ``reading``:
        ``True`` (tighten: more bits, sync, lower threshold), ``False`` (relax) or
        ``None`` (not enough history: keep the setting).
        """

    @abstractmethod
    def _check_setting(self, setting: Any) -> SettingT:
        """Validate (and adapt) a setting restored from a checkpoint."""

    @abstractmethod
    def _log_value(self, setting: SettingT) -> float:
        """The number logged as ``_log_key`` for ``setting``."""

    # ---------------------------------------------------------------- hooks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._target(
                trainer, pl_module
            )  # fail before training if the strategy cannot be driven
            if self.time_source == BYTES:
                self._stats(trainer, pl_module)
                if getattr(trainer, "world_size", None) == 1:
                    raise RuntimeError(
                        f"{type(self).__name__}: time_source='bytes' counts the bytes the "
                        "exchange sends to other ranks, and a single process sends none; "
                        "use time_source='steps' for a deterministic epoch cost on one process."
                    )

    def _stats(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> ExchangeStats:
        stats = exchange_stats(pl_module)
        if stats is None:
            raise RuntimeError(
                f"{type(self).__name__}: time_source='bytes' reads the byte counters of the "
                "strategy's exchange (the halo exchanger of BoundaryExchangeStrategy or the "
                "sequence parallelism of GraphParallelStrategy, handed to the module's "
                f"parallel_context), but the strategy {type(trainer.strategy).__name__} counts "
                "no bytes for this module; use time_source='steps' for a deterministic epoch "
                "cost, or time_source='wall'."
            )
        return stats

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epochs_started = 0
        self._batch_timer.reset()
        self._batch_bytes = None
        # A run resumed mid-epoch gets no `on_train_epoch_start` for that epoch.
        if self.setting is not None:
            self._apply(self._target(trainer, pl_module), self.setting)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._consume(trainer, pending)
        if self.setting is None:
            self.setting = self._initial()
        self._apply(self._target(trainer, pl_module), self.setting)
        epoch = trainer.current_epoch
        if self.history and self.history[-1][0] == epoch:
            self.history[-1] = (epoch, self.setting)
        else:
            self.history.append((epoch, self.setting))
        self._epochs_started += 1
        self._epoch_time = 0.0
        if self.log_metrics:
            pl_module.log(
                self._log_key,
                self._log_value(self.setting),
                on_step=False,
                on_epoch=True,
                reduce_fx="max",
                sync_dist=True,  # identical on every rank; avoids Lightning's warning
                batch_size=1,
            )

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.time_source == WALL:
            self._batch_timer.start()
        elif self.time_source == BYTES:
            self._batch_bytes = self._stats(trainer, pl_module).total("train")

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.time_source == WALL:
            if self._batch_timer.running:
                self._epoch_time += self._batch_timer.stop()
        elif self.time_source == STEPS:
            self._epoch_time += 1.0
        elif self._batch_bytes is not None:
            # The exchange records its bytes synchronously (forward and backward): all of
            # this batch's are counted by now.
            sent = self._stats(trainer, pl_module).total("train") - self._batch_bytes
            self._epoch_time += float(sent)
            self._batch_bytes = None

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pending = {"epoch": trainer.current_epoch, "time": self._epoch_time, "loss": None}

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Epoch t is over but its loss is consumed only when epoch t + 1 starts: store it
        # now, or a run resumed from this checkpoint could not take that decision.
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is None or state.get("pending") is None or state["pending"]["loss"] is not None:
            return
        value = trainer.callback_metrics.get(self.monitor)
        state["pending"]["loss"] = None if value is None else float(value)

    # ---------------------------------------------------------------- decision
    def _consume(self, trainer: pl.Trainer, pending: dict[str, Any]) -> None:
        loss = pending["loss"]
        if loss is None:
            value = trainer.callback_metrics.get(self.monitor)
            if value is None:
                if self._epochs_started == 0:
                    # Left over from a checkpoint without the loss or from an earlier `fit`.
                    rank_zero_warn(
                        f"{type(self).__name__}: the `{self.monitor}` of epoch {pending['epoch']} "
                        "is unknown (not stored in the checkpoint); that epoch is skipped."
                    )
                    return
                raise RuntimeError(
                    f"{type(self).__name__}: the LightningModule did not log `{self.monitor}` in "
                    f"training epoch {pending['epoch']}; log the global training loss with "
                    f"`self.log({self.monitor!r}, loss, on_epoch=True, sync_dist=True)` or set "
                    "`monitor` to a metric it logs."
                )
            loss = float(value)
        # Every rank decides from rank 0's loss and epoch cost: identical decisions.
        loss, cost = trainer.strategy.broadcast((float(loss), float(pending["time"])), src=0)
        if self.time_source != WALL and not cost > 0.0:
            what = "batches" if self.time_source == STEPS else "bytes sent by rank 0's exchange"
            hint = (
                "every training epoch needs at least one batch"
                if self.time_source == STEPS
                else "rank 0 has no boundary rows to send (or the exchange ran no training "
                "exchange); use time_source='steps'"
            )
            raise RuntimeError(
                f"{type(self).__name__}: training epoch {pending['epoch']} cost {cost:g} "
                f"{what} (time_source={self.time_source!r}) but the loss descent rate divides "
                f"by the epoch cost; {hint}."
            )
        self.tracker.update(loss, cost)
        if self.setting is None:
            self.setting = self._initial()
        self.setting = self._next(self.setting, self.tracker.more_precision())

    # ---------------------------------------------------------------- state
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "tracker": self.tracker.state_dict(),
            "setting": self.setting,
            "history": [[epoch, setting] for epoch, setting in self.history],
            "pending": None if self._pending is None else dict(self._pending),
            "epoch_time": self._epoch_time,
            "time_source": self.time_source,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A state without "time_source" was saved before the option existed: wall time.
        saved = state_dict.get("time_source", WALL)
        if saved != self.time_source:
            raise ValueError(
                f"{type(self).__name__}: the state was saved with time_source={saved!r} but "
                f"this callback has time_source={self.time_source!r}; the kept loss descent "
                f"rates are per {_UNITS.get(saved, saved)}, new ones would be per "
                f"{_UNITS[self.time_source]}: resume with the same time_source."
            )
        self.tracker.load_state_dict(state_dict["tracker"])
        setting = state_dict["setting"]
        self.setting = None if setting is None else self._check_setting(setting)
        self.history = [(int(epoch), value) for epoch, value in state_dict["history"]]
        pending = state_dict["pending"]
        self._pending = None if pending is None else dict(pending)
        self._epoch_time = float(state_dict.get("epoch_time", 0.0))
