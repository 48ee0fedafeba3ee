"""A stable counting sort out of core: records spilled to files by windows of keys.

A counting sort whose output is larger than memory writes every chunk of its input at
positions all over the output; on a memory-mapped file under a memory limit every such
write faults in (and later writes back) a read-ahead window of the file, and cutting the
output into windows with one pass over the input per window costs ``output / budget``
passes. :class:`KeyedSpill` makes it a fixed number of sequential passes instead (a
distribution sort): every record is appended, in input order, to the spill file of its
window of keys (runs of consecutive keys whose output fits the budget); then each window's
file is read once, its records placed by key in memory (stably: the input order within
a key is kept) and handed out as one contiguous slice of the output, in key order.

The partition-store writer (edge buckets, the store's CSC) and GAP's out-of-core
adjacency (the undirected node lists, their renaming) share it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["KeyedSpill"]

#: Spill files one :class:`KeyedSpill` keeps open at once (windows beyond take more passes).
MAX_OPEN_FILES = 256


def _units(array: np.ndarray, unit: int) -> np.ndarray:
    """``array``'s rows as unsigned integers of ``unit`` bytes (``[len(array), row bytes /
    unit]``; a view if it is contiguous): the kernels copy whole units, not bytes."""
    array = np.ascontiguousarray(array)
    rows = array.reshape(array.shape[0], -1).view(np.uint8).reshape(array.shape[0], -1)
    return rows.view(np.dtype(f"u{unit}"))


class KeyedSpill:
    """``out[ptr[k]:ptr[k + 1]]`` = the values of key ``k``, in the order they were added,
    for every key, through spill files.

    Use: call :meth:`add` with the chunks of the input (keys and values) for every pass
    ``p`` in ``range(passes)``, in the same order each time, then :meth:`windows` of that
    pass, which yields ``(first_key, stop_key, values)`` for consecutive windows of keys
    (``values`` is the output slice ``ptr[first_key]:ptr[stop_key]``, in memory). With
    at most :data:`MAX_OPEN_FILES` windows there is one pass: the input is read once,
    the spill files are written once and read once.

    Memory: one window (at most ``window_bytes``: its records, their placed values and
    one cursor per key; a single key with more rows than that is a window of its own),
    besides what :meth:`add` is given. Disk: the spilled records (key and value), removed
    window by window.

    Args:
        ptr: ``int64 [K + 1]`` offsets of the keys' runs in the output (non-decreasing;
            may be a memory map, read in pieces), or an int ``K``: one row per key (the
            output is in key order, ``ptr = arange(K + 1)`` without the array).
        value_dtype, value_shape: what one output row holds (e.g. ``int32`` and ``(2,)``,
            or a structured dtype and ``()`` for rows of several fields).
        directory: an existing directory for the spill files (removed by :meth:`windows`
            or :meth:`close`).
        window_bytes: memory one window may use.
        name: a prefix of the spill files' names.
    """

    def __init__(
        self,
        ptr: np.ndarray | int,
        value_dtype: Any,
        value_shape: tuple[int, ...],
        directory: str,
        window_bytes: int,
        name: str = "spill",
    ) -> None:
        self.ptr = ptr
        self.num_keys = int(ptr) if isinstance(ptr, int) else int(len(ptr) - 1)
        # little-endian: the add kernel writes the keys unit by unit
        key_dtype = np.dtype("<i4" if self.num_keys < 2**31 else "<i8")
        self.value_dtype = np.dtype(value_dtype)
        self.value_shape = tuple(value_shape)
        self.record = np.dtype([("key", key_dtype), ("value", self.value_dtype, self.value_shape)])
        value_bytes = self.value_dtype.itemsize * int(np.prod(self.value_shape, dtype=np.int64))
        # the widest unit of whole keys and values: what the kernels copy at once
        self._unit = next(u for u in (8, 4, 2, 1) if key_dtype.itemsize % u == value_bytes % u == 0)
        self._key_units = key_dtype.itemsize // self._unit
        # a window: its records as read, its placed values and 8 bytes a row for what
        # its consumer makes of it (half the memory); one int64 cursor per key (the
        # other half)
        row_bytes = self.record.itemsize + value_bytes + 8
        rows = max(1, window_bytes // 2 // row_bytes)
        keys = max(1, window_bytes // 2 // 8)
        bounds = [0]
        while bounds[-1] < self.num_keys:
            v = bounds[-1]
            w = v + rows if isinstance(ptr, int) else self._last_within(v, rows)
            bounds.append(min(self.num_keys, v + keys, max(v + 1, w)))
        self.bounds = np.asarray(bounds, np.int64)
        self.starts = self.bounds[:-1]
        # the window of every key >> shift, at most 2**20 of them
        self._shift = max(0, (max(self.num_keys - 1, 1)).bit_length() - 20)
        buckets = np.arange(0, max(self.num_keys, 1), 1 << self._shift, dtype=np.int64)
        self._table = (np.searchsorted(self.starts, buckets, side="right") - 1).astype(np.int32)
        self.num_windows = len(self.starts)
        self.passes = max(1, -(-self.num_windows // MAX_OPEN_FILES))
        self.directory = directory
        self.name = name
        self._files: list[Any] = []
        self._pass = -1
        self._stack = contextlib.ExitStack()

    def _last_within(self, v: int, rows: int) -> int:
        """The last key ``w`` with ``ptr[w] <= ptr[v] + rows``."""
        return int(np.searchsorted(self.ptr, int(self.ptr[v]) + rows, side="right")) - 1

    def offset(self, key: int) -> int:
        """``ptr[key]``: where the rows of ``key`` start in the output."""
        return key if isinstance(self.ptr, int) else int(self.ptr[key])

    def _path(self, w: int) -> str:
        return os.path.join(self.directory, f"{self.name}-{w}.bin")

    def _group(self, p: int) -> tuple[int, int]:
        return p * MAX_OPEN_FILES, min(self.num_windows, (p + 1) * MAX_OPEN_FILES)

    def add(self, p: int, keys: np.ndarray, values: np.ndarray) -> None:
        """Spill the records of one chunk of the input (``keys`` ``[m]`` in ``[0, K)``,
        ``values`` ``[m, *value_shape]``) whose windows belong to pass ``p``."""
        if self.num_windows == 0 or keys.size == 0:
            return
        from lightgraph.utilities import _array_kernels

        first, last = self._group(p)
        if p != self._pass:
            self._stack.close()
            self._stack = contextlib.ExitStack()
            # unbuffered: each append is one write of a whole run; many windows, no buffers
            self._files = [
                self._stack.enter_context(open(self._path(w), "ab", buffering=0))
                for w in range(first, last)
            ]
            self._pass = p
        # each record's window (-1: another pass's) and the records' order by window, in
        # input order within a window (a stable counting sort, compiled)
        window = np.empty(keys.shape[0], np.int32)
        counts = np.zeros(last - first + 1, np.int64)
        _array_kernels.window_of(
            keys, self.starts, self._table, self._shift, first, last, window, counts
        )
        offsets = np.zeros(counts.shape[0], np.int64)
        np.cumsum(counts[:-1], out=offsets[1:])
        unit = self._unit
        records = np.empty((int(counts[-1]), self.record.itemsize // unit), f"u{unit}")
        _array_kernels.spill_records(
            keys,
            self._key_units,
            _units(values, unit),
            window,
            offsets[:-1].copy(),
            records,
        )
        for w in np.flatnonzero(offsets[1:] > offsets[:-1]).tolist():
            records[offsets[w] : offsets[w + 1]].tofile(self._files[w])

    def windows(self, p: int, owner: str = "KeyedSpill") -> Iterator[tuple[int, int, np.ndarray]]:
        """The windows of pass ``p``, in key order: ``(first_key, stop_key, values)``.

        Raises:
            RuntimeError: if a window's records are not as many as ``ptr`` says (the input
                changed between the pass that counted it and this one).
        """
        from lightgraph.utilities import _array_kernels

        self._stack.close()
        self._files = []
        first, last = self._group(p)
        for w in range(first, last):
            v, stop = int(self.bounds[w]), int(self.bounds[w + 1])
            lo, hi = self.offset(v), self.offset(stop)
            path = self._path(w)
            records = (
                np.fromfile(path, dtype=self.record)
                if os.path.exists(path)
                else np.empty(0, self.record)
            )
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            if records.size != hi - lo:
                raise RuntimeError(
                    f"{owner}: the input changed between its passes (keys [{v}, {stop}) have "
                    f"{hi - lo} rows by the count and {records.size} by the second pass); do "
                    f"not modify the graph during the build."
                )
            out = np.empty((hi - lo, *self.value_shape), self.value_dtype)
            if records.size:
                if isinstance(self.ptr, int):
                    cursor = np.arange(stop - v, dtype=np.int64)
                else:
                    cursor = np.asarray(self.ptr[v:stop], dtype=np.int64) - lo
                _array_kernels.place_records(
                    records["key"],
                    _units(records, self._unit),
                    v,
                    self._key_units,
                    cursor,
                    _units(out, self._unit),
                )
                del records, cursor
            yield v, stop, out

    def close(self) -> None:
        """Close and remove whatever spill files are left (e.g. after an error)."""
        self._stack.close()
        for w in range(self.num_windows):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path(w))
