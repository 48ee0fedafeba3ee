"""The loaders' counters are exactly what trained, every epoch, global under DDP.

The reference is independent of the loaders' bookkeeping: a callback adds up the seeds
(``batch.batch_size``) of every batch that reached ``training_step``; ``IOMonitor`` must
log the same ``io/targets`` and ``io/mini_batches`` in every epoch, with one process and
summed over two data-parallel ranks, including HANOI's adaptive reuse (whose passes vary
from epoch to epoch) and with validation between the epochs.
"""

from __future__ import annotations

import json
import os
import warnings

import lightning.pytorch as pl
import pytest
from torch_geometric.nn.models import GraphSAGE

from lightgraph.callbacks import IOMonitor
from lightgraph.data import (
    MacroBatchDataModule,
    MultistageDataModule,
    NeighborSamplingDataModule,
    SyntheticGraph,
)
from lightgraph.data.loader import PartitionBatchSampler
from lightgraph.models import MiniBatchNodeClassifier

DATASET = SyntheticGraph(num_nodes=900, avg_degree=6, num_features=8, seed=4)
EPOCHS = 3


class TrainedSeeds(pl.Callback):
    """Seeds and batches that reached training, per epoch; written per rank to ``out``."""

    def __init__(self, out: str, monitor: IOMonitor) -> None:
        self.out, self.monitor = out, monitor
        self.seeds: list[int] = []
        self.batches: list[int] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.seeds.append(0)
        self.batches.append(0)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seeds[-1] += int(batch.batch_size)
        self.batches[-1] += 1

    def on_fit_end(self, trainer, pl_module) -> None:
        with open(os.path.join(self.out, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump({"seeds": self.seeds, "batches": self.batches, "io": self.monitor.history}, f)


def _data_module(kind: str, cache_dir: str, world: int) -> pl.LightningDataModule:
    if kind == "hanoi_adaptive":
        return MacroBatchDataModule(
            DATASET, num_parts=8, parts_per_batch=2, fanouts=[4, 4], batch_size=40,
            reuse=3, adaptive_reuse=True, cache_dir=cache_dir,
        )  # fmt: skip
    if kind == "hanoi":
        return MacroBatchDataModule(
            DATASET, num_parts=8, parts_per_batch=4, fanouts=[4, 4], batch_size=40,
            reuse=2, adaptive_reuse=False, rank_share="targets" if world > 1 else "partitions",
            cache_dir=cache_dir,
        )  # fmt: skip
    if kind == "ns":
        return NeighborSamplingDataModule(
            DATASET, fanouts=[4, 4], batch_size=37, cache_dir=cache_dir
        )
    return MultistageDataModule(DATASET, first_stage=PartitionBatchSampler(num_parts=8, parts_per_batch=2), fanouts=[4, 4], batch_size=40, prefetch=True, cache_dir=cache_dir)  # fmt: skip


def _fit(kind: str, tmp_path, devices: int) -> list[dict]:
    out = tmp_path / "out"
    out.mkdir()
    monitor = IOMonitor()
    dm = _data_module(kind, str(tmp_path / "cache"), devices)
    gnn = GraphSAGE(DATASET.num_features, 16, num_layers=2, out_channels=DATASET.num_classes)
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=devices,
        strategy="ddp_fork" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[monitor, TrainedSeeds(str(out), monitor)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(MiniBatchNodeClassifier(gnn, DATASET.num_classes), dm)
    records = []
    for rank in range(devices):
        with open(out / f"rank{rank}.json") as f:
            records.append(json.load(f))
    return records


def _check(records: list[dict]) -> None:
    seeds = [sum(r["seeds"][e] for r in records) for e in range(EPOCHS)]
    batches = [sum(r["batches"][e] for r in records) for e in range(EPOCHS)]
    assert all(s > 0 for s in seeds)
    for record in records:  # the logged values are global: the same on every rank
        assert [h["targets"] for h in record["io"]] == seeds
        assert [h["mini_batches"] for h in record["io"]] == batches


@pytest.mark.parametrize("kind", ["hanoi_adaptive", "hanoi", "ns", "pbs"])
def test_one_process_counts_exactly_the_batches_trained(kind, tmp_path) -> None:
    _check(_fit(kind, tmp_path, devices=1))


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["hanoi", "ns", "pbs"])
def test_two_ranks_count_exactly_the_batches_trained(kind, tmp_path) -> None:
    _check(_fit(kind, tmp_path, devices=2))
