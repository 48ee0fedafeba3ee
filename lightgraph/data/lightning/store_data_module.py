"""Data modules over an on-disk partition store: HANOI's macro-batches and the NS baselines.

:class:`PartitionStoreDataModule` builds the store once (``prepare_data``: partition the
graph, pick hub nodes, write the store through the :class:`~lightgraph.data.
CachedDataModule` cache, so it is fingerprinted, atomic and checked) and opens it on every
rank (``setup``). Its subclasses only differ in how they sample:

* :class:`MacroBatchDataModule` -- HANOI (and, with random partitions and no hubs, a
  MariusGNN-like partition buffer): two-stage sampling from the store, see
  :mod:`lightgraph.data.loader.macro_batch`;
* :class:`NeighborSamplingDataModule` -- one-stage neighbour sampling over the whole graph,
  held in memory (``storage="memory"``: NS-Mem) or memory-mapped from the store
  (``storage="mmap"``: NS-Ext, the operating system's page cache is the only cache).

Under a data-parallel strategy (``ddp``, ``ddp_spawn``, ``ddp_fork``, ... with
``devices=N``) the training loader of each rank trains its own share of every epoch (the
rank and world size come from the Trainer's strategy, :attr:`PartitionStoreDataModule.
shard`): one-stage sampling splits the epoch's targets, HANOI the epoch's partitions;
every rank takes the same number of steps.

The store is built from the dataset's arrays on disk when it has them
(:meth:`~lightgraph.data.GraphDataset.on_disk`, e.g. :class:`~lightgraph.data.NpyGraph`):
validation, partitioning, hub selection (over a CSC built on disk) and the store's files
then stream the arrays in chunks sized by ``memory_budget`` and the whole graph is never
loaded; otherwise from :meth:`~lightgraph.data.GraphDataset.load`. Both give the same
store, byte for byte.

Evaluation (``eval_mode``) is either exact layer-wise inference over the whole graph (a
:class:`~lightgraph.data.batch.FullGraphBatch`) or neighbour sampling with
``eval_fanouts`` (NS(20, 20, 20) by default).

HANOI is ch. 4 of T. Huang's PhD thesis (*Efficient Systems for Large-Scale Graph
Representation Learning*, MIT 2025); "the thesis" below means that one.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.batch import FullGraphBatch, SingleBatchLoader
from lightgraph.data.contract import DataContract
from lightgraph.data.datasets.graph_dataset import (
    DatasetSizes,
    GraphDataset,
    ensure_edge_index,
    validate_graph,
)
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.loader.macro_batch import (
    RANK_SHARES,
    MacroBatchLoader,
    RankShare,
    check_parts_per_batch,
    check_reuse,
)
from lightgraph.data.loader.minibatch import NeighborSamplingLoader
from lightgraph.data.partition.hubs import select_hubs, select_hubs_on_disk
from lightgraph.data.partition.out_of_core import on_disk_csc, validate_on_disk_graph
from lightgraph.data.partition.partitioner import (
    PARTITION_METHODS,
    PartitionMethod,
    partition_graph,
    partition_on_disk,
)
from lightgraph.data.store.cache import CacheReader, CacheWriter, fingerprint_digest
from lightgraph.data.store.partition_store import PartitionStore, write_partition_store
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_fanouts,
    check_fraction,
    check_int,
    check_type,
)
from lightgraph.utilities.memory import (
    cgroup_memory_limit,
    check_memory_budget,
    resident_memory,
    tensor_bytes,
)

EvalMode = Literal["layerwise", "sampled"]
EVAL_MODES: tuple[str, ...] = get_args(EvalMode)
StorageMode = Literal["memory", "mmap"]
STORAGE_MODES: tuple[str, ...] = get_args(StorageMode)
_STORE_FORMAT = 1


class PartitionStoreDataModule(DatasetSizes, CachedDataModule):
    """Base of the data modules that train from a :class:`~lightgraph.data.PartitionStore`.

    The store is built by ``prepare_data``, which Lightning runs on local rank 0 of every
    node (``prepare_data_per_node=True``, its default) before the other ranks of the node
    run ``setup``: each node builds it once, in ``cache_dir``. On a file system all nodes
    share, build it once for the whole job by setting ``prepare_data_per_node = False`` on
    the data module (then only global rank 0 builds it); a rank that finds no finished
    store in ``setup`` builds one itself (concurrent builders cannot corrupt the store,
    the first to finish wins), so a node-local ``cache_dir`` needs the default. A store
    built ahead with :func:`build_store` is reused. Every rank then opens the store
    read-only (files opened read-only, memory maps copy-on-write): training never writes
    to it.

    Args:
        dataset: the graph (any :class:`~lightgraph.data.GraphDataset`).
        num_parts: partitions of the store (``k``).
        partitioner: ``"gap"`` (label-balanced streaming, HANOI), ``"metis"`` or ``"random"``.
        hub_fraction: fraction of nodes pinned in memory as hubs (0 = none).
        hub_walk_length: steps of the lazy random walk that scores hubs.
        eval_mode: ``"layerwise"`` (exact inference over the whole store) or
            ``"sampled"`` (neighbour sampling with ``eval_fanouts``).
        eval_fanouts: neighbours per hop of sampled evaluation.
        eval_batch_size: seeds per sampled evaluation batch.
        cache_dir: where the store is written (``<cache_dir>/PartitionStore-<digest>``).
        seed: seed of the partitioner and of every sampling draw.
        memory_budget: bytes the chunks of the build may hold (``None``:
            :func:`~lightgraph.utilities.memory.default_memory_budget`, half the cgroup
            memory limit, else a quarter of the physical memory). With a dataset on disk
            every pass (validation, the CSC, GAP, hub scores, the store's buckets and
            partition-major rows) reads chunks sized by it, besides per-node arrays
            (``O(N)``); from a graph in memory it sizes the writer's chunks. It changes
            how the store is written, never what it holds: it is not part of the store's
            fingerprint, and ``meta.json`` records it (with the chunk size) next to the
            build's timings. ``partitioner="metis"`` holds the graph in memory whatever
            the budget (METIS partitions an in-memory adjacency).

    The store is built from :meth:`~lightgraph.data.GraphDataset.on_disk` when the
    dataset has its arrays on disk (never calling :meth:`~lightgraph.data.GraphDataset.
    load`), else from ``load()``; the two give the same store, byte for byte (``meta.json``
    aside, whose timings differ).
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_parts: int = 64,
        partitioner: PartitionMethod = "gap",
        hub_fraction: float = 0.01,
        hub_walk_length: int = 3,
        eval_mode: EvalMode = "layerwise",
        eval_fanouts: Sequence[int] = (20, 20, 20),
        eval_batch_size: int = 4096,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        memory_budget: int | None = None,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        owner = type(self).__name__
        self.dataset = check_type(owner, "dataset", dataset, GraphDataset)
        self.num_parts = check_int(owner, "num_parts", num_parts, low=1)
        self.partitioner = check_choice(owner, "partitioner", partitioner, PARTITION_METHODS)
        self.hub_fraction = check_fraction(owner, "hub_fraction", hub_fraction)
        self.hub_walk_length = check_int(owner, "hub_walk_length", hub_walk_length, low=1)
        self.eval_mode = check_choice(owner, "eval_mode", eval_mode, EVAL_MODES)
        self.eval_fanouts = check_fanouts(owner, list(eval_fanouts), "eval_fanouts")
        self.eval_batch_size = check_int(owner, "eval_batch_size", eval_batch_size, low=1)
        self.seed = check_int(owner, "seed", seed, low=0)
        self.memory_budget = check_memory_budget(owner, memory_budget)
        self.store: PartitionStore | None = None
        #: Bytes of training batches handed to the compute device (cumulative).
        self.h2d_bytes = 0.0
        self._in_memory: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        self._in_memory_lock = threading.Lock()

    # --------------------------------------------------------------------- the cache
    def fingerprint(self) -> dict[str, Any]:
        # Not the memory budget: the store is the same whatever it is.
        return {
            "format": _STORE_FORMAT,
            "hubs": "non-training",
            "dataset": self.dataset.fingerprint(),
            "num_parts": self.num_parts,
            "partitioner": self.partitioner,
            "hub_fraction": self.hub_fraction,
            "hub_walk_length": self.hub_walk_length,
            "seed": self.seed,
        }

    def cache_name(self) -> str:
        return "PartitionStore"

    def build(self, writer: CacheWriter) -> Mapping[str, Any]:
        graph = self.dataset.on_disk()
        if graph is not None:
            return self._build_on_disk(writer, graph)
        tic = time.perf_counter()
        data = ensure_edge_index(self.dataset.load())
        validate_graph(data, self.dataset.num_classes, self.dataset.multilabel)
        loaded = time.perf_counter()
        part = partition_graph(
            data.edge_index,
            data.num_nodes,
            self.num_parts,
            method=self.partitioner,
            seed=self.seed,
            y=data.y,
            train_mask=data.train_mask,
        )
        partitioned = time.perf_counter()
        if self.hub_fraction > 0:
            hubs = select_hubs(
                data.edge_index,
                data.num_nodes,
                data.train_mask,
                fraction=self.hub_fraction,
                walk_length=self.hub_walk_length,
                exclude=data.train_mask,  # hubs are never targets: keep every target
            )
        else:
            hubs = torch.empty(0, dtype=torch.long)
        hubbed = time.perf_counter()
        seconds = {"load": loaded - tic, "partition": partitioned - loaded}
        return self._write_store(writer, data, part, hubs, seconds, partitioned, hubbed)

    def _write_store(
        self,
        writer: CacheWriter,
        graph: Data | OnDiskGraph,
        part: Tensor,
        hubs: Tensor,
        seconds: dict[str, float],
        partitioned: float,
        hubbed: float,
    ) -> dict[str, Any]:
        """Write the store; ``meta.json`` gets ``seconds`` plus the hubs and write times."""
        meta = dict(
            write_partition_store(
                writer,
                graph,
                part,
                hubs,
                fingerprint=self.store_fingerprint(),
                memory_budget=self.memory_budget,
            )
        )
        meta["build_seconds"] = {
            **seconds,
            "hubs": hubbed - partitioned,
            "write": time.perf_counter() - hubbed,
        }
        return meta

    def _build_on_disk(self, writer: CacheWriter, graph: OnDiskGraph) -> dict[str, Any]:
        """The store from the dataset's arrays on disk, in chunks of ``memory_budget``: the
        same files as from ``load()``. Work files (the CSC the hub scores read, the
        partitioner's) live in a directory next to the store's staging directory, removed
        at the end."""
        tic = time.perf_counter()
        validate_on_disk_graph(
            graph, self.dataset.num_classes, self.dataset.multilabel, self.memory_budget
        )
        validated = time.perf_counter()
        parent = os.path.dirname(os.path.abspath(writer.directory))
        with tempfile.TemporaryDirectory(prefix=".prepare-", dir=parent) as workdir:
            part = self._partition_on_disk(graph, workdir)
            partitioned = time.perf_counter()
            if self.hub_fraction > 0:
                hubs = self._hubs_on_disk(graph, workdir)
            else:
                hubs = torch.empty(0, dtype=torch.long)
            hubbed = time.perf_counter()
        seconds = {"validate": validated - tic, "partition": partitioned - validated}
        return self._write_store(writer, graph, part, hubs, seconds, partitioned, hubbed)

    def _partition_on_disk(self, graph: OnDiskGraph, workdir: str) -> Tensor:
        # METIS partitions an adjacency in memory and takes no budget.
        budget = None if self.partitioner == "metis" else self.memory_budget
        part = partition_on_disk(
            graph,
            self.num_parts,
            self.partitioner,
            seed=self.seed,
            memory_budget=budget,
            workdir=workdir,
        )
        return torch.from_numpy(np.asarray(part, dtype=np.int64))

    def _hubs_on_disk(self, graph: OnDiskGraph, workdir: str) -> Tensor:
        train_mask = np.asarray(graph.train_mask)
        indptr, indices = on_disk_csc(
            graph.edge_index, graph.num_nodes, workdir, self.memory_budget
        )
        hubs = select_hubs_on_disk(
            indptr,
            indices,
            graph.num_nodes,
            train_mask,
            self.hub_fraction,
            self.hub_walk_length,
            exclude=train_mask,  # hubs are never targets: keep every target
            memory_budget=self.memory_budget,
        )
        del indptr, indices  # the memory maps, before their files are removed
        return torch.from_numpy(np.asarray(hubs, dtype=np.int64))

    def store_fingerprint(self) -> str:
        """The fingerprint written into (and checked against) the store's manifest."""
        return fingerprint_digest(self.fingerprint())

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        self.store = PartitionStore(cache, fingerprint=self.store_fingerprint())

    def is_loaded(self) -> bool:
        return self.store is not None

    # ------------------------------------------------------------------ shared pieces
    def _store(self) -> PartitionStore:
        if self.store is None:
            raise RuntimeError(
                f"{type(self).__name__}: the store is not open yet; call `setup()` (the Trainer "
                f"does) before asking for data."
            )
        return self.store

    def split_nodes(self, split: str, exclude_hubs: bool = False) -> Tensor:
        """Store ids of the nodes of ``split`` (``"train"``, ``"val"``, ``"test"``)."""
        store = self._store()
        mask = store.mask(split).clone()
        if exclude_hubs and store.hubs.numel():
            mask[store.hub_store_ids.long()] = False
        return mask.nonzero().view(-1)

    def graph_arrays(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The whole graph as ``(indptr, indices, x, y)``: the store's memory-mapped files."""
        store = self._store()
        indptr, indices = store.csc()
        return indptr, indices, store.features(), store.labels()

    def memory_mapped(self, x: Tensor) -> bool:
        """Whether ``x`` is the store's memory-mapped feature file itself (not a copy in
        memory): its rows are then gathered in ascending order."""
        return x.data_ptr() == self._store().features().data_ptr()

    def in_memory_graph(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The store's whole graph (:meth:`graph_arrays` of the store) copied into memory, once.

        Background threads (a sampler, a prefetcher) and the main thread (warm fill,
        validation) may all ask first: the copy is made under a lock, once, and every
        caller gets the same tensors.
        """
        graph = self._in_memory
        if graph is None:
            with self._in_memory_lock:
                if self._in_memory is None:
                    indptr, indices, x, y = PartitionStoreDataModule.graph_arrays(self)
                    self._in_memory = (indptr.clone(), indices.clone(), x.clone(), y.clone())
                graph = self._in_memory
        return graph

    def data_contract(self) -> DataContract:
        """Exact layer-wise evaluation over :meth:`full_graph` (or sampled, per ``eval_mode``)."""
        return DataContract(eval_mode=self.eval_mode, full_graph=self.full_graph)

    def full_graph(self) -> FullGraphBatch:
        """The whole graph (:meth:`graph_arrays`) for exact layer-wise evaluation."""
        store = self._store()
        masks = {split: store.mask(split) for split in ("train", "val", "test")}
        return FullGraphBatch(*self.graph_arrays(), masks, store.node_ids)

    def _eval_loader(self, split: str) -> Iterable[Any]:
        """Layer-wise: the whole graph on every rank (the model splits the work). Sampled:
        under data parallelism each rank evaluates a contiguous share of the split's nodes
        (sizes differ by at most one, none dropped: every node is evaluated exactly once;
        unequal batch counts are fine, evaluation steps do not synchronise)."""
        if self.eval_mode == "layerwise":
            return SingleBatchLoader(self.full_graph())
        arrays = self.graph_arrays()
        nodes = self.split_nodes(split)
        rank, world_size = self.data_shard
        if world_size > 1:
            if nodes.numel() < world_size:
                raise ValueError(
                    f"{type(self).__name__}: sampled evaluation gives every data-parallel rank "
                    f"a share of the {split!r} nodes, but there are {nodes.numel()} for "
                    f"{world_size} ranks; use eval_mode='layerwise' or fewer devices."
                )
            nodes = torch.tensor_split(nodes, world_size)[rank]
        return NeighborSamplingLoader(
            *arrays,
            nodes,
            self.eval_fanouts,
            self.eval_batch_size,
            shuffle=False,
            seed=self.seed,
            node_ids=self._store().node_ids,
            memory_mapped=self.memory_mapped(arrays[2]),
        )

    def io_stats(self) -> dict[str, float]:
        """Cumulative I/O counters: the store's reads (bytes, calls, 4 KiB pages), the bytes
        of training batches handed to the compute device (``h2d_bytes``) and the sampling
        counters (``targets``, ``nodes_loaded``, ...) of the training loader."""
        if self.store is None:
            return {}
        stats = dict(self.store.io_stats.as_dict())
        stats["h2d_bytes"] = self.h2d_bytes
        return stats

    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        # Count what a training step hands to the device: every tensor of a sampled batch.
        trainer = self.trainer
        if isinstance(batch, Data) and trainer is not None and trainer.training:
            self.h2d_bytes += float(tensor_bytes(*(v for _, v in batch if isinstance(v, Tensor))))
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def start_io_epoch(self) -> None:
        """Start counting distinct pages afresh (pages are counted once per epoch)."""
        if self.store is not None:
            self.store.io_stats.start_epoch()


class MacroBatchDataModule(PartitionStoreDataModule):
    """HANOI's out-of-core training: macro-batches of partitions + hubs read from disk.

    Each epoch shuffles the partitions of the store and trains on macro-batches of
    ``parts_per_batch`` of them plus the hub nodes, read in the background while the
    previous one trains, each reused up to ``reuse`` times; mini-batches of
    ``batch_size`` training nodes are neighbour-sampled with ``fanouts`` *inside* the
    macro-batch (never the full graph). With ``partitioner="random"`` and
    ``hub_fraction=0`` this is a MariusGNN-like partition buffer.

    Args:
        dataset, num_parts, partitioner, hub_fraction, hub_walk_length, eval_mode,
        eval_fanouts, eval_batch_size, cache_dir, seed, memory_budget: see
            :class:`PartitionStoreDataModule`.
        parts_per_batch: partitions per macro-batch (``b``; the memory budget is about
            ``b / num_parts`` of the graph plus the hubs, twice with double buffering;
            with ``N`` data-parallel ranks, of the ranks together).
        fanouts: stage-2 neighbours per hop (thesis default 15, 10, 5).
        batch_size: training nodes per mini-batch (thesis default 1000).
        reuse: passes over each macro-batch, in [1, 4] (the most passes with
            ``adaptive_reuse``).
        adaptive_reuse: reuse a macro-batch only while the next one is still being read
            (one process only: with several data-parallel ranks the ranks would take
            different numbers of steps; use a fixed ``reuse`` there).
        prefetch: read the next macro-batch in a background thread.
        rank_share: what ``N`` data-parallel ranks divide in every macro-batch,
            ``"partitions"`` (default) or ``"targets"`` (below).

    With ``N`` data-parallel ranks the epoch's macro-batches are one process's, and every
    rank takes the steps one process with the global batch ``N * batch_size`` takes:

    * ``rank_share="partitions"``: each macro-batch (of ``max(parts_per_batch, N)``
      partitions) is split among the ranks by training targets; every rank reads, reuses
      and trains only its share (about ``parts_per_batch / N`` partitions, so the ranks of
      one machine hold together what one process holds). No target is left out
      (:func:`~lightgraph.data.loader.macro_batch.shard_macro_batches`). A rank samples inside its
      share only: the edges between two ranks' shares are lost to training (the cost in
      test accuracy is measured in docs/benchmarks.md, "Data-parallel sampled training").
    * ``rank_share="targets"``: every rank reads the whole macro-batch and trains its
      slice of each of one process's global mini-batches, so the ranks sample as one
      process does, at ``N`` times one process's reads and macro-batch memory per machine.
      At most ``N - 1`` targets per global step wait for the next epoch.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_parts: int = 64,
        parts_per_batch: int = 8,
        fanouts: Sequence[int] = (15, 10, 5),
        batch_size: int = 1000,
        reuse: int = 1,
        adaptive_reuse: bool = False,
        prefetch: bool = True,
        partitioner: PartitionMethod = "gap",
        hub_fraction: float = 0.01,
        hub_walk_length: int = 3,
        eval_mode: EvalMode = "layerwise",
        eval_fanouts: Sequence[int] = (20, 20, 20),
        eval_batch_size: int = 4096,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        memory_budget: int | None = None,
        rank_share: RankShare = "partitions",
    ) -> None:
        super().__init__(
            dataset,
            num_parts=num_parts,
            partitioner=partitioner,
            hub_fraction=hub_fraction,
            hub_walk_length=hub_walk_length,
            eval_mode=eval_mode,
            eval_fanouts=eval_fanouts,
            eval_batch_size=eval_batch_size,
            cache_dir=cache_dir,
            seed=seed,
            memory_budget=memory_budget,
        )
        owner = "MacroBatchDataModule"
        self.parts_per_batch = check_parts_per_batch(owner, parts_per_batch, self.num_parts)
        self.fanouts = check_fanouts(owner, list(fanouts))
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        self.reuse = check_reuse(owner, reuse)
        self.adaptive_reuse = check_bool(owner, "adaptive_reuse", adaptive_reuse)
        self.prefetch = check_bool(owner, "prefetch", prefetch)
        self.rank_share = check_choice(owner, "rank_share", rank_share, RANK_SHARES)
        self._train_loader: MacroBatchLoader | None = None

    def training_memory(self) -> dict[str, int]:
        """Bytes training holds in memory at most, an estimate from the store's counts:

        * ``store``: what the open store keeps, mostly the hubs' features
          (:meth:`~lightgraph.data.PartitionStore.resident_bytes`);
        * ``macro_batch``: one macro-batch of the ``parts_per_batch`` largest partitions
          while it is read and trained (:meth:`~lightgraph.data.PartitionStore.
          macro_batch_memory`; every hub outside them is copied in);
        * ``macro_batches``: that, twice with ``prefetch`` (one trains while the next is
          read);
        * ``mini_batch``: float32 features of a mini-batch's sampled nodes, at most the
          macro-batch's nodes or ``batch_size * prod(1 + fanout)``;
        * ``total``: ``store + macro_batches + mini_batch``. The interpreter and the
          libraries come on top (about 0.35 GiB for torch, Lightning and PyG), as do the
          model, its activations and the optimiser.

        ``setup("fit")`` warns when ``total`` exceeds what a memory limit of the process
        (cgroup) leaves. Fewer hubs (``hub_fraction``), fewer partitions per macro-batch
        or more partitions shrink it.
        """
        store = self._store()
        sizes = store.part_sizes
        largest = torch.argsort(sizes, descending=True)[: self.parts_per_batch]
        parts = sorted(int(p) for p in largest)
        macro = int(store.macro_batch_memory(parts))
        nodes = int(sizes[largest].sum()) + int(store.num_hubs)
        sampled = self.batch_size
        for fanout in self.fanouts:
            sampled = nodes if fanout < 0 else sampled * (1 + fanout)
        mini = min(nodes, sampled) * 4 * int(store.num_features)
        buffers = macro * (2 if self.prefetch else 1)
        resident = int(store.resident_bytes())
        return {
            "store": resident,
            "macro_batch": macro,
            "macro_batches": buffers,
            "mini_batch": mini,
            "total": resident + buffers + mini,
        }

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if stage in (None, "fit"):
            self._check_training_memory()

    def _check_training_memory(self) -> None:
        limit = cgroup_memory_limit()
        if limit is None:
            return
        need = self.training_memory()
        left = limit - resident_memory()
        if need["total"] > left:
            gib = 1 << 30
            warnings.warn(
                f"MacroBatchDataModule: training needs about {need['total'] / gib:.2f} GiB "
                f"(hubs and store {need['store'] / gib:.2f}, "
                f"{'two macro-batches' if self.prefetch else 'one macro-batch'} "
                f"{need['macro_batches'] / gib:.2f}, a mini-batch's features "
                f"{need['mini_batch'] / gib:.2f}) but the memory limit of "
                f"{limit / gib:.2f} GiB leaves {max(left, 0) / gib:.2f} GiB beside this "
                f"process; lower `hub_fraction` (now {self.hub_fraction}) or "
                f"`parts_per_batch` (now {self.parts_per_batch}), or raise `num_parts` "
                f"(now {self.num_parts}).",
                stacklevel=2,
            )

    def train_loader(self) -> MacroBatchLoader:
        """The (single, stateful) training loader of this rank's :attr:`data_shard`."""
        rank, world_size = self.data_shard
        loader = self._train_loader
        if loader is None or (loader.rank, loader.world_size) != (rank, world_size):
            self._train_loader = MacroBatchLoader(
                self._store(),
                self.parts_per_batch,
                self.fanouts,
                self.batch_size,
                reuse=self.reuse,
                adaptive_reuse=self.adaptive_reuse,
                prefetch=self.prefetch,
                seed=self.seed,
                rank=rank,
                world_size=world_size,
                rank_share=self.rank_share,
            )
        return self._train_loader

    def loader(self, split: str) -> Iterable[Any]:
        if split == "train":
            return self.train_loader()
        return self._eval_loader("test" if split == "predict" else split)

    def train_dataloader(self) -> MacroBatchLoader:
        """The training loader, for Lightning: its position advances when
        :meth:`transfer_batch_to_device` hands a batch to the model, not when Lightning
        fetches it (one batch ahead of training: the loader has no length, since its steps
        per epoch follow the epoch's partition draw). Without a Trainer (iterating it by
        hand) a batch counts as trained when it is yielded."""
        loader = super().train_dataloader()
        loader.handover = "reported" if self.trainer is not None else "on-yield"
        return loader

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # A training batch reaches the model: the loader's position moves past it.
        trainer, loader = self.trainer, self._train_loader
        if trainer is not None and trainer.training and loader is not None:
            loader.hand_over()  # a no-op unless handover="reported" (nothing is pending)
        return batch

    def io_stats(self) -> dict[str, float]:
        stats = super().io_stats()
        if self._train_loader is not None:
            stats.update(self._train_loader.stats_dict())
        return stats

    def teardown(self, stage: str) -> None:
        if self._train_loader is not None:
            self._train_loader.close()  # the macro-batch prefetch thread
        super().teardown(stage)


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
        self.pages = _PageCounter()

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


