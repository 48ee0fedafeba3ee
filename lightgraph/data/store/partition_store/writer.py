"""Writing a partition store: a streaming two-pass build, and build-or-open.

:func:`write_partition_store` writes the files of :mod:`.layout` through a
:class:`~lightgraph.data.store.CacheWriter`, streaming: besides its input it holds ``O(N)``
node-id arrays, ``O(k**2)`` bucket counters and one chunk of edges (or of node rows) at a
time; every output is written straight into a memory-mapped file (a two-pass counting
sort over edge chunks). Its input may be a graph in memory or the memory-mapped arrays of
a graph on disk (:class:`~lightgraph.data.datasets.on_disk.OnDiskGraph`), read in chunks sized by
a ``memory_budget``; both give the same files. :func:`build_partition_store` runs it
through the one cache-build path and opens the result, reusing a complete store with the
same fingerprint.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import (
    MASK_NAMES,
    GraphDataset,
    ensure_edge_index,
    validate_graph,
)
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.partition.out_of_core import (
    scatter_by_key,
    validate_on_disk_graph,
)
from lightgraph.data.store.cache import (
    META_FILE,
    CacheWriter,
    build_cache,
    check_cache,
    read_manifest,
)
from lightgraph.data.store.partition_store.integrity import default_store_fingerprint, resolve_graph
from lightgraph.data.store.partition_store.layout import (
    CSC_INDICES_FILE,
    CSC_INDPTR_FILE,
    EDGE_PTR_FILE,
    EDGES_FILE,
    HUB_EDGE_PTR_FILE,
    HUB_EDGES_FILE,
    HUB_HUB_EDGES_FILE,
    HUB_IDS_FILE,
    HUB_STORE_IDS_FILE,
    HUB_X_FILE,
    HUB_Y_FILE,
    MASKS_FILE,
    NODE_FILES,
    NODE_IDS_FILE,
    PART_PTR_FILE,
    STORE_FORMAT,
    STORE_VERSION,
    X_FILE,
    Y_FILE,
)
from lightgraph.data.store.partition_store.reader import PartitionStore
from lightgraph.utilities.arrays import WorkArrays, edge_chunks, id_dtype_for, new_npy
from lightgraph.utilities.checks import check_bool, check_int, check_type, describe
from lightgraph.utilities.memory import check_memory_budget, default_memory_budget, rows_per_chunk
from lightgraph.utilities.spill import KeyedSpill

#: Default edges (or node rows, capped at 64 MiB) per chunk of the streaming build.
DEFAULT_CHUNK_SIZE = 1 << 20
_NODE_CHUNK_BYTES = 64 << 20
# Bytes per edge a chunk of the two edge passes holds (its int64 copy, masks, keys, the
# counting sort's order, ranks and gathered pairs), for chunks sized by a memory budget.
_EDGE_BYTES = 256
# Bytes per node of a chunk of the counting sort by partition (keys, order, ranks,
# positions and values as int64).
_NODE_SORT_BYTES = 64


def _check_part(
    owner: str, part: Any, num_nodes: int, num_parts: int | None
) -> tuple[np.ndarray, int]:
    if not isinstance(part, Tensor):
        raise TypeError(
            f"{owner}: expected `part` to be an integer torch.Tensor [num_nodes] but got "
            f"{type(part).__name__}."
        )
    if (
        part.dim() != 1
        or part.dtype == torch.bool
        or part.is_floating_point()
        or part.is_complex()
        or part.numel() != num_nodes
    ):
        raise ValueError(
            f"{owner}: expected `part` to be an integer tensor of shape [{num_nodes}] (one "
            f"partition id per node) but got {describe(part)}."
        )
    arr = part.detach().cpu().numpy().astype(np.int64, copy=False)
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, -1)
    if num_parts is None:
        num_parts = hi + 1
        if lo < 0 or num_parts < 1:
            raise ValueError(
                f"{owner}: expected partition ids in `part` to lie in [0, num_parts) but found "
                f"values in [{lo}, {hi}]."
            )
    else:
        num_parts = check_int(owner, "num_parts", num_parts)
        if lo < 0 or hi >= num_parts:
            raise ValueError(
                f"{owner}: expected partition ids in `part` to lie in [0, {num_parts - 1}] "
                f"(num_parts = {num_parts}) but found values in [{lo}, {hi}]."
            )
    return arr, num_parts


def _check_hubs(owner: str, hubs: Any, num_nodes: int) -> np.ndarray:
    if hubs is None:
        return np.zeros(0, dtype=np.int64)
    if not isinstance(hubs, Tensor):
        raise TypeError(
            f"{owner}: expected `hubs` to be a 1-D integer torch.Tensor of node ids (or None) "
            f"but got {type(hubs).__name__}."
        )
    if hubs.dim() != 1 or hubs.dtype == torch.bool or hubs.is_floating_point() or hubs.is_complex():
        raise ValueError(
            f"{owner}: expected `hubs` to be a 1-D integer tensor of node ids but got "
            f"{describe(hubs)}."
        )
    arr = hubs.detach().cpu().numpy().astype(np.int64, copy=False)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"{owner}: expected node ids in `hubs` to lie in [0, {num_nodes - 1}] "
                f"(num_nodes = {num_nodes}) but found values in [{lo}, {hi}]."
            )
        bad = np.flatnonzero(arr[1:] <= arr[:-1])
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{owner}: expected `hubs` to be strictly increasing node ids (sorted, no "
                f"duplicates; use `torch.unique(hubs)`) but got hubs[{i}] = {int(arr[i])} "
                f"followed by hubs[{i + 1}] = {int(arr[i + 1])}."
            )
    return arr


def _save_npy(writer: CacheWriter, name: str, array: np.ndarray) -> None:
    """``numpy.save`` of ``array`` (the same bytes), its data written in pieces of
    :data:`_SAVE_BYTES`: ``numpy.save`` buffers up to 16 MiB at a time for a file object
    that is not a plain file, a per-node array's worth on a large graph."""
    array = np.ascontiguousarray(array)
    flat = array.reshape(-1)
    step = max(1, _SAVE_BYTES // max(array.itemsize, 1))
    with writer.open(name, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        for lo in range(0, flat.shape[0], step):
            f.write(flat[lo : lo + step].tobytes())


#: Bytes written at once by :func:`_save_npy`.
_SAVE_BYTES = 1 << 20


def _distribute_node_rows(
    data: OnDiskGraph,
    store_of: np.ndarray,
    rows: int,
    y_dtype: np.dtype,
    out: dict,
    spill_dir: str,
    window_bytes: int,
) -> None:
    """The node rows of an on-disk graph in store order, with sequential reads and writes
    only (a distribution sort, :class:`~lightgraph.utilities.spill.KeyedSpill` keyed by
    store row): the graph's rows are read in id order, ``rows`` at a time, and spilled to
    the files of their windows of store rows; each window is then placed in memory and
    written to its slice of the store.

    A gather in store order (or a scatter in id order) touches rows all over a memory-
    mapped file larger than the memory limit, and every page fault reads a read-ahead
    window: 77 GB read for 7.9 GB of features under 1 GiB. Here the graph's rows are read
    once (per :data:`~lightgraph.utilities.spill.MAX_OPEN_FILES` windows), and the spill
    files are written once and read once."""
    n = store_of.shape[0]
    x_src, y_src = data.x, data.y
    fields = [
        ("x", x_src.dtype, tuple(x_src.shape[1:])),
        ("y", y_dtype, tuple(y_src.shape[1:])),
        ("masks", np.bool_, (3,)),
    ]
    # padded to whole 4-byte units: the spill then moves a row 4 bytes at a time, not 1
    pad = -np.dtype(fields).itemsize % 4
    record = np.dtype(fields + ([("pad", np.uint8, (pad,))] if pad else []))
    spill = KeyedSpill(n, record, (), spill_dir, window_bytes, "rows")  # one row per node
    for p in range(spill.passes):
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            chunk = np.empty(hi - lo, record)
            chunk["x"] = np.asarray(x_src[lo:hi])
            chunk["y"] = np.asarray(y_src[lo:hi]).astype(y_dtype, copy=False)
            for j, name in enumerate(MASK_NAMES):
                chunk["masks"][:, j] = np.asarray(getattr(data, name)[lo:hi])
            spill.add(p, np.asarray(store_of[lo:hi]), chunk)
        for first, stop, placed in spill.windows(p, "write_partition_store"):
            out[X_FILE][first:stop] = placed["x"]
            out[Y_FILE][first:stop] = placed["y"]
            out[MASKS_FILE][first:stop] = placed["masks"]


class _Graph:
    """What the build reads of its input, the same way for a ``Data`` in memory and for
    an :class:`~lightgraph.data.datasets.on_disk.OnDiskGraph`: node rows in a given order and chunks
    of edges. Rows of an on-disk graph are read in ascending id order (sequential reads of
    the memory maps) and put in the order asked for in memory."""

    def __init__(self, data: Data | OnDiskGraph, y_dtype: np.dtype) -> None:
        self.data: Any = data
        self.y_dtype = y_dtype
        self.on_disk = isinstance(data, OnDiskGraph)

    def x(self, ids: np.ndarray) -> np.ndarray:
        if self.on_disk:
            return self._gather(self.data.x, ids).astype(np.float32, copy=False)
        idx = torch.from_numpy(ids.astype(np.int64))
        return self.data.x.index_select(0, idx).detach().cpu().float().numpy()

    def y(self, ids: np.ndarray) -> np.ndarray:
        if self.on_disk:
            return self._gather(self.data.y, ids).astype(self.y_dtype, copy=False)
        idx = torch.from_numpy(ids.astype(np.int64))
        return self.data.y.index_select(0, idx).detach().cpu().numpy().astype(self.y_dtype)

    def masks(self, ids: np.ndarray) -> np.ndarray:
        if self.on_disk:
            return np.stack([self._gather(getattr(self.data, m), ids) for m in MASK_NAMES], 1)
        idx = torch.from_numpy(ids.astype(np.int64))
        return torch.stack([getattr(self.data, m)[idx] for m in MASK_NAMES], 1).cpu().numpy()

    @staticmethod
    def _gather(array: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if ids.size > 1 and bool(np.any(ids[1:] < ids[:-1])):
            order = np.argsort(ids, kind="stable")
            rows = np.asarray(array[ids[order]])
            out = np.empty_like(rows)
            out[order] = rows
            return out
        return np.asarray(array[ids])

    def edge_chunks(self, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if self.on_disk:
            for _, src, dst in edge_chunks(self.data.edge_index, chunk):
                yield src, dst
            return
        edge_index = self.data.edge_index
        for lo in range(0, int(edge_index.size(1)), chunk):
            block = edge_index[:, lo : lo + chunk].detach().cpu().numpy()
            yield block[0], block[1]


def write_partition_store(
    writer: CacheWriter,
    data: Data | OnDiskGraph,
    part: Tensor,
    hubs: Tensor | None,
    *,
    num_parts: int | None = None,
    num_classes: int | None = None,
    fingerprint: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    memory_budget: int | None = None,
) -> dict[str, Any]:
    """Write HANOI's partition store of ``data`` through ``writer`` (streaming).

    Use it in :meth:`CachedDataModule.build` (or through :func:`build_partition_store`);
    the returned metadata goes to ``meta.json``.

    ``data`` may be a graph in memory (a ``Data``) or on disk (an
    :class:`~lightgraph.data.datasets.on_disk.OnDiskGraph` of memory-mapped arrays, validated in
    chunks and never loaded whole: each chunk of store rows reads its source rows in
    ascending order, the edges are read in chunks, twice). Both give the same files, byte
    for byte, whatever the chunk sizes.

    Args:
        writer: the cache writer of the (staging) store directory.
        data: a graph in the :class:`~lightgraph.data.GraphDataset` layout.
        part: ``[num_nodes]`` partition id of every node.
        hubs: strictly increasing original ids of the hub nodes (``None`` or empty: none).
        num_parts: number of partitions ``k`` (default ``part.max() + 1``; partitions may
            be empty).
        num_classes: number of classes of a single-label graph (default ``y.max() + 1``).
        fingerprint: the string :meth:`PartitionStore.open` compares with (what the
            inputs hash to); stored in the metadata.
        chunk_size: the most edges per chunk of the two streaming passes (node rows per
            chunk: the same, capped at 64 MiB of rows).
        memory_budget: bytes the chunks may use (``None``: chunks of ``chunk_size``):
            edge and node-row chunks are shortened so that one chunk's working set and the
            build's per-node arrays (about 40 bytes per node) fit it (chunks get at least
            a quarter of it). It changes how the files are written, never what they hold.

    Returns:
        The store's metadata (sizes, dtypes, fingerprint, build time, the chunk size and
        memory budget used).

    Raises:
        ValueError, TypeError: for a graph outside the layout, a ``part`` of the wrong
            length or with ids outside ``[0, num_parts)``, ``hubs`` out of range,
            unsorted or duplicated.
    """
    owner = "write_partition_store"
    start = time.perf_counter()
    check_type(owner, "writer", writer, CacheWriter)
    check_type(
        owner,
        "data",
        data,
        (Data, OnDiskGraph),
        "a torch_geometric Data in the GraphDataset layout, or its arrays on disk",
    )
    chunk_size = check_int(owner, "chunk_size", chunk_size)
    if memory_budget is not None:
        memory_budget = check_memory_budget(owner, memory_budget)
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise TypeError(
            f"{owner}: expected `fingerprint` to be a str or None but got {type(fingerprint).__name__}."
        )
    if isinstance(data, OnDiskGraph):
        multilabel = data.y.ndim == 2
        max_class = validate_on_disk_graph(
            data, num_classes=num_classes, multilabel=multilabel, memory_budget=memory_budget
        )
        n, f = int(data.x.shape[0]), int(data.x.shape[1])
        num_edges = data.num_edges
        y_columns = int(data.y.shape[1]) if multilabel else 0
    else:
        data = ensure_edge_index(data)
        multilabel = getattr(data, "y", None) is not None and data.y.dim() == 2
        validate_graph(data, num_classes=num_classes, multilabel=multilabel)
        n, f = int(data.x.size(0)), int(data.x.size(1))
        num_edges = int(data.edge_index.size(1))
        y_columns = int(data.y.size(1)) if multilabel else 0
        max_class = int(data.y.max()) + 1 if data.y.numel() and not multilabel else 0
    part_np, k = _check_part(owner, part, n, num_parts)
    hub_np = _check_hubs(owner, hubs, n)
    h = int(hub_np.size)
    idt = id_dtype_for(n)
    y_dtype: np.dtype
    y_shape: tuple[int, ...]
    if multilabel:
        num_classes = y_columns
        y_dtype, y_shape = np.dtype(np.float32), (y_columns,)
    else:
        if num_classes is None:
            num_classes = max_class
        y_dtype, y_shape = np.dtype(np.int64), ()
    graph = _Graph(data, y_dtype)

    # ---- chunk lengths: the node-row cap of 64 MiB, the edge cap `chunk_size`, and the
    # memory budget (what one chunk holds, besides the per-node and per-bucket arrays)
    row_bytes = 4 * f + y_dtype.itemsize * int(np.prod(y_shape)) + 3 + idt.itemsize
    rows = max(1, min(chunk_size, _NODE_CHUNK_BYTES // row_bytes))
    edges = chunk_size
    if memory_budget is not None:
        # an on-disk graph's per-node arrays are work arrays (file pages), not its memory
        per_node = 0 if graph.on_disk else 40 + 2 * idt.itemsize
        reserved = per_node * n + 24 * (k * k + 2 * k) + 24 * h
        # node chunks: the gathered rows, their float32 copy and the output slice
        rows = rows_per_chunk(memory_budget, 3 * row_bytes + 32, reserved, cap=rows)
        edges = rows_per_chunk(memory_budget, _EDGE_BYTES, reserved, cap=chunk_size)

    # memory of one window of the spill files (an on-disk graph's node rows and edges)
    window_bytes = memory_budget if memory_budget is not None else default_memory_budget()

    # ---- node order: stable sort by partition
    sizes = np.bincount(part_np, minlength=k).astype(np.int64)
    part_ptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=part_ptr[1:])
    # Per-node arrays: memory-mapped work files next to the store for a graph on disk
    # (file pages the kernel may reclaim), plain arrays for a graph in memory; filled a
    # chunk of nodes at a time (a stable counting sort by partition).
    work = (
        tempfile.TemporaryDirectory(
            prefix=".work-", dir=os.path.dirname(os.path.abspath(writer.directory))
        )
        if graph.on_disk
        else None
    )
    arrays = WorkArrays(None if work is None else work.name)
    node_rows = edges if memory_budget is None else rows_per_chunk(memory_budget, _NODE_SORT_BYTES)
    node_ids = arrays.zeros("node-ids", n, idt)
    cursor = part_ptr[:-1].copy()
    # The edge passes look up the partitions of both ends at random: for a graph on disk,
    # a copy in the smallest dtype that holds k (fewer pages to keep in memory).
    node_part = part_np
    if graph.on_disk:
        node_part = arrays.zeros("node-part", n, np.int16 if k <= 2**15 else np.int32)
    for lo in range(0, n, node_rows):
        hi = min(n, lo + node_rows)
        scatter_by_key(part_np[lo:hi], cursor, node_ids, np.arange(lo, hi, dtype=idt))
        if node_part is not part_np:
            node_part[lo:hi] = part_np[lo:hi]
    store_of = arrays.zeros("store-of", n, idt)
    for lo in range(0, n, node_rows):
        hi = min(n, lo + node_rows)
        store_of[node_ids[lo:hi]] = np.arange(lo, hi, dtype=idt)
    # hub flags as bits (an eighth of the pages the edge passes read at random)
    hub_bits = arrays.zeros("hub-bits", (n + 7) // 8, np.uint8)
    np.bitwise_or.at(hub_bits, hub_np >> 3, np.left_shift(1, hub_np & 7).astype(np.uint8))
    hub_store = store_of[hub_np]

    _save_npy(writer, PART_PTR_FILE, part_ptr)
    _save_npy(writer, HUB_IDS_FILE, hub_np)
    _save_npy(writer, HUB_STORE_IDS_FILE, hub_store)

    # ---- hub rows (hub ids ascending), then the node arrays, a chunk of store rows at a time
    with contextlib.ExitStack() as stack:
        paths = {name: stack.enter_context(writer.path(name)) for name in (HUB_X_FILE, HUB_Y_FILE)}
        out = {
            HUB_X_FILE: new_npy(paths[HUB_X_FILE], np.float32, (h, f)),
            HUB_Y_FILE: new_npy(paths[HUB_Y_FILE], y_dtype, (h, *y_shape)),
        }
        for lo in range(0, h, rows):
            ids = hub_np[lo : lo + rows]
            out[HUB_X_FILE][lo : lo + rows] = graph.x(ids)
            out[HUB_Y_FILE][lo : lo + rows] = graph.y(ids)
        _flush(out)
    with contextlib.ExitStack() as stack:
        paths = {name: stack.enter_context(writer.path(name)) for name in NODE_FILES}
        out = {
            X_FILE: new_npy(paths[X_FILE], np.float32, (n, f)),
            Y_FILE: new_npy(paths[Y_FILE], y_dtype, (n, *y_shape)),
            MASKS_FILE: new_npy(paths[MASKS_FILE], np.bool_, (n, 3)),
            NODE_IDS_FILE: new_npy(paths[NODE_IDS_FILE], idt, (n,)),
        }
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            ids = node_ids[lo:hi]
            if graph.on_disk:  # the rows themselves: _distribute_node_rows below
                out[NODE_IDS_FILE][lo:hi] = ids
                continue
            out[X_FILE][lo:hi] = graph.x(ids)
            out[Y_FILE][lo:hi] = graph.y(ids)
            out[MASKS_FILE][lo:hi] = graph.masks(ids)
            out[NODE_IDS_FILE][lo:hi] = ids
        if graph.on_disk:
            with tempfile.TemporaryDirectory(
                prefix=".rows-", dir=os.path.dirname(os.path.abspath(paths[X_FILE]))
            ) as spill:
                _distribute_node_rows(graph.data, store_of, rows, y_dtype, out, spill, window_bytes)
        _flush(out)

    # ---- edges: pass 1 counts buckets and in-degrees
    cnt_pp = np.zeros(k * k, dtype=np.int64)
    cnt_hp = np.zeros(2 * k, dtype=np.int64)
    num_hh = 0
    # in-degrees by store id, counted at random: int32 while the edges fit it (half the
    # pages of the int64 offsets), then summed in order into the offsets
    in_degree = arrays.zeros("in-degree", n, np.int32 if num_edges < 2**31 else np.int64)

    from lightgraph.utilities import _array_kernels  # imports numba on the first call

    for src, dst in graph.edge_chunks(edges):
        num_hh += _array_kernels.count_store_edges(
            src, dst, hub_bits, node_part, store_of, k, cnt_pp, cnt_hp, in_degree
        )
    indptr = arrays.zeros("csc-indptr", n + 1, np.int64)
    total = 0
    for lo in range(0, n, node_rows):
        hi = min(n, lo + node_rows)
        np.cumsum(in_degree[lo:hi], dtype=np.int64, out=indptr[lo + 1 : hi + 1])
        indptr[lo + 1 : hi + 1] += total
        total = int(indptr[hi])
    del in_degree
    edge_ptr = np.zeros(k * k + 1, dtype=np.int64)
    np.cumsum(cnt_pp, out=edge_ptr[1:])
    hub_edge_ptr = np.zeros(2 * k + 1, dtype=np.int64)
    np.cumsum(cnt_hp, out=hub_edge_ptr[1:])
    del cnt_pp, cnt_hp
    _save_npy(writer, EDGE_PTR_FILE, edge_ptr)
    _save_npy(writer, HUB_EDGE_PTR_FILE, hub_edge_ptr)
    _save_npy(writer, CSC_INDPTR_FILE, indptr)

    # ---- pass 2 scatters every chunk into its buckets (memory-mapped outputs)
    with contextlib.ExitStack() as stack:
        paths = {
            name: stack.enter_context(writer.path(name))
            for name in (EDGES_FILE, HUB_EDGES_FILE, HUB_HUB_EDGES_FILE, CSC_INDICES_FILE)
        }
        out = {
            EDGES_FILE: new_npy(paths[EDGES_FILE], idt, (int(edge_ptr[-1]), 2)),
            HUB_EDGES_FILE: new_npy(paths[HUB_EDGES_FILE], idt, (int(hub_edge_ptr[-1]), 2)),
            HUB_HUB_EDGES_FILE: new_npy(paths[HUB_HUB_EDGES_FILE], idt, (num_hh, 2)),
            CSC_INDICES_FILE: new_npy(paths[CSC_INDICES_FILE], idt, (num_edges,)),
        }
        # An on-disk graph's bucketed outputs go through spill files (a distribution sort:
        # one pass over the edges, sequential writes; KeyedSpill): random writes to
        # memory-mapped files larger than the page cache would re-read and rewrite
        # read-ahead windows. A graph in memory is scattered straight into them.
        spills: dict[str, KeyedSpill] = {}
        passes = 1
        spill_dir = None
        if graph.on_disk:
            spill_dir = tempfile.TemporaryDirectory(
                prefix=".edges-", dir=os.path.dirname(os.path.abspath(paths[EDGES_FILE]))
            )
            spills = {
                EDGES_FILE: KeyedSpill(edge_ptr, idt, (2,), spill_dir.name, window_bytes, "pp"),
                HUB_EDGES_FILE: KeyedSpill(
                    hub_edge_ptr, idt, (2,), spill_dir.name, window_bytes, "hp"
                ),
                CSC_INDICES_FILE: KeyedSpill(indptr, idt, (), spill_dir.name, window_bytes, "csc"),
            }
            passes = max(spill.passes for spill in spills.values())
        cur_pp, cur_hp = edge_ptr[:-1].copy(), hub_edge_ptr[:-1].copy()
        cur_csc = None if graph.on_disk else indptr[:-1].copy()

        def put(p: int, name: str, keys: np.ndarray, cursor: Any, values: np.ndarray) -> None:
            if name not in spills:
                scatter_by_key(keys, cursor, out[name], values)
            elif p < spills[name].passes:
                spills[name].add(p, keys, values)

        # the second pass's outputs of one chunk, allocated once and reused
        size = max(1, min(edges, num_edges))
        pp_key, hp_key = np.empty(size, np.int64), np.empty(size, np.int64)
        pp_pair, hp_pair, hh_pair = (np.empty((size, 2), idt) for _ in range(3))
        csc_key, csc_value = np.empty(size, idt), np.empty(size, idt)
        hh_at = 0
        for p in range(passes):
            hh_at = 0
            for src, dst in graph.edge_chunks(edges):
                m = src.shape[0]
                n_pp, n_hp, m_hh = _array_kernels.split_store_edges(
                    src, dst, hub_bits, node_part, store_of, hub_np, k,
                    pp_key, pp_pair, hp_key, hp_pair, hh_pair, csc_key[:m], csc_value[:m],
                )  # fmt: skip
                put(p, EDGES_FILE, pp_key[:n_pp], cur_pp, pp_pair[:n_pp])
                put(p, HUB_EDGES_FILE, hp_key[:n_hp], cur_hp, hp_pair[:n_hp])
                if p == 0:  # appended in edge order: sequential, written once
                    out[HUB_HUB_EDGES_FILE][hh_at : hh_at + m_hh] = hh_pair[:m_hh]
                hh_at += m_hh
                put(p, CSC_INDICES_FILE, csc_key[:m], cur_csc, csc_value[:m])
            for name, spill in spills.items():
                if p < spill.passes:
                    for first, stop, values in spill.windows(p, owner):
                        out[name][spill.offset(first) : spill.offset(stop)] = values
        if spill_dir is not None:
            spill_dir.cleanup()
        if hh_at != num_hh or (
            not graph.on_disk
            and (
                not np.array_equal(cur_pp, edge_ptr[1:])
                or not np.array_equal(cur_hp, hub_edge_ptr[1:])
                or not np.array_equal(cur_csc, indptr[1:])
            )
        ):
            raise RuntimeError(
                f"{owner}: `data.edge_index` changed while the store was written (the two "
                f"passes over it disagree); do not modify the graph during the build."
            )
        _flush(out)
    if work is not None:
        work.cleanup()

    return {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "fingerprint": fingerprint,
        "num_nodes": n,
        "num_edges": num_edges,
        "num_parts": k,
        "num_features": f,
        "num_classes": int(num_classes),
        "multilabel": bool(multilabel),
        "num_hubs": h,
        "num_part_edges": int(edge_ptr[-1]),
        "num_hub_edges": int(hub_edge_ptr[-1]),
        "num_hub_hub_edges": num_hh,
        "id_dtype": idt.name,
        "label_dtype": y_dtype.name,
        "feature_dtype": "float32",
        "chunk_size": edges,
        "memory_budget": memory_budget,
        "build_seconds": round(time.perf_counter() - start, 3),
    }


def _flush(arrays: dict[str, np.ndarray]) -> None:
    for array in arrays.values():
        if isinstance(array, np.memmap):
            array.flush()
    arrays.clear()  # drop the maps before the files are fsync'ed and renamed


def _check_replaceable(owner: str, directory: str) -> None:
    """Refuse to replace a path that is neither new, an empty directory nor a store."""
    if not os.path.lexists(directory):
        return
    if not os.path.isdir(directory) or os.path.islink(directory):
        raise ValueError(
            f"{owner}: expected `directory` to be a new or empty directory or a partition "
            f"store but {directory} is not a directory; pass another path."
        )
    entries = sorted(os.listdir(directory))
    if not entries:
        return
    try:
        with open(os.path.join(directory, META_FILE)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != STORE_FORMAT:
        raise ValueError(
            f"{owner}: expected `directory` to be a new or empty directory or a partition "
            f"store but {directory} holds other files ({', '.join(entries[:5])}"
            f"{', ...' if len(entries) > 5 else ''}) and no partition store's {META_FILE}; "
            f"refusing to replace it. Pass another directory, or delete this one."
        )


def build_partition_store(
    data_or_dataset: Data | GraphDataset,
    directory: str | os.PathLike,
    part: Tensor,
    hubs: Tensor | None,
    *,
    num_parts: int | None = None,
    num_classes: int | None = None,
    fingerprint: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    memory_budget: int | None = None,
    rebuild: bool = False,
) -> PartitionStore:
    """Write a complete partition store to ``directory`` and open it.

    Goes through the one cache-build path
    (:func:`~lightgraph.data.store.cache.build_cache`): a private staging
    directory, ``meta.json`` last, an atomic publish. A complete store already in
    ``directory`` with the same fingerprint is opened as it is (unless ``rebuild``);
    a stale or damaged one is replaced. A directory holding anything else is never
    replaced (an error says so).

    Args:
        data_or_dataset: the graph (a ``Data`` in the GraphDataset layout), or a
            :class:`~lightgraph.data.GraphDataset`, read only when a build is needed: its
            arrays on disk (:meth:`~lightgraph.data.GraphDataset.on_disk`) in chunks when
            it has them, else :meth:`~lightgraph.data.GraphDataset.load`.
        directory: the store directory.
        part, hubs, num_parts, num_classes, chunk_size, memory_budget: see
            :func:`write_partition_store` (``num_classes`` defaults to the dataset's).
        fingerprint: what identifies the inputs; default
            :func:`default_store_fingerprint`.
        rebuild: rebuild even if a store with the same fingerprint exists.

    Returns:
        The opened :class:`PartitionStore`.
    """
    owner = "build_partition_store"
    dataset, data = resolve_graph(owner, data_or_dataset)
    check_type(owner, "part", part, Tensor, "an integer tensor [num_nodes] of partition ids")
    if hubs is not None:
        check_type(owner, "hubs", hubs, Tensor, "sorted node ids, or None for no hubs")
    check_bool(owner, "rebuild", rebuild)
    directory = os.fspath(directory)
    _check_replaceable(owner, directory)
    if fingerprint is None:
        fingerprint = default_store_fingerprint(data_or_dataset, part, hubs)
    if not rebuild and check_cache(directory) is None:
        meta, _ = read_manifest(directory)
        if (
            meta is not None
            and meta.get("format") == STORE_FORMAT
            and meta.get("version") == STORE_VERSION
            and meta.get("fingerprint") == fingerprint
        ):
            return PartitionStore.open(directory, fingerprint)
    graph: Data | OnDiskGraph | None = data
    if dataset is not None:
        graph = dataset.on_disk()
        if graph is None:
            graph = dataset.load()
        if num_classes is None and not dataset.multilabel:
            num_classes = dataset.num_classes
    assert graph is not None

    def build(writer: CacheWriter) -> dict[str, Any]:
        return write_partition_store(
            writer,
            graph,
            part,
            hubs,
            num_parts=num_parts,
            num_classes=num_classes,
            fingerprint=fingerprint,
            chunk_size=chunk_size,
            memory_budget=memory_budget,
        )

    build_cache(directory, build, owner=owner, replace=True)
    return PartitionStore.open(directory, fingerprint)
