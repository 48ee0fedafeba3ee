"""Mini-batches of a macro-batch: near-equal sizes, no small tail, in HANOI's and JOESTAR's
loaders, and the data-parallel shares of them (JOESTAR-I's slices, HANOI's and PBS's
shares of one process's macro-batches)."""

from __future__ import annotations

import math

import pytest
import torch

from lightgraph.data import MacroBatchDataModule, MultistageDataModule, SyntheticGraph
from lightgraph.data.loader import PartitionBatchSampler
from lightgraph.data.loader.batching import even_batches, macro_batch_steps, split_sizes
from lightgraph.data.loader.data_parallel import shard_batches
from lightgraph.data.loader.macro_batch import MacroBatchLoader, shard_macro_batches
from tests.data.joestar import joestar_module

DATASET = SyntheticGraph(num_nodes=900, avg_degree=6, num_features=8, train_ratio=0.3, seed=4)


@pytest.mark.parametrize(
    ("n", "b"), [(0, 5), (1, 5), (5, 5), (6, 5), (1250, 1000), (2001, 1000), (99, 7), (1003, 1000)]
)
def test_even_batches_cover_the_order_with_sizes_within_one(n, b):
    order = torch.randperm(n)
    batches = even_batches(order, b)
    assert len(batches) == math.ceil(n / b)  # the step count of fixed-size slicing
    if n:
        sizes = [x.numel() for x in batches]
        assert max(sizes) <= b and max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)
        assert torch.equal(torch.cat(batches), order)


def test_a_tail_is_spread_not_kept():
    sizes = [x.numel() for x in even_batches(torch.arange(1250), 1000)]
    assert sizes == [625, 625]
    assert [x.numel() for x in even_batches(torch.arange(5003), 1000)] == [834] * 5 + [833]


@pytest.mark.parametrize(("n", "world", "b"), [(61, 2, 10), (2001, 2, 500), (45, 3, 7), (2, 3, 4)])
def test_shard_batches_are_slices_of_the_one_process_batches(n, world, b):
    order = torch.randperm(n)
    one = even_batches(order, world * b)  # what one process with batch world * b trains
    ranks = [shard_batches(order, r, world, b) for r in range(world)]
    steps = [g for g in one if g.numel() >= world]
    assert all(len(mine) == len(steps) for mine in ranks)  # equal steps on every rank
    for i, g in enumerate(steps):
        per = g.numel() // world
        got = torch.cat([mine[i] for mine in ranks])
        assert torch.equal(got, g[: world * per])  # the last len % world are nobody's
        assert all(mine[i].numel() == per <= b for mine in ranks)
    assert [x.tolist() for x in shard_batches(order, 0, 1, b)] == [
        x.tolist() for x in even_batches(order, b)
    ]


def _step_sizes(loader) -> list[list[int]]:
    """The seed counts of the steps of each macro-batch, in order."""
    out: list[list[int]] = []
    last = None
    for step in loader:
        key = step.macro.index
        if key != last:
            out.append([])
            last = key
        out[-1].append(int(step.seeds.numel()))
    return out


@pytest.mark.parametrize("first_stage", ["lbs", "pbs"])
def test_joestar_macro_batches_are_split_evenly(tmp_path, first_stage):
    args = (
        dict(ratio=0.3, fanouts=[3, 3])
        if first_stage == "lbs"
        else dict(num_parts=8, parts_per_batch=3, history=False, fanouts=[3, 3])
    )
    dm = joestar_module(
        DATASET,
        first_stage=first_stage,
        batch_size=30,
        prefetch=False,
        cache_dir=str(tmp_path),
        **args,
    )
    dm.prepare_data()
    dm.setup("fit")
    macros = _step_sizes(dm.train_loader())
    plan = dm.plan(0)
    assert [sum(s) for s in macros] == [p.numel() for p in plan]  # every seed once
    for sizes, seeds in zip(macros, plan, strict=True):
        assert len(sizes) == math.ceil(seeds.numel() / 30)
        assert max(sizes) <= 30 and max(sizes) - min(sizes) <= 1
    assert any(len(s) > 1 and s[-1] != 30 for s in macros)  # a remainder was spread


