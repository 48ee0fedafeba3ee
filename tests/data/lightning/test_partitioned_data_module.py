from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace

import pytest
import torch

from lightgraph.data import GraphDataset, PartitionedGraphDataModule, SyntheticGraph
from tests.graphs import tricky_graph


class TrickyGraph(GraphDataset):
    def __init__(self, num_features: int = 6) -> None:
        self._f = num_features
        self.loads = 0

    @property
    def num_features(self) -> int:
        return self._f

    @property
    def num_classes(self) -> int:
        return 3

    def load(self):
        self.loads += 1
        data = tricky_graph(2)[0]
        data.x = data.x.float()
        return data

    def fingerprint(self) -> str:
        return f"tricky-{self._f}"


def attach(dm: PartitionedGraphDataModule, world: int, rank: int) -> None:
    dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)  # what the Trainer provides


def test_prepare_once_then_each_rank_loads_its_plan(tmp_path) -> None:
    ds = TrickyGraph()
    for rank in range(2):
        dm = PartitionedGraphDataModule(ds, partitioner="random", cache_dir=str(tmp_path))
        attach(dm, 2, rank)
        dm.prepare_data()
        dm.setup("fit")
        assert dm.plan.rank == rank and dm.plan.num_parts == 2
        batches = list(dm.train_dataloader())
        assert len(batches) == 1 and batches[0] is dm.plan
    assert ds.loads == 1  # the second prepare_data hit the cache
    meta = os.path.join(dm.cache_path(2), "meta.json")
    assert os.path.exists(meta)


def test_injected_partition_is_used(tmp_path) -> None:
    data, part = tricky_graph(2)
    dm = PartitionedGraphDataModule(TrickyGraph(), partition=part, cache_dir=str(tmp_path))
    attach(dm, 2, 1)
    dm.prepare_data()
    dm.setup()
    assert torch.equal(dm.plan.global_ids[: dm.plan.num_inner], torch.nonzero(part == 1).flatten())


def test_sizes_come_from_the_dataset_without_loading() -> None:
    ds = SyntheticGraph(num_nodes=100, num_features=12, num_classes=5)
    dm = PartitionedGraphDataModule(ds)
    assert (dm.num_features, dm.num_classes, dm.multilabel) == (12, 5, False)


@pytest.mark.parametrize(
    "kwargs,world,match",
    [
        (
            {"num_parts": 3},
            2,
            "`num_parts` \\(3\\) must equal the Trainer's world size \\(2",
        ),
        (
            {"partitioner": "spectral"},
            2,
            "`partitioner` to be one of \\('metis', 'random', 'gap'\\) but got 'spectral'",
        ),
        ({"num_parts": 0}, 2, "`num_parts` to be a positive integer or None but got 0"),
        (
            {"partition": torch.zeros(60, dtype=torch.long)},
            2,
            "injected `partition` has 1 parts but 2",
        ),
    ],
)
def test_bad_configuration(tmp_path, kwargs, world, match) -> None:
    with pytest.raises(ValueError, match=match):
        dm = PartitionedGraphDataModule(TrickyGraph(), cache_dir=str(tmp_path), **kwargs)
        attach(dm, world, 0)
        dm.prepare_data()


def test_more_partitions_than_nodes(tmp_path) -> None:
    dm = PartitionedGraphDataModule(
        TrickyGraph(), cache_dir=str(tmp_path), num_parts=61, partitioner="random"
    )
    with pytest.raises(ValueError, match="`num_parts` <= num_nodes \\(60\\)"):
        dm.prepare_data()


def test_feature_size_mismatch(tmp_path) -> None:
    dm = PartitionedGraphDataModule(
        TrickyGraph(num_features=7), cache_dir=str(tmp_path), num_parts=1
    )
    with pytest.raises(ValueError, match="declares 7 features but its graph has 6"):
        dm.prepare_data()


