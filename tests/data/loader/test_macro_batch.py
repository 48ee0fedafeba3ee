"""HANOI's two-stage loader against independent references on a small stored graph."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lightgraph.data import MacroBatchDataModule, NeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.loader import MacroBatchLoader
from lightgraph.data.loader.macro_batch import macro_batch_schedule

DATASET = SyntheticGraph(num_nodes=1200, avg_degree=8, num_features=8, homophily=0.7, seed=3)


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    dm = _data_module(str(tmp_path_factory.mktemp("cache")))
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def graph():
    return DATASET.load()


def _loader(dm, **kwargs):
    args = dict(parts_per_batch=3, fanouts=[4, 3], batch_size=64, reuse=2, seed=0)
    args.update(kwargs)
    return MacroBatchLoader(dm.store, **args)


def _data_module(cache_dir, **kwargs):
    """The tests' data module (its store in ``cache_dir``) with ``kwargs`` changed."""
    args = dict(
        num_parts=8,
        parts_per_batch=3,
        fanouts=[4, 3],
        batch_size=64,
        reuse=2,
        hub_fraction=0.02,
        cache_dir=cache_dir,
    )
    args.update(kwargs)
    return MacroBatchDataModule(DATASET, **args)


def _node_part(dm):
    """Original id -> partition, from the store's layout (store ids are partition-major)."""
    store = dm.store
    part = torch.empty(store.num_nodes, dtype=torch.long)
    ptr = torch.as_tensor(store.part_ptr)
    for p in range(store.num_parts):
        part[store.node_ids[ptr[p] : ptr[p + 1]].long()] = p
    return part


def test_targets_are_never_hubs_nor_outside_the_macro_batch(module, graph):
    part = _node_part(module)
    hubs = set(module.store.hubs.tolist())
    assert hubs, "the test graph must have hubs"
    train = set(graph.train_mask.nonzero().view(-1).tolist())
    edges = set(zip(graph.edge_index[0].tolist(), graph.edge_index[1].tolist(), strict=True))
    for batch in _loader(module):
        parts = set(batch.macro_parts.tolist())
        seeds = batch.n_id[: batch.batch_size].tolist()
        assert not hubs & set(seeds)
        assert set(seeds) <= train
        assert all(int(part[s]) in parts for s in seeds)
        # Stage 2 never leaves the macro-batch: every node is in its partitions or a hub.
        assert all(int(part[v]) in parts or v in hubs for v in batch.n_id.tolist())
        # Every sampled edge is an edge of the original graph (same direction).
        src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
        assert set(zip(src.tolist(), dst.tolist(), strict=True)) <= edges
        # Labels and features are the seeds' own.
        n_id = batch.n_id
        torch.testing.assert_close(batch.x, graph.x[n_id])
        assert torch.equal(batch.y, graph.y[n_id])


def test_target_counts_are_each_partitions_training_nodes_less_its_hubs(module, graph):
    store = module.store
    ptr = store.part_ptr.tolist()
    node_ids = store.node_ids.long().tolist()
    hubs = set(store.hubs.tolist())
    want = [
        sum(1 for v in node_ids[a:b] if bool(graph.train_mask[v]) and v not in hubs)
        for a, b in zip(ptr[:-1], ptr[1:], strict=True)
    ]
    assert _loader(module)._target_counts() == want


def test_target_counts_leave_out_training_hubs():
    """A store whose hubs include training nodes: each is left out of its partition's count."""
    from types import SimpleNamespace

    train = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1], dtype=torch.bool)
    store = SimpleNamespace(
        mask=lambda split: train,
        part_ptr=torch.tensor([0, 3, 3, 8]),  # partition 1 is empty
        hub_store_ids=torch.tensor([1, 2, 4, 7], dtype=torch.int32),  # 2: not training
    )
    loader = SimpleNamespace(store=store, _counts=None)
    assert MacroBatchLoader._target_counts(loader) == [2 - 1, 0, 4 - 2]


def test_every_target_is_trained_reuse_times_per_epoch(module, graph):
    hubs = set(module.store.hubs.tolist())
    expected = set(graph.train_mask.nonzero().view(-1).tolist()) - hubs
    counts: dict[int, int] = {}
    loader = _loader(module, reuse=3)
    batches = list(loader)
    for batch in batches:
        for s in batch.n_id[: batch.batch_size].tolist():
            counts[s] = counts.get(s, 0) + 1
    assert set(counts) == expected
    assert set(counts.values()) == {3}
    assert len(batches) == _loader(module, reuse=3).num_batches()


def test_prefetching_loader_equals_a_serial_one(module):
    a = list(_loader(module, prefetch=True))
    b = list(_loader(module, prefetch=False))
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.n_id, y.n_id) and torch.equal(x.edge_index, y.edge_index)


def test_epochs_reshuffle_partitions_and_targets(module):
    loader = _loader(module)
    first = [b.n_id[: b.batch_size] for b in loader]
    second = [b.n_id[: b.batch_size] for b in loader]
    assert loader.epoch == 2
    assert any(not torch.equal(x, y) for x, y in zip(first, second, strict=False))
    assert macro_batch_schedule(8, 3, 0, 0) != macro_batch_schedule(8, 3, 0, 1)
    assert sorted(sum(macro_batch_schedule(8, 3, 0, 5), [])) == list(range(8))


