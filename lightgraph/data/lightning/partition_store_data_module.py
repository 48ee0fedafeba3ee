"""The base of the data modules that train from an on-disk partition store.

:class:`PartitionStoreDataModule` builds the store once (``prepare_data``: partition the
graph, pick hub nodes, write the store through the :class:`~lightgraph.data.
CachedDataModule` cache, so it is fingerprinted, atomic and checked) and opens it on every
rank (``setup``). Its subclasses only differ in how they sample:

* :class:`~lightgraph.data.MacroBatchDataModule` -- HANOI (and, with random partitions and
  no hubs, a MariusGNN-like partition buffer), in
  :mod:`lightgraph.data.lightning.macro_batch_data_module`;
* :class:`~lightgraph.data.NeighborSamplingDataModule` -- one-stage neighbour sampling
  over the whole graph (NS-Mem, NS-Ext), in
  :mod:`lightgraph.data.lightning.neighbor_sampling_data_module`;
* :class:`~lightgraph.data.MultistageDataModule` -- JOESTAR's two-stage sampling from the
  graph in memory.

Under a data-parallel strategy (``ddp``, ``ddp_spawn``, ``ddp_fork``, ... with
``devices=N``) the training loader of each rank trains its own share of every epoch (the
rank and world size come from the Trainer's strategy, read once by
:attr:`~lightgraph.data.CachedDataModule.data_shard`).

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.batch import FullGraphBatch
from lightgraph.data.contract import DataContract
from lightgraph.data.datasets.graph_dataset import (
    DatasetSizes,
    GraphDataset,
    ensure_edge_index,
    validate_graph,
)
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
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
from lightgraph.data.store.stages import PrepareStages
from lightgraph.utilities.checks import (
    check_choice,
    check_fanouts,
    check_fraction,
    check_int,
    check_type,
)
from lightgraph.utilities.memory import (
    check_memory_budget,
    tensor_bytes,
)

EvalMode = Literal["layerwise", "sampled"]
EVAL_MODES: tuple[str, ...] = get_args(EvalMode)
_STORE_FORMAT = 1
#: Share of ``memory_budget`` the chunks of an on-disk build's stage get; the rest is
#: headroom for what the stage allocates besides them (the libraries' own buffers and
#: thread pools; measured: at most 2.7 MB above the chunks, whatever the node count).
STAGE_CHUNK_SHARE = 0.75


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
        memory_budget: bytes of anonymous memory each stage of the build may add
            (``None``: :func:`~lightgraph.utilities.memory.default_memory_budget`, half
            the cgroup memory limit, else a quarter of the physical memory; CLI:
            ``lightgraph prepare --memory_budget 1GiB``). With a dataset on disk every
            pass (validation, the CSC, GAP, hub scores, the store's buckets and
            partition-major rows) reads chunks sized by :data:`STAGE_CHUNK_SHARE` of it,
            and the per-node arrays (degrees, offsets, GAP's order and assignment, hub
            scores, store ids) are memory-mapped work files whose pages the kernel
            reclaims under a memory limit, so the bound holds whatever the node and edge
            counts (see docs/datasets.md, "Preparing a graph larger than memory"); from
            a graph in memory it sizes the writer's chunks. It changes
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
        meta = self._write_store(writer, data, part, hubs)
        meta["build_seconds"] = {
            "load": loaded - tic,
            "partition": partitioned - loaded,
            "hubs": hubbed - partitioned,
            "write": time.perf_counter() - hubbed,
        }
        return meta

    def _write_store(
        self,
        writer: CacheWriter,
        graph: Data | OnDiskGraph,
        part: Tensor,
        hubs: Tensor,
        budget: int | None = None,
    ) -> dict[str, Any]:
        """Write the store with chunks of ``budget`` bytes (default: ``memory_budget``);
        returns its ``meta.json`` content (the caller adds the times)."""
        return dict(
            write_partition_store(
                writer,
                graph,
                part,
                hubs,
                fingerprint=self.store_fingerprint(),
                memory_budget=self.memory_budget if budget is None else budget,
            )
        )

    def _build_on_disk(self, writer: CacheWriter, graph: OnDiskGraph) -> dict[str, Any]:
        """The store from the dataset's arrays on disk, in chunks of ``memory_budget``: the
        same files as from ``load()``. Runs as named stages (validate, partition, hubs,
        write; :class:`~lightgraph.data.store.stages.PrepareStages`): each prints its time
        and peak memory, checks its minimum working set against the memory left before
        it starts, and the partition and the hubs are saved next to the cache, so a run
        killed or interrupted later resumes after them. Work files (the CSC the hub
        scores read, the partitioner's) live in a directory next to the store's staging
        directory, removed at the end."""
        parent, base = os.path.split(os.path.abspath(writer.target))
        stages = PrepareStages(
            type(self).__name__,
            os.path.join(parent, f".{base}.stages"),
            key=self.store_fingerprint(),
            option="memory_budget (--data.init_args.memory_budget)",
        )
        budget = self.memory_budget
        chunks = max(1, int(budget * STAGE_CHUNK_SHARE))
        what = "its memory budget: chunks and the per-node windows"
        with stages.stage("validate", budget, what):
            validate_on_disk_graph(graph, self.dataset.num_classes, self.dataset.multilabel, chunks)
        with tempfile.TemporaryDirectory(prefix=".prepare-", dir=parent) as workdir:
            part = stages.cached(
                "partition", lambda: self._partition_on_disk(graph, workdir, chunks), budget, what
            )
            if self.hub_fraction > 0:
                hubs = stages.cached(
                    "hubs", lambda: self._hubs_on_disk(graph, workdir, chunks), budget, what
                )
            else:
                hubs = np.empty(0, np.int64)
        with stages.stage("write", budget, what):
            meta = self._write_store(
                writer, graph, torch.from_numpy(part), torch.from_numpy(hubs), chunks
            )
        meta["memory_budget"] = budget  # the stages' (their chunks took a share of it)
        meta["build_seconds"] = {r.name: r.seconds for r in stages.records}
        meta["build_stages"] = stages.summary()
        stages.finish()
        return meta

    def _partition_on_disk(self, graph: OnDiskGraph, workdir: str, chunks: int) -> np.ndarray:
        # METIS partitions an adjacency in memory and takes no budget.
        budget = None if self.partitioner == "metis" else chunks
        part = partition_on_disk(
            graph,
            self.num_parts,
            self.partitioner,
            seed=self.seed,
            memory_budget=budget,
            workdir=workdir,
        )
        return np.asarray(part, dtype=np.int64)

    def _hubs_on_disk(self, graph: OnDiskGraph, workdir: str, chunks: int) -> np.ndarray:
        train_mask = graph.train_mask  # read in windows
        indptr, indices = on_disk_csc(graph.edge_index, graph.num_nodes, workdir, chunks)
        hubs = select_hubs_on_disk(
            indptr,
            indices,
            graph.num_nodes,
            train_mask,
            self.hub_fraction,
            self.hub_walk_length,
            exclude=train_mask,  # hubs are never targets: keep every target
            memory_budget=chunks,
            workdir=workdir,
        )
        del indptr, indices  # the memory maps, before their files are removed
        return np.asarray(hubs, dtype=np.int64)

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
            return FixedBatchLoader([self.full_graph()])
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
