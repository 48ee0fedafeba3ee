from __future__ import annotations

import re

import lightning.pytorch as pl
import pytest

from lightgraph.callbacks import EpochSummary
from lightgraph.data import PartitionedGraphDataModule, SyntheticGraph
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN


class Recorder(pl.Callback):
    """Reads each epoch's aggregated metrics when the next epoch starts."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch > 0:
            self.seen[trainer.current_epoch - 1] = float(trainer.callback_metrics["train_loss"])

    def on_train_end(self, trainer, pl_module) -> None:
        self.seen[trainer.current_epoch - 1] = float(trainer.callback_metrics["train_loss"])


def test_prints_each_epochs_own_metrics(tmp_path, capsys) -> None:
    ds = SyntheticGraph(num_nodes=300, avg_degree=8, num_classes=4, num_features=16)
    recorder = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=5,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[EpochSummary(every_n_epochs=2), recorder],
    )
    trainer.fit(
        NodeClassifier(GCN(16, 4, 16, 2), num_classes=4),
        PartitionedGraphDataModule(ds, cache_dir=str(tmp_path)),
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    epochs = [int(re.match(r"epoch\s+(\d+)", line).group(1)) for line in lines]
    assert epochs == [1, 3, 4]  # every 2nd epoch and the last one
    for epoch, line in zip(epochs, lines, strict=True):
        loss = float(re.search(r"train_loss ([0-9.]+)", line).group(1))
        assert loss == pytest.approx(recorder.seen[epoch], abs=1e-4)
        assert "val_acc" in line and "test_acc" in line


def test_bad_argument() -> None:
    with pytest.raises(ValueError, match="`every_n_epochs` >= 1 but got 0"):
        EpochSummary(every_n_epochs=0)