@pytest.mark.parametrize("stop", [1, 7, 12])
def test_resume_mid_epoch_continues_the_same_batches(module, stop):
    uninterrupted = _loader(module)
    reference = [b.n_id for b in uninterrupted] + [b.n_id for b in uninterrupted]
    loader = _loader(module)
    it = iter(loader)
    seen = [next(it).n_id for _ in range(stop)]
    state = loader.state_dict()
    resumed = _loader(module)
    resumed.load_state_dict(state)
    rest = [b.n_id for b in resumed] + [b.n_id for b in resumed]  # rest of epoch 0, then epoch 1
    assert len(seen) + len(rest) == len(reference)
    for x, y in zip(seen + rest, reference, strict=True):
        assert torch.equal(x, y)


def test_adaptive_reuse_stays_within_bounds(module):
    loader = _loader(module, reuse=4, adaptive_reuse=True)
    list(loader)
    passes = loader.stats.passes_per_macro_batch
    assert len(passes) == 3 and all(1 <= p <= 4 for p in passes)


def test_bad_arguments_are_named(module, tmp_path):
    with pytest.raises(ValueError, match="parts_per_batch"):
        _loader(module, parts_per_batch=9)
    for reuse in (0, 5, True):
        with pytest.raises(ValueError, match="reuse"):
            _loader(module, reuse=reuse)
    with pytest.raises(ValueError, match="fanouts"):
        _loader(module, fanouts=[3, 0])
    with pytest.raises(ValueError, match="parts_per_batch"):
        MacroBatchDataModule(DATASET, num_parts=4, parts_per_batch=5, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="reuse"):
        MacroBatchDataModule(DATASET, reuse=5, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="partitioner"):
        MacroBatchDataModule(DATASET, partitioner="kmeans", cache_dir=str(tmp_path))


def test_memory_and_mmap_sampling_draw_identical_batches(tmp_path):
    batches = {}
    for storage in ("memory", "mmap"):
        dm = NeighborSamplingDataModule(
            DATASET, fanouts=[5, 5], batch_size=100, storage=storage, cache_dir=str(tmp_path)
        )
        dm.prepare_data()
        dm.setup("fit")
        batches[storage] = list(dm.train_dataloader())
    assert len(batches["memory"]) == 8  # 720 training nodes / 100
    for a, b in zip(batches["memory"], batches["mmap"], strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.x, b.x)
        assert torch.equal(a.edge_index, b.edge_index)


class _Recorder(Callback):
    """Records the targets of every training batch."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.seen.append(batch.n_id[: batch.batch_size].clone())


def test_trainer_resumed_mid_epoch_trains_on_the_same_batches(module, tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.models import MiniBatchNodeClassifier

    def fit(max_steps=-1, ckpt_path=None, callbacks=()):
        dm = _data_module(module.cache_dir)
        gnn = GraphSAGE(DATASET.num_features, 8, num_layers=2, out_channels=DATASET.num_classes)
        recorder = _Recorder()
        trainer = pl.Trainer(
            max_epochs=2,
            max_steps=max_steps,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            callbacks=[recorder, *callbacks],
            default_root_dir=str(tmp_path),
        )
        trainer.fit(MiniBatchNodeClassifier(gnn, DATASET.num_classes), dm, ckpt_path=ckpt_path)
        return recorder.seen

    uninterrupted = fit()
    checkpoint = ModelCheckpoint(
        dirpath=str(tmp_path / "ckpt"), every_n_train_steps=5, save_top_k=-1
    )
    first = fit(max_steps=7, callbacks=[checkpoint])
    rest = fit(ckpt_path=str(tmp_path / "ckpt" / "epoch=0-step=5.ckpt"))
    resumed = first[:5] + rest
    assert len(resumed) == len(uninterrupted) > 10
    assert all(torch.equal(a, b) for a, b in zip(resumed, uninterrupted, strict=True))


def test_stage_two_relabels_through_a_node_buffer(module, monkeypatch):
    """The macro-batch's mini-batches need no torch.unique, and stay the same batches."""
    reference = [b for b in _loader(module, prefetch=False)]

    def fail(*args, **kwargs):
        raise AssertionError("torch.unique was called")

    monkeypatch.setattr(torch, "unique", fail)
    got = list(_loader(module, prefetch=False))
    assert len(got) == len(reference) > 0
    for a, b in zip(got, reference, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x, b.x)


def test_validation_runs_at_the_end_of_every_epoch_whatever_its_step_count(module, tmp_path):
    """The steps of an epoch follow its partition draw. Lightning validates after the
    number of batches it read from ``len()`` once, so a sized loader would skip an epoch's
    validation when the epoch is shorter (seen with a fixed reuse factor). The reference:
    one validation per epoch, right after the epoch's last step."""
    import lightning.pytorch as pl
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.models import MiniBatchNodeClassifier

    epochs = 4
    expected = _loader(module, parts_per_batch=2, batch_size=30)
    lengths = [expected.num_batches(e) for e in range(epochs)]
    assert len(set(lengths)) > 1  # the case at hand: epochs of different lengths

    class ValidationSteps(Callback):
        def __init__(self) -> None:
            self.at: list[int] = []

        def on_validation_epoch_end(self, trainer, pl_module) -> None:
            self.at.append(trainer.global_step)

    dm = _data_module(module.cache_dir, parts_per_batch=2, batch_size=30)
    gnn = GraphSAGE(DATASET.num_features, 8, num_layers=2, out_channels=DATASET.num_classes)
    seen = ValidationSteps()
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[seen],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(MiniBatchNodeClassifier(gnn, DATASET.num_classes), dm)
    assert seen.at == [sum(lengths[: e + 1]) for e in range(epochs)]
