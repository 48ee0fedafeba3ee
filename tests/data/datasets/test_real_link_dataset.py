"""OGB's link benchmarks from tiny files in OGB's raw layout (needs the optional ``ogb``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lightgraph.data.datasets.link_split import edge_keys

N = 40


def _write_csv(path: Path, array: np.ndarray) -> None:
    import pandas as pd

    pd.DataFrame(array).to_csv(path, header=False, index=False, compression="gzip")


def _layout(root: Path, name: str, edges: np.ndarray, features: int, extra: dict) -> Path:
    base = root / name.replace("-", "_")
    raw = base / "raw"
    raw.mkdir(parents=True)
    (base / "RELEASE_v1.txt").write_text("")
    _write_csv(raw / "edge.csv.gz", edges.T)
    _write_csv(raw / "num-node-list.csv.gz", np.array([[N]]))
    _write_csv(raw / "num-edge-list.csv.gz", np.array([[edges.shape[1]]]))
    rng = np.random.default_rng(0)
    _write_csv(raw / "node-feat.csv.gz", rng.standard_normal((N, features)).astype(np.float32))
    for file, values in extra.items():
        _write_csv(raw / f"{file}.csv.gz", values)
    split = base / "split" / "time"
    split.mkdir(parents=True)
    return split


def _pairs(rng, count: int) -> np.ndarray:
    src = rng.integers(0, N, count)
    dst = (src + rng.integers(1, N, count)) % N
    return np.stack([src, dst])


def test_ogbl_collab_official_split_and_shared_negatives(tmp_path):
    pytest.importorskip("ogb")
    from lightgraph.data.datasets.real_link_dataset import RealLinkDataset

    rng = np.random.default_rng(1)
    train, val, test = _pairs(rng, 120), _pairs(rng, 15), _pairs(rng, 15)
    split = _layout(
        tmp_path, "ogbl-collab", train, 128,
        {"edge_weight": np.ones((120, 1)), "edge_year": np.full((120, 1), 2010)},
    )  # fmt: skip
    negatives = {k: _pairs(rng, 30) for k in ("valid", "test")}
    torch.save(
        {"edge": train.T, "weight": np.ones(120), "year": np.full(120, 2010)}, split / "train.pt"
    )
    for key, edges in (("valid", val), ("test", test)):
        torch.save({"edge": edges.T, "edge_neg": negatives[key].T}, split / f"{key}.pt")

    dataset = RealLinkDataset("ogbl-collab", root=str(tmp_path))
    data = dataset.load()
    assert data.x.shape == (N, 128) and data.x.dtype == torch.float32
    # OGB adds the inverse edges of the undirected graph.
    keys = set(edge_keys(data.edge_index[0], data.edge_index[1], N).tolist())
    assert {int(u) * N + int(v) for u, v in train.T} <= keys
    assert {int(v) * N + int(u) for u, v in train.T} <= keys
    official = dataset.official_link_split()
    assert official.shared and official.metric == "hits@50"
    assert torch.equal(official.split.train, torch.from_numpy(train))
    assert torch.equal(official.split.test, torch.from_numpy(test))
    assert torch.equal(official.negatives["val"], torch.from_numpy(negatives["valid"]))


def test_ogbl_citation2_per_query_negatives_train_and_rank(tmp_path):
    pytest.importorskip("ogb")
    import lightning.pytorch as pl
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.data import LinkNeighborSamplingDataModule
    from lightgraph.data.datasets.real_link_dataset import RealLinkDataset
    from lightgraph.models import LinkPredictor

    rng = np.random.default_rng(2)
    train, val, test = _pairs(rng, 150), _pairs(rng, 12), _pairs(rng, 12)
    split = _layout(tmp_path, "ogbl-citation2", train, 128, {"node_year": np.full((N, 1), 2000)})
    torch.save({"source_node": train[0], "target_node": train[1]}, split / "train.pt")
    neg = {}
    for key, edges in (("valid", val), ("test", test)):
        neg[key] = rng.integers(0, N, (12, 20))
        torch.save(
            {"source_node": edges[0], "target_node": edges[1], "target_node_neg": neg[key]},
            split / f"{key}.pt",
        )
    dataset = RealLinkDataset("ogbl-citation2", root=str(tmp_path))
    official = dataset.official_link_split()
    assert not official.shared and official.metric == "mrr"
    assert torch.equal(official.negatives["test"], torch.from_numpy(neg["test"]))

    dm = LinkNeighborSamplingDataModule(
        dataset, fanouts=[3, 3], batch_size=32, cache_dir=str(tmp_path / "c")
    )
    dm.prepare_data()
    dm.setup("fit")
    batch = dm.eval_batch("val")
    assert torch.equal(batch.negatives(0, 12), torch.from_numpy(neg["valid"]))
    assert not dm.split.undirected  # citation2 is directed
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(128, 16, 2, dm.num_outputs))
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module, dm)
    assert 0 < float(trainer.callback_metrics["val_mrr"]) <= 1


def test_shared_negative_evaluation_is_ogbs_hits(tmp_path):
    """Against shared negative pairs the logged Hits@K is OGB's: a positive counts when it
    scores above the K-th best negative."""
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.data.batch import LinkEvalBatch
    from lightgraph.functional.link_ranking import hits_at_k_shared
    from lightgraph.functional.neighbor_sampling import to_csc
    from lightgraph.models import LinkPredictor

    rng = np.random.default_rng(5)
    ei = torch.from_numpy(_pairs(rng, 200))
    indptr, indices = to_csc(ei, N)
    x = torch.randn(N, 4)
    q = torch.from_numpy(_pairs(rng, 50))
    shared = torch.from_numpy(_pairs(rng, 60))
    batch = LinkEvalBatch("test", indptr, indices, x, q[0], q[1], shared_neg=shared)
    torch.manual_seed(0)
    module = LinkPredictor(GraphSAGE(4, 8, 2, 8), eval_memory_budget=2000)  # tiny chunks
    h = module.node_embeddings(batch)
    ranks = torch.cat(list(module.iter_shared_ranks(h, batch)))
    pos = (h[q[0]] * h[q[1]]).sum(-1)
    neg = (h[shared[0]] * h[shared[1]]).sum(-1)
    for k in (1, 10, 50):
        want = hits_at_k_shared(pos, neg, k)
        assert float((ranks <= k).double().mean()) == pytest.approx(want)
