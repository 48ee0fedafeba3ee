"""Which global loss the LDR callbacks track on several partitions.

Sylvie's Coordinator estimates the global loss as the plain mean of the partitions' local
losses, ``L_t = sum_n L_t^n / N``. lightgraph's callbacks track the ``monitor`` metric,
and ``NodeClassifier`` logs ``train_loss`` as the mean over *all* training nodes of the
graph, ``sum_n S_t^n / sum_n |T^n|`` (``S_t^n``: partition n's summed loss, ``T^n`` its
training nodes) -- the loss the strategy's summed gradients descend, equal to the
single-process loss. The two coincide only when every partition holds as many training
nodes. This test trains on two deliberately unequal partitions (100 and 300 nodes), where
the two means differ, and checks that every value fed to the tracker is the node-weighted
mean, on both ranks (see docs/callbacks.md, "The loss descent rate").
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lightgraph.callbacks import AdaptiveBitWidth
from lightgraph.data import PartitionedGraphDataModule, SyntheticGraph
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN
from lightgraph.strategies import BoundaryExchangeStrategy

EPOCHS = 6


class RecordLosses(Callback):
    """Per rank: every (L, et) fed to the tracker, and every epoch's local loss sum and count."""

    def __init__(self, out_dir: str, watched: AdaptiveBitWidth) -> None:
        self.out_dir, self.watched = out_dir, watched
        self.fed: list[float] = []
        self.local: list[tuple[float, int, int]] = []  # (local loss sum, local count, global)
        update = watched.tracker.update

        def recording_update(loss: float, epoch_time: float) -> Any:
            self.fed.append(float(loss))
            return update(loss, epoch_time)

        watched.tracker.update = recording_update  # type: ignore[method-assign]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # NodeClassifier returns the rank's share of the global mean: S^n / sum_n |T^n|.
        share = float(outputs["loss"])
        total = int(batch.global_counts["train_mask"])
        count = int(batch.train_mask.sum())
        self.local.append((share * total, count, total))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        path = os.path.join(self.out_dir, f"rank{trainer.global_rank}.json")
        with open(path, "w") as f:
            json.dump({"fed": self.fed, "local": self.local}, f)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_the_tracker_gets_the_node_weighted_mean_not_the_mean_of_partitions(tmp_path) -> None:
    dataset = SyntheticGraph(num_nodes=400, avg_degree=8, num_classes=4, num_features=16, seed=3)
    partition = torch.ones(400, dtype=torch.long)
    partition[torch.randperm(400, generator=torch.Generator().manual_seed(0))[:100]] = 0
    data = PartitionedGraphDataModule(dataset, partition=partition, cache_dir=str(tmp_path / "c"))
    torch.manual_seed(0)
    module = NodeClassifier(
        GCN(16, 4, hidden_channels=16, num_layers=2, dropout=0.5), num_classes=4, lr=0.02
    )
    bits = AdaptiveBitWidth(b_min=8, b_max=8, window=1, smoothing=0.0)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=BoundaryExchangeStrategy(start_method="fork"),
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        callbacks=[bits, RecordLosses(str(out_dir), bits)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, data)

    records = []
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            records.append(json.load(f))
    counts = [records[rank]["local"][0][1] for rank in range(2)]
    assert counts[0] + counts[1] == records[0]["local"][0][2]
    assert counts[0] < counts[1] / 2  # clearly unequal partitions
    node_mean, partition_mean = [], []
    for epoch in range(EPOCHS):
        sums = [records[rank]["local"][epoch][0] for rank in range(2)]
        node_mean.append(sum(sums) / sum(counts))
        partition_mean.append((sums[0] / counts[0] + sums[1] / counts[1]) / 2)
    # The loss of epoch t is fed when epoch t + 1 starts: EPOCHS - 1 values, all epochs but
    # the last, identical on both ranks (rank 0's, broadcast).
    for record in records:
        assert record["fed"] == pytest.approx(node_mean[:-1], rel=1e-5, abs=1e-6)
    assert records[0]["fed"] == records[1]["fed"]
    # The two means are told apart, and what was fed is not the mean of the partitions.
    gaps = [abs(fed - p) for fed, p in zip(records[0]["fed"], partition_mean[:-1], strict=True)]
    assert max(gaps) > 1e-3
