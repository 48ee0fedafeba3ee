"""HANOI's out-of-core link prediction: a partition store of the training graph, link
mini-batches from its macro-batches (:mod:`lightgraph.data.loader.link_macro_batch`), and
exact evaluation over the store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.batch import LinkEvalBatch
from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.datasets.link_split import LinkTrainingGraph
from lightgraph.data.lightning.macro_batch_data_module import MacroBatchDataModule
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.loader.link_macro_batch import LinkMacroBatchLoader
from lightgraph.data.loader.negative_sampling import check_num_negatives
from lightgraph.data.partition.partitioner import PartitionMethod
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.utilities.checks import check_int


class LinkMacroBatchDataModule(MacroBatchDataModule):
    """Link prediction from an on-disk partition store of the training graph (HANOI).

    The dataset's edges are split (:class:`~lightgraph.data.datasets.link_split.
    LinkTrainingGraph`: its official split, else a random one), the partition store is
    built from the *training* graph (so no validation or test edge is ever on disk for
    training), and every epoch trains the edges each macro-batch owns, with negatives
    among its resident nodes (:class:`~lightgraph.data.loader.link_macro_batch.
    LinkMacroBatchLoader`: which edges an epoch covers and the negatives' bias are stated
    there). Validation ranks the held-out edges over the store's training graph; test over
    the training and validation edges, whose CSC is built in memory.

    Args:
        dataset: the graph.
        num_parts, parts_per_batch, fanouts, batch_size, reuse, adaptive_reuse, prefetch,
            partitioner, hub_fraction, hub_walk_length, cache_dir, seed, memory_budget: as
            for :class:`~lightgraph.data.MacroBatchDataModule` (``batch_size`` counts
            positive edges).
        num_negatives: negatives per positive, uniform among the resident nodes.
        val_ratio, test_ratio, undirected, remove_reverse: the random split.
        eval_negatives: uniform negative destinations per validation/test query.
        embedding_channels: the encoder's output size (linked into the model by the CLI).

    One process only (see :class:`~lightgraph.data.loader.link_macro_batch.
    LinkMacroBatchLoader`).
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_parts: int = 64,
        parts_per_batch: int = 8,
        fanouts: Sequence[int] = (15, 10),
        batch_size: int = 1024,
        num_negatives: int = 1,
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
        self.eval_negatives = check_int(owner, "eval_negatives", eval_negatives, low=1)
        self.embedding_channels = check_int(owner, "embedding_channels", embedding_channels, low=1)
        self._test_csc: tuple[Tensor, Tensor] | None = None

    @property
    def num_outputs(self) -> int:
        """The encoder's output size (``embedding_channels``)."""
        return self.embedding_channels

    def train_loader(self) -> LinkMacroBatchLoader:  # type: ignore[override]
        rank, world_size = self.data_shard
        if world_size > 1:
            raise ValueError(
                f"LinkMacroBatchDataModule: one process only for now, but the Trainer runs "
                f"{world_size} data-parallel ranks; use devices=1."
            )
        if self._train_loader is None:
            self._train_loader = LinkMacroBatchLoader(
                self._store(),
                self.parts_per_batch,
                self.fanouts,
                self.batch_size,
                num_negatives=self.num_negatives,
                undirected=self.link_graph.split().undirected,
                reuse=self.reuse,
                adaptive_reuse=self.adaptive_reuse,
                prefetch=self.prefetch,
                seed=self.seed,
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
        split = self.link_graph.split()
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
