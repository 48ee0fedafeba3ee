"""Partitioning a graph kept on disk (memory-mapped NumPy arrays) against the in-memory
partitioner on the same graph: the same partition, in bounded memory."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
import torch

from lightgraph.data import SyntheticGraph, partition_graph
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.partition.partitioner import partition_on_disk

KIB = 1024


def _save(tmp_path, name: str, array: np.ndarray) -> np.ndarray:
    """``array`` written to ``tmp_path/name.npy`` and opened read-only memory-mapped."""
    path = os.path.join(tmp_path, f"{name}.npy")
    np.save(path, array)
    return np.load(path, mmap_mode="r")


def _on_disk(tmp_path, edge_index, y, train_mask, num_classes, multilabel=False) -> OnDiskGraph:
    num_nodes = int(train_mask.shape[0])
    return OnDiskGraph(
        num_nodes=num_nodes,
        edge_index=_save(tmp_path, "edge_index", edge_index),
        x=_save(tmp_path, "x", np.zeros((num_nodes, 1), np.float32)),
        y=_save(tmp_path, "y", y),
        train_mask=_save(tmp_path, "train_mask", train_mask),
        val_mask=_save(tmp_path, "val_mask", np.zeros(num_nodes, bool)),
        test_mask=_save(tmp_path, "test_mask", np.zeros(num_nodes, bool)),
        num_classes=num_classes,
        multilabel=multilabel,
    )


def _synthetic(tmp_path, multilabel=False) -> OnDiskGraph:
    data = SyntheticGraph(num_nodes=3000, avg_degree=8, seed=2, multilabel=multilabel).load()
    return _on_disk(
        tmp_path,
        data.edge_index.numpy(),
        data.y.numpy(),
        data.train_mask.numpy(),
        int(data.y.max()) + 1 if not multilabel else data.y.shape[1],
        multilabel,
    )


def _random(tmp_path) -> OnDiskGraph:
    """int32 ids, self-loops, repeated and one-way edges, isolated nodes, label ids with
    gaps (strata are compacted)."""
    rng = np.random.default_rng(7)
    num_nodes, num_edges = 2500, 12000
    edge_index = rng.integers(0, num_nodes - 40, (2, num_edges)).astype(np.int32)
    edge_index[:, :300] = edge_index[:, 300:600]  # repeats
    edge_index[1, 600:700] = edge_index[0, 600:700]  # self-loops
    y = rng.choice(np.array([0, 3, 9]), num_nodes).astype(np.int64)
    train_mask = rng.random(num_nodes) < 0.4
    return _on_disk(tmp_path, edge_index, y, train_mask, 10)


def _in_memory(graph: OnDiskGraph, k: int, method: str, seed: int) -> np.ndarray:
    return partition_graph(
        torch.from_numpy(np.array(graph.edge_index)),
        graph.num_nodes,
        k,
        method,
        seed,
        y=torch.from_numpy(np.array(graph.y)),
        train_mask=torch.from_numpy(np.array(graph.train_mask)),
    ).numpy()


@pytest.mark.parametrize("graph_kind", ["synthetic", "random", "multilabel"])
@pytest.mark.parametrize("method", ["gap", "random"])
@pytest.mark.parametrize("k", [4, 16])
@pytest.mark.parametrize("seed", [0, 5])
def test_equals_in_memory_partition(tmp_path, graph_kind, method, k, seed) -> None:
    graph = (
        _random(tmp_path)
        if graph_kind == "random"
        else _synthetic(tmp_path, multilabel=graph_kind == "multilabel")
    )
    want = _in_memory(graph, k, method, seed)
    for budget in (None, 16 * KIB):
        workdir = tmp_path / f"work-{budget}"
        workdir.mkdir()
        got = partition_on_disk(
            graph, k, method, seed=seed, memory_budget=budget, workdir=str(workdir)
        )
        assert got.dtype == np.int64 and got.shape == (graph.num_nodes,)
        np.testing.assert_array_equal(got, want)
        assert os.listdir(workdir) == []  # the work files are removed


def test_budget_smaller_than_a_node_still_equal(tmp_path) -> None:
    # A budget of a few bytes: one edge per chunk, one node per window.
    rng = np.random.default_rng(3)
    edge_index = rng.integers(0, 60, (2, 400))
    graph = _on_disk(tmp_path, edge_index, rng.integers(0, 3, 60), rng.random(60) < 0.5, 3)
    want = _in_memory(graph, 4, "gap", 1)
    np.testing.assert_array_equal(partition_on_disk(graph, 4, seed=1, memory_budget=1), want)


def test_metis_loads_the_graph_and_equals_in_memory(tmp_path) -> None:
    graph = _synthetic(tmp_path)
    want = _in_memory(graph, 4, "metis", 0)
    np.testing.assert_array_equal(partition_on_disk(graph, 4, "metis"), want)
    with pytest.raises(ValueError, match="method='metis'.*memory_budget.*method='gap'"):
        partition_on_disk(graph, 4, "metis", memory_budget=64 * KIB)


def test_single_part_and_graph_without_edges(tmp_path) -> None:
    graph = _on_disk(
        tmp_path, np.empty((2, 0), np.int64), np.zeros(5, np.int64), np.ones(5, bool), 1
    )
    for method in ("gap", "random"):
        np.testing.assert_array_equal(partition_on_disk(graph, 1, method), np.zeros(5, np.int64))
        np.testing.assert_array_equal(
            partition_on_disk(graph, 3, method), _in_memory(graph, 3, method, 0)
        )


def test_state_memory_is_bounded_by_nodes_and_budget(tmp_path) -> None:
    """E >> N: the traced (NumPy) allocations of the on-disk path stay below
    ``64 N + budget`` plus a constant, far below one E-sized id array; the in-memory
    partitioner on the same graph exceeds the bound (so the check can fail)."""
    rng = np.random.default_rng(0)
    num_nodes, num_edges, budget = 2000, 200_000, 64 * KIB  # E = 100 N
    edge_index = rng.integers(0, num_nodes, (2, num_edges)).astype(np.int32)
    graph = _on_disk(
        tmp_path, edge_index, rng.integers(0, 4, num_nodes), rng.random(num_nodes) < 0.5, 4
    )
    bound = 64 * num_nodes + budget + 256 * KIB
    assert bound < 4 * num_edges  # one int32 id per edge is above the bound

    partition_on_disk(graph, 8, memory_budget=budget)  # compile the kernels first
    tracemalloc.start()
    try:
        on_disk = partition_on_disk(graph, 8, memory_budget=budget)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        _in_memory(graph, 8, "gap", 0)
        _, in_memory_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < bound, (peak, bound)
    assert in_memory_peak > bound, (in_memory_peak, bound)
    np.testing.assert_array_equal(on_disk, _in_memory(graph, 8, "gap", 0))


def test_bad_arguments_name_them(tmp_path) -> None:
    graph = _synthetic(tmp_path)
    with pytest.raises(ValueError, match="`method` to be one of .*'gap'.* but got 'spectral'"):
        partition_on_disk(graph, 4, "spectral")
    with pytest.raises(ValueError, match="`num_parts` <= num_nodes \\(3000\\).*got num_parts=3001"):
        partition_on_disk(graph, 3001)
    with pytest.raises(ValueError, match="`memory_budget` to be"):
        partition_on_disk(graph, 4, memory_budget=0)
    with pytest.raises(TypeError, match="`graph` to be .*OnDiskGraph"):
        partition_on_disk(np.zeros((2, 3)), 4)  # type: ignore[arg-type]
    (tmp_path / "bad").mkdir()
    bad = _on_disk(
        tmp_path / "bad", np.array([[0, 1], [1, 3000]]), np.zeros(3000, np.int64),
        np.ones(3000, bool), 1,
    )  # fmt: skip
    for method in ("gap", "random"):
        with pytest.raises(ValueError, match="node ids in `edge_index` to lie in \\[0, 2999\\]"):
            partition_on_disk(bad, 4, method)


@pytest.mark.parametrize("window_bytes", [1, 100, 900, 1 << 20])
def test_windowed_relabel_equals_the_in_memory_relabel(window_bytes, tmp_path):
    """The on-disk renaming, built window by window from sequential scans, equals the
    in-memory one (windows smaller than one node's list hold that list alone)."""
    from lightgraph.data.partition import gap

    gap._compile_kernels("test")
    gen = np.random.default_rng(window_bytes)
    n = 60
    degree = gen.integers(0, 9, n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = gen.integers(0, n, int(indptr[-1])).astype(np.int32)
    order = gen.permutation(n)
    want_indptr, want = gap._relabel(
        indptr, indices, order, np.empty(n, np.int32), np.empty_like(indices)
    )
    got_indptr, got = gap._relabel_on_disk(
        indptr,
        indices,
        order,
        np.empty(n, np.int32),
        np.empty_like(indices),
        window_bytes,
        str(tmp_path),
    )
    np.testing.assert_array_equal(got_indptr, want_indptr)
    np.testing.assert_array_equal(got, want)
