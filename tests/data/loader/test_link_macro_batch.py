"""HANOI's macro-batches for link prediction: exclusion, which edges an epoch trains,
resident negatives and their bias, resume, and a run through the Trainer."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import LinkMacroBatchDataModule, SyntheticGraph
from lightgraph.models import LinkPredictor

DATASET = SyntheticGraph(num_nodes=800, avg_degree=6, num_features=8, seed=7)


def _module(tmp_path, **kwargs) -> LinkMacroBatchDataModule:
    args = dict(num_parts=8, parts_per_batch=2, fanouts=[3, 3], batch_size=64, prefetch=False)
    args.update(kwargs)
    dm = LinkMacroBatchDataModule(DATASET, cache_dir=str(tmp_path), **args)
    dm.prepare_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    return dm


def _store_maps(dm):
    store = dm._store()
    n = int(store.node_ids.numel())
    part = torch.empty(n, dtype=torch.long)
    ptr = store.part_ptr.long()
    for p in range(store.num_parts):
        part[ptr[p] : ptr[p + 1]] = p
    to_store = dm._store_ids()
    hubs = torch.zeros(n, dtype=torch.bool)
    hubs[store.hub_store_ids.long()] = True
    return part, to_store, hubs


def test_no_block_holds_a_mini_batch_edge_and_every_block_edge_is_a_training_edge(tmp_path):
    dm = _module(tmp_path)
    graph = dm.link_graph.split().message_edges("train")
    graph_edges = set(zip(graph[0].tolist(), graph[1].tolist(), strict=True))
    for batch in dm.train_loader():
        seen = set(
            zip(
                batch.n_id[batch.edge_index[0]].tolist(),
                batch.n_id[batch.edge_index[1]].tolist(),
                strict=True,
            )
        )
        assert seen <= graph_edges
        for u, v in zip(
            batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True
        ):
            assert (u, v) not in seen and (v, u) not in seen
            assert (u, v) in graph_edges  # a positive is a training edge


def test_an_epoch_trains_exactly_the_edges_its_macro_batches_own(tmp_path):
    """Each training edge at most once; exactly those whose owner's partition and other end
    are resident together in one of the epoch's macro-batches (computed here from the
    schedule, the partition of every node and the hubs)."""
    dm = _module(tmp_path)
    loader = dm.train_loader()
    part, to_store, hubs = _store_maps(dm)
    split = dm.link_graph.split()
    train = split.train  # u < v
    u, v = to_store[train[0]], to_store[train[1]]
    expected = set()
    for parts in loader.schedule(0):
        group = torch.tensor(parts)
        resident_v = torch.isin(part[v], group) | hubs[v]
        owned = torch.isin(part[u], group) & resident_v
        expected |= set(zip(train[0][owned].tolist(), train[1][owned].tolist(), strict=True))
    trained = []
    for batch in loader:
        trained += list(
            zip(batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True)
        )
    assert len(trained) == len(set(trained))  # at most once
    assert set(trained) == expected
    coverage = len(trained) / train.size(1)
    assert 0 < coverage < 1  # some edges wait for a later epoch's draw
    assert loader.stats.targets == len(trained)


def test_negatives_are_resident_and_hubs_are_drawn_more_often(tmp_path):
    dm = _module(tmp_path, num_negatives=20, hub_fraction=0.05)
    part, to_store, hubs = _store_maps(dm)
    counts = torch.zeros(part.numel())
    loader = dm.train_loader()
    for _ in range(3):
        for batch in loader:
            neg = to_store[batch.n_id[batch.neg].view(-1)]
            resident = torch.isin(part[neg], batch.macro_parts) | hubs[neg]
            assert bool(resident.all())
            counts += torch.bincount(neg, minlength=part.numel()).float()
    rate_hub = counts[hubs].mean() / counts[~hubs].mean()
    # About num_parts / parts_per_batch = 4 times as often (hubs are resident everywhere).
    assert 2.0 < float(rate_hub) < 8.0


def test_a_resumed_loader_continues_the_epoch_exactly(tmp_path):
    def pairs(loader):
        return [(b.n_id[b.src].tolist(), b.n_id[b.neg].view(-1).tolist()) for b in loader]

    full = pairs(_module(tmp_path).train_loader())
    dm = _module(tmp_path)
    loader = dm.train_loader()
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    other = _module(tmp_path).train_loader()
    other.load_state_dict(state)
    assert pairs(other) == full[3:]


def test_training_through_the_trainer_ranks_held_out_edges(tmp_path):
    dm = _module(tmp_path)
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(8, 16, 2, dm.num_outputs), lr=0.01)
    trainer = pl.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, dm)
        trainer.test(module, dm, verbose=False)
    assert 0 < float(trainer.callback_metrics["test_mrr"]) <= 1


def test_data_parallel_is_refused_with_a_clear_error(tmp_path):
    dm = _module(tmp_path)
    dm.data_shard = (0, 2)
    with pytest.raises(ValueError, match=r"one process only.*2 data-parallel ranks"):
        dm.train_loader()