class _PageCounter:
    """Distinct 4 KiB pages of the memory-mapped features and CSC a training epoch touches.

    Only counts what sampling asks for (the feature rows of every sampled node and the
    neighbour lists of every expanded node); what the kernel reads ahead is visible in
    ``/proc/self/io`` instead (:class:`~lightgraph.callbacks.IOMonitor` reports both).
    """

    PAGE = 4096

    def __init__(self) -> None:
        self.enabled = False
        self.bytes_requested = 0.0
        self._seen: dict[str, np.ndarray] = {}

    def configure(self, x: Tensor, indptr: Tensor, indices: Tensor, enabled: bool) -> None:
        self.enabled = enabled
        self._row_bytes = x.size(1) * x.element_size()
        self._index_bytes = indices.element_size()
        self._indptr = indptr
        for name, nbytes in (
            ("features", x.numel() * x.element_size()),
            ("indices", indices.numel() * indices.element_size()),
        ):
            self._seen[name] = np.zeros(nbytes // self.PAGE + 1, dtype=bool)

    def reset_epoch(self) -> None:
        for seen in self._seen.values():
            seen[:] = False

    def _touch(self, name: str, start: np.ndarray, stop: np.ndarray) -> None:
        seen = self._seen[name]
        keep = stop > start
        first = start[keep] // self.PAGE
        last = (stop[keep] - 1) // self.PAGE
        span = int((last - first).max()) + 1 if first.size else 0
        for k in range(span):
            page = first + k
            seen[page[page <= last]] = True
        self.bytes_requested += float((stop[keep] - start[keep]).sum())

    def count(self, batch: Any) -> None:
        if not self.enabled:
            return
        # One partition in original order: store ids are the original ids.
        node = batch.n_id.numpy()
        self._touch("features", node * self._row_bytes, (node + 1) * self._row_bytes)
        ptr = self._indptr.numpy()
        expanded = node[: len(node) - int(batch.num_sampled_nodes[-1])]
        self._touch(
            "indices", ptr[expanded] * self._index_bytes, ptr[expanded + 1] * self._index_bytes
        )

    def as_dict(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        pages = float(sum(int(seen.sum()) for seen in self._seen.values()))
        return {"pages_touched": pages, "bytes_requested": self.bytes_requested}


def build_store(
    dataset: GraphDataset,
    cache_dir: str = "lightgraph_cache",
    num_parts: int = 64,
    partitioner: PartitionMethod = "gap",
    hub_fraction: float = 0.01,
    hub_walk_length: int = 3,
    seed: int = 0,
    memory_budget: int | None = None,
) -> PartitionStore:
    """Build (once) and open the partition store of ``dataset``: one call, no Trainer.

    The store lands in ``<cache_dir>/PartitionStore-<digest>``, exactly where a
    :class:`MacroBatchDataModule` with the same arguments looks for it, so a store built
    here is reused by training. A dataset with its arrays on disk is prepared in chunks
    of ``memory_budget`` (see :class:`PartitionStoreDataModule`), so the store of a graph
    larger than memory is built on the machine that trains from it.
    """
    module = PartitionStoreDataModule(
        dataset,
        num_parts=num_parts,
        partitioner=partitioner,
        hub_fraction=hub_fraction,
        hub_walk_length=hub_walk_length,
        cache_dir=cache_dir,
        seed=seed,
        memory_budget=memory_budget,
    )
    module.prepare_data()
    module.setup("fit")
    assert module.store is not None
    return module.store
