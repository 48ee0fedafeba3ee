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


def test_a_disjoint_epoch_trains_exactly_the_edges_its_macro_batches_own(tmp_path):
    """Each training edge at most once; exactly those whose owner's partition and other end
    are resident together in one of the epoch's macro-batches (computed here from the
    schedule, the partition of every node and the hubs)."""
    dm = _module(tmp_path, edge_schedule="disjoint")
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


def _trained(loader) -> list[tuple[int, int]]:
    out = []
    for batch in loader:
        out += zip(batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True)
    return out


@pytest.mark.parametrize("parts_per_batch", [2, 3, 4, 8])
def test_a_pairs_epoch_trains_every_training_edge_exactly_once(tmp_path, parts_per_batch):
    """The reference is the split itself: the epoch's positives are its training edges,
    each once, whatever the partition draw (two epochs, different draws)."""
    dm = _module(tmp_path, parts_per_batch=parts_per_batch)
    train = dm.link_graph.split().train
    expected = sorted(zip(train[0].tolist(), train[1].tolist(), strict=True))
    loader = dm.train_loader()
    for _ in range(2):
        assert sorted(_trained(loader)) == expected
    assert loader.schedule(0) != loader.schedule(1)
    # The edges inside a group are spread: no macro-batch carries most of the epoch.
    if len(loader.schedule(0)) > 2:
        per_macro = [0] * len(loader.schedule(0))
        for batch in loader:
            per_macro[loader.schedule(2).index(batch.macro_parts.tolist())] += batch.src.numel()
        assert max(per_macro) < 0.5 * sum(per_macro)


@pytest.mark.parametrize(("num_parts", "parts_per_batch"), [(8, 2), (8, 3), (9, 4), (5, 5), (7, 9)])
def test_the_pair_schedule_lets_every_two_partitions_meet(num_parts, parts_per_batch):
    from lightgraph.data.loader.link_macro_batch import pair_schedule

    sched = pair_schedule(num_parts, parts_per_batch, seed=3, epoch=1)
    batches = sched.macro_batches
    assert all(len(b) == len(set(b)) <= parts_per_batch for b in batches)
    group = sched.group_of_part
    keys = torch.arange(500)
    for a in range(num_parts):
        for b in range(num_parts):
            holding = [k for k, mb in enumerate(batches) if a in mb and b in mb]
            ga, gb = torch.full((500,), int(group[a])), torch.full((500,), int(group[b]))
            chosen = sched.edge_macro_batch(ga, gb, keys, epoch=1)
            assert holding and set(chosen.tolist()) <= set(holding)
            if group[a] == group[b] and len(batches) > 1:  # spread over every holder
                assert set(chosen.tolist()) == set(holding)


def test_pairs_need_two_partitions_per_macro_batch(tmp_path):
    dm = _module(tmp_path, parts_per_batch=1)
    with pytest.raises(ValueError, match=r"edge_schedule='pairs'.*`parts_per_batch` >= 2.*got 1"):
        dm.train_loader()
    with pytest.raises(ValueError, match=r"edge_schedule.*\('pairs', 'disjoint'\).*'all'"):
        _module(tmp_path, edge_schedule="all")


def test_data_parallel_ranks_train_disjoint_slices_of_one_process_epoch(tmp_path):
    """Two ranks: the same number of steps, disjoint edges, together one process's edges
    but the at most one per global step nobody trains (counted)."""
    one = _module(tmp_path, batch_size=64)
    everything = set(_trained(one.train_loader()))
    shares, steps, dropped = [], [], 0
    for rank in range(2):
        dm = _module(tmp_path, batch_size=32)
        dm.data_shard = (rank, 2)
        loader = dm.train_loader()
        edges = []
        count = 0
        for batch in loader:
            edges += zip(
                batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True
            )
            count += 1
        shares.append(set(edges))
        steps.append(count)
        dropped = loader.stats.dropped_targets
    assert steps[0] == steps[1] > 0
    assert not shares[0] & shares[1]
    union = shares[0] | shares[1]
    assert union <= everything
    assert len(everything - union) == dropped <= steps[0]


class _Counting(SyntheticGraph):
    """The test's graph, counting (and, when told, refusing) whole-graph loads."""

    loads = 0
    refuse = False

    def load(self):
        if _Counting.refuse:
            raise AssertionError("the whole dataset was loaded after prepare_data")
        _Counting.loads += 1
        return super().load()


def test_after_prepare_training_and_validation_never_load_the_dataset(tmp_path):
    """What HANOI needs to train inside a memory limit: the split lives in the store."""
    args = dict(num_nodes=800, avg_degree=6, num_features=8, seed=7)
    kwargs = dict(num_parts=8, parts_per_batch=4, fanouts=[3, 3], batch_size=64, prefetch=False)
    first = LinkMacroBatchDataModule(_Counting(**args), cache_dir=str(tmp_path), **kwargs)
    first.prepare_data()
    assert _Counting.loads >= 1
    reference = LinkMacroBatchDataModule(
        SyntheticGraph(**args), cache_dir=str(tmp_path / "r"), **kwargs
    )
    expected = reference.link_graph.split()
    _Counting.refuse = True
    try:
        dm = LinkMacroBatchDataModule(_Counting(**args), cache_dir=str(tmp_path), **kwargs)
        dm.prepare_data()
        dm.setup("fit")
        trained = _trained(dm.train_loader())
        split = dm.link_split()
        batch = dm.eval_batch("val")
    finally:
        _Counting.refuse = False
    assert len(trained) == expected.train.size(1)
    for name in ("train", "val", "test", "other"):
        assert torch.equal(getattr(split, name), getattr(expected, name))
    assert split.undirected == expected.undirected
    assert batch.src.numel() == expected.val.size(1)


class _SaveWeights(pl.Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, trainer, pl_module) -> None:
        steps = trainer.global_step
        torch.save((steps, pl_module.state_dict()), f"{self.path}.rank{trainer.global_rank}")


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_two_ranks_train_in_step_and_end_with_the_same_weights(tmp_path):
    dm = _module(tmp_path, batch_size=32)
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(8, 16, 2, dm.num_outputs), lr=0.01)
    path = str(tmp_path / "weights")
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=2, strategy="ddp_fork", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=0, callbacks=[_SaveWeights(path)],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, dm)
    (s0, w0), (s1, w1) = (torch.load(f"{path}.rank{r}") for r in range(2))
    one = _module(tmp_path, batch_size=64)
    assert s0 == s1 == sum(1 for _ in one.train_loader())
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
