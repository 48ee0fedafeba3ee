"""ModalitySync: UniTG's Modality Collaborator through a Trainer, on 2 ranks, resumed.

Scripted run: J = 20 GNN epochs, the default ladder (0.3, 0.2, 0.1, 0.02) -> Δt in epochs
(6, 4, 2, 1) (0.02 * 20 = 0.4 rounds to 0, so 1), patience 4, smoothing 0.8.

    epoch   0    1    2    3    4    5    6    7    8    9    10   11 ... 19
    L_j    10    9    8    7   6.5   6   20    5   4.5   4   3.5   3  ... 1.0

F falls at epochs 1-5 (L_j < F_{j-1} while L decreases), rises at 6 (L_6 = 20) and falls
again from 7 on (F_6 ~ 10.4, L_7 = 5). Streaks of 4 falls complete at epochs 4 (-> Δt 4),
10 (-> 2), 14 (-> 1) and 18 (last level: no change). Syncs (a step counts for the same
epoch's decision): epoch 4 (5 epochs since the start >= 4), 8, 10 (2 >= 2), 12, 14 (2 >= 1),
then every epoch 15..19.
"""

from __future__ import annotations

import json
import os
import warnings
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from lightgraph.callbacks import ModalitySync
from lightgraph.functional import SyncIntervalSchedule
from lightgraph.typing import EmbeddingSyncTarget
from tests.functional.test_sync_interval import reference

EPOCHS = 20
PATIENCE = 4
LOSSES = [10.0, 9.0, 8.0, 7.0, 6.5, 6.0, 20.0, 5.0, 4.5, 4.0, 3.5, 3.0, 2.5, 2.0, 1.5]
LOSSES += [1.4, 1.3, 1.2, 1.1, 1.0]
EXPECTED_INTERVALS = [6] * 4 + [4] * 6 + [2] * 4 + [1] * 6
EXPECTED_SYNCS = [4, 8, 10, 12, 14, 15, 16, 17, 18, 19]
EXPECTED = [(j, EXPECTED_INTERVALS[j], j in EXPECTED_SYNCS) for j in range(EPOCHS)]
# Rank 1 sees a rising loss: alone it would never step (syncs every 6 epochs).
RANK1_LOSSES = [1.0 + j for j in range(EPOCHS)]


def fraction(syncs: int) -> float:
    """What the scripted module's ``sync_embeddings`` returns after ``syncs`` syncs."""
    return min(1.0, 0.125 * syncs)


class SyncModule(pl.LightningModule):
    """Implements EmbeddingSyncTarget with scripted losses; records its sync calls."""

    def __init__(
        self, losses: list[float] = LOSSES, rank1_losses: list[float] | None = None
    ) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.losses, self.rank1_losses = losses, rank1_losses
        self._loss: float | None = None
        self.synced_at: list[int] = []  # epochs at whose end sync_embeddings ran

    @property
    def epoch_gnn_loss(self) -> float | None:
        return self._loss

    def sync_embeddings(self) -> float:
        self.synced_at.append(self.current_epoch)
        return fraction(len(self.synced_at))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        use_rank1 = self.global_rank == 1 and self.rank1_losses is not None
        losses = self.rank1_losses if use_rank1 else self.losses
        self._loss = losses[self.current_epoch]
        return self.layer(batch[0]).sum() * 0.0

    def train_dataloader(self) -> DataLoader:
        # One batch per rank and epoch.
        return DataLoader(TensorDataset(torch.ones(self.trainer.world_size, 1)), batch_size=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class ValidatedSyncModule(SyncModule):
    """With a validation loop that logs ``val_metric`` (checkpoints can be written at its end)."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_metric", float(self.current_epoch), batch_size=1)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(1, 1)), batch_size=1)


class NoProtocolModule(pl.LightningModule):
    """Trains, and has `sync_embeddings`, but no `epoch_gnn_loss`."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def sync_embeddings(self) -> float:
        return 0.0

    training_step = SyncModule.training_step
    train_dataloader = SyncModule.train_dataloader
    configure_optimizers = SyncModule.configure_optimizers


class DumpRecord(Callback):
    """Writes every rank's ModalitySync history and sync calls to ``out_dir``."""

    def __init__(self, out_dir: str, watched: ModalitySync) -> None:
        self.out_dir, self.watched = out_dir, watched

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        record = {
            "history": [list(item) for item in self.watched.history],
            "synced_at": list(pl_module.synced_at),
            "encoded_fraction": self.watched.encoded_fraction,
        }
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(record, f)


def make_trainer(tmp_path: Any, max_epochs: int, callbacks: list[Callback], **kwargs: Any):
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": max_epochs,
        "enable_checkpointing": False,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp_path),
        "callbacks": callbacks,
    }
    options.update(kwargs)
    return pl.Trainer(**options)


