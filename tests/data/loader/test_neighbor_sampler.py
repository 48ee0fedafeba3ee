"""Tests of UniformNeighborSampler / neighbor_loader inside PyG's NodeLoader and models."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader, NodeLoader
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.sampler import NodeSamplerInput

from lightgraph.data.datasets.synthetic_graph import generate_synthetic_graph
from lightgraph.data.loader.neighbor_sampler import UniformNeighborSampler, neighbor_loader
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.utilities.imports import WITH_PYG_LIB, WITH_TORCH_SPARSE


@pytest.fixture(scope="module")
def graph() -> Data:
    data = generate_synthetic_graph(num_nodes=400, avg_degree=6.0, num_features=8, seed=0)
    # A directed graph with edge features, in an order that is not CSC.
    g = torch.Generator().manual_seed(0)
    keep = torch.rand(data.num_edges, generator=g) < 0.7
    data.edge_index = data.edge_index[:, keep]
    data.edge_index = data.edge_index[:, torch.randperm(data.edge_index.size(1), generator=g)]
    data.edge_attr = torch.randn(data.edge_index.size(1), 3, generator=g)
    return data


def check_batch(batch: Data, data: Data) -> None:
    """Every attribute of a mini-batch is the original's at ``n_id``/``e_id``."""
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    assert torch.equal(batch.n_id[: batch.batch_size], batch.input_id)  # input_nodes=None
    assert sum(batch.num_sampled_nodes) == batch.num_nodes
    assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)


@pytest.mark.parametrize("model_cls,kwargs", [(GraphSAGE, {}), (GAT, {"heads": 2}), (GCN, {})])
def test_full_fanout_batches_reproduce_full_graph_models(graph, model_cls, kwargs):
    torch.manual_seed(0)
    model = model_cls(8, 16, num_layers=2, out_channels=5, **kwargs).eval()
    full = model(graph.x, graph.edge_index)
    loader = neighbor_loader(graph, [-1, -1], batch_size=128, shuffle=True, seed=1)
    seen = []
    with torch.no_grad():
        for batch in loader:
            check_batch(batch, graph)
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            trimmed = model(
                batch.x,
                batch.edge_index,
                num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                num_sampled_edges_per_hop=batch.num_sampled_edges,
            )[: batch.batch_size]
            assert out.shape == trimmed.shape == (batch.batch_size, 5)
            if model_cls is not GCN:  # GCN normalises by the degrees of the outer hop too
                assert torch.allclose(out, full[batch.input_id], atol=1e-5)
                assert torch.allclose(trimmed, out, atol=1e-5)  # trimming drops nothing needed
            seen.append(batch.input_id)
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(graph.num_nodes))


def test_sampled_batches_respect_fanouts(graph):
    loader = neighbor_loader(graph, [3, 2], input_nodes=graph.train_mask, batch_size=50)
    deg = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
    train = graph.train_mask.nonzero().squeeze(1)
    for i, batch in enumerate(loader):
        assert torch.equal(batch.n_id[: batch.batch_size], train[i * 50 : (i + 1) * 50])
        assert torch.equal(batch.edge_attr, graph.edge_attr[batch.e_id])
        s0, s1 = batch.num_sampled_nodes[:2]
        m0 = batch.num_sampled_edges[0]
        per_seed = torch.bincount(batch.edge_index[1, :m0], minlength=s0)
        assert torch.equal(per_seed, deg[batch.n_id[:s0]].clamp(max=3))
        per_hop1 = torch.bincount(batch.edge_index[1, m0:] - s0, minlength=s1)
        assert torch.equal(per_hop1, deg[batch.n_id[s0 : s0 + s1]].clamp(max=2))


def test_loader_is_reproducible_and_reshuffles(graph):
    def ids(loader):
        return [b.n_id for b in loader]

    a, b = (
        ids(neighbor_loader(graph, [4, 4], batch_size=100, seed=3)),
        ids(neighbor_loader(graph, [4, 4], batch_size=100, seed=3)),
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = ids(neighbor_loader(graph, [4, 4], batch_size=100, seed=4))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))
    loader = neighbor_loader(graph, [4, 4], batch_size=100, seed=3)
    assert not all(
        torch.equal(x, y) for x, y in zip(ids(loader), ids(loader), strict=True)
    )  # new epoch


