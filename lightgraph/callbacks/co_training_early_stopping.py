"""Early stopping for LM + GNN co-training: stop on a plateau, but only after the LM is done."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightgraph.utilities.checks import check_int


class CoTrainingEarlyStopping(EarlyStopping):
    """Lightning's :class:`~lightning.pytorch.callbacks.EarlyStopping` for a module that
    co-trains a language model (LM) with a GNN (:class:`~lightgraph.models.UniTGModule`).

    The stopping rule is :class:`EarlyStopping`'s (``monitor``, ``mode``, ``patience``,
    ``min_delta``, ...; default: ``val_acc``, ``"max"``), with two changes for the LM:

    * When it fires while the LM still has optimiser steps left (the collaborative
      schedule spreads them over the first ``lm_share`` of the epochs), the run does not
      stop: the module runs all the LM's remaining steps in the next training epoch
      (front-loaded, ``pl_module.finish_lm()``) and refreshes the embedding store with the
      finished LM.
    * In the epoch the LM finishes (its last step and the store refresh, whether
      scheduled or asked for above), the GNN's input changes, so the plateau count starts
      again (``wait_count = 0``; the best score so far is kept). The run then stops at the
      first plateau of ``patience`` checks on the final embeddings: never fewer than
      ``patience`` epochs after the refresh. (Stopping right after the refresh would end a
      run whose GNN has seen the final embeddings for one epoch: with patience 3 and the
      LM in the first tenth of the epochs, UniTG on 2 processes stopped after 6 epochs at
      19.8 % test accuracy; docs/unitg.md.)

    A module whose LM is done (or that has none) stops as with :class:`EarlyStopping`.
    The module provides ``lm_finished`` (bool) and ``finish_lm()``; a module without them
    is treated as finished. The decisions are :class:`EarlyStopping`'s (identical on every
    rank) and the module's LM step count, so every rank defers and stops together. The
    state (deferral, whether the LM was seen finished) is checkpointed with the callback's.

    Args:
        monitor: the logged metric to watch.
        patience: checks without improvement before stopping.
        mode: ``"max"`` or ``"min"``.
        min_delta: smallest change that counts as an improvement.
        verbose: log the decisions.
        strict: raise if ``monitor`` is missing.
        check_finite: stop when the metric becomes NaN or infinite.
        check_on_train_epoch_end: as :class:`EarlyStopping` (``None``: decided by Lightning).
    """

    def __init__(
        self,
        monitor: str = "val_acc",
        patience: int = 10,
        mode: str = "max",
        min_delta: float = 0.0,
        verbose: bool = False,
        strict: bool = True,
        check_finite: bool = True,
        check_on_train_epoch_end: bool | None = None,
    ) -> None:
        check_int(type(self).__name__, "patience", patience, low=0)
        super().__init__(
            monitor=monitor,
            patience=patience,
            mode=mode,
            min_delta=min_delta,
            verbose=verbose,
            strict=strict,
            check_finite=check_finite,
            check_on_train_epoch_end=check_on_train_epoch_end,
        )
        #: The plateau was reached and the LM's remaining steps run in the next epoch.
        self.deferred = False
        #: Epoch at which a plateau was first detected while the LM had steps left
        #: (``None``: not yet).
        self.plateau_epoch: int | None = None
        #: The epoch whose check first saw the LM finished (the plateau count restarted
        #: there; ``None``: not yet).
        self.lm_finished_epoch: int | None = None

    @override
    def _run_early_stopping_check(self, trainer: pl.Trainer) -> None:
        module = trainer.lightning_module
        finished = bool(getattr(module, "lm_finished", True))
        if finished and self.lm_finished_epoch is None:
            # The LM's last step and the store refresh happened since the last check: the
            # GNN's input changed, so the plateau is counted afresh on the final embeddings.
            self.lm_finished_epoch = trainer.current_epoch
            self.deferred = False
            self.wait_count = 0
        if self.deferred:  # the finishing epoch has not run yet
            return
        was_stopping = trainer.should_stop
        super()._run_early_stopping_check(trainer)
        if not trainer.should_stop or was_stopping or finished:
            return
        # Not yet: the LM's remaining steps and the store refresh first.
        trainer.should_stop = False
        self.stopped_epoch = 0
        self.deferred = True
        self.plateau_epoch = trainer.current_epoch
        module.finish_lm()
        rank_zero_info(
            f"{type(self).__name__}: `{self.monitor}` plateaued at epoch {trainer.current_epoch}; "
            "the LM's remaining steps run in the next epoch, and the plateau is counted again "
            "on the final embeddings."
        )

    @override
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["deferred"] = self.deferred
        state["plateau_epoch"] = self.plateau_epoch
        state["lm_finished_epoch"] = self.lm_finished_epoch
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        self.deferred = bool(state.pop("deferred", False))
        self.plateau_epoch = state.pop("plateau_epoch", None)
        self.lm_finished_epoch = state.pop("lm_finished_epoch", None)
        super().load_state_dict(state)


__all__ = ["CoTrainingEarlyStopping"]
