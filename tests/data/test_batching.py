"""Mini-batches of a macro-batch: near-equal sizes, no small tail, in HANOI's and JOESTAR's
loaders and in the data-parallel slices of JOESTAR-I."""

from __future__ import annotations

import math

import pytest
import torch

from lightgraph.data import MacroBatchDataModule, MultistageDataModule, SyntheticGraph
from lightgraph.data.batching import even_batches, macro_batch_steps, split_sizes
from lightgraph.data.data_parallel import shard_batches
from lightgraph.data.macro_batch import MacroBatchLoader

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
    dm = MultistageDataModule(
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
    ("n", "b", "world"), [(1250, 500, 2), (1250, 1000, 1), (0, 5, 3), (7, 5, 3), (100, 7, 4)]
)
def test_macro_batch_steps_keep_the_one_process_global_step(n, b, world):
    steps = macro_batch_steps(n, b, world)
    one_process = math.ceil(n / (world * b))  # one process, global batch world * b
    # A rank trains 1/world of the macro-batches, so it takes world times as many steps on
    # each: the global step count and the global batch size are one process's.
    assert steps == world * one_process
    if n:
        assert math.ceil(n / steps) <= b  # no rank's mini-batch exceeds its batch size
        sizes = split_sizes(n, steps)
        assert sizes == [x.numel() for x in torch.arange(n).tensor_split(steps)]
    assert macro_batch_steps(1250, 500, 2) == 4  # two of 625 in one process at batch 1000


@pytest.mark.parametrize("world", [2, 3])
def test_data_parallel_hanoi_and_pbs_cut_macro_batches_by_the_global_batch(tmp_path, world):
    """Every rank cuts a whole macro-batch of n targets into world * ceil(n / (world * b))
    near-equal mini-batches, and every rank takes the same number of steps."""
    b = 10
    hanoi = MacroBatchDataModule(
        DATASET,
        num_parts=8,
        parts_per_batch=2,
        fanouts=[3, 3],
        batch_size=b,
        cache_dir=str(tmp_path / "hanoi"),
    )
    hanoi.prepare_data()
    hanoi.setup("fit")
    pbs = [
        MultistageDataModule(
            DATASET,
            first_stage="pbs",
            num_parts=8,
            parts_per_batch=2,
            history=False,
            fanouts=[3, 3],
            batch_size=b,
            prefetch=False,
            cache_dir=str(tmp_path / "pbs"),
        )
        for _ in range(world)
    ]
    steps: dict[str, list[int]] = {"hanoi": [], "pbs": []}
    whole = 0
    for r in range(world):
        loader = MacroBatchLoader(
            hanoi.store,
            parts_per_batch=2,
            fanouts=[3, 3],
            batch_size=b,
            reuse=1,
            seed=0,
            rank=r,
            world_size=world,
            prefetch=False,
        )
        per_macro: dict[tuple[int, ...], list[int]] = {}
        for batch in loader:
            per_macro.setdefault(tuple(batch.macro_parts.tolist()), []).append(batch.batch_size)
        macros = [
            (sizes, mb.kept == mb.targets)
            for mb in loader.plan(0)
            if (sizes := per_macro.get(tuple(mb.parts)))
        ]
        assert sum(len(s) for s, _ in macros) == sum(map(len, per_macro.values()))
        steps["hanoi"].append(sum(map(len, per_macro.values())))
        dm = pbs[r]
        dm.prepare_data()
        dm.setup("fit")
        dm.shard = (r, world)
        rank_pbs = _step_sizes(dm.train_loader())
        steps["pbs"].append(sum(map(len, rank_pbs)))
        # A rank may cut its last macro-batch short to equalise steps.
        macros += [(sizes, k + 1 < len(rank_pbs)) for k, sizes in enumerate(rank_pbs)]
        for sizes, is_whole in macros:
            assert max(sizes) <= b and max(sizes) - min(sizes) <= 1
            if is_whole:
                whole += 1
                assert len(sizes) == world * math.ceil(sum(sizes) / (world * b))
    assert whole >= world  # the rule was checked on every rank
    assert all(len(set(v)) == 1 for v in steps.values()), steps  # equal steps per rank
