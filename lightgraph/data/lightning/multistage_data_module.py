"""JOESTAR's data module: multistage sampling (LBS or PBS) over a graph held in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.contract import DataContract, HistoryTable
from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.lightning.partition_store_data_module import EvalMode, PartitionStoreDataModule
from lightgraph.data.loader.batching import even_batches
from lightgraph.data.loader.data_parallel import (
    DataParallelShard,
)
from lightgraph.data.loader.first_stage import (
    EpochPlan,
    FirstStage,
    FirstStageSampler,
    first_stage_sampler,
)
from lightgraph.data.loader.multistage import (
    DeviceMacroBatch,
    DeviceStep,
    MultistageLoader,
    StagedStep,
    StageOneBatch,
    aot_filter,
    stage_two,
)
from lightgraph.utilities.checks import check_bool, check_fanouts, check_int
from lightgraph.utilities.memory import tensor_bytes


class MultistageDataModule(PartitionStoreDataModule):
    """JOESTAR: two-stage neighbour sampling, stage 1 on the host and stage 2 on the device.

    The graph is read into memory once (from the same fingerprinted partition store as the
    other sampled modules, laid out as the first stage asks: one partition in original
    order for LBS -- the NS-Mem store -- and ``num_parts`` GAP partitions for PBS). Each
    epoch is a sequence of macro-batches, built by a background thread one ahead of
    training and never reused. The first stage is a sampler
    (:mod:`lightgraph.data.loader.first_stage`) with its own arguments:

    * :class:`~lightgraph.data.loader.first_stage.LargeBatchSampler` (LBS, JOESTAR-I;
      ``first_stage="lbs"`` is it with its defaults): ``ratio * |train|`` seeds
      neighbour-sampled with ``fanouts``; stage 2 samples mini-batches of ``batch_size`` of
      those seeds (each once) inside the sampled subgraph with ``second_stage_fanouts``
      (all neighbours by default; never below the stage-1 fanout).
    * :class:`~lightgraph.data.loader.first_stage.PartitionBatchSampler` (PBS, JOESTAR-II;
      ``first_stage="pbs"``): ``parts_per_batch`` of the ``num_parts`` GAP partitions plus
      their 1-hop halo; stage 2 samples with ``fanouts`` inside it, halo nodes are leaves
      and, with ``history=True``, their hidden representations come from historical
      embeddings owned by the LightningModule
      (:class:`~lightgraph.models.MiniBatchNodeClassifier`, warm-filled before training,
      saved in checkpoints; see :mod:`lightgraph.nn.history`).

    A macro-batch's ``n`` seeds are trained in ``ceil(n / batch_size)`` mini-batches of
    near-equal size (:func:`~lightgraph.data.loader.batching.even_batches`: 1,250 seeds at
    ``batch_size=1000`` are two steps of 625, not 1,000 and 250): every macro-batch has its
    own remainder, and small tail batches cost measurable accuracy (docs/joestar.md).

    The training loader yields :class:`~lightgraph.data.loader.multistage.StagedStep` objects;
    :meth:`transfer_batch_to_device` moves each macro-batch (and its halo's history rows)
    to the device once, counting the bytes, and :meth:`on_after_batch_transfer` runs
    stage 2 there, so on a GPU second-stage sampling and feature gathering are GPU work.

    **Data parallelism.** Under a data-parallel strategy (``ddp``, ``ddp_spawn``,
    ``ddp_fork``, ... with ``N`` replicas; read from the Trainer's strategy by
    :func:`~lightgraph.data.loader.data_parallel.data_parallel_shard` when the training loader is
    built, or set explicitly with :attr:`data_shard`) every epoch's global plan is drawn from
    rank-free generators (the same on every rank) and each rank builds and trains only its
    share, every rank the same number of steps:

    * LBS: global macro-batch ``k`` (its seeds and their training order) is the one-process
      macro-batch; rank ``r``'s macro-batch ``k`` holds its
      :func:`~lightgraph.data.loader.data_parallel.shard_batches` with ``batch_size``: rank
      ``r``'s mini-batch ``i`` is the ``r``-th of ``N`` equal slices of global mini-batch
      ``i``, the one a single process with batch ``N * batch_size`` trains, so ``N`` ranks
      with batch ``b`` train the global batches of one process with batch ``N * b``. Stage 1
      samples the rank's seeds only. Each global mini-batch's ``len % N`` last seeds (at
      most ``N - 1`` per step) are dropped.
    * PBS: the epoch's shuffled partitions are cut into one process's macro-batches (of
      ``max(parts_per_batch, N)`` partitions) and each macro-batch's partitions are split
      among the ranks by training-node count
      (:func:`~lightgraph.data.loader.macro_batch.shard_macro_batches`, as HANOI does): each rank
      builds only its share, about ``parts_per_batch / N`` partitions. A macro-batch of
      ``n`` training nodes takes ``ceil(n / (N * batch_size))`` steps on every rank, the
      steps one process with the global batch ``N * batch_size`` gives it, each rank
      cutting its share into that many near-equal mini-batches: every global step draws
      from one macro-batch, every rank takes the same number of steps, and no target is
      left out.

    LBS targets no rank trains are counted in ``io_stats()["dropped_targets"]`` (the same
    number on every rank; PBS drops none); the order is reshuffled every epoch, so others
    drop next time.
    The ranks' stage-1 and stage-2 random streams carry the rank in their keys (one process
    keeps its keys: ``N = 1`` is the one-process module, bit for bit). The history tables
    of PBS are replicated on every rank and kept equal by
    :class:`~lightgraph.nn.history.HistoricalEmbeddings` (``sync``).

    **Epochs.** Every training epoch trains each training node exactly once (under data
    parallelism: all but the dropped ones, once on one rank). LBS cuts the
    same macro-batch and mini-batch sizes every epoch, and its training loader has that
    fixed length. A PBS epoch's step count, ``sum over groups of ceil(training nodes in the
    group / batch_size)``, depends on that epoch's partition draw, so the PBS loader has no
    length and Lightning runs each epoch until the loader's pass ends (as for any iterable
    without a length: the progress bar shows no total, ``val_check_interval`` must be
    ``1.0``, an int or a time, and ``limit_train_batches`` ``1.0`` or an int). See
    :class:`~lightgraph.data.loader.multistage.MultistageLoader`.

    Args:
        dataset: the graph (any :class:`~lightgraph.data.GraphDataset`).
        first_stage: a :class:`~lightgraph.data.loader.first_stage.FirstStageSampler`
            (``LargeBatchSampler(ratio=..., second_stage_fanouts=...,
            num_sampler_threads=...)`` or ``PartitionBatchSampler(num_parts=...,
            parts_per_batch=..., history=...)``), or ``"lbs"``/``"pbs"`` for either with
            its defaults.
        fanouts: the model's neighbours per hop (stage 1 of LBS; stage 2 of PBS).
        batch_size: seeds per mini-batch, at most (a macro-batch's seeds are split evenly).
        aot: ahead-of-time filtering (stage-2 samples drawn on the host, only touched rows
            moved to the device).
        prefetch: build the next macro-batch in a background thread.
        eval_mode, eval_fanouts, eval_batch_size, cache_dir, seed, memory_budget: see
            :class:`~lightgraph.data.PartitionStoreDataModule` (a dataset with its arrays
            on disk is written to the store in chunks, never loaded whole; the graph in
            memory is then a copy of the store's files).
    """

    def __init__(
        self,
        dataset: GraphDataset,
        first_stage: FirstStageSampler | FirstStage = "lbs",
        fanouts: Sequence[int] = (15, 10, 5),
        batch_size: int = 1000,
        aot: bool = False,
        prefetch: bool = True,
        eval_mode: EvalMode = "layerwise",
        eval_fanouts: Sequence[int] = (20, 20, 20),
        eval_batch_size: int = 4096,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        memory_budget: int | None = None,
    ) -> None:
        owner = "MultistageDataModule"
        sampler = first_stage_sampler(owner, first_stage)
        super().__init__(
            dataset,
            num_parts=sampler.num_parts,
            partitioner=sampler.partitioner,
            hub_fraction=0.0,
            eval_mode=eval_mode,
            eval_fanouts=eval_fanouts,
            eval_batch_size=eval_batch_size,
            cache_dir=cache_dir,
            seed=seed,
            memory_budget=memory_budget,
        )
        self.first_stage = sampler
        self.fanouts = check_fanouts(owner, list(fanouts))
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        # Checked here, against the model's fanouts (LBS: never below them).
        self._stage_two_fanouts = sampler.stage_two_fanouts(self.fanouts, owner)
        self.aot = check_bool(owner, "aot", aot)
        self.prefetch = check_bool(owner, "prefetch", prefetch)
        self._train: Tensor | None = None
        self._train_loader: MultistageLoader | None = None
        self._on_device: DeviceMacroBatch | None = None
        self._on_device_origin: StageOneBatch | None = None
        self._scratch: Tensor | None = None
        self._build_lock = threading.Lock()
        self._plan_lock = threading.Lock()
        self._plans: dict[tuple[DataParallelShard, int], EpochPlan] = {}
        self._train_loader_shard: DataParallelShard | None = None
        self._history: HistoryTable | None = None

    # -------------------------------------------------------------------- the graph
    @property
    def history_layers(self) -> int:
        """Hidden layers with a history table (``len(fanouts) - 1`` for PBS with history)."""
        return self.first_stage.history_layers(self.fanouts)

    @property
    def num_store_nodes(self) -> int:
        return self._store().num_nodes

    def data_contract(self) -> DataContract:
        """Layer-wise or sampled evaluation as the base declares it; with PBS history, the
        hidden layers with a history table, its row count and where the model attaches it."""
        if not self.history_layers:
            return super().data_contract()
        return DataContract(
            history_layers=self.history_layers,
            num_store_nodes=self.num_store_nodes,
            eval_mode=self.eval_mode,
            full_graph=self.full_graph,
            attach_history=self.attach_history,
        )

    def attach_history(self, table: HistoryTable | None) -> None:
        """The model's history table, whose halo rows :meth:`to_device` pulls (``None``
        detaches it)."""
        self._history = table

    def graph_arrays(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The whole graph, read into memory once (JOESTAR trains from host memory).

        The stage-1 thread and the main thread (warm fill, validation) may both ask first:
        :meth:`in_memory_graph` copies it under a lock, once, for every caller.
        """
        return self.in_memory_graph()

    def _train_nodes(self) -> Tensor:
        if self._train is None:
            self._train = self.split_nodes("train")
        return self._train

    # ------------------------------------------------------------------------ stage 1
    def plan(self, epoch: int, shard: DataParallelShard | None = None) -> list[Tensor]:
        """The seeds (store ids) of every macro-batch of ``epoch``, in training order, of
        ``shard``'s rank (default: :attr:`data_shard`)."""
        return [m.trained for m in self._epoch_plan(epoch, shard).macros]

    def steps(self, epoch: int, shard: DataParallelShard | None = None) -> list[int]:
        """The number of mini-batches of every macro-batch of ``epoch`` of ``shard``'s rank
        (default: :attr:`data_shard`)."""
        return [m.steps(self.batch_size) for m in self._epoch_plan(epoch, shard).macros]

    def dropped_targets(self, epoch: int, shard: DataParallelShard | None = None) -> int:
        """Training targets of ``epoch`` that no data-parallel rank trains."""
        return self._epoch_plan(epoch, shard).dropped

    def _epoch_plan(self, epoch: int, shard: DataParallelShard | None = None) -> EpochPlan:
        """``shard``'s rank's macro-batches of ``epoch`` (default: :attr:`data_shard`), computed
        once per epoch (the loader asks for them at every macro-batch and length)."""
        shard = self.data_shard if shard is None else shard
        with self._plan_lock:
            cached = self._plans.get((shard, epoch))
            if cached is None:
                cached = self._make_plan(epoch, shard)
                self._plans = {key: p for key, p in self._plans.items() if key[1] >= epoch - 1}
                self._plans[(shard, epoch)] = cached
            return cached

    def _make_plan(self, epoch: int, shard: DataParallelShard) -> EpochPlan:
        return self.first_stage.plan(
            self._train_nodes(), self._store().part_ptr, epoch, shard, self.seed, self.batch_size
        )

    def build_macro_batch(
        self, epoch: int, k: int, shard: DataParallelShard | None = None
    ) -> StageOneBatch:
        """Stage 1 (and AoT sampling) of macro-batch ``k`` of ``epoch`` of ``shard``'s rank
        (default: :attr:`data_shard`), on the host."""
        shard = self.data_shard if shard is None else shard
        with self._build_lock:  # one build at a time: they share a node-sized scratch buffer
            return self._build_macro_batch(epoch, k, shard)

    def _build_macro_batch(self, epoch: int, k: int, shard: DataParallelShard) -> StageOneBatch:
        tic = time.perf_counter()
        indptr, indices, x, y = self.graph_arrays()
        if self._scratch is None:
            self._scratch = torch.full((indptr.numel() - 1,), -1, dtype=torch.long)
        _, _, order, sizes = self._epoch_plan(epoch, shard).macros[k]
        rank = None if shard.world_size == 1 else shard.rank
        stream = (epoch, k) if rank is None else (epoch, k, "rank", rank)
        # With AoT the rows are gathered after filtering, the kept ones only.
        fx, fy = (None, None) if self.aot else (x, y)
        built = self.first_stage.stage_one(
            (indptr, indices, fx, fy),
            self._epoch_plan(epoch, shard).macros[k],
            self.fanouts,
            self.seed,
            stream,
            self._scratch,
        )
        node, m_indptr, m_indices, mx, my, num_inner, local_seeds = built
        local_seeds = local_seeds[order]
        # ceil(n / batch_size) near-equal mini-batches, no small tail (even_batches), or
        # this rank's slices of the global ones.
        if sizes is None:
            batches = even_batches(local_seeds, self.batch_size)
        else:
            batches = list(local_seeds.split(list(sizes)))
        macro = StageOneBatch(
            epoch=epoch,
            index=k,
            node=node,
            x=mx,
            y=my,
            indptr=m_indptr,
            indices=m_indices,
            num_inner=num_inner,
            batches=batches,
            num_seeds=int(order.numel()),
            num_nodes_sampled=int(node.numel()),
            rank=rank,
        )
        if self.aot:
            # The scratch buffer is all -1 again after stage 1: its first M entries relabel
            # the macro-batch's mini-batches.
            macro = aot_filter(
                macro,
                self.stage_two_fanouts,
                self.seed,
                self.history_layers,
                node_buffer=self._scratch[: macro.num_nodes],
                x=x,
                y=y,
            )
        macro.build_seconds = time.perf_counter() - tic
        return macro

    @property
    def stage_two_fanouts(self) -> list[int]:
        """Stage-2 fanouts: the LBS sampler's ``second_stage_fanouts``, ``fanouts`` for PBS."""
        return self._stage_two_fanouts

    def train_loader(self) -> MultistageLoader:
        """The training loader of this rank's share (:attr:`data_shard`, read when it is built;
        a loader built for another shard is replaced)."""
        shard = self.checked_data_shard()
        if self._train_loader is not None and self._train_loader_shard != shard:
            self._train_loader.close()
            self._train_loader = None
        if self._train_loader is None:
            self._train_loader = MultistageLoader(
                partial(self.build_macro_batch, shard=shard),
                partial(self.plan, shard=shard),
                self.batch_size,
                steps=partial(self.steps, shard=shard),
                prefetch=self.prefetch,
                # LBS cuts the same macro-batch sizes every epoch; PBS's step count depends
                # on the epoch's partition draw, so its loader has no length.
                sized=self.first_stage.sized,
                world_size=shard.world_size,
                dropped=partial(self.dropped_targets, shard=shard),
            )
            self._train_loader_shard = shard
        return self._train_loader

    def train_dataloader(self) -> MultistageLoader:
        """The training loader, for Lightning: its position advances when
        :meth:`transfer_batch_to_device` hands a step to the model, not when Lightning fetches
        it (one step ahead of training for PBS's loader, which has no length)."""
        loader = super().train_dataloader()
        loader.handover = "reported"
        return loader

    def loader(self, split: str) -> Iterable[Any]:
        if split == "train":
            return self.train_loader()
        return self._eval_loader("test" if split == "predict" else split)

    # ------------------------------------------------------------------------ stage 2
    def to_device(self, step: StagedStep, device: torch.device, history: Any = None) -> DeviceStep:
        """Move ``step``'s macro-batch to ``device`` once (with its halo's history rows
        pulled from ``history``), counting the bytes; later steps of it reuse the copy."""
        macro = step.macro
        if self._on_device is None or self._on_device_origin is not macro:
            self._on_device = None  # release the previous macro-batch first
            moved = [
                None if t is None else t.to(device, non_blocking=True)
                for t in (macro.node, macro.x, macro.y, macro.indptr, macro.indices)
            ]
            nbytes = macro.device_bytes()
            hist: list[Tensor] = []
            slots: list[Tensor] = []
            if self.history_layers:
                if history is None:
                    raise RuntimeError(
                        "MultistageDataModule: PBS with `history=True` needs the model's "
                        "history table (MiniBatchNodeClassifier creates it at train start); "
                        "pass `history=` or set `history=False`."
                    )
                for layer in range(self.history_layers):
                    local = macro.halo if macro.hist_nodes is None else macro.hist_nodes[layer]
                    rows = history.pull(layer, macro.node[local])
                    nbytes += tensor_bytes(rows, local)
                    hist.append(rows.to(device, non_blocking=True))
                    # Local id -> row of hist[layer], built where stage 2 runs.
                    slot = torch.full((macro.num_nodes,), -1, dtype=torch.long, device=device)
                    slot[local.to(device)] = torch.arange(local.numel(), device=device)
                    slots.append(slot)
            samples = macro.samples
            if samples is not None and device.type != "cpu":
                samples = [
                    s._replace(node=s.node.to(device), row=s.row.to(device), col=s.col.to(device))
                    for s in samples
                ]
            self.h2d_bytes += nbytes
            src = macro if samples is macro.samples else replace(macro, samples=samples)
            self._on_device = DeviceMacroBatch(  # type: ignore[arg-type]
                src, *moved, hist=hist, hist_slot=slots
            )
            self._on_device_origin = macro
        self.h2d_bytes += tensor_bytes(step.seeds)
        return DeviceStep(self._on_device, step.step)

    def sample_on_device(self, step: DeviceStep) -> Any:
        """Stage 2: the mini-batch ``Data`` of ``step``, sampled where its macro-batch is."""
        return stage_two(
            step.macro,
            step.step,
            self.stage_two_fanouts,
            self.seed,
            node_ids=self._store().node_ids,
            history_layers=self.history_layers,
        )

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # A training step reaches the model: the loader's position moves past it.
        if isinstance(batch, StagedStep):
            loader = self._train_loader
            if loader is not None and loader.handover == "reported":
                loader.hand_over()
        return batch

    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        if isinstance(batch, StagedStep):
            return self.to_device(batch, device, self._history)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if isinstance(batch, DeviceStep):
            return self.sample_on_device(batch)
        return batch

    # ---------------------------------------------------------------------- counters
    def io_stats(self) -> dict[str, float]:
        stats = super().io_stats()
        if self._train_loader is not None:
            stats.update(self._train_loader.stats_dict())
        return stats

    def teardown(self, stage: str) -> None:
        if self._train_loader is not None:
            self._train_loader.close()
        self._on_device = self._on_device_origin = None
        super().teardown(stage)
