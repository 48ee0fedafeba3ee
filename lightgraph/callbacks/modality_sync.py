"""UniTG's Modality Collaborator: copy the LM's embeddings into the GNN every Δt epochs.

UniTG is ch. 5 of Zhang's thesis (*Algorithm and System Co-design for Efficient and
Scalable Graph Learning*, NTU 2026); section numbers below are the thesis's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightgraph.functional.loss_descent_rate import check_smoothing
from lightgraph.functional.sync_interval import (
    DEFAULT_LADDER,
    SyncIntervalSchedule,
    check_ladder,
)
from lightgraph.typing import EmbeddingSyncTarget
from lightgraph.utilities.checks import check_bool, check_int, check_optional_int


class ModalitySync(Callback):
    """UniTG's Modality Collaborator (thesis §5.3.3) for LM + GNN co-training.

    Every :math:`\\Delta t` GNN epochs the LightningModule's
    :meth:`~lightgraph.typing.EmbeddingSyncTarget.sync_embeddings` copies the language
    model's current node embeddings into the GNN's input store. :math:`\\Delta t` follows
    :class:`~lightgraph.functional.SyncIntervalSchedule`: it starts at :math:`0.3J` and
    steps down the ladder :math:`\\{0.3J, 0.2J, 0.1J, 0.02J\\}` each time the Running
    Average Loss

    .. math::

        F_0 = L_0, \\qquad F_j = 0.8\\,F_{j-1} + 0.2\\,\\mathcal{L}^{\\text{GNN}}_j

    has fallen (:math:`F_j < F_{j-1}`) for ``patience`` = 20 consecutive epochs; otherwise
    :math:`\\Delta t` stays. A ladder step counts for the sync decision of the epoch it
    happens in (see the decision order of
    :class:`~lightgraph.functional.SyncIntervalSchedule`).

    The module must implement :class:`~lightgraph.typing.EmbeddingSyncTarget` (checked in
    ``setup``). Timeline of GNN epoch :math:`j`, in ``on_train_epoch_end``:

    * :math:`\\mathcal{L}^{\\text{GNN}}_j` is read from ``pl_module.epoch_gnn_loss``.
      Lightning runs the callbacks' ``on_train_epoch_end`` *before* the module's, so the
      module must have set it by the end of its last training batch;
    * rank 0's loss is broadcast, every rank updates its schedule with it and takes the
      same decision;
    * if the schedule says so, ``pl_module.sync_embeddings()`` runs on every rank (a
      collective), after the epoch's validation: the synced embeddings feed epoch
      :math:`j + 1`;
    * with ``log=True``: ``sync_interval`` (:math:`\\Delta t` in epochs used for the
      decision) is logged at epoch level. The fraction of nodes encoded is the module's
      to log (:class:`~lightgraph.models.UniTGModule` logs ``encoded_fraction`` every
      epoch, with or without this callback); the callback keeps the last value
      ``sync_embeddings`` returned in :attr:`encoded_fraction`.

    A module with nothing to sync (``pl_module.has_lm`` is ``False``, e.g. a
    :class:`~lightgraph.models.UniTGModule` built with ``lm=None``) makes the callback a
    no-op for the fit: one info line says so, no schedule is updated, nothing is logged.

    :attr:`history` lists ``(epoch, interval, synced)`` for every epoch, across resumes.
    Checkpoints carry the schedule, so a resumed run continues the same trajectory; an
    epoch whose end hooks a resumed run replays (a checkpoint written at train-epoch end)
    is not counted twice. A checkpoint written after the epoch's last training batch but
    before this callback's epoch-end hook (``ModelCheckpoint(save_on_train_epoch_end=
    False)``) stores that epoch's loss, and the resumed run consumes it first.

    Args:
        total_epochs: :math:`J`, the number of GNN epochs of the run; ``None``: the
            trainer's ``max_epochs``. Pass it when resuming with another ``max_epochs``.
        ladder: the interval fractions of :math:`J`, strictly decreasing in ``(0, 1]``.
        patience: consecutive falls of :math:`F_j` that step the ladder down.
        smoothing: :math:`\\lambda` of the running average loss (UniTG: 0.8).
        log: log ``sync_interval`` every epoch.
    """

    def __init__(
        self,
        total_epochs: int | None = None,
        ladder: Sequence[float] = DEFAULT_LADDER,
        patience: int = 20,
        smoothing: float = 0.8,
        log: bool = True,
    ) -> None:
        owner = type(self).__name__
        self.total_epochs = check_optional_int(owner, "total_epochs", total_epochs)
        self.ladder = check_ladder(owner, ladder)
        self.patience = check_int(owner, "patience", patience)
        self.smoothing = check_smoothing(owner, smoothing)
        # Not `self.log`: Lightning overwrites every callback's `log` attribute with the
        # LightningModule's `log` method when the fit starts.
        self.log_metrics = check_bool(owner, "log", log)
        #: The schedule, built in ``setup`` once :math:`J` is known.
        self.schedule: SyncIntervalSchedule | None = None
        #: The fraction of nodes encoded, as returned by the latest ``sync_embeddings``.
        self.encoded_fraction = 0.0
        # A checkpointed epoch whose batches were done but whose loss was not consumed yet.
        self._pending: dict[str, Any] | None = None
        # State loaded before `setup` built the schedule.
        self._loaded: dict[str, Any] | None = None
        #: ``False`` when the module has no LM: the callback then does nothing.
        self.active = True

    @property
    def history(self) -> list[tuple[int, int, bool]]:
        """``(epoch, interval, synced)`` for every GNN epoch (empty before training)."""
        return [] if self.schedule is None else self.schedule.history

    @property
    def interval(self) -> int | None:
        """The current :math:`\\Delta t` in epochs (``None`` before ``setup``)."""
        return None if self.schedule is None else self.schedule.interval

    # ---------------------------------------------------------------- hooks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not isinstance(pl_module, EmbeddingSyncTarget):
            missing = [
                name
                for name in ("sync_embeddings", "epoch_gnn_loss")
                if not hasattr(pl_module, name)
            ]
            raise TypeError(
                "ModalitySync: expected the LightningModule to implement the "
                "lightgraph.typing.EmbeddingSyncTarget protocol (a `sync_embeddings() -> float` "
                f"method and an `epoch_gnn_loss` property) but {type(pl_module).__name__} lacks "
                f"{missing or ['a callable `sync_embeddings`']}."
            )
        # Optional capability of the protocol: a co-training module without an LM (a
        # GNN-only run of a co-training recipe) has nothing to sync.
        self.active = bool(getattr(pl_module, "has_lm", True))
        if not self.active:
            rank_zero_info(
                f"ModalitySync: {type(pl_module).__name__} has no LM (has_lm=False), so there "
                "are no embeddings to sync; the callback does nothing in this fit."
            )
        total = self._total_epochs(trainer)
        if self.schedule is None or (
            self.schedule.total_epochs != total and not self.schedule.history
        ):
            self.schedule = SyncIntervalSchedule(
                total_epochs=total,
                ladder=self.ladder,
                patience=self.patience,
                smoothing=self.smoothing,
            )
        elif self.schedule.total_epochs != total:
            raise ValueError(
                f"ModalitySync: the schedule was built for total_epochs={self.schedule.total_epochs} "
                f"but this fit has total_epochs={total} (trainer.max_epochs={trainer.max_epochs}); "
                "pass `total_epochs` explicitly to continue the same schedule."
            )
        if self._loaded is not None:
            loaded, self._loaded = self._loaded, None
            self.load_state_dict(loaded)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.active:
            return
        # A checkpointed epoch whose end hooks the resumed run did not replay.
        pending = self._pending
        if pending is not None and pending["epoch"] < trainer.current_epoch:
            self._pending = None
            if self._is_new(pending["epoch"]):
                self._consume(trainer, pl_module, pending["epoch"], pending["loss"])

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.active:
            return
        schedule = self._require_schedule()
        epoch = trainer.current_epoch
        if self._is_new(epoch):  # else: replayed after a resume, already counted
            pending, self._pending = self._pending, None
            if pending is not None and pending["epoch"] == epoch:
                loss = pending["loss"]
            else:
                loss = cast(EmbeddingSyncTarget, pl_module).epoch_gnn_loss
            self._consume(trainer, pl_module, epoch, loss)
        if self.log_metrics:
            pl_module.log(
                "sync_interval",
                float(schedule.interval),
                on_step=False,
                on_epoch=True,
                reduce_fx="max",
                sync_dist=True,  # identical on every rank; avoids Lightning's warning
                batch_size=1,
            )

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Saved after the epoch's last training batch but before `on_train_epoch_end` (e.g.
        # at validation end): store the epoch's loss, or the resumed run could not count it.
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is None or self.schedule is None:  # nothing to store outside a fit
            return
        epoch = trainer.current_epoch
        if not self._is_new(epoch) or not _training_batches_done(trainer):
            return
        loss = getattr(pl_module, "epoch_gnn_loss", None)
        if loss is not None:
            state["pending"] = {"epoch": int(epoch), "loss": float(loss)}

    # ---------------------------------------------------------------- decision
    def _consume(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, epoch: int, loss: Any
    ) -> None:
        schedule = self._require_schedule()
        local = None if loss is None else float(loss)
        # Every rank decides from rank 0's loss: identical decisions, identical collectives.
        value = trainer.strategy.broadcast(local, src=0)
        if value is None:
            raise RuntimeError(
                f"ModalitySync: `epoch_gnn_loss` of {type(pl_module).__name__} is None at the end "
                f"of training epoch {epoch}; set it to the epoch's GNN training loss (identical on "
                "every rank) during the training batches: callbacks' `on_train_epoch_end` runs "
                "before the LightningModule's."
            )
        if schedule.update(int(epoch), value):
            target = cast(EmbeddingSyncTarget, pl_module)  # checked in `setup`
            self.encoded_fraction = float(target.sync_embeddings())

    def _is_new(self, epoch: int) -> bool:
        last = self._require_schedule().last_epoch
        return last is None or epoch > last

    def _require_schedule(self) -> SyncIntervalSchedule:
        if self.schedule is None:
            raise RuntimeError(
                "ModalitySync: the schedule is not built; `setup(trainer, pl_module, 'fit')` "
                "must run first (the Trainer calls it)."
            )
        return self.schedule

    def _total_epochs(self, trainer: pl.Trainer) -> int:
        if self.total_epochs is not None:
            return self.total_epochs
        max_epochs = trainer.max_epochs
        if max_epochs is None or max_epochs < 1:
            raise ValueError(
                "ModalitySync: `total_epochs` is None, so J = trainer.max_epochs, but "
                f"trainer.max_epochs is {max_epochs!r} (unbounded); pass `total_epochs` "
                "(an integer >= 1, the number of GNN epochs)."
            )
        return int(max_epochs)

    # ---------------------------------------------------------------- state
    @override
    def state_dict(self) -> dict[str, Any]:
        if self.schedule is None and self._loaded is not None:
            return dict(self._loaded)
        return {
            "schedule": None if self.schedule is None else self.schedule.state_dict(),
            "encoded_fraction": self.encoded_fraction,
            "pending": None if self._pending is None else dict(self._pending),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        missing = {"schedule", "encoded_fraction", "pending"} - set(state_dict)
        if missing:
            raise KeyError(f"ModalitySync: state is missing the keys {sorted(missing)}.")
        if self.schedule is None:  # applied in `setup`, once J is known
            self._loaded = dict(state_dict)
            return
        if state_dict["schedule"] is not None:
            try:
                self.schedule.load_state_dict(state_dict["schedule"])
            except ValueError as err:
                hint = (
                    " With total_epochs=None, J is trainer.max_epochs: pass the run's "
                    "`total_epochs` explicitly when resuming with another max_epochs."
                    if self.total_epochs is None
                    else ""
                )
                raise ValueError(f"ModalitySync: cannot resume the schedule: {err}{hint}") from err
        self.encoded_fraction = float(state_dict["encoded_fraction"])
        pending = state_dict["pending"]
        self._pending = (
            None
            if pending is None
            else {"epoch": int(pending["epoch"]), "loss": float(pending["loss"])}
        )


def _training_batches_done(trainer: pl.Trainer) -> bool:
    """Whether the current epoch's training batches are all done but the epoch is not ended."""
    try:
        progress: Any = trainer.fit_loop.epoch_progress.current  # a _ProcessedTracker
        batches = trainer.fit_loop.epoch_loop.batch_progress
        return bool(progress.processed < progress.started and batches.is_last_batch)
    except AttributeError:  # another Lightning loop layout: no pending epoch
        return False
