"""Sylvie's Pipeline Adaptor: switch the halo exchange between async and sync per epoch."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from lightgraph.callbacks.ldr_schedule import DEFAULT_TIME_SOURCE, LDRSchedule
from lightgraph.distributed.context import parallel_context
from lightgraph.distributed.halo_exchanger import HaloExchanger
from lightgraph.functional.loss_descent_rate import DEFAULT_READING

MODES: tuple[str, ...] = ("sync", "async")


class PipelineAdaptor(LDRSchedule[str]):
    """Sylvie's Pipeline Adaptor (ICDE'24, §V-B): staleness control of the async pipeline.

    Training runs with the one-epoch-stale inter-epoch pipeline (``exchanger.mode =
    "async"``) by default. When the Loss Descent Rate asks for more precision
    (:math:`\\mathrm{more}(t)`, the tracker's
    :meth:`~lightgraph.functional.loss_descent_rate.LossDescentRate.more_precision`),
    Sylvie reads it as convergence downgraded by staleness and runs the next epoch
    synchronously, which also refreshes every stale halo buffer:

    .. math::

        m_0 = \\mathrm{async}, \\qquad
        m_{t+1} = \\begin{cases}
            \\mathrm{sync} & t > \\delta \\text{ and more}(t) \\\\
            \\mathrm{async} & \\text{otherwise}
        \\end{cases}

    With ``reading="more_precision_when_descent_slows"``, :math:`\\mathrm{more}(t)` means
    the loss now falls more slowly than :math:`\\delta` epochs ago (signed
    :math:`LDR_t > LDR_{t-\\delta}`, the paper's prose); with
    ``reading="more_precision_when_descent_speeds_up"`` it means the loss falls faster
    (signed :math:`LDR_t < LDR_{t-\\delta}`, the paper's inequality read literally). See
    :class:`~lightgraph.functional.loss_descent_rate.LossDescentRate`.

    :math:`L_t` is the epoch-level ``monitor`` metric, :math:`et_t` the wall time of the
    epoch's training batches (or, with ``time_source``, their number or the bytes they
    sent); decisions are taken from rank 0's values and are identical
    on all ranks. The mode of every epoch is logged as ``pipeline_sync`` (1 = sync,
    0 = async; with ``log=True``) and kept in :attr:`history`.

    Needs a strategy with a halo exchanger, e.g. ``BoundaryExchangeStrategy``; combine it
    with :class:`~lightgraph.callbacks.AdaptiveBitWidth` for Sylvie's full online stage.

    Args:
        window: :math:`\\delta`, the LDR comparison range in epochs.
        smoothing: :math:`\\lambda` of the running average loss (Sylvie: 0.9).
        monitor: the logged epoch-level training loss.
        log: log ``pipeline_sync`` every epoch.
        reading: when to run a synchronous epoch, ``"more_precision_when_descent_slows"``
            or ``"more_precision_when_descent_speeds_up"`` (see above).
        time_source: what :math:`et_t` counts: ``"wall"`` (seconds of the epoch's training
            batches, the paper's), ``"steps"`` (their number) or ``"bytes"`` (bytes rank
            0's exchange sent during them); the counted ones replay exactly (see
            :class:`~lightgraph.callbacks.LDRSchedule` and ``docs/callbacks.md``).
    """

    _log_key = "pipeline_sync"

    def __init__(
        self,
        window: int = 5,
        smoothing: float = 0.9,
        monitor: str = "train_loss",
        log: bool = True,
        reading: str = DEFAULT_READING,
        time_source: str = DEFAULT_TIME_SOURCE,
    ) -> None:
        super().__init__(
            window=window,
            smoothing=smoothing,
            monitor=monitor,
            log=log,
            reading=reading,
            time_source=time_source,
        )

    @override
    def _target(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> HaloExchanger:
        exchanger = parallel_context(pl_module).halo_exchanger
        if exchanger is None:
            raise RuntimeError(
                "PipelineAdaptor needs the halo exchanger of a boundary-exchange strategy, e.g. "
                "BoundaryExchangeStrategy(mode='async'), handed to the module's "
                f"parallel_context; the strategy is {type(trainer.strategy).__name__}."
            )
        return exchanger

    @override
    def _apply(self, target: HaloExchanger, setting: str) -> None:
        target.mode = setting

    @override
    def _initial(self) -> str:
        return "async"

    @override
    def _next(self, setting: str, more_precision: bool | None) -> str:
        return "sync" if more_precision else "async"

    @override
    def _check_setting(self, setting: Any) -> str:
        if setting not in MODES:
            raise ValueError(
                f"PipelineAdaptor: expected the checkpointed `mode` to be one of {MODES} but got "
                f"{setting!r}."
            )
        return str(setting)

    @override
    def _log_value(self, setting: str) -> float:
        return 1.0 if setting == "sync" else 0.0
