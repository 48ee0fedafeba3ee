"""Graph partitioners: METIS (edge-cut minimising), random, and GAP (label-balanced FENNEL)."""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor

from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.partition.out_of_core import check_edge_array
from lightgraph.utilities.checks import check_choice, check_graph_edge_index, check_int, check_type
from lightgraph.utilities.memory import check_memory_budget

PartitionMethod = Literal["metis", "random", "gap"]
PARTITION_METHODS: tuple[str, ...] = get_args(PartitionMethod)
_RANDOM_SALT = 0x5EED_1A7E
#: Peak memory of :func:`metis_partition` that :func:`partition_on_disk` checks against its
#: ``memory_budget``: about ``METIS_BYTES_PER_EDGE * E + METIS_BYTES_PER_NODE * N`` bytes
#: (int64 ids of both directions, the deduplication keys and their sort, then METIS's own
#: graph; measured on a 1M-node graph with 1M to 8M edges).
METIS_BYTES_PER_EDGE = 120
METIS_BYTES_PER_NODE = 96


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
            of every part (:func:`lightgraph.data.partition.gap.gap_partition`, default options).
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
        from lightgraph.data.partition.gap import gap_partition

        return gap_partition(edge_index, num_nodes, num_parts, y, train_mask, seed=seed)
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    if method == "random":
        return random_partition(num_nodes, num_parts, seed)
    return metis_partition(edge_index, num_nodes, num_parts, seed)


def partition_on_disk(
    graph: OnDiskGraph,
    num_parts: int,
    method: str = "gap",
    seed: int = 0,
    memory_budget: int | None = None,
    workdir: str | None = None,
) -> np.ndarray:
    """:func:`partition_graph` of a graph kept on disk, in bounded memory.

    Returns exactly what :func:`partition_graph` returns for ``graph.edge_index``,
    ``graph.num_nodes``, ``num_parts``, ``method`` and ``seed`` with ``y=graph.y`` and
    ``train_mask=graph.train_mask``, as a NumPy array:

    - ``"gap"`` streams the graph
      (:func:`lightgraph.data.partition.gap.gap_partition_on_disk`): ``O(N + k C)`` state plus
      chunk buffers of ``memory_budget`` bytes, and two memory-mapped adjacency files of at
      most ``8 E`` bytes each under ``workdir``, removed before returning;
    - ``"random"`` needs ``O(N)`` memory (``edge_index`` is only read in chunks, to check
      its node ids);
    - ``"metis"`` is in-memory by nature: it loads the whole graph and needs about
      ``METIS_BYTES_PER_EDGE * E + METIS_BYTES_PER_NODE * N`` bytes (120 per edge, 96
      per node). With a ``memory_budget`` smaller than that it raises instead of running
      out of memory; with ``memory_budget=None`` it always loads the graph.

    Args:
        graph: the arrays (e.g. read-only ``numpy.memmap``) of the graph.
        num_parts: number of partitions (``1 <= num_parts <= graph.num_nodes``).
        method: ``"gap"``, ``"random"`` or ``"metis"`` (as :func:`partition_graph`).
        seed: as :func:`partition_graph`.
        memory_budget: bytes of chunk buffers (``None``:
            :func:`~lightgraph.utilities.memory.default_memory_budget`; ``"metis"`` then
            loads the graph unchecked).
        workdir: existing directory for GAP's work files (``None``: the system's
            temporary directory).

    Returns:
        ``int64`` array ``[graph.num_nodes]`` with values in ``[0, num_parts)``.

    Raises:
        ValueError: naming the argument, the allowed values and the value received; for
            ``"metis"`` when the graph exceeds ``memory_budget``.
        TypeError: if ``graph`` is not an :class:`~lightgraph.data.datasets.on_disk.OnDiskGraph`.
    """
    from lightgraph.data.partition.gap import (
        _check_edge_ids,
        gap_partition_on_disk,
    )

    owner = "partition_on_disk"
    check_type(owner, "graph", graph, OnDiskGraph, "an OnDiskGraph")
    check_choice(owner, "method", method, PARTITION_METHODS)
    num_nodes = check_int(owner, "num_nodes", graph.num_nodes, low=0)
    check_edge_array(owner, graph.edge_index)
    num_parts = check_int(owner, "num_parts", num_parts, low=1)
    if num_parts > num_nodes:
        raise ValueError(
            f"{owner}: expected `num_parts` <= num_nodes ({num_nodes}) so that every "
            f"partition owns a node, but got num_parts={num_parts}."
        )
    budget = check_memory_budget(owner, memory_budget)
    if method == "gap":
        return gap_partition_on_disk(
            graph.edge_index, num_nodes, num_parts, graph.y, graph.train_mask, seed=seed,
            memory_budget=budget, workdir=workdir,
        )  # fmt: skip
    if method == "metis":
        needed = METIS_BYTES_PER_EDGE * graph.num_edges + METIS_BYTES_PER_NODE * num_nodes
        if memory_budget is not None and needed > memory_budget:
            raise ValueError(
                f"{owner}: method='metis' loads the whole graph (about {needed} bytes for "
                f"{graph.num_edges} edges), more than `memory_budget` ({memory_budget} "
                f"bytes); use method='gap' (streamed) or a larger memory_budget."
            )
        edge_index = torch.from_numpy(np.array(graph.edge_index))
        return partition_graph(edge_index, num_nodes, num_parts, "metis", seed).numpy()
    _check_edge_ids(owner, graph.edge_index, num_nodes, budget)
    if num_parts == 1:
        return np.zeros(num_nodes, np.int64)
    return random_partition(num_nodes, num_parts, seed).numpy()


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
