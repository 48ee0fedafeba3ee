"""NpyGraphWriter and from_pyg: the NpyGraph layout written block by block."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from lightgraph.data import NpyGraphWriter, SyntheticGraph, from_pyg

KEYS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")
MASKS = ("train_mask", "val_mask", "test_mask")
GRAPH = SyntheticGraph(num_nodes=200, avg_degree=4, num_features=5, seed=3)


def _assert_same_graph(got, want) -> None:
    for key in KEYS:
        a, b = getattr(got, key), getattr(want, key)
        assert a.dtype == b.dtype, key
        assert torch.equal(a, b), key


def test_chunked_writer_builds_a_graph_block_by_block(tmp_path):
    n, e, f = 50, 130, 3
    rng = np.random.default_rng(0)
    edges = rng.integers(0, n, size=(2, e))
    x = rng.standard_normal((n, f))
    y = rng.integers(0, 4, size=n)
    masks = [rng.random(n) < p for p in (0.6, 0.2, 0.2)]
    root = str(tmp_path / "w")
    with NpyGraphWriter(
        root,
        num_nodes=n,
        num_edges=e,
        num_features=f,
        num_classes=4,
        index_dtype="int32",
        feature_dtype="float16",
        name="blocks",
    ) as writer:
        for lo in range(0, e, 17)[::-1]:  # any order
            writer.write_edges(lo, edges[:, lo : lo + 17])
        for lo in np.arange(0, n, 7):  # NumPy offsets are fine too
            writer.write_features(lo, x[lo : lo + 7])
            writer.write_labels(lo, y[lo : lo + 7])
            writer.write_masks(lo, *(m[lo : lo + 7] for m in masks))
        # Nothing is published until the writer closes.
        assert not os.path.exists(os.path.join(root, "x.npy"))
    graph = writer.graph
    assert graph.name == "blocks" and graph.num_classes == 4
    disk = graph.on_disk()
    assert disk.edge_index.dtype == np.int32 and disk.x.dtype == np.float16
    np.testing.assert_array_equal(disk.edge_index, edges)
    np.testing.assert_array_equal(disk.x, x.astype(np.float16))
    np.testing.assert_array_equal(disk.y, y)
    for name, mask in zip(MASKS, masks, strict=True):
        np.testing.assert_array_equal(getattr(disk, name), mask)
    # Every file is a standard .npy file.
    np.testing.assert_array_equal(np.load(os.path.join(root, "edge_index.npy")), edges)


def test_writer_refuses_to_publish_an_incomplete_graph(tmp_path):
    root = str(tmp_path / "w")
    writer = NpyGraphWriter(root, num_nodes=10, num_edges=4, num_features=2, num_classes=2)
    writer.write_edges(0, np.array([[0, 1, 2, 3], [1, 2, 3, 4]]))
    writer.write_features(0, np.zeros((10, 2)))
    writer.write_labels(0, np.zeros(10, dtype=np.int64))
    writer.write_masks(0, *(np.ones(6, dtype=bool),) * 3)
    with pytest.raises(ValueError, match=r"rows \[6, 10\) of train_mask.npy.*never written"):
        writer.close()
    writer.write_masks(6, *(np.zeros(4, dtype=bool),) * 3)
    graph = writer.close()
    assert graph.load().train_mask.tolist() == [True] * 6 + [False] * 4


def test_writer_checks_every_block(tmp_path):
    writer = NpyGraphWriter(str(tmp_path), num_nodes=10, num_edges=4, num_features=2, num_classes=3)
    with pytest.raises(ValueError, match=r"node ids in \[0, 9\].*\[0, 10\]"):
        writer.write_edges(0, np.array([[0, 1], [2, 10]]))
    with pytest.raises(ValueError, match=r"rows \[3, 6\) of 4"):
        writer.write_edges(3, np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"shape \[b, 2\].*\(3, 5\)"):
        writer.write_features(0, np.zeros((3, 5)))
    with pytest.raises(ValueError, match=r"class ids in \[0, 2\].*3"):
        writer.write_labels(0, np.array([0, 3]))
    with pytest.raises(ValueError, match=r"`train_mask`.*bool"):
        writer.write_masks(0, np.ones(2, dtype=np.int64), np.ones(2, bool), np.ones(2, bool))
    writer.abort()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match=r"`index_dtype` to be one of \('int32', 'int64'\)"):
        NpyGraphWriter(str(tmp_path), 10, 4, 2, num_classes=3, index_dtype="int16")


def test_writer_does_not_overwrite_unless_asked(tmp_path):
    from_pyg(GRAPH.load(), str(tmp_path))
    with pytest.raises(FileExistsError, match=r"overwrite=True"):
        from_pyg(GRAPH.load(), str(tmp_path))
    other = SyntheticGraph(num_nodes=100, avg_degree=3, num_features=5, seed=0).load()
    _assert_same_graph(from_pyg(other, str(tmp_path), overwrite=True).load(), other)
