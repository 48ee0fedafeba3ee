"""One-stage neighbour sampling over the whole graph from the partition store: NS-Mem
(the graph copied into memory) and NS-Ext (sampled from the memory-mapped files)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, get_args

from torch import Tensor

from lightgraph.data.datasets.graph_dataset import (
    GraphDataset,
)
from lightgraph.data.lightning.partition_store_data_module import EvalMode, PartitionStoreDataModule
from lightgraph.data.loader.minibatch import NeighborSamplingLoader
from lightgraph.data.store.page_counter import PageCounter
from lightgraph.utilities.checks import (
    check_choice,
    check_fanouts,
    check_int,
)

StorageMode = Literal["memory", "mmap"]
STORAGE_MODES: tuple[str, ...] = get_args(StorageMode)


class NeighborSamplingDataModule(PartitionStoreDataModule):
    """One-stage neighbour sampling over the whole graph: NS-Mem and NS-Ext.

    The graph is written once to the same on-disk store as the other modules (one
    partition, original node order, no hubs). ``storage="memory"`` then reads it whole
    into memory (in-memory training, the accuracy and speed reference);
    ``storage="mmap"`` samples straight from the memory-mapped files, so every feature
    row and neighbour list is a page access served by the page cache or the disk.

    A dataset on disk (:meth:`~lightgraph.data.GraphDataset.on_disk`) is written to the
    store in chunks of ``memory_budget`` without being loaded; NS-Ext then samples from
    the store's on-disk CSC and features, and NS-Mem's in-memory copy is a copy of the
    store's files (the graph's size, which in-memory training needs anyway), never of
    ``dataset.load()``.

    Args:
        dataset, eval_mode, eval_fanouts, eval_batch_size, cache_dir, seed, memory_budget:
            see :class:`PartitionStoreDataModule`.
        fanouts: neighbours per hop (thesis default 15, 10, 5).
        batch_size: training nodes per mini-batch (per rank under data parallelism).
        storage: ``"memory"`` or ``"mmap"``.

    With ``N`` data-parallel ranks every epoch's shuffled training nodes are dealt out
    like one process's global batches of ``N * batch_size``: rank ``r`` trains the
    ``r``-th ``batch_size`` slice of each (:func:`~lightgraph.data.loader.data_parallel.
    shard_targets`; at most ``N - 1`` nodes left out per epoch).
    """

    def __init__(
        self,
        dataset: GraphDataset,
        fanouts: Sequence[int] = (15, 10, 5),
        batch_size: int = 1000,
        storage: StorageMode = "memory",
        eval_mode: EvalMode = "layerwise",
        eval_fanouts: Sequence[int] = (20, 20, 20),
        eval_batch_size: int = 4096,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        memory_budget: int | None = None,
    ) -> None:
        super().__init__(
            dataset,
            num_parts=1,
            partitioner="random",
            hub_fraction=0.0,
            eval_mode=eval_mode,
            eval_fanouts=eval_fanouts,
            eval_batch_size=eval_batch_size,
            cache_dir=cache_dir,
            seed=seed,
            memory_budget=memory_budget,
        )
        owner = "NeighborSamplingDataModule"
        self.fanouts = check_fanouts(owner, list(fanouts))
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        self.storage = check_choice(owner, "storage", storage, STORAGE_MODES)
        self._train_loader: NeighborSamplingLoader | None = None
        self.pages = PageCounter()

    def graph_arrays(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The store's files: copied into memory once for ``storage="memory"`` (NS-Mem,
        :meth:`in_memory_graph`), memory-mapped for ``storage="mmap"`` (NS-Ext)."""
        if self.storage == "memory":
            return self.in_memory_graph()
        return super().graph_arrays()

    def train_loader(self) -> NeighborSamplingLoader:
        """The (single, stateful) training loader of this rank's :attr:`data_shard`."""
        rank, world_size = self.data_shard
        loader = self._train_loader
        if loader is None or (loader.rank, loader.world_size) != (rank, world_size):
            indptr, indices, x, y = self.graph_arrays()
            self.pages.configure(x, indptr, indices, enabled=self.storage == "mmap")
            self._train_loader = NeighborSamplingLoader(
                indptr,
                indices,
                x,
                y,
                self.split_nodes("train"),
                self.fanouts,
                self.batch_size,
                shuffle=True,
                seed=self.seed,
                node_ids=self._store().node_ids,
                on_batch=self.pages.count,
                memory_mapped=self.memory_mapped(x),
                rank=rank,
                world_size=world_size,
            )
        return self._train_loader

    def loader(self, split: str) -> Iterable[Any]:
        if split == "train":
            return self.train_loader()
        return self._eval_loader("test" if split == "predict" else split)

    def io_stats(self) -> dict[str, float]:
        stats = super().io_stats()
        stats.update(self.pages.as_dict())
        if self._train_loader is not None:
            stats.update(self._train_loader.stats_dict())
        return stats

    def start_io_epoch(self) -> None:
        super().start_io_epoch()
        self.pages.reset_epoch()
