"""Is a partition store the one asked for, and intact? Fingerprints and checks.

* **Staleness**: :func:`default_store_fingerprint` hashes the inputs of a store;
  :func:`check_store_meta` compares the format, layout version and fingerprint recorded
  in ``meta.json`` with what the caller expects (:class:`StaleStoreError`).
* **Damage**: :func:`npy_data_offset` checks an ``.npy`` header against the metadata;
  :func:`offsets_problem`, :func:`id_range_problem` and :func:`segment_outside` check
  what a reader took from disk before it indexes with it. Each is one min/max pass over
  the values read (``O(values)``, no copy of them), so every read can afford it; a
  reader turns a problem into the
  :class:`~lightgraph.data.store.cache.CorruptCacheError` of the file
  (:func:`corrupt_file_error`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import MASK_NAMES, GraphDataset, ensure_edge_index
from lightgraph.data.store.cache import (
    META_FILE,
    CorruptCacheError,
    fingerprint_digest,
    tensor_digest,
)
from lightgraph.data.store.partition_store.layout import STORE_FORMAT, STORE_VERSION
from lightgraph.utilities.checks import check_type

#: Entries per block when checking offsets (bounds the temporary of ``np.diff``).
_CHECK_CHUNK = 1 << 22


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


def fix_hint(directory: str) -> str:
    """The sentence every store error ends with: how to repair ``directory``."""
    return (
        f"Delete {directory} and rebuild it: `build_partition_store(...)`, or the data "
        f"module's `prepare_data()` when a data module owns it."
    )


def corrupt_file_error(owner: str, directory: str, path: str, reason: str) -> CorruptCacheError:
    """The error for the damaged file ``path`` of the store in ``directory``."""
    return CorruptCacheError(
        f"{owner}: the cache file {path} is {reason}. {fix_hint(directory)}", path, directory
    )


# ------------------------------------------------------------------------ staleness
def resolve_graph(owner: str, data_or_dataset: Any) -> tuple[GraphDataset | None, Data | None]:
    """``(dataset, None)`` for a :class:`GraphDataset`, ``(None, data)`` for a ``Data``."""
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


def default_store_fingerprint(
    data_or_dataset: Data | GraphDataset, part: torch.Tensor, hubs: torch.Tensor | None
) -> str:
    """The fingerprint :func:`build_partition_store` uses when given none.

    A digest of the store layout version, the graph (``GraphDataset.fingerprint()``, or
    the SHA-1 of a ``Data``'s tensors -- one pass over them), ``part`` and ``hubs``.
    """
    dataset, data = resolve_graph("default_store_fingerprint", data_or_dataset)
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


def check_store_meta(
    owner: str, directory: str, meta: dict[str, Any], fingerprint: str | None
) -> str | None:
    """Check that ``meta`` describes a store of this layout built with ``fingerprint``.

    Returns:
        The stored fingerprint.

    Raises:
        StaleStoreError: for another format, layout version or fingerprint (``None``:
            any fingerprint).
    """
    meta_path = os.path.join(directory, META_FILE)
    fix = fix_hint(directory)
    if meta.get("format") != STORE_FORMAT or meta.get("version") != STORE_VERSION:
        found = (meta.get("format"), meta.get("version"))
        raise StaleStoreError(
            f"{owner}: {meta_path} describes {found!r}, not a partition store of "
            f"this lightgraph ({(STORE_FORMAT, STORE_VERSION)!r}). {fix}",
            meta_path,
            (STORE_FORMAT, STORE_VERSION),
            found,
        )
    stored = meta.get("fingerprint")
    if fingerprint is not None and fingerprint != stored:
        raise StaleStoreError(
            f"{owner}: the store in {directory} is stale: {meta_path} records "
            f"fingerprint {stored!r} but {fingerprint!r} was expected (the graph, the "
            f"partition or the hubs changed since it was built). {fix}",
            meta_path,
            fingerprint,
            stored,
        )
    return stored


# --------------------------------------------------------------------------- damage
def npy_data_offset(path: str, dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """Where the data of the ``.npy`` file ``path`` start, after checking its header.

    Raises:
        ValueError: when the header is not ``dtype`` ``shape`` (C order), or the file
            size disagrees with it.
    """
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
    return offset


def offsets_problem(ptr: np.ndarray, total: int, what: str = "offsets") -> str | None:
    """``None`` when ``ptr`` rises (not strictly) from ``0`` to ``total``, else the reason.

    One pass over ``ptr`` in blocks (a memory-mapped ``ptr`` is never copied whole).
    """
    if ptr.size == 0:
        return f"corrupt: it holds no {what}"
    first, last = int(ptr[0]), int(ptr[-1])
    if first != 0 or last != total:
        return (
            f"corrupt: its {what} run from {first} to {last} where they must run from 0 to {total}"
        )
    for lo in range(0, ptr.size - 1, _CHECK_CHUNK):
        block = np.asarray(ptr[lo : lo + _CHECK_CHUNK + 1])
        drops = np.flatnonzero(block[1:] < block[:-1])
        if drops.size:
            i = lo + int(drops[0])
            return (
                f"corrupt: its {what} decrease (entry {i + 1} is {int(ptr[i + 1])} after "
                f"{int(ptr[i])}); they must rise from 0 to {total}"
            )
    return None


def id_range_problem(values: np.ndarray, lo: int, hi: int, what: str, allowed: str) -> str | None:
    """``None`` when every value lies in ``[lo, hi)``, else the reason naming one that doesn't.

    One min/max pass over ``values`` (any shape, strided views too).

    Args:
        values: ids read from the file.
        lo, hi: the allowed range.
        what: the kind of id, e.g. ``"store id"``.
        allowed: what the range is, e.g. ``"the store ids of partition 3"``.
    """
    if values.size == 0:
        return None
    vmin, vmax = int(values.min()), int(values.max())
    if lo <= vmin and vmax < hi:
        return None
    bad = vmin if vmin < lo else vmax
    return f"corrupt: it holds {what} {bad} outside [{lo}, {hi}), {allowed}"


def segment_outside(
    values: np.ndarray, bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> int | None:
    """The first segment ``i`` of ``values`` holding a value outside ``[lo[i], hi[i])``.

    Segment ``i`` is ``values[bounds[i]:bounds[i + 1]]`` (``bounds`` non-decreasing from
    0 to ``len(values)``). One min and one max reduction over all segments at once.
    """
    sizes = np.diff(bounds)
    keep = np.flatnonzero(sizes > 0)
    if keep.size == 0:
        return None
    # reduceat over the non-empty segments' starts: each runs to the next start.
    starts = bounds[keep]
    mins = np.minimum.reduceat(values, starts)
    maxs = np.maximum.reduceat(values, starts)
    bad = np.flatnonzero((mins < lo[keep]) | (maxs >= hi[keep]))
    return int(keep[bad[0]]) if bad.size else None
