"""Print one line of metrics per epoch."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


class EpochSummary(Callback):
    """Prints the epoch's logged metrics on one line (global rank 0 only).

    A plain-text alternative to the progress bar for long multi-process runs and logs:
    ``epoch 12 | 0.41 s | train_loss 0.5312 | val_acc 0.8120 | ...``.

    Args:
        keys: metric names to print, in order; missing ones are skipped.
        every_n_epochs: print every ``n`` epochs (and always after the last one).
    """

    def __init__(
        self,
        keys: Sequence[str] = (
            "train_loss",
            "val_acc",
            "test_acc",
            "val_f1",
            "val_mrr",
            "test_f1",
            "comm_bytes",
            "train_step_time",
        ),
        every_n_epochs: int = 1,
    ) -> None:
        if not isinstance(every_n_epochs, int) or every_n_epochs < 1:
            raise ValueError(
                f"EpochSummary: expected `every_n_epochs` >= 1 but got {every_n_epochs!r}."
            )
        self.keys = list(keys)
        self.every_n_epochs = every_n_epochs
        self._start = 0.0
        self._pending: int | None = None

    # Epoch-level metrics reach ``trainer.callback_metrics`` only after every
    # ``on_train_epoch_end`` hook has run, so an epoch is printed when the next one starts
    # (or when training ends).
    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter()
        if self._pending is not None:
            self._print(trainer, self._pending, now - self._start)
        self._pending = trainer.current_epoch
        self._start = now

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            self._print(trainer, self._pending, time.perf_counter() - self._start, last=True)
        self._pending = None

    def _print(self, trainer: pl.Trainer, epoch: int, seconds: float, last: bool = False) -> None:
        if (epoch + 1) % self.every_n_epochs and not last:
            return
        # Every rank reads the metrics: reading one logged with `sync_dist=True` and not yet
        # reduced (e.g. by a callback's `on_train_epoch_start` before this one) runs its
        # all-reduce, which rank 0 alone would wait on forever.
        metrics = trainer.callback_metrics
        if not trainer.is_global_zero:
            return
        parts = [f"epoch {epoch:4d}", f"{seconds:7.3f} s"]
        for key in self.keys:
            if key in metrics:
                value = float(metrics[key])
                parts.append(
                    f"{key} {value:.0f}" if key.endswith("bytes") else f"{key} {value:.4f}"
                )
        print(" | ".join(parts), file=sys.stdout, flush=True)
