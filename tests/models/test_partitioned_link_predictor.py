"""Partition-parallel link prediction through the Trainer: two processes equal one."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from lightgraph.data import PartitionedLinkDataModule, SyntheticGraph
from lightgraph.models import PartitionedLinkPredictor
from lightgraph.nn import GraphSAGE
from lightgraph.strategies import BoundaryExchangeStrategy

DATASET = SyntheticGraph(num_nodes=300, avg_degree=6, num_classes=4, num_features=8, seed=2)


def _fit(tmp_path, devices: int, loss: str = "bce"):
    torch.manual_seed(0)
    module = PartitionedLinkPredictor(
        GraphSAGE(8, 16, hidden_channels=16, num_layers=2, dropout=0.0),
        loss=loss,
        lr=0.01,
        hits_k=(1, 10),
    )
    dm = PartitionedLinkDataModule(
        DATASET, partitioner="metis", num_negatives=2, eval_negatives=20,
        embedding_channels=16, cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    strategy = BoundaryExchangeStrategy(start_method="fork") if devices > 1 else "auto"
    trainer = pl.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, max_epochs=4, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        enable_checkpointing=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, dm)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    trainer.test(module, dm, verbose=False)
    metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    return metrics, module


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("loss", ["bce", "softmax"])
def test_two_processes_train_and_rank_as_one_process(tmp_path, loss) -> None:
    """Pairs across the two partitions are scored exactly and the loss is the global mean:
    the weights, the loss and the ranking metrics agree with one process."""
    single, one = _fit(tmp_path / "one", 1, loss)
    multi, two = _fit(tmp_path / "two", 2, loss)
    for (name, p1), p2 in zip(one.named_parameters(), two.parameters(), strict=True):
        torch.testing.assert_close(p2, p1, atol=1e-4, rtol=1e-4, msg=f"parameter {name} differs")
    assert multi["train_loss"] == pytest.approx(single["train_loss"], rel=1e-5)
    for key in ("val_mrr", "test_mrr", "test_hits@1", "test_hits@10"):
        assert multi[key] == pytest.approx(single[key], abs=1e-4), key
    assert single["test_mrr"] > 0.2  # above a random ranking of 21 (0.17): it learned


def test_each_rank_trains_the_edges_whose_source_it_owns(tmp_path) -> None:
    dm = PartitionedLinkDataModule(DATASET, num_parts=1, cache_dir=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    batch = dm.batch("train")
    assert batch.pos.size(1) == batch.num_pairs == dm.split.train.size(1)
    assert torch.equal(batch.pos, dm.split.train[:, batch.pos_index])


def test_a_benchmarks_own_negatives_are_used_in_evaluation(tmp_path) -> None:
    """An official split's per-query negatives reach the partitioned evaluation: ranking
    with them equals ranking the same embeddings directly."""
    import numpy as np

    from lightgraph.data import NpyGraph
    from lightgraph.data.datasets import random_link_split
    from lightgraph.data.datasets.npy_graph_writer import from_pyg
    from lightgraph.functional.link_ranking import link_ranks

    data = DATASET.load()
    root = tmp_path / "npy"
    from_pyg(data, str(root))
    split = random_link_split(data.edge_index, data.num_nodes, 0.1, 0.1, seed=4)
    for name in ("train", "val", "test"):
        np.save(root / f"link_{name}.npy", split.positives(name).numpy())
    neg = np.random.default_rng(1).integers(0, data.num_nodes, (split.val.size(1), 9))
    np.save(root / "link_val_neg.npy", neg)
    dm = PartitionedLinkDataModule(NpyGraph(str(root)), num_parts=1, cache_dir=str(tmp_path / "c"))
    dm.prepare_data()
    dm.setup("fit")
    batch = dm.batch("val")
    assert torch.equal(batch.neg, torch.from_numpy(neg))
    torch.manual_seed(0)
    module = PartitionedLinkPredictor(
        GraphSAGE(8, 16, hidden_channels=16, num_layers=2, dropout=0.0)
    )
    recorded = {}
    module.log_ranking = lambda h, b, stage, share: recorded.update(  # type: ignore[method-assign]
        ranks=torch.cat(list(module.iter_ranks(h, b, *share))), h=h, b=b
    )
    module._evaluate(batch, "val")
    h, b = recorded["h"], recorded["b"]
    pos = (h[b.src] * h[b.dst]).sum(-1)
    negs = (h[b.src].unsqueeze(1) * h[torch.from_numpy(neg)]).sum(-1)
    torch.testing.assert_close(recorded["ranks"], link_ranks(pos, negs))