def fit(trainer: pl.Trainer, module: pl.LightningModule, **kwargs: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no validation loop", "few workers", ...
        trainer.fit(module, **kwargs)


# ----------------------------------------------------------------------------- trajectory
def test_expected_table_is_the_reference_trajectory() -> None:
    assert reference(LOSSES, EPOCHS, patience=PATIENCE) == EXPECTED
    assert SyncIntervalSchedule(total_epochs=EPOCHS).intervals == (6, 4, 2, 1)
    alone = reference(RANK1_LOSSES, EPOCHS, patience=PATIENCE)
    assert [epoch for epoch, _, synced in alone if synced] == [5, 11, 17]


def test_module_implements_the_protocol() -> None:
    assert isinstance(SyncModule(), EmbeddingSyncTarget)
    assert not isinstance(NoProtocolModule(), EmbeddingSyncTarget)


def test_trainer_run_gives_the_documented_trajectory(tmp_path) -> None:
    cb = ModalitySync(patience=PATIENCE)  # total_epochs=None: J = max_epochs = 20
    module = SyncModule()
    fit(make_trainer(tmp_path, EPOCHS, [cb]), module)
    assert cb.schedule is not None and cb.schedule.total_epochs == EPOCHS
    assert cb.history == EXPECTED
    assert module.synced_at == EXPECTED_SYNCS
    assert cb.encoded_fraction == fraction(len(EXPECTED_SYNCS)) == 1.0
    assert cb.interval == 1


def test_logged_metrics(tmp_path) -> None:
    class Record(Callback):
        def __init__(self) -> None:
            self.rows: list[float] = []

        def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
            metrics = trainer.callback_metrics  # the previous epoch's epoch-level values
            if "sync_interval" in metrics:
                self.rows.append(float(metrics["sync_interval"]))

    cb, record = ModalitySync(patience=PATIENCE), Record()
    trainer = make_trainer(tmp_path, EPOCHS, [cb, record])
    fit(trainer, SyncModule())
    rows = [*record.rows, float(trainer.callback_metrics["sync_interval"])]
    assert rows == [float(EXPECTED_INTERVALS[j]) for j in range(EPOCHS)]
    # The encoded fraction is the module's to log (UniTGModule does); this one does not.
    assert "encoded_fraction" not in trainer.callback_metrics
    assert cb.encoded_fraction == fraction(len(EXPECTED_SYNCS))

    quiet = ModalitySync(patience=PATIENCE, log=False)
    trainer = make_trainer(tmp_path, 3, [quiet])
    fit(trainer, SyncModule())
    assert "sync_interval" not in trainer.callback_metrics


def test_total_epochs_overrides_max_epochs(tmp_path) -> None:
    cb = ModalitySync(total_epochs=100, patience=PATIENCE)
    fit(make_trainer(tmp_path, 10, [cb]), SyncModule())
    assert cb.schedule is not None and cb.schedule.intervals == (30, 20, 10, 2)
    assert cb.history == reference(LOSSES[:10], 100, patience=PATIENCE)


# ----------------------------------------------------------------------------- two ranks
@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_take_rank_zeros_decisions(tmp_path) -> None:
    cb = ModalitySync(patience=PATIENCE)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    trainer = make_trainer(
        tmp_path, EPOCHS, [cb, DumpRecord(str(out_dir), cb)], strategy="ddp_fork", devices=2
    )
    fit(trainer, SyncModule(rank1_losses=RANK1_LOSSES))
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            record = json.load(f)
        assert record["history"] == [list(item) for item in EXPECTED], f"rank {rank}"
        assert record["synced_at"] == EXPECTED_SYNCS, f"rank {rank}"
        assert record["encoded_fraction"] == 1.0


# ----------------------------------------------------------------------------- resume
def test_resume_continues_the_trajectory(tmp_path) -> None:
    n = EPOCHS // 2
    straight, straight_module = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE), SyncModule()
    fit(make_trainer(tmp_path / "straight", EPOCHS, [straight]), straight_module)
    assert straight.history == EXPECTED

    first, first_module = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE), SyncModule()
    trainer = make_trainer(tmp_path / "first", n, [first])
    fit(trainer, first_module)
    ckpt = str(tmp_path / "half.ckpt")
    trainer.save_checkpoint(ckpt)
    assert first.history == EXPECTED[:n]

    resumed, resumed_module = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE), SyncModule()
    fit(make_trainer(tmp_path / "resumed", EPOCHS, [resumed]), resumed_module, ckpt_path=ckpt)
    assert resumed.history == EXPECTED  # restored n entries, appended n more
    assert first_module.synced_at + resumed_module.synced_at == EXPECTED_SYNCS
    assert resumed.state_dict() == straight.state_dict()


