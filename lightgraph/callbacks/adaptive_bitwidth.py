"""Sylvie's time-adaptive quantization: retune the base bit-width between epochs (Eq. 5)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from lightgraph.callbacks.ldr_schedule import DEFAULT_TIME_SOURCE, LDRSchedule
from lightgraph.distributed.context import parallel_context
from lightgraph.functional.loss_descent_rate import DEFAULT_READING
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.quant.fixed_bits import FixedBits
from lightgraph.utilities.checks import BITS, check_bits


class AdaptiveBitWidth(LDRSchedule[int]):
    """Sylvie's time-adaptive quantization (ICDE'24, §V-A, Eq. 5): the base bit-width per epoch.

    Sets the exchange's ``policy.base_bits`` (:math:`b_t`) before every
    training epoch from the Loss Descent Rate of the previous ones (see
    :class:`~lightgraph.functional.loss_descent_rate.LossDescentRate` for the definition,
    the sign convention and the two readings; :math:`\\mathrm{more}(t)` is its
    :meth:`~lightgraph.functional.loss_descent_rate.LossDescentRate.more_precision`):

    .. math::

        b_0 = b_{min}, \\qquad
        b_{t+1} = \\begin{cases}
            \\min(2 b_t, b_{max}) & t > \\delta \\text{ and more}(t) \\\\
            \\max(b_t / 2, b_{min}) & t > \\delta \\text{ and not more}(t) \\\\
            b_t & t \\le \\delta
        \\end{cases}

    with, for ``reading="more_precision_when_descent_slows"``,
    :math:`\\mathrm{more}(t) \\iff LDR_t > LDR_{t-\\delta}` (the loss now falls more
    slowly than :math:`\\delta` epochs ago: convergence, or too much quantisation error,
    doubles the width; a healthy descent halves it again), and for
    ``reading="more_precision_when_descent_speeds_up"``,
    :math:`\\mathrm{more}(t) \\iff LDR_t < LDR_{t-\\delta}` (Eq. 5's inequality read
    literally with the signed LDR). Training starts cheap (:math:`b_{min}`). The policy's
    data-adaptive part (e.g. :class:`~lightgraph.quant.DegreeAwareBits`) then refines the
    per-node widths on top of :math:`b_t`.

    :math:`L_t` is the epoch-level ``monitor`` metric (the global training loss
    :class:`~lightgraph.models.NodeClassifier` logs as ``train_loss``: the mean over all
    training nodes, i.e. the partitions' means weighted by their training nodes, not
    Sylvie's unweighted mean of the partitions' losses), :math:`et_t` the
    wall time of the epoch's training batches (or, with ``time_source``, their number or
    the bytes they sent: deterministic, for replayable schedules). Decisions are taken from rank 0's values
    and are identical on all ranks. The width of every epoch is logged as ``bitwidth``
    (with ``log=True``) and kept in :attr:`history`.

    Needs a strategy with a quantisable exchange: the halo exchanger of
    ``BoundaryExchangeStrategy`` or the token all-to-alls of ``GraphParallelStrategy``
    (:class:`~lightgraph.distributed.SequenceParallel`, TorchGT's sequence parallelism;
    its rows are token rows). If the exchange has a bit-width policy (e.g.
    ``quantization=DegreeAwareBits(...)``) the callback drives that policy's base width;
    on an FP32 exchange it installs ``FixedBits(b_min)``, i.e. the purely time-adaptive
    scheme in which every row uses :math:`b_t`.

    Args:
        b_min: smallest base width, one of (1, 2, 4, 8); also the width of epoch 0.
        b_max: largest base width, one of (1, 2, 4, 8), ``>= b_min``.
        window: :math:`\\delta`, the LDR comparison range in epochs (5: better quality,
            20: faster, per Sylvie).
        smoothing: :math:`\\lambda` of the running average loss (Sylvie: 0.9).
        monitor: the logged epoch-level training loss.
        log: log ``bitwidth`` every epoch.
        reading: when to double the width, ``"more_precision_when_descent_slows"`` or
            ``"more_precision_when_descent_speeds_up"`` (see above and
            ``docs/callbacks.md`` for the measured choice of the default).
        time_source: what :math:`et_t` counts: ``"wall"`` (seconds of the epoch's training
            batches, the paper's), ``"steps"`` (their number) or ``"bytes"`` (bytes rank
            0's exchange sent during them); the counted ones replay exactly (see
            :class:`~lightgraph.callbacks.LDRSchedule` and ``docs/callbacks.md``).
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
        reading: str = DEFAULT_READING,
        time_source: str = DEFAULT_TIME_SOURCE,
    ) -> None:
        self.b_min = check_bits("AdaptiveBitWidth", "b_min", b_min)
        self.b_max = check_bits("AdaptiveBitWidth", "b_max", b_max)
        if b_min > b_max:
            raise ValueError(
                f"AdaptiveBitWidth: expected `b_min` <= `b_max` but got b_min={b_min!r}, "
                f"b_max={b_max!r}."
            )
        super().__init__(
            window=window,
            smoothing=smoothing,
            monitor=monitor,
            log=log,
            reading=reading,
            time_source=time_source,
        )

    @override
    def _target(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> BitWidthPolicy:
        context = parallel_context(pl_module)
        # The halo exchanger (partition parallelism) or the sequence-parallel all-to-alls
        # (graph parallelism): both quantise their messages with a BitWidthPolicy.
        exchanger: Any = context.halo_exchanger
        if exchanger is None:
            exchanger = context.sequence_parallel
        if exchanger is None:
            raise RuntimeError(
                "AdaptiveBitWidth needs the halo exchanger of a boundary-exchange strategy, e.g. "
                "BoundaryExchangeStrategy(quantization=...), or the sequence parallelism of a "
                "graph-parallel strategy, e.g. GraphParallelStrategy(quantization=...), handed "
                "to the module's parallel_context; the strategy is "
                f"{type(trainer.strategy).__name__}."
            )
        if exchanger.policy is None:
            # An FP32 exchange gets Sylvie's purely time-adaptive scheme: one width for
            # every row, b_t itself (this is what stacking the fragment on vanilla means).
            exchanger.set_policy(FixedBits(self.b_min))
        assert exchanger.policy is not None
        return exchanger.policy

    @override
    def _apply(self, target: Any, setting: int) -> None:
        target.base_bits = setting

    @override
    def _initial(self) -> int:
        return self.b_min

    @override
    def _next(self, setting: int, more_precision: bool | None) -> int:
        if more_precision is None:
            return setting
        if more_precision:
            return min(2 * setting, self.b_max)
        return max(setting // 2, self.b_min)

    @override
    def _check_setting(self, setting: Any) -> int:
        bits = check_bits("AdaptiveBitWidth", "base_bits (checkpoint)", setting, BITS)
        return min(max(bits, self.b_min), self.b_max)

    @override
    def _log_value(self, setting: int) -> float:
        return float(setting)
