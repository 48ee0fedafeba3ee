"""IOMonitor reports what the store actually read, per epoch."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch_geometric.nn.models import GraphSAGE

from lightgraph.callbacks import IOMonitor
from lightgraph.callbacks.io_monitor import process_io
from lightgraph.data import MacroBatchDataModule, SyntheticGraph
from lightgraph.data.loader.macro_batch import macro_batch_schedule
from lightgraph.models import MiniBatchNodeClassifier

DATASET = SyntheticGraph(num_nodes=800, avg_degree=6, num_features=8, seed=4)


def test_bytes_and_working_set_match_the_store_formula(tmp_path):
    dm = MacroBatchDataModule(
        DATASET,
        num_parts=8,
        parts_per_batch=3,
        fanouts=[4, 4],
        batch_size=100,
        reuse=2,
        cache_dir=str(tmp_path),
    )
    gnn = GraphSAGE(DATASET.num_features, 16, num_layers=2, out_channels=DATASET.num_classes)
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes)
    monitor = IOMonitor()
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[monitor],
    )
    trainer.fit(module, dm)
    store = dm.store
    assert len(monitor.history) == 2
    for epoch, stats in enumerate(monitor.history):
        schedule = macro_batch_schedule(8, 3, dm.seed, epoch)
        assert stats["bytes_read"] == sum(store.macro_batch_bytes(parts) for parts in schedule)
        nodes = sum(
            int(store.part_sizes[parts].sum())
            + store.num_hubs
            - int(torch.isin(store.hub_store_ids.long(), _store_ids(store, parts)).sum())
            for parts in map(torch.tensor, schedule)
        )
        assert stats["nodes_loaded"] == nodes
        hubs = set(store.hub_store_ids.tolist())
        train = store.mask("train").nonzero().view(-1).tolist()
        assert stats["targets"] == 2 * len([v for v in train if v not in hubs])
        assert stats["normalized_working_set"] == nodes / stats["targets"]
        assert stats["macro_batches"] == 3 and stats["passes"] == 6
    assert float(trainer.callback_metrics["io/bytes_read"]) == monitor.history[-1]["bytes_read"]


def _store_ids(store, parts):
    ptr = torch.as_tensor(store.part_ptr)
    return torch.cat([torch.arange(int(ptr[p]), int(ptr[p + 1])) for p in parts.tolist()])


def test_process_io_reads_proc():
    io = process_io()
    assert io == {} or "read_bytes" in io
