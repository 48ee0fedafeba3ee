"""lightgraph.utilities.arrays: new .npy files, id dtypes, edges in chunks."""

from __future__ import annotations

import numpy as np
import pytest

from lightgraph.utilities.arrays import edge_chunks, id_dtype_for, new_npy


def test_id_dtype() -> None:
    assert id_dtype_for(2**31 - 1) == np.int32 and id_dtype_for(2**31) == np.int64


@pytest.mark.parametrize("shape", [(0,), (5, 0), (7, 3)])
def test_new_npy_is_a_loadable_file_of_the_shape(tmp_path, shape) -> None:
    path = str(tmp_path / "a.npy")
    arr = new_npy(path, np.int32, shape)
    arr[...] = 4
    if isinstance(arr, np.memmap):
        arr.flush()
    back = np.load(path)
    assert back.shape == shape and back.dtype == np.int32
    assert (back == 4).all()


@pytest.mark.parametrize("chunk", [1, 3, 10, 100])
def test_edge_chunks_cover_the_edges_in_order(tmp_path, chunk) -> None:
    edges = np.arange(20, dtype=np.int32).reshape(2, 10)
    np.save(tmp_path / "e.npy", edges)
    mapped = np.load(tmp_path / "e.npy", mmap_mode="r")
    # each chunk is read into one reused buffer: copies outlive the iteration
    got = [(start, s.copy(), d.copy()) for start, s, d in edge_chunks(mapped, chunk, np.int64)]
    assert [start for start, _, _ in got] == list(range(0, 10, chunk))
    assert np.array_equal(np.concatenate([s for _, s, _ in got]), edges[0])
    assert np.array_equal(np.concatenate([d for _, _, d in got]), edges[1])
    assert all(s.dtype == np.int64 and type(s) is np.ndarray for _, s, _ in got)
    assert all(s.dtype == np.int32 for _, s, _ in edge_chunks(mapped, chunk))
