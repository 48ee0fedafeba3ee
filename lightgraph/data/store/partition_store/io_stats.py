"""What a partition store's macro-batch reads cost: bytes, read calls, distinct pages."""

from __future__ import annotations

import threading

#: The page size :class:`IOStats` counts distinct pages in.
PAGE_SIZE = 4096


class IOStats:
    """What :meth:`PartitionStore.read_macro_batch` read: live, thread-safe counters.

    Counted: every ``pread`` of a macro-batch (one per contiguous slice of a file), in
    the bytes it asked for. Not counted: what :meth:`PartitionStore.open` reads into
    memory (hubs, offsets) and accesses through the memory maps
    (:meth:`PartitionStore.features`, ``csc`` ...). What the device delivers can differ:
    pages already cached cost nothing, and the kernel's read-ahead reads past a slice's
    end unless the store is opened with ``access="random"`` (the default); the bytes the
    device delivered to the process are ``read_bytes`` of ``/proc/self/io``
    (:class:`~lightgraph.callbacks.IOMonitor` logs both).

    Attributes:
        bytes_read: bytes the reads asked for since :meth:`reset`.
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