def test_dataset_type_checked() -> None:
    with pytest.raises(TypeError, match="`dataset` to be a lightgraph GraphDataset"):
        PartitionedGraphDataModule("Reddit")  # type: ignore[arg-type]


# ------------------------------------------------------------------- the plan cache
def _built(tmp_path) -> tuple[TrickyGraph, str]:
    ds = TrickyGraph()
    dm = PartitionedGraphDataModule(ds, partitioner="random", cache_dir=str(tmp_path))
    attach(dm, 2, 0)
    dm.prepare_data()
    assert ds.loads == 1
    return ds, dm.cache_path(2)


def test_cache_directory_name_is_unchanged(tmp_path) -> None:
    # <cache_dir>/<DatasetClass>-<P>p-<sha1 of the sorted JSON key>[:16], as before the base.
    import hashlib
    import json

    part = torch.arange(60) % 2
    dm = PartitionedGraphDataModule(TrickyGraph(), partition=part, cache_dir=str(tmp_path), seed=3)
    key = {
        "format": 2,
        "dataset": "tricky-6",
        "partitioner": "metis",
        "num_parts": 2,
        "seed": 3,
        "partition": hashlib.sha1(part.numpy().tobytes()).hexdigest(),
    }
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    assert dm.cache_path(2) == os.path.join(str(tmp_path), f"TrickyGraph-2p-{digest}")
    attach(dm, 2, 0)
    assert dm.cache_path() == dm.cache_path(2)


def test_good_cache_is_reused(tmp_path) -> None:
    ds, path = _built(tmp_path)
    before = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)}
    assert sorted(before) == ["meta.json", "part0.pt", "part1.pt"]
    for rank in range(2):
        dm = PartitionedGraphDataModule(ds, partitioner="random", cache_dir=str(tmp_path))
        attach(dm, 2, rank)
        dm.prepare_data()
        dm.setup()
        assert dm.plan.rank == rank
    assert ds.loads == 1
    assert {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)} == before
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    assert meta["num_parts"] == 2 and len(meta["halo"]) == 2
    assert sorted(meta["manifest"]["files"]) == ["part0.pt", "part1.pt"]


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _garbage(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"\x00garbage, not a zip archive")


@pytest.mark.parametrize("damage", [_truncate, _garbage], ids=["truncated", "garbage"])
def test_damaged_plan_is_named_then_rebuilt(tmp_path, caplog, damage) -> None:
    # Before the base, a truncated part1.pt killed rank 1 with torch's zip-reader error
    # (and rank 0 with a gloo connection error). One process plays both roles here.
    from lightgraph.data import CorruptCacheError

    ds, path = _built(tmp_path)
    bad = os.path.join(path, "part1.pt")
    damage(bad)

    rank1 = PartitionedGraphDataModule(ds, partitioner="random", cache_dir=str(tmp_path))
    attach(rank1, 2, 1)
    with pytest.raises(CorruptCacheError) as info:
        rank1.setup()
    msg = str(info.value)
    assert msg.startswith(f"PartitionedGraphDataModule: the cache file {bad} is ")
    assert f"Delete {path} (or just part1.pt) and re-run" in msg
    assert ds.loads == 1

    builder = PartitionedGraphDataModule(ds, partitioner="random", cache_dir=str(tmp_path))
    attach(builder, 2, 0)
    with caplog.at_level(logging.WARNING, logger="lightgraph.data.lightning.cached_data_module"):
        builder.prepare_data()
    assert ds.loads == 2
    assert any(r.levelno == logging.WARNING and bad in r.getMessage() for r in caplog.records)

    rank1 = PartitionedGraphDataModule(ds, partitioner="random", cache_dir=str(tmp_path))
    attach(rank1, 2, 1)
    rank1.setup()
    assert rank1.plan.rank == 1 and rank1.plan.num_parts == 2


def test_dataloaders_need_setup(tmp_path) -> None:
    dm = PartitionedGraphDataModule(TrickyGraph(), cache_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="PartitionedGraphDataModule: call `setup\\(\\)`"):
        dm.val_dataloader()
