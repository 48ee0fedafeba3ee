"""JOESTAR's data module: multistage sampling (LBS or PBS) over a graph held in memory."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lightgraph.data.contract import DataContract, HistoryTable
from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.lightning.partition_store_data_module import EvalMode, PartitionStoreDataModule
from lightgraph.data.loader.batching import even_batches, split_sizes
from lightgraph.data.loader.data_parallel import (
    DataParallelShard,
    shard_batches,
)
from lightgraph.data.loader.macro_batch import check_parts_per_batch, shard_macro_batches
from lightgraph.data.loader.multistage import (
    FIRST_STAGES,
    DeviceMacroBatch,
    DeviceStep,
    FirstStage,
    MultistageLoader,
    StagedStep,
    StageOneBatch,
    aot_filter,
    lbs_stage_one,
    pbs_stage_one,
    stage_two,
)
from lightgraph.utilities.checks import check_bool, check_choice, check_fanouts, check_int
from lightgraph.utilities.memory import tensor_bytes
from lightgraph.utilities.random_state import make_generator


def check_ratio(owner: str, value: Any) -> float:
    """The LBS macro-batch size as a fraction of the training nodes: a number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(
            f"{owner}: expected `ratio` (LBS macro-batch size / training nodes) in (0, 1] but "
            f"got {value!r}."
        )
    return float(value)


def check_second_stage_fanouts(
    owner: str, second: Sequence[int] | None, first: list[int]
) -> list[int]:
    """LBS stage-2 fanouts: one per hop, ``-1`` (all) or at least the stage-1 fanout."""
    if second is None:
        return [-1] * len(first)
    second = check_fanouts(owner, list(second), "second_stage_fanouts")
    if len(second) != len(first):
        raise ValueError(
            f"{owner}: expected `second_stage_fanouts` to have one entry per hop "
            f"({len(first)}, like `fanouts` {first}) but got {second}."
        )
    for hop, (k2, k1) in enumerate(zip(second, first, strict=True)):
        if k2 != -1 and (k1 == -1 or k2 < k1):
            raise ValueError(
                f"{owner}: expected `second_stage_fanouts[{hop}]` to be -1 (all) or >= the "
                f"first-stage fanout {k1} (a smaller second stage would resample the macro-"
                f"batch more coarsely than stage 1) but got {k2}."
            )
    return second


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


class _PlannedMacroBatch(NamedTuple):
    """One macro-batch of a rank's epoch plan (store ids).

    Attributes:
        seeds: LBS: the seeds stage 1 samples from; PBS: the inner training nodes
            (ascending).
        inner: PBS: the inner nodes (ascending); ``None`` for LBS.
        order: positions in ``seeds`` in training order.
        sizes: the mini-batch sizes along ``order`` under data parallelism (LBS: the
            rank's slices of the global batches, :func:`~lightgraph.data.loader.data_parallel.
            shard_batches`; PBS: the steps of
            :func:`~lightgraph.data.loader.macro_batch.shard_macro_batches`, near-equal);
            ``None``: :func:`~lightgraph.data.loader.batching.even_batches`.
    """

    seeds: Tensor
    inner: Tensor | None
    order: Tensor
    sizes: tuple[int, ...] | None = None

    def steps(self, batch_size: int) -> int:
        """Mini-batches of this macro-batch."""
        if self.sizes is not None:
            return len(self.sizes)
        return math.ceil(self.order.numel() / batch_size)

    @property
    def trained(self) -> Tensor:
        """The seeds trained, in training order."""
        return self.seeds.index_select(0, self.order)


class _EpochPlan(NamedTuple):
    """A rank's macro-batches of one epoch and the epoch's training targets no rank trains."""

    macros: list[_PlannedMacroBatch]
    dropped: int


class MultistageDataModule(PartitionStoreDataModule):
    """JOESTAR: two-stage neighbour sampling, stage 1 on the host and stage 2 on the device.

    The graph is read into memory once (from the same fingerprinted partition store as the
    other sampled modules: one partition in original order for LBS -- the NS-Mem store --
    and ``num_parts`` GAP partitions for PBS). Each epoch is a sequence of macro-batches,
    built by a background thread one ahead of training and never reused:

    * ``first_stage="lbs"`` (JOESTAR-I): ``ratio * |train|`` seeds neighbour-sampled with
      ``fanouts``; stage 2 samples mini-batches of ``batch_size`` of those seeds (each
      once) inside the sampled subgraph with ``second_stage_fanouts`` (all neighbours by
      default; never below the stage-1 fanout).
    * ``first_stage="pbs"`` (JOESTAR-II): ``parts_per_batch`` of the ``num_parts`` GAP
      partitions plus their 1-hop halo; stage 2 samples with ``fanouts`` inside it, halo
      nodes are leaves and, with ``history=True``, their hidden representations come from
      historical embeddings owned by the LightningModule
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

    Each argument of one first stage only (``ratio``, ``second_stage_fanouts``,
    ``num_sampler_threads`` for LBS; ``num_parts``, ``parts_per_batch``, ``history`` for PBS)
    defaults to ``None`` ("unset": the default below) and is a :class:`ValueError` when set
    for the other first stage, where it would have no effect.

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
        first_stage: ``"lbs"`` or ``"pbs"``.
        fanouts: the model's neighbours per hop (stage 1 of LBS; stage 2 of PBS).
        batch_size: seeds per mini-batch, at most (a macro-batch's seeds are split evenly).
        ratio: LBS: macro-batch size as a fraction of the training nodes, in (0, 1]
            (unset: 0.125).
        second_stage_fanouts: LBS: stage-2 fanouts (unset: all neighbours).
        num_parts: PBS: partitions of the graph, ``p`` (unset: 128).
        parts_per_batch: PBS: partitions per macro-batch, ``b <= p`` (unset: 16).
        history: PBS: historical embeddings for the halo's hidden layers (unset: ``True``).
        aot: ahead-of-time filtering (stage-2 samples drawn on the host, only touched rows
            moved to the device).
        num_sampler_threads: LBS: threads that cooperate on one stage-1 sample
            (intra-batch parallel sampling; unset: 1).
        prefetch: build the next macro-batch in a background thread.
        eval_mode, eval_fanouts, eval_batch_size, cache_dir, seed, memory_budget: see
            :class:`~lightgraph.data.PartitionStoreDataModule` (a dataset with its arrays
            on disk is written to the store in chunks, never loaded whole; the graph in
            memory is then a copy of the store's files).
    """

    def __init__(
        self,
        dataset: GraphDataset,
        first_stage: FirstStage = "lbs",
        fanouts: Sequence[int] = (15, 10, 5),
        batch_size: int = 1000,
        ratio: float | None = None,
        second_stage_fanouts: Sequence[int] | None = None,
        num_parts: int | None = None,
        parts_per_batch: int | None = None,
        history: bool | None = None,
        aot: bool = False,
        num_sampler_threads: int | None = None,
        prefetch: bool = True,
        eval_mode: EvalMode = "layerwise",
        eval_fanouts: Sequence[int] = (20, 20, 20),
        eval_batch_size: int = 4096,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        memory_budget: int | None = None,
    ) -> None:
        owner = "MultistageDataModule"
        first_stage = check_choice(owner, "first_stage", first_stage, FIRST_STAGES)
        pbs = first_stage == "pbs"
        # An argument of the other first stage would be silently ignored: reject it.
        own = {
            "lbs": dict(
                ratio=ratio,
                second_stage_fanouts=second_stage_fanouts,
                num_sampler_threads=num_sampler_threads,
            ),
            "pbs": dict(num_parts=num_parts, parts_per_batch=parts_per_batch, history=history),
        }
        other = "lbs" if pbs else "pbs"
        for name, value in own[other].items():
            if value is not None:
                raise ValueError(
                    f"{owner}: `{name}` applies to first_stage='{other}' only and has no "
                    f"effect with first_stage='{first_stage}', but got {name}={value!r}; leave "
                    f"it unset or use first_stage='{other}'."
                )
        # LBS trains from the NS-Mem store: one partition in original order.
        num_parts = check_int(owner, "num_parts", _default(num_parts, 128), low=1) if pbs else 1
        super().__init__(
            dataset,
            num_parts=num_parts,
            partitioner="gap" if pbs else "random",
            hub_fraction=0.0,
            eval_mode=eval_mode,
            eval_fanouts=eval_fanouts,
            eval_batch_size=eval_batch_size,
            cache_dir=cache_dir,
            seed=seed,
            memory_budget=memory_budget,
        )
        self.first_stage = first_stage
        self.fanouts = check_fanouts(owner, list(fanouts))
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        # LBS only (PBS keeps the defaults and never reads them).
        self.ratio = check_ratio(owner, _default(ratio, 0.125))
        self.second_stage_fanouts = check_second_stage_fanouts(
            owner, second_stage_fanouts, self.fanouts
        )
        self.num_sampler_threads = check_int(
            owner, "num_sampler_threads", _default(num_sampler_threads, 1), low=1
        )
        # PBS only (LBS has one partition, no halo and so no history).
        self.parts_per_batch = (
            check_parts_per_batch(owner, _default(parts_per_batch, 16), num_parts) if pbs else 1
        )
        self.history = pbs and check_bool(owner, "history", _default(history, True))
        self.aot = check_bool(owner, "aot", aot)
        self.prefetch = check_bool(owner, "prefetch", prefetch)
        self._train: Tensor | None = None
        self._train_loader: MultistageLoader | None = None
        self._on_device: DeviceMacroBatch | None = None
        self._on_device_origin: StageOneBatch | None = None
        self._scratch: Tensor | None = None
        self._build_lock = threading.Lock()
        self._plan_lock = threading.Lock()
        self._plans: dict[tuple[DataParallelShard, int], _EpochPlan] = {}
        self._part_train: Tensor | None = None
        self._train_loader_shard: DataParallelShard | None = None
        self._history: HistoryTable | None = None

    # -------------------------------------------------------------------- the graph
    @property
    def history_layers(self) -> int:
        """Hidden layers with a history table (``len(fanouts) - 1`` for PBS with history)."""
        return len(self.fanouts) - 1 if self.history else 0

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

    def _epoch_plan(self, epoch: int, shard: DataParallelShard | None = None) -> _EpochPlan:
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

    def _make_plan(self, epoch: int, shard: DataParallelShard) -> _EpochPlan:
        train = self._train_nodes()
        gen = make_generator(self.seed, "macro-order", epoch)
        if self.first_stage == "lbs":
            order = train[torch.randperm(train.numel(), generator=gen)]
            return self._lbs_plan(epoch, order, shard)
        return self._pbs_plan(epoch, torch.randperm(self.num_parts, generator=gen), shard)

    def _lbs_plan(self, epoch: int, order: Tensor, shard: DataParallelShard) -> _EpochPlan:
        rank, world = shard
        size = max(1, math.ceil(self.ratio * order.numel()))
        macros: list[_PlannedMacroBatch] = []
        dropped = 0
        for k, i in enumerate(range(0, order.numel(), size)):
            seeds = order[i : i + size]
            # The global training order inside the macro-batch (rank-free: every rank
            # shards the same one).
            perm = torch.randperm(
                seeds.numel(), generator=make_generator(self.seed, "seed-order", epoch, k)
            )
            if world == 1:
                macros.append(_PlannedMacroBatch(seeds, None, perm))
                continue
            batches = shard_batches(seeds[perm], rank, world, self.batch_size)
            mine = torch.cat(batches) if batches else seeds[:0]
            dropped += seeds.numel() - world * mine.numel()
            sizes = tuple(b.numel() for b in batches)
            macros.append(_PlannedMacroBatch(mine, None, torch.arange(mine.numel()), sizes))
        return _EpochPlan(macros, dropped)

    def _partition_train_counts(self) -> Tensor:
        """Training nodes of every partition."""
        if self._part_train is None:
            is_train = torch.zeros(self.num_store_nodes, dtype=torch.long)
            is_train[self._train_nodes()] = 1
            ends = torch.cat([torch.zeros(1, dtype=torch.long), is_train.cumsum(0)])
            ptr = self._store().part_ptr.long()
            self._part_train = ends[ptr[1:]] - ends[ptr[:-1]]
        return self._part_train

    def _pbs_plan(self, epoch: int, parts: Tensor, shard: DataParallelShard) -> _EpochPlan:
        rank, world = shard
        ptr = self._store().part_ptr
        is_train = torch.zeros(self.num_store_nodes, dtype=torch.bool)
        is_train[self._train_nodes()] = True
        ppb, b = self.parts_per_batch, self.batch_size

        def planned(
            chosen: Tensor, key: tuple[Any, ...], sizes: list[int] | None
        ) -> _PlannedMacroBatch:
            chosen = chosen.sort().values
            inner = torch.cat([torch.arange(int(ptr[p]), int(ptr[p + 1])) for p in chosen])
            seeds = inner[is_train[inner]]
            order = torch.randperm(
                seeds.numel(), generator=make_generator(self.seed, "seed-order", *key)
            )
            if sizes is None:
                return _PlannedMacroBatch(seeds, inner, order)
            return _PlannedMacroBatch(seeds, inner, order[: sum(sizes)], tuple(sizes))

        if world == 1:
            groups = [parts[i : i + ppb] for i in range(0, self.num_parts, ppb)]
            return _EpochPlan([planned(g, (epoch, k), None) for k, g in enumerate(groups)], 0)
        # One process's macro-batches, each split among the ranks (shard_macro_batches, as
        # HANOI's loader does); every rank computes every rank's plan: no communication.
        count = self._partition_train_counts()
        plan = shard_macro_batches(parts.tolist(), count.tolist(), ppb, b, world)[rank]
        macros = [
            planned(
                torch.tensor(mb.parts), (epoch, k, "rank", rank), split_sizes(mb.targets, mb.steps)
            )
            for k, mb in enumerate(plan)
        ]
        return _EpochPlan(macros, 0)

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
        seeds, inner, order, sizes = self._epoch_plan(epoch, shard).macros[k]
        rank = None if shard.world_size == 1 else shard.rank
        stream = (epoch, k) if rank is None else (epoch, k, "rank", rank)
        # With AoT the rows are gathered after filtering, the kept ones only.
        fx, fy = (None, None) if self.aot else (x, y)
        if self.first_stage == "lbs":
            node, m_indptr, m_indices, mx, my = lbs_stage_one(
                indptr,
                indices,
                fx,
                fy,
                seeds,
                self.fanouts,
                generator=make_generator(self.seed, "stage1", *stream),
                num_threads=self.num_sampler_threads,
                node_buffer=self._scratch,
            )
            local_seeds = torch.arange(seeds.numel())
            num_inner = node.numel()
        else:
            assert inner is not None
            node, m_indptr, m_indices, mx, my, num_inner = pbs_stage_one(
                indptr, indices, fx, fy, inner, self._scratch
            )
            # Inner nodes keep the order of ``inner`` (ascending store id) and so do the
            # seeds (``plan`` filters ``inner``): their local ids are a search.
            local_seeds = torch.searchsorted(inner, seeds)
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
        """Stage-2 fanouts: ``second_stage_fanouts`` for LBS, ``fanouts`` for PBS."""
        return self.second_stage_fanouts if self.first_stage == "lbs" else self.fanouts

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
                sized=self.first_stage == "lbs",
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
