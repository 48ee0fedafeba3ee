"""Edge offsets past ``2**31``: the kernels of the on-disk build read and write adjacency
files whose offsets exceed the int32 range, on a sparse file (only the last few pages
are written, so nothing near ``2**31`` edges is stored), and give what they give on the
same lists at offset 0."""

from __future__ import annotations

import numpy as np
import pytest

from lightgraph.data.partition import gap, hubs
from lightgraph.data.partition.out_of_core import scatter_by_key
from lightgraph.utilities.spill import KeyedSpill

# The lists start just before 2**31 and end past it: every offset crosses the int32 range.
BASE = 2**31 - 300


def _sparse_int32(path, length: int) -> np.ndarray:
    """A writable ``int32`` memory map of ``length`` entries over a sparse file."""
    with open(path, "wb") as f:
        f.truncate(4 * length)
    return np.memmap(path, dtype=np.int32, mode="r+", shape=(length,))


@pytest.fixture(scope="module")
def graph():
    gap._compile_kernels("test")
    rng = np.random.default_rng(0)
    n = 200
    src = rng.integers(0, n, 1500).astype(np.int32)
    dst = ((src + rng.integers(1, 12, 1500)) % n).astype(np.int32)
    indptr, indices = gap._undirected_csr(src, dst, n, np.empty(3000, np.int32))
    assert len(indices) > 600  # the lists cross 2**31
    return indptr, np.array(indices)


def test_gap_passes_and_renaming_read_lists_past_2_31(tmp_path, graph):
    indptr, indices = graph
    n = len(indptr) - 1
    far = _sparse_int32(tmp_path / "adjacency.bin", BASE + len(indices))
    far[BASE:] = indices
    shifted = indptr + BASE  # int64 offsets; the largest > 2**31
    assert shifted[-1] > 2**31 > shifted[0]

    # the stream order, by degree: a counting sort over the shifted offsets
    perm = np.random.default_rng(1).permutation(n).astype(np.int32)
    orders = []
    for offsets in (indptr, shifted):
        buckets = np.zeros(gap._max_degree(offsets) + 2, np.int64)
        order = np.empty(n, np.int32)
        gap._order_by_degree(offsets, perm, buckets, order)
        orders.append(order)
    np.testing.assert_array_equal(orders[1], orders[0])
    np.testing.assert_array_equal(
        orders[0], perm[np.argsort(-np.diff(indptr)[perm], kind="stable")]
    )
    order = orders[0]

    # the renaming, window by window, from the far lists
    want_indptr, want = gap._relabel(
        indptr, indices, order, np.empty(n, np.int32), np.empty_like(indices)
    )
    got_indptr, got = gap._relabel_on_disk(
        shifted, far, order, np.empty(n, np.int32), np.empty_like(indices), 800, str(tmp_path)
    )
    np.testing.assert_array_equal(got_indptr, want_indptr)
    np.testing.assert_array_equal(got, want)

    # the streaming and refinement passes over the far lists
    stratum = np.random.default_rng(2).integers(0, 3, n).astype(np.int32)
    parts = []
    for offsets, lists in ((indptr, indices), (shifted, far)):
        part = np.full(n, -1, np.int32)
        caps = np.full(3, 40, np.int64)
        mu = np.full(3, 1 / 3)
        gap._gap_passes(offsets, lists, stratum, 3, 4, caps, mu, 0.5, 1.5, 2, part)
        parts.append(part)
    np.testing.assert_array_equal(parts[1], parts[0])
    assert set(parts[0].tolist()) == {0, 1, 2, 3}


def test_hub_product_takes_offsets_past_2_31(graph):
    indptr, indices = graph
    n = len(indptr) - 1
    # a CSC layout: every column's sources sorted
    sources = np.concatenate(
        [np.sort(indices[a:b]) for a, b in zip(indptr[:-1], indptr[1:], strict=True)]
    )
    rng = np.random.default_rng(3)
    x, weight = rng.random(n), rng.random(n)
    product = hubs._compiled_product("test")
    outs = []
    for offsets in (indptr, indptr + BASE):
        out = np.zeros(n)
        for first, stop in ((0, 70), (70, n)):  # two chunks of whole columns
            chunk = sources[offsets[first] - offsets[0] : offsets[stop] - offsets[0]]
            assert product(offsets, chunk, first, stop, x, weight, out)[0] == 0
        outs.append(out)
    np.testing.assert_array_equal(outs[1], outs[0])
    assert outs[0].any()


def test_store_scatter_writes_past_2_31(tmp_path):
    """The writer's counting-sort step places values at int64 positions past 2**31."""
    rng = np.random.default_rng(4)
    keys = rng.integers(0, 3, 500)
    values = rng.integers(0, 2**30, 500).astype(np.int32)
    counts = np.bincount(keys, minlength=3)
    start = np.array([BASE, BASE + counts[0], BASE + counts[0] + counts[1]], np.int64)
    out = _sparse_int32(tmp_path / "edges.bin", BASE + 500)
    cursor = start.copy()
    scatter_by_key(keys, cursor, out, values)
    np.testing.assert_array_equal(cursor, start + counts)
    np.testing.assert_array_equal(out[BASE:], values[np.argsort(keys, kind="stable")])
    # through spill files in windows of keys, as the writer does for a graph on disk
    out2 = _sparse_int32(tmp_path / "edges2.bin", BASE + 500)
    ptr = np.append(start, BASE + 500)
    (tmp_path / "spill").mkdir()
    spill = KeyedSpill(ptr, np.int32, (), str(tmp_path / "spill"), 3000)
    assert spill.num_windows >= 2
    for lo in range(0, 500, 64):
        spill.add(0, keys[lo : lo + 64], values[lo : lo + 64])
    for first, stop, placed in spill.windows(0):
        out2[ptr[first] : ptr[stop]] = placed
    np.testing.assert_array_equal(out2[BASE:], out[BASE:])
