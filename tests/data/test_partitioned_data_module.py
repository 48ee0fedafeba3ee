from __future__ import annotations

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
            {"num_partitions": 3},
            2,
            "`num_partitions` \\(3\\) must equal the Trainer's world size \\(2",
        ),
        (
            {"partitioner": "spectral"},
            2,
            "`partitioner` to be one of \\('metis', 'random'\\) but got 'spectral'",
        ),
        ({"num_partitions": 0}, 2, "`num_partitions` to be a positive integer or None but got 0"),
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
        TrickyGraph(), cache_dir=str(tmp_path), num_partitions=61, partitioner="random"
    )
    with pytest.raises(ValueError, match="`num_parts` <= num_nodes \\(60\\)"):
        dm.prepare_data()


def test_feature_size_mismatch(tmp_path) -> None:
    dm = PartitionedGraphDataModule(
        TrickyGraph(num_features=7), cache_dir=str(tmp_path), num_partitions=1
    )
    with pytest.raises(ValueError, match="declares 7 features but its graph has 6"):
        dm.prepare_data()


def test_dataset_type_checked() -> None:
    with pytest.raises(TypeError, match="`dataset` to be a lightgraph GraphDataset"):
        PartitionedGraphDataModule("Reddit")  # type: ignore[arg-type]
