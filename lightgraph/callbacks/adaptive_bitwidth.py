"""Sylvie's time-adaptive quantization: retune the base bit-width between epochs (Eq. 5)."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightgraph.callbacks.loss_descent_rate import LossDescentRate, check_smoothing, check_window
from lightgraph.quant.bit_width_policy import BITS, check_bits
from lightgraph.quant.fixed_bits import FixedBits

SettingT = TypeVar("SettingT", int, str)


def _exchanger(trainer: pl.Trainer) -> Any:
    """The strategy's halo exchanger, or ``None`` if it has none (yet)."""
    try:
        return trainer.strategy.exchanger  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return None


class _LDRSchedule(Callback, Generic[SettingT]):
    """Shared machinery of Sylvie's LDR-driven controllers (§V-A, §V-B).

    Subclasses choose a *setting* (the base bit-width, the pipeline mode) for every
    training epoch from the :class:`~lightgraph.callbacks.loss_descent_rate.LossDescentRate`
    of the previous epochs. The timeline of epoch :math:`t`:

    * ``on_train_batch_start`` / ``on_train_batch_end``: :math:`et_t` accumulates the wall
      time of the epoch's training batches (validation is not counted);
    * ``on_train_epoch_end``: epoch :math:`t` becomes *pending*;
    * ``on_train_epoch_start`` of epoch :math:`t + 1`: the epoch-level ``monitor`` value of
      epoch :math:`t` is read from ``trainer.callback_metrics`` (epoch-level metrics logged
      in ``LightningModule.on_train_epoch_end`` are complete only then), rank 0's
      :math:`(L_t, et_t)` is broadcast, every rank updates its tracker with the same values
      and so takes the same decision, and the setting of epoch :math:`t + 1` is applied.

    Checkpoints store the tracker, the setting, the history and the pending epoch. A
    checkpoint written between the end of epoch :math:`t` and the start of :math:`t + 1`
    (``ModelCheckpoint`` at train-epoch end, ``trainer.save_checkpoint`` after ``fit``)
    also stores :math:`L_t`, read from ``trainer.callback_metrics`` in
    :meth:`on_save_checkpoint`, so a resumed run takes exactly the decision the
    uninterrupted run would have taken.
    """

    _log_key: str = ""

    def __init__(self, window: int, smoothing: float, monitor: str, log: bool) -> None:
        owner = type(self).__name__
        self.window = check_window(owner, window)
        self.smoothing = check_smoothing(owner, smoothing)
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(
                f"{owner}: expected `monitor` to be a non-empty metric name but got {monitor!r}."
            )
        if not isinstance(log, bool):
            raise ValueError(f"{owner}: expected `log` to be one of (True, False) but got {log!r}.")
        self.monitor = monitor
        self.log = log
        self.tracker = LossDescentRate(smoothing=self.smoothing, window=self.window)
        #: The setting in force (``None`` before the first training epoch).
        self.setting: SettingT | None = None
        #: ``(epoch, setting)`` for every training epoch started, across resumes.
        self.history: list[tuple[int, SettingT]] = []
        self._clock: Callable[[], float] = time.perf_counter
        self._epoch_time = 0.0
        self._batch_start: float | None = None
        # A finished epoch not yet fed to the tracker: {"epoch", "time", "loss"}.
        self._pending: dict[str, Any] | None = None
        self._epochs_started = 0  # in the current `fit`

    # ---------------------------------------------------------------- subclass interface
    @abstractmethod
    def _target(self, trainer: pl.Trainer) -> Any:
        """The object the setting is written to; raises a clear error if there is none."""

    @abstractmethod
    def _apply(self, target: Any, setting: SettingT) -> None:
        """Write ``setting`` to ``target``."""

    @abstractmethod
    def _initial(self) -> SettingT:
        """The setting of epoch 0."""

    @abstractmethod
    def _next(self, setting: SettingT, degraded: bool | None) -> SettingT:
        """The setting of epoch :math:`t + 1` from that of epoch :math:`t` and the LDR test."""

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
            self._target(trainer)  # fail before training if the strategy cannot be driven

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epochs_started = 0
        self._batch_start = None
        # A run resumed mid-epoch gets no `on_train_epoch_start` for that epoch.
        if self.setting is not None:
            self._apply(self._target(trainer), self.setting)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._consume(trainer, pending)
        if self.setting is None:
            self.setting = self._initial()
        self._apply(self._target(trainer), self.setting)
        epoch = trainer.current_epoch
        if self.history and self.history[-1][0] == epoch:
            self.history[-1] = (epoch, self.setting)
        else:
            self.history.append((epoch, self.setting))
        self._epochs_started += 1
        self._epoch_time = 0.0
        if self.log:
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
        self._batch_start = self._clock()

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._batch_start is not None:
            self._epoch_time += self._clock() - self._batch_start
            self._batch_start = None

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
        # Every rank decides from rank 0's loss and epoch time: identical decisions.
        loss, seconds = trainer.strategy.broadcast((float(loss), float(pending["time"])), src=0)
        self.tracker.update(loss, seconds)
        if self.setting is None:
            self.setting = self._initial()
        self.setting = self._next(self.setting, self.tracker.degraded())

    # ---------------------------------------------------------------- state
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "tracker": self.tracker.state_dict(),
            "setting": self.setting,
            "history": [[epoch, setting] for epoch, setting in self.history],
            "pending": None if self._pending is None else dict(self._pending),
            "epoch_time": self._epoch_time,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.tracker.load_state_dict(state_dict["tracker"])
        setting = state_dict["setting"]
        self.setting = None if setting is None else self._check_setting(setting)
        self.history = [(int(epoch), value) for epoch, value in state_dict["history"]]
        pending = state_dict["pending"]
        self._pending = None if pending is None else dict(pending)
        self._epoch_time = float(state_dict.get("epoch_time", 0.0))