def test_hanoi_macro_batches_are_split_evenly(tmp_path):
    dm = MacroBatchDataModule(
        DATASET,
        num_parts=8,
        parts_per_batch=3,
        fanouts=[3, 3],
        batch_size=25,
        reuse=1,
        cache_dir=str(tmp_path),
    )
    dm.prepare_data()
    dm.setup("fit")
    loader = MacroBatchLoader(
        dm.store, parts_per_batch=3, fanouts=[3, 3], batch_size=25, reuse=1, seed=0
    )
    per_macro: dict[tuple[int, ...], list[int]] = {}
    for batch in loader:
        per_macro.setdefault(tuple(batch.macro_parts.tolist()), []).append(batch.batch_size)
    assert sum(map(sum, per_macro.values())) == int(DATASET.load().train_mask.sum())
    for sizes in per_macro.values():
        assert len(sizes) == math.ceil(sum(sizes) / 25)
        assert max(sizes) <= 25 and max(sizes) - min(sizes) <= 1
    assert any(len(s) > 1 and s[-1] != 25 for s in per_macro.values())


@pytest.mark.parametrize(
    ("counts", "ppb", "world", "b", "chunks"),
    [
        ([100] * 8, 4, 2, 50, [4, 4]),  # one process's macro-batches, 2 + 2 partitions
        ([100] * 8, 2, 3, 40, [3, 5]),  # max(ppb, N) = 3; the short last one joins
        ([100] * 10, 4, 3, 10, [4, 6]),  # 2 partitions left over: fewer than N
        ([100, 0, 0, 100, 100, 0, 100, 100], 2, 2, 30, [4, 4]),  # empty partitions
        ([1, 1, 1, 500, 1, 1], 3, 3, 100, [3, 3]),  # capped: one target a mini-batch at most
    ],
)
def test_shard_macro_batches_split_one_process_macro_batches(counts, ppb, world, b, chunks):
    perm = torch.randperm(len(counts), generator=torch.Generator().manual_seed(1)).tolist()
    plans = shard_macro_batches(perm, counts, ppb, b, world)
    assert len({len(plan) for plan in plans}) == 1 and len(plans[0]) == len(chunks)
    start = 0
    for m, size in enumerate(chunks):
        chunk = perm[start : start + size]  # consecutive partitions of the shuffle
        start += size
        shares = [plan[m] for plan in plans]
        assert sorted(sum((mb.parts for mb in shares), [])) == sorted(chunk)
        for mb in shares:  # a share keeps the shuffled order
            assert mb.parts == [p for p in chunk if p in mb.parts]
            assert mb.targets == sum(counts[p] for p in mb.parts) > 0
        totals = [mb.targets for mb in shares]
        assert max(totals) - min(totals) <= max(counts[p] for p in chunk)
        # One process's steps at the global batch (ceil), at most one per target of a share.
        steps = min(math.ceil(sum(totals) / (world * b)), min(totals))
        assert {mb.steps for mb in shares} == {steps}
    assert start == len(perm)
    assert macro_batch_steps(1250, 1000) == 2 and macro_batch_steps(0, 5) == 0
    assert split_sizes(1250, 3) == [x.numel() for x in torch.arange(1250).tensor_split(3)]


def _hanoi_steps(store, ppb: int, b: int, rank: int = 0, world: int = 1, reuse: int = 1, **kwargs):
    """``(partitions of the macro-batch, targets)`` of every step of one HANOI epoch."""
    loader = MacroBatchLoader(
        store, ppb, [3, 3], b, reuse=reuse, seed=0, rank=rank, world_size=world, **kwargs
    )
    return [
        (frozenset(batch.macro_parts.tolist()), batch.n_id[: batch.batch_size].tolist())
        for batch in loader
    ]


def _pbs_steps(tmp_path, ppb: int, b: int, rank: int = 0, world: int = 1):
    """``(partitions of the macro-batch, targets)`` of every step of one PBS epoch."""
    dm = MultistageDataModule(
        DATASET,
        first_stage=PartitionBatchSampler(num_parts=8, parts_per_batch=ppb, history=False),
        fanouts=[3, 3],
        batch_size=b,
        prefetch=False,
        cache_dir=str(tmp_path / "pbs"),
    )
    dm.prepare_data()
    dm.setup("fit")
    dm.data_shard = (rank, world)
    ptr = dm.store.part_ptr.tolist()
    part = torch.cat([torch.full((ptr[p + 1] - ptr[p],), p) for p in range(dm.num_parts)])
    out = []
    for step in dm.train_loader():
        inner = step.macro.node[: step.macro.num_inner]
        out.append((frozenset(part[inner].tolist()), step.macro.node[step.seeds].tolist()))
    return out


