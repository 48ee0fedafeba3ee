"""Partition-parallel full-graph link prediction: every process trains one partition of the
training graph, and pairs across partitions are scored exactly.

``prepare_data`` splits the edges (:func:`~lightgraph.data.datasets.link_split.
random_link_split`, or the dataset's official split), partitions the *training* message-
passing graph as :class:`~lightgraph.data.PartitionedGraphDataModule` does and caches,
per rank, the partition plan of the training graph (training and validation pass messages
over it) and of the test graph (training and validation edges), plus the node-ownership
arrays every rank needs to fetch remote rows (:mod:`lightgraph.distributed.remote_rows`).
Each epoch is one full-graph step: every rank scores the training edges whose source it
owns, with ``num_negatives`` uniform negatives each, against the embeddings of all ranks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import GraphDataset, ensure_edge_index
from lightgraph.data.datasets.link_split import LinkSplit, random_link_split
from lightgraph.data.lightning.partitioned_data_module import PartitionedGraphDataModule
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.loader.negative_sampling import check_num_negatives
from lightgraph.data.partition.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partition.partitioner import PartitionMethod, partition_graph
from lightgraph.data.store.cache import CacheReader, CacheWriter
from lightgraph.utilities.checks import check_bool, check_int

_CACHE_FORMAT = 1


@dataclass
class PartitionedLinkBatch:
    """One rank's share of a full-graph link step or evaluation.

    Attributes:
        split: ``"train"``, ``"val"`` or ``"test"``.
        plan: the rank's partition plan of the split's message-passing graph.
        pos: ``[2, E]`` this rank's positive edges (global ids; sources it owns) for
            training; for evaluation every query edge of the split (each rank ranks a
            share).
        owner, owner_local: ``[N]`` owning rank and row of every global node.
        num_pairs: training: the positive edges of all ranks together (the loss is a
            global mean).
        num_negatives: training: negatives per positive; evaluation: per query.
        seed: seed of the negatives.
        pos_index: training: the position of every positive of ``pos`` among all ranks'
            (the negatives of an edge are drawn for all edges at once and do not depend on
            the number of ranks).
        neg, shared_neg: evaluation: a benchmark's own negatives (``[Q, K]`` destinations
            per query, or ``[2, M]`` pairs shared by all queries); ``None``: drawn.
    """

    split: str
    plan: PartitionPlan
    pos: Tensor
    owner: Tensor
    owner_local: Tensor
    num_pairs: int
    num_negatives: int
    seed: int
    pos_index: Tensor | None = None
    neg: Tensor | None = None
    shared_neg: Tensor | None = None


class PartitionedLinkDataModule(PartitionedGraphDataModule):
    """Link prediction with one partition of the training graph per process.

    Args:
        dataset, num_parts, partitioner, cache_dir, seed: as for
            :class:`~lightgraph.data.PartitionedGraphDataModule` (the partition is of the
            training message-passing graph).
        num_negatives: uniform negatives per positive edge in training.
        val_ratio, test_ratio, undirected, remove_reverse: the transductive edge split.
        eval_negatives: uniform negative destinations per validation/test query.
        embedding_channels: the encoder's output size (linked into the model by the CLI).

    Train with ``Trainer(strategy="boundary_exchange", devices=num_parts)`` and
    :class:`~lightgraph.models.PartitionedLinkPredictor`.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        num_parts: int | None = None,
        partitioner: PartitionMethod = "metis",
        num_negatives: int = 1,
        val_ratio: float = 0.05,
        test_ratio: float = 0.1,
        undirected: bool | None = None,
        remove_reverse: bool = True,
        eval_negatives: int = 100,
        embedding_channels: int = 64,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
    ) -> None:
        super().__init__(dataset, num_parts, partitioner, None, cache_dir, seed)
        owner = "PartitionedLinkDataModule"
        self.num_negatives = check_num_negatives(owner, num_negatives)
        for name, value in (("val_ratio", val_ratio), ("test_ratio", test_ratio)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ValueError(f"{owner}: expected `{name}` in (0, 1) but got {value!r}.")
        self.val_ratio, self.test_ratio = float(val_ratio), float(test_ratio)
        self.undirected = (
            None if undirected is None else check_bool(owner, "undirected", undirected)
        )
        self.remove_reverse = check_bool(owner, "remove_reverse", remove_reverse)
        self.eval_negatives = check_int(owner, "eval_negatives", eval_negatives, low=1)
        self.embedding_channels = check_int(owner, "embedding_channels", embedding_channels, low=1)
        self.split: LinkSplit | None = None
        self.plans: dict[str, PartitionPlan] = {}
        self.owner: Tensor | None = None
        self.owner_local: Tensor | None = None
        self._negatives: dict[str, Any] = {}

    @property
    def num_outputs(self) -> int:
        """The encoder's output size (``embedding_channels``)."""
        return self.embedding_channels

    # --------------------------------------------------------------- CachedDataModule
    def fingerprint(self, num_parts: int | None = None) -> dict[str, Any]:
        key = super().fingerprint(num_parts)
        key.update(
            link_format=_CACHE_FORMAT,
            val_ratio=self.val_ratio,
            test_ratio=self.test_ratio,
            undirected=self.undirected,
            remove_reverse=self.remove_reverse,
        )
        return key

    def cache_name(self, num_parts: int | None = None) -> str:
        return "Link" + super().cache_name(num_parts)

    def build(self, writer: CacheWriter) -> dict[str, Any]:
        start = time.perf_counter()
        num_parts = self._world_size()
        data = ensure_edge_index(self.dataset.load())
        official = self.dataset.official_link_split()
        if official is not None:
            split = official.split
            writer.save("negatives.pt", {"shared": official.shared, **official.negatives})
        else:
            split = random_link_split(
                data.edge_index,
                int(data.num_nodes),
                self.val_ratio,
                self.test_ratio,
                undirected=self.undirected,
                remove_reverse=self.remove_reverse,
                seed=self.seed,
            )
        n = split.num_nodes
        empty = torch.zeros(n, dtype=torch.bool)

        def graph(edges: Tensor) -> Data:
            return Data(
                x=data.x, y=torch.zeros(n, dtype=torch.long), edge_index=edges,
                train_mask=empty, val_mask=empty, test_mask=empty, num_nodes=n,
            )  # fmt: skip

        train_graph = graph(split.message_edges("train"))
        part = partition_graph(
            train_graph.edge_index, n, num_parts, self.partitioner, self.seed,
            y=train_graph.y, train_mask=torch.ones(n, dtype=torch.bool),
        ).long()  # fmt: skip
        owner_local = torch.empty(n, dtype=torch.long)
        for r in range(num_parts):
            mine = (part == r).nonzero().view(-1)
            owner_local[mine] = torch.arange(mine.numel())
        for name, g in (("train", train_graph), ("test", graph(split.message_edges("test")))):
            for plan in build_partition_plans(g, part, num_parts):
                with writer.path(f"{name}{plan.rank}.pt") as tmp:
                    plan.save(tmp)
        writer.save("owner.pt", {"owner": part, "owner_local": owner_local})
        writer.save(
            "split.pt",
            {s: split.positives(s) for s in ("train", "val", "test")}
            | {"num_nodes": n, "undirected": split.undirected},
        )
        return {"num_parts": num_parts, "seconds": round(time.perf_counter() - start, 3)}

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        for name in ("train", "test"):
            with cache.reading(f"{name}{rank}.pt") as path:
                self.plans[name] = PartitionPlan.load(path)
        self.plan = self.plans["train"]
        owners = cache.load("owner.pt")
        self.owner, self.owner_local = owners["owner"], owners["owner_local"]
        self._negatives = cache.load("negatives.pt") if "negatives.pt" in cache.files else {}
        saved = cache.load("split.pt")
        empty = torch.empty(2, 0, dtype=torch.long)
        self.split = LinkSplit(
            num_nodes=saved["num_nodes"], undirected=saved["undirected"], train=saved["train"],
            val=saved["val"], test=saved["test"], other=empty, remove_reverse=True,
            graph_keys=torch.empty(0, dtype=torch.long), check_disjoint=False,
        )  # fmt: skip

    def is_loaded(self) -> bool:
        return self.split is not None

    def batch(self, split: str) -> PartitionedLinkBatch:
        """This rank's batch of ``split`` (``"train"``, ``"val"``, ``"test"``)."""
        assert self.split is not None and self.owner is not None and self.owner_local is not None
        plan = self.plans["test" if split == "test" else "train"]
        pos = self.split.positives(split)
        total = int(pos.size(1))
        index = None
        if split == "train":  # the edges whose source this rank owns
            index = (self.owner[pos[0]] == plan.rank).nonzero().view(-1)
            pos = pos[:, index]
        k = self.num_negatives if split == "train" else self.eval_negatives
        given = self._negatives.get(split) if split != "train" else None
        shared = bool(self._negatives.get("shared", False))
        return PartitionedLinkBatch(
            split, plan, pos, self.owner, self.owner_local, total, k, int(self.seed), index,
            neg=None if shared else given, shared_neg=given if shared else None,
        )  # fmt: skip

    def loader(self, split: str) -> FixedBatchLoader[PartitionedLinkBatch]:
        return FixedBatchLoader([self.batch("test" if split == "predict" else split)])
