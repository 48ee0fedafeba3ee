"""Node-level token sequences for graph transformers (TorchGT), and the batch they travel in.

A graph too large for one attention pass is cut into *node sequences* (TorchGT, thesis
ch. 4, §4.3.2-4.3.3): the nodes are reordered with METIS so that every cluster occupies a
contiguous range of ids, then cut into consecutive sequences of ``sequence_length``
nodes. Each sequence becomes one :class:`TokenBatch`: its tokens (an optional global
token first, then the nodes), their features, labels and masks, the in/out-degree of
every node inside the sequence (Graphormer's centrality encoding) and the
:class:`~lightgraph.nn.attention.AttentionGraph` of the *whole* sequence -- the induced
subgraph, self-loops and global-token edges, with a bias bucket for every entry.

Attention-bias buckets (rows of a model's per-head bias table), shared by every data
module of lightgraph:

===================================  ===========================================
bucket                                pairs (query ``i``, key ``j``)
===================================  ===========================================
``SELF_BUCKET = 0``                   ``i == j``
``EDGE_BUCKET = 1``                   an edge ``j -> i`` (shortest path 1)
``GLOBAL_BUCKET = 2``                 a global token and any other token
``FAR_BUCKET = 3``                    pairs added by a cluster-sparse transfer
``2 + d`` for ``2 <= d <= D``         shortest path ``d`` (longer paths clip to ``D``)
``D + 3``                             no path from ``j`` to ``i``
``D + 4 = num_buckets(D)``            *masked* (different graphs of one batch)
===================================  ===========================================

with ``D = max_distance``. A model holds ``num_buckets(D)`` learned rows and appends a
constant ``-inf`` row for the masked bucket, so dense kinds (which have no mask) never
attend across the graphs of a batch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor

from lightgraph.data.graph_dataset import MASK_NAMES, GraphDataset, validate_graph
from lightgraph.data.partitioner import partition_graph
from lightgraph.data.synthetic_graph import SyntheticGraph
from lightgraph.functional.sequence_parallel import shard_range
from lightgraph.nn.attention import AttentionGraph

__all__ = [
    "EDGE_BUCKET",
    "FAR_BUCKET",
    "GLOBAL_BUCKET",
    "SELF_BUCKET",
    "NodeSequenceDataModule",
    "TokenBatch",
    "build_sequence",
    "distance_buckets",
    "laplacian_pe",
    "num_buckets",
]

log = logging.getLogger(__name__)

SELF_BUCKET = 0
EDGE_BUCKET = 1
GLOBAL_BUCKET = 2
FAR_BUCKET = 3
REORDERS = ("metis", "none")
_CACHE_FORMAT = 1
_CLUSTERS_PER_SEQUENCE = 8  # the thesis's k = 8 clusters per sequence (RTX 3090, d = 64)
_TOKEN_FIELDS = (
    "x",
    "is_global",
    "in_degree",
    "out_degree",
    "train_mask",
    "val_mask",
    "test_mask",
    "node_ids",
    "graph_index",
    "lap_pe",
)


def num_buckets(max_distance: int) -> int:
    """Learned bias buckets for ``max_distance`` (the masked bucket is this number)."""
    return max_distance + 4


def check_max_distance(owner: str, max_distance: Any) -> int:
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 2:
        raise ValueError(
            f"{owner}: expected `max_distance` to be an integer >= 2 (distance 1 is the edge "
            f"bucket) but got {max_distance!r}."
        )
    if max_distance > 120:
        raise ValueError(
            f"{owner}: expected `max_distance` <= 120 (buckets are cached as int8) but got "
            f"{max_distance!r}."
        )
    return max_distance


@dataclass(eq=False)
class TokenBatch:
    """One token sequence (or one rank's shard of it) as the graph transformers consume it.

    Token-wise fields hold the tokens ``token_range = [start, end)`` of the full sequence
    (all of them outside graph parallelism); ``graph`` always describes the *full* sequence,
    since every rank attends over all tokens after the all-to-all.

    Attributes:
        x: ``[S_r, F]`` float token features (zeros for global tokens).
        graph: the attention pattern of the full sequence of ``S`` tokens.
        is_global: ``[S_r]`` bool, which tokens are global tokens (learned embeddings).
        in_degree, out_degree: ``[S_r]`` long degrees inside the sequence (or graph),
            clipped to the data module's ``max_degree``; 0 for global tokens.
        y: node-level: ``[S_r]`` targets of the tokens (ignored where no mask is set);
            graph-level: ``[num_graphs]`` targets of the graphs.
        train_mask, val_mask, test_mask: ``[S_r]`` bool (node-level); global tokens are
            never labelled.
        node_ids: ``[S_r]`` long node id in the source graph (``-1`` for global tokens).
        graph_index: ``[S_r]`` long graph of every token (graph-level batches).
        readout_index: ``[num_graphs]`` long position of every graph's global token in the
            full sequence (graph-level batches with global tokens).
        lap_pe: ``[S_r, k]`` Laplacian eigenvector positional encodings (zeros for global
            tokens), when a model asked for them.
        token_range: ``(start, end)`` of the tokens held here.
        global_counts: labelled tokens of the *full* sequence per mask name, so a shard can
            normalise its loss without communication.
        num_buckets: learned bias buckets the pattern was built for (``max_distance + 4``).
        index: position of the sequence in its data module.
    """

    x: Tensor
    graph: AttentionGraph
    is_global: Tensor
    in_degree: Tensor
    out_degree: Tensor
    y: Tensor | None = None
    train_mask: Tensor | None = None
    val_mask: Tensor | None = None
    test_mask: Tensor | None = None
    node_ids: Tensor | None = None
    graph_index: Tensor | None = None
    readout_index: Tensor | None = None
    lap_pe: Tensor | None = None
    token_range: tuple[int, int] = (0, 0)
    global_counts: dict[str, int] = field(default_factory=dict)
    num_buckets: int = 0
    index: int = 0

    def __post_init__(self) -> None:
        if self.token_range == (0, 0):
            self.token_range = (0, self.graph.num_tokens)

    @property
    def num_tokens(self) -> int:
        """Tokens of the full sequence (``S``)."""
        return self.graph.num_tokens

    @property
    def num_local_tokens(self) -> int:
        """Tokens held here (``S_r``)."""
        return self.x.size(0)

    @property
    def is_sharded(self) -> bool:
        """Whether this batch holds only a shard of the sequence's tokens."""
        return self.token_range != (0, self.num_tokens)

    @property
    def num_graphs(self) -> int:
        """Graphs in a graph-level batch (1 for a node sequence)."""
        if self.readout_index is not None:
            return self.readout_index.numel()
        if self.graph_index is not None and self.graph_index.numel():
            return int(self.graph_index.max()) + 1
        return 1

    @property
    def device(self) -> torch.device:
        return self.x.device

    def select_shard(self, world_size: int, rank: int) -> TokenBatch:
        """The tokens :func:`~lightgraph.functional.sequence_parallel.shard_range` gives
        ``rank`` of ``world_size``; the attention graph stays whole."""
        if self.is_sharded:
            raise ValueError("TokenBatch.select_shard: this batch is already a shard.")
        if self.readout_index is not None or self.graph_index is not None:
            raise ValueError(
                "TokenBatch.select_shard: graph-level batches are data-parallel (one graph "
                "batch per rank); shard node-level sequences only."
            )
        start, end = shard_range(self.num_tokens, world_size, rank)
        sliced = {
            name: getattr(self, name)[start:end].clone()
            for name in _TOKEN_FIELDS
            if getattr(self, name) is not None
        }
        if self.y is not None:
            sliced["y"] = self.y[start:end].clone()
        return replace(self, token_range=(start, end), **sliced)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TokenBatch:
        """A copy on ``device``; the attention graph's copy is cached on the graph, so its
        derived data (sorted pattern, layouts, conditions) survives between epochs."""
        device = torch.device(device)
        if self.x.device == device:
            return self
        key = ("to", str(device))
        graph = self.graph.cache.get(key)
        if graph is None:
            graph = self.graph.to(device)
            self.graph.cache[key] = graph
        moved: dict[str, Any] = {"graph": graph}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                moved[f.name] = value.to(device, non_blocking=non_blocking)
        return replace(self, **moved)


# ------------------------------------------------------------------------------ builders
def _laplacian_from_edges(edge_index: Tensor, num_nodes: int, k: int, seed: int) -> Tensor:
    """``[num_nodes, k]`` eigenvectors of the symmetric normalised Laplacian (zero padded)."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddLaplacianEigenvectorPE

    pe = torch.zeros(num_nodes, k)
    if num_nodes < 2:
        return pe
    src, dst = edge_index
    undirected = bool(
        torch.equal(
            torch.sort(src * num_nodes + dst).values, torch.sort(dst * num_nodes + src).values
        )
    )
    usable = min(k, num_nodes - 2 if num_nodes >= 100 else num_nodes - 1)
    if usable < 1:
        return pe
    transform = AddLaplacianEigenvectorPE(usable, attr_name="lap_pe", is_undirected=undirected)
    # PyG draws a random sign per eigenvector from the global generator: pin it.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        out = transform(Data(edge_index=edge_index, num_nodes=num_nodes))
    values = out.lap_pe.to(torch.float32)
    pe[:, : values.size(1)] = values
    return pe


def laplacian_pe(edge_index: Tensor, num_nodes: int, k: int, seed: int = 0) -> Tensor:
    """Dwivedi & Bresson's Laplacian positional encodings of one graph.

    The ``k`` eigenvectors of :math:`L = I - D^{-1/2} A D^{-1/2}` after the trivial one
    (smallest eigenvalues first), computed with
    :class:`torch_geometric.transforms.AddLaplacianEigenvectorPE`; graphs with fewer than
    ``k + 1`` (``k + 2`` from 100 nodes, for ARPACK) nodes get zero columns at the end.
    The sign of every eigenvector is arbitrary: models flip it at random in training.

    Returns:
        ``[num_nodes, k]`` float32.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"laplacian_pe: expected `k` to be a positive integer but got {k!r}.")
    return _laplacian_from_edges(edge_index, num_nodes, k, seed)


