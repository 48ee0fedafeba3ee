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

from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["SyntheticGraphSet", "triangle_density"]

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
