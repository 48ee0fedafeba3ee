"""Data-parallel shards of the store-backed training loaders (NS and HANOI), 2 and 3 ranks.

Every rank builds its loader with ``rank=r, world_size=N`` from the same seed; the
properties are checked against independent references: the one-process loader with
``N * batch_size`` (NS: rank ``r`` trains the ``r``-th slice of each of its batches;
HANOI: tests/data/test_batching.py), the graph's own training mask and the store's
partition layout (HANOI).
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter

import pytest
import torch
from lightning.pytorch.callbacks import Callback

import lightgraph.data.loader.minibatch as minibatch_module
from lightgraph.data import MacroBatchDataModule, NeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.lightning import build_store
from lightgraph.data.loader import MacroBatchLoader
from lightgraph.data.loader.data_parallel import balance_groups
from lightgraph.data.loader.minibatch import NeighborSamplingLoader
from lightgraph.functional.neighbor_sampling import to_csc

DATASET = SyntheticGraph(num_nodes=1200, avg_degree=8, num_features=8, homophily=0.7, seed=3)
NUM_PARTS, PARTS_PER_BATCH, BATCH, REUSE = 8, 2, 64, 2


# ----------------------------------------------------------------------------- NS
def _graph(n: int = 120, e: int = 600):
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    indptr, indices = to_csc(edge_index, n)
    return indptr, indices, torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


NS_SEEDS = torch.arange(0, 120, 3)  # 40 targets: 40 % 3 = 1 is dropped on three ranks
NS_BATCH = 4


def _ns(rank: int = 0, world_size: int = 1, batch_size: int = NS_BATCH, seed: int = 3):
    return NeighborSamplingLoader(
        *_graph(), NS_SEEDS, [2, 2], batch_size, seed=seed, rank=rank, world_size=world_size
    )


def _targets(batches) -> list[list[int]]:
    return [b.n_id[: b.batch_size].tolist() for b in batches]


@pytest.mark.parametrize("world", [2, 3])
def test_ns_ranks_train_slices_of_the_one_process_global_batches(world):
    one = _ns(batch_size=world * NS_BATCH)  # one process, the global batch
    loaders = [_ns(r, world) for r in range(world)]
    n, previous = NS_SEEDS.numel(), None
    for _epoch in range(2):
        global_batches = _targets(one)
        lengths = [len(loader) for loader in loaders]
        per_rank = [_targets(loader) for loader in loaders]
        # The reference split: rank r takes the r-th slice of every full global batch and
        # an even share of the last one, whose last n % world targets are dropped.
        for r, batches in enumerate(per_rank):
            expected = []
            for gb in global_batches:
                share = NS_BATCH if len(gb) == world * NS_BATCH else len(gb) // world
                if share:
                    expected.append(gb[r * share : (r + 1) * share])
            assert batches == expected, f"rank {r}"
        steps = {len(b) for b in per_rank}
        assert len(steps) == 1 and set(lengths) == steps  # equal steps, known in advance
        flat = [sorted(sum(b, [])) for b in per_rank]
        union = set().union(*map(set, flat))
        assert sum(map(len, flat)) == len(union) == n - n % world  # disjoint
        order = sum(global_batches, [])
        assert set(order) - union == set(order[len(order) - n % world :])
        dropped = [loader.stats.dropped_targets for loader in loaders]
        assert dropped == [(_epoch + 1) * (n % world)] * world  # counted on every rank
        assert previous is None or flat != previous  # reshuffled every epoch
        previous = flat
    # The same seed gives the same split; another seed another one.
    again = [_targets(_ns(r, world)) for r in range(world)]
    other = [_targets(_ns(r, world, seed=4)) for r in range(world)]
    first = [_targets(_ns(r, world)) for r in range(world)]
    assert again == first and other != first


@pytest.mark.parametrize("world", [2, 3])
def test_ns_ranks_draw_from_their_own_random_streams(world, monkeypatch):
    keys: list[tuple] = []
    make = minibatch_module.make_generator

    def record(seed, *key):
        if key[0] == "sample":
            keys.append(key)
        return make(seed, *key)

    monkeypatch.setattr(minibatch_module, "make_generator", record)
    steps = sum(len(list(_ns(r, world))) for r in range(world))
    assert len(keys) == steps and len(set(keys)) == steps  # no two (rank, step) share one


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("stop", [1, 3])
def test_ns_rank_resumes_from_rank_zeros_state(world, stop):
    """Lightning saves rank 0's loader state and every rank loads it."""
    zero = _ns(0, world)
    it = iter(zero)
    for _ in range(stop):
        next(it)
    state = zero.state_dict()
    for r in range(world):
        reference = _ns(r, world)
        expected = _targets(reference) + _targets(reference)
        resumed = _ns(r, world)
        resumed.load_state_dict(state)
        assert _targets(resumed) + _targets(resumed) == expected[stop:]


