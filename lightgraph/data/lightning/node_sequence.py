"""Node-level token sequences of one large graph for graph transformers (TorchGT).

:class:`NodeSequenceDataModule` cuts a graph into METIS-ordered node sequences
(:mod:`lightgraph.data.partition.sequences`), caches one
:class:`~lightgraph.data.loader.token_batch.TokenBatch` per sequence and serves them, whole or
as the token shard of a graph-parallel rank (:class:`~lightgraph.data.loader.token_batch.TokenShard`).
The bias-bucket layout is that of :mod:`lightgraph.functional.graph_encoding`.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import fields, replace
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from lightgraph.data.datasets.graph_dataset import MASK_NAMES, GraphDataset, validate_graph
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.loader.token_batch import TokenBatch, TokenShard, sequence_parallel_shard
from lightgraph.data.partition.sequences import build_sequence, metis_order, split_sequences
from lightgraph.data.store.cache import CacheReader, CacheWriter
from lightgraph.functional.attention import AttentionGraph
from lightgraph.functional.graph_encoding import (
    check_max_distance,
    num_buckets,
)
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
    check_type,
)

__all__ = ["NodeSequenceDataModule"]

log = logging.getLogger(__name__)

Reorder = Literal["metis", "none"]
REORDERS: tuple[str, ...] = get_args(Reorder)
# 2: the CachedDataModule layout (a manifest of the files in meta.json).
_CACHE_FORMAT = 2
_CLUSTERS_PER_SEQUENCE = 8  # the thesis's k = 8 clusters per sequence (RTX 3090, d = 64)


class NodeSequenceDataModule(CachedDataModule):
    """Node-level token sequences of one large graph for graph transformers (TorchGT).

    ``prepare_data`` (one process per machine) loads the graph, reorders its nodes so
    METIS clusters are contiguous (cluster-aware, TorchGT §4.3.3), cuts them into
    consecutive sequences of ``sequence_length`` nodes (the last one shorter) and caches
    one :class:`~lightgraph.data.loader.token_batch.TokenBatch` per sequence: features, labels,
    masks, in/out-degrees within the sequence, and the full
    :class:`~lightgraph.functional.attention.AttentionGraph` -- edges of the induced
    subgraph, self-loops, with ``global_token`` edges between token 0 and every node in
    both directions, and with ``token_path`` the token-order path: the pairs ``(i, i + 1)``
    and ``(i + 1, i)`` of consecutive tokens that are not yet entries (at most
    ``2 (S - 1)``, bucket ``FAR_BUCKET``), so every sequence has a Hamiltonian path
    (condition C2 of ``kind="dual"``) by construction. Bias buckets follow
    :mod:`lightgraph.functional.graph_encoding` (``far_bucket = 3``); ``dense_bucket``
    holds shortest-path buckets when the sequence has at most ``dense_limit`` tokens.

    ``setup`` loads the sequences and keeps this rank's token shard
    (:func:`~lightgraph.functional.sequence_parallel.shard_range`: features, labels, masks,
    degrees, positional encodings) plus the whole attention graph. The shard is the one the
    Trainer's strategy reports in ``sequence_parallel_kwargs``
    (:func:`~lightgraph.data.loader.token_batch.sequence_parallel_shard`; ``GraphParallelStrategy``
    gives ``{"world_size": P, "rank": r}``, as Lightning's strategies give
    ``distributed_sampler_kwargs``); without a Trainer or such a strategy every token is
    kept. Every epoch each dataloader yields every sequence once, in the same order on
    every rank (training uses the train mask; validation and test evaluate the same
    sequences with their masks). The loaders are plain iterables, so Lightning never
    re-shards them.

    The cache (see :class:`~lightgraph.data.CachedDataModule`) is
    ``<cache_dir>/<DatasetClass>-seq<sequence_length>-<digest>`` with ``seq<s>.pt`` per
    sequence and a ``meta.json`` (token and pattern counts, build times and the manifest
    of the files); its digest covers every argument but ``cache_dir``, ``pe_dim`` and
    ``token_path`` included.

    Laplacian positional encodings (``lap_pe``, ``pe_dim`` columns) are added when
    ``pe_dim > 0``; a model that reads them (e.g. ``GT``) needs the
    same ``pe_dim`` (CLI: ``--data.init_args.pe_dim``). The data module never reads the model.

    Args:
        dataset: the graph (default: ``SyntheticGraph()``); single-label only.
        sequence_length: nodes per sequence; at most the number of nodes (equal: one
            sequence of the whole graph).
        global_token: prepend a global token to every sequence.
        reorder: ``"metis"`` (clusters contiguous) or ``"none"`` (keep node ids).
        num_clusters: METIS parts of the whole graph; ``None``: 8 per sequence (the
            thesis's ``k = 8``), at most the number of nodes.
        max_degree: degrees are clipped to this value (size of the centrality tables).
        max_distance: shortest paths longer than this share a bucket.
        dense_limit: build ``dense_bucket`` for sequences of at most this many tokens.
        pe_dim: Laplacian eigenvectors per token (``lap_pe``); 0: none.
        cache_dir: where sequences are cached, keyed by the configuration.
        seed: seed of METIS and of the eigenvector signs.
        token_path: add the token-order path to every pattern (see above; part of the
            cache key). ``False`` gives the plain topology-induced pattern, on which C2 is
            rarely certified for sequences longer than 16 tokens, so ``kind="dual"`` then
            runs dense attention on most steps.

    Attributes:
        token_shard: the :class:`~lightgraph.data.loader.token_batch.TokenShard` ``setup`` loaded
            (read-only; ``TokenShard()`` before ``setup``).
    """

    def __init__(
        self,
        dataset: GraphDataset | None = None,
        sequence_length: int = 4096,
        global_token: bool = True,
        reorder: Reorder = "metis",
        num_clusters: int | None = None,
        max_degree: int = 64,
        max_distance: int = 5,
        dense_limit: int = 2048,
        pe_dim: int = 0,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
        token_path: bool = True,
    ) -> None:
        super().__init__(cache_dir)
        owner = "NodeSequenceDataModule"
        dataset = SyntheticGraph() if dataset is None else dataset
        check_type(owner, "dataset", dataset, GraphDataset, "e.g. SyntheticGraph, RealDataset")
        if dataset.multilabel:
            raise ValueError(
                f"{owner}: expected a single-label `dataset` but {type(dataset).__name__} is "
                f"multi-label; graph transformers here train single-label classification."
            )
        check_int(owner, "sequence_length", sequence_length)
        check_int(owner, "max_degree", max_degree)
        check_int(owner, "dense_limit", dense_limit, 0)
        check_choice(owner, "reorder", reorder, REORDERS)
        check_optional_int(owner, "num_clusters", num_clusters)
        check_int(owner, "pe_dim", pe_dim, 0)
        check_max_distance(owner, max_distance)
        known = getattr(dataset, "num_nodes", None)
        if isinstance(known, int):
            self._check_length(sequence_length, known)
        self.dataset = dataset
        self.sequence_length = sequence_length
        self.global_token = bool(global_token)
        self.reorder = reorder
        self.num_clusters = num_clusters
        self.max_degree = max_degree
        self.max_distance = max_distance
        self.dense_limit = dense_limit
        self.pe_dim = pe_dim
        self.seed = seed
        self.token_path = check_bool(owner, "token_path", token_path)
        self._token_shard = TokenShard()
        self.sequences: list[TokenBatch] | None = None
        self.build_seconds: dict[str, float] = {}

    @staticmethod
    def _check_length(sequence_length: int, num_nodes: int) -> None:
        if sequence_length > num_nodes:
            raise ValueError(
                f"NodeSequenceDataModule: expected `sequence_length` <= the number of nodes "
                f"({num_nodes}) but got sequence_length={sequence_length}; use "
                f"sequence_length={num_nodes} for one sequence of the whole graph."
            )

    # ----------------------------------------------------------------- sizes for the CLI
    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def num_buckets(self) -> int:
        """Learned bias buckets a model needs (``max_distance + 4``)."""
        return num_buckets(self.max_distance)

    # --------------------------------------------------------------- CachedDataModule
    def fingerprint(self, pe_dim: int | None = None) -> dict[str, Any]:
        """The cache key: every argument but ``cache_dir``, and the format version.

        Args:
            pe_dim: PE columns of the cached sequences (default :attr:`pe_dim`).
        """
        pe_dim = self.pe_dim if pe_dim is None else pe_dim
        return {
            "format": _CACHE_FORMAT,
            "dataset": self.dataset.fingerprint(),
            "sequence_length": self.sequence_length,
            "global_token": self.global_token,
            "reorder": self.reorder,
            "num_clusters": self.num_clusters,
            "max_degree": self.max_degree,
            "max_distance": self.max_distance,
            "dense_limit": self.dense_limit,
            "pe_dim": pe_dim,
            "seed": self.seed,
            "token_path": self.token_path,
        }

    def cache_name(self) -> str:
        return f"{type(self.dataset).__name__}-seq{self.sequence_length}"

    def cache_path(self, pe_dim: int | None = None) -> str:
        """Directory holding the cached sequences of this configuration.

        Args:
            pe_dim: PE columns of the cached sequences (default :attr:`pe_dim`).
        """
        return self.cache_path_for(self.fingerprint(pe_dim), self.cache_name())

    def build_sequences(self, pe_dim: int | None = None) -> list[TokenBatch]:
        """Load, reorder and cut the graph; every full sequence (no caching, no sharding).

        Records the seconds of each phase in :attr:`build_seconds`.

        Args:
            pe_dim: PE columns to add (default :attr:`pe_dim`).
        """
        pe_dim = self.pe_dim if pe_dim is None else pe_dim
        clock = time.perf_counter()
        data = self.dataset.load()
        validate_graph(data, self.dataset.num_classes, False)
        n = int(data.x.size(0))
        self._check_length(self.sequence_length, n)
        seconds = {"load": time.perf_counter() - clock}
        clock = time.perf_counter()
        num_seq = math.ceil(n / self.sequence_length)
        if self.reorder == "metis":
            parts = self.num_clusters or _CLUSTERS_PER_SEQUENCE * num_seq
            order = metis_order(data.edge_index, n, min(parts, n), self.seed)
        else:
            order = torch.arange(n)
        seconds["reorder"] = time.perf_counter() - clock
        clock = time.perf_counter()
        nodes, edges = split_sequences(data.edge_index, order, self.sequence_length)
        items = []
        for s, (ids, e) in enumerate(zip(nodes, edges, strict=True)):
            items.append(
                build_sequence(
                    data.x[ids],
                    e,
                    y=data.y[ids],
                    masks={name: data[name][ids] for name in MASK_NAMES},
                    node_ids=ids,
                    global_token=self.global_token,
                    max_degree=self.max_degree,
                    max_distance=self.max_distance,
                    dense_limit=self.dense_limit,
                    pe_dim=pe_dim,
                    seed=self.seed,
                    index=s,
                    token_path=self.token_path,
                )
            )
        seconds["sequences"] = time.perf_counter() - clock
        self.build_seconds = seconds
        return items

    def build(self, writer: CacheWriter) -> dict[str, Any]:
        """Every sequence as ``seq<s>.pt``; token counts and build times as metadata."""
        start = time.perf_counter()
        items = self.build_sequences(self.pe_dim)
        for item in items:
            writer.save(f"seq{item.index:05d}.pt", _to_state(item))
        meta = {
            "dataset": self.dataset.fingerprint(),
            "num_sequences": len(items),
            "tokens": [item.num_tokens for item in items],
            "pattern_entries": [int(item.graph.edge_index.size(1)) for item in items],
            "seconds": {k: round(v, 3) for k, v in self.build_seconds.items()},
            "total_seconds": round(time.perf_counter() - start, 3),
        }
        log.info(
            "Built %d sequences of %s in %.2f s: %s",
            len(items),
            type(self.dataset).__name__,
            meta["total_seconds"],
            writer.target,
        )
        return meta

    @property
    def token_shard(self) -> TokenShard:
        """The token shard ``setup`` loaded (``TokenShard()``, every token, before)."""
        return self._token_shard

    def rank_and_world_size(self) -> tuple[int, int]:
        """The token shard the Trainer's strategy reports in ``sequence_parallel_kwargs``.

        Not the Trainer's rank and world size: data-parallel ranks each load every token;
        only graph-parallel ranks split the tokens of a sequence. ``(0, 1)`` without a
        Trainer or a graph-parallel strategy.
        """
        shard = sequence_parallel_shard(self.trainer)
        return shard.rank, shard.world_size

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        """Load every cached sequence, keeping the tokens of shard ``rank`` of ``world_size``."""
        meta = cache.meta
        too_short = [s for s in meta["tokens"] if s < world_size]
        if too_short:
            raise ValueError(
                f"NodeSequenceDataModule: a sequence of {min(too_short)} tokens cannot be split "
                f"over {world_size} graph-parallel ranks; choose a `sequence_length` that leaves "
                f"a longer last sequence (the graph has {sum(meta['tokens'])} tokens)."
            )
        sequences = []
        for s in range(meta["num_sequences"]):
            with cache.reading(f"seq{s:05d}.pt") as path:
                sequences.append(_from_state(path, world_size, rank))
        self.sequences = sequences
        self._token_shard = TokenShard(world_size, rank)

    def is_loaded(self) -> bool:
        return self.sequences is not None

    def loader(self, split: str) -> FixedBatchLoader[TokenBatch]:
        """Every sequence once per epoch, for every split (the masks tell them apart)."""
        assert self.sequences is not None
        return FixedBatchLoader(self.sequences)


def _to_state(item: TokenBatch) -> dict[str, Any]:
    graph = item.graph
    state: dict[str, Any] = {
        f.name: getattr(item, f.name) for f in fields(item) if f.name not in ("graph",)
    }
    state["graph"] = {
        "num_tokens": graph.num_tokens,
        "edge_index": graph.edge_index,
        "edge_bucket": graph.edge_bucket,
        # Buckets are small: int8 keeps the cache (and loading) 8x lighter.
        "dense_bucket": None if graph.dense_bucket is None else graph.dense_bucket.to(torch.int8),
        "far_bucket": graph.far_bucket,
    }
    return state


def _from_state(path: str, world_size: int, rank: int) -> TokenBatch:
    state = torch.load(path, mmap=True, weights_only=True)
    g = state.pop("graph")
    dense = g["dense_bucket"]
    graph = AttentionGraph(
        g["num_tokens"],
        g["edge_index"].clone(),
        g["edge_bucket"].clone(),
        None if dense is None else dense.long(),
        far_bucket=g["far_bucket"],
    )
    item = TokenBatch(graph=graph, **state)
    if world_size > 1:
        return item.select_shard(world_size, rank)
    return replace(
        item,
        **{f.name: getattr(item, f.name).clone() for f in fields(item) if _is_tensor(item, f.name)},
    )


def _is_tensor(item: TokenBatch, name: str) -> bool:
    return isinstance(getattr(item, name), Tensor)
