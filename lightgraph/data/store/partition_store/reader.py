"""Reading a partition store: :class:`PartitionStore`, macro-batches with bulk ``pread``.

Opening checks every file against the manifest and the metadata and reads the small
arrays (offsets, hubs) into memory; a macro-batch is read with one ``pread`` per
contiguous slice, and by default the device delivers exactly those slices (no read-ahead
past their ends, :data:`ACCESS_MODES`). Every id taken from disk is checked (one min/max
pass over what was read, :mod:`.integrity`) before it is used as an index, so a damaged
file fails as a :class:`~lightgraph.data.CorruptCacheError` naming it, never deep inside
a consumer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightgraph.data.datasets.graph_dataset import MASK_NAMES
from lightgraph.data.store.cache import CacheReader, CorruptCacheError
from lightgraph.data.store.partition_store.induced_subgraph import MacroBatch
from lightgraph.data.store.partition_store.integrity import (
    check_store_meta,
    corrupt_file_error,
    fix_hint,
    id_range_problem,
    npy_data_offset,
    offsets_problem,
    segment_outside,
)
from lightgraph.data.store.partition_store.io_stats import IOStats
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
    X_FILE,
    Y_FILE,
    expected_arrays,
)
from lightgraph.utilities.checks import check_choice, check_type, describe

#: How :class:`PartitionStore` advises the kernel about its reads (``access``):
#: ``"random"`` -- ``posix_fadvise(POSIX_FADV_RANDOM)`` on every file it reads with
#: ``pread``: the kernel reads the requested pages and no read-ahead past a slice's end;
#: ``"normal"`` -- no such advice: the kernel's read-ahead (up to the device's
#: ``read_ahead_kb`` past a sequential read's end, read but never asked for).
ACCESS_MODES = ("random", "normal")
#: Bytes :meth:`PartitionStore.read_macro_batch` keeps announced to the kernel
#: (``POSIX_FADV_WILLNEED``) beyond the slice it is copying: the reads are in flight
#: together, and the page cache that announced, not yet copied slices hold stays bounded.
PREFETCH_AHEAD = 64 << 20
#: Bytes of one announcement. The kernel starts at most its read-ahead window per
#: ``POSIX_FADV_WILLNEED`` call (``max(read_ahead_kb, max_sectors_kb)``, 128 KiB by
#: default), so a longer slice is announced in pieces of this size.
ANNOUNCE_BYTES = 128 << 10


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


def _advise_random(fd: int) -> None:
    """``POSIX_FADV_RANDOM`` on the whole of ``fd``, where the platform and file system
    take it (elsewhere reads keep the kernel's default read-ahead, with the same data)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, 0, 0, os.POSIX_FADV_RANDOM)


class _Announcer:
    """Announces the slices of a read to the kernel in read order, :data:`PREFETCH_AHEAD`
    bytes beyond the slice being copied, in :data:`ANNOUNCE_BYTES` pieces."""

    def __init__(self, slices: list[tuple[int, int, int]]) -> None:
        self._advise = getattr(os, "posix_fadvise", None)
        self._slices = slices  # (fd, offset, nbytes), in read order
        self._next = 0  # the slice being announced
        self._done = 0  # bytes of it announced
        self._announced = 0
        self._copied = 0

    def before_copy(self, nbytes: int) -> None:
        """The next ``nbytes`` are copied now: announce through them and the bytes ahead."""
        self._copied += nbytes
        target = self._copied + PREFETCH_AHEAD
        while self._advise is not None and self._announced < target:
            if self._next == len(self._slices):
                return
            fd, offset, size = self._slices[self._next]
            piece = min(ANNOUNCE_BYTES, size - self._done)
            try:
                self._advise(fd, offset + self._done, piece, os.POSIX_FADV_WILLNEED)
            except OSError:  # a file system that refuses advice: plain reads
                self._advise = None
                return
            self._done += piece
            self._announced += piece
            if self._done == size:
                self._next, self._done = self._next + 1, 0


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
    """HANOI's partition store on disk (its files: :mod:`.layout`).

    Open a finished store with :meth:`open` (or, inside a
    :class:`~lightgraph.data.CachedDataModule`, ``PartitionStore(cache)`` with the
    :class:`~lightgraph.data.store.CacheReader` that ``load`` receives). Opening checks every
    file against the manifest (size) and its ``.npy`` header against the metadata, and
    reads the hubs' features, labels and hub-hub edges into memory; the rest stays on
    disk. :meth:`read_macro_batch` reads a macro-batch with one ``pread`` per contiguous
    slice and counts the bytes in :attr:`io_stats`; :meth:`features`, :meth:`labels`,
    :meth:`masks` and :meth:`csc` give memory-mapped whole-graph tensors in store order.

    Read-ahead: a macro-batch reads slices of every file, each far from the last. The
    kernel's default read-ahead, tuned for one sequential stream, reads up to the device's
    ``read_ahead_kb`` past the end of a slice; when the page cache cannot keep those pages
    until their own partition's turn (a store larger than the memory budget), the device
    reads them twice (with 8 MiB read-ahead, a quarter more than the macro-batches ask
    for). ``access="random"`` (the default) advises ``POSIX_FADV_RANDOM`` on the files read
    with ``pread``, so the device delivers the slices and nothing else; the slices are
    announced ahead of the copy (``POSIX_FADV_WILLNEED``, :data:`PREFETCH_AHEAD` bytes
    ahead in :data:`ANNOUNCE_BYTES` pieces), so the reads of a macro-batch stay in flight
    together without the kernel's read-ahead. ``access="normal"`` gives no advice beyond
    the announcements. Where ``posix_fadvise`` does not exist or the file system refuses
    it, reads go on without it (same data). The memory maps are never advised: whole-graph
    scans keep their read-ahead.

    Reading is thread-safe (positionless ``pread`` on descriptors opened once). A store
    pickles by its directory, fingerprint and access (dataloader workers reopen it).

    Args:
        cache: a reader of the store directory.
        fingerprint: the fingerprint the caller expects; a store built with another one
            raises :class:`StaleStoreError`.
        access: ``"random"`` (no read-ahead past the slices read) or ``"normal"`` (the
            kernel's read-ahead), see above and :data:`ACCESS_MODES`.

    Raises:
        CorruptCacheError: naming the file, if a file is missing, truncated or not the
            array the metadata describes.
        StaleStoreError: for another fingerprint or layout version.
    """

    OWNER = "PartitionStore"

    def __init__(
        self, cache: CacheReader, fingerprint: str | None = None, access: str = "random"
    ) -> None:
        check_type(self.OWNER, "cache", cache, CacheReader)
        self.access: str = check_choice(self.OWNER, "access", access, ACCESS_MODES)
        self.directory = cache.directory
        self._cache = cache
        meta = dict(cache.meta)
        self.meta = meta
        self.fingerprint: str | None = check_store_meta(
            self.OWNER, self.directory, meta, fingerprint
        )
        expected = expected_arrays(meta)
        n, h = int(meta["num_nodes"]), int(meta["num_hubs"])
        self._fds: list[int] = []
        self._finalizer = weakref.finalize(self, _close_fds, self._fds)
        self._files: dict[str, _NpyFile] = {}
        try:
            for name, (dtype, shape) in expected.items():
                self._files[name] = self._open_file(name, dtype, shape)
            # What the reads index with: offsets and hub ids, checked once here.
            self._part_ptr = self._load(PART_PTR_FILE)
            self._check(PART_PTR_FILE, offsets_problem(self._part_ptr, n, "partition offsets"))
            self._edge_ptr = self._load(EDGE_PTR_FILE)
            self._check(
                EDGE_PTR_FILE,
                offsets_problem(self._edge_ptr, expected[EDGES_FILE][1][0], "bucket offsets"),
            )
            self._hub_edge_ptr = self._load(HUB_EDGE_PTR_FILE)
            self._check(
                HUB_EDGE_PTR_FILE,
                offsets_problem(
                    self._hub_edge_ptr, expected[HUB_EDGES_FILE][1][0], "bucket offsets"
                ),
            )
            self._hub_ids = self._load(HUB_IDS_FILE)
            self._check_ids(HUB_IDS_FILE, self._hub_ids, n, "original node id")
            self._hub_store = self._load(HUB_STORE_IDS_FILE).astype(np.int64)
            self._check_ids(HUB_STORE_IDS_FILE, self._hub_store, n, "store id")
            self._hub_x = torch.from_numpy(self._load(HUB_X_FILE))
            self._hub_y = torch.from_numpy(self._load(HUB_Y_FILE))
            self._hub_hub = self._load(HUB_HUB_EDGES_FILE).astype(np.int64)
            self._check(
                HUB_HUB_EDGES_FILE,
                id_range_problem(self._hub_hub, 0, h, "hub index", f"the indices of the {h} hubs"),
            )
            self._hub_part = np.searchsorted(self._part_ptr, self._hub_store, side="right") - 1
        except BaseException:
            self.close()
            raise
        self._io_stats = IOStats()
        self._maps: dict[str, Tensor] = {}
        self._maps_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike,
        fingerprint: str | None = None,
        access: str = "random",
    ) -> PartitionStore:
        """Open the finished store in ``directory`` (see the class docstring)."""
        directory = os.fspath(directory)
        cache = CacheReader(directory, cls.OWNER, fix=fix_hint(directory))
        return cls(cache, fingerprint, access)

    def __reduce__(self) -> tuple[Callable[..., PartitionStore], tuple[str, str | None, str]]:
        return (type(self).open, (self.directory, self.fingerprint, self.access))

    # ---------------------------------------------------------------- files
    def _open_file(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> _NpyFile:
        with self._cache.reading(name) as path:
            offset = npy_data_offset(path, dtype, shape)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self._fds.append(fd)
        if self.access == "random":
            _advise_random(fd)
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

    def _read_into(
        self,
        file: _NpyFile,
        ranges: Sequence[tuple[int, int]],
        out: np.ndarray,
        count: bool = True,
        runs: list[list[int]] | None = None,
        announcer: _Announcer | None = None,
    ) -> None:
        """Read the row ranges of ``file`` one after another into ``out`` (see :meth:`_runs`)."""
        if runs is None:
            runs = self._runs(ranges)
        row = file.row_bytes
        buffer = out.reshape(-1).view(np.uint8).data
        for lo, dest, rows in runs:
            offset, nbytes = file.offset + lo * row, rows * row
            if announcer is not None:
                announcer.before_copy(nbytes)
            got = _pread_into(file.fd, buffer[dest * row : dest * row + nbytes], offset)
            if got != nbytes:
                raise self._corrupt(
                    file.path,
                    f"truncated since it was opened ({got} of {nbytes} bytes at {offset})",
                )
            if count:
                self._io_stats.record(file.name, offset, nbytes)

    def _corrupt(self, path: str, reason: str) -> CorruptCacheError:
        return corrupt_file_error(self.OWNER, self.directory, path, reason)

    def _check(self, name: str, problem: str | None) -> None:
        """Raise the :class:`CorruptCacheError` of file ``name`` for a found ``problem``."""
        if problem is not None:
            raise self._corrupt(self._files[name].path, problem)

    def _check_buckets(
        self,
        name: str,
        ids: np.ndarray,
        ranges: Sequence[tuple[int, int]],
        parts: np.ndarray,
        role: str,
        buckets: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        """Store ids read from the buckets ``ranges`` of ``name`` (one after another in
        ``ids``) must belong to the partition ``parts[i]`` of their bucket ``i``."""
        sizes = np.array([hi - lo for lo, hi in ranges], dtype=np.int64)
        bounds = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        ptr = self._part_ptr
        i = segment_outside(ids, bounds, ptr[parts], ptr[parts + 1])
        if i is None:
            return
        p = int(parts[i])
        where = (
            f"edges from partition {buckets[i][0]} to {buckets[i][1]}"
            if buckets is not None
            else f"hub edges of partition {p}"
        )
        problem = id_range_problem(
            ids[bounds[i] : bounds[i + 1]],
            int(ptr[p]),
            int(ptr[p + 1]),
            "store id",
            f"the store ids of partition {p} ({role} of the {where})",
        )
        self._check(name, problem)

    def _check_ids(self, name: str, ids: np.ndarray, num_nodes: int, what: str) -> None:
        """Node ids read from ``name`` must lie in ``[0, num_nodes)``."""
        self._check(
            name,
            id_range_problem(ids, 0, num_nodes, what, f"the {num_nodes} nodes of the graph"),
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
                self._check_map(name, array)
                tensor = torch.from_numpy(array)
                self._maps[name] = tensor
            return tensor

    def _check_map(self, name: str, array: np.ndarray) -> None:
        """Check a whole-graph id array once, when it is first mapped (one pass over it)."""
        if name == NODE_IDS_FILE:
            self._check_ids(name, array, self.num_nodes, "original node id")
        elif name == CSC_INDICES_FILE:
            self._check_ids(name, array, self.num_nodes, "source store id")
        elif name == CSC_INDPTR_FILE:
            self._check(name, offsets_problem(array, self.num_edges, "CSC offsets"))

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
        node_row = sum(self._files[name].row_bytes for name in NODE_FILES)
        return node_rows * node_row + edge_rows * self._files[EDGES_FILE].row_bytes

    def macro_batch_memory(self, parts: Sequence[int]) -> int:
        """Bytes of memory a macro-batch of ``parts`` holds at most while it is read and
        trained (an estimate from the same counts as :meth:`macro_batch_bytes`).

        Its ``n`` nodes (the parts' nodes and the hubs outside them) hold float32
        features, labels, two int64 id arrays and masks. Its ``m`` edges are read in the
        disk's id width, widened to an int64 ``edge_index``, and then turned into the
        stage-2 CSC (int64 ``indices`` and ``indptr``) by
        :func:`~lightgraph.data.loader.macro_batch.load_macro_batch`. The count includes the
        transient edge arrays of that step, so the peak is covered.
        """
        parts = self._check_parts(parts)
        node_rows = sum(int(self._part_ptr[p + 1] - self._part_ptr[p]) for p in parts)
        in_batch = np.zeros(self.num_parts, dtype=bool)
        in_batch[parts] = True
        n = node_rows + int((~in_batch[self._hub_part]).sum())
        pp, hp = self._edge_ranges(parts)
        m = sum(b - a for a, b in pp) + sum(b - a for a, b in hp) + len(self._hub_hub)
        y_row = self._files[Y_FILE].row_bytes
        node_row = 4 * self.num_features + y_row + 8 + 8 + 1 + 3 + 8  # x, y, ids, masks, indptr
        edge_row = 2 * self.id_dtype.itemsize + 16 + 8 + 8  # read, edge_index, CSC + sort
        return n * node_row + m * edge_row

    def resident_bytes(self) -> int:
        """Bytes the open store keeps in memory: the hubs' features, labels, ids and
        edges, and the partition and bucket pointers."""
        arrays = [self._part_ptr, self._edge_ptr, self._hub_edge_ptr, self._hub_ids]
        arrays += [self._hub_store, self._hub_hub, self._hub_part]
        total = sum(int(a.nbytes) for a in arrays)
        return total + int(self._hub_x.nbytes) + int(self._hub_y.nbytes)

    def read_macro_batch(self, parts: Sequence[int]) -> MacroBatch:
        """Read the macro-batch of ``parts`` (distinct partition ids) plus every hub.

        Reads, per node array, one slice per partition and, per edge array, the
        ``len(parts)**2`` partition buckets and ``len(parts)`` hub buckets (adjacent
        slices in one call); hubs come from memory. The slices are announced to the kernel
        (``posix_fadvise(WILLNEED)``) :data:`PREFETCH_AHEAD` bytes ahead of the one being
        copied, so cold reads are in flight together; with ``access="random"`` the device
        delivers those slices only (see the class docstring). See :class:`MacroBatch`;
        :meth:`macro_batch_bytes` gives the bytes read.
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
        announcer = _Announcer(
            [
                (file.fd, file.offset + lo * file.row_bytes, rows * file.row_bytes)
                for (file, _, _), file_runs in zip(jobs, runs, strict=True)
                for lo, _, rows in file_runs
            ]
        )
        for (file, ranges, out), file_runs in zip(jobs, runs, strict=True):
            self._read_into(file, ranges, out, runs=file_runs, announcer=announcer)

        # Ids read from disk are checked (a min/max pass) before anything uses them.
        self._check_ids(NODE_IDS_FILE, ids, self.num_nodes, "original node id")
        x[n_part:] = self._hub_x.numpy()[outside]
        y[n_part:] = self._hub_y.numpy()[outside]
        node_ids = np.concatenate([ids.astype(np.int64), self._hub_ids[outside]])
        store_ids = np.concatenate(
            [np.arange(a, b, dtype=np.int64) for a, b in node_ranges] + [self._hub_store[outside]]
        )
        is_hub = np.zeros(n, dtype=bool)
        is_hub[hub_row] = True

        # Edge ends must belong to their bucket's partition (a min/max per bucket, one
        # reduction over all buckets).
        bucket_parts = [(p, q) for p in order for q in order]
        src_of, dst_of = (
            np.array(column, dtype=np.int64) for column in zip(*bucket_parts, strict=True)
        )
        self._check_buckets(EDGES_FILE, pp[:, 0], pp_ranges, src_of, "sources", bucket_parts)
        self._check_buckets(EDGES_FILE, pp[:, 1], pp_ranges, dst_of, "destinations", bucket_parts)
        h = self.num_hubs
        self._check(
            HUB_EDGES_FILE,
            id_range_problem(hp[:, 0], 0, h, "hub index", f"the indices of the {h} hubs"),
        )
        self._check_buckets(HUB_EDGES_FILE, hp[:, 1], hp_ranges, np.asarray(order), "non-hub ends")

        m_pp, m_hp, m_hh = pp.shape[0], hp.shape[0], self._hub_hub.shape[0]
        edge_index = np.empty((2, m_pp + m_hp + m_hh), dtype=np.int64)
        at = 0
        for i, (lo, hi) in enumerate(pp_ranges):
            p, q = bucket_parts[i]
            edge_index[0, at : at + hi - lo] = pp[at : at + hi - lo, 0] + shift[p]
            edge_index[1, at : at + hi - lo] = pp[at : at + hi - lo, 1] + shift[q]
            at += hi - lo
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
