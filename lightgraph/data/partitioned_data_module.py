"""A LightningDataModule that serves each rank its partition of one graph."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from torch import Tensor

from lightgraph.data.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partitioner import PARTITION_METHODS, partition_graph

log = logging.getLogger(__name__)

_CACHE_FORMAT = 2


class _OnePartition:
    """An iterable that yields the rank's partition once per epoch (one full-graph step)."""

    def __init__(self, plan: PartitionPlan) -> None:
        self.plan = plan

    def __iter__(self) -> Iterator[PartitionPlan]:
        yield self.plan

    def __len__(self) -> int:
        return 1


class PartitionedGraphDataModule(pl.LightningDataModule):
    """Full-graph partitioned data for partition-parallel training (Sylvie, AdaQP, ...).

    ``prepare_data`` (one process per node) loads the graph, partitions it into as many
    parts as the Trainer has processes, builds every rank's
    :class:`~lightgraph.data.PartitionPlan` and caches them on disk; ``setup`` loads only
    the plan of the calling rank. Every epoch each dataloader yields that plan once.

    Args:
        dataset: the graph source, e.g. :class:`~lightgraph.data.SyntheticGraph`.
        num_partitions: number of partitions; must equal the Trainer's world size
            (``devices * num_nodes``). ``None`` takes the world size.
        partitioner: ``"metis"`` (edge-cut minimising) or ``"random"``.
        partition: an explicit ``[num_nodes]`` partition vector (overrides
            ``partitioner``; mainly for tests and external partitioners).
        cache_dir: where partition plans are cached, keyed by the configuration.
        seed: seed of the partitioner.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_partitions: int | None = None,
        partitioner: Literal["metis", "random"] = "metis",
        partition: Tensor | None = None,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(dataset, GraphDataset):
            raise TypeError(
                f"PartitionedGraphDataModule: expected `dataset` to be a lightgraph GraphDataset "
                f"(e.g. SyntheticGraph, RealDataset) but got {type(dataset).__name__}."
            )
        if partitioner not in PARTITION_METHODS:
            raise ValueError(
                f"PartitionedGraphDataModule: expected `partitioner` to be one of {PARTITION_METHODS} "
                f"but got {partitioner!r}."
            )
        if num_partitions is not None and (
            not isinstance(num_partitions, int) or num_partitions < 1
        ):
            raise ValueError(
                f"PartitionedGraphDataModule: expected `num_partitions` to be a positive integer or "
                f"None but got {num_partitions!r}."
            )
        self.dataset = dataset
        self.num_partitions = num_partitions
        self.partitioner = partitioner
        self.partition = None if partition is None else torch.as_tensor(partition).long()
        self.cache_dir = cache_dir
        self.seed = seed
        self.plan: PartitionPlan | None = None

    # ----------------------------------------------------------------- sizes for the CLI
    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def multilabel(self) -> bool:
        return self.dataset.multilabel

    # ------------------------------------------------------------------------- internals
    def _world_size(self) -> int:
        world = self.trainer.world_size if self.trainer is not None else None
        parts = self.num_partitions if self.num_partitions is not None else (world or 1)
        if world is not None and parts != world:
            raise ValueError(
                f"PartitionedGraphDataModule: `num_partitions` ({parts}) must equal the Trainer's "
                f"world size ({world} = devices x num_nodes): every process trains one partition. "
                f"Set num_partitions={world} or leave it None."
            )
        if self.partition is not None:
            injected = int(self.partition.max()) + 1 if self.partition.numel() else 0
            if injected != parts:
                raise ValueError(
                    f"PartitionedGraphDataModule: the injected `partition` has {injected} parts but "
                    f"{parts} partitions are needed (one per process)."
                )
        return parts

    def cache_path(self, num_parts: int) -> str:
        """Directory holding the cached plans of this configuration."""
        key = {
            "format": _CACHE_FORMAT,
            "dataset": self.dataset.fingerprint(),
            "partitioner": self.partitioner,
            "num_parts": num_parts,
            "seed": self.seed,
        }
        if self.partition is not None:
            key["partition"] = hashlib.sha1(self.partition.numpy().tobytes()).hexdigest()
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return os.path.join(self.cache_dir, f"{type(self.dataset).__name__}-{num_parts}p-{digest}")

    def build_plans(self, num_parts: int) -> list[PartitionPlan]:
        """Load the graph, partition it and build all plans (no caching)."""
        data = self.dataset.load()
        validate_graph(data, self.dataset.num_classes, self.dataset.multilabel)
        if data.x.size(1) != self.dataset.num_features:
            raise ValueError(
                f"PartitionedGraphDataModule: {type(self.dataset).__name__} declares "
                f"{self.dataset.num_features} features but its graph has {data.x.size(1)}."
            )
        if self.partition is not None:
            if self.partition.shape != (data.num_nodes,):
                raise ValueError(
                    f"PartitionedGraphDataModule: expected the injected `partition` to have one entry "
                    f"per node ({data.num_nodes}) but got shape {tuple(self.partition.shape)}."
                )
            part = self.partition
        else:
            part = partition_graph(
                data.edge_index, data.num_nodes, num_parts, self.partitioner, self.seed
            )
        return build_partition_plans(data, part, num_parts)

    # ------------------------------------------------------------------ Lightning hooks
    def prepare_data(self) -> None:
        num_parts = self._world_size()
        path = self.cache_path(num_parts)
        if os.path.exists(os.path.join(path, "meta.json")):
            return
        start = time.perf_counter()
        plans = self.build_plans(num_parts)
        os.makedirs(self.cache_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=self.cache_dir, prefix=".tmp-")
        for plan in plans:
            plan.save(os.path.join(tmp, f"part{plan.rank}.pt"))
        meta: dict[str, Any] = {
            "dataset": self.dataset.fingerprint(),
            "num_parts": num_parts,
            "partitioner": "injected" if self.partition is not None else self.partitioner,
            "inner": [p.num_inner for p in plans],
            "halo": [p.num_halo for p in plans],
            "local_edges": [int(p.edge_index.size(1)) for p in plans],
            "seconds": round(time.perf_counter() - start, 3),
        }
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
        try:
            os.replace(tmp, path)
        except OSError:  # another process finished first: keep its copy
            shutil.rmtree(tmp, ignore_errors=True)
        log.info(
            "Partitioned %s into %d parts in %.2f s: %s",
            type(self.dataset).__name__,
            num_parts,
            meta["seconds"],
            path,
        )

    def setup(self, stage: str | None = None) -> None:
        if self.plan is not None:
            return
        num_parts = self._world_size()
        rank = self.trainer.global_rank if self.trainer is not None else 0
        path = os.path.join(self.cache_path(num_parts), f"part{rank}.pt")
        if not os.path.exists(path):
            self.prepare_data()
        self.plan = PartitionPlan.load(path)

    def _loader(self) -> _OnePartition:
        if self.plan is None:
            raise RuntimeError(
                "PartitionedGraphDataModule: call `setup()` before requesting dataloaders."
            )
        return _OnePartition(self.plan)

    def train_dataloader(self) -> _OnePartition:
        return self._loader()

    def val_dataloader(self) -> _OnePartition:
        return self._loader()

    def test_dataloader(self) -> _OnePartition:
        return self._loader()

    def predict_dataloader(self) -> _OnePartition:
        return self._loader()
