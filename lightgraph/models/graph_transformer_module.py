"""LightningModule for graph transformers on node sequences or graph batches (TorchGT)."""

from __future__ import annotations

import time
from typing import Any, Literal

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, Metric
from torchmetrics.classification import MulticlassAccuracy

from lightgraph.data.node_sequence import TokenBatch
from lightgraph.nn.graph_transformer import MultiheadGraphAttention, SequenceBatchNorm

TASKS = ("node", "graph")


def _installed_sequence_parallel(trainer: Any) -> Any:
    """The strategy's ``sequence_parallel`` when it spans more than one rank, else ``None``."""
    if trainer is None:
        return None
    try:
        sp = getattr(trainer.strategy, "sequence_parallel", None)
    except RuntimeError:  # not set up
        return None
    if sp is None or sp.world_size <= 1:
        return None
    return sp


class GraphTransformerModule(pl.LightningModule):
    """Train a graph transformer (:class:`~lightgraph.nn.graph_transformer.Graphormer`,
    :class:`~lightgraph.nn.graph_transformer.GT`) on TorchGT's node sequences or graph sets.

    ``task="node"``: every batch is one node sequence
    (:class:`~lightgraph.data.node_sequence.NodeSequenceDataModule`); the loss is the mean
    over the sequence's training tokens. Under a graph-parallel strategy
    (``GraphParallelStrategy``) :meth:`setup` installs the strategy's ``sequence_parallel``
    on every attention layer (and synchronised batch norm) and checks that the heads split
    over the ranks; each rank then holds a token shard, sums the loss over its labelled
    tokens, divides by the sequence's *global* count of labelled tokens and multiplies by
    the world size ``P``:

    .. math::
        \\mathcal{L}_r = \\frac{P}{|\\mathcal{T}|} \\sum_{i \\in \\mathcal{T} \\cap
        \\text{shard}(r)} \\ell_i,

    so DDP's average of the ranks' gradients is the single-process gradient (the
    all-to-all backward routes every token's gradient to the rank that computed it).
    ``task="graph"``: batches of graphs
    (:class:`~lightgraph.data.graph_set.GraphSetDataModule`), mean loss over the batch's
    graphs, plain data parallelism.

    Classification (``num_classes`` set) uses cross-entropy and accuracy, regression
    (``num_classes=None``) the L1 loss and mean absolute error.

    Logged: ``train_loss``, ``val_loss``, ``val_acc``/``test_acc`` (``val_mae``/``test_mae``
    for regression; node sequences evaluate validation and test tokens in one pass),
    ``train_step_time`` (seconds per training step, slowest rank), ``attention_dense``
    (every step: 1 if any attention layer ran dense attention, as ``"dual"`` does
    periodically) and ``attention_threshold`` (the cluster-sparse transfer threshold).

    Args:
        model: a graph transformer ``model(batch, stage) -> outputs`` whose ``task``
            matches.
        num_classes: number of classes; ``None`` for regression.
        task: ``"node"`` or ``"graph"``.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_epochs: epochs of linear learning-rate warm-up (0: none).
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int | None = None,
        task: Literal["node", "graph"] = "node",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        warmup_epochs: int = 0,
    ) -> None:
        super().__init__()
        owner = "GraphTransformerModule"
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
        ):
            raise ValueError(
                f"{owner}: expected `num_classes` to be an integer >= 2 (or None for "
                f"regression) but got {num_classes!r}."
            )
        if task not in TASKS:
            raise ValueError(f"{owner}: expected `task` to be one of {TASKS} but got {task!r}.")
        model_task = getattr(model, "task", task)
        if model_task != task:
            raise ValueError(
                f"{owner}: expected the model's task to match `task`={task!r} but the model "
                f"has task={model_task!r}."
            )
        if not lr > 0:
            raise ValueError(f"{owner}: expected `lr` > 0 but got {lr!r}.")
        if weight_decay < 0:
            raise ValueError(f"{owner}: expected `weight_decay` >= 0 but got {weight_decay!r}.")
        if (
            isinstance(warmup_epochs, bool)
            or not isinstance(warmup_epochs, int)
            or warmup_epochs < 0
        ):
            raise ValueError(
                f"{owner}: expected `warmup_epochs` to be an integer >= 0 but got "
                f"{warmup_epochs!r}."
            )
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.task = task
        self.num_classes = num_classes
        self.metric_name = "acc" if num_classes is not None else "mae"
        self.val_metric = self._make_metric()
        self.test_metric = self._make_metric()
        self._step_start = 0.0

    def _make_metric(self) -> Metric:
        if self.num_classes is not None:
            return MulticlassAccuracy(num_classes=self.num_classes, average="micro")
        return MeanAbsoluteError()

    @property
    def attention_layers(self) -> list[MultiheadGraphAttention]:
        return [m for m in self.model.modules() if isinstance(m, MultiheadGraphAttention)]

    # ------------------------------------------------------------------------- set-up
    def setup(self, stage: str) -> None:
        sp = _installed_sequence_parallel(self._trainer)
        if sp is None:
            return
        for module in self.model.modules():
            if isinstance(module, MultiheadGraphAttention):
                sp.check_heads(module.heads, owner=f"{type(self.model).__name__} attention")
                module.sequence_parallel = sp
            elif isinstance(module, SequenceBatchNorm):
                module.sequence_parallel = sp

    def teardown(self, stage: str) -> None:
        for module in self.model.modules():
            if isinstance(module, (MultiheadGraphAttention, SequenceBatchNorm)):
                module.sequence_parallel = None

    # ------------------------------------------------------------------------ helpers
    def forward(self, batch: TokenBatch, stage: str = "predict") -> Tensor:
        return self.model(batch, stage)

    def _loss(self, out: Tensor, target: Tensor, reduction: str) -> Tensor:
        if self.num_classes is not None:
            return F.cross_entropy(out, target.long(), reduction=reduction)
        return F.l1_loss(out.reshape(target.shape), target.to(out.dtype), reduction=reduction)

    def _scores(self, out: Tensor, target: Tensor) -> Tensor:
        return out if self.num_classes is not None else out.reshape(target.shape)

    def _node_loss(self, out: Tensor, batch: TokenBatch, mask_name: str) -> Tensor:
        """This rank's share of the sequence's mean loss, scaled for DDP's average."""
        mask = getattr(batch, mask_name)
        total = self._loss(out[mask], batch.y[mask], "sum")
        count = max(batch.global_counts.get(mask_name, int(mask.sum())), 1)
        sp = _installed_sequence_parallel(self._trainer)
        scale = sp.world_size if sp is not None and batch.is_sharded else 1
        return total * (scale / count)

    # ------------------------------------------------------------------------ training
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # Dual attention's dense interleave follows the optimiser step, also after resuming.
        for attention in self.attention_layers:
            attention.step = self.global_step
        self._step_start = time.perf_counter()

    def training_step(self, batch: TokenBatch, batch_idx: int) -> Tensor:
        out = self.model(batch, "train")
        if self.task == "node":
            loss = self._node_loss(out, batch, "train_mask")
            size = 1
        else:
            loss = self._loss(out, batch.y, "mean")
            size = batch.num_graphs
        # Every rank logs its P-scaled share: their mean is the sequence's mean loss.
        self.log(
            "train_loss",
            loss.detach(),
            reduce_fx="mean",
            sync_dist=True,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=size,
        )
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log(
            "train_step_time",
            time.perf_counter() - self._step_start,
            reduce_fx="max",
            sync_dist=True,
            on_step=False,
            on_epoch=True,
            batch_size=1,
        )
        layers = self.attention_layers
        if not layers:
            return
        dense = float(any(a.last_dense for a in layers))
        self.log("attention_dense", dense, on_step=True, on_epoch=False, batch_size=1)
        self.log(
            "attention_threshold",
            float(layers[0].threshold),
            on_step=False,
            on_epoch=True,
            batch_size=1,
        )

    # ---------------------------------------------------------------------- evaluation
    def _evaluate_nodes(self, batch: TokenBatch, stage: str) -> None:
        out = self.model(batch, stage)
        name = self.metric_name
        if stage == "val":
            mask = batch.val_mask
            loss = self._node_loss(out, batch, "val_mask")
            self.log("val_loss", loss, reduce_fx="mean", sync_dist=True, batch_size=1)
            self.val_metric.update(self._scores(out[mask], batch.y[mask]), batch.y[mask])
            self.log(f"val_{name}", self.val_metric, prog_bar=True, batch_size=1)
        mask = batch.test_mask
        self.test_metric.update(self._scores(out[mask], batch.y[mask]), batch.y[mask])
        self.log(f"test_{name}", self.test_metric, prog_bar=True, batch_size=1)

    def _evaluate_graphs(self, batch: TokenBatch, stage: str) -> None:
        out = self.model(batch, stage)
        size = batch.num_graphs
        metric = self.val_metric if stage == "val" else self.test_metric
        if stage == "val":
            loss = self._loss(out, batch.y, "mean")
            self.log("val_loss", loss, sync_dist=True, batch_size=size)
        metric.update(self._scores(out, batch.y), batch.y)
        self.log(f"{stage}_{self.metric_name}", metric, prog_bar=True, batch_size=size)

    def validation_step(self, batch: TokenBatch, batch_idx: int) -> None:
        if self.task == "node":
            self._evaluate_nodes(batch, "val")
        else:
            self._evaluate_graphs(batch, "val")

    def test_step(self, batch: TokenBatch, batch_idx: int) -> None:
        if self.task == "node":
            self._evaluate_nodes(batch, "test")
        else:
            self._evaluate_graphs(batch, "test")

    def predict_step(self, batch: TokenBatch, batch_idx: int) -> dict[str, Tensor]:
        out = self.model(batch, "predict")
        if self.task == "node":
            return {"node": batch.node_ids, "output": out}
        return {"output": out}

    # ----------------------------------------------------------------------- optimiser
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )
        warmup = self.hparams.warmup_epochs
        if not warmup:
            return optimizer
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda epoch: min(1.0, (epoch + 1) / warmup)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"},
        }