def test_resume_from_a_checkpoint_written_before_the_epoch_end_hook(tmp_path) -> None:
    # ModelCheckpoint at validation end: after the epoch's batches, before on_train_epoch_end.
    n = 9
    first, first_module = (
        ModalitySync(total_epochs=EPOCHS, patience=PATIENCE),
        ValidatedSyncModule(),
    )
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_last=True, save_on_train_epoch_end=False
    )
    fit(
        make_trainer(tmp_path / "first", n, [first, checkpoint], enable_checkpointing=True),
        first_module,
    )
    last = str(tmp_path / "ckpt" / "last.ckpt")
    state = torch.load(last, weights_only=False)["callbacks"]["ModalitySync"]
    # Written at epoch n - 1's validation end: that epoch's loss is stored, not yet counted.
    assert state["pending"] == {"epoch": n - 1, "loss": LOSSES[n - 1]}
    assert state["schedule"]["last_epoch"] == n - 2

    resumed, resumed_module = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE), SyncModule()
    fit(make_trainer(tmp_path / "resumed", EPOCHS, [resumed]), resumed_module, ckpt_path=last)
    assert resumed.history == EXPECTED
    # The first run synced at epoch 8 after the checkpoint was written; the resumed run
    # (from the state before that sync) takes the same decision for epoch 8 and goes on.
    assert first_module.synced_at == [s for s in EXPECTED_SYNCS if s <= n - 1] == [4, 8]
    assert resumed_module.synced_at == [s for s in EXPECTED_SYNCS if s >= n - 1]


def test_resume_with_another_max_epochs_needs_total_epochs(tmp_path) -> None:
    trainer = make_trainer(tmp_path, 5, [ModalitySync(patience=PATIENCE)])
    fit(trainer, SyncModule())
    ckpt = str(tmp_path / "five.ckpt")
    trainer.save_checkpoint(ckpt)
    with pytest.raises(
        ValueError,
        match=r"ModalitySync: cannot resume the schedule: SyncIntervalSchedule: the state was "
        r"saved with total_epochs=5.*this schedule has total_epochs=10.*pass the run's "
        r"`total_epochs` explicitly",
    ):
        fit(
            make_trainer(tmp_path, 10, [ModalitySync(patience=PATIENCE)]),
            SyncModule(),
            ckpt_path=ckpt,
        )


def test_replayed_epoch_end_is_not_counted_twice() -> None:
    cb = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE, log=False)
    module = SyncModule()
    trainer = SimpleNamespace(
        current_epoch=0, max_epochs=EPOCHS, strategy=SimpleNamespace(broadcast=lambda x, src=0: x)
    )
    cb.setup(trainer, module, "fit")
    for epoch in range(6):
        trainer.current_epoch = epoch
        module._loss = LOSSES[epoch]
        cb.on_train_epoch_end(trainer, module)
    cb.on_train_epoch_end(trainer, module)  # epoch 5 again (a resumed run replaying it)
    assert cb.history == EXPECTED[:6]


# ----------------------------------------------------------------------------- errors
def test_module_without_the_protocol_is_a_type_error(tmp_path) -> None:
    message = (
        r"ModalitySync: expected the LightningModule to implement the lightgraph.typing."
        r"EmbeddingSyncTarget protocol .* NoProtocolModule lacks \['epoch_gnn_loss'\]"
    )
    with pytest.raises(TypeError, match=message):
        ModalitySync().setup(SimpleNamespace(max_epochs=10), NoProtocolModule(), "fit")
    ModalitySync().setup(SimpleNamespace(max_epochs=10), NoProtocolModule(), "validate")
    with pytest.raises(TypeError, match=message):
        fit(make_trainer(tmp_path, 1, [ModalitySync()]), NoProtocolModule())