class AdaptiveBitWidth(_LDRSchedule[int]):
    """Sylvie's time-adaptive quantization (ICDE'24, §V-A, Eq. 5): the base bit-width per epoch.

    Sets ``trainer.strategy.exchanger.policy.base_bits`` (:math:`b_t`) before every
    training epoch from the Loss Descent Rate of the previous ones (see
    :class:`~lightgraph.callbacks.loss_descent_rate.LossDescentRate` for the definition and
    the sign convention; *degraded* means :math:`LDR_t > LDR_{t-\\delta}`, i.e. the loss
    now falls more slowly than :math:`\\delta` epochs ago):

    .. math::

        b_0 = b_{min}, \\qquad
        b_{t+1} = \\begin{cases}
            \\min(2 b_t, b_{max}) & t > \\delta \\text{ and degraded}(t) \\\\
            \\max(b_t / 2, b_{min}) & t > \\delta \\text{ and not degraded}(t) \\\\
            b_t & t \\le \\delta
        \\end{cases}

    Training starts cheap (:math:`b_{min}`); a slowing descent (convergence, or too much
    quantisation error) doubles the width, a healthy one halves it again. The policy's
    data-adaptive part (e.g. :class:`~lightgraph.quant.DegreeAwareBits`) then refines the
    per-node widths on top of :math:`b_t`.

    :math:`L_t` is the epoch-level ``monitor`` metric (the global training loss
    :class:`~lightgraph.models.NodeClassifier` logs as ``train_loss``), :math:`et_t` the
    wall time of the epoch's training batches. Decisions are taken from rank 0's values
    and are identical on all ranks. The width of every epoch is logged as ``bitwidth``
    (with ``log=True``) and kept in :attr:`history`.

    Needs a strategy with a halo exchanger (``BoundaryExchangeStrategy``). If its exchange
    has a bit-width policy (e.g. ``quantization=DegreeAwareBits(...)``) the callback drives
    that policy's base width; on an FP32 exchange it installs ``FixedBits(b_min)``, i.e.
    the purely time-adaptive scheme in which every row uses :math:`b_t`.

    Args:
        b_min: smallest base width, one of (1, 2, 4, 8); also the width of epoch 0.
        b_max: largest base width, one of (1, 2, 4, 8), ``>= b_min``.
        window: :math:`\\delta`, the LDR comparison range in epochs (5: better quality,
            20: faster, per Sylvie).
        smoothing: :math:`\\lambda` of the running average loss (Sylvie: 0.9).
        monitor: the logged epoch-level training loss.
        log: log ``bitwidth`` every epoch.
    """

    _log_key = "bitwidth"

    def __init__(
        self,
        b_min: int = 1,
        b_max: int = 8,
        window: int = 5,
        smoothing: float = 0.9,
        monitor: str = "train_loss",
        log: bool = True,
    ) -> None:
        self.b_min = check_bits("AdaptiveBitWidth", "b_min", b_min)
        self.b_max = check_bits("AdaptiveBitWidth", "b_max", b_max)
        if b_min > b_max:
            raise ValueError(
                f"AdaptiveBitWidth: expected `b_min` <= `b_max` but got b_min={b_min!r}, "
                f"b_max={b_max!r}."
            )
        super().__init__(window=window, smoothing=smoothing, monitor=monitor, log=log)

    @override
    def _target(self, trainer: pl.Trainer) -> Any:
        exchanger = _exchanger(trainer)
        policy = getattr(exchanger, "policy", None)
        if policy is None and exchanger is not None and hasattr(exchanger, "policy"):
            # An FP32 exchange gets Sylvie's purely time-adaptive scheme: one width for
            # every row, b_t itself (this is what stacking the fragment on vanilla means).
            policy = exchanger.policy = FixedBits(self.b_min)
        if policy is None or not hasattr(policy, "base_bits"):
            raise RuntimeError(
                "AdaptiveBitWidth needs `trainer.strategy.exchanger.policy` with a `base_bits` "
                "attribute, e.g. BoundaryExchangeStrategy(quantization=...); the strategy is "
                f"{type(trainer.strategy).__name__}."
            )
        return policy

    @override
    def _apply(self, target: Any, setting: int) -> None:
        target.base_bits = setting

    @override
    def _initial(self) -> int:
        return self.b_min

    @override
    def _next(self, setting: int, degraded: bool | None) -> int:
        if degraded is None:
            return setting
        if degraded:
            return min(2 * setting, self.b_max)
        return max(setting // 2, self.b_min)

    @override
    def _check_setting(self, setting: Any) -> int:
        bits = check_bits("AdaptiveBitWidth", "base_bits (checkpoint)", setting, BITS)
        return min(max(bits, self.b_min), self.b_max)

    @override
    def _log_value(self, setting: int) -> float:
        return float(setting)
