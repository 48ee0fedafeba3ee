"""A LightningDataModule that serves each rank its partition of one graph."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.datasets.graph_dataset import DatasetSizes, GraphDataset, validate_graph
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.partition.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partition.partitioner import (
    PARTITION_METHODS,
    PartitionMethod,
    partition_graph,
)
from lightgraph.data.store.cache import CacheReader, CacheWriter, tensor_digest
from lightgraph.utilities.checks import check_choice

log = logging.getLogger(__name__)

_CACHE_FORMAT = 2


class PartitionedGraphDataModule(DatasetSizes, CachedDataModule):
    """Full-graph partitioned data for partition-parallel training (Sylvie, AdaQP, ...).

    ``prepare_data`` (one process per node) loads the graph, partitions it into as many
    parts as the Trainer has processes, builds every rank's
    :class:`~lightgraph.data.PartitionPlan` and caches them on disk; ``setup`` loads only
    the plan of the calling rank. Every epoch each dataloader yields that plan once.

    The cache (see :class:`~lightgraph.data.CachedDataModule`) is
    ``<cache_dir>/<DatasetClass>-<P>p-<digest>`` with ``part<r>.pt`` per rank and a
    ``meta.json`` (inner/halo/edge counts, build time and the manifest of the files).

    Args:
        dataset: the graph source, e.g. :class:`~lightgraph.data.SyntheticGraph`.
        num_parts: number of partitions; must equal the Trainer's world size
            (``devices * num_nodes``). ``None`` takes the world size.
        partitioner: ``"metis"`` (edge-cut minimising), ``"random"`` or ``"gap"`` (the
            streaming partitioner of :func:`~lightgraph.data.partition.gap_partition`).
        partition: an explicit ``[num_nodes]`` partition vector (overrides
            ``partitioner``; mainly for tests and external partitioners).
        cache_dir: where partition plans are cached, keyed by the configuration.
        seed: seed of the partitioner.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_parts: int | None = None,
        partitioner: PartitionMethod = "metis",
        partition: Tensor | None = None,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
    ) -> None:
        super().__init__(cache_dir)
        owner = "PartitionedGraphDataModule"
        if not isinstance(dataset, GraphDataset):
            raise TypeError(
                f"{owner}: expected `dataset` to be a lightgraph GraphDataset "
                f"(e.g. SyntheticGraph, RealDataset) but got {type(dataset).__name__}."
            )
        check_choice(owner, "partitioner", partitioner, PARTITION_METHODS)
        if num_parts is not None and (
            isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1
        ):
            raise ValueError(
                f"{owner}: expected `num_parts` to be a positive integer or "
                f"None but got {num_parts!r}."
            )
        self.dataset = dataset
        self.num_parts = num_parts
        self.partitioner = partitioner
        self.partition = None if partition is None else torch.as_tensor(partition).long()
        self.seed = seed
        self.plan: PartitionPlan | None = None

    # ------------------------------------------------------------------------- internals
    def _world_size(self) -> int:
        world = self.trainer.world_size if self.trainer is not None else None
        parts = self.num_parts if self.num_parts is not None else (world or 1)
        if world is not None and parts != world:
            raise ValueError(
                f"PartitionedGraphDataModule: `num_parts` ({parts}) must equal the Trainer's "
                f"world size ({world} = devices x num_nodes): every process trains one partition. "
                f"Set num_parts={world} or leave it None."
            )
        if self.partition is not None:
            injected = int(self.partition.max()) + 1 if self.partition.numel() else 0
            if injected != parts:
                raise ValueError(
                    f"PartitionedGraphDataModule: the injected `partition` has {injected} parts but "
                    f"{parts} partitions are needed (one per process)."
                )
        return parts

    # --------------------------------------------------------------- CachedDataModule
    def fingerprint(self, num_parts: int | None = None) -> dict[str, Any]:
        """The cache key: dataset, partitioner, number of parts, seed, injected partition."""
        num_parts = self._world_size() if num_parts is None else num_parts
        key: dict[str, Any] = {
            "format": _CACHE_FORMAT,
            "dataset": self.dataset.fingerprint(),
            "partitioner": self.partitioner,
            "num_parts": num_parts,
            "seed": self.seed,
        }
        if self.partition is not None:
            key["partition"] = tensor_digest(self.partition)
        return key

    def cache_name(self, num_parts: int | None = None) -> str:
        num_parts = self._world_size() if num_parts is None else num_parts
        return f"{type(self.dataset).__name__}-{num_parts}p"

    def cache_path(self, num_parts: int | None = None) -> str:
        """Directory holding the cached plans of this configuration (``None``: the world size)."""
        num_parts = self._world_size() if num_parts is None else num_parts
        return self.cache_path_for(self.fingerprint(num_parts), self.cache_name(num_parts))

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
                data.edge_index,
                data.num_nodes,
                num_parts,
                self.partitioner,
                self.seed,
                y=data.y,
                train_mask=data.train_mask,
            )
        return build_partition_plans(data, part, num_parts)

    def build(self, writer: CacheWriter) -> dict[str, Any]:
        """Every rank's plan as ``part<rank>.pt``; counts and build time as metadata."""
        num_parts = self._world_size()
        start = time.perf_counter()
        plans = self.build_plans(num_parts)
        for plan in plans:
            with writer.path(f"part{plan.rank}.pt") as tmp:
                plan.save(tmp)
        meta: dict[str, Any] = {
            "dataset": self.dataset.fingerprint(),
            "num_parts": num_parts,
            "partitioner": "injected" if self.partition is not None else self.partitioner,
            "inner": [p.num_inner for p in plans],
            "halo": [p.num_halo for p in plans],
            "local_edges": [int(p.edge_index.size(1)) for p in plans],
            "seconds": round(time.perf_counter() - start, 3),
        }
        log.info(
            "Partitioned %s into %d parts in %.2f s: %s",
            type(self.dataset).__name__,
            num_parts,
            meta["seconds"],
            writer.target,
        )
        return meta

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        """The calling rank's plan only."""
        with cache.reading(f"part{rank}.pt") as path:
            self.plan = PartitionPlan.load(path)

    def is_loaded(self) -> bool:
        return self.plan is not None

    def loader(self, split: str) -> FixedBatchLoader[PartitionPlan]:
        """The rank's plan, once per epoch, for every split (the masks tell them apart)."""
        assert self.plan is not None
        return FixedBatchLoader([self.plan])