def test_unbounded_max_epochs_needs_total_epochs() -> None:
    for max_epochs in (-1, None):
        with pytest.raises(
            ValueError,
            match=rf"ModalitySync: `total_epochs` is None, so J = trainer.max_epochs, but "
            rf"trainer.max_epochs is {max_epochs} \(unbounded\); pass `total_epochs`",
        ):
            ModalitySync().setup(SimpleNamespace(max_epochs=max_epochs), SyncModule(), "fit")
    cb = ModalitySync(total_epochs=50)
    cb.setup(SimpleNamespace(max_epochs=-1), SyncModule(), "fit")
    assert cb.interval == 15


def test_missing_loss_is_a_clear_error(tmp_path) -> None:
    class Silent(SyncModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum() * 0.0  # never sets the loss

    with pytest.raises(
        RuntimeError, match="`epoch_gnn_loss` of Silent is None at the end of training epoch 0"
    ):
        fit(make_trainer(tmp_path, 2, [ModalitySync()]), Silent())


def test_state_dict_round_trip_and_early_load() -> None:
    cb = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE, log=False)
    module = SyncModule()
    trainer = SimpleNamespace(
        current_epoch=0, max_epochs=EPOCHS, strategy=SimpleNamespace(broadcast=lambda x, src=0: x)
    )
    cb.setup(trainer, module, "fit")
    for epoch in range(7):
        trainer.current_epoch = epoch
        module._loss = LOSSES[epoch]
        cb.on_train_epoch_end(trainer, module)
    state = json.loads(json.dumps(cb.state_dict()))  # plain Python
    # Lightning loads callback state after `setup`; a state loaded earlier waits for it.
    other = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE, log=False)
    other.load_state_dict(state)
    assert other.history == [] and other.state_dict() == state
    other.setup(trainer, SyncModule(), "fit")
    assert other.history == cb.history == EXPECTED[:7]
    assert other.state_dict() == cb.state_dict()
    # A checkpoint written outside a fit (no schedule yet) stores the plain state.
    fresh, checkpoint = ModalitySync(), {"callbacks": {"ModalitySync": {"schedule": None}}}
    fresh.on_save_checkpoint(SimpleNamespace(current_epoch=0), SyncModule(), checkpoint)
    assert checkpoint["callbacks"]["ModalitySync"] == {"schedule": None}
    with pytest.raises(KeyError, match=r"ModalitySync: state is missing the keys \['pending'\]"):
        other.load_state_dict({"schedule": None, "encoded_fraction": 0.0})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"total_epochs": 0}, "expected `total_epochs` to be None or an integer >= 1 but got 0"),
        ({"ladder": (0.1, 0.2)}, r"expected `ladder` to be a non-empty, strictly decreasing"),
        ({"ladder": (2.0,)}, r"expected `ladder\[0\]` to be a fraction in \(0, 1\] but got 2.0"),
        ({"patience": 0}, "expected `patience` to be a positive integer but got 0"),
        ({"smoothing": -0.1}, r"expected `smoothing` in \[0, 1\) but got -0.1"),
        ({"log": 1}, r"expected `log` to be one of \(True, False\) but got 1"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=f"ModalitySync: {match}"):
        ModalitySync(**kwargs)


def test_pending_epoch_is_consumed_at_the_next_epoch_start() -> None:
    # A checkpoint stored epoch 5's loss before its end hook; if the resumed run goes
    # straight to epoch 6, the loss is counted (and a due sync runs) when epoch 6 starts.
    cb = ModalitySync(total_epochs=EPOCHS, patience=PATIENCE, log=False)
    module = SyncModule()
    trainer = SimpleNamespace(
        current_epoch=0, max_epochs=EPOCHS, strategy=SimpleNamespace(broadcast=lambda x, src=0: x)
    )
    cb.setup(trainer, module, "fit")
    for epoch in range(5):
        trainer.current_epoch = epoch
        module._loss = LOSSES[epoch]
        cb.on_train_epoch_end(trainer, module)
    state = {**cb.state_dict(), "pending": {"epoch": 5, "loss": LOSSES[5]}}
    resumed, resumed_module = (
        ModalitySync(total_epochs=EPOCHS, patience=PATIENCE, log=False),
        SyncModule(),
    )
    resumed.load_state_dict(state)
    resumed.setup(trainer, resumed_module, "fit")
    trainer.current_epoch = 6
    resumed.on_train_epoch_start(trainer, resumed_module)
    assert resumed.history == EXPECTED[:6]
    resumed_module._loss = LOSSES[6]
    resumed.on_train_epoch_end(trainer, resumed_module)
    assert resumed.history == EXPECTED[:7]
    assert resumed.state_dict()["pending"] is None
