"""Distinct pages of a memory-mapped graph that sampling asks for (NS-Ext's I/O count)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor


class PageCounter:
    """Distinct 4 KiB pages of the memory-mapped features and CSC a training epoch touches.

    Only counts what sampling asks for (the feature rows of every sampled node and the
    neighbour lists of every expanded node); what the kernel reads ahead is visible in
    ``/proc/self/io`` instead (:class:`~lightgraph.callbacks.IOMonitor` reports both).
    """

    PAGE = 4096

    def __init__(self) -> None:
        self.enabled = False
        self.bytes_requested = 0.0
        self._seen: dict[str, np.ndarray] = {}

    def configure(self, x: Tensor, indptr: Tensor, indices: Tensor, enabled: bool) -> None:
        self.enabled = enabled
        self._row_bytes = x.size(1) * x.element_size()
        self._index_bytes = indices.element_size()
        self._indptr = indptr
        for name, nbytes in (
            ("features", x.numel() * x.element_size()),
            ("indices", indices.numel() * indices.element_size()),
        ):
            self._seen[name] = np.zeros(nbytes // self.PAGE + 1, dtype=bool)

    def reset_epoch(self) -> None:
        for seen in self._seen.values():
            seen[:] = False

    def _touch(self, name: str, start: np.ndarray, stop: np.ndarray) -> None:
        seen = self._seen[name]
        keep = stop > start
        first = start[keep] // self.PAGE
        last = (stop[keep] - 1) // self.PAGE
        span = int((last - first).max()) + 1 if first.size else 0
        for k in range(span):
            page = first + k
            seen[page[page <= last]] = True
        self.bytes_requested += float((stop[keep] - start[keep]).sum())

    def count(self, batch: Any) -> None:
        if not self.enabled:
            return
        # One partition in original order: store ids are the original ids.
        node = batch.n_id.numpy()
        self._touch("features", node * self._row_bytes, (node + 1) * self._row_bytes)
        ptr = self._indptr.numpy()
        expanded = node[: len(node) - int(batch.num_sampled_nodes[-1])]
        self._touch(
            "indices", ptr[expanded] * self._index_bytes, ptr[expanded + 1] * self._index_bytes
        )

    def as_dict(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        pages = float(sum(int(seen.sum()) for seen in self._seen.values()))
        return {"pages_touched": pages, "bytes_requested": self.bytes_requested}
