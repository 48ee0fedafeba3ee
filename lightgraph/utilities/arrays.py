"""NumPy arrays on disk: new ``.npy`` files, node-id dtypes, edges streamed in chunks.

The out-of-core build (CSC, GAP, hubs) and the partition-store writer share these; they
hold no graph semantics beyond "an edge list is ``[2, E]``".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from lightgraph.utilities.progress import pass_progress

__all__ = ["edge_chunks", "id_dtype_for", "new_npy"]


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
    array (or ``numpy.memmap``), each read into memory once; cast to ``dtype`` when given
    (no copy if it already has it), else in the array's own dtype."""
    num_edges = int(edge_index.shape[1])
    with pass_progress(num_edges) as advance:  # a bar inside a preparation stage
        for lo in range(0, num_edges, chunk):
            hi = min(num_edges, lo + chunk)
            block = np.asarray(edge_index[:, lo:hi])
            if dtype is not None:
                block = block.astype(dtype, copy=False)
            yield lo, block[0], block[1]
            advance(hi - lo)