def test_workers_are_reproducible_and_differ_per_epoch(graph):
    def epochs(seed):
        loader = neighbor_loader(graph, [4, 4], batch_size=100, seed=seed, num_workers=2)
        return [[b.n_id for b in loader] for _ in range(2)]

    a, b = epochs(5), epochs(5)
    for ea, eb in zip(a, b, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(ea, eb, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(*a, strict=True))  # epoch 2 samples anew


def test_csc_tuple_with_memmaps_and_memmapped_features(graph, tmp_path):
    indptr, indices, perm = to_csc(graph.edge_index, graph.num_nodes, return_perm=True)

    def memmap(name, array, dtype):
        mm = np.memmap(tmp_path / name, dtype=dtype, mode="w+", shape=array.shape)
        mm[:] = array
        mm.flush()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(
                np.memmap(tmp_path / name, dtype=dtype, mode="r", shape=array.shape)
            )

    csc = (memmap("indptr", indptr.numpy(), np.int32), memmap("indices", indices.numpy(), np.int32))
    x = memmap("x", graph.x.numpy(), np.float32)
    data = graph.clone()
    data.x = x
    kwargs = dict(replace=False, seed=7)
    ref = UniformNeighborSampler(graph, [5, 3], **kwargs)
    sampler = UniformNeighborSampler(
        (*csc, graph.num_nodes), [5, 3], edge_permutation=perm, **kwargs
    )
    assert torch.equal(sampler.edge_permutation, ref.edge_permutation)
    seeds = NodeSamplerInput(input_id=None, node=torch.tensor([4, 90, 4, 301]))
    a, b = ref.sample_from_nodes(seeds), sampler.sample_from_nodes(seeds)
    for name in ("node", "row", "col", "edge", "num_sampled_nodes", "num_sampled_edges"):
        x_a, x_b = getattr(a, name), getattr(b, name)
        assert torch.equal(x_a, x_b) if isinstance(x_a, torch.Tensor) else x_a == x_b

    class Recorder(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if any(a is x for a in list(args) + list(kwargs.values())):
                self.calls.add(getattr(func, "__name__", str(func)))
            return func(*args, **kwargs)

    loader = NodeLoader(data, node_sampler=sampler, batch_size=64)
    with Recorder() as rec:
        batches = list(loader)
    for batch in batches:
        check_batch(batch, graph)
    assert rec.calls <= {"index_select", "__get__", "dim", "size"}, rec.calls  # rows only
    assert data.x is x


def test_link_loader(graph):
    sampler = UniformNeighborSampler(graph, [4, 2], seed=0)
    loader = LinkLoader(
        graph, link_sampler=sampler, edge_label_index=graph.edge_index[:, :60], batch_size=20
    )
    for batch in loader:
        src, dst = batch.n_id[batch.edge_label_index]
        assert torch.equal(torch.stack([src, dst]), graph.edge_index[:, batch.input_id])
        assert torch.equal(graph.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])


@pytest.mark.skipif(WITH_PYG_LIB or WITH_TORCH_SPARSE, reason="PyG's sampler is installed")
def test_pyg_backend_names_missing_packages(graph):
    with pytest.raises(ImportError, match=r"backend='pyg'.*`pyg-lib` or `torch-sparse`"):
        UniformNeighborSampler(graph, [5, 5], backend="pyg")
    with pytest.raises(ImportError, match="pyg-lib"):
        neighbor_loader(graph, [5, 5], backend="pyg")


@pytest.mark.skipif(not (WITH_PYG_LIB or WITH_TORCH_SPARSE), reason="needs pyg-lib/torch-sparse")
def test_pyg_backend_runs(graph):
    for batch in neighbor_loader(graph, [3, 2], batch_size=100, backend="pyg"):
        check_batch(batch, graph)


def test_bad_arguments(graph):
    owner = "UniformNeighborSampler: expected"
    with pytest.raises(ValueError, match=rf"{owner} `fanouts\[1\]` .* -1 .* but got 0"):
        UniformNeighborSampler(graph, [5, 0])
    with pytest.raises(ValueError, match=rf"{owner} `backend` to be one of \('torch', 'pyg'\)"):
        UniformNeighborSampler(graph, [5], backend="dgl")
    with pytest.raises(TypeError, match=rf"{owner} `graph` to be a torch_geometric.data.Data"):
        UniformNeighborSampler(graph.edge_index, [5])
    with pytest.raises(ValueError, match=rf"{owner} one of `seed` and `generator`"):
        UniformNeighborSampler(graph, [5], seed=1, generator=torch.Generator())
    indptr, indices = to_csc(graph.edge_index, graph.num_nodes)
    with pytest.raises(ValueError, match=rf"{owner} `indptr` of num_nodes \+ 1 = 402"):
        UniformNeighborSampler((indptr, indices, graph.num_nodes + 1), [5])
    with pytest.raises(ValueError, match=rf"{owner} `graph` to be a Data with backend='pyg'"):
        UniformNeighborSampler((indptr, indices, graph.num_nodes), [5], backend="pyg")
    sampler = UniformNeighborSampler(graph, [5])
    with pytest.raises(ValueError, match="temporal sampling is not supported"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0]), time=torch.zeros(1)))
    with pytest.raises(ValueError, match=r"`seeds` in \[0, 399\]"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([400])))
    with pytest.raises(ValueError, match="neighbor_loader: expected `batch_size`"):
        neighbor_loader(graph, [5], batch_size=0)


def test_rng_state_continues_the_samples_in_place(graph):
    sampler = UniformNeighborSampler(graph, [3, 2], seed=4)
    seeds = NodeSamplerInput(input_id=None, node=torch.arange(20))
    sampler.sample_from_nodes(seeds)
    state = sampler.rng_state()
    expected = sampler.sample_from_nodes(seeds).node
    resumed = UniformNeighborSampler(graph, [3, 2], seed=4)
    generator = resumed.generator
    resumed.set_rng_state(state)
    assert resumed.generator is generator  # set in place: loaders holding it follow
    assert torch.equal(resumed.sample_from_nodes(seeds).node, expected)
    fresh = UniformNeighborSampler(graph, [3, 2], seed=4).sample_from_nodes(seeds).node
    assert not torch.equal(fresh, expected)
    with pytest.raises(TypeError, match="UniformNeighborSampler.set_rng_state: expected `state`"):
        resumed.set_rng_state(None)  # type: ignore[arg-type]
