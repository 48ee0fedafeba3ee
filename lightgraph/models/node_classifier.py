"""LightningModule for full-graph node classification, single-process or partitioned."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy, MultilabelF1Score

from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.distributed.context import ParallelContextHolder
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.utilities.checks import check_non_negative, check_positive
from lightgraph.utilities.timing import Stopwatch


def bind_partition(module: Any, plan: PartitionPlan, stage: str) -> PartitionedGraph:
    """``plan`` as a :class:`~lightgraph.nn.PartitionedGraph` bound to the halo exchanger
    the strategy handed ``module`` (a :class:`~lightgraph.distributed.context.
    ParallelContextHolder` LightningModule), after checking the plan against the Trainer's
    processes."""
    trainer = module._trainer
    if trainer is not None and plan.num_parts != trainer.world_size:
        raise ValueError(
            f"{type(module).__name__}: the partition plan has {plan.num_parts} partitions but "
            f"the Trainer runs {trainer.world_size} processes."
        )
    exchanger = module.parallel_context.halo_exchanger if plan.num_parts > 1 else None
    return PartitionedGraph(plan, exchanger, stage)


class NodeClassifier(ParallelContextHolder, pl.LightningModule):
    """Full-graph node classification with any :mod:`lightgraph.nn` model.

    Each step trains on the rank's partition (the whole graph on one process). The loss
    is the rank's share of the global mean: its partial sum divided by the *global*
    number of training nodes. Under a boundary-exchange strategy, which sums the ranks'
    gradients, every rank then holds the gradient of the mean loss over the whole graph —
    the same gradient single-process training computes. The strategy's halo exchanger
    reaches the module through its :attr:`parallel_context`.

    Logged metrics (all global, i.e. reduced over partitions): ``train_loss``,
    ``val_loss``, ``val_acc`` / ``test_acc`` (``val_f1`` / ``test_f1``, micro-F1, for
    multi-label graphs), ``train_step_time`` (seconds of forward + backward + optimiser
    step) and, under a boundary-exchange strategy, ``comm_bytes`` (bytes sent per
    training epoch by all ranks, embeddings and gradients) plus
    ``comm/<layer>_<direction>_bytes`` per layer and direction.

    Args:
        model: a :mod:`lightgraph.nn` model ``model(x, graph) -> logits``.
        num_classes: number of classes (labels) for the metrics.
        multilabel: multi-label targets (binary cross-entropy, micro-F1) instead of
            single-label (cross-entropy, accuracy).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        multilabel: bool = False,
        lr: float = 0.01,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        owner = "NodeClassifier"
        low = 1 if multilabel else 2
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < low:
            raise ValueError(f"{owner}: expected `num_classes` >= {low} but got {num_classes!r}.")
        check_positive(owner, "lr", lr)
        check_non_negative(owner, "weight_decay", weight_decay)
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.multilabel = multilabel
        self.metric_name = "f1" if multilabel else "acc"
        self.val_metric = self._make_metric(num_classes)
        self.test_metric = self._make_metric(num_classes)
        self._step_timer = Stopwatch()

    def _make_metric(self, num_classes: int) -> Metric:
        if self.multilabel:
            return MultilabelF1Score(num_labels=num_classes, average="micro")
        return MulticlassAccuracy(num_classes=num_classes, average="micro")

    # ------------------------------------------------------------------------ helpers
    def graph(self, plan: PartitionPlan, stage: str) -> PartitionedGraph:
        """Bind the strategy's halo exchanger (if any) to a partition plan."""
        return bind_partition(self, plan, stage)

    def forward(self, plan: PartitionPlan, stage: str = "predict") -> Tensor:
        return self.model(plan.x, self.graph(plan, stage))

    def _loss_sum(self, logits: Tensor, target: Tensor) -> Tensor:
        if self.multilabel:
            # Mean over labels per node, summed over nodes.
            return F.binary_cross_entropy_with_logits(
                logits, target.float(), reduction="sum"
            ) / target.size(1)
        return F.cross_entropy(logits, target, reduction="sum")

    def _global_mean(self, loss_sum: Tensor, plan: PartitionPlan, mask_name: str) -> Tensor:
        return loss_sum / max(plan.global_counts[mask_name], 1)

    # ------------------------------------------------------------------------ steps
    def on_train_epoch_start(self) -> None:
        exchanger = self.parallel_context.halo_exchanger
        if exchanger is not None:
            exchanger.start_epoch(self.current_epoch)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._step_timer.start()

    def training_step(self, batch: PartitionPlan, batch_idx: int) -> Tensor:
        logits = self(batch, "train")
        mask = batch.train_mask
        mean = self._global_mean(self._loss_sum(logits[mask], batch.y[mask]), batch, "train_mask")
        self.log(
            "train_loss",
            mean.detach(),
            reduce_fx="sum",
            sync_dist=True,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=1,
        )
        # The strategy sums the ranks' gradients: the partial means add up to the global one.
        return mean

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log(
            "train_step_time",
            self._step_timer.stop(),
            reduce_fx="max",
            sync_dist=True,
            on_step=False,
            on_epoch=True,
            batch_size=1,
        )

    def on_train_epoch_end(self) -> None:
        exchanger = self.parallel_context.halo_exchanger
        if exchanger is None:
            return
        stats = exchanger.stats
        # Lightning all-reduces logged tensors where they are: on the compute device.
        total = torch.tensor(float(stats.total("train")), dtype=torch.float64, device=self.device)
        self.log("comm_bytes", total, reduce_fx="sum", sync_dist=True, prog_bar=True)
        for (layer, direction, kind), value in stats.by_layer("train").items():
            suffix = "" if kind == "data" else f"_{kind}"
            self.log(
                f"comm/{layer}_{direction}{suffix}_bytes",
                torch.tensor(float(value), dtype=torch.float64, device=self.device),
                reduce_fx="sum",
                sync_dist=True,
            )

    def _evaluate(self, batch: PartitionPlan, stage: str) -> None:
        logits = self(batch, stage)
        # Multi-label metrics get probabilities: torchmetrics only applies the sigmoid
        # itself when some value falls outside [0, 1].
        scores = torch.sigmoid(logits) if self.multilabel else logits
        name = self.metric_name
        if stage == "val":
            mask = batch.val_mask
            mean = self._global_mean(self._loss_sum(logits[mask], batch.y[mask]), batch, "val_mask")
            self.log("val_loss", mean, reduce_fx="sum", sync_dist=True, batch_size=1)
            self.val_metric.update(scores[mask], batch.y[mask])
            self.log(f"val_{name}", self.val_metric, prog_bar=True, batch_size=1)
        self.test_metric.update(scores[batch.test_mask], batch.y[batch.test_mask])
        self.log(f"test_{name}", self.test_metric, prog_bar=True, batch_size=1)

    def validation_step(self, batch: PartitionPlan, batch_idx: int) -> None:
        # Full-graph training evaluates validation and test nodes in the same pass.
        self._evaluate(batch, "val")

    def test_step(self, batch: PartitionPlan, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: PartitionPlan, batch_idx: int) -> dict[str, Tensor]:
        return {"node": batch.global_ids[: batch.num_inner], "logits": self(batch, "predict")}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )
