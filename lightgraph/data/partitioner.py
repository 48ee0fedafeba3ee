"""Graph partitioners: METIS (edge-cut minimising), random, and GAP (label-balanced FENNEL)."""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor

from lightgraph.utilities.checks import check_choice, check_graph_edge_index, check_int

PartitionMethod = Literal["metis", "random", "gap"]
PARTITION_METHODS: tuple[str, ...] = get_args(PartitionMethod)
_RANDOM_SALT = 0x5EED_1A7E


def partition_graph(
    edge_index: Tensor,
    num_nodes: int,
    num_parts: int,
    method: str = "metis",
    seed: int = 0,
    *,
    y: Tensor | None = None,
    train_mask: Tensor | None = None,
) -> Tensor:
    """Assign every node to one of ``num_parts`` partitions.

    Args:
        edge_index: ``[2, num_edges]`` connectivity; direction is ignored (METIS works on
            the symmetrised graph without self-loops).
        num_nodes: number of nodes.
        num_parts: number of partitions (``1 <= num_parts <= num_nodes``).
        method: ``"metis"`` minimises the edge cut with balanced parts (through
            ``pymetis``); ``"random"`` draws a balanced random assignment; ``"gap"``
            keeps neighbours together while balancing the training-label distribution
            of every part (:func:`lightgraph.data.gap.gap_partition`, default options).
        seed: seed of the random assignment, of METIS and of GAP's stream order.
        y: node labels, required by ``"gap"`` (class ids ``[num_nodes]`` or multi-label
            scores ``[num_nodes, num_classes]``); ignored by the other methods.
        train_mask: boolean ``[num_nodes]`` training mask, required by ``"gap"``;
            ignored by the other methods.

    Returns:
        ``torch.long`` tensor ``[num_nodes]`` with values in ``[0, num_parts)``; every
        partition receives at least one node.

    Raises:
        ValueError: naming the argument, the allowed values and the value received, for
            an unknown ``method``, an ``edge_index`` that is not an integer ``[2, E]``
            tensor of node ids in ``[0, num_nodes)``, or ``num_parts`` outside
            ``[1, num_nodes]``, or ``method="gap"`` without ``y`` or ``train_mask``.
        TypeError: if ``edge_index`` is not a tensor.
    """
    owner = "partition_graph"
    check_choice(owner, "method", method, PARTITION_METHODS)
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes)
    num_parts = check_int(owner, "num_parts", num_parts, low=1)
    if num_parts > num_nodes:
        raise ValueError(
            f"{owner}: expected `num_parts` <= num_nodes ({num_nodes}) so that every "
            f"partition owns a node, but got num_parts={num_parts}."
        )
    if method == "gap":
        if y is None or train_mask is None:
            missing = [name for name, v in (("y", y), ("train_mask", train_mask)) if v is None]
            raise ValueError(
                f"{owner}: method='gap' balances the training labels of every partition and "
                f"needs `y` (class ids [num_nodes] or multi-label scores [num_nodes, "
                f"num_classes]) and `train_mask` (bool [num_nodes]), but got "
                + " and ".join(f"{name}=None" for name in missing)
                + "."
            )
        from lightgraph.data.gap import gap_partition

        return gap_partition(edge_index, num_nodes, num_parts, y, train_mask, seed=seed)
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    if method == "random":
        return random_partition(num_nodes, num_parts, seed)
    return metis_partition(edge_index, num_nodes, num_parts, seed)


def random_partition(num_nodes: int, num_parts: int, seed: int = 0) -> Tensor:
    """Balanced random partition: part sizes differ by at most one."""
    # Salted so that the same seed as a graph generator's never reproduces its node order
    # (a random partition would otherwise copy the generator's communities).
    gen = torch.Generator().manual_seed(seed + _RANDOM_SALT)
    perm = torch.randperm(num_nodes, generator=gen)
    part = torch.empty(num_nodes, dtype=torch.long)
    part[perm] = torch.arange(num_nodes) % num_parts
    return part


def metis_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int = 0) -> Tensor:
    """Edge-cut minimising partition with METIS (``pymetis``)."""
    try:
        import pymetis
    except ImportError as err:  # pragma: no cover - pymetis is a hard dependency
        raise ImportError(
            "partition_graph(method='metis') needs pymetis: `pip install pymetis`."
        ) from err

    row, col = edge_index[0], edge_index[1]
    keep = row != col
    row, col = row[keep], col[keep]
    # METIS needs a symmetric adjacency without duplicates.
    row, col = torch.cat([row, col]), torch.cat([col, row])
    key = torch.unique(row * num_nodes + col)
    row, col = key // num_nodes, key % num_nodes
    counts = torch.bincount(row, minlength=num_nodes)
    dtype = pymetis.zero_copy_dtype() if hasattr(pymetis, "zero_copy_dtype") else np.int64
    starts = np.zeros(num_nodes + 1, dtype=dtype)
    np.cumsum(counts.numpy(), out=starts[1:])
    adjacent = col.numpy().astype(dtype, copy=False)
    options = pymetis.Options(seed=seed)
    _, membership = pymetis.part_graph(
        num_parts,
        adjacency=pymetis.CSRAdjacency(adj_starts=starts, adjacent=adjacent),
        options=options,
    )
    part = torch.as_tensor(np.asarray(membership), dtype=torch.long)
    return _fill_empty_parts(part, num_parts)


def _fill_empty_parts(part: Tensor, num_parts: int) -> Tensor:
    # METIS may leave a part empty on tiny or disconnected graphs; each rank must own a
    # node, so move single nodes from the largest parts into the empty ones.
    sizes = torch.bincount(part, minlength=num_parts)
    for empty in torch.nonzero(sizes == 0).flatten().tolist():
        largest = int(torch.argmax(sizes))
        node = int(torch.nonzero(part == largest)[0])
        part[node] = empty
        sizes[largest] -= 1
        sizes[empty] += 1
    return part