def test_ns_bad_shard_is_named():
    with pytest.raises(ValueError, match="rank"):
        _ns(2, 2)
    with pytest.raises(ValueError, match="world_size"):
        _ns(0, 0)


# ----------------------------------------------------------------------------- HANOI
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return build_store(
        DATASET,
        cache_dir=str(tmp_path_factory.mktemp("cache")),
        num_parts=NUM_PARTS,
        hub_fraction=0.02,
    )


class _Recording:
    """A store that records which partitions every macro-batch read asked for."""

    def __init__(self, store) -> None:
        self._store = store
        self.reads: list[list[int]] = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def read_macro_batch(self, parts):
        self.reads.append(list(parts))
        return self._store.read_macro_batch(parts)


def _node_part(store) -> dict[int, int]:
    ptr = torch.as_tensor(store.part_ptr).tolist()
    ids = store.node_ids.long().tolist()
    return {ids[i]: p for p in range(store.num_parts) for i in range(ptr[p], ptr[p + 1])}


def _train_targets(store) -> set[int]:
    graph = DATASET.load()
    return set(graph.train_mask.nonzero().view(-1).tolist()) - set(store.hubs.tolist())


def _hanoi(store, rank=0, world_size=1, **kwargs):
    args = dict(
        parts_per_batch=PARTS_PER_BATCH, fanouts=[4, 3], batch_size=BATCH, reuse=REUSE, seed=0
    )
    args.update(kwargs)
    return MacroBatchLoader(store, rank=rank, world_size=world_size, **args)


@pytest.mark.parametrize("world", [2, 3])
def test_hanoi_ranks_read_and_train_disjoint_partitions_with_equal_steps(store, world):
    part_of = _node_part(store)
    targets = _train_targets(store)
    recorders = [_Recording(store) for _ in range(world)]
    loaders = [_hanoi(rec, r, world) for r, rec in enumerate(recorders)]
    previous = None
    for _epoch in range(2):
        for rec in recorders:
            rec.reads.clear()
        lengths = [loader.num_batches() for loader in loaders]
        per_rank = [_targets(loader) for loader in loaders]
        assert len({len(b) for b in per_rank}) == 1  # equal steps ...
        assert lengths == [len(b) for b in per_rank]  # ... known in advance
        trained = [Counter(t for batch in b for t in batch) for b in per_rank]
        read = [sum(rec.reads, []) for rec in recorders]
        # Every partition is read once per epoch, by one rank, which trains its targets.
        assert sorted(sum(read, [])) == list(range(NUM_PARTS))
        for r in range(world):
            assert {part_of[t] for t in trained[r]} <= set(read[r])
            for s in range(r):
                assert not set(trained[r]) & set(trained[s])
        # Every training target is trained `reuse` times, on one rank: none is left out.
        overall = sum(trained, Counter())
        assert set(overall) == targets and set(overall.values()) == {REUSE}
        split = [sorted(read_r) for read_r in read]
        assert previous is None or split != previous  # reshuffled every epoch
        previous = split
    # The same seed gives the same batches.
    first = [_targets(_hanoi(store, r, world)) for r in range(world)]
    again = [_targets(_hanoi(store, r, world, prefetch=False)) for r in range(world)]
    assert first == again


@pytest.mark.parametrize("world", [2, 3])
def test_hanoi_rank_resumes_from_rank_zeros_state(store, world):
    """Lightning saves rank 0's loader state and every rank loads it."""
    # One partition per macro-batch of each rank, 15 targets per rank and mini-batch.
    args = dict(world_size=world, prefetch=False, batch_size=15, parts_per_batch=world)

    def make(r):
        return _hanoi(store, r, **args)

    references = []
    for r in range(world):
        loader = make(r)
        references.append(_targets(loader) + _targets(loader))
    steps = make(0).num_batches()  # of epoch 0 (epochs differ in length)
    for stop in sorted({*range(1, steps, 3), steps - 1}):
        states = []
        for r in range(world):
            loader = make(r)
            it = iter(loader)
            for _ in range(stop):
                next(it)
            states.append(loader.state_dict())
        assert all(state == states[0] for state in states)  # shares of one macro-batch
        for r in range(world):
            resumed = make(r)
            resumed.load_state_dict(states[0])
            rest = _targets(resumed) + _targets(resumed)
            assert rest == references[r][stop:], f"rank {r}, stop {stop}"


