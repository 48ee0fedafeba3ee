"""IOMonitor on two data-parallel ranks: global sums, maxima and ratios, no sync warning."""

from __future__ import annotations

import json
import os
import warnings
from fractions import Fraction

import lightning.pytorch as pl
import pytest
import torch

from lightgraph.callbacks import IOMonitor

EPOCHS = 2


def per_epoch(rank: int, epoch: int) -> dict[str, float]:
    """What rank ``rank`` reads in epoch ``epoch`` (the scripted store)."""
    if rank == 0:
        return {
            "bytes_read": 1000.0 * (epoch + 1),
            "read_calls": 3.0,
            "targets": 10.0,
            "nodes_loaded": 35.0,
            "wait_seconds": 0.5,
            "read_seconds": 0.25 + epoch,
            "macro_batches": 2.0,
            "h2d_bytes": 64.0,
            "dropped_targets": 3.0 + epoch,  # global: every rank reports the same count
        }
    return {
        "bytes_read": 6000.0,
        "read_calls": 5.0,
        "targets": 30.0,
        "nodes_loaded": 45.0,
        "wait_seconds": 1.25,
        "read_seconds": 0.75,
        "macro_batches": 1.0,
        "h2d_bytes": 128.0,
        "dropped_targets": 3.0 + epoch,
    }


def expected(epoch: int) -> dict[str, float]:
    """The global epoch: counters summed over the ranks, times maxed, ratios of the sums."""
    a, b = per_epoch(0, epoch), per_epoch(1, epoch)
    out = {k: a[k] + b[k] for k in a if not k.endswith("_seconds")}
    out.update({k: max(a[k], b[k]) for k in a if k.endswith("_seconds")})
    out["dropped_targets"] = a["dropped_targets"]  # already global: not summed
    targets = int(a["targets"] + b["targets"])
    out["normalized_working_set"] = float(Fraction(int(out["nodes_loaded"]), targets))
    out["bytes_per_target"] = float(Fraction(int(out["bytes_read"]), targets))
    return out


class _Reads:
    """One batch per epoch; iterating it "reads" the rank's scripted bytes."""

    def __init__(self, module: ScriptedStore) -> None:
        self.module = module

    def __len__(self) -> int:
        return 1

    def __iter__(self):  # type: ignore[no-untyped-def]
        trainer = self.module.trainer
        for key, value in per_epoch(trainer.global_rank, trainer.current_epoch).items():
            self.module.total[key] = self.module.total.get(key, 0.0) + value
        yield torch.ones(1, 1)


class ScriptedStore(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.total: dict[str, float] = {}

    def train_dataloader(self) -> _Reads:
        return _Reads(self)

    def io_stats(self) -> dict[str, float]:
        return dict(self.total)


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Record(pl.Callback):
    """Records, on every rank, the warnings, the monitor's history and the logged values."""

    def __init__(self, out_dir: str, monitor: IOMonitor) -> None:
        self.out_dir, self.monitor = out_dir, monitor
        self.logged: list[dict[str, float]] = []

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._catch = warnings.catch_warnings(record=True)
        self._warnings = self._catch.__enter__()
        warnings.simplefilter("always")

    # The epoch's logged values are reduced after its end hooks: read at the next start.
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._read(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._read(trainer)
        messages = [str(w.message) for w in self._warnings]
        self._catch.__exit__(None, None, None)
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(
                {"history": self.monitor.history, "logged": self.logged, "warnings": messages}, f
            )

    def _read(self, trainer: pl.Trainer) -> None:
        metrics = {
            k.removeprefix("io/"): float(v)
            for k, v in trainer.callback_metrics.items()
            if k.startswith("io/")
        }
        if metrics:
            self.logged.append(metrics)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_log_global_sums_maxima_and_ratios(tmp_path) -> None:
    monitor = IOMonitor()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        callbacks=[monitor, Record(str(out_dir), monitor)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Tiny(), ScriptedStore())
    want = [expected(epoch) for epoch in range(EPOCHS)]
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            record = json.load(f)
        sync_warnings = [m for m in record["warnings"] if "sync_dist" in m]
        assert not sync_warnings, f"rank {rank}: {sync_warnings}"
        # /proc/self/io is per process and not scripted: summed, but not checked here.
        history = [
            {k: v for k, v in h.items() if k != "device_read_bytes"} for h in record["history"]
        ]
        assert history == want, f"rank {rank}"
        logged = [
            {k: v for k, v in h.items() if k != "device_read_bytes"} for h in record["logged"]
        ]
        assert logged == want, f"rank {rank}"
