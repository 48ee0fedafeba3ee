"""LinkPredictor: decoders, losses, chunked evaluation against a dense reference, training."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.utils import to_undirected

from lightgraph.data import LinkNeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.batch import LinkEvalBatch
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import LinkPredictor
from lightgraph.nn.link_decoders import DistMultDecoder, DotDecoder, MLPDecoder


def _eval_batch(n=90, q=37, k=11, given=False, seed=0) -> LinkEvalBatch:
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, 400), generator=gen)
    ei = to_undirected(ei[:, ei[0] != ei[1]], num_nodes=n)
    indptr, indices = to_csc(ei, n)
    src, dst = torch.randint(0, n, (q,), generator=gen), torch.randint(0, n, (q,), generator=gen)
    neg = torch.randint(0, n, (q, k), generator=gen) if given else None
    return LinkEvalBatch(
        "val", indptr, indices, torch.randn(n, 5, generator=gen), src, dst, neg, k, seed=3
    )


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
@pytest.mark.parametrize("given", [False, True])
def test_chunked_ranking_equals_the_dense_score_matrix(decoder, given):
    torch.manual_seed(0)
    batch = _eval_batch(given=given)
    module = LinkPredictor(GraphSAGE(5, 8, 2, 6), decoder=decoder, eval_memory_budget=1)
    module.eval()
    h = module.node_embeddings(batch)
    assert module.query_chunk(batch.num_negatives, 6) == 1  # one query at a time
    chunked = module.rank_queries(h, batch)
    # Dense reference: every score at once, ranks by OGB's rule.
    neg = batch.negatives(0, batch.num_queries)
    with torch.no_grad():
        scores = module.decoder(
            h[batch.src].unsqueeze(1), h[torch.cat([batch.dst[:, None], neg], 1)]
        )
    pos, negs = scores[:, 0], scores[:, 1:]
    want = 1 + 0.5 * ((negs > pos[:, None]).sum(1) + (negs >= pos[:, None]).sum(1)).double()
    torch.testing.assert_close(chunked, want)
    big = LinkPredictor(module.model, decoder=module.decoder, eval_memory_budget=1 << 30)
    torch.testing.assert_close(big.rank_queries(h, batch), want)


def test_layerwise_embeddings_equal_the_full_graph_forward():
    torch.manual_seed(1)
    batch = _eval_batch()
    model = GraphSAGE(5, 8, 2, 6)
    module = LinkPredictor(model, inference_chunk_size=7)
    h = module.node_embeddings(batch)
    counts = batch.indptr[1:] - batch.indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(batch.num_nodes), counts)
    model.eval()
    with torch.no_grad():
        want = model(batch.x, torch.stack([batch.indices, dst]))
    torch.testing.assert_close(h, want, rtol=1e-5, atol=1e-6)


def test_drawn_negatives_do_not_depend_on_the_chunking():
    batch = _eval_batch(n=50, q=3000, k=4)
    whole = batch.negatives(0, 3000)
    parts = torch.cat([batch.negatives(a, min(a + 777, 3000)) for a in range(0, 3000, 777)])
    assert torch.equal(whole, parts) and whole.shape == (3000, 4)
    assert int(whole.min()) >= 0 and int(whole.max()) < 50


def test_decoders_broadcast_and_distmult_uses_the_relation():
    h_src, h_neg = torch.randn(4, 1, 6), torch.randn(4, 3, 6)
    assert DotDecoder()(h_src, h_neg).shape == (4, 3)
    assert MLPDecoder(6, 8)(h_src, h_neg).shape == (4, 3)
    dm = DistMultDecoder(6, num_relations=2)
    rel = torch.tensor([0, 1, 1, 0]).view(-1, 1)
    got = dm(h_src, h_neg, rel)
    want = (h_src * dm.relation[rel] * h_neg).sum(-1)
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match=r"relation types in \[0, 1\]"):
        dm(h_src, h_neg, torch.full((4, 1), 2))
    with pytest.raises(ValueError, match="`rel`"):
        dm(h_src, h_neg)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(decoder="cosine"), ValueError, r"`decoder`.*'dot', 'mlp'.*cosine"),
        (dict(loss="hinge"), ValueError, r"`loss`.*bce.*softmax"),
        (dict(eval_memory_budget=0), ValueError, r"`eval_memory_budget`"),
        (dict(hits_k=[0]), ValueError, r"`hits_k`"),
    ],
)
def test_bad_module_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        LinkPredictor(GraphSAGE(4, 8, 2, 8), **kwargs)


def test_an_evaluation_without_negatives_is_an_error():
    batch = _eval_batch()
    with pytest.raises(ValueError, match=r"ranking needs negatives.*num_negatives=0"):
        LinkEvalBatch("val", batch.indptr, batch.indices, batch.x, batch.src, batch.dst, None, 0)


def _trainer(**kwargs) -> pl.Trainer:
    args = dict(
        max_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    args.update(kwargs)
    return pl.Trainer(**args)


def test_training_learns_to_rank_the_held_out_edges(tmp_path):
    """On the offline graph the held-out edges are predictable from structure and features:
    after a few epochs the test MRR is far above chance (about 1/K * H(K) for K=20)."""
    ds = SyntheticGraph(num_nodes=1500, avg_degree=8, num_features=16, seed=0)
    dm = LinkNeighborSamplingDataModule(
        ds, fanouts=[5, 5], batch_size=256, eval_negatives=20, cache_dir=str(tmp_path)
    )
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(16, 32, 2, dm.num_outputs), lr=0.01)
    trainer = _trainer()
    trainer.fit(module, dm)
    trainer.test(module, dm, verbose=False)
    chance = sum(1 / r for r in range(1, 22)) / 21  # a random rank among 21
    assert float(trainer.callback_metrics["test_mrr"]) > 2 * chance
    assert dm.io_stats()["targets"] == 4 * dm.split.train.size(1)


class _SaveMetrics(pl.Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        import json

        share = pl_module._query_share(batch.num_queries)
        with open(f"{self.path}.rank{trainer.global_rank}", "w") as f:
            json.dump(share, f)

    def on_validation_end(self, trainer, pl_module) -> None:
        import json

        if trainer.global_rank == 0:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            with open(self.path, "w") as f:
                json.dump(metrics, f)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_two_ranks_log_the_metrics_of_all_queries(tmp_path):
    """Under DDP each rank ranks its share of the queries; the logged MRR and Hits@K are
    those of all the queries, as one process computes them (lr 0: the weights stay put)."""
    import json
    import warnings

    ds = SyntheticGraph(num_nodes=500, avg_degree=6, num_features=8, seed=2)
    dm = LinkNeighborSamplingDataModule(
        ds, fanouts=[3, 3], batch_size=64, eval_negatives=15, cache_dir=str(tmp_path / "c")
    )
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(8, 16, 2, dm.num_outputs), lr=0.0, hits_k=(1, 5))
    path = str(tmp_path / "metrics.json")
    trainer = _trainer(
        max_epochs=1, accelerator="cpu", devices=2, strategy="ddp_fork",
        callbacks=[_SaveMetrics(path)],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, dm)
    with open(path) as f:
        logged = json.load(f)
    # The reference: one process, the same (untrained) weights, every query.
    dm.prepare_data()
    dm.setup("fit")
    batch = dm.eval_batch("val")
    ranks = module.rank_queries(module.node_embeddings(batch), batch)
    assert ranks.numel() == dm.split.val.size(1)
    shares = []
    for rank in range(2):  # the ranks' shares partition the queries
        with open(f"{path}.rank{rank}") as f:
            shares.append(tuple(json.load(f)))
    assert shares[0][0] == 0 and shares[0][1] == shares[1][0] and shares[1][1] == ranks.numel()
    assert shares[0][1] < ranks.numel()
    assert logged["val_mrr"] == pytest.approx(float((1 / ranks).mean()), rel=1e-5)
    for k in (1, 5):
        assert logged[f"val_hits@{k}"] == pytest.approx(
            float((ranks <= k).double().mean()), rel=1e-5
        )


def test_an_inductive_split_evaluates_each_split_over_its_own_graph(tmp_path):
    ds = SyntheticGraph(num_nodes=400, avg_degree=6, num_features=8, seed=4)
    dm = LinkNeighborSamplingDataModule(
        ds, fanouts=[3, 3], batch_size=64, split_mode="inductive", cache_dir=str(tmp_path)
    )
    dm.prepare_data()
    dm.setup("fit")
    assert dm.split.inductive
    for name in ("val", "test"):
        batch = dm.eval_batch(name)
        assert int(batch.indices.numel()) == dm.split.message_edges(name).size(1)
    assert dm.eval_batch("val").indices.numel() > dm.train_loader().indices.numel()
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(8, 16, 2, dm.num_outputs))
    trainer = _trainer(max_epochs=1)
    trainer.fit(module, dm)
    assert 0 < float(trainer.callback_metrics["val_mrr"]) <= 1


def test_an_npy_graph_with_link_files_brings_its_split_and_negatives(tmp_path):
    import numpy as np

    from lightgraph.data import NpyGraph
    from lightgraph.data.datasets import random_link_split
    from lightgraph.data.datasets.npy_graph_writer import from_pyg

    graph = SyntheticGraph(num_nodes=300, avg_degree=6, num_features=8, seed=6)
    data = graph.load()
    root = tmp_path / "npy"
    from_pyg(data, str(root))
    split = random_link_split(data.edge_index, data.num_nodes, 0.1, 0.1, seed=9)
    for name in ("train", "val", "test"):
        np.save(root / f"link_{name}.npy", split.positives(name).numpy().astype(np.int32))
    neg = np.random.default_rng(0).integers(0, 300, (split.val.size(1), 7))
    np.save(root / "link_val_neg.npy", neg)
    dataset = NpyGraph(str(root))
    dm = LinkNeighborSamplingDataModule(dataset, fanouts=[3, 3], cache_dir=str(tmp_path / "c"))
    dm.prepare_data()
    dm.setup("fit")
    assert dm.split.undirected and torch.equal(dm.split.test, split.test)
    val = dm.eval_batch("val")
    assert torch.equal(val.negatives(0, val.num_queries), torch.from_numpy(neg))
    assert dm.eval_batch("test").neg is None  # drawn: no link_test_neg.npy
    (root / "link_test.npy").unlink()
    with pytest.raises(
        ValueError, match=r"link_train.npy, link_val.npy and link_test.npy.*link_test.npy"
    ):
        NpyGraph(str(root)).official_link_split()
