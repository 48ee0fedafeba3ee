"""HANOI's out-of-core link prediction: a partition store of the training graph, link
mini-batches from its macro-batches (:mod:`lightgraph.data.loader.link_macro_batch`), and
exact evaluation over the store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.batch import LinkEvalBatch
from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.datasets.link_split import LinkSplit, LinkTrainingGraph
from lightgraph.data.lightning.macro_batch_data_module import MacroBatchDataModule
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.loader.link_macro_batch import (
    EDGE_SCHEDULES,
    EdgeSchedule,
    LinkMacroBatchLoader,
)
from lightgraph.data.loader.negative_sampling import check_num_negatives
from lightgraph.data.partition.partitioner import PartitionMethod
from lightgraph.data.store.cache import CacheReader, CacheWriter
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.utilities.checks import check_choice, check_int

#: The split's file in the store's cache directory (``LinkSplit.state_dict()``).
SPLIT_FILE = "link_split.pt"


class LinkMacroBatchDataModule(MacroBatchDataModule):
    """Link prediction from an on-disk partition store of the training graph (HANOI).

    The dataset's edges are split (:class:`~lightgraph.data.datasets.link_split.
    LinkTrainingGraph`: its official split, else a random one) when the store is built
    (``prepare_data``, in memory), the partition store holds the *training* graph (so no
    validation or test edge is ever on disk for training), and the split is saved next to
    it (``link_split.pt``, under the store's manifest): training reads only the store and
    the split's metadata, never the whole dataset, so it runs inside a memory limit far
    below the graph's size (docs/link_prediction.md, "Out of core"). Every epoch trains the
    edges of its ``edge_schedule`` with negatives among each macro-batch's resident nodes
    (:class:`~lightgraph.data.loader.link_macro_batch.LinkMacroBatchLoader`: the schedules,
    their reads and the negatives' bias are stated there). Validation ranks the held-out
    edges over the store's training graph; test over the training and validation edges,
    whose CSC is built in memory.

    Args:
        dataset: the graph.
        num_parts, parts_per_batch, fanouts, batch_size, reuse, adaptive_reuse, prefetch,
            partitioner, hub_fraction, hub_walk_length, cache_dir, seed, memory_budget: as
            for :class:`~lightgraph.data.MacroBatchDataModule` (``batch_size`` counts
            positive edges per rank).
        num_negatives: negatives per positive, uniform among the resident nodes.
        edge_schedule: ``"pairs"`` (every training edge once per epoch, the store read
            ``g - 1`` times for ``g`` groups of ``parts_per_batch // 2`` partitions) or
            ``"disjoint"`` (each partition read once; an epoch covers part of the edges).
        val_ratio, test_ratio, undirected, remove_reverse: the random split.
        eval_negatives: uniform negative destinations per validation/test query.
        embedding_channels: the encoder's output size (linked into the model by the CLI).

    Data-parallel ranks each read every macro-batch and train disjoint slices of one
    process's global mini-batches (see the loader).
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_parts: int = 64,
        parts_per_batch: int = 8,
        fanouts: Sequence[int] = (15, 10),
        batch_size: int = 1024,
        num_negatives: int = 1,
        edge_schedule: EdgeSchedule = "pairs",
        reuse: int = 1,
        adaptive_reuse: bool = False,
        prefetch: bool = True,
        partitioner: PartitionMethod = "gap",
        hub_fraction: float = 0.01,
        hub_walk_length: int = 3,
        val_ratio: float = 0.05,
        test_ratio: float = 0.1,
        undirected: bool | None = None,
        remove_reverse: bool = True,
        eval_negatives: int = 100,
        embedding_channels: int = 64,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        memory_budget: int | None = None,
    ) -> None:
        owner = "LinkMacroBatchDataModule"
        self.link_graph = LinkTrainingGraph(
            dataset, val_ratio, test_ratio, undirected, remove_reverse, seed
        )
        super().__init__(
            self.link_graph,
            num_parts=num_parts,
            parts_per_batch=parts_per_batch,
            fanouts=fanouts,
            batch_size=batch_size,
            reuse=reuse,
            adaptive_reuse=adaptive_reuse,
            prefetch=prefetch,
            partitioner=partitioner,
            hub_fraction=hub_fraction,
            hub_walk_length=hub_walk_length,
            cache_dir=cache_dir,
            seed=seed,
            memory_budget=memory_budget,
        )
        self.num_negatives = check_num_negatives(owner, num_negatives)
        self.edge_schedule = check_choice(owner, "edge_schedule", edge_schedule, EDGE_SCHEDULES)
        self.eval_negatives = check_int(owner, "eval_negatives", eval_negatives, low=1)
        self.embedding_channels = check_int(owner, "embedding_channels", embedding_channels, low=1)
        self._test_csc: tuple[Tensor, Tensor] | None = None
        self._split: LinkSplit | None = None
        self._cache: CacheReader | None = None

    # ------------------------------------------------------------------ the cache
    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "link_split_format": 2}

    def build(self, writer: CacheWriter) -> Mapping[str, Any]:
        """The store of the training graph, plus the split (``link_split.pt``): training and
        evaluation later read the split from here, never the whole dataset again."""
        meta = dict(super().build(writer))
        split = self.link_graph.split()
        writer.save(SPLIT_FILE, split.state_dict())
        meta["link_split"] = {
            "undirected": split.undirected,
            **{name: int(getattr(split, name).size(1)) for name in ("train", "val", "test")},
        }
        return meta

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        super().load(cache, rank, world_size)
        self._cache = cache

    def _split_meta(self) -> dict[str, Any]:
        if self._cache is None:
            raise RuntimeError(
                "LinkMacroBatchDataModule: the store is not open yet; call `setup()` (the "
                "Trainer does) before asking for data."
            )
        return self._cache.meta["link_split"]

    def undirected_split(self) -> bool:
        """Whether the split's positives are unordered pairs (from the store's metadata)."""
        return bool(self._split_meta()["undirected"])

    def link_split(self) -> LinkSplit:
        """The split, read from the store's ``link_split.pt`` (memory-mapped) once."""
        if self._split is None:
            self._split_meta()  # the store is open
            assert self._cache is not None
            state = self._cache.load(SPLIT_FILE, mmap=True)
            state["check_disjoint"] = False  # checked when the split was made
            self._split = LinkSplit(**state)
        return self._split

    @property
    def num_outputs(self) -> int:
        """The encoder's output size (``embedding_channels``)."""
        return self.embedding_channels

    def train_loader(self) -> LinkMacroBatchLoader:  # type: ignore[override]
        """The (single, stateful) training loader of this rank's :attr:`data_shard`."""
        rank, world_size = self.data_shard
        loader = self._train_loader
        if loader is None or (loader.rank, loader.world_size) != (rank, world_size):
            self._train_loader = LinkMacroBatchLoader(
                self._store(),
                self.parts_per_batch,
                self.fanouts,
                self.batch_size,
                num_negatives=self.num_negatives,
                undirected=self.undirected_split(),
                edge_schedule=self.edge_schedule,
                reuse=self.reuse,
                adaptive_reuse=self.adaptive_reuse,
                prefetch=self.prefetch,
                seed=self.seed,
                rank=rank,
                world_size=world_size,
            )
        return self._train_loader  # type: ignore[return-value]

    def _store_ids(self) -> Tensor:
        """Original id -> store id."""
        node_ids = self._store().node_ids.long()
        out = torch.empty_like(node_ids)
        out[node_ids] = torch.arange(node_ids.numel())
        return out

    def eval_batch(self, split_name: str) -> LinkEvalBatch:
        """The evaluation batch of ``"val"`` or ``"test"``, in store ids."""
        split = self.link_split()
        to_store = self._store_ids()
        indptr, indices, x, _ = self.graph_arrays()
        if split_name == "test":  # training and validation edges: built in memory, once
            if self._test_csc is None:
                edges = to_store[split.message_edges("test")]
                self._test_csc = to_csc(edges, int(to_store.numel()))
            indptr, indices = self._test_csc
        pos = to_store[split.positives(split_name)]
        return LinkEvalBatch(
            split_name, indptr, indices, x, pos[0], pos[1],
            num_negatives=self.eval_negatives, seed=self.seed,
        )  # fmt: skip

    def loader(self, split: str) -> Iterable[Any]:
        if split == "train":
            return self.train_loader()
        return FixedBatchLoader([self.eval_batch("test" if split == "predict" else split)])
