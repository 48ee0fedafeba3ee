"""A set of small graphs whose targets depend on structure only, and its data module.

:class:`SyntheticGraphSet` is the offline graph-level task of lightgraph (the role ZINC
and MalNet play in TorchGT's evaluation: M. Zhang, *Algorithm and System Co-design for
Efficient and Scalable Graph Learning*, PhD thesis, NTU 2026, ch. 4, Table 4.3). Node
features are constant (optionally plus noise), so a model must read the structure. The
generator works in *degree-matched pairs*, so that node count, edge count and the whole
degree sequence carry no information about the target:

1. draw ``n`` uniformly in ``[min_nodes, max_nodes]`` and build a base graph: the ring
   lattice :math:`C_n^2` (node ``i`` linked to ``i +- 1`` and ``i +- 2``, ``n``
   triangles) plus ``n // 5`` random chords;
2. derive two graphs from the base by degree-preserving double-edge swaps
   (``(a, b), (c, d) -> (a, d), (c, b)``), so both have the base's degree sequence;
3. relabel each graph's nodes at random.

The target is the *triangle density* :math:`t = \\#\\text{triangles} / n`:

* ``"classification"``: label ``1`` iff :math:`t \\ge 0.5`. The pair's first graph is
  lightly rewired (``max(1, n // 10)`` random swaps, kept if :math:`t \\ge 0.75`), the
  second greedily (swaps that never add a triangle, kept once :math:`t \\le 0.25`), so
  every pair holds one graph of each class with the same degree sequence and no graph
  falls in the ambiguous band :math:`(0.25, 0.75)`;
* ``"regression"``: the target is :math:`t` itself; the two graphs of a pair take
  independent random numbers of random swaps (``0 .. 2n``).

:class:`GraphSetDataModule` batches such graphs for data-parallel training: per batch one
block-diagonal :class:`~lightgraph.functional.attention.AttentionGraph`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from lightgraph.data.sequences import token_pattern
from lightgraph.data.token_batch import TokenBatch
from lightgraph.functional.attention import AttentionGraph
from lightgraph.functional.graph_encoding import (
    GLOBAL_BUCKET,
    SELF_BUCKET,
    check_max_distance,
    distance_buckets,
    laplacian_pe,
    num_buckets,
)
from lightgraph.utilities.checks import check_int

__all__ = ["GraphSetDataModule", "SyntheticGraphSet", "collate_graphs", "triangle_density"]

Task = Literal["classification", "regression"]
TASKS: tuple[str, ...] = get_args(Task)
_THRESHOLD = 0.5  # class boundary of the triangle density
_HIGH, _LOW = 0.75, 0.25  # the classification pairs keep clear of the boundary
_MAX_TRIES = 50
_GENERATOR_VERSION = 1


def triangle_density(edge_index: Tensor, num_nodes: int) -> float:
    """Triangles per node of an undirected graph given with both edge directions."""
    a = np.zeros((num_nodes, num_nodes), dtype=np.int64)
    a[edge_index[0].numpy(), edge_index[1].numpy()] = 1
    np.fill_diagonal(a, 0)
    return float(np.trace(a @ a @ a)) / 6.0 / num_nodes


class _SwapGraph:
    """An undirected simple graph with O(1) degree-preserving double-edge swaps."""

    def __init__(self, adjacency: np.ndarray) -> None:
        self.adj = adjacency.copy()
        self.edges = [tuple(e) for e in np.argwhere(np.triu(adjacency, 1))]
        self.triangles = int(np.trace(self.adj.astype(np.int64) @ self.adj @ self.adj)) // 6

    def _common(self, u: int, v: int) -> int:
        return int(np.count_nonzero(self.adj[u] & self.adj[v]))

    def _set(self, u: int, v: int, value: bool) -> None:
        if not value:  # removing (u, v) destroys the triangles through it
            self.adj[u, v] = self.adj[v, u] = False
            self.triangles -= self._common(u, v)
        else:
            self.triangles += self._common(u, v)
            self.adj[u, v] = self.adj[v, u] = True

    def swap(self, rng: np.random.Generator, greedy: bool = False) -> bool:
        """One random swap; ``greedy`` undoes it if it adds triangles. Returns success."""
        i, j = (int(v) for v in rng.integers(len(self.edges), size=2))
        if i == j:
            return False
        a, b = self.edges[i]
        c, d = self.edges[j]
        if rng.random() < 0.5:
            c, d = d, c
        if len({a, b, c, d}) < 4 or self.adj[a, d] or self.adj[c, b]:
            return False
        before = self.triangles
        self._set(a, b, False)
        self._set(c, d, False)
        self._set(a, d, True)
        self._set(c, b, True)
        if greedy and self.triangles > before:
            self._set(a, d, False)
            self._set(c, b, False)
            self._set(a, b, True)
            self._set(c, d, True)
            return False
        self.edges[i], self.edges[j] = (a, d), (c, b)
        return True


def _base_graph(n: int, rng: np.random.Generator) -> np.ndarray:
    adj = np.zeros((n, n), dtype=bool)
    idx = np.arange(n)
    for step in (1, 2):
        adj[idx, (idx + step) % n] = adj[(idx + step) % n, idx] = True
    added = 0
    while added < n // 5:
        u, v = rng.integers(n, size=2)
        if u != v and not adj[u, v]:
            adj[u, v] = adj[v, u] = True
            added += 1
    return adj


def _to_data(
    graph: _SwapGraph,
    target: float,
    task: str,
    num_features: int,
    feature_noise: float,
    rng: np.random.Generator,
) -> Data:
    n = graph.adj.shape[0]
    perm = rng.permutation(n)  # relabel: node ids carry no trace of the lattice
    src, dst = np.nonzero(graph.adj)
    src, dst = perm[src], perm[dst]
    order = np.argsort(dst * n + src)
    edge_index = torch.from_numpy(np.stack([src[order], dst[order]])).long()
    if feature_noise > 0:
        x = 1.0 + feature_noise * torch.from_numpy(rng.standard_normal((n, num_features))).float()
    else:
        x = torch.ones(n, num_features)
    if task == "classification":
        y = torch.tensor([int(target >= _THRESHOLD)])
    else:
        y = torch.tensor([target], dtype=torch.float32)
    return Data(x=x, edge_index=edge_index, y=y, num_nodes=n, density=torch.tensor([target]))


class SyntheticGraphSet:
    """Small graphs whose target is their triangle density, degree-matched in pairs.

    See the module docstring for the generator. Deterministic for a given ``seed``.

    Args:
        num_graphs: number of graphs (even: graphs come in pairs).
        min_nodes, max_nodes: range of graph sizes (``6 <= min_nodes <= max_nodes``).
        task: ``"classification"`` (2 classes) or ``"regression"``.
        num_features: dimension of the node features: ones, plus Gaussian noise of
            standard deviation ``feature_noise`` (independent of the target either way).
        feature_noise: standard deviation of that noise (0: constant features).
        seed: seed of the generator.
    """

    def __init__(
        self,
        num_graphs: int = 2000,
        min_nodes: int = 10,
        max_nodes: int = 30,
        task: Task = "classification",
        num_features: int = 8,
        feature_noise: float = 0.0,
        seed: int = 0,
    ) -> None:
        owner = "SyntheticGraphSet"
        if isinstance(num_graphs, bool) or not isinstance(num_graphs, int) or num_graphs < 2:
            raise ValueError(f"{owner}: expected `num_graphs` >= 2 but got {num_graphs!r}.")
        if num_graphs % 2:
            raise ValueError(
                f"{owner}: expected an even `num_graphs` (graphs come in degree-matched pairs) "
                f"but got {num_graphs}."
            )
        if not isinstance(min_nodes, int) or min_nodes < 6:
            raise ValueError(f"{owner}: expected `min_nodes` >= 6 but got {min_nodes!r}.")
        if not isinstance(max_nodes, int) or max_nodes < min_nodes:
            raise ValueError(
                f"{owner}: expected `max_nodes` >= min_nodes ({min_nodes}) but got {max_nodes!r}."
            )
        if task not in TASKS:
            raise ValueError(f"{owner}: expected `task` to be one of {TASKS} but got {task!r}.")
        if not isinstance(num_features, int) or num_features < 1:
            raise ValueError(f"{owner}: expected `num_features` >= 1 but got {num_features!r}.")
        self.num_graphs = num_graphs
        self.min_nodes = min_nodes
        self.max_nodes = max_nodes
        self.task = task
        if not isinstance(feature_noise, (int, float)) or not feature_noise >= 0:
            raise ValueError(
                f"{owner}: expected `feature_noise` to be a number >= 0 but got {feature_noise!r}."
            )
        self._num_features = num_features
        self.feature_noise = float(feature_noise)
        self.seed = seed

    @property
    def num_features(self) -> int:
        return self._num_features

    @property
    def num_classes(self) -> int | None:
        """2 for classification, ``None`` for regression."""
        return 2 if self.task == "classification" else None

    @property
    def num_outputs(self) -> int:
        """Model outputs per graph: 2 logits or 1 value."""
        return 2 if self.task == "classification" else 1

    def fingerprint(self) -> str:
        return (
            f"SyntheticGraphSet(v{_GENERATOR_VERSION},num_graphs={self.num_graphs},"
            f"min_nodes={self.min_nodes},max_nodes={self.max_nodes},task={self.task!r},"
            f"num_features={self._num_features},feature_noise={self.feature_noise},"
            f"seed={self.seed})"
        )

    def __repr__(self) -> str:
        return self.fingerprint()

    def _pair(self, rng: np.random.Generator) -> tuple[Data, Data]:
        while True:
            n = int(rng.integers(self.min_nodes, self.max_nodes + 1))
            base = _base_graph(n, rng)
            if self.task == "regression":
                pair = []
                for _ in range(2):
                    g = _SwapGraph(base)
                    for _ in range(int(rng.integers(0, 2 * n + 1))):
                        g.swap(rng)
                    pair.append(
                        _to_data(
                            g,
                            g.triangles / n,
                            self.task,
                            self.num_features,
                            self.feature_noise,
                            rng,
                        )
                    )
                return pair[0], pair[1]
            high = low = None
            for _ in range(_MAX_TRIES):
                g = _SwapGraph(base)
                for _ in range(max(1, n // 10)):
                    g.swap(rng)
                if g.triangles / n >= _HIGH:
                    high = g
                    break
            g = _SwapGraph(base)
            for _ in range(40 * len(g.edges)):
                if g.triangles / n <= _LOW:
                    low = g
                    break
                g.swap(rng, greedy=True)
            if high is not None and low is not None:
                return (
                    _to_data(
                        high,
                        high.triangles / n,
                        self.task,
                        self.num_features,
                        self.feature_noise,
                        rng,
                    ),
                    _to_data(
                        low,
                        low.triangles / n,
                        self.task,
                        self.num_features,
                        self.feature_noise,
                        rng,
                    ),
                )

    def load(self) -> list[Data]:
        """Generate the graphs: pairs ``(2p, 2p + 1)`` share their degree sequence.

        Every :class:`~torch_geometric.data.Data` holds ``x`` (float ``[n, F]``),
        ``edge_index`` (both directions, sorted by target then source), ``y`` (``[1]``
        long label or float target) and ``density`` (triangles per node).
        """
        rng = np.random.default_rng(self.seed)
        graphs: list[Data] = []
        for _ in range(self.num_graphs // 2):
            graphs.extend(self._pair(rng))
        return graphs


# ------------------------------------------------------------------------------ batching
class _GraphItem:
    """One graph's tokens and pattern, prepared once."""

    def __init__(
        self,
        data: Data,
        global_token: bool,
        max_degree: int,
        max_distance: int,
        pe_dim: int,
        seed: int,
    ) -> None:
        n = int(data.num_nodes)
        g = int(global_token)
        keep = data.edge_index[0] != data.edge_index[1]
        key = torch.unique(data.edge_index[1, keep] * n + data.edge_index[0, keep])
        edges = torch.stack([key % n, key // n])
        # No token path: a batch's pattern is block-diagonal over its graphs, so C2 and C3
        # fail for every batch of more than one graph whatever each graph holds (a path
        # across graphs would attend across them); "dual" runs dense on such batches.
        self.pattern, self.bucket, self.num_tokens = token_pattern(
            edges, n, global_token, token_path=False
        )
        dense = torch.full((n + g, n + g), GLOBAL_BUCKET, dtype=torch.long)
        dense[g:, g:] = distance_buckets(edges, n, max_distance)
        if g:
            dense[0, 0] = SELF_BUCKET
        self.dense = dense
        zero = torch.zeros(g, dtype=torch.long)
        self.x = torch.cat([data.x.new_zeros(g, data.x.size(1)), data.x])
        self.in_degree = torch.cat(
            [zero, torch.bincount(edges[1], minlength=n).clamp(max=max_degree)]
        )
        self.out_degree = torch.cat(
            [zero, torch.bincount(edges[0], minlength=n).clamp(max=max_degree)]
        )
        self.y = data.y.reshape(-1)[:1]
        self.lap_pe = None
        if pe_dim:
            pe = laplacian_pe(edges, n, pe_dim, seed)
            self.lap_pe = torch.cat([pe.new_zeros(g, pe_dim), pe])
        self.global_token = global_token


def collate_graphs(
    items: Sequence[_GraphItem], num_learned_buckets: int, dense_limit: int
) -> TokenBatch:
    """One block-diagonal :class:`TokenBatch` from prepared graphs.

    Token order: graph by graph, each its global token (if any) and then its nodes. The
    pattern holds each graph's edges, self-loops and global-token edges only; the dense
    buckets (when the batch has at most ``dense_limit`` tokens) give every cross-graph pair
    the masked bucket ``num_learned_buckets``, and so does ``far_bucket``, so no kind ever
    attends across graphs.
    """
    sizes = [item.num_tokens for item in items]
    offsets = torch.tensor([0] + sizes[:-1]).cumsum(0)
    S = sum(sizes)
    masked = num_learned_buckets
    pattern = torch.cat([item.pattern + int(o) for item, o in zip(items, offsets, strict=True)], 1)
    bucket = torch.cat([item.bucket for item in items])
    dense = None
    if S <= dense_limit:
        dense = torch.full((S, S), masked, dtype=torch.long)
        for item, o in zip(items, offsets.tolist(), strict=True):
            dense[o : o + item.num_tokens, o : o + item.num_tokens] = item.dense
    graph = AttentionGraph(S, pattern, bucket, dense, far_bucket=masked)
    counts = torch.tensor(sizes)
    graph_index = torch.repeat_interleave(torch.arange(len(items)), counts)
    is_global = torch.zeros(S, dtype=torch.bool)
    readout = None
    if items[0].global_token:
        readout = offsets.clone()
        is_global[readout] = True
    lap_pe = None
    if items[0].lap_pe is not None:
        lap_pe = torch.cat([item.lap_pe for item in items])
    return TokenBatch(
        x=torch.cat([item.x for item in items]),
        graph=graph,
        is_global=is_global,
        in_degree=torch.cat([item.in_degree for item in items]),
        out_degree=torch.cat([item.out_degree for item in items]),
        y=torch.cat([item.y for item in items]),
        graph_index=graph_index,
        readout_index=readout,
        lap_pe=lap_pe,
        global_counts={"graphs": len(items)},
        num_buckets=num_learned_buckets,
    )


class _Collate:
    def __init__(self, num_learned_buckets: int, dense_limit: int) -> None:
        self.num_learned_buckets = num_learned_buckets
        self.dense_limit = dense_limit

    def __call__(self, items: list[_GraphItem]) -> TokenBatch:
        return collate_graphs(items, self.num_learned_buckets, self.dense_limit)


class GraphSetDataModule(pl.LightningDataModule):
    """Batches of small graphs for graph-level graph transformers, data-parallel.

    Every graph is prepared once in ``setup`` (pattern, shortest-path buckets, degrees,
    Laplacian encodings when ``pe_dim > 0``) and split at random into train /
    validation / test graphs. A batch is one :class:`TokenBatch` over all its graphs' tokens
    with a block-diagonal attention graph (see :func:`collate_graphs`), ``graph_index``
    (the graph of every token, for pooling), ``readout_index`` (each graph's global token,
    the readout) and ``y`` (one target per graph). Under DDP each rank gets its own batches
    (Lightning's distributed sampler); sequence parallelism is for node sequences.

    Args:
        dataset: the graphs (default: ``SyntheticGraphSet()``); anything with ``load()``
            returning PyG ``Data`` objects with ``x``, ``edge_index`` and ``y``, plus
            ``num_features``, ``num_classes`` and ``num_outputs``.
        batch_size: graphs per batch.
        train_ratio, val_ratio: fractions of graphs for training and validation; the rest
            is the test set.
        max_distance: shortest paths longer than this share a bias bucket.
        max_degree: degrees are clipped to this value.
        global_token: give every graph a global token (its readout); without one, models
            mean-pool the graph's tokens.
        dense_limit: build ``dense_bucket`` for batches of at most this many tokens.
        pe_dim: Laplacian eigenvectors per token (``lap_pe``); 0: none. A model that reads
            them (e.g. ``GT``) needs the same ``pe_dim``.
        seed: seed of the split and of the training shuffle.
    """

    def __init__(
        self,
        dataset: SyntheticGraphSet | None = None,
        batch_size: int = 64,
        train_ratio: float = 0.8,
        val_ratio: float = 0.1,
        max_distance: int = 5,
        max_degree: int = 64,
        global_token: bool = True,
        dense_limit: int = 4096,
        pe_dim: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        owner = "GraphSetDataModule"
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"{owner}: expected `batch_size` >= 1 but got {batch_size!r}.")
        if not 0.0 < train_ratio < 1.0:
            raise ValueError(f"{owner}: expected `train_ratio` in (0, 1) but got {train_ratio!r}.")
        if not 0.0 <= val_ratio < 1.0 or train_ratio + val_ratio > 1.0:
            raise ValueError(
                f"{owner}: expected `val_ratio` in [0, 1 - train_ratio] = "
                f"[0, {1.0 - train_ratio:g}] but got {val_ratio!r}."
            )
        check_max_distance(owner, max_distance)
        check_int(owner, "pe_dim", pe_dim, 0)
        if isinstance(max_degree, bool) or not isinstance(max_degree, int) or max_degree < 1:
            raise ValueError(f"{owner}: expected `max_degree` >= 1 but got {max_degree!r}.")
        if isinstance(dense_limit, bool) or not isinstance(dense_limit, int) or dense_limit < 0:
            raise ValueError(f"{owner}: expected `dense_limit` >= 0 but got {dense_limit!r}.")
        self.dataset = SyntheticGraphSet() if dataset is None else dataset
        self.batch_size = batch_size
        self.train_ratio = train_ratio
        self.val_ratio = val_ratio
        self.max_distance = max_distance
        self.max_degree = max_degree
        self.global_token = bool(global_token)
        self.dense_limit = dense_limit
        self.pe_dim = pe_dim
        self.seed = seed
        self.splits: dict[str, list[_GraphItem]] | None = None

    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int | None:
        """Number of classes, ``None`` for regression."""
        return self.dataset.num_classes

    @property
    def num_outputs(self) -> int:
        """Model outputs per graph (``num_classes``, or 1 for regression)."""
        return self.dataset.num_outputs

    @property
    def num_buckets(self) -> int:
        """Learned bias buckets a model needs (``max_distance + 4``)."""
        return num_buckets(self.max_distance)

    def split_indices(self, num_graphs: int) -> dict[str, Tensor]:
        """Disjoint random train/val/test graph indices covering every graph."""
        perm = torch.randperm(num_graphs, generator=torch.Generator().manual_seed(self.seed))
        num_train = max(1, round(self.train_ratio * num_graphs))
        num_val = min(round(self.val_ratio * num_graphs), num_graphs - num_train)
        return {
            "train": perm[:num_train],
            "val": perm[num_train : num_train + num_val],
            "test": perm[num_train + num_val :],
        }

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        graphs = self.dataset.load()
        items = [
            _GraphItem(
                g, self.global_token, self.max_degree, self.max_distance, self.pe_dim, self.seed + i
            )
            for i, g in enumerate(graphs)
        ]
        self.splits = {
            name: [items[i] for i in idx.tolist()]
            for name, idx in self.split_indices(len(items)).items()
        }

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if self.splits is None:
            raise RuntimeError("GraphSetDataModule: call `setup()` before requesting dataloaders.")
        return DataLoader(
            self.splits[split],  # type: ignore[arg-type]
            batch_size=self.batch_size,
            shuffle=shuffle,
            collate_fn=_Collate(self.num_buckets, self.dense_limit),
            generator=torch.Generator().manual_seed(self.seed) if shuffle else None,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
