"""Link prediction by neighbour sampling over a graph held in memory: an edge split, sampled
training batches with negatives and seed-edge exclusion, and exact evaluation batches --
one-stage (NS, the baseline of the task) or JOESTAR's two-stage large-batch sampling
(``first_stage=LargeBatchSampler(...)``, :mod:`lightgraph.data.loader.link_multistage`).

``prepare_data`` splits the dataset's edges once (:func:`~lightgraph.data.datasets.
link_split.random_link_split`, fingerprinted and cached like every lightgraph data
module) and stores the training and test message-passing graphs in CSC form; ``setup``
loads them. The training loader is a :class:`~lightgraph.data.loader.link_neighbor.
LinkNeighborSamplingLoader` over the training positives; validation and test yield one
:class:`~lightgraph.data.batch.LinkEvalBatch` each (the split's message-passing graph,
its positive edges and their negatives) for :class:`~lightgraph.models.LinkPredictor`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.batch import LinkEvalBatch
from lightgraph.data.datasets.graph_dataset import DatasetSizes, GraphDataset, ensure_edge_index
from lightgraph.data.datasets.link_split import (
    LINK_SPLIT_MODES,
    LinkSplit,
    LinkSplitMode,
    random_link_split,
)
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.loader.data_parallel import DataParallelShard
from lightgraph.data.loader.first_stage import EpochPlan, LargeBatchSampler
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.loader.link_multistage import (
    LinkMacroBatch,
    build_link_macro_batch,
    link_stage_two,
)
from lightgraph.data.loader.link_neighbor import LinkNeighborSamplingLoader
from lightgraph.data.loader.multistage import MultistageLoader, StagedStep
from lightgraph.data.loader.negative_sampling import (
    NEGATIVE_MODES,
    KnownEdges,
    NegativeMode,
    NegativeSampler,
    check_num_negatives,
)
from lightgraph.data.store.cache import CacheReader, CacheWriter
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_fanouts,
    check_int,
    check_type,
)

_CACHE_FORMAT = 3


class LinkNeighborSamplingDataModule(DatasetSizes, CachedDataModule):
    """Link prediction with neighbour-sampled mini-batches of seed edges.

    Args:
        dataset: the graph (any :class:`~lightgraph.data.GraphDataset`; its node splits are
            not used: the task is over edges). A dataset with an official link split
            (:meth:`~lightgraph.data.GraphDataset.official_link_split`, e.g.
            :class:`~lightgraph.data.datasets.RealLinkDataset`) brings its own edges and
            evaluation negatives; the split arguments and ``eval_negatives`` are then
            unused.
        fanouts: neighbours per hop of the training sample (``-1``: all).
        batch_size: positive edges per mini-batch (per rank under data parallelism).
        num_negatives: negatives per positive edge in training, ``k``.
        negatives: ``"uniform"``, ``"strict"`` (never a training edge) or ``"shared"``
            (one set of ``k`` per batch); see :mod:`lightgraph.data.loader.negative_sampling`.
        exclude_seed_edges: remove each batch's positive edges and their reverses from its
            sample (the default; ``False`` lets the model see the edges it predicts).
        val_ratio, test_ratio, undirected, remove_reverse, split_mode, observed_ratio: the
            edge split (:func:`~lightgraph.data.datasets.link_split.random_link_split`:
            ``split_mode`` is its ``mode``, ``"transductive"`` or ``"inductive"`` by
            node).
        first_stage: ``None`` (one-stage neighbour sampling, NS) or a
            :class:`~lightgraph.data.loader.first_stage.LargeBatchSampler`: JOESTAR's
            large-batch sampling over seed edges (``ratio`` of the training edges per
            macro-batch, sampled with ``fanouts``; mini-batches sampled inside it with its
            ``second_stage_fanouts``, all neighbours by default).
        prefetch: with ``first_stage``, build the next macro-batch in a background thread.
        eval_negatives: uniform negative destinations per validation/test query, ``K``.
        embedding_channels: the encoder's output size (the CLI links it into the model's
            ``out_channels``, as it links ``num_classes`` for node tasks).
        cache_dir: where the split is cached.
        seed: seed of the split, the training order, the samples and the negatives.

    Under a data-parallel strategy every rank trains its share of each epoch's shuffled
    positive edges (disjoint, equally many steps, at most ``N - 1`` edges left out per
    epoch) and evaluates its share of the queries; the metrics are summed over the ranks.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        fanouts: Sequence[int] = (15, 10),
        batch_size: int = 1024,
        num_negatives: int = 1,
        negatives: NegativeMode = "uniform",
        exclude_seed_edges: bool = True,
        val_ratio: float = 0.05,
        test_ratio: float = 0.1,
        undirected: bool | None = None,
        remove_reverse: bool = True,
        split_mode: LinkSplitMode = "transductive",
        observed_ratio: float = 0.5,
        first_stage: LargeBatchSampler | None = None,
        prefetch: bool = True,
        eval_negatives: int = 100,
        embedding_channels: int = 64,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        owner = "LinkNeighborSamplingDataModule"
        self.dataset = check_type(owner, "dataset", dataset, GraphDataset)
        self.fanouts = check_fanouts(owner, list(fanouts))
        self.batch_size = check_int(owner, "batch_size", batch_size, low=1)
        self.negative_sampler = NegativeSampler(
            check_choice(owner, "negatives", negatives, NEGATIVE_MODES),
            check_num_negatives(owner, num_negatives),
        )
        self.exclude_seed_edges = check_bool(owner, "exclude_seed_edges", exclude_seed_edges)
        for name, value in (("val_ratio", val_ratio), ("test_ratio", test_ratio)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ValueError(
                    f"{owner}: expected `{name}` in (0, 1) (evaluation needs query edges) but got "
                    f"{value!r}."
                )
        self.val_ratio, self.test_ratio = float(val_ratio), float(test_ratio)
        self.undirected = (
            None if undirected is None else check_bool(owner, "undirected", undirected)
        )
        self.remove_reverse = check_bool(owner, "remove_reverse", remove_reverse)
        self.split_mode = check_choice(owner, "split_mode", split_mode, LINK_SPLIT_MODES)
        self.observed_ratio = observed_ratio  # checked by random_link_split
        self._stage_two_fanouts: list[int] = []
        if first_stage is not None:
            check_type(owner, "first_stage", first_stage, LargeBatchSampler, "or None for NS")
            # Checked against the model's fanouts here, once; stage 2 reads them every step.
            self._stage_two_fanouts = first_stage.stage_two_fanouts(self.fanouts, owner)
        self.first_stage = first_stage
        self.prefetch = check_bool(owner, "prefetch", prefetch)
        if (
            isinstance(eval_negatives, bool)
            or not isinstance(eval_negatives, int)
            or eval_negatives < 1
        ):
            raise ValueError(
                f"{owner}: MRR and Hits@K rank every query against negatives: expected "
                f"`eval_negatives` to be an integer >= 1 but got {eval_negatives!r}."
            )
        self.eval_negatives = eval_negatives
        self.embedding_channels = check_int(owner, "embedding_channels", embedding_channels, low=1)
        self.seed = int(seed)
        self.split: LinkSplit | None = None
        self._graphs: dict[str, tuple[Tensor, Tensor]] = {}
        self._x: Tensor | None = None
        self._known: KnownEdges | None = None
        self._negatives: dict[str, Any] | None = None  # a benchmark's evaluation negatives
        self._train_loader: LinkNeighborSamplingLoader | MultistageLoader | None = None
        self._train_loader_shard: DataParallelShard | None = None
        self._plans: dict[tuple[DataParallelShard, int], EpochPlan] = {}

    @property
    def num_outputs(self) -> int:
        """The encoder's output size (``embedding_channels``), linked into the model."""
        return self.embedding_channels

    @property
    def num_relations(self) -> int:
        """Relation types of the edges (the dataset's; 0: none), linked into the model."""
        return self.dataset.num_relations

    # --------------------------------------------------------------- CachedDataModule
    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": _CACHE_FORMAT,
            "dataset": self.dataset.fingerprint(),
            "val_ratio": self.val_ratio,
            "test_ratio": self.test_ratio,
            "undirected": self.undirected,
            "remove_reverse": self.remove_reverse,
            "split_mode": self.split_mode,
            "observed_ratio": self.observed_ratio if self.split_mode == "inductive" else None,
            "seed": self.seed,
        }

    def cache_name(self) -> str:
        return f"LinkSplit-{type(self.dataset).__name__}"

    def build(self, writer: CacheWriter) -> dict[str, Any]:
        start = time.perf_counter()
        data = ensure_edge_index(self.dataset.load())
        official = self.dataset.official_link_split()
        if official is not None:  # a benchmark's own split and negatives
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
                mode=self.split_mode,
                observed_ratio=self.observed_ratio,
                edge_type=getattr(data, "edge_type", None),
            )
        writer.save("x.pt", data.x.contiguous())
        writer.save("split.pt", split.state_dict())
        for name in ("train", "val", "test"):
            indptr, indices = to_csc(split.message_edges(name), split.num_nodes)
            writer.save(f"{name}_csc.pt", {"indptr": indptr, "indices": indices})
        return {
            "num_nodes": split.num_nodes,
            "undirected": split.undirected,
            "inductive": split.inductive,
            "official": official is not None,
            "edges": {s: int(split.positives(s).size(1)) for s in ("train", "val", "test")},
            "seconds": round(time.perf_counter() - start, 3),
        }

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        self._x = cache.load("x.pt")
        self._negatives = cache.load("negatives.pt") if "negatives.pt" in cache.files else None
        self.split = LinkSplit(**cache.load("split.pt"))
        for name in ("train", "val", "test"):
            csc = cache.load(f"{name}_csc.pt")
            self._graphs[name] = (csc["indptr"], csc["indices"])

    def is_loaded(self) -> bool:
        return self.split is not None

    # --------------------------------------------------------------------- loaders
    def _loaded_split(self) -> LinkSplit:
        if self.split is None:
            raise RuntimeError(
                "LinkNeighborSamplingDataModule: the split is not loaded yet; call `setup()` "
                "(the Trainer does) before asking for data."
            )
        return self.split

    def known_edges(self) -> KnownEdges:
        """The edges ``"strict"`` negatives avoid: the training graph's (no held-out edge is
        revealed by never being drawn)."""
        if self._known is None:
            split = self._loaded_split()
            edges = torch.cat([split.message_edges("train"), split.train.flip(0)], dim=1)
            self._known = KnownEdges(edges, split.num_nodes)
        return self._known

    def train_loader(self) -> LinkNeighborSamplingLoader | MultistageLoader:
        """The (single, stateful) training loader of this rank's :attr:`data_shard`."""
        split = self._loaded_split()
        shard = self.data_shard
        if self._train_loader is not None and self._train_loader_shard == shard:
            return self._train_loader
        if self._train_loader is not None:
            self._train_loader.close()
        known = self.known_edges() if self.negative_sampler.mode == "strict" else None
        indptr, indices = self._graphs["train"]
        assert self._x is not None
        if self.first_stage is None:
            loader: LinkNeighborSamplingLoader | MultistageLoader = LinkNeighborSamplingLoader(
                indptr,
                indices,
                self._x,
                split.train,
                self.fanouts,
                self.batch_size,
                self.negative_sampler,
                known=known,
                exclude=self.exclude_seed_edges,
                seed=self.seed,
                rank=shard.rank,
                world_size=shard.world_size,
                rel=split.train_rel,
            )
        else:
            loader = MultistageLoader(
                lambda epoch, k: self.build_macro_batch(epoch, k, shard),
                lambda epoch: [m.trained for m in self._epoch_plan(epoch, shard).macros],
                self.batch_size,
                steps=lambda epoch: [
                    m.steps(self.batch_size) for m in self._epoch_plan(epoch, shard).macros
                ],
                prefetch=self.prefetch,
                sized=True,
                world_size=shard.world_size,
                dropped=lambda epoch: self._epoch_plan(epoch, shard).dropped,
            )
        self._train_loader, self._train_loader_shard = loader, shard
        return loader

    # ------------------------------------------------------- JOESTAR's two stages
    def _epoch_plan(self, epoch: int, shard: DataParallelShard) -> EpochPlan:
        """``shard``'s macro-batches of ``epoch``: LBS's plan over the training edge ids."""
        key = (shard, epoch)
        plan = self._plans.get(key)
        if plan is None:
            assert self.first_stage is not None
            edges = torch.arange(self._loaded_split().train.size(1))
            plan = self.first_stage.plan(edges, None, epoch, shard, self.seed, self.batch_size)
            self._plans = {k: v for k, v in self._plans.items() if k[1] >= epoch - 1}
            self._plans[key] = plan
        return plan

    def build_macro_batch(self, epoch: int, k: int, shard: DataParallelShard) -> LinkMacroBatch:
        """Stage 1 of macro-batch ``k`` of ``epoch`` of ``shard``'s rank."""
        assert self.first_stage is not None and self._x is not None
        split = self._loaded_split()
        indptr, indices = self._graphs["train"]
        stream = (epoch, k) if shard.world_size == 1 else (epoch, k, "rank", shard.rank)
        return build_link_macro_batch(
            (indptr, indices, self._x),
            split.train,
            self._epoch_plan(epoch, shard).macros[k],
            self.fanouts,
            self.negative_sampler,
            self.seed,
            stream,
            self.batch_size,
            known=self.known_edges() if self.negative_sampler.mode == "strict" else None,
            num_threads=self.first_stage.num_sampler_threads,
            epoch=epoch,
            index=k,
            rel=split.train_rel,
        )

    def stage_two(self, step: StagedStep) -> Any:
        """The mini-batch ``Data`` of a staged step, sampled inside its macro-batch."""
        assert self.first_stage is not None
        shard = self._train_loader_shard
        rank = None if shard is None or shard.world_size == 1 else shard.rank
        return link_stage_two(
            step.macro,
            step.step,
            self._stage_two_fanouts,
            self.seed,
            rank,
            exclude=self.exclude_seed_edges,
        )

    def train_dataloader(self) -> Any:
        loader = super().train_dataloader()
        if isinstance(loader, MultistageLoader):
            # The position moves when a step reaches the model, not when Lightning fetches.
            loader.handover = "reported" if self.trainer is not None else "on-yield"
        return loader

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if isinstance(batch, StagedStep):
            loader = self._train_loader
            if loader is not None and loader.handover == "reported":
                loader.hand_over()
            # Stage 2 on the host; the sampled batch then moves to the device.
            return self.stage_two(batch)
        return batch

    def teardown(self, stage: str) -> None:
        if self._train_loader is not None:
            self._train_loader.close()
        super().teardown(stage)

    def eval_batch(self, split_name: str) -> LinkEvalBatch:
        """The evaluation batch of ``"val"`` or ``"test"``."""
        split = self._loaded_split()
        indptr, indices = self._graphs[split_name]
        pos = split.positives(split_name)
        assert self._x is not None
        given = self._negatives or {}
        shared = bool(given.get("shared", False))
        return LinkEvalBatch(
            split_name,
            indptr,
            indices,
            self._x,
            pos[0],
            pos[1],
            neg=None if shared else given.get(split_name),  # drawn when the split has none
            num_negatives=self.eval_negatives,
            seed=self.seed,
            shared_neg=given.get(split_name) if shared else None,
            rel=split.relations(split_name),
        )

    def loader(self, split: str) -> Iterable[Any]:
        if split == "train":
            return self.train_loader()
        return FixedBatchLoader([self.eval_batch("test" if split == "predict" else split)])

    def io_stats(self) -> dict[str, float]:
        """The training loader's counters (``targets`` are positive edges)."""
        return {} if self._train_loader is None else self._train_loader.stats_dict()
