"""NumPy arrays on disk: new ``.npy`` files, node-id dtypes, edges streamed in chunks.

The out-of-core build (CSC, GAP, hubs) and the partition-store writer share these; they
hold no graph semantics beyond "an edge list is ``[2, E]``".
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from lightgraph.utilities.progress import pass_progress

__all__ = ["WorkArrays", "edge_chunks", "id_dtype_for", "new_npy"]

#: Entries a :class:`WorkArrays` fill writes at once.
_FILL_ROWS = 1 << 20


def new_npy(path: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A writable memory map of a new ``.npy`` file at ``path`` (a plain zero array, also
    saved, when it holds nothing: NumPy cannot map an empty file)."""
    if int(np.prod(shape)) == 0:
        with open(path, "wb") as f:
            np.save(f, np.zeros(shape, dtype=dtype), allow_pickle=False)
        return np.zeros(shape, dtype=dtype)
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)


def id_dtype_for(num_nodes: int) -> np.dtype:
    """``int32`` for node ids of a graph with fewer than ``2**31`` nodes, else ``int64``."""
    return np.dtype(np.int32 if num_nodes < 2**31 else np.int64)


def edge_chunks(
    edge_index: Any, chunk: int, dtype: Any = None
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(start, src, dst)`` of consecutive chunks of at most ``chunk`` edges of a ``[2, E]``
    array (or ``numpy.memmap``), each read into one buffer reused from chunk to chunk (so
    a pass holds one chunk, not two: the caller's names still point at the previous
    chunk while the next is read); cast to ``dtype`` when given, else in the array's own
    dtype. ``src`` and ``dst`` are overwritten by the next chunk: copy what must outlive
    the iteration."""
    num_edges = int(edge_index.shape[1])
    buffer = np.empty((2, min(chunk, num_edges)), dtype if dtype is not None else edge_index.dtype)
    with pass_progress(num_edges) as advance:  # a bar inside a preparation stage
        for lo in range(0, num_edges, chunk):
            hi = min(num_edges, lo + chunk)
            block = buffer[:, : hi - lo]
            block[...] = edge_index[:, lo:hi]
            yield lo, block[0], block[1]
            advance(hi - lo)


class WorkArrays:
    """Per-node arrays of an out-of-core pass, memory-mapped from files in ``directory``.

    Their pages are file pages, not the process's anonymous memory: under a memory limit
    the kernel writes them back and reclaims them (as it does the input's pages) instead
    of killing the process, so a pass over a graph of any node count holds only its
    chunks as anonymous memory. With memory to spare the pages stay in the page cache and
    cost about what an array in memory costs. Each file is unlinked as soon as it is
    mapped: nothing is left on disk if the process is killed, and the pages are freed
    when the last reference to the array goes.

    Args:
        directory: an existing directory on a disk with room for the arrays, or ``None``
            for plain arrays in memory (a graph that is in memory anyway).
    """

    def __init__(self, directory: str | None) -> None:
        self.directory = directory

    def zeros(self, name: str, length: int, dtype: Any, fill: Any = None) -> np.ndarray:
        """A new ``[length]`` array of ``dtype`` (zeros, or ``fill`` everywhere)."""
        dtype = np.dtype(dtype)
        if self.directory is None:
            return np.full(int(length), 0 if fill is None else fill, dtype)
        if length == 0:
            return np.zeros(0, dtype)
        handle, path = tempfile.mkstemp(prefix=f".{name}-", suffix=".work", dir=self.directory)
        os.close(handle)
        array = np.memmap(path, dtype=dtype, mode="w+", shape=(int(length),))
        os.remove(path)  # the mapping keeps the pages; nothing outlives the process
        if fill is not None and fill != 0:
            for lo in range(0, length, _FILL_ROWS):
                array[lo : lo + _FILL_ROWS] = fill
        return array

    def arange(self, name: str, length: int, dtype: Any) -> np.ndarray:
        """``numpy.arange(length)`` as a work array, written in chunks."""
        array = self.zeros(name, length, dtype)
        for lo in range(0, length, _FILL_ROWS):
            hi = min(length, lo + _FILL_ROWS)
            array[lo:hi] = np.arange(lo, hi, dtype=array.dtype)
        return array
