"""Hub nodes: the nodes most influential on the training nodes (HANOI, §4.3.3).

HANOI is ch. 4 of T. Huang, *Efficient Systems for Large-Scale Graph Representation
Learning*, PhD thesis, MIT, 2025; equation numbers below are the thesis's.

A node's influence on the training set is the landing probability of a lazy *reverse*
random walk of ``walk_length`` steps started from the training nodes (Eq. 4.1). HANOI
sums this score over the partitions, each walk starting from that partition's
training nodes; by linearity the sum is one walk from the multi-hot vector ``e_B`` of
all training nodes, which is what :func:`hub_scores` computes:

.. math::

    \\mathrm{score} = \\tilde A^{L} e_B, \\qquad
    \\tilde A = \\lambda I + (1 - \\lambda) \\, A D_{\\mathrm{in}}^{-1},

where ``A[i, j]`` counts the edges ``i -> j`` of ``edge_index`` (row 0 = source, the
message-passing direction of PyG), ``D_in`` is the diagonal of in-degrees and
``lambda = laziness``. Column ``j`` of ``A D_in^{-1}`` is the uniform distribution over
the in-neighbours of ``j`` (repeated edges count with their multiplicity, a self-loop is
an ordinary edge): a walker at ``j`` stays with probability ``lambda``, and otherwise
steps *against* an edge to one of the nodes ``j`` aggregates from. A node without
in-neighbours keeps the walker (its column is ``e_j``), so ``score`` sums to the number
of training nodes. Equivalently, ``score`` is ``e_B`` times the ``L``-th power of the
row-stochastic ``lambda I + (1 - lambda) D_in^{-1} A^T`` (the usual lazy walk
``(I + D_in^{-1} A^T) / 2`` for ``lambda = 1/2``). For an undirected graph, pass both
directions of every edge.

Cost: ``L`` sparse matrix-vector products, ``O(L * |E|)`` time and ``O(|V| + |E|)``
memory (scipy CSR, on the CPU).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from lightgraph.utilities.checks import (
    check_fraction,
    check_graph_edge_index,
    check_int,
    check_type,
    describe,
)

__all__ = ["hub_scores", "select_hubs"]


def hub_scores(
    edge_index: Tensor,
    num_nodes: int,
    train_mask: Tensor,
    walk_length: int = 3,
    laziness: float = 0.5,
) -> Tensor:
    """Landing probability of the lazy reverse walk from all training nodes (Eq. 4.1).

    Args:
        edge_index: ``[2, num_edges]`` integer connectivity, row 0 the source.
        num_nodes: number of nodes.
        train_mask: boolean ``[num_nodes]`` mask of the training nodes (the walk starts).
        walk_length: number of steps ``L >= 0``.
        laziness: probability ``lambda`` in ``[0, 1]`` of staying at a step.

    Returns:
        ``torch.float64`` tensor ``[num_nodes]``, ``Ã^L e_B`` (see the module docstring).

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
        TypeError: if ``edge_index`` or ``train_mask`` is not a tensor.
    """
    return torch.from_numpy(
        _scores("hub_scores", edge_index, num_nodes, train_mask, walk_length, laziness)
    )


def select_hubs(
    edge_index: Tensor,
    num_nodes: int,
    train_mask: Tensor,
    fraction: float = 0.01,
    walk_length: int = 3,
    laziness: float = 0.5,
    exclude: Tensor | None = None,
) -> Tensor:
    """The ``ceil(fraction * num_nodes)`` nodes of highest :func:`hub_scores`.

    ``exclude`` keeps nodes out of the selection (fewer hubs if too few remain). The
    macro-batch data modules exclude the training nodes: a hub is never a training
    target, and the lazy walk returns much of its mass to its start nodes, so without the
    exclusion a graph with few training nodes would pin most of them as hubs and never
    train on them.

    The product is rounded to 9 decimals before the ceiling, so that float error (``0.07 *
    100 = 7.000000000000001``) does not add a node.

    Args:
        edge_index: ``[2, num_edges]`` integer connectivity, row 0 the source.
        num_nodes: number of nodes.
        train_mask: boolean ``[num_nodes]`` mask of the training nodes.
        fraction: share of the nodes to pin, in ``[0, 1]`` (``0``: no hubs).
        walk_length: number of walk steps ``L >= 0``.
        laziness: probability in ``[0, 1]`` of staying at a step.
        exclude: optional boolean ``[num_nodes]`` mask of nodes that may not be hubs.

    Returns:
        ``torch.long`` tensor of the hub ids in increasing order. Among nodes of equal
        score the smaller id wins.

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
        TypeError: if ``edge_index`` or ``train_mask`` is not a tensor.
    """
    owner = "select_hubs"
    fraction = check_fraction(owner, "fraction", fraction)
    scores = _scores(owner, edge_index, num_nodes, train_mask, walk_length, laziness)
    count = min(math.ceil(round(fraction * num_nodes, 9)), num_nodes)
    if exclude is not None:
        if (
            not isinstance(exclude, torch.Tensor)
            or exclude.dtype != torch.bool
            or exclude.shape != (num_nodes,)
        ):
            shape = (
                tuple(exclude.shape)
                if isinstance(exclude, torch.Tensor)
                else type(exclude).__name__
            )
            raise ValueError(
                f"{owner}: expected `exclude` to be a boolean tensor of shape [{num_nodes}] or "
                f"None but got {shape}."
            )
        excluded = exclude.numpy()
        scores = np.where(excluded, -np.inf, scores)
        count = min(count, num_nodes - int(excluded.sum()))
    if count == 0:
        return torch.empty(0, dtype=torch.long)
    # Stable sort of -score: the highest scores first, ties by node id.
    top = np.argsort(-scores, kind="stable")[:count]
    return torch.from_numpy(np.sort(top).astype(np.int64))


def _scores(
    owner: str,
    edge_index: Tensor,
    num_nodes: int,
    train_mask: Tensor,
    walk_length: int,
    laziness: float,
) -> np.ndarray:
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes)
    check_type(owner, "train_mask", train_mask, torch.Tensor, "a boolean mask [N]")
    if train_mask.dtype != torch.bool or tuple(train_mask.shape) != (num_nodes,):
        raise ValueError(
            f"{owner}: expected `train_mask` to be a boolean tensor of shape ({num_nodes},) "
            f"but got {describe(train_mask)}."
        )
    walk_length = check_int(owner, "walk_length", walk_length, low=0)
    laziness = check_fraction(owner, "laziness", laziness)

    edge_index, train_mask = edge_index.cpu(), train_mask.cpu()
    src = edge_index[0].numpy()
    dst = edge_index[1].numpy()
    in_degree = np.bincount(dst, minlength=num_nodes).astype(np.float64)
    # step[i, j] = (1 - lambda) / in_degree(j) per edge i -> j (repeats summed by scipy).
    weight = (1.0 - laziness) / in_degree[dst]
    step = sp.csr_matrix((weight, (src, dst)), shape=(num_nodes, num_nodes))
    stay = laziness + (1.0 - laziness) * (in_degree == 0)  # sources keep the walker
    score = train_mask.numpy().astype(np.float64)
    for _ in range(walk_length):
        score = stay * score + step @ score
    return score
