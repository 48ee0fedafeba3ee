"""How a partition store reads its files: the kernel's read-ahead advice (``access``).

What a macro-batch holds is checked against the input graph; that the advice reaches
the opened files is checked by recording ``os.posix_fadvise``. Bytes read from the device
(page-cache misses and read-ahead) are measured in ``benchmarks/bench_hanoi.py``.
"""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from torch_geometric.data import Data

from lightgraph.data.datasets import generate_synthetic_graph
from lightgraph.data.loader.macro_batch import macro_batch_schedule
from lightgraph.data.store.partition_store import (
    EDGES_FILE,
    HUB_EDGES_FILE,
    MASKS_FILE,
    NODE_IDS_FILE,
    X_FILE,
    Y_FILE,
    MacroBatch,
    PartitionStore,
    build_partition_store,
)

K = 6  # partitions
DATA_FILES = (X_FILE, Y_FILE, MASKS_FILE, NODE_IDS_FILE, EDGES_FILE, HUB_EDGES_FILE)


@pytest.fixture(scope="module")
def graph() -> Data:
    return generate_synthetic_graph(
        num_nodes=400, avg_degree=6, num_features=5, num_classes=3, seed=3
    )


@pytest.fixture(scope="module")
def directory(tmp_path_factory, graph) -> str:
    part = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0)) % K
    deg = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
    hubs = torch.sort(torch.topk(deg, 7).indices).values
    store = build_partition_store(graph, tmp_path_factory.mktemp("s") / "store", part, hubs)
    store.close()
    return store.directory


def epoch_batches(epoch: int) -> list[list[int]]:
    return macro_batch_schedule(K, 2, seed=0, epoch=epoch)


def check_against_graph(mb: MacroBatch, graph: Data) -> None:
    """Rows of the macro-batch are the input graph's rows of its nodes (hubs from other
    partitions are evaluated there, hubs are never trained); its edges are input edges."""
    ids = mb.node_ids
    inside = torch.arange(mb.num_nodes) < mb.num_part_nodes
    assert torch.equal(mb.x, graph.x[ids]) and torch.equal(mb.y, graph.y[ids])
    assert torch.equal(mb.train_mask, graph.train_mask[ids] & ~mb.is_hub)
    assert torch.equal(mb.val_mask, graph.val_mask[ids] & inside)
    assert torch.equal(mb.test_mask, graph.test_mask[ids] & inside)
    edges = set(map(tuple, graph.edge_index.t().tolist()))
    assert set(map(tuple, ids[mb.edge_index].t().tolist())) <= edges


