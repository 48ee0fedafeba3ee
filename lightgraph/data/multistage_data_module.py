"""JOESTAR's data module: multistage sampling (LBS or PBS) over a graph held in memory."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.graph_dataset import GraphDataset
from lightgraph.data.macro_batch import check_parts_per_batch
from lightgraph.data.minibatch import make_generator
from lightgraph.data.multistage import (
    FIRST_STAGES,
    DeviceMacroBatch,
    DeviceStep,
    MultistageLoader,
    StagedStep,
    StageOneBatch,
    aot_filter,
    lbs_stage_one,
    pbs_stage_one,
    stage_two,
    tensor_bytes,
)
from lightgraph.data.store_data_module import PartitionStoreDataModule
from lightgraph.utilities.checks import check_bool, check_choice, check_fanouts, check_int


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

    The training loader yields :class:`~lightgraph.data.multistage.StagedStep` objects;
    :meth:`transfer_batch_to_device` moves each macro-batch (and its halo's history rows)
    to the device once, counting the bytes, and :meth:`on_after_batch_transfer` runs
    stage 2 there, so on a GPU second-stage sampling and feature gathering are GPU work.

    Each argument of one first stage only (``ratio``, ``second_stage_fanouts``,
    ``num_sampler_threads`` for LBS; ``num_parts``, ``parts_per_batch``, ``history`` for PBS)
    defaults to ``None`` ("unset": the default below) and is a :class:`ValueError` when set
    for the other first stage, where it would have no effect.

    **Epochs.** Every training epoch trains each training node exactly once. LBS cuts the
    same macro-batch and mini-batch sizes every epoch, and its training loader has that
    fixed length. A PBS epoch's step count, ``sum over groups of ceil(training nodes in the
    group / batch_size)``, depends on that epoch's partition draw, so the PBS loader has no
    length and Lightning runs each epoch until the loader's pass ends (as for any iterable
    without a length: the progress bar shows no total, ``val_check_interval`` must be
    ``1.0``, an int or a time, and ``limit_train_batches`` ``1.0`` or an int). See
    :class:`~lightgraph.data.multistage.MultistageLoader`.

    Args:
        dataset: the graph (any :class:`~lightgraph.data.GraphDataset`).
        first_stage: ``"lbs"`` or ``"pbs"``.
        fanouts: the model's neighbours per hop (stage 1 of LBS; stage 2 of PBS).
        batch_size: seeds per mini-batch.
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
        eval_mode, eval_fanouts, eval_batch_size, cache_dir, seed: see
            :class:`~lightgraph.data.PartitionStoreDataModule`.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        first_stage: str = "lbs",
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
        eval_mode: str = "layerwise",
        eval_fanouts: Sequence[int] = (20, 20, 20),
        eval_batch_size: int = 4096,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
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
        self._plans: dict[int, list[tuple[Tensor, Tensor | None]]] = {}

    # -------------------------------------------------------------------- the graph
    @property
    def history_layers(self) -> int:
        """Hidden layers with a history table (``len(fanouts) - 1`` for PBS with history)."""
        return len(self.fanouts) - 1 if self.history else 0

    @property
    def num_store_nodes(self) -> int:
        return self._store().num_nodes

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
    def plan(self, epoch: int) -> list[Tensor]:
        """The seeds (store ids) of every macro-batch of ``epoch``."""
        return [seeds for seeds, _ in self._epoch_plan(epoch)]

    def _epoch_plan(self, epoch: int) -> list[tuple[Tensor, Tensor | None]]:
        """``(seeds, inner nodes)`` of every macro-batch of ``epoch`` (inner: PBS only),
        computed once per epoch (the loader asks for it at every macro-batch and length)."""
        with self._plan_lock:
            cached = self._plans.get(epoch)
            if cached is None:
                cached = self._make_plan(epoch)
                self._plans = {e: p for e, p in self._plans.items() if e >= epoch - 1}
                self._plans[epoch] = cached
            return cached

    def _make_plan(self, epoch: int) -> list[tuple[Tensor, Tensor | None]]:
        train = self._train_nodes()
        gen = make_generator(self.seed, "macro-order", epoch)
        if self.first_stage == "lbs":
            order = train[torch.randperm(train.numel(), generator=gen)]
            size = max(1, math.ceil(self.ratio * train.numel()))
            return [(order[i : i + size], None) for i in range(0, order.numel(), size)]
        parts = torch.randperm(self.num_parts, generator=gen)
        ptr = self._store().part_ptr
        is_train = torch.zeros(self.num_store_nodes, dtype=torch.bool)
        is_train[train] = True
        plan: list[tuple[Tensor, Tensor | None]] = []
        for i in range(0, self.num_parts, self.parts_per_batch):
            chosen = parts[i : i + self.parts_per_batch].sort().values
            inner = torch.cat([torch.arange(int(ptr[p]), int(ptr[p + 1])) for p in chosen])
            plan.append((inner[is_train[inner]], inner))
        return plan

    def build_macro_batch(self, epoch: int, k: int) -> StageOneBatch:
        """Stage 1 (and AoT sampling) of macro-batch ``k`` of ``epoch``, on the host."""
        with self._build_lock:  # one build at a time: they share a node-sized scratch buffer
            return self._build_macro_batch(epoch, k)

    def _build_macro_batch(self, epoch: int, k: int) -> StageOneBatch:
        tic = time.perf_counter()
        indptr, indices, x, y = self.graph_arrays()
        if self._scratch is None:
            self._scratch = torch.full((indptr.numel() - 1,), -1, dtype=torch.long)
        seeds, inner = self._epoch_plan(epoch)[k]
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
                generator=make_generator(self.seed, "stage1", epoch, k),
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
        order = torch.randperm(
            local_seeds.numel(), generator=make_generator(self.seed, "seed-order", epoch, k)
        )
        local_seeds = local_seeds[order]
        batches = [
            local_seeds[i : i + self.batch_size]
            for i in range(0, local_seeds.numel(), self.batch_size)
        ]
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
            num_seeds=int(seeds.numel()),
            num_nodes_sampled=int(node.numel()),
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
        if self._train_loader is None:
            self._train_loader = MultistageLoader(
                self.build_macro_batch,
                self.plan,
                self.batch_size,
                prefetch=self.prefetch,
                # LBS cuts the same macro-batch sizes every epoch; PBS's step count depends
                # on the epoch's partition draw, so its loader has no length.
                sized=self.first_stage == "lbs",
            )
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

    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        if isinstance(batch, StagedStep):
            loader = self._train_loader
            if loader is not None and loader.handover == "reported":
                loader.hand_over(batch)
            module = self.trainer.lightning_module if self._trainer_attached() else None
            return self.to_device(batch, device, getattr(module, "history", None))
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if isinstance(batch, DeviceStep):
            return self.sample_on_device(batch)
        return batch

    def _trainer_attached(self) -> bool:
        return getattr(self, "trainer", None) is not None

    # ---------------------------------------------------------------------- counters
    def io_stats(self) -> dict[str, float]:
        stats = super().io_stats()
        if self._train_loader is not None:
            stats.update(self._train_loader.stats.as_dict())
        return stats

    def teardown(self, stage: str) -> None:
        if self._train_loader is not None:
            self._train_loader.close()
        self._on_device = self._on_device_origin = None
        super().teardown(stage)
