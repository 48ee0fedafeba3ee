"""HANOI's on-disk partition store: a graph laid out in partition blocks for macro-batches.

HANOI (thesis ch. 4 in ``shared/seeds/003_…``, §4.2.1 and §4.2.3) trains out of core by
reading a few graph partitions at a time -- a *macro-batch* -- with bulk sequential I/O,
augmenting them with *hub* nodes pinned in memory, and sampling mini-batches inside the
macro-batch in memory. This module writes and reads the store that makes those reads
contiguous:

* **nodes renumbered partition-major**: the *store id* of a node is its position when
  the nodes are sorted (stably) by partition, so every node array holds partition ``p``
  in rows ``part_ptr[p]:part_ptr[p + 1]`` -- one contiguous read per array;
* **edges bucketed** by ``(partition of source, partition of destination)``; a
  macro-batch of ``b`` partitions reads its ``b**2`` buckets (adjacent buckets are
  coalesced into one read);
* **hubs stored apart**: their features and labels in their own files (read into memory
  once, at :meth:`PartitionStore.open`); edges between a hub and a non-hub node bucketed
  by the non-hub node's partition (``b`` more buckets per macro-batch); hub-hub edges kept
  with the hubs (in memory). Every edge lives in exactly one bucket, so a macro-batch
  holds the induced subgraph on its partitions' nodes and the hubs, each edge once;
* **the whole-graph CSC** (by destination, in store ids) for whole-graph neighbour
  sampling from disk (HANOI's NS-Ext baseline) and layer-wise evaluation.

All arrays are ``.npy`` files (written through :func:`numpy.lib.format.open_memmap`);
node ids are ``int32`` when the graph has fewer than ``2**31`` nodes, ``int64`` otherwise
(``meta["id_dtype"]``). The store is a cache directory of
:mod:`lightgraph.data.cached_data_module` (atomic staging and publish, manifest in
``meta.json``, :class:`~lightgraph.data.cached_data_module.CorruptCacheError` for a
damaged file).

Files (``N`` nodes, ``F`` features, ``C`` classes, ``k`` partitions, ``H`` hubs):

===================== ========================= =============================================
file                  dtype, shape              content
===================== ========================= =============================================
``x.npy``             float32 ``[N, F]``        features, store order
``y.npy``             int64 ``[N]`` or          labels (single-label) or 0/1 label matrix
                      float32 ``[N, C]``        (multi-label), store order
``masks.npy``         bool ``[N, 3]``           train/val/test masks, store order
``node_ids.npy``      id ``[N]``                original id of every store id
``part_ptr.npy``      int64 ``[k + 1]``         node offsets of the partitions
``edges.npy``         id ``[E_pp, 2]``          (src, dst) store ids of edges between two
                                                non-hub nodes, bucket ``p * k + q`` holds
                                                those from partition ``p`` to ``q``
``edge_ptr.npy``      int64 ``[k * k + 1]``     bucket offsets of ``edges.npy``
``hub_edges.npy``     id ``[E_hp, 2]``          (hub index, store id of the other end) of
                                                edges with exactly one hub endpoint; bucket
                                                ``2p`` holds hub -> partition ``p``, bucket
                                                ``2p + 1`` partition ``p`` -> hub
``hub_edge_ptr.npy``  int64 ``[2k + 1]``        bucket offsets of ``hub_edges.npy``
``hub_ids.npy``       int64 ``[H]``             original ids of the hubs (sorted)
``hub_store_ids.npy`` id ``[H]``                their store ids
``hub_x.npy``         float32 ``[H, F]``        hub features (pinned after open)
``hub_y.npy``         like ``y`` ``[H, ...]``   hub labels (pinned after open)
``hub_hub_edges.npy`` id ``[E_hh, 2]``          (src, dst) hub indices of hub-hub edges
``csc_indptr.npy``    int64 ``[N + 1]``         whole-graph CSC: in-edges of store id ``v``
``csc_indices.npy``   id ``[E]``                are ``csc_indices[indptr[v]:indptr[v+1]]``
                                                (source store ids, input edge order)
===================== ========================= =============================================

The build streams: besides its input it holds ``O(N)`` node-id arrays, ``O(k**2)``
bucket counters and one chunk of edges (or of node rows) at a time; every output is
written straight into a memory-mapped file (a two-pass counting sort over edge chunks).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.cached_data_module import (
    META_FILE,
    CacheReader,
    CacheWriter,
    CorruptCacheError,
    build_cache,
    check_cache,
    fingerprint_digest,
    read_manifest,
    tensor_digest,
)
from lightgraph.data.graph_dataset import (
    MASK_NAMES,
    GraphDataset,
    ensure_edge_index,
    validate_graph,
)
from lightgraph.utilities.checks import check_bool, check_int, check_type, describe

#: ``meta["format"]`` of a partition store.
STORE_FORMAT = "lightgraph.partition_store"
#: Bumped whenever the file layout changes (a store of another version is stale).
STORE_VERSION = 1
#: The page size :class:`IOStats` counts distinct pages in.
PAGE_SIZE = 4096
#: Default edges (or node rows, capped at 64 MiB) per chunk of the streaming build.
DEFAULT_CHUNK_SIZE = 1 << 20
_NODE_CHUNK_BYTES = 64 << 20

X_FILE, Y_FILE, MASKS_FILE, NODE_IDS_FILE = "x.npy", "y.npy", "masks.npy", "node_ids.npy"
PART_PTR_FILE = "part_ptr.npy"
EDGES_FILE, EDGE_PTR_FILE = "edges.npy", "edge_ptr.npy"
HUB_EDGES_FILE, HUB_EDGE_PTR_FILE = "hub_edges.npy", "hub_edge_ptr.npy"
HUB_IDS_FILE, HUB_STORE_IDS_FILE = "hub_ids.npy", "hub_store_ids.npy"
HUB_X_FILE, HUB_Y_FILE, HUB_HUB_EDGES_FILE = "hub_x.npy", "hub_y.npy", "hub_hub_edges.npy"
CSC_INDPTR_FILE, CSC_INDICES_FILE = "csc_indptr.npy", "csc_indices.npy"


class StaleStoreError(ValueError):
    """A complete store built from other inputs (or by another layout version).

    Attributes:
        path: the store's ``meta.json``.
        expected: the fingerprint (or format) asked for.
        found: the one stored.
    """

    def __init__(self, message: str, path: str, expected: Any, found: Any) -> None:
        super().__init__(message)
        self.path = path
        self.expected = expected
        self.found = found


# ---------------------------------------------------------------------------- helpers
def id_dtype_for(num_nodes: int) -> np.dtype:
    """``int32`` for node ids of a graph with fewer than ``2**31`` nodes, else ``int64``."""
    return np.dtype(np.int32 if num_nodes < 2**31 else np.int64)


def _fix_hint(directory: str) -> str:
    return (
        f"Delete {directory} and rebuild it: `build_partition_store(...)`, or the data "
        f"module's `prepare_data()` when a data module owns it."
    )


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


def _resolve_graph(owner: str, data_or_dataset: Any) -> tuple[GraphDataset | None, Data | None]:
    check_type(
        owner,
        "data_or_dataset",
        data_or_dataset,
        (Data, GraphDataset),
        "a torch_geometric Data in the GraphDataset layout, or a lightgraph GraphDataset",
    )
    if isinstance(data_or_dataset, GraphDataset):
        return data_or_dataset, None
    return None, data_or_dataset


# ------------------------------------------------------------------------------ write
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
        paths = {
            name: stack.enter_context(writer.path(name))
            for name in (X_FILE, Y_FILE, MASKS_FILE, NODE_IDS_FILE)
        }
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


def default_store_fingerprint(
    data_or_dataset: Data | GraphDataset, part: Tensor, hubs: Tensor | None
) -> str:
    """The fingerprint :func:`build_partition_store` uses when given none.

    A digest of the store layout version, the graph (``GraphDataset.fingerprint()``, or
    the SHA-1 of a ``Data``'s tensors -- one pass over them), ``part`` and ``hubs``.
    """
    dataset, data = _resolve_graph("default_store_fingerprint", data_or_dataset)
    if dataset is not None:
        graph: Any = {"dataset": dataset.fingerprint()}
    else:
        assert data is not None
        data = ensure_edge_index(data)
        graph = {
            name: tensor_digest(getattr(data, name))
            for name in ("x", "y", "edge_index", *MASK_NAMES)
            if getattr(data, name, None) is not None
        }
    hubs_t = torch.zeros(0, dtype=torch.long) if hubs is None else hubs
    return fingerprint_digest(
        {
            "format": STORE_FORMAT,
            "version": STORE_VERSION,
            "graph": graph,
            "part": tensor_digest(part.long()),
            "hubs": tensor_digest(hubs_t.long()),
        }
    )


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
    dataset, data = _resolve_graph(owner, data_or_dataset)
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


# ------------------------------------------------------------------------------- read
class IOStats:
    """What :meth:`PartitionStore.read_macro_batch` read: live, thread-safe counters.

    Counted: every ``pread`` of a macro-batch (one per contiguous slice of a file).
    Not counted: what :meth:`PartitionStore.open` reads into memory (hubs, offsets) and
    accesses through the memory maps (:meth:`PartitionStore.features`, ``csc`` ...).

    Attributes:
        bytes_read: bytes read since :meth:`reset`.
        read_calls: read calls since :meth:`reset`.
        pages_touched: distinct :data:`PAGE_SIZE` pages of each file touched since
            :meth:`reset` or :meth:`start_epoch` (file offsets, ``.npy`` header
            included: a slice touches ``last // 4096 - first // 4096 + 1`` pages).
        bytes_per_file: bytes read from each file since :meth:`reset`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter."""
        with self._lock:
            self._bytes = 0
            self._calls = 0
            self._per_file: dict[str, int] = {}
            self._pages: dict[str, list[tuple[int, int]]] = {}

    def start_epoch(self) -> None:
        """Count distinct pages afresh (bytes and calls keep accumulating)."""
        with self._lock:
            self._pages = {}

    def record(self, name: str, offset: int, nbytes: int) -> None:
        """Count one read of ``nbytes`` at ``offset`` of file ``name``."""
        first, last = offset // PAGE_SIZE, (offset + nbytes - 1) // PAGE_SIZE
        with self._lock:
            self._bytes += nbytes
            self._calls += 1
            self._per_file[name] = self._per_file.get(name, 0) + nbytes
            pages = self._pages.setdefault(name, [])
            pages.append((first, last))
            if len(pages) > 4096:
                pages[:] = _merge(pages)

    def _page_counts(self) -> dict[str, int]:
        counts = {}
        for name, intervals in self._pages.items():
            intervals[:] = _merge(intervals)
            counts[name] = sum(b - a + 1 for a, b in intervals)
        return counts

    @property
    def bytes_read(self) -> int:
        with self._lock:
            return self._bytes

    @property
    def read_calls(self) -> int:
        with self._lock:
            return self._calls

    @property
    def bytes_per_file(self) -> dict[str, int]:
        with self._lock:
            return dict(self._per_file)

    @property
    def pages_touched(self) -> dict[str, int]:
        with self._lock:
            return self._page_counts()

    def as_dict(self) -> dict[str, float]:
        """One consistent reading: ``bytes_read``, ``read_calls``, ``pages_touched`` (all
        files) and ``read_amplification`` (bytes of the pages touched over bytes read
        since the pages were last reset; 1 is ideal)."""
        with self._lock:
            pages = sum(self._page_counts().values())
            return {
                "bytes_read": float(self._bytes),
                "read_calls": float(self._calls),
                "pages_touched": float(pages),
                "read_amplification": pages * PAGE_SIZE / self._bytes if self._bytes else 1.0,
            }

    def __repr__(self) -> str:
        d = self.as_dict()
        return (
            f"IOStats(bytes_read={int(d['bytes_read'])}, read_calls={int(d['read_calls'])}, "
            f"pages_touched={int(d['pages_touched'])})"
        )


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1] + 1:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


@dataclass
class MacroBatch:
    """One HANOI macro-batch: the induced subgraph on some partitions plus every hub.

    Node order: the nodes of ``parts`` (partition by partition in the given order, store
    order inside each), then the hubs not inside those partitions (by original id).

    Attributes:
        x: ``[n, F]`` float32 features.
        y: ``[n]`` long labels, or ``[n, C]`` float32 for multi-label graphs.
        edge_index: ``[2, m]`` local ids, source to destination: every edge of the graph
            between two nodes of the macro-batch, once.
        node_ids: ``[n]`` original node ids.
        store_ids: ``[n]`` store ids.
        is_hub: ``[n]`` whether the node is a hub.
        train_mask: ``[n]`` training targets; never a hub.
        val_mask, test_mask: ``[n]`` evaluation targets among the partitions' nodes
            (hubs appended from other partitions are ``False``, so every node is
            evaluated with its own partition only).
        parts: the partitions, in the order given.
        num_part_nodes: nodes of ``parts`` (the first rows).
    """

    x: Tensor
    y: Tensor
    edge_index: Tensor
    node_ids: Tensor
    store_ids: Tensor
    is_hub: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    parts: tuple[int, ...]
    num_part_nodes: int

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.size(1))

    def to_data(self) -> Data:
        """A ``torch_geometric.data.Data``; ``n_id`` holds the original node ids."""
        return Data(
            x=self.x,
            y=self.y,
            edge_index=self.edge_index,
            train_mask=self.train_mask,
            val_mask=self.val_mask,
            test_mask=self.test_mask,
            n_id=self.node_ids,
            store_id=self.store_ids,
            is_hub=self.is_hub,
            num_nodes=self.num_nodes,
        )


@dataclass(frozen=True)
class _NpyFile:
    name: str
    path: str
    fd: int
    offset: int  # where the array data starts
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))


def _close_fds(fds: list[int]) -> None:
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``fd`` at ``offset``; returns the bytes read (short at EOF)."""
    done = 0
    total = len(view)
    while done < total:
        if hasattr(os, "preadv"):
            got = os.preadv(fd, [view[done:]], offset + done)
        else:  # pragma: no cover - platforms without preadv
            chunk = os.pread(fd, total - done, offset + done)
            got = len(chunk)
            view[done : done + got] = chunk
        if got == 0:
            break
        done += got
    return done


class PartitionStore:
    """HANOI's partition store on disk (see the module docstring for the layout).

    Open a finished store with :meth:`open` (or, inside a
    :class:`~lightgraph.data.CachedDataModule`, ``PartitionStore(cache)`` with the
    :class:`~lightgraph.data.CacheReader` that ``load`` receives). Opening checks every
    file against the manifest (size) and its ``.npy`` header against the metadata, and
    reads the hubs' features, labels and hub-hub edges into memory; the rest stays on
    disk. :meth:`read_macro_batch` reads a macro-batch with one ``pread`` per contiguous
    slice and counts the bytes in :attr:`io_stats`; :meth:`features`, :meth:`labels`,
    :meth:`masks` and :meth:`csc` give memory-mapped whole-graph tensors in store order.

    Reading is thread-safe (positionless ``pread`` on descriptors opened once). A store
    pickles by its directory and fingerprint (dataloader workers reopen it).

    Args:
        cache: a reader of the store directory.
        fingerprint: the fingerprint the caller expects; a store built with another one
            raises :class:`StaleStoreError`.

    Raises:
        CorruptCacheError: naming the file, if a file is missing, truncated or not the
            array the metadata describes.
        StaleStoreError: for another fingerprint or layout version.
    """

    OWNER = "PartitionStore"

    def __init__(self, cache: CacheReader, fingerprint: str | None = None) -> None:
        check_type(self.OWNER, "cache", cache, CacheReader)
        self.directory = cache.directory
        self._cache = cache
        meta = dict(cache.meta)
        self.meta = meta
        meta_path = os.path.join(self.directory, META_FILE)
        fix = _fix_hint(self.directory)
        if meta.get("format") != STORE_FORMAT or meta.get("version") != STORE_VERSION:
            found = (meta.get("format"), meta.get("version"))
            raise StaleStoreError(
                f"{self.OWNER}: {meta_path} describes {found!r}, not a partition store of "
                f"this lightgraph ({(STORE_FORMAT, STORE_VERSION)!r}). {fix}",
                meta_path,
                (STORE_FORMAT, STORE_VERSION),
                found,
            )
        stored = meta.get("fingerprint")
        if fingerprint is not None and fingerprint != stored:
            raise StaleStoreError(
                f"{self.OWNER}: the store in {self.directory} is stale: {meta_path} records "
                f"fingerprint {stored!r} but {fingerprint!r} was expected (the graph, the "
                f"partition or the hubs changed since it was built). {fix}",
                meta_path,
                fingerprint,
                stored,
            )
        self.fingerprint: str | None = stored
        n, f, k, h = (
            int(meta[key]) for key in ("num_nodes", "num_features", "num_parts", "num_hubs")
        )
        idt = np.dtype(meta["id_dtype"])
        y_dtype = np.dtype(meta["label_dtype"])
        y_shape: tuple[int, ...] = (int(meta["num_classes"]),) if meta["multilabel"] else ()
        expected: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
            X_FILE: (np.dtype(np.float32), (n, f)),
            Y_FILE: (y_dtype, (n, *y_shape)),
            MASKS_FILE: (np.dtype(np.bool_), (n, 3)),
            NODE_IDS_FILE: (idt, (n,)),
            PART_PTR_FILE: (np.dtype(np.int64), (k + 1,)),
            EDGES_FILE: (idt, (int(meta["num_part_edges"]), 2)),
            EDGE_PTR_FILE: (np.dtype(np.int64), (k * k + 1,)),
            HUB_EDGES_FILE: (idt, (int(meta["num_hub_edges"]), 2)),
            HUB_EDGE_PTR_FILE: (np.dtype(np.int64), (2 * k + 1,)),
            HUB_IDS_FILE: (np.dtype(np.int64), (h,)),
            HUB_STORE_IDS_FILE: (idt, (h,)),
            HUB_X_FILE: (np.dtype(np.float32), (h, f)),
            HUB_Y_FILE: (y_dtype, (h, *y_shape)),
            HUB_HUB_EDGES_FILE: (idt, (int(meta["num_hub_hub_edges"]), 2)),
            CSC_INDPTR_FILE: (np.dtype(np.int64), (n + 1,)),
            CSC_INDICES_FILE: (idt, (int(meta["num_edges"]),)),
        }
        self._fds: list[int] = []
        self._finalizer = weakref.finalize(self, _close_fds, self._fds)
        self._files: dict[str, _NpyFile] = {}
        try:
            for name, (dtype, shape) in expected.items():
                self._files[name] = self._open_file(name, dtype, shape)
            self._part_ptr = self._load(PART_PTR_FILE)
            self._edge_ptr = self._load(EDGE_PTR_FILE)
            self._hub_edge_ptr = self._load(HUB_EDGE_PTR_FILE)
            self._hub_ids = self._load(HUB_IDS_FILE)
            self._hub_store = self._load(HUB_STORE_IDS_FILE).astype(np.int64)
            self._hub_x = torch.from_numpy(self._load(HUB_X_FILE))
            self._hub_y = torch.from_numpy(self._load(HUB_Y_FILE))
            self._hub_hub = self._load(HUB_HUB_EDGES_FILE).astype(np.int64)
            with cache.reading(PART_PTR_FILE):
                ptr = self._part_ptr
                if ptr[0] != 0 or ptr[-1] != n or np.any(np.diff(ptr) < 0):
                    raise ValueError("partition offsets are not a non-decreasing 0..num_nodes")
            with cache.reading(EDGE_PTR_FILE):
                if self._edge_ptr[0] != 0 or self._edge_ptr[-1] != expected[EDGES_FILE][1][0]:
                    raise ValueError("bucket offsets do not span edges.npy")
            with cache.reading(HUB_EDGE_PTR_FILE):
                if (
                    self._hub_edge_ptr[0] != 0
                    or self._hub_edge_ptr[-1] != expected[HUB_EDGES_FILE][1][0]
                ):
                    raise ValueError("bucket offsets do not span hub_edges.npy")
            self._hub_part = np.searchsorted(ptr, self._hub_store, side="right") - 1
            with cache.reading(HUB_HUB_EDGES_FILE):
                if self._hub_hub.size and not 0 <= self._hub_hub.min() <= self._hub_hub.max() < h:
                    raise ValueError(f"hub indices outside [0, {h})")
        except BaseException:
            self.close()
            raise
        self._io_stats = IOStats()
        self._maps: dict[str, Tensor] = {}
        self._maps_lock = threading.Lock()

    @classmethod
    def open(cls, directory: str | os.PathLike, fingerprint: str | None = None) -> PartitionStore:
        """Open the finished store in ``directory`` (see the class docstring)."""
        directory = os.fspath(directory)
        return cls(CacheReader(directory, cls.OWNER, fix=_fix_hint(directory)), fingerprint)

    def __reduce__(self) -> tuple[Callable[..., PartitionStore], tuple[str, str | None]]:
        return (type(self).open, (self.directory, self.fingerprint))

    # ---------------------------------------------------------------- files
    def _open_file(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> _NpyFile:
        with self._cache.reading(name) as path:
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    h_shape, fortran, h_dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    h_shape, fortran, h_dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy format version {version}")
                offset = f.tell()
            if fortran or np.dtype(h_dtype) != dtype or tuple(h_shape) != shape:
                raise ValueError(
                    f"it holds {np.dtype(h_dtype)} {tuple(h_shape)}"
                    f"{' (Fortran order)' if fortran else ''} where meta.json describes "
                    f"{dtype} {shape}"
                )
            size = os.path.getsize(path)
            nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if size != offset + nbytes:
                raise ValueError(f"{size} bytes where its header describes {offset + nbytes}")
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self._fds.append(fd)
        return _NpyFile(name, path, fd, offset, dtype, shape)

    def _load(self, name: str) -> np.ndarray:
        """A whole (small) file into memory, uncounted by :attr:`io_stats`."""
        file = self._files[name]
        out = np.empty(file.shape, dtype=file.dtype)
        self._read_into(file, [(0, file.shape[0])], out, count=False)
        return out

    @staticmethod
    def _runs(ranges: Sequence[tuple[int, int]]) -> list[list[int]]:
        """``[first file row, first out row, rows]`` of each contiguous run of ``ranges``.

        Ranges are placed one after another in the output; a range that starts where the
        previous one ends on disk extends its run (one read call for both).
        """
        runs: list[list[int]] = []
        at = 0
        for lo, hi in ranges:
            lo, hi = int(lo), int(hi)
            if hi <= lo:
                continue
            if runs and runs[-1][0] + runs[-1][2] == lo:
                runs[-1][2] += hi - lo
            else:
                runs.append([lo, at, hi - lo])
            at += hi - lo
        return runs

    @staticmethod
    def _prefetch(file: _NpyFile, runs: list[list[int]]) -> None:
        """Ask the kernel to start reading every run now (all in flight at once)."""
        if hasattr(os, "posix_fadvise"):
            row = file.row_bytes
            for lo, _, rows in runs:
                with contextlib.suppress(OSError):
                    os.posix_fadvise(
                        file.fd, file.offset + lo * row, rows * row, os.POSIX_FADV_WILLNEED
                    )

    def _read_into(
        self,
        file: _NpyFile,
        ranges: Sequence[tuple[int, int]],
        out: np.ndarray,
        count: bool = True,
        runs: list[list[int]] | None = None,
    ) -> None:
        """Read the row ranges of ``file`` one after another into ``out`` (see :meth:`_runs`)."""
        if runs is None:
            runs = self._runs(ranges)
        row = file.row_bytes
        buffer = out.reshape(-1).view(np.uint8).data
        for lo, dest, rows in runs:
            offset, nbytes = file.offset + lo * row, rows * row
            got = _pread_into(file.fd, buffer[dest * row : dest * row + nbytes], offset)
            if got != nbytes:
                raise self._corrupt(
                    file.path,
                    f"truncated since it was opened ({got} of {nbytes} bytes at {offset})",
                )
            if count:
                self._io_stats.record(file.name, offset, nbytes)

    def _corrupt(self, path: str, reason: str) -> CorruptCacheError:
        return CorruptCacheError(
            f"{self.OWNER}: the cache file {path} is {reason}. {_fix_hint(self.directory)}",
            path,
            self.directory,
        )

    def close(self) -> None:
        """Close the file descriptors (memory maps handed out stay valid)."""
        _close_fds(self._fds)

    def __enter__(self) -> PartitionStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.directory!r}, num_nodes={self.num_nodes}, "
            f"num_parts={self.num_parts}, num_hubs={self.num_hubs})"
        )

    # ---------------------------------------------------------------- metadata
    @property
    def num_nodes(self) -> int:
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def num_parts(self) -> int:
        return int(self.meta["num_parts"])

    @property
    def num_features(self) -> int:
        return int(self.meta["num_features"])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def multilabel(self) -> bool:
        return bool(self.meta["multilabel"])

    @property
    def num_hubs(self) -> int:
        return int(self.meta["num_hubs"])

    @property
    def id_dtype(self) -> np.dtype:
        """dtype of node ids on disk (``int32`` below ``2**31`` nodes)."""
        return np.dtype(self.meta["id_dtype"])

    @property
    def part_ptr(self) -> Tensor:
        """``[k + 1]`` long: partition ``p`` holds store ids ``part_ptr[p]:part_ptr[p+1]``."""
        return torch.from_numpy(self._part_ptr.copy())

    @property
    def part_sizes(self) -> Tensor:
        return torch.from_numpy(np.diff(self._part_ptr))

    @property
    def hubs(self) -> Tensor:
        """``[H]`` long original ids of the hubs (sorted)."""
        return torch.from_numpy(self._hub_ids.copy())

    @property
    def hub_store_ids(self) -> Tensor:
        return torch.from_numpy(self._hub_store.copy())

    @property
    def hub_features(self) -> Tensor:
        """``[H, F]`` the pinned hub features."""
        return self._hub_x

    @property
    def hub_labels(self) -> Tensor:
        return self._hub_y

    @property
    def node_ids(self) -> Tensor:
        """``[N]`` original id of every store id (memory-mapped, ``id_dtype``)."""
        return self._map(NODE_IDS_FILE)

    def bucket_sizes(self) -> Tensor:
        """``[k, k]`` edges from partition ``p`` to ``q`` between non-hub nodes."""
        k = self.num_parts
        return torch.from_numpy(np.diff(self._edge_ptr).reshape(k, k))

    def hub_bucket_sizes(self) -> Tensor:
        """``[k]`` edges between a hub and a non-hub node of each partition."""
        return torch.from_numpy(np.diff(self._hub_edge_ptr[::2]))

    # ---------------------------------------------------------------- whole graph
    def _map(self, name: str) -> Tensor:
        with self._maps_lock:
            tensor = self._maps.get(name)
            if tensor is None:
                file = self._files[name]
                with self._cache.reading(name):
                    if int(np.prod(file.shape, dtype=np.int64)) == 0:
                        array = np.empty(file.shape, dtype=file.dtype)
                    else:  # copy-on-write: writable for torch, the file is never changed
                        array = np.memmap(
                            file.path,
                            dtype=file.dtype,
                            mode="c",
                            offset=file.offset,
                            shape=file.shape,
                        )
                tensor = torch.from_numpy(array)
                self._maps[name] = tensor
            return tensor

    def features(self) -> Tensor:
        """``[N, F]`` float32 features in store order (memory-mapped)."""
        return self._map(X_FILE)

    def labels(self) -> Tensor:
        """``[N]`` long (or ``[N, C]`` float32) labels in store order (memory-mapped)."""
        return self._map(Y_FILE)

    def masks(self) -> dict[str, Tensor]:
        """``{"train_mask", "val_mask", "test_mask"}`` in store order: columns of one
        memory-mapped ``[N, 3]`` bool array (hubs keep their masks here)."""
        both = self._map(MASKS_FILE)
        return {name: both[:, i] for i, name in enumerate(MASK_NAMES)}

    def mask(self, split: str) -> Tensor:
        """The memory-mapped ``[N]`` mask of ``split`` (``"train"``, ``"val"``, ``"test"``
        or ``"train_mask"``, ...) in store order."""
        names = {name.removesuffix("_mask"): name for name in MASK_NAMES}
        key = names.get(split, split)
        if key not in MASK_NAMES:
            raise ValueError(
                f"{self.OWNER}.mask: expected `split` to be one of "
                f"{tuple(names) + MASK_NAMES} but got {split!r}."
            )
        return self.masks()[key]

    def csc(self) -> tuple[Tensor, Tensor]:
        """The whole graph by destination, in store ids (memory-mapped).

        Returns:
            ``(indptr, indices)``: ``indptr`` ``[N + 1]`` long; ``indices`` ``[E]`` of
            ``id_dtype``; the sources of the edges into store id ``v`` are
            ``indices[indptr[v]:indptr[v + 1]]`` (multi-edges kept, input order).
        """
        return self._map(CSC_INDPTR_FILE), self._map(CSC_INDICES_FILE)

    # ---------------------------------------------------------------- macro-batches
    def _check_parts(self, parts: Any) -> list[int]:
        owner = f"{self.OWNER}.read_macro_batch"
        k = self.num_parts
        if isinstance(parts, Tensor):
            if parts.dim() != 1 or parts.dtype == torch.bool or parts.is_floating_point():
                raise ValueError(
                    f"{owner}: expected `parts` to be a sequence of distinct partition ids in "
                    f"[0, {k - 1}] but got a tensor of {describe(parts)}."
                )
            parts = parts.tolist()
        if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
            raise TypeError(
                f"{owner}: expected `parts` to be a sequence of distinct partition ids in "
                f"[0, {k - 1}] but got {type(parts).__name__}."
            )
        values = list(parts)
        bad = [
            p
            for p in values
            if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or not 0 <= p < k
        ]
        if not values or bad:
            raise ValueError(
                f"{owner}: expected `parts` to be a non-empty sequence of distinct partition ids "
                f"in [0, {k - 1}] (num_parts = {k}) but got {values!r}"
                + (f"; invalid: {bad!r}." if bad else ".")
            )
        values = [int(p) for p in values]
        if len(set(values)) != len(values):
            dup = sorted({p for p in values if values.count(p) > 1})
            raise ValueError(
                f"{owner}: expected `parts` to be distinct partition ids in [0, {k - 1}] but "
                f"got {values!r}; duplicated: {dup!r}."
            )
        return values

    def _edge_ranges(self, parts: list[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Bucket ranges of ``edges.npy`` (sorted parts, row-major) and ``hub_edges.npy``."""
        k = self.num_parts
        order = sorted(parts)
        pp = [
            (int(self._edge_ptr[p * k + q]), int(self._edge_ptr[p * k + q + 1]))
            for p in order
            for q in order
        ]
        hp = [(int(self._hub_edge_ptr[2 * p]), int(self._hub_edge_ptr[2 * p + 2])) for p in order]
        return pp, hp

    def macro_batch_bytes(self, parts: Sequence[int]) -> int:
        """Bytes :meth:`read_macro_batch` reads for ``parts`` (hubs are in memory).

        .. math::
            \\sum_{p \\in P} n_p (4F + s_y + 3 + s_{id})
            + \\sum_{p, q \\in P} e_{pq} \\cdot 2 s_{id} + \\sum_{p \\in P} h_p \\cdot 2 s_{id}

        with ``n_p`` the nodes of partition ``p``, ``e_pq`` the non-hub edges from ``p``
        to ``q``, ``h_p`` the hub edges of ``p``, ``s_id`` the id size (4 or 8), and
        ``s_y`` 8 for single-label or ``4 C`` for multi-label graphs.
        """
        parts = self._check_parts(parts)
        node_rows = sum(int(self._part_ptr[p + 1] - self._part_ptr[p]) for p in parts)
        pp, hp = self._edge_ranges(parts)
        edge_rows = sum(b - a for a, b in pp) + sum(b - a for a, b in hp)
        node_row = sum(
            self._files[name].row_bytes for name in (X_FILE, Y_FILE, MASKS_FILE, NODE_IDS_FILE)
        )
        return node_rows * node_row + edge_rows * self._files[EDGES_FILE].row_bytes

    def read_macro_batch(self, parts: Sequence[int]) -> MacroBatch:
        """Read the macro-batch of ``parts`` (distinct partition ids) plus every hub.

        Reads, per node array, one slice per partition and, per edge array, the
        ``len(parts)**2`` partition buckets and ``len(parts)`` hub buckets (adjacent
        slices in one call); hubs come from memory. Every slice is announced to the
        kernel first (``posix_fadvise(WILLNEED)``), so cold reads are in flight together.
        See :class:`MacroBatch`; :meth:`macro_batch_bytes` gives the bytes read.
        """
        parts = self._check_parts(parts)
        ptr = self._part_ptr
        starts = ptr[parts]
        sizes = ptr[np.asarray(parts) + 1] - starts
        n_part = int(sizes.sum())
        offsets = np.zeros(self.num_parts, dtype=np.int64)  # first row of each part
        offsets[parts] = np.cumsum(sizes) - sizes
        shift = offsets - ptr[:-1]  # store id + shift = row, inside the batch's parts
        in_batch = np.zeros(self.num_parts, dtype=bool)
        in_batch[parts] = True
        hub_inside = in_batch[self._hub_part]
        outside = np.flatnonzero(~hub_inside)
        n = n_part + outside.size
        # Row of every hub: inside its partition's block, or appended after the parts.
        hub_row = np.where(
            hub_inside,
            self._hub_store + shift[self._hub_part],
            n_part + np.cumsum(~hub_inside) - 1,
        ).astype(np.int64)

        node_ranges = [(int(a), int(a + s)) for a, s in zip(starts, sizes, strict=True)]
        pp_ranges, hp_ranges = self._edge_ranges(parts)
        order = sorted(parts)
        y_file = self._files[Y_FILE]
        x = np.empty((n, self.num_features), dtype=np.float32)
        y = np.empty((n, *y_file.shape[1:]), dtype=y_file.dtype)
        masks = np.zeros((n, 3), dtype=np.bool_)
        ids = np.empty(n_part, dtype=self.id_dtype)
        # edges between the parts' non-hub nodes; edges between a hub and one of their nodes
        pp = np.empty((sum(b - a for a, b in pp_ranges), 2), dtype=self.id_dtype)
        hp = np.empty((sum(b - a for a, b in hp_ranges), 2), dtype=self.id_dtype)
        jobs = [
            (self._files[X_FILE], node_ranges, x),
            (y_file, node_ranges, y),
            (self._files[MASKS_FILE], node_ranges, masks),
            (self._files[NODE_IDS_FILE], node_ranges, ids),
            (self._files[EDGES_FILE], pp_ranges, pp),
            (self._files[HUB_EDGES_FILE], hp_ranges, hp),
        ]
        runs = [self._runs(ranges) for _, ranges, _ in jobs]
        for (file, _, _), file_runs in zip(jobs, runs, strict=True):
            self._prefetch(file, file_runs)
        for (file, ranges, out), file_runs in zip(jobs, runs, strict=True):
            self._read_into(file, ranges, out, runs=file_runs)

        x[n_part:] = self._hub_x.numpy()[outside]
        y[n_part:] = self._hub_y.numpy()[outside]
        node_ids = np.concatenate([ids.astype(np.int64), self._hub_ids[outside]])
        store_ids = np.concatenate(
            [np.arange(a, b, dtype=np.int64) for a, b in node_ranges] + [self._hub_store[outside]]
        )
        is_hub = np.zeros(n, dtype=bool)
        is_hub[hub_row] = True

        m_pp, m_hp, m_hh = pp.shape[0], hp.shape[0], self._hub_hub.shape[0]
        edge_index = np.empty((2, m_pp + m_hp + m_hh), dtype=np.int64)
        at = 0
        for i, (lo, hi) in enumerate(pp_ranges):
            p, q = order[i // len(order)], order[i % len(order)]
            edge_index[0, at : at + hi - lo] = pp[at : at + hi - lo, 0] + shift[p]
            edge_index[1, at : at + hi - lo] = pp[at : at + hi - lo, 1] + shift[q]
            at += hi - lo
        if m_hp and not 0 <= hp[:, 0].min() <= hp[:, 0].max() < self.num_hubs:
            raise self._corrupt(
                self._files[HUB_EDGES_FILE].path,
                f"holding hub indices outside [0, {self.num_hubs})",
            )
        hub_rows = hub_row[hp[:, 0]]
        hub_ptr = self._hub_edge_ptr
        for p in order:
            for direction in (0, 1):  # 0: hub -> p, 1: p -> hub
                m = int(hub_ptr[2 * p + direction + 1] - hub_ptr[2 * p + direction])
                j = at - m_pp
                edge_index[direction, at : at + m] = hub_rows[j : j + m]
                edge_index[1 - direction, at : at + m] = hp[j : j + m, 1] + shift[p]
                at += m
        edge_index[:, at:] = hub_row[self._hub_hub].T

        return MacroBatch(
            x=torch.from_numpy(x),
            y=torch.from_numpy(y),
            edge_index=torch.from_numpy(edge_index),
            node_ids=torch.from_numpy(node_ids),
            store_ids=torch.from_numpy(store_ids),
            is_hub=torch.from_numpy(is_hub),
            train_mask=torch.from_numpy(masks[:, 0] & ~is_hub),
            val_mask=torch.from_numpy(masks[:, 1].copy()),
            test_mask=torch.from_numpy(masks[:, 2].copy()),
            parts=tuple(parts),
            num_part_nodes=n_part,
        )

    # ---------------------------------------------------------------- I/O statistics
    @property
    def io_stats(self) -> IOStats:
        """The live counters of what :meth:`read_macro_batch` read (``reset()`` them)."""
        return self._io_stats