@pytest.mark.parametrize("system", ["hanoi", "pbs"])
@pytest.mark.parametrize(("world", "ppb"), [(2, 2), (3, 4)])
def test_data_parallel_ranks_take_one_process_global_steps(tmp_path, system, world, ppb):
    """N ranks at batch b train one process's epoch at batch N * b: at every step the
    ranks' mini-batches are disjoint shares of the macro-batch one process trains at that
    step, and together they train each of its targets once."""
    b = 10
    if system == "hanoi":
        dm = MacroBatchDataModule(
            DATASET,
            num_parts=8,
            parts_per_batch=ppb,
            fanouts=[3, 3],
            batch_size=b,
            cache_dir=str(tmp_path / "hanoi"),
        )
        dm.prepare_data()
        dm.setup("fit")

        def steps(rank: int = 0, world: int = 1, batch: int = b):
            return _hanoi_steps(dm.store, ppb, batch, rank, world, prefetch=False)
    else:

        def steps(rank: int = 0, world: int = 1, batch: int = b):
            return _pbs_steps(tmp_path, ppb, batch, rank, world)

    one = steps(batch=world * b)  # the reference: one process, the global batch
    ranks = [steps(r, world) for r in range(world)]
    assert all(len(mine) == len(one) for mine in ranks)  # one process's step count
    for i, (parts, _targets) in enumerate(one):
        shares = [mine[i] for mine in ranks]
        assert frozenset().union(*(p for p, _ in shares)) == parts  # the same macro-batch
        for r in range(world):
            for s in range(r):
                assert not shares[r][0] & shares[s][0]  # each partition read by one rank

    # Per macro-batch: the ranks' targets together are exactly one process's.
    def by_macro(seq):
        out: dict[frozenset, list[int]] = {}
        for parts, targets in seq:
            out.setdefault(parts, []).extend(targets)
        return out

    reference = by_macro(one)
    merged: dict[frozenset, list[int]] = {}
    for mine in ranks:
        sizes: dict[frozenset, list[int]] = {}
        for parts, targets in mine:
            sizes.setdefault(parts, []).append(len(targets))
        # A rank cuts its share into near-equal mini-batches.
        assert all(max(v) - min(v) <= 1 for v in sizes.values())
        for parts, targets in by_macro(mine).items():
            whole = next(k for k in reference if parts <= k)
            merged.setdefault(whole, []).extend(targets)
    assert {k: sorted(v) for k, v in merged.items()} == {k: sorted(v) for k, v in reference.items()}


@pytest.mark.parametrize(("world", "ppb"), [(2, 2), (3, 3)])
def test_hanoi_ranks_sharing_targets_train_slices_of_one_process_global_batches(
    tmp_path, world, ppb
):
    """``rank_share="targets"``: every rank reads one process's whole macro-batch, and
    its step ``i`` is the ``r``-th of ``N`` equal slices of one process's mini-batch ``i``
    at the global batch ``N * b`` (reuse passes included); at most ``N - 1`` targets of
    a global batch are nobody's."""
    b = 10
    dm = MacroBatchDataModule(
        DATASET, num_parts=8, fanouts=[3, 3], cache_dir=str(tmp_path / "hanoi")
    )
    dm.prepare_data()
    dm.setup("fit")
    one = _hanoi_steps(dm.store, ppb, world * b, reuse=2)  # the reference: one process
    ranks = [
        _hanoi_steps(dm.store, ppb, b, r, world, reuse=2, rank_share="targets", prefetch=r == 0)
        for r in range(world)
    ]
    assert len(one) > 4 and all(len(mine) == len(one) for mine in ranks)
    dropped = 0
    for i, (parts, targets) in enumerate(one):
        per = len(targets) // world
        assert per >= 1 and len(targets) - world * per < world
        dropped += len(targets) - world * per
        for r, mine in enumerate(ranks):
            assert mine[i][0] == parts  # the whole macro-batch
            assert mine[i][1] == targets[r * per : (r + 1) * per]
    # What no rank trains is counted, the whole job's number on every rank.
    for r in range(world):
        loader = MacroBatchLoader(
            dm.store, ppb, [3, 3], b, reuse=2, rank=r, world_size=world, rank_share="targets"
        )
        list(loader)
        assert loader.stats.dropped_targets == dropped
        assert loader.stats.targets == sum(len(t) for _, t in ranks[r])


def test_rank_share_is_checked(tmp_path):
    dm = MacroBatchDataModule(
        DATASET, num_parts=8, fanouts=[3, 3], cache_dir=str(tmp_path / "hanoi")
    )
    dm.prepare_data()
    dm.setup("fit")
    with pytest.raises(ValueError, match="rank_share.*'partitions', 'targets'.*'nodes'"):
        MacroBatchLoader(dm.store, 2, [3, 3], 10, rank_share="nodes")
    with pytest.raises(ValueError, match="rank_share.*'nodes'"):
        MacroBatchDataModule(DATASET, rank_share="nodes")
