"""Shared checks of the data-module tests."""

from __future__ import annotations

import threading
import time

import torch

from lightgraph.data.lightning.partition_store_data_module import PartitionStoreDataModule


def check_graph_copied_once_under_concurrent_first_use(dm, monkeypatch, threads: int = 6):
    """Start ``threads`` threads together on ``dm.graph_arrays()`` against a slow store read
    and check that the store was read once and every thread got the same in-memory copy."""
    reads: list[int] = []
    read = PartitionStoreDataModule.graph_arrays

    def slow_read(self):  # a slow disk: every thread that gets here reads the graph
        reads.append(threading.get_ident())
        time.sleep(0.05)
        return read(self)

    monkeypatch.setattr(PartitionStoreDataModule, "graph_arrays", slow_read)
    start = threading.Barrier(threads)
    got: list = [None] * threads

    def first_use(i: int) -> None:
        start.wait()
        got[i] = dm.graph_arrays()

    workers = [threading.Thread(target=first_use, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert len(reads) == 1
    assert all(g is got[0] for g in got)  # one copy, shared by every thread
    indptr, indices, x, y = got[0]
    store_indptr, store_indices = dm.store.csc()
    assert torch.equal(indptr, store_indptr) and torch.equal(indices, store_indices)
    assert torch.equal(x, dm.store.features()) and torch.equal(y, dm.store.labels())
    assert x.data_ptr() != dm.store.features().data_ptr()  # a copy, not the memory map