def distance_buckets(edge_index: Tensor, num_nodes: int, max_distance: int) -> Tensor:
    """Bias buckets of all node pairs of one graph from shortest-path distances.

    ``out[i, j]`` is the bucket of query ``i`` and key ``j`` (see the module docstring):
    the length ``d`` of the shortest path from ``j`` to ``i`` along ``edge_index``
    (messages flow from row 0 to row 1), clipped to ``max_distance``, or the
    "unreachable" bucket. Distances come from a bounded breadth-first search
    (:func:`scipy.sparse.csgraph.dijkstra` with ``unweighted=True`` and
    ``limit=max_distance``); whether a longer path exists is read off the connected
    components (undirected graphs) or an unbounded search (directed graphs).

    Returns:
        ``[num_nodes, num_nodes]`` long.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components, dijkstra

    check_max_distance("distance_buckets", max_distance)
    n = num_nodes
    out = torch.full((n, n), max_distance + 3, dtype=torch.long)
    if n == 0:
        return out
    src, dst = edge_index.numpy()
    adjacency = csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
    dist = dijkstra(adjacency, directed=True, unweighted=True, limit=max_distance + 0.5)
    keys = np.sort(src.astype(np.int64) * n + dst)
    undirected = bool(np.array_equal(keys, np.sort(dst.astype(np.int64) * n + src)))
    if undirected:
        _, label = connected_components(adjacency, directed=False)
        reachable = label[:, None] == label[None, :]
    else:
        reachable = np.isfinite(dijkstra(adjacency, directed=True, unweighted=True))
    d = np.where(np.isfinite(dist), dist, max_distance)  # reachable but farther: clip
    bucket = np.where(d <= 1, d, d + 2).astype(np.int64)  # 0 self, 1 edge, d + 2 beyond
    bucket = np.where(reachable, bucket, max_distance + 3)
    # dist[j, i] runs from key j to query i: transpose to (query, key).
    out.copy_(torch.from_numpy(np.ascontiguousarray(bucket.T)))
    return out


def _pattern(edges: Tensor, num_nodes: int, global_token: bool) -> tuple[Tensor, Tensor, int]:
    """Graph edges + self-loops + global edges, sorted by query then key, with buckets.

    ``edges`` must be sorted by target then source, without duplicates or self-loops; the
    other entries are merged in by computing every entry's position (no sort).
    """
    g = int(global_token)
    S = num_nodes + g
    src, dst = edges[0] + g, edges[1] + g
    E = src.numel()
    in_deg = torch.bincount(dst, minlength=S)
    row_len = in_deg + 1 + g  # graph entries, the self-loop and the global token's entry
    if g:
        row_len[0] = S  # the global token attends to every token
    row_start = torch.cumsum(row_len, 0) - row_len
    edge_row_start = torch.cumsum(in_deg, 0) - in_deg
    below = torch.bincount(dst[src < dst], minlength=S)  # keys smaller than the query
    total = int(row_len.sum())
    key = torch.empty(total, dtype=torch.long)
    query = torch.empty(total, dtype=torch.long)
    bucket = torch.empty(total, dtype=torch.long)
    # Graph edges: after the global entry, shifted by one past the self-loop.
    rank = torch.arange(E) - edge_row_start[dst]
    pos = row_start[dst] + g + rank + (src > dst).long()
    key[pos], query[pos], bucket[pos] = src, dst, EDGE_BUCKET
    # Self-loops.
    tokens = torch.arange(S)
    pos = row_start + g + below
    if g:
        pos[0] = 0
    key[pos], query[pos], bucket[pos] = tokens, tokens, SELF_BUCKET
    if g:
        nodes = tokens[1:]
        pos = row_start[1:]  # key 0 comes first in every node's row
        key[pos], query[pos], bucket[pos] = 0, nodes, GLOBAL_BUCKET
        pos = nodes  # the global token's row: keys 1 .. S-1 after its self-loop
        key[pos], query[pos], bucket[pos] = nodes, 0, GLOBAL_BUCKET
    return torch.stack([key, query]), bucket, S


def build_sequence(
    x: Tensor,
    edge_index: Tensor,
    *,
    y: Tensor | None = None,
    masks: dict[str, Tensor] | None = None,
    node_ids: Tensor | None = None,
    global_token: bool = True,
    max_degree: int = 64,
    max_distance: int = 5,
    dense_limit: int = 2048,
    pe_dim: int = 0,
    seed: int = 0,
    index: int = 0,
) -> TokenBatch:
    """The :class:`TokenBatch` of one node sequence (an induced subgraph).

    Args:
        x: ``[n, F]`` node features.
        edge_index: ``[2, E]`` edges among the ``n`` nodes (local ids, messages from row 0
            to row 1). Self-loops and duplicates are dropped (the pattern adds one
            self-loop per token).
        y: ``[n]`` node targets.
        masks: ``train_mask``/``val_mask``/``test_mask`` of the nodes.
        node_ids: ``[n]`` ids in the source graph.
        global_token: prepend a global token (token 0) that attends to and is attended by
            every node.
        max_degree: degrees are clipped to this value.
        max_distance: shortest paths longer than this share its bucket.
        dense_limit: ``dense_bucket`` (``[S, S]``) is built only for ``S <= dense_limit``.
        pe_dim: Laplacian eigenvectors to add as ``lap_pe`` (0: none).
        seed: seed of the eigenvector signs.
        index: position of the sequence.
    """
    n = x.size(0)
    g = int(global_token)
    keep = edge_index[0] != edge_index[1]
    key = edge_index[1, keep] * n + edge_index[0, keep]
    if key.numel() > 1 and not bool((key[1:] > key[:-1]).all()):
        key = torch.unique(key)  # sorted by target, then source; duplicates dropped
    edges = torch.stack([key % n, key // n])
    pattern, bucket, S = _pattern(edges, n, global_token)
    dense = None
    if S <= dense_limit:
        dense = torch.full((S, S), GLOBAL_BUCKET, dtype=torch.long)
        dense[g:, g:] = distance_buckets(edges, n, max_distance)
        if g:
            dense[0, 0] = SELF_BUCKET
    graph = AttentionGraph(S, pattern, bucket, dense, far_bucket=FAR_BUCKET)

    def pad(values: Tensor | None, fill: Any) -> Tensor | None:
        if values is None:
            return None
        if not g:
            return values
        head = torch.full((1,) + tuple(values.shape[1:]), fill, dtype=values.dtype)
        return torch.cat([head, values])

    in_degree = torch.bincount(edges[1], minlength=n).clamp_(max=max_degree)
    out_degree = torch.bincount(edges[0], minlength=n).clamp_(max=max_degree)
    masks = masks or {}
    full_masks = {name: pad(masks.get(name), False) for name in MASK_NAMES}
    counts = {name: int(m.sum()) for name, m in full_masks.items() if m is not None}
    pe = None
    if pe_dim:
        pe = pad(_laplacian_from_edges(edges, n, pe_dim, seed + index), 0.0)
    is_global = torch.zeros(S, dtype=torch.bool)
    is_global[:g] = True
    return TokenBatch(
        x=pad(x, 0.0),
        graph=graph,
        is_global=is_global,
        in_degree=pad(in_degree, 0),
        out_degree=pad(out_degree, 0),
        y=pad(y, 0) if y is not None and y.dim() == 1 else pad(y, 0.0),
        node_ids=pad(node_ids if node_ids is not None else torch.arange(n), -1),
        lap_pe=pe,
        global_counts=counts,
        num_buckets=num_buckets(max_distance),
        index=index,
        **full_masks,
    )


def metis_order(edge_index: Tensor, num_nodes: int, num_clusters: int, seed: int = 0) -> Tensor:
    """Node order (new position -> old id) with METIS clusters contiguous: by part, then id."""
    part = partition_graph(edge_index, num_nodes, num_clusters, "metis", seed)
    return torch.argsort(part * num_nodes + torch.arange(num_nodes))


def split_sequences(
    edge_index: Tensor, order: Tensor, sequence_length: int
) -> tuple[list[Tensor], list[Tensor]]:
    """Cut the reordered nodes into consecutive sequences; keep the edges inside each.

    Returns:
        per sequence, the old node ids in token order and the ``[2, E_s]`` edges in local
        ids (duplicates and self-loops removed, sorted by target then source).
    """
    n = order.numel()
    position = torch.empty_like(order)
    position[order] = torch.arange(n)
    src, dst = position[edge_index[0]], position[edge_index[1]]
    seq = dst // sequence_length
    keep = (src // sequence_length == seq) & (src != dst)
    src, dst, seq = src[keep], dst[keep], seq[keep]
    # One sort groups edges by sequence (ids are contiguous per sequence) and orders
    # each group by target then source; duplicates become neighbours.
    key = torch.unique(dst * n + src)
    src, dst = key % n, key // n
    seq = dst // sequence_length
    num_seq = math.ceil(n / sequence_length)
    counts = torch.bincount(seq, minlength=num_seq).tolist()
    nodes, edges = [], []
    for s, (s_src, s_dst) in enumerate(zip(src.split(counts), dst.split(counts), strict=True)):
        offset = s * sequence_length
        nodes.append(order[offset : offset + sequence_length])
        edges.append(torch.stack([s_src - offset, s_dst - offset]))
    return nodes, edges


# ------------------------------------------------------------------------- data module
class _Sequences:
    """Yields every sequence once per epoch (in order, the same on every rank)."""

    def __init__(self, items: Sequence[TokenBatch]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[TokenBatch]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def _sequence_parallel_of(trainer: Any) -> tuple[int, int]:
    """``(world_size, rank)`` of the strategy's sequence parallelism, ``(1, 0)`` without."""
    if trainer is None:
        return 1, 0
    try:
        sp = getattr(trainer.strategy, "sequence_parallel", None)
    except RuntimeError:  # the strategy is not set up yet
        return 1, 0
    if sp is None or sp.world_size <= 1:
        return 1, 0
    return int(sp.world_size), int(sp.rank)


