from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F

from lightgraph.data import PartitionedGraphDataModule, PartitionPlan, SyntheticGraph
from lightgraph.data.partition import build_partition_plans
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN, MLP
from tests.graphs import tricky_graph


def _plan(multilabel: bool = False) -> PartitionPlan:
    data, _ = tricky_graph(1)
    data.x = data.x.float()
    if multilabel:
        data.y = torch.nn.functional.one_hot(data.y, 3).float()
        data.y[::4, 0] = 1.0
    return PartitionPlan.from_data(data)


def test_single_process_loss_is_the_mean_over_training_nodes() -> None:
    plan = _plan()
    module = NodeClassifier(GCN(6, 3, hidden_channels=8, num_layers=2, dropout=0.0), num_classes=3)
    logits = module(plan, "train")
    mean = module._global_mean(
        module._loss_sum(logits[plan.train_mask], plan.y[plan.train_mask]), plan, "train_mask"
    )
    torch.testing.assert_close(
        mean, F.cross_entropy(logits[plan.train_mask], plan.y[plan.train_mask])
    )


def test_multilabel_loss_and_metric() -> None:
    plan = _plan(multilabel=True)
    module = NodeClassifier(MLP(6, 3, hidden_channels=8), num_classes=3, multilabel=True)
    assert module.metric_name == "f1"
    logits = module(plan)
    mean = module._global_mean(
        module._loss_sum(logits[plan.train_mask], plan.y[plan.train_mask]), plan, "train_mask"
    )
    torch.testing.assert_close(
        mean, F.binary_cross_entropy_with_logits(logits[plan.train_mask], plan.y[plan.train_mask])
    )


def test_fit_logs_global_metrics_and_predicts(tmp_path) -> None:
    ds = SyntheticGraph(num_nodes=300, avg_degree=8, num_classes=4, num_features=16, seed=1)
    dm = PartitionedGraphDataModule(ds, cache_dir=str(tmp_path))
    module = NodeClassifier(GCN(16, 4, hidden_channels=16, num_layers=2), num_classes=4)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(module, dm)
    for key in ("train_loss", "val_loss", "val_acc", "test_acc", "train_step_time"):
        assert key in trainer.callback_metrics
    (pred,) = trainer.predict(module, dm)
    assert pred["logits"].shape == (300, 4) and torch.equal(pred["node"], torch.arange(300))
    tested = trainer.test(module, dm, verbose=False)[0]
    assert 0.0 <= tested["test_acc"] <= 1.0


def test_plan_and_world_size_must_agree() -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    module = NodeClassifier(GCN(6, 3), num_classes=3)
    module._trainer = SimpleNamespace(world_size=1, strategy=None)
    with pytest.raises(ValueError, match="partition plan has 2 partitions but the Trainer runs 1"):
        module.graph(plan, "train")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_classes": 1}, "`num_classes` >= 2"),
        ({"lr": 0.0}, "`lr` > 0"),
        ({"weight_decay": -1.0}, "`weight_decay` >= 0"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = {"model": MLP(4, 3), "num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        NodeClassifier(**args)
