"""Chunked passes over a graph on disk: validation, counting sort, the CSC.

Preparation from an :class:`~lightgraph.data.datasets.on_disk.OnDiskGraph` never holds its edges
or node rows whole: every pass here reads one chunk at a time, its length sized by a
``memory_budget`` in bytes (:func:`~lightgraph.utilities.memory.rows_per_chunk`), and
keeps only per-node arrays (``O(N)``) between chunks.

* :func:`validate_on_disk_graph` -- the :func:`~lightgraph.data.datasets.graph_dataset.
  validate_graph` checks, in chunks;
* :func:`count_keys` (:func:`add_key_counts`) and :func:`scatter_by_key` -- the two
  passes of a counting sort (count the keys of every chunk; then write every chunk's
  values at their keys' cursors, stably, into a memory-mapped output);
* :func:`on_disk_csc` -- the CSC of an on-disk ``edge_index`` (a distribution sort into
  spill files by target windows, :class:`~lightgraph.utilities.spill.KeyedSpill`, each
  window sorted in memory), written to ``.npy`` files, equal to
  :func:`~lightgraph.functional.neighbor_sampling.to_csc`'s.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from lightgraph.data.datasets.graph_dataset import MASK_NAMES
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.utilities.arrays import edge_chunks, new_npy
from lightgraph.utilities.checks import check_edge_ids, check_int, check_type
from lightgraph.utilities.memory import check_memory_budget, rows_per_chunk
from lightgraph.utilities.spill import KeyedSpill

__all__ = [
    "CSC_INDICES_NAME",
    "CSC_INDPTR_NAME",
    "add_key_counts",
    "count_keys",
    "on_disk_csc",
    "scatter_by_key",
    "validate_on_disk_graph",
]

#: File names :func:`on_disk_csc` writes in its directory.
CSC_INDPTR_NAME, CSC_INDICES_NAME = "csc_indptr.npy", "csc_indices.npy"

# Bytes per edge of a chunk: the int64 (src, dst) copies, the sort's order and keys, the
# ranks and gathered values of the scatter, with headroom.
_CSC_EDGE_BYTES = 128
# Bytes per edge of a validation chunk (the int64 copy of one row and its comparisons).
_CHECK_EDGE_BYTES = 24
# The largest chunk worth taking: beyond it NumPy's per-call overhead is long amortised.
_MAX_CHUNK = 1 << 22


def count_keys(keys: np.ndarray, size: int) -> np.ndarray:
    """``bincount(keys, minlength=size)`` (``int64``), through :func:`add_key_counts`."""
    out = np.zeros(size, dtype=np.int64)
    add_key_counts(out, keys)
    return out


def add_key_counts(counts: np.ndarray, keys: np.ndarray) -> None:
    """``counts += bincount(keys, minlength=len(counts))`` in place, in ``O(m)`` for ``m =
    keys.size`` and without a temporary as long as ``counts`` (which may be a view, or a
    memory-mapped per-node array) unless ``counts`` is small: a pass that counts chunk by
    chunk then costs neither ``O(N)`` time nor ``O(N)`` memory per chunk."""
    size = counts.shape[0]
    if size <= 1 << 16:
        counts += np.bincount(keys, minlength=size)
        return
    from lightgraph.utilities import _array_kernels  # imports numba on the first call

    _array_kernels.count_keys(counts, keys)  # numpy.add.at: 15-30x slower here


def scatter_by_key(
    keys: np.ndarray,
    cursor: np.ndarray,
    out: np.ndarray,
    values: np.ndarray,
) -> None:
    """Counting-sort step: write ``values`` to ``out`` at ``cursor[key]`` onwards, stably
    (in their order within the chunk), and advance ``cursor``. For an ``out`` larger than
    memory, :class:`~lightgraph.utilities.spill.KeyedSpill` does the same with sequential
    writes."""
    m = keys.size
    if m == 0:
        return
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))
    lengths = np.diff(np.append(starts, m))
    rank = np.arange(m, dtype=np.int64) - np.repeat(starts, lengths)
    out[cursor[sorted_keys] + rank] = values[order]
    cursor[sorted_keys[starts]] += lengths


def check_edge_array(owner: str, edge_index: Any) -> np.ndarray:
    """An integer NumPy array (or ``numpy.memmap``) of shape ``[2, E]``; its ids are checked
    while streaming it."""
    check_type(owner, "edge_index", edge_index, np.ndarray, "e.g. a numpy.memmap of [2, E] ids")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or edge_index.dtype.kind not in "iu":
        raise ValueError(
            f"{owner}: expected `edge_index` to be an integer array of shape [2, num_edges] "
            f"but got shape {tuple(edge_index.shape)} and dtype {edge_index.dtype}."
        )
    return edge_index


def check_bool_mask(
    owner: str, name: str, mask: object, num_nodes: int, copy: bool = True
) -> np.ndarray:
    """A boolean NumPy array of shape ``(num_nodes,)``: read into memory (``O(N)``), or
    ``mask`` itself with ``copy=False`` (e.g. a memory map read in chunks later)."""
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (num_nodes,):
        got = (
            f"shape {mask.shape}, dtype {mask.dtype}"
            if isinstance(mask, np.ndarray)
            else type(mask).__name__
        )
        raise ValueError(
            f"{owner}: expected `{name}` to be a boolean array of shape ({num_nodes},) but got "
            f"{got}."
        )
    return np.array(mask) if copy else mask


def validate_on_disk_graph(
    graph: OnDiskGraph,
    num_classes: int | None = None,
    multilabel: bool | None = None,
    memory_budget: int | None = None,
) -> int:
    """Check that ``graph`` follows the :class:`~lightgraph.data.GraphDataset` layout, reading
    its arrays in chunks (what :func:`~lightgraph.data.datasets.graph_dataset.validate_graph` checks
    for a graph in memory).

    Args:
        graph: the arrays.
        num_classes: the classes (label columns) ``y`` must fit, if known.
        multilabel: whether ``y`` must be ``[N, C]`` (``True``) or ``[N]`` (``False``).
        memory_budget: bytes per chunk (``None``:
            :func:`~lightgraph.utilities.memory.default_memory_budget`).

    Returns:
        ``y.max() + 1`` of a single-label graph (0 without nodes), the label columns of a
        multi-label one.

    Raises:
        ValueError: naming the array, what was expected and what was found.
    """
    owner = "validate_on_disk_graph"
    check_type(owner, "graph", graph, OnDiskGraph)
    budget = check_memory_budget(owner, memory_budget)
    n = check_int(owner, "graph.num_nodes", graph.num_nodes, low=0)
    x = graph.x
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype.kind != "f":
        raise ValueError(
            f"{owner}: expected `x` to be a 2-D floating point array [num_nodes, num_features] "
            f"but got {_describe(x)}."
        )
    if x.shape[0] != n:
        raise ValueError(
            f"{owner}: expected `x` to have one row per node (num_nodes = {n}) but got "
            f"{x.shape[0]} rows."
        )
    edge_index = check_edge_array(owner, graph.edge_index)
    for lo, src, dst in edge_chunks(
        edge_index, rows_per_chunk(budget, _CHECK_EDGE_BYTES), np.int64
    ):
        check_edge_ids(owner, lo, src, dst, n)
    y = graph.y
    if not isinstance(y, np.ndarray) or y.ndim not in (1, 2) or y.shape[0] != n:
        raise ValueError(
            f"{owner}: expected `y` to have one entry per node ({n}) but got {_describe(y)}."
        )
    if multilabel is True and y.ndim != 2:
        raise ValueError(
            f"{owner}: expected a multi-label `y` of shape [num_nodes, num_classes] but got "
            f"{tuple(y.shape)}."
        )
    if multilabel is False and (y.ndim != 1 or y.dtype.kind not in "iu"):
        raise ValueError(
            f"{owner}: expected a single-label `y` of integer class ids of shape [num_nodes] "
            f"but got {_describe(y)}."
        )
    if y.ndim == 2:
        classes = int(y.shape[1])
        if num_classes is not None and classes != num_classes:
            raise ValueError(
                f"{owner}: expected `y` to have {num_classes} label columns but got {classes}."
            )
    else:
        classes = 0
        rows = rows_per_chunk(budget, 16, cap=_MAX_CHUNK)
        for lo in range(0, n, rows):
            chunk = np.asarray(y[lo : lo + rows])
            low, high = int(chunk.min()), int(chunk.max())
            if low < 0:
                raise ValueError(
                    f"{owner}: expected class labels in `y` to be >= 0 but found {low}."
                )
            classes = max(classes, high + 1)
        if num_classes is not None and classes > num_classes:
            raise ValueError(
                f"{owner}: expected class labels in `y` to lie in [0, {num_classes - 1}] but "
                f"found {classes - 1}."
            )
    for name in MASK_NAMES:
        mask = getattr(graph, name)
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
            raise ValueError(
                f"{owner}: expected `{name}` to be a boolean array of shape [{n}] but got "
                f"{_describe(mask)}."
            )
    return classes


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"shape {tuple(value.shape)} and dtype {value.dtype}"
    return type(value).__name__


def on_disk_csc(
    edge_index: np.ndarray,
    num_nodes: int,
    directory: str | os.PathLike,
    memory_budget: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The CSC ``(indptr, indices)`` of an on-disk graph, written to ``.npy`` files in bounded
    memory: :func:`~lightgraph.functional.neighbor_sampling.to_csc` out of core.

    A distribution sort whose reads and writes are all sequential: (1) count in-degrees
    over chunks of the edges (the ``indptr``); (2) append every edge's source to the
    spill file of its target's window, a run of consecutive targets with as many in-edges
    as ``memory_budget`` sorts at once (:class:`~lightgraph.utilities.spill.KeyedSpill`);
    (3) read one window's spill file at a time, sort each target's sources in memory and
    write the window to its slice of the memory-mapped ``indices``. Memory: ``indptr``
    (``int64 [N + 1]``, counted in its memory-mapped file), one chunk or window sized by
    ``memory_budget`` and, for a target with more in-edges than a window, that target's
    in-edges. Disk: the spill files, as large as the edges' (target, source) pairs,
    removed window by window. Passes over the edges: two, plus one per 256 windows
    beyond the first 256.

    Args:
        edge_index: ``[2, num_edges]`` integer array (a ``numpy.memmap`` read chunk by
            chunk), row 0 the sources, row 1 the targets.
        num_nodes: ``N``; ids lie in ``[0, N)``.
        directory: an existing directory; :data:`CSC_INDPTR_NAME` and
            :data:`CSC_INDICES_NAME` are written there (replacing what is there), the
            spill files in a temporary directory inside it.
        memory_budget: bytes per chunk (``None``:
            :func:`~lightgraph.utilities.memory.default_memory_budget`).

    Returns:
        ``indptr`` (``int64 [N + 1]``) and ``indices`` (``int32`` source ids if ``N <
        2**31``, else ``int64``; ``[num_edges]``), both opened read-only memory-mapped:
        ``indices[indptr[v]:indptr[v + 1]]`` are the sources of the edges into ``v`` in
        increasing order (repeated edges repeated) -- the values ``to_csc`` gives.

    Raises:
        ValueError: for an ``edge_index`` that is not ``[2, E]`` integers in ``[0, N)``, a
            bad ``num_nodes`` or ``memory_budget``, or a ``directory`` that does not exist.
    """
    owner = "on_disk_csc"
    n = check_int(owner, "num_nodes", num_nodes, low=0)
    edge_index = check_edge_array(owner, edge_index)
    budget = check_memory_budget(owner, memory_budget)
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(
            f"{owner}: expected `directory` to be an existing directory but got {directory!r}."
        )
    num_edges = int(edge_index.shape[1])
    chunk = rows_per_chunk(budget, _CSC_EDGE_BYTES, cap=_MAX_CHUNK)
    idt = np.dtype(np.int32 if n < 2**31 else np.int64)

    # pass 1: in-degrees. The offsets are counted in their memory-mapped file (file
    # pages the kernel may reclaim, not the process's memory).
    indptr_path = os.path.join(directory, CSC_INDPTR_NAME)
    indptr = new_npy(indptr_path, np.int64, (n + 1,))
    for lo, src, dst in edge_chunks(edge_index, chunk, np.int64):
        check_edge_ids(owner, lo, src, dst, n)
        add_key_counts(indptr[1:], dst)
    np.cumsum(indptr, out=indptr)

    # pass 2: the sources spilled by target windows; each window placed, then every
    # target's sources sorted
    indices_path = os.path.join(directory, CSC_INDICES_NAME)
    indices = new_npy(indices_path, idt, (num_edges,))
    with tempfile.TemporaryDirectory(prefix=".csc-", dir=directory) as spill_dir:
        spill = KeyedSpill(indptr, idt, (), spill_dir, budget, "csc")
        for p in range(spill.passes):
            for _, src, dst in edge_chunks(edge_index, chunk, np.int64):
                spill.add(p, dst, src.astype(idt))
            for v, w, sources in spill.windows(p, owner):
                _sort_window(indptr, v, w, n, sources)
                indices[indptr[v] : indptr[w]] = sources
    for array in (indptr, indices):
        if isinstance(array, np.memmap):
            array.flush()
    del indptr, indices
    return (
        np.load(indptr_path, mmap_mode="r"),
        np.load(indices_path, mmap_mode="r"),
    )


def _sort_window(indptr: np.ndarray, v: int, w: int, n: int, sources: np.ndarray) -> None:
    """Sort, in place, the sources of every target of window ``[v, w)`` (``sources`` holds
    their runs, ``indptr[v]`` onwards)."""
    if sources.size == 0:
        return
    target = np.repeat(np.arange(w - v, dtype=np.int64), np.diff(np.asarray(indptr[v : w + 1])))
    if (w - v) * max(n, 1) < 2**62:
        key = target * n + sources
        key.sort()
        sources[:] = key % max(n, 1)
    else:
        sources[:] = sources[np.lexsort((sources, target))]
