"""Hub selection over an on-disk CSC, in chunks, against the in-memory
:func:`~lightgraph.data.partition.hubs.select_hubs` on the same graph."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
import torch
from numpy.lib.format import open_memmap

from lightgraph.data import SyntheticGraph
from lightgraph.data.partition.hubs import (
    hub_scores,
    hub_scores_on_disk,
    select_hubs,
    select_hubs_on_disk,
)
from lightgraph.functional.neighbor_sampling import to_csc

KIB = 1024


def _csc_on_disk(tmp_path, edge_index: torch.Tensor, num_nodes: int, dtype=np.int64):
    """``to_csc`` of ``edge_index`` written with ``open_memmap`` and reopened read-only."""
    arrays = []
    for name, t in zip(("indptr", "indices"), to_csc(edge_index, num_nodes), strict=True):
        path = os.path.join(tmp_path, f"{name}.npy")
        out = open_memmap(path, mode="w+", dtype=dtype if name == "indices" else np.int64,
                          shape=tuple(t.shape))  # fmt: skip
        out[:] = t.numpy()
        out.flush()
        del out
        arrays.append(np.load(path, mmap_mode="r"))
    return arrays[0], arrays[1]


def _synthetic():
    data = SyntheticGraph(num_nodes=3000, avg_degree=8, seed=4).load()
    return data.edge_index, data.num_nodes, data.train_mask


def _random():
    """Self-loops, repeated edges (up to 4 copies), nodes without in-neighbours."""
    gen = torch.Generator().manual_seed(1)
    num_nodes = 1500
    edge_index = torch.randint(0, num_nodes, (2, 9000), generator=gen)
    edge_index[1][edge_index[1] < 30] = 30  # nodes 0..29 have no in-neighbours
    edge_index = torch.cat([edge_index, edge_index[:, :500].repeat(1, 3)], dim=1)
    edge_index[1, :200] = edge_index[0, :200]  # self-loops
    train_mask = torch.rand(num_nodes, generator=gen) < 0.2
    return edge_index, num_nodes, train_mask


@pytest.mark.parametrize("graph", [_synthetic, _random])
@pytest.mark.parametrize("walk_length,laziness", [(0, 0.5), (1, 0.5), (3, 0.5), (4, 0.2)])
@pytest.mark.parametrize("budget", [None, 16 * KIB, 1])
def test_scores_equal_in_memory_bitwise(tmp_path, graph, walk_length, laziness, budget) -> None:
    edge_index, num_nodes, train_mask = graph()
    indptr, indices = _csc_on_disk(tmp_path, edge_index, num_nodes)
    want = hub_scores(edge_index, num_nodes, train_mask, walk_length, laziness).numpy()
    got = hub_scores_on_disk(
        indptr, indices, num_nodes, train_mask.numpy(), walk_length, laziness,
        memory_budget=budget,
    )  # fmt: skip
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)  # same summation order: equal to the bit


@pytest.mark.parametrize("graph", [_synthetic, _random])
@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.05, 1.0])
@pytest.mark.parametrize("exclude_train", [False, True])
@pytest.mark.parametrize("budget", [None, 16 * KIB])
def test_hubs_equal_in_memory(tmp_path, graph, fraction, exclude_train, budget) -> None:
    edge_index, num_nodes, train_mask = graph()
    indptr, indices = _csc_on_disk(tmp_path, edge_index, num_nodes, np.int32)
    exclude = train_mask if exclude_train else None
    want = select_hubs(edge_index, num_nodes, train_mask, fraction, 3, exclude=exclude).numpy()
    got = select_hubs_on_disk(
        indptr, indices, num_nodes, train_mask.numpy(), fraction, 3,
        exclude=None if exclude is None else exclude.numpy(), memory_budget=budget,
    )  # fmt: skip
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    assert np.all(np.diff(got) > 0)


def test_state_memory_is_bounded_by_nodes_and_budget(tmp_path) -> None:
    """E >> N: the traced (NumPy) allocations stay below ``96 N + budget`` plus a constant,
    far below one E-sized array; the in-memory scores exceed it (the check can fail)."""
    num_nodes, num_edges, budget = 2000, 400_000, 64 * KIB
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    train_mask = torch.rand(num_nodes, generator=gen) < 0.3
    indptr, indices = _csc_on_disk(tmp_path, edge_index, num_nodes)
    mask = train_mask.numpy()
    bound = 96 * num_nodes + budget + 256 * KIB
    assert bound < 4 * num_edges

    select_hubs_on_disk(indptr, indices, num_nodes, mask, 0.01, 3, memory_budget=budget)
    tracemalloc.start()
    try:
        got = select_hubs_on_disk(indptr, indices, num_nodes, mask, 0.01, 3, memory_budget=budget)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        want = select_hubs(edge_index, num_nodes, train_mask, 0.01, 3)
        _, in_memory_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < bound, (peak, bound)
    assert in_memory_peak > bound, (in_memory_peak, bound)
    np.testing.assert_array_equal(got, want.numpy())


def test_bad_csc_is_named(tmp_path) -> None:
    mask = np.zeros(4, bool)
    indptr = np.array([0, 1, 3, 3, 4])
    with pytest.raises(ValueError, match="sorted by source.*target 1"):
        hub_scores_on_disk(indptr, np.array([2, 3, 0, 1]), 4, mask, 2)
    with pytest.raises(ValueError, match="`indices`.*\\[0, 3\\].*found 4"):
        hub_scores_on_disk(indptr, np.array([2, 0, 4, 1]), 4, mask, 2)
    with pytest.raises(ValueError, match="`indptr` to be .*shape \\(5,\\)"):
        hub_scores_on_disk(indptr[:-1], np.array([2, 0, 3, 1]), 4, mask, 2)
    with pytest.raises(ValueError, match="`indptr`.*non-decreasing.*end at len\\(indices\\) = 3"):
        hub_scores_on_disk(indptr, np.array([2, 0, 3]), 4, mask, 2)
    with pytest.raises(ValueError, match="`train_mask` to be a boolean array of shape \\(4,\\)"):
        hub_scores_on_disk(indptr, np.array([2, 0, 3, 1]), 4, np.zeros(4, np.int64), 2)
    with pytest.raises(ValueError, match="`exclude` to be a boolean array of shape \\(4,\\)"):
        select_hubs_on_disk(indptr, np.array([2, 0, 3, 1]), 4, mask, 0.5, 2, exclude=mask[:3])
    with pytest.raises(ValueError, match="`memory_budget` to be"):
        select_hubs_on_disk(indptr, np.array([2, 0, 3, 1]), 4, mask, 0.5, 2, memory_budget=-1)
