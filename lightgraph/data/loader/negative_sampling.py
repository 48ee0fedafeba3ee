"""Negative samplers of link prediction: which node pairs a batch scores as non-edges.

Every sampler corrupts the destination of each positive edge ``(u, v)``: it returns
``[B, k]`` destinations ``w`` and the batch scores the pairs ``(u, w)`` as negatives.

* ``"uniform"``: ``w`` uniform over all nodes, independently for every positive (DGL's
  ``negative_sampler.Uniform(k)``); a draw may happen to be a true edge (with probability
  about ``deg(u) / N``) or ``u`` itself.
* ``"strict"``: as ``"uniform"`` but never a true edge of ``known`` (the training graph,
  so no held-out edge is revealed by its absence) nor ``u`` itself: a draw that is one is
  drawn again. Impossible for a source adjacent to every other node: that is an error.
* ``"shared"``: ``k`` nodes uniform over all nodes, the same for every positive of the
  batch (the scores are then a ``[B, k]`` product of ``B + k`` embeddings).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from lightgraph.utilities.checks import check_choice, check_int

NegativeMode = Literal["uniform", "strict", "shared"]
NEGATIVE_MODES: tuple[str, ...] = get_args(NegativeMode)
_MAX_REDRAWS = 64


def check_num_negatives(owner: str, value: object) -> int:
    """Negatives per positive: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{owner}: expected `num_negatives` (negatives per positive edge) to be an integer "
            f">= 1 but got {value!r}."
        )
    return value


class NegativeSampler:
    """Destinations of ``num_negatives`` negatives per positive edge (see the module).

    Args:
        mode: ``"uniform"``, ``"strict"`` or ``"shared"``.
        num_negatives: ``k``, negatives per positive edge.
    """

    def __init__(self, mode: NegativeMode = "uniform", num_negatives: int = 1) -> None:
        owner = "NegativeSampler"
        self.mode = check_choice(owner, "mode", mode, NEGATIVE_MODES)
        self.num_negatives = check_num_negatives(owner, num_negatives)

    def __repr__(self) -> str:
        return f"NegativeSampler(mode={self.mode!r}, num_negatives={self.num_negatives})"

    def sample(
        self,
        src: Tensor,
        num_nodes: int,
        generator: torch.Generator,
        known: KnownEdges | None = None,
    ) -> Tensor:
        """``[B, k]`` negative destinations for the positives with sources ``src`` ``[B]``.

        ``known``: the true edges ``"strict"`` avoids (required for it, ignored otherwise).
        """
        k, b = self.num_negatives, int(src.numel())
        if self.mode == "shared":
            return torch.randint(0, num_nodes, (k,), generator=generator).expand(b, k)
        neg = torch.randint(0, num_nodes, (b, k), generator=generator)
        if self.mode == "uniform":
            return neg
        if known is None:
            raise ValueError(
                "NegativeSampler: mode='strict' needs the known edges (`known`) to avoid."
            )
        return known.redraw(src, neg, generator)


class KnownEdges:
    """The true edges strict negatives avoid, as sorted keys ``u * N + v``, with the out-
    degree of every node (a node adjacent to every other one has no strict negative).

    Args:
        edge_index: ``[2, E]`` the known directed edges (an undirected graph lists both
            directions).
        num_nodes: ``N``.
    """

    def __init__(self, edge_index: Tensor, num_nodes: int) -> None:
        self.num_nodes = check_int("KnownEdges", "num_nodes", num_nodes, low=1)
        src, dst = edge_index[0].long(), edge_index[1].long()
        off = src != dst
        keys = (src[off] * num_nodes + dst[off]).unique()
        self.keys = keys
        # Distinct non-self out-neighbours of every node.
        self.out_degree = torch.bincount(keys // num_nodes, minlength=num_nodes)

    def contains(self, src: Tensor, dst: Tensor) -> Tensor:
        """Whether each ``(src, dst)`` is a known edge (or a self pair)."""
        key = src.long() * self.num_nodes + dst.long()
        if self.keys.numel() == 0:
            return src == dst
        pos = torch.searchsorted(self.keys, key).clamp_(max=self.keys.numel() - 1)
        return (self.keys[pos] == key) | (src == dst)

    def check_possible(self, src: Tensor) -> None:
        """A clear error if some source is adjacent to every other node (no strict negative)."""
        full = self.out_degree[src] >= self.num_nodes - 1
        if bool(full.any()):
            u = int(src[full][0])
            raise ValueError(
                f"NegativeSampler: mode='strict' cannot draw a negative for source node {u}: "
                f"it has an edge to all {self.num_nodes - 1} other nodes (the graph is too "
                f"dense there); use mode='uniform' or 'shared'."
            )

    def redraw(self, src: Tensor, neg: Tensor, generator: torch.Generator) -> Tensor:
        """``neg`` with every known edge (and self pair) of its row's source drawn again
        uniformly, until none is left; the few draws left after a number of rounds come
        from the source's non-neighbours directly."""
        self.check_possible(src)
        n = self.num_nodes
        rows = src.view(-1, 1).expand_as(neg)
        bad = self.contains(rows, neg)
        for _ in range(_MAX_REDRAWS):
            count = int(bad.sum())
            if count == 0:
                return neg
            neg[bad] = torch.randint(0, n, (count,), generator=generator)
            bad = self.contains(rows, neg)
        # Near-dense sources: draw from the explicit complement (uniform over it, as the
        # rejection draws are).
        for i, j in bad.nonzero().tolist():
            u = int(src[i])
            lo = torch.searchsorted(self.keys, torch.tensor(u * n))
            hi = torch.searchsorted(self.keys, torch.tensor((u + 1) * n))
            taken = torch.zeros(n, dtype=torch.bool)
            taken[self.keys[lo:hi] - u * n] = True
            taken[u] = True
            free = (~taken).nonzero().view(-1)
            neg[i, j] = free[torch.randint(0, free.numel(), (1,), generator=generator)]
        return neg
