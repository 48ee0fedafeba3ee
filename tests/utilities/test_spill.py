"""KeyedSpill against NumPy's stable argsort (the counting sort it performs out of core)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lightgraph.utilities import _array_kernels, spill
from lightgraph.utilities.spill import KeyedSpill


def _sorted_by_spill(keys, values, num_keys, directory, window_bytes, chunk=97):
    ptr = np.zeros(num_keys + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=num_keys), out=ptr[1:])
    s = KeyedSpill(ptr, values.dtype, values.shape[1:], str(directory), window_bytes)
    out = np.full_like(values, -1)
    seen = []
    for p in range(s.passes):
        for lo in range(0, len(keys), chunk):
            s.add(p, keys[lo : lo + chunk], values[lo : lo + chunk])
        for first, stop, placed in s.windows(p):
            seen.append((first, stop))
            out[ptr[first] : ptr[stop]] = placed
    return out, s, seen


@pytest.mark.parametrize(
    ("num_keys", "size", "shape", "window_bytes"),
    [(1, 50, (), 1 << 20), (40, 3000, (2,), 2000), (5000, 20000, (), 1 << 12), (7, 600, (3,), 64)],
)
def test_equals_a_stable_sort_by_key(tmp_path, num_keys, size, shape, window_bytes):
    rng = np.random.default_rng(num_keys)
    keys = rng.integers(0, num_keys, size)
    values = rng.integers(-(2**31), 2**31, (size, *shape)).astype(np.int32)
    out, s, seen = _sorted_by_spill(keys, values, num_keys, tmp_path, window_bytes)
    np.testing.assert_array_equal(out, values[np.argsort(keys, kind="stable")])
    # the windows tile the keys in order, and the spill files are gone
    assert [f for f, _ in seen] == s.bounds[:-1].tolist() and seen[-1][1] == num_keys
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("shape", [(), (3,)])
def test_a_large_window_of_uneven_keys_is_placed_stably(tmp_path, shape):
    rng = np.random.default_rng(7)
    extra = 1 << 16
    keys = np.concatenate([rng.integers(0, 3000, 4000), rng.integers(2500, 2600, extra)])
    values = rng.integers(-(2**31), 2**31, (len(keys), *shape)).astype(np.int32)
    out, s, seen = _sorted_by_spill(keys, values, 3000, tmp_path, 1 << 24, chunk=40999)
    assert seen == [(0, 3000)]  # one window
    np.testing.assert_array_equal(out, values[np.argsort(keys, kind="stable")])


def test_windows_beyond_the_open_files_take_more_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "MAX_OPEN_FILES", 3)
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 300, 5000)
    values = np.arange(5000, dtype=np.int64)
    out, s, _ = _sorted_by_spill(keys, values, 300, tmp_path, 512)
    assert s.passes == -(-s.num_windows // 3) > 3
    np.testing.assert_array_equal(out, np.argsort(keys, kind="stable"))


def test_one_key_larger_than_a_window_is_a_window_of_its_own(tmp_path):
    keys = np.array([0] * 5 + [1] * 400 + [2] * 3)
    values = np.arange(len(keys), dtype=np.int32)
    out, s, seen = _sorted_by_spill(keys, values, 3, tmp_path, 256)
    assert (1, 2) in seen
    np.testing.assert_array_equal(out, values)


def test_a_count_that_disagrees_with_the_records_is_an_error(tmp_path):
    ptr = np.array([0, 2, 4], np.int64)
    s = KeyedSpill(ptr, np.int32, (), str(tmp_path), 1 << 20)
    s.add(0, np.array([0, 1, 1]), np.array([5, 6, 7], np.int32))
    with pytest.raises(RuntimeError, match=r"keys \[0, 2\) have 4 rows by the count and 3"):
        list(s.windows(0, "my_build"))
    s.close()
    assert os.listdir(tmp_path) == []


def test_rows_of_several_fields_are_moved_whole(tmp_path):
    record = np.dtype([("x", np.float16, (3,)), ("y", np.int64), ("m", np.bool_, (2,))])
    rng = np.random.default_rng(3)
    keys = rng.permutation(500)  # one row per key: a permutation, as the store's node rows
    values = np.empty(500, record)
    values["x"] = rng.standard_normal((500, 3))
    values["y"] = rng.integers(-(2**40), 2**40, 500)
    values["m"] = rng.random((500, 2)) < 0.5
    out, s, _ = _sorted_by_spill(keys, values, 500, tmp_path, 2000)
    assert s.num_windows > 3
    want = np.empty_like(values)
    want[keys] = values
    assert out.tobytes() == want.tobytes()


def test_window_lookup_equals_a_binary_search_with_windows_inside_a_bucket():
    """The window of a key is read from a table of every 2**shift-th key, then stepped
    past the windows that start inside its bucket: np.searchsorted's answer."""
    rng = np.random.default_rng(5)
    num_keys, shift = 5000, 6  # buckets of 64 keys, windows of 1 to 200 keys
    starts = np.unique(np.concatenate([[0], rng.integers(1, num_keys, 80), [64, 65, 66]]))
    table = (np.searchsorted(starts, np.arange(0, num_keys, 1 << shift), "right") - 1).astype(
        np.int32
    )
    keys = np.concatenate([rng.integers(0, num_keys, 20000), starts, starts[1:] - 1])
    want = np.searchsorted(starts, keys, side="right") - 1
    first, last = 10, 50
    window = np.empty(keys.size, np.int32)
    counts = np.zeros(last - first + 1, np.int64)
    _array_kernels.window_of(keys, starts, table, shift, first, last, window, counts)
    inside = (want >= first) & (want < last)
    np.testing.assert_array_equal(window, np.where(inside, want - first, -1))
    np.testing.assert_array_equal(counts[:-1], np.bincount(want[inside] - first, minlength=40))
    assert counts[-1] == inside.sum()


def test_one_row_per_key_needs_no_offsets_array(tmp_path):
    """``ptr=K`` is ``arange(K + 1)`` without the array: the same windows and output."""
    rng = np.random.default_rng(6)
    keys = rng.permutation(700)
    values = rng.integers(0, 2**31, 700).astype(np.int32)
    want, with_array, _ = _sorted_by_spill(keys, values, 700, tmp_path, 1500)
    s = KeyedSpill(700, np.int32, (), str(tmp_path), 1500)
    np.testing.assert_array_equal(s.bounds, with_array.bounds)
    out = np.empty_like(values)
    for p in range(s.passes):
        s.add(p, keys, values)
        for first, stop, placed in s.windows(p):
            assert (s.offset(first), s.offset(stop)) == (first, stop)
            out[first:stop] = placed
    np.testing.assert_array_equal(out, want)
    assert os.listdir(tmp_path) == []
