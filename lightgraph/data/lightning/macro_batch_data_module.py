"""HANOI's out-of-core training module: macro-batches of partitions and hubs read from
the partition store, mini-batches sampled inside them (:mod:`lightgraph.data.loader.
macro_batch`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from lightgraph.data.datasets.graph_dataset import (
    GraphDataset,
)
from lightgraph.data.lightning.partition_store_data_module import EvalMode, PartitionStoreDataModule
from lightgraph.data.loader.macro_batch import (
    RANK_SHARES,
    MacroBatchLoader,
    RankShare,
    check_parts_per_batch,
    check_reuse,
)
from lightgraph.data.partition.partitioner import (
    PartitionMethod,
)
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_fanouts,
    check_int,
)
from lightgraph.utilities.memory import (
    cgroup_memory_limit,
    resident_memory,
)


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
