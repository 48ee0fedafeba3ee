"""The store-backed data modules: build once, open checked, evaluate exactly."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from lightgraph.data import (
    CorruptCacheError,
    FullGraphBatch,
    MacroBatchDataModule,
    NeighborSamplingDataModule,
    PartitionStoreDataModule,
    StaleStoreError,
    SyntheticGraph,
)
from lightgraph.data.lightning import build_store
from tests.data.concurrency import check_graph_copied_once_under_concurrent_first_use

DATASET = SyntheticGraph(num_nodes=600, avg_degree=6, num_features=6, seed=1)


def test_build_store_is_one_call_and_shared_with_the_data_module(tmp_path):
    store = build_store(DATASET, cache_dir=str(tmp_path), num_parts=8, partitioner="random")
    assert store.num_nodes == 600 and store.num_parts == 8
    assert store.num_hubs == 6  # ceil(1% of 600)
    dm = MacroBatchDataModule(
        DATASET, num_parts=8, parts_per_batch=2, partitioner="random", cache_dir=str(tmp_path)
    )
    assert os.path.isdir(dm.cache_path())
    assert os.listdir(tmp_path) == [os.path.basename(dm.cache_path())]
    dm.prepare_data()  # reuses the store: still one directory
    assert len(os.listdir(tmp_path)) == 1


def test_store_holds_the_dataset_and_full_graph_batch_matches_it(tmp_path):
    dm = PartitionStoreDataModule(
        DATASET, num_parts=4, partitioner="metis", cache_dir=str(tmp_path)
    )
    dm.prepare_data()
    dm.setup("fit")
    data = DATASET.load()
    full = dm.full_graph()
    assert isinstance(full, FullGraphBatch)
    ids = full.node_ids.long()
    torch.testing.assert_close(full.x, data.x[ids])
    assert torch.equal(full.y, data.y[ids])
    for split in ("train", "val", "test"):
        assert torch.equal(full.masks[split], getattr(data, f"{split}_mask")[ids])
    # The CSC holds exactly the graph's edges (in store ids).
    store_of = torch.empty_like(ids)
    store_of[ids] = torch.arange(ids.numel())
    deg = full.indptr[1:] - full.indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(ids.numel()), deg.long())
    got = sorted(zip(full.indices.long().tolist(), dst.tolist(), strict=True))
    want = sorted(
        zip(
            store_of[data.edge_index[0]].tolist(),
            store_of[data.edge_index[1]].tolist(),
            strict=True,
        )
    )
    assert got == want
    hubs = set(dm.store.hub_store_ids.tolist())
    assert not hubs & set(dm.split_nodes("train", exclude_hubs=True).tolist())


def test_damaged_store_is_rebuilt_by_prepare_and_named_by_setup(tmp_path):
    dm = MacroBatchDataModule(DATASET, num_parts=4, parts_per_batch=2, cache_dir=str(tmp_path))
    dm.prepare_data()
    victim = os.path.join(dm.cache_path(), "x.npy")
    with open(victim, "r+b") as f:
        f.truncate(100)
    fresh = MacroBatchDataModule(DATASET, num_parts=4, parts_per_batch=2, cache_dir=str(tmp_path))
    with pytest.raises(CorruptCacheError, match="x.npy"):
        fresh.setup("fit")  # a rank never rebuilds a finished cache: it names the file
    fresh.prepare_data()  # rebuilds
    fresh.setup("fit")
    assert np.load(victim, mmap_mode="r").shape == (600, 6)


def test_a_store_of_another_configuration_is_stale(tmp_path):
    from lightgraph.data import PartitionStore

    dm = PartitionStoreDataModule(DATASET, num_parts=4, cache_dir=str(tmp_path))
    dm.prepare_data()
    other = PartitionStoreDataModule(DATASET, num_parts=4, seed=1, cache_dir=str(tmp_path))
    with pytest.raises(StaleStoreError, match="meta.json"):
        PartitionStore.open(dm.cache_path(), fingerprint=other.store_fingerprint())


@pytest.mark.parametrize("storage", ["memory", "mmap"])
def test_sampled_evaluation_covers_each_split_node_once(tmp_path, storage):
    dm = NeighborSamplingDataModule(
        DATASET,
        storage=storage,
        eval_mode="sampled",
        eval_fanouts=[3, 3],
        eval_batch_size=50,
        cache_dir=str(tmp_path),
    )
    dm.prepare_data()
    dm.setup("fit")
    data = DATASET.load()
    seeds = torch.cat([b.n_id[: b.batch_size] for b in dm.val_dataloader()])
    assert sorted(seeds.tolist()) == data.val_mask.nonzero().view(-1).tolist()


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="storage"):
        NeighborSamplingDataModule(DATASET, storage="disk", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="eval_mode"):
        MacroBatchDataModule(DATASET, eval_mode="exact", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="hub_fraction"):
        MacroBatchDataModule(DATASET, hub_fraction=1.5, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="fanouts"):
        MacroBatchDataModule(DATASET, fanouts=[15, -3], cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="eval_fanouts"):
        MacroBatchDataModule(DATASET, eval_fanouts=[], cache_dir=str(tmp_path))
    with pytest.raises(TypeError, match="dataset"):
        MacroBatchDataModule("papers100M", cache_dir=str(tmp_path))
    dm = MacroBatchDataModule(DATASET, num_parts=4, parts_per_batch=2, cache_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="setup"):
        dm.train_loader()


@pytest.mark.parametrize("storage", ["memory", "mmap"])
def test_only_the_stores_memory_map_is_gathered_in_sorted_order(tmp_path, storage):
    dm = NeighborSamplingDataModule(
        DATASET, storage=storage, eval_mode="sampled", cache_dir=str(tmp_path)
    )
    dm.prepare_data()
    dm.setup("fit")
    mapped = storage == "mmap"
    assert dm.train_loader().memory_mapped is mapped
    assert dm.train_loader().use_node_buffer
    assert dm.val_dataloader().memory_mapped is mapped
    base = PartitionStoreDataModule(
        DATASET, num_parts=1, partitioner="random", hub_fraction=0.0, cache_dir=str(tmp_path)
    )
    base.prepare_data()
    base.setup("fit")
    assert base.memory_mapped(base.graph_arrays()[2])
    assert not base.memory_mapped(base.graph_arrays()[2].clone())


def test_ns_mem_copies_the_graph_into_memory_once_under_concurrent_first_use(tmp_path, monkeypatch):
    dm = NeighborSamplingDataModule(DATASET, storage="memory", cache_dir=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    check_graph_copied_once_under_concurrent_first_use(dm, monkeypatch, threads=4)


def test_training_memory_covers_what_a_loaded_macro_batch_holds(tmp_path):
    from lightgraph.data.loader.macro_batch import load_macro_batch

    dm = MacroBatchDataModule(DATASET, num_parts=8, parts_per_batch=2, cache_dir=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    store = dm.store
    for parts in ([0, 1], [2, 5], [3, 7]):
        mb = load_macro_batch(store, parts)
        held = sum(t.numel() * t.element_size() for t in (mb.x, mb.y, mb.node_ids, mb.indptr))
        held += mb.indices.numel() * mb.indices.element_size()
        assert held <= store.macro_batch_memory(parts) <= 3 * held
    hubs = store.num_hubs * DATASET.num_features * 4  # float32 hub features, kept open
    assert hubs <= store.resident_bytes()
    need = dm.training_memory()
    assert need["macro_batches"] == 2 * need["macro_batch"]
    assert need["total"] == need["store"] + need["macro_batches"] + need["mini_batch"]
    largest = int(store.part_sizes.sort(descending=True).values[:2].sum()) + store.num_hubs
    assert need["mini_batch"] == largest * DATASET.num_features * 4  # fanouts reach it all


def test_a_memory_limit_too_small_for_training_is_named(tmp_path, monkeypatch):
    import lightgraph.data.lightning.macro_batch_data_module as sdm

    dm = MacroBatchDataModule(DATASET, num_parts=8, parts_per_batch=2, cache_dir=str(tmp_path))
    dm.prepare_data()
    monkeypatch.setattr(sdm, "resident_memory", lambda: 0)
    monkeypatch.setattr(sdm, "cgroup_memory_limit", lambda: 1 << 20)  # 1 MiB: plenty here
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dm.setup("fit")
    monkeypatch.setattr(sdm, "cgroup_memory_limit", lambda: 4096)
    with pytest.warns(UserWarning, match=r"memory limit.*`hub_fraction` \(now 0.01\)"):
        dm.setup("fit")