def assert_same(a: MacroBatch, b: MacroBatch) -> None:
    names = ("x", "y", "edge_index", "node_ids", "store_ids", "is_hub")
    for name in (*names, "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.parts == b.parts and a.num_part_nodes == b.num_part_nodes


def inode(fd_or_path: int | str) -> tuple[int, int]:
    st = os.fstat(fd_or_path) if isinstance(fd_or_path, int) else os.stat(fd_or_path)
    return st.st_dev, st.st_ino


@pytest.fixture
def advice(monkeypatch) -> list[tuple[tuple[int, int], int, int, int]]:
    """Every ``os.posix_fadvise`` call as ``(file identity, offset, length, advice)``."""
    calls: list[tuple[tuple[int, int], int, int, int]] = []
    real = getattr(os, "posix_fadvise", None)

    def record(fd: int, offset: int, length: int, how: int) -> None:
        calls.append((inode(fd), offset, length, how))
        if real is not None:
            real(fd, offset, length, how)

    monkeypatch.setattr(os, "posix_fadvise", record, raising=False)
    for name in ("POSIX_FADV_RANDOM", "POSIX_FADV_NORMAL", "POSIX_FADV_WILLNEED"):
        monkeypatch.setattr(os, name, getattr(os, name, object()), raising=False)
    return calls


# -------------------------------------------------------------- same data either way
@pytest.mark.parametrize("epoch", [0, 1])
def test_every_macro_batch_of_an_epoch_is_the_same_with_and_without_the_advice(
    directory, graph, epoch
) -> None:
    with (
        PartitionStore.open(directory, access="random") as advised,
        PartitionStore.open(directory, access="normal") as plain,
    ):
        for parts in epoch_batches(epoch):
            a, b = advised.read_macro_batch(parts), plain.read_macro_batch(parts)
            check_against_graph(a, graph)
            assert_same(a, b)
        # both count the bytes they were asked for, as the formula says
        requested = sum(advised.macro_batch_bytes(p) for p in epoch_batches(epoch))
        assert advised.io_stats.bytes_read == plain.io_stats.bytes_read == requested
        assert advised.io_stats.read_calls == plain.io_stats.read_calls


def test_default_is_random_access(directory) -> None:
    with PartitionStore.open(directory) as store:
        assert store.access == "random"


# ------------------------------------------------------------- the advice is given
def test_random_access_advises_every_opened_data_file(directory, advice) -> None:
    with PartitionStore.open(directory) as store:
        store.read_macro_batch([0, 3])
    random = {who for who, off, length, how in advice if how == os.POSIX_FADV_RANDOM}
    for name in DATA_FILES:
        assert inode(os.path.join(directory, name)) in random, name
    # the whole file (offset 0, length 0), before any read of it
    assert all(
        (off, length) == (0, 0) for _, off, length, how in advice if how == os.POSIX_FADV_RANDOM
    )
    x = inode(os.path.join(directory, X_FILE))
    kinds = [how for who, _, _, how in advice if who == x]
    assert kinds[0] == os.POSIX_FADV_RANDOM and os.POSIX_FADV_WILLNEED in kinds[1:]


def test_normal_access_leaves_the_kernel_read_ahead_alone(directory, advice) -> None:
    with PartitionStore.open(directory, access="normal") as store:
        store.read_macro_batch([0, 3])
    kinds = {how for _, _, _, how in advice}
    assert os.POSIX_FADV_RANDOM not in kinds and os.POSIX_FADV_WILLNEED in kinds


@pytest.mark.parametrize("access", ["random", "normal"])
def test_slices_are_announced_in_pieces_ahead_of_each_copy_and_nothing_else(
    directory, monkeypatch, access
) -> None:
    """Every byte a ``pread`` copies was announced (``WILLNEED``) before it, in pieces the
    kernel takes whole; announced bytes are bytes read (nothing extra) and stay a bounded
    window ahead of the copies."""
    from lightgraph.data.store.partition_store import reader

    piece, ahead = 64, 1000
    monkeypatch.setattr(reader, "ANNOUNCE_BYTES", piece)
    monkeypatch.setattr(reader, "PREFETCH_AHEAD", ahead)
    events: list[tuple[str, tuple[int, int], int, int]] = []
    real_advise, real_preadv = os.posix_fadvise, os.preadv

    def advise(fd: int, offset: int, length: int, how: int) -> None:
        if how == os.POSIX_FADV_WILLNEED:
            events.append(("announce", inode(fd), offset, length))
        real_advise(fd, offset, length, how)

    def preadv(fd: int, buffers: list, offset: int) -> int:
        events.append(("read", inode(fd), offset, sum(len(memoryview(b)) for b in buffers)))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    monkeypatch.setattr(os, "preadv", preadv)
    with PartitionStore.open(directory, access=access) as store:
        events.clear()  # what opening read (small arrays, uncounted)
        store.read_macro_batch([4, 0, 2])
        requested = store.io_stats.bytes_read
    announced: dict[tuple[int, int], set[int]] = {}  # bytes announced so far, per file
    read: dict[tuple[int, int], set[int]] = {}
    copied = announced_total = 0
    for kind, who, offset, length in events:
        span = set(range(offset, offset + length))
        if kind == "announce":
            assert 0 < length <= piece
            assert not span & announced.setdefault(who, set())  # each byte once
            announced[who] |= span
            announced_total += length
        else:
            assert span <= announced.get(who, set())  # announced before the copy
            read.setdefault(who, set()).update(span)
            copied += length
            assert announced_total <= copied + ahead + piece  # a bounded window
    assert copied == requested and announced_total == requested
    assert announced == read


def test_pickled_store_keeps_its_access(directory) -> None:
    with PartitionStore.open(directory, access="normal") as store:
        clone = pickle.loads(pickle.dumps(store))
        assert clone.access == "normal"
        assert_same(clone.read_macro_batch([1, 4]), store.read_macro_batch([1, 4]))
        clone.close()


# ---------------------------------------------------------------- degrade gracefully
def test_platform_without_posix_fadvise_reads_the_same(directory, graph, monkeypatch) -> None:
    with PartitionStore.open(directory, access="normal") as plain:
        expected = [plain.read_macro_batch(p) for p in epoch_batches(0)]
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    with PartitionStore.open(directory, access="random") as store:
        assert store.access == "random"
        for parts, b in zip(epoch_batches(0), expected, strict=True):
            a = store.read_macro_batch(parts)
            check_against_graph(a, graph)
            assert_same(a, b)


def test_advice_refused_by_the_file_system_reads_the_same(directory, monkeypatch) -> None:
    def refuse(fd: int, offset: int, length: int, how: int) -> None:
        raise OSError(22, "Invalid argument")

    with PartitionStore.open(directory, access="normal") as plain:
        expected = plain.read_macro_batch([2, 5])
    monkeypatch.setattr(os, "posix_fadvise", refuse, raising=False)
    monkeypatch.setattr(os, "POSIX_FADV_RANDOM", getattr(os, "POSIX_FADV_RANDOM", 1), raising=False)
    monkeypatch.setattr(
        os, "POSIX_FADV_WILLNEED", getattr(os, "POSIX_FADV_WILLNEED", 3), raising=False
    )
    with PartitionStore.open(directory) as store:
        assert_same(store.read_macro_batch([2, 5]), expected)


@pytest.mark.parametrize("access", ["sequential", "RANDOM", None, 1])
def test_bad_access_is_named(directory, access) -> None:
    with pytest.raises(
        ValueError,
        match=r"PartitionStore: expected `access` to be one of "
        r"\('random', 'normal'\) but got",
    ):
        PartitionStore.open(directory, access=access)
