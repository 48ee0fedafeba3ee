"""SyntheticGraphSet (structure-only targets) and GraphSetDataModule (block-diagonal batches)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from lightgraph.data.datasets.graph_set import SyntheticGraphSet, triangle_density
from lightgraph.data.lightning.graph_set import GraphSetDataModule
from lightgraph.data.loader.token_batch import TokenBatch
from lightgraph.functional.graph_encoding import EDGE_BUCKET, GLOBAL_BUCKET, SELF_BUCKET


def _blind_key(data) -> tuple:
    """Everything a structure-blind model sees: size, edge count, degree sequence, features."""
    degrees = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
    return (
        data.num_nodes,
        data.edge_index.size(1),
        tuple(torch.sort(degrees).values.tolist()),
        tuple(torch.unique(data.x).tolist()),
    )


@pytest.fixture(scope="module")
def classification() -> list:
    return SyntheticGraphSet(num_graphs=300, seed=2).load()


def test_classification_target_is_structural_and_degree_matched(classification) -> None:
    labels = torch.tensor([int(g.y) for g in classification])
    density = torch.tensor([triangle_density(g.edge_index, g.num_nodes) for g in classification])
    # The label is a function of the structure: triangles per node against 0.5 ...
    assert torch.equal(labels, (density >= 0.5).long())
    assert labels.float().mean() == 0.5
    # ... and the two graphs of every pair are identical to a structure-blind model.
    for a, b in zip(classification[::2], classification[1::2], strict=True):
        assert _blind_key(a) == _blind_key(b)
        assert int(a.y) != int(b.y)
    # The best any structure-blind predictor can do (even fitted on the test graphs):
    # predict the majority label of its input's group -- exactly chance level.
    groups = defaultdict(list)
    for g in classification:
        groups[_blind_key(g)].append(int(g.y))
    best_blind = sum(max(v.count(0), v.count(1)) for v in groups.values()) / len(classification)
    assert best_blind == 0.5
    # A node-count baseline is no better: the node count is shared by the pair.
    assert len({g.num_nodes for g in classification}) > 5


def test_regression_target_is_not_predictable_from_blind_statistics() -> None:
    graphs = SyntheticGraphSet(num_graphs=300, task="regression", seed=2).load()
    target = torch.tensor([float(g.y) for g in graphs], dtype=torch.float64)
    density = torch.tensor([triangle_density(g.edge_index, g.num_nodes) for g in graphs])
    torch.testing.assert_close(target, density.double(), rtol=0, atol=1e-6)
    groups = defaultdict(list)
    for g, t in zip(graphs, target.tolist(), strict=True):
        groups[_blind_key(g)].append(t)
    # In-sample error of the best structure-blind predictor (the group mean) ...
    blind_mse = sum(sum((t - sum(v) / len(v)) ** 2 for t in v) for v in groups.values())
    blind_mse /= len(graphs)
    # ... stays a large fraction of the target's variance (a structural model can reach 0).
    assert blind_mse > 0.25 * float(target.var())


def test_generator_is_deterministic_and_validated() -> None:
    a = SyntheticGraphSet(num_graphs=10, seed=5).load()
    b = SyntheticGraphSet(num_graphs=10, seed=5).load()
    for ga, gb in zip(a, b, strict=True):
        assert torch.equal(ga.edge_index, gb.edge_index) and torch.equal(ga.y, gb.y)
    with pytest.raises(ValueError, match="even `num_graphs`"):
        SyntheticGraphSet(num_graphs=11)
    with pytest.raises(ValueError, match=r"`task` to be one of \('classification', 'regression'\)"):
        SyntheticGraphSet(task="ranking")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`max_nodes` >= min_nodes"):
        SyntheticGraphSet(min_nodes=12, max_nodes=8)


@pytest.fixture(scope="module")
def module() -> GraphSetDataModule:
    dm = GraphSetDataModule(
        SyntheticGraphSet(num_graphs=60, seed=1), batch_size=8, pe_dim=3, max_distance=4
    )
    dm.setup()
    return dm


def test_splits_are_disjoint_and_cover_all_graphs(module) -> None:
    idx = module.split_indices(60)
    assert [len(idx[s]) for s in ("train", "val", "test")] == [48, 6, 6]
    joined = torch.cat([idx["train"], idx["val"], idx["test"]])
    assert torch.equal(torch.sort(joined).values, torch.arange(60))
    assert sum(len(list(module._loader(s, False))) for s in ("train", "val", "test")) == 6 + 1 + 1


def test_batch_attention_graph_is_block_diagonal(module) -> None:
    batch: TokenBatch = next(iter(module.val_dataloader()))
    graph = batch.graph
    graph.validate()
    S, B = batch.num_tokens, batch.num_graphs
    assert B == 6 and batch.y.shape == (B,) and batch.x.size(0) == S
    src, dst = graph.edge_index
    assert torch.equal(batch.graph_index[src], batch.graph_index[dst])  # no cross-graph entry
    key = dst * S + src
    assert bool((key[1:] > key[:-1]).all())
    masked = module.num_buckets
    assert masked == 8 and batch.num_buckets == masked and graph.far_bucket == masked
    same = batch.graph_index[:, None] == batch.graph_index[None, :]
    assert bool((graph.dense_bucket[~same] == masked).all())
    assert bool((graph.dense_bucket[same] < masked).all())
    assert torch.equal(graph.dense_bucket[dst, src], graph.edge_bucket)
    # Every graph: its global token first, linked both ways to each of its nodes.
    readout = batch.readout_index
    assert torch.equal(torch.nonzero(batch.is_global).flatten(), readout)
    for b in range(B):
        tokens = torch.nonzero(batch.graph_index == b).flatten()
        g = int(readout[b])
        assert g == int(tokens[0])
        for t in tokens[1:].tolist():
            for pair in ((g, t), (t, g)):
                e = ((src == pair[0]) & (dst == pair[1])).nonzero().flatten()
                assert e.numel() == 1 and int(graph.edge_bucket[e]) == GLOBAL_BUCKET
    assert bool((graph.edge_bucket[src == dst] == SELF_BUCKET).all())
    assert int((graph.edge_bucket == EDGE_BUCKET).sum()) > 0
    assert batch.lap_pe.shape == (S, 3) and not batch.lap_pe[readout].any()


def test_large_batches_have_no_dense_buckets() -> None:
    dm = GraphSetDataModule(SyntheticGraphSet(num_graphs=20), batch_size=20, dense_limit=100)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch.num_tokens > 100 and batch.graph.dense_bucket is None


def test_pe_dim_is_an_argument_and_the_model_is_never_read() -> None:
    # A model asking for 5 columns changes nothing: the data module builds its own pe_dim.
    trainer = SimpleNamespace(
        lightning_module=SimpleNamespace(
            model=SimpleNamespace(requires_laplacian_pe=True, pe_dim=5)
        )
    )
    dm = GraphSetDataModule(SyntheticGraphSet(num_graphs=4), batch_size=2, pe_dim=2)
    dm.trainer = trainer
    dm.setup()
    assert next(iter(dm.test_dataloader())).lap_pe.size(1) == 2
    plain = GraphSetDataModule(SyntheticGraphSet(num_graphs=4), batch_size=2)
    plain.trainer = trainer
    plain.setup()
    assert plain.pe_dim == 0 and next(iter(plain.test_dataloader())).lap_pe is None


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="`batch_size` >= 1"):
        GraphSetDataModule(batch_size=0)
    with pytest.raises(ValueError, match=r"`val_ratio` in \[0, 1 - train_ratio\]"):
        GraphSetDataModule(train_ratio=0.9, val_ratio=0.2)
    with pytest.raises(ValueError, match="`pe_dim` to be an integer >= 0"):
        GraphSetDataModule(pe_dim=-1)
    with pytest.raises(RuntimeError, match="call `setup\\(\\)`"):
        GraphSetDataModule().train_dataloader()
