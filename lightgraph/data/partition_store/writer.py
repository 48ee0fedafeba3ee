"""Writing a partition store: a streaming two-pass build, and build-or-open.

:func:`write_partition_store` writes the files of :mod:`.layout` through a
:class:`~lightgraph.data.CacheWriter`, streaming: besides its input it holds ``O(N)``
node-id arrays, ``O(k**2)`` bucket counters and one chunk of edges (or of node rows) at a
time; every output is written straight into a memory-mapped file (a two-pass counting
sort over edge chunks). :func:`build_partition_store` runs it through the one cache-build
path and opens the result, reusing a complete store with the same fingerprint.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.cached_data_module import (
    META_FILE,
    CacheWriter,
    build_cache,
    check_cache,
    read_manifest,
)
from lightgraph.data.graph_dataset import (
    MASK_NAMES,
    GraphDataset,
    ensure_edge_index,
    validate_graph,
)
from lightgraph.data.partition_store.integrity import default_store_fingerprint, resolve_graph
from lightgraph.data.partition_store.layout import (
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
    id_dtype_for,
)
from lightgraph.data.partition_store.reader import PartitionStore
from lightgraph.utilities.checks import check_bool, check_int, check_type, describe

#: Default edges (or node rows, capped at 64 MiB) per chunk of the streaming build.
DEFAULT_CHUNK_SIZE = 1 << 20
_NODE_CHUNK_BYTES = 64 << 20


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


def _create_npy(path: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A writable memory map of a new ``.npy`` file (a plain array if it holds nothing)."""
    if int(np.prod(shape)) == 0:
        with open(path, "wb") as f:
            np.save(f, np.zeros(shape, dtype=dtype))
        return np.zeros(shape, dtype=dtype)
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)


def _save_npy(writer: CacheWriter, name: str, array: np.ndarray) -> None:
    with writer.open(name, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)


def _count(keys: np.ndarray, size: int) -> np.ndarray:
    """``bincount(keys, minlength=size)`` without a ``size``-long temporary per chunk."""
    if size <= 4 * max(keys.size, 1) or size <= 1 << 16:
        return np.bincount(keys, minlength=size).astype(np.int64, copy=False)
    out = np.zeros(size, dtype=np.int64)
    uniq, counts = np.unique(keys, return_counts=True)
    out[uniq] = counts
    return out


def _scatter(keys: np.ndarray, cursor: np.ndarray, out: np.ndarray, values: np.ndarray) -> None:
    """Counting-sort step: write ``values`` to ``out`` at ``cursor[key]`` onwards, stably."""
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