@pytest.mark.parametrize("world", [2, 3])
def test_balance_groups_in_a_given_order_keeps_the_bound_and_follows_the_order(world):
    g = torch.Generator().manual_seed(0)
    weights = torch.randint(0, 100, (11,), generator=g).tolist()
    splits = set()
    for _ in range(8):
        order = torch.randperm(len(weights), generator=g).tolist()
        groups = balance_groups(weights, world, order=order)
        assert sorted(sum(groups, [])) == list(range(len(weights)))  # a partition
        totals = [sum(weights[i] for i in group) for group in groups]
        assert max(totals) - min(totals) <= max(weights)
        splits.add(tuple(map(tuple, groups)))
    assert len(splits) > 1  # the order decides the groups


def test_hanoi_one_rank_is_the_default_loader(store):
    a, b = _hanoi(store), MacroBatchLoader(store, PARTS_PER_BATCH, [4, 3], BATCH, reuse=REUSE)
    assert _targets(a) == _targets(b)


def test_hanoi_bad_shards_are_refused(store):
    with pytest.raises(ValueError, match=r"`adaptive_reuse=True`.*world_size=2"):
        _hanoi(store, 0, 2, adaptive_reuse=True)
    _hanoi(store, 0, 1, adaptive_reuse=True)  # one process: fine
    with pytest.raises(ValueError, match="world_size"):
        _hanoi(store, 0, NUM_PARTS + 1)
    with pytest.raises(ValueError, match="rank"):
        _hanoi(store, 3, 3)


# ----------------------------------------------------------------------------- Trainer
class _LoggingGraph(SyntheticGraph):
    """Counts its loads (the store's builds) in a file shared by the forked ranks."""

    log_path = ""

    def load(self):
        with open(self.log_path, "a") as f:
            f.write("load\n")
        return super().load()


class _DumpTargets(Callback):
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.steps: list[list[int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.steps.append([trainer.current_epoch, *batch.n_id[: batch.batch_size].tolist()])

    def on_train_end(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        record = {"shard": list(dm.data_shard), "steps": self.steps}
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(record, f)


def _data_module(kind: str, dataset, cache_dir: str):
    if kind == "ns":
        return NeighborSamplingDataModule(
            dataset, fanouts=[4, 3], batch_size=100, cache_dir=cache_dir, eval_mode="sampled"
        )
    return MacroBatchDataModule(
        dataset,
        num_parts=NUM_PARTS,
        parts_per_batch=PARTS_PER_BATCH,
        fanouts=[4, 3],
        batch_size=BATCH,
        reuse=REUSE,
        hub_fraction=0.02,
        cache_dir=cache_dir,
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["ns", "hanoi"])
def test_ddp_trainer_gives_each_rank_its_shard(tmp_path, kind):
    import lightning.pytorch as pl
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.models import MiniBatchNodeClassifier

    dataset = _LoggingGraph(num_nodes=1200, avg_degree=8, num_features=8, homophily=0.7, seed=3)
    _LoggingGraph.log_path = str(tmp_path / "loads.txt")
    cache = str(tmp_path / "cache")
    out = tmp_path / "out"
    out.mkdir()
    gnn = GraphSAGE(DATASET.num_features, 8, num_layers=2, out_channels=DATASET.num_classes)
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        strategy="ddp_fork",
        devices=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[_DumpTargets(str(out))],
        default_root_dir=str(tmp_path),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = MiniBatchNodeClassifier(gnn, DATASET.num_classes)
        trainer.fit(module, _data_module(kind, dataset, cache))
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [rec["shard"] for rec in records] == [[0, 2], [1, 2]]
    # The store was built once (local rank 0's prepare_data) and left as written.
    assert (tmp_path / "loads.txt").read_text() == "load\n"
    dm = _data_module(kind, DATASET, cache)
    assert os.listdir(cache) == [os.path.basename(dm.cache_path())]
    assert dm.verify_cache(deep=True) is None
    # Each rank trained exactly what its loader with rank=r, world_size=2 yields.
    dm.setup("fit")
    assert dm.data_shard == (0, 1)  # no Trainer here: one process
    for r, rec in enumerate(records):
        if kind == "ns":
            ref = NeighborSamplingLoader(
                *dm.graph_arrays(),
                dm.split_nodes("train"),
                [4, 3],
                100,
                seed=0,
                node_ids=dm.store.node_ids,
                rank=r,
                world_size=2,
            )
        else:
            ref = MacroBatchLoader(
                dm.store,
                PARTS_PER_BATCH,
                [4, 3],
                BATCH,
                reuse=REUSE,
                seed=0,
                rank=r,
                world_size=2,
            )
        expected = [[e, *t] for e in range(2) for t in _targets(ref)]
        assert rec["steps"] == expected, f"rank {r}"
    for epoch in range(2):
        sets = [{t for s in rec["steps"] if s[0] == epoch for t in s[1:]} for rec in records]
        assert not sets[0] & sets[1]
    assert len(records[0]["steps"]) == len(records[1]["steps"]) > 0