def model_pe_dim(trainer: Any) -> int:
    """Laplacian PE columns the Trainer's model asks for (``requires_laplacian_pe``)."""
    module = getattr(trainer, "lightning_module", None) if trainer is not None else None
    model = getattr(module, "model", module)
    if model is not None and getattr(model, "requires_laplacian_pe", False):
        return int(model.pe_dim)
    return 0


class NodeSequenceDataModule(pl.LightningDataModule):
    """Node-level token sequences of one large graph for graph transformers (TorchGT).

    ``prepare_data`` (one process per machine) loads the graph, reorders its nodes so
    METIS clusters are contiguous (cluster-aware, TorchGT §4.3.3), cuts them into
    consecutive sequences of ``sequence_length`` nodes (the last one shorter) and caches
    one :class:`TokenBatch` per sequence: features, labels, masks, in/out-degrees within
    the sequence, and the full :class:`~lightgraph.nn.attention.AttentionGraph` -- edges of
    the induced subgraph, self-loops and, with ``global_token``, edges between token 0 and
    every node in both directions. Bias buckets follow the module docstring
    (``far_bucket = 3``); ``dense_bucket`` holds shortest-path buckets when the sequence
    has at most ``dense_limit`` tokens.

    ``setup`` loads the sequences; under a strategy with a ``sequence_parallel`` of
    ``P > 1`` ranks (``GraphParallelStrategy``) every rank keeps the token shard
    :func:`~lightgraph.functional.sequence_parallel.shard_range` gives it (features,
    labels, masks, degrees, positional encodings) plus the whole attention graph. Every
    epoch each dataloader yields every sequence once, in the same order on every rank
    (training uses the train mask; validation and test evaluate the same sequences with
    their masks). The loaders are plain iterables, so Lightning never re-shards them.

    Laplacian positional encodings (``lap_pe``) are added when the model asks for them
    (``requires_laplacian_pe`` and ``pe_dim``, as :class:`~lightgraph.nn.graph_transformer.GT`
    does) or when ``laplacian_pe`` is set.

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
        laplacian_pe: Laplacian eigenvectors per token; ``None`` asks the model.
        cache_dir: where sequences are cached, keyed by the configuration.
        seed: seed of METIS and of the eigenvector signs.
    """

    def __init__(
        self,
        dataset: GraphDataset | None = None,
        sequence_length: int = 4096,
        global_token: bool = True,
        reorder: Literal["metis", "none"] = "metis",
        num_clusters: int | None = None,
        max_degree: int = 64,
        max_distance: int = 5,
        dense_limit: int = 2048,
        laplacian_pe: int | None = None,
        cache_dir: str = "lightgraph_cache",
        seed: int = 0,
    ) -> None:
        super().__init__()
        owner = "NodeSequenceDataModule"
        dataset = SyntheticGraph() if dataset is None else dataset
        if not isinstance(dataset, GraphDataset):
            raise TypeError(
                f"{owner}: expected `dataset` to be a lightgraph GraphDataset (e.g. "
                f"SyntheticGraph, RealDataset) but got {type(dataset).__name__}."
            )
        if dataset.multilabel:
            raise ValueError(
                f"{owner}: expected a single-label `dataset` but {type(dataset).__name__} is "
                f"multi-label; graph transformers here train single-label classification."
            )
        for name, value, low in (
            ("sequence_length", sequence_length, 1),
            ("max_degree", max_degree, 1),
            ("dense_limit", dense_limit, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(
                    f"{owner}: expected `{name}` to be an integer >= {low} but got {value!r}."
                )
        if reorder not in REORDERS:
            raise ValueError(
                f"{owner}: expected `reorder` to be one of {REORDERS} but got {reorder!r}."
            )
        if num_clusters is not None and (
            isinstance(num_clusters, bool) or not isinstance(num_clusters, int) or num_clusters < 1
        ):
            raise ValueError(
                f"{owner}: expected `num_clusters` to be None or a positive integer but got "
                f"{num_clusters!r}."
            )
        if laplacian_pe is not None and (
            isinstance(laplacian_pe, bool) or not isinstance(laplacian_pe, int) or laplacian_pe < 0
        ):
            raise ValueError(
                f"{owner}: expected `laplacian_pe` to be None or an integer >= 0 but got "
                f"{laplacian_pe!r}."
            )
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
        self.laplacian_pe = laplacian_pe
        self.cache_dir = cache_dir
        self.seed = seed
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

    # ------------------------------------------------------------------------- building
    def _pe_dim(self) -> int:
        return self.laplacian_pe if self.laplacian_pe is not None else model_pe_dim(self.trainer)

    def cache_path(self, pe_dim: int) -> str:
        """Directory holding the cached sequences of this configuration."""
        key = {
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
        }
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        name = f"{type(self.dataset).__name__}-seq{self.sequence_length}-{digest}"
        return os.path.join(self.cache_dir, name)

    def build_sequences(self, pe_dim: int | None = None) -> list[TokenBatch]:
        """Load, reorder and cut the graph; every full sequence (no caching, no sharding).

        Records the seconds of each phase in :attr:`build_seconds`.
        """
        pe_dim = self._pe_dim() if pe_dim is None else pe_dim
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
                )
            )
        seconds["sequences"] = time.perf_counter() - clock
        self.build_seconds = seconds
        return items

    # ------------------------------------------------------------------ Lightning hooks
    def prepare_data(self) -> None:
        pe_dim = self._pe_dim()
        path = self.cache_path(pe_dim)
        if os.path.exists(os.path.join(path, "meta.json")):
            return
        start = time.perf_counter()
        items = self.build_sequences(pe_dim)
        os.makedirs(self.cache_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=self.cache_dir, prefix=".tmp-")
        for item in items:
            torch.save(_to_state(item), os.path.join(tmp, f"seq{item.index:05d}.pt"))
        meta = {
            "dataset": self.dataset.fingerprint(),
            "num_sequences": len(items),
            "tokens": [item.num_tokens for item in items],
            "pattern_entries": [int(item.graph.edge_index.size(1)) for item in items],
            "seconds": {k: round(v, 3) for k, v in self.build_seconds.items()},
            "total_seconds": round(time.perf_counter() - start, 3),
        }
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
        try:
            os.replace(tmp, path)
        except OSError:  # another process finished first: keep its copy
            shutil.rmtree(tmp, ignore_errors=True)
        log.info(
            "Built %d sequences of %s in %.2f s: %s",
            len(items),
            type(self.dataset).__name__,
            meta["total_seconds"],
            path,
        )

    def setup(self, stage: str | None = None) -> None:
        if self.sequences is not None:
            return
        pe_dim = self._pe_dim()
        path = self.cache_path(pe_dim)
        if not os.path.exists(os.path.join(path, "meta.json")):
            self.prepare_data()
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
        world_size, rank = _sequence_parallel_of(self.trainer)
        too_short = [s for s in meta["tokens"] if s < world_size]
        if too_short:
            raise ValueError(
                f"NodeSequenceDataModule: a sequence of {min(too_short)} tokens cannot be split "
                f"over {world_size} graph-parallel ranks; choose a `sequence_length` that leaves "
                f"a longer last sequence (the graph has {sum(meta['tokens'])} tokens)."
            )
        self.sequences = [
            _from_state(os.path.join(path, f"seq{s:05d}.pt"), world_size, rank)
            for s in range(meta["num_sequences"])
        ]

    def _loader(self) -> _Sequences:
        if self.sequences is None:
            raise RuntimeError(
                "NodeSequenceDataModule: call `setup()` before requesting dataloaders."
            )
        return _Sequences(self.sequences)

    def train_dataloader(self) -> _Sequences:
        return self._loader()

    def val_dataloader(self) -> _Sequences:
        return self._loader()

    def test_dataloader(self) -> _Sequences:
        return self._loader()

    def predict_dataloader(self) -> _Sequences:
        return self._loader()


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