def write_partition_store(
    writer: CacheWriter,
    data: Data,
    part: Tensor,
    hubs: Tensor | None,
    *,
    num_parts: int | None = None,
    num_classes: int | None = None,
    fingerprint: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> dict[str, Any]:
    """Write HANOI's partition store of ``data`` through ``writer`` (streaming).

    Use it in :meth:`CachedDataModule.build` (or through :func:`build_partition_store`);
    the returned metadata goes to ``meta.json``.

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
        chunk_size: edges per chunk of the two streaming passes (node rows per chunk:
            the same, capped at 64 MiB of rows).

    Returns:
        The store's metadata (sizes, dtypes, fingerprint, build time).

    Raises:
        ValueError, TypeError: for a graph outside the layout, a ``part`` of the wrong
            length or with ids outside ``[0, num_parts)``, ``hubs`` out of range,
            unsorted or duplicated.
    """
    owner = "write_partition_store"
    start = time.perf_counter()
    check_type(owner, "writer", writer, CacheWriter)
    check_type(owner, "data", data, Data, "a torch_geometric Data in the GraphDataset layout")
    chunk_size = check_int(owner, "chunk_size", chunk_size)
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise TypeError(
            f"{owner}: expected `fingerprint` to be a str or None but got {type(fingerprint).__name__}."
        )
    data = ensure_edge_index(data)
    multilabel = getattr(data, "y", None) is not None and data.y.dim() == 2
    validate_graph(data, num_classes=num_classes, multilabel=multilabel)
    x, y, edge_index = data.x, data.y, data.edge_index
    n, f = int(x.size(0)), int(x.size(1))
    part_np, k = _check_part(owner, part, n, num_parts)
    hub_np = _check_hubs(owner, hubs, n)
    h = int(hub_np.size)
    idt = id_dtype_for(n)
    y_dtype: np.dtype
    y_shape: tuple[int, ...]
    if multilabel:
        num_classes = int(y.size(1))
        y_dtype, y_shape = np.dtype(np.float32), (int(y.size(1)),)
    else:
        if num_classes is None:
            num_classes = int(y.max()) + 1 if y.numel() else 0
        y_dtype, y_shape = np.dtype(np.int64), ()

    # ---- node order: stable sort by partition
    sizes = np.bincount(part_np, minlength=k).astype(np.int64)
    part_ptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=part_ptr[1:])
    node_ids = np.argsort(part_np, kind="stable").astype(idt)
    store_of = np.empty(n, dtype=idt)
    store_of[node_ids] = np.arange(n, dtype=idt)
    is_hub = np.zeros(n, dtype=bool)
    is_hub[hub_np] = True
    hub_store = store_of[hub_np]

    _save_npy(writer, PART_PTR_FILE, part_ptr)
    _save_npy(writer, HUB_IDS_FILE, hub_np)
    _save_npy(writer, HUB_STORE_IDS_FILE, hub_store)
    hub_idx = torch.from_numpy(hub_np)
    _save_npy(writer, HUB_X_FILE, x.index_select(0, hub_idx).detach().cpu().float().numpy())
    _save_npy(writer, HUB_Y_FILE, y.index_select(0, hub_idx).detach().cpu().numpy().astype(y_dtype))

    # ---- node arrays, a chunk of store rows at a time
    row_bytes = 4 * f + y_dtype.itemsize * int(np.prod(y_shape)) + 3 + idt.itemsize
    rows = max(1, min(chunk_size, _NODE_CHUNK_BYTES // row_bytes))
    masks = [getattr(data, name) for name in MASK_NAMES]
    with contextlib.ExitStack() as stack:
        paths = {name: stack.enter_context(writer.path(name)) for name in NODE_FILES}
        out = {
            X_FILE: _create_npy(paths[X_FILE], np.float32, (n, f)),
            Y_FILE: _create_npy(paths[Y_FILE], y_dtype, (n, *y_shape)),
            MASKS_FILE: _create_npy(paths[MASKS_FILE], np.bool_, (n, 3)),
            NODE_IDS_FILE: _create_npy(paths[NODE_IDS_FILE], idt, (n,)),
        }
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            ids = node_ids[lo:hi]
            idx = torch.from_numpy(ids.astype(np.int64))
            out[X_FILE][lo:hi] = x.index_select(0, idx).detach().cpu().float().numpy()
            out[Y_FILE][lo:hi] = y.index_select(0, idx).detach().cpu().numpy().astype(y_dtype)
            out[MASKS_FILE][lo:hi] = torch.stack([m[idx] for m in masks], 1).cpu().numpy()
            out[NODE_IDS_FILE][lo:hi] = ids
        _flush(out)

    # ---- edges: pass 1 counts buckets and in-degrees
    num_edges = int(edge_index.size(1))
    cnt_pp = np.zeros(k * k, dtype=np.int64)
    cnt_hp = np.zeros(2 * k, dtype=np.int64)
    num_hh = 0
    indptr = np.zeros(n + 1, dtype=np.int64)

    def chunks() -> Any:
        for lo in range(0, num_edges, chunk_size):
            hi = min(num_edges, lo + chunk_size)
            block = edge_index[:, lo:hi].detach().cpu().numpy()
            src, dst = block[0], block[1]
            hs, hd = is_hub[src], is_hub[dst]
            pp = ~(hs | hd)
            hp = hs ^ hd
            hh = hs & hd
            # hub bucket: 2 * (partition of the non-hub end) + (0: hub -> node, 1: node -> hub)
            hub_key = 2 * part_np[np.where(hs, dst, src)[hp]] + ~hs[hp]
            yield src, dst, hs, pp, hp, hh, hub_key

    for src, dst, _hs, pp, _hp, hh, hub_key in chunks():
        cnt_pp += _count(part_np[src[pp]] * k + part_np[dst[pp]], k * k)
        cnt_hp += _count(hub_key, 2 * k)
        num_hh += int(hh.sum())
        indptr[1:] += _count(store_of[dst], n)
    np.cumsum(indptr, out=indptr)
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
            EDGES_FILE: _create_npy(paths[EDGES_FILE], idt, (int(edge_ptr[-1]), 2)),
            HUB_EDGES_FILE: _create_npy(paths[HUB_EDGES_FILE], idt, (int(hub_edge_ptr[-1]), 2)),
            HUB_HUB_EDGES_FILE: _create_npy(paths[HUB_HUB_EDGES_FILE], idt, (num_hh, 2)),
            CSC_INDICES_FILE: _create_npy(paths[CSC_INDICES_FILE], idt, (num_edges,)),
        }
        cur_pp, cur_hp, cur_csc = edge_ptr[:-1].copy(), hub_edge_ptr[:-1].copy(), indptr[:-1].copy()
        hh_at = 0
        for src, dst, hs, pp, hp, hh, hub_key in chunks():
            s_store, d_store = store_of[src], store_of[dst]
            pair = np.stack([s_store[pp], d_store[pp]], 1)
            _scatter(part_np[src[pp]] * k + part_np[dst[pp]], cur_pp, out[EDGES_FILE], pair)
            hub_end, other = np.where(hs, src, dst)[hp], np.where(hs, d_store, s_store)[hp]
            pair = np.stack([np.searchsorted(hub_np, hub_end).astype(idt), other], 1)
            _scatter(hub_key, cur_hp, out[HUB_EDGES_FILE], pair)
            m_hh = int(hh.sum())
            pair = np.stack([np.searchsorted(hub_np, src[hh]), np.searchsorted(hub_np, dst[hh])], 1)
            out[HUB_HUB_EDGES_FILE][hh_at : hh_at + m_hh] = pair
            hh_at += m_hh
            _scatter(d_store, cur_csc, out[CSC_INDICES_FILE], s_store)
        if (
            not np.array_equal(cur_pp, edge_ptr[1:])
            or not np.array_equal(cur_hp, hub_edge_ptr[1:])
            or not np.array_equal(cur_csc, indptr[1:])
            or hh_at != num_hh
        ):
            raise RuntimeError(
                f"{owner}: `data.edge_index` changed while the store was written (the two "
                f"passes over it disagree); do not modify the graph during the build."
            )
        _flush(out)

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
        "chunk_size": chunk_size,
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
    rebuild: bool = False,
) -> PartitionStore:
    """Write a complete partition store to ``directory`` and open it.

    Goes through the one cache-build path
    (:func:`~lightgraph.data.cached_data_module.build_cache`): a private staging
    directory, ``meta.json`` last, an atomic publish. A complete store already in
    ``directory`` with the same fingerprint is opened as it is (unless ``rebuild``);
    a stale or damaged one is replaced. A directory holding anything else is never
    replaced (an error says so).

    Args:
        data_or_dataset: the graph (a ``Data`` in the GraphDataset layout), or a
            :class:`~lightgraph.data.GraphDataset`, loaded only when a build is needed.
        directory: the store directory.
        part, hubs, num_parts, num_classes, chunk_size: see :func:`write_partition_store`
            (``num_classes`` defaults to the dataset's).
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
    if dataset is not None:
        data = dataset.load()
        if num_classes is None and not dataset.multilabel:
            num_classes = dataset.num_classes
    assert data is not None

    def build(writer: CacheWriter) -> dict[str, Any]:
        return write_partition_store(
            writer,
            data,
            part,
            hubs,
            num_parts=num_parts,
            num_classes=num_classes,
            fingerprint=fingerprint,
            chunk_size=chunk_size,
        )

    build_cache(directory, build, owner=owner, replace=True)
    return PartitionStore.open(directory, fingerprint)
