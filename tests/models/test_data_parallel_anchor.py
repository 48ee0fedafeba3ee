"""The exactness anchor of data-parallel sampled training, through Lightning's DDP.

With every neighbour in every stage (fanout -1: the sampled neighbourhoods are the exact
L-hop neighbourhoods, no randomness), ``N`` ranks with batch ``B / N`` each train the
global batches of ``B`` targets one process with batch ``B`` trains: rank ``r``'s step
``i`` is the ``r``-th slice of global batch ``i``. Each rank's loss is the mean over its
slice and DDP averages the gradients, so after an epoch the weights equal those of the one
process, in float64 up to rounding -- for the one-stage neighbour sampler (NS), for
JOESTAR's large-batch first stage (LBS) and for HANOI's macro-batches with
``rank_share="targets"`` (every rank reads the whole macro-batch; here one macro-batch of
all four partitions, reused twice). The reference is an ordinary single-process fit.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import (
    MacroBatchDataModule,
    MultistageDataModule,
    NeighborSamplingDataModule,
    SyntheticGraph,
)
from lightgraph.data.loader import LargeBatchSampler
from lightgraph.models import MiniBatchNodeClassifier

# 72 training nodes: 6 global batches of 12 = 2 x 6 = 3 x 4 (nothing dropped).
DATASET = dict(num_nodes=360, avg_degree=5, num_features=8, train_ratio=0.2, seed=1)
GLOBAL_BATCH = 12
EPOCHS = 2
NUM_CLASSES = SyntheticGraph(**DATASET).num_classes


class DoubleClassifier(MiniBatchNodeClassifier):
    """The classifier in float64 (the features arrive in float32)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        batch.x = batch.x.double()
        return super().training_step(batch, batch_idx)


class SaveWeights(pl.Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank == 0:
            torch.save(
                {k: v.detach().clone() for k, v in pl_module.state_dict().items()}, self.path
            )


def _module() -> DoubleClassifier:
    torch.manual_seed(0)
    gnn = GraphSAGE(8, 16, num_layers=2, out_channels=NUM_CLASSES, dropout=0.0).double()
    return DoubleClassifier(gnn, NUM_CLASSES, lr=0.01)


def _data(kind: str, batch_size: int, cache_dir: str) -> pl.LightningDataModule:
    dataset = SyntheticGraph(**DATASET)
    if kind == "ns":
        return NeighborSamplingDataModule(
            dataset, fanouts=[-1, -1], batch_size=batch_size, cache_dir=cache_dir
        )
    if kind == "hanoi":
        return MacroBatchDataModule(
            dataset,
            num_parts=4,
            parts_per_batch=4,
            fanouts=[-1, -1],
            batch_size=batch_size,
            reuse=2,
            rank_share="targets",
            cache_dir=cache_dir,
        )
    return MultistageDataModule(
        dataset,
        first_stage=LargeBatchSampler(
            ratio=0.5, second_stage_fanouts=[-1, -1], num_sampler_threads=1
        ),
        fanouts=[-1, -1],
        batch_size=batch_size,
        cache_dir=cache_dir,
    )


def _fit(kind: str, world: int, tmp_path: Any) -> dict[str, torch.Tensor]:
    path = os.path.join(tmp_path, f"{kind}-{world}.pt")
    options: dict[str, Any] = dict(
        accelerator="cpu",
        devices=world,
        max_epochs=EPOCHS,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[SaveWeights(path)],
    )
    if world > 1:
        options["strategy"] = "ddp_fork"
    trainer = pl.Trainer(**options)
    data = _data(kind, GLOBAL_BATCH // world, os.path.join(tmp_path, "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(_module(), data)
    return torch.load(path)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["ns", "lbs", "hanoi"])
def test_ranks_with_a_share_of_each_batch_train_the_single_process_weights(kind, tmp_path):
    single = _fit(kind, 1, tmp_path)
    initial = _module().state_dict()
    assert any(not torch.equal(single[k], initial[k]) for k in single)  # it trained
    for world in (2, 3):
        parallel = _fit(kind, world, tmp_path)
        assert parallel.keys() == single.keys()
        for key, value in single.items():
            torch.testing.assert_close(
                parallel[key], value, rtol=1e-10, atol=1e-12, msg=f"{kind}, {world} ranks: {key}"
            )
