"""Relation types on the link path: the split, the NS and JOESTAR batches, ranking under
DistMult against a dense reference, errors, and training through the CLI."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import LinkNeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.batch import LinkEvalBatch
from lightgraph.data.datasets.link_split import random_link_split
from lightgraph.data.loader.first_stage import LargeBatchSampler
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import LinkPredictor
from lightgraph.nn.link_decoders import DistMultDecoder

DATASET = SyntheticGraph(num_nodes=600, avg_degree=6, num_features=8, seed=5, num_relations=3)


def _types(data) -> dict[tuple[int, int], int]:
    src, dst = data.edge_index.tolist()
    return {(u, v): int(t) for u, v, t in zip(src, dst, data.edge_type.tolist(), strict=True)}


def test_synthetic_relations_are_symmetric_and_follow_the_classes():
    data = DATASET.load()
    types = _types(data)
    y = data.y.tolist()
    assert all(types[(v, u)] == t == (y[u] + y[v]) % 3 for (u, v), t in types.items())
    assert DATASET.num_relations == 3
    # without relation types the graph is the same graph
    plain = SyntheticGraph(num_nodes=600, avg_degree=6, num_features=8, seed=5).load()
    assert torch.equal(plain.edge_index, data.edge_index) and torch.equal(plain.x, data.x)
    assert not hasattr(plain, "edge_type")


def test_every_split_edge_carries_its_graph_relation():
    data = DATASET.load()
    types = _types(data)
    split = random_link_split(data.edge_index, data.num_nodes, edge_type=data.edge_type, seed=1)
    assert split.num_relations == 3
    for name in ("train", "val", "test"):
        edges, rel = split.positives(name), split.relations(name)
        assert rel.numel() == edges.size(1) > 0
        assert rel.tolist() == [types[(u, v)] for u, v in edges.t().tolist()]


def test_conflicting_relation_types_are_named():
    ei = torch.tensor([[0, 1, 0, 1, 2], [1, 0, 1, 2, 1]])
    with pytest.raises(ValueError, match=r"\(0, 1\) is listed with two relation types"):
        random_link_split(
            ei, 3, 0.0, 0.0, undirected=False, edge_type=torch.tensor([0, 0, 1, 0, 0])
        )
    sym = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(ValueError, match=r"undirected edge \(\d, \d\) carries different"):
        random_link_split(sym, 3, 0.0, 0.0, edge_type=torch.tensor([0, 1, 0, 0]))
    with pytest.raises(ValueError, match=r"one relation type per edge \(4\).*\(3,\)"):
        random_link_split(sym, 3, edge_type=torch.tensor([0, 1, 0]))


@pytest.mark.parametrize("first_stage", [None, "lbs"])
def test_training_batches_carry_their_positives_relations(tmp_path, first_stage):
    stage = (
        None if first_stage is None else LargeBatchSampler(ratio=0.25, second_stage_fanouts=[3, 3])
    )
    dm = LinkNeighborSamplingDataModule(
        DATASET, fanouts=[3, 3], batch_size=32, cache_dir=str(tmp_path), first_stage=stage,
        prefetch=False,
    )  # fmt: skip
    dm.prepare_data()
    dm.setup("fit")
    types = _types(DATASET.load())
    seen = 0
    for item in dm.train_loader():
        batch = dm.on_before_batch_transfer(item, 0)
        pairs = zip(batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True)
        assert batch.rel.tolist() == [types[p] for p in pairs]
        seen += batch.rel.numel()
    assert seen == dm.split.train.size(1)
    val = dm.eval_batch("val")
    assert val.rel.tolist() == [
        types[p] for p in zip(val.src.tolist(), val.dst.tolist(), strict=True)
    ]


def test_chunked_distmult_ranking_equals_the_dense_reference():
    gen = torch.Generator().manual_seed(0)
    n, q, k, d, r = 50, 23, 7, 6, 4
    ei = torch.randint(0, n, (2, 200), generator=gen)
    indptr, indices = to_csc(ei, n)
    src, dst = torch.randint(0, n, (q,), generator=gen), torch.randint(0, n, (q,), generator=gen)
    rel = torch.randint(0, r, (q,), generator=gen)
    neg = torch.randint(0, n, (q, k), generator=gen)
    batch = LinkEvalBatch("val", indptr, indices, torch.randn(n, 5), src, dst, neg, rel=rel)
    decoder = DistMultDecoder(d, r)
    module = LinkPredictor(GraphSAGE(5, 8, 2, d), decoder=decoder, eval_memory_budget=1)
    h = torch.randn(n, d, generator=gen)
    ranks = module.rank_queries(h, batch)
    R = decoder.relation.detach()
    for i in range(q):
        score = lambda v, i=i: float((h[src[i]] * R[rel[i]] * h[v]).sum())  # noqa: E731
        pos = score(dst[i])
        expected = (
            1 + sum(score(v) > pos for v in neg[i]) + 0.5 * sum(score(v) == pos for v in neg[i])
        )
        assert float(ranks[i]) == pytest.approx(expected)


def test_distmult_by_name_needs_relation_types():
    with pytest.raises(ValueError, match=r"decoder='distmult'.*`num_relations` >= 1.*got 0"):
        LinkPredictor(GraphSAGE(5, 8, 2, 6), decoder="distmult")
    module = LinkPredictor(GraphSAGE(5, 8, 2, 6), decoder="distmult", num_relations=3)
    assert isinstance(module.decoder, DistMultDecoder) and module.decoder.num_relations == 3
    with pytest.raises(ValueError, match=r"`rel` and\s+`shared_neg` cannot be given together"):
        e = torch.zeros(2, dtype=torch.long)
        indptr, indices = to_csc(torch.tensor([[0], [1]]), 2)
        LinkEvalBatch("val", indptr, indices, torch.zeros(2, 1), e, e, rel=e,
                      shared_neg=torch.tensor([[0], [1]]))  # fmt: skip


def test_distmult_learns_to_rank_by_relation(tmp_path):
    dm = LinkNeighborSamplingDataModule(
        DATASET, fanouts=[5, 5], batch_size=64, eval_negatives=20, cache_dir=str(tmp_path)
    )
    torch.manual_seed(0)
    module = LinkPredictor(
        GraphSAGE(8, 16, 2, dm.num_outputs), decoder="distmult",
        num_relations=dm.num_relations, lr=0.01,
    )  # fmt: skip
    trainer = pl.Trainer(
        max_epochs=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = trainer.test(module, dm, verbose=False)[0]["test_mrr"]
        trainer.fit(module, dm)
        after = trainer.test(module, dm, verbose=False)[0]["test_mrr"]
    assert after > before + 0.1
