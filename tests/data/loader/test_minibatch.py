"""sample_minibatch and NeighborSamplingLoader against the graph they sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightgraph.data.loader.minibatch import (
    NeighborSamplingLoader,
    gather_rows,
    sample_minibatch,
)
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.utilities.random_state import make_generator


def _graph(n: int = 120, e: int = 600):
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    return edge_index, torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_minibatch_rows_edges_and_counts_match_the_graph():
    edge_index, x, y = _graph()
    indptr, indices = to_csc(edge_index, x.size(0))
    seeds = torch.tensor([5, 17, 40])
    batch = sample_minibatch(indptr, indices, x, y, seeds, [3, 2], generator=make_generator(0, 1))
    assert batch.batch_size == 3 and batch.n_id[:3].tolist() == seeds.tolist()
    assert torch.equal(batch.x, x[batch.n_id]) and torch.equal(batch.y, y[batch.n_id])
    edges = set(zip(edge_index[0].tolist(), edge_index[1].tolist(), strict=True))
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    assert set(zip(src.tolist(), dst.tolist(), strict=True)) <= edges
    assert sum(batch.num_sampled_nodes) == batch.num_nodes
    assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)


def test_make_generator_is_stable_and_key_dependent():
    a = torch.rand(3, generator=make_generator(0, "x", 1))
    assert torch.equal(a, torch.rand(3, generator=make_generator(0, "x", 1)))
    assert not torch.equal(a, torch.rand(3, generator=make_generator(0, "x", 2)))


def test_loader_covers_every_seed_once_per_epoch_and_resumes():
    edge_index, x, y = _graph()
    indptr, indices = to_csc(edge_index, x.size(0))
    seeds = torch.arange(0, 120, 3)

    def make():
        return NeighborSamplingLoader(indptr, indices, x, y, seeds, [2, 2], batch_size=7, seed=3)

    loader = make()
    assert len(loader) == 6
    first = [b.n_id[: b.batch_size] for b in loader]
    second = [b.n_id[: b.batch_size] for b in loader]
    assert sorted(torch.cat(first).tolist()) == seeds.tolist()
    assert any(not torch.equal(a, b) for a, b in zip(first, second, strict=True))  # reshuffled
    resumed = make()
    it = iter(resumed)
    head = [next(it).n_id[:7] for _ in range(2)]
    state = resumed.state_dict()
    again = make()
    again.load_state_dict(state)
    rest = [b.n_id[: b.batch_size] for b in again] + [b.n_id[: b.batch_size] for b in again]
    assert all(torch.equal(a, b) for a, b in zip(head + rest, first + second, strict=True))
    assert loader.stats.targets == 2 * seeds.numel()


def test_bad_arguments_are_named():
    edge_index, x, y = _graph()
    indptr, indices = to_csc(edge_index, x.size(0))
    with pytest.raises(ValueError, match="batch_size"):
        NeighborSamplingLoader(indptr, indices, x, y, torch.arange(3), [2], batch_size=0)
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSamplingLoader(indptr, indices, x, y, torch.arange(3), [0], batch_size=2)


def test_rng_state_is_the_position_that_seeds_the_next_batches():
    """An evaluation loader (no shuffle) draws new samples every pass: the pass counter is
    its random state, which RandomStateCheckpoint carries across a resume."""
    edge_index, x, y = _graph()
    indptr, indices = to_csc(edge_index, x.size(0))

    def make():
        return NeighborSamplingLoader(
            indptr, indices, x, y, torch.arange(30), [2, 2], batch_size=30, shuffle=False, seed=1
        )

    loader = make()
    first = next(iter(loader)).n_id
    state = loader.rng_state()
    assert state == {"epoch": 1, "step": 0, "position": [0]}
    expected = next(iter(loader)).n_id
    assert not torch.equal(first, expected)  # a fresh loader would repeat `first`
    resumed = make()
    resumed.set_rng_state(state)
    assert torch.equal(next(iter(resumed)).n_id, expected)
    with pytest.raises(TypeError, match=r"keys \['epoch', 'position', 'step'\]"):
        resumed.set_rng_state({"epoch": 1})
    with pytest.raises(ValueError, match=r"expected `state\['epoch'\]` to be an integer >= 0"):
        resumed.set_rng_state({"epoch": -1, "step": 0, "position": [0]})
    with pytest.raises(ValueError, match=r"state\['position'\] to be a list of 1 int"):
        resumed.set_rng_state({"epoch": 1, "step": 0, "position": [0, 0]})


# ------------------------------------------------------------------ fast default paths
def _no(name):
    def fail(*args, **kwargs):
        raise AssertionError(f"{name} was called")

    return fail


def _memmap(tmp_path, array: np.ndarray) -> torch.Tensor:
    mm = np.memmap(tmp_path / "x.npy", dtype=array.dtype, mode="w+", shape=array.shape)
    mm[:] = array
    mm.flush()
    mapped = np.memmap(tmp_path / "x.npy", dtype=array.dtype, mode="c", shape=array.shape)
    return torch.from_numpy(mapped)


def test_gather_rows_in_memory_is_one_index_select_without_a_sort(monkeypatch):
    x = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    node = torch.tensor([7, 3, 49, 3, 0, 12])
    expected = x.numpy()[node.numpy()]  # NumPy's fancy indexing as the reference
    monkeypatch.setattr(torch, "argsort", _no("torch.argsort"))
    assert np.array_equal(gather_rows(x, node).numpy(), expected)


def test_gather_rows_of_a_memory_map_reads_rows_in_ascending_order(tmp_path, monkeypatch):
    array = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)
    x = _memmap(tmp_path, array)
    node = torch.tensor([7, 3, 49, 3, 0, 12])
    reads = []
    real_index = torch.Tensor.__getitem__

    def recording(self, idx):
        if self.data_ptr() == x.data_ptr() and isinstance(idx, torch.Tensor):
            reads.append(idx.clone())
        return real_index(self, idx)

    monkeypatch.setattr(torch.Tensor, "__getitem__", recording)
    got = gather_rows(x, node, memory_mapped=True)
    monkeypatch.undo()
    assert np.array_equal(got.numpy(), array[node.numpy()])
    assert len(reads) == 1 and reads[0].tolist() == sorted(node.tolist())


@pytest.mark.parametrize("mapped", [False, True])
def test_loader_relabels_through_the_node_buffer_and_draws_the_same_batches(
    tmp_path, monkeypatch, mapped
):
    edge_index, x, y = _graph()
    indptr, indices = to_csc(edge_index, x.size(0))
    features = _memmap(tmp_path, x.numpy()) if mapped else x

    def batches(**kwargs):
        loader = NeighborSamplingLoader(
            indptr,
            indices,
            features,
            y,
            torch.arange(0, 120, 2),
            [3, 2],
            batch_size=16,
            seed=5,
            memory_mapped=mapped,
            **kwargs,
        )
        return [b for _ in range(2) for b in loader]

    reference = batches(node_buffer=False)  # torch.unique relabelling
    monkeypatch.setattr(torch, "unique", _no("torch.unique"))
    default = batches()
    assert len(default) == len(reference) == 8
    for a, b in zip(default, reference, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        assert torch.equal(a.x, x[a.n_id])  # the graph's own rows
        assert a.num_sampled_nodes == b.num_sampled_nodes


def test_loader_falls_back_to_torch_unique_above_the_buffer_limit(monkeypatch):
    import lightgraph.data.loader.minibatch as minibatch

    edge_index, x, y = _graph()
    indptr, indices = to_csc(edge_index, x.size(0))
    loader = NeighborSamplingLoader(indptr, indices, x, y, torch.arange(20), [3], batch_size=20)
    assert loader.use_node_buffer
    monkeypatch.setattr(minibatch, "NODE_BUFFER_MAX_NODES", 119)  # the graph has 120 nodes
    big = NeighborSamplingLoader(indptr, indices, x, y, torch.arange(20), [3], batch_size=20)
    assert not big.use_node_buffer
    monkeypatch.setattr(torch, "unique", _no("torch.unique"))
    with pytest.raises(AssertionError, match="torch.unique was called"):
        next(iter(big))
    with pytest.raises(ValueError, match="NeighborSamplingLoader: expected `node_buffer`"):
        NeighborSamplingLoader(indptr, indices, x, y, torch.arange(3), [2], 2, node_buffer=1)
