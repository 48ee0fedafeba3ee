"""LightningModule for graph transformers on node sequences or graph batches (TorchGT)."""

from __future__ import annotations

from typing import Any, Literal

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, Metric
from torchmetrics.classification import MulticlassAccuracy

from lightgraph.data.lightning.graph_set import GraphSetDataModule
from lightgraph.data.lightning.node_sequence import NodeSequenceDataModule
from lightgraph.data.loader.token_batch import TokenBatch
from lightgraph.distributed.context import ParallelContextHolder
from lightgraph.distributed.sequence_parallel import SequenceParallel
from lightgraph.nn.attention import MultiheadGraphAttention
from lightgraph.nn.norm import SequenceBatchNorm
from lightgraph.utilities.timing import Stopwatch

TASKS = ("node", "graph")


class GraphTransformerModule(ParallelContextHolder, pl.LightningModule):
    """Train a graph transformer (:class:`~lightgraph.nn.models.graphormer.Graphormer`,
    :class:`~lightgraph.nn.models.gt.GT`) on TorchGT's node sequences or graph sets.

    ``task="node"``: every batch is one node sequence
    (:class:`~lightgraph.data.lightning.node_sequence.NodeSequenceDataModule`); the loss is the mean
    over the sequence's training tokens. Under a graph-parallel strategy
    (``GraphParallelStrategy``) the strategy hands its ``sequence_parallel`` to the module
    (:attr:`parallel_context`) and :meth:`configure_model` installs it on every attention
    layer (and synchronised batch norm) after checking that the heads split over the
    ranks; each rank then holds a token shard, sums the loss over its labelled tokens and
    divides by the sequence's *global* count of labelled tokens:

    .. math::
        \\mathcal{L}_r = \\frac{1}{|\\mathcal{T}|} \\sum_{i \\in \\mathcal{T} \\cap
        \\text{shard}(r)} \\ell_i,

    so the strategy's sum of the ranks' gradients is the single-process gradient (the
    all-to-all backward routes every token's gradient to the rank that computed it).
    ``task="graph"``: batches of graphs
    (:class:`~lightgraph.data.lightning.graph_set.GraphSetDataModule`), mean loss over the batch's
    graphs, plain data parallelism (divided by the world size under a graph-parallel
    strategy, which sums gradients instead of averaging them).

    Classification (``num_classes`` set) uses cross-entropy and accuracy, regression
    (``num_classes=None``) the L1 loss and mean absolute error.

    Logged: ``train_loss``, ``val_loss``, ``val_acc``/``test_acc`` (``val_mae``/``test_mae``
    for regression; node sequences evaluate validation and test tokens in one pass),
    ``train_step_time`` (seconds per training step, slowest rank), ``attention_dense``
    (every step: 1 if any attention layer ran dense attention, as ``"dual"`` does
    periodically and whenever the pattern fails C1-C3), ``attention_dense_fraction``
    (every epoch: the share of the epoch's training steps that ran dense attention in any
    layer, i.e. the epoch mean of ``attention_dense``, averaged over the ranks; about
    ``1 / dense_every`` for ``"dual"`` on patterns that meet C1-C3, 1 for the dense kinds,
    0 for the sparse ones) and ``attention_threshold`` (the cluster-sparse transfer
    threshold).

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
        self._step_timer = Stopwatch()

    def _make_metric(self) -> Metric:
        if self.num_classes is not None:
            return MulticlassAccuracy(num_classes=self.num_classes, average="micro")
        return MeanAbsoluteError()

    @property
    def attention_layers(self) -> list[MultiheadGraphAttention]:
        return [m for m in self.model.modules() if isinstance(m, MultiheadGraphAttention)]

    # ------------------------------------------------------------------------- set-up
    @property
    def sequence_parallel(self) -> SequenceParallel | None:
        """The strategy's sequence parallelism when it spans more than one rank, else ``None``."""
        sp = self.parallel_context.sequence_parallel
        return sp if sp is not None and sp.world_size > 1 else None

    def setup(self, stage: str) -> None:
        self._check_pe_dim()

    def configure_model(self) -> None:
        sp = self.sequence_parallel
        if sp is None:
            return
        for module in self.model.modules():
            if isinstance(module, MultiheadGraphAttention):
                sp.check_heads(module.heads, owner=f"{type(self.model).__name__} attention")
                module.sequence_parallel = sp
            elif isinstance(module, SequenceBatchNorm):
                module.sequence_parallel = sp

    def _check_pe_dim(self) -> None:
        """A model that reads Laplacian PEs needs a data module built with its ``pe_dim``."""
        if not getattr(self.model, "requires_laplacian_pe", False):
            return
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        if not isinstance(datamodule, NodeSequenceDataModule | GraphSetDataModule):
            return  # not one of lightgraph's data modules: the model checks every batch
        data_pe_dim = datamodule.pe_dim
        if data_pe_dim == self.model.pe_dim:
            return
        pe_dim = self.model.pe_dim
        raise ValueError(
            f"GraphTransformerModule: {type(self.model).__name__} reads pe_dim={pe_dim} Laplacian "
            f"positional encodings per token but {type(datamodule).__name__} builds "
            f"pe_dim={data_pe_dim}; set the data module's `pe_dim` to {pe_dim} "
            f"(CLI/YAML: `data.init_args.pe_dim: {pe_dim}`)."
        )

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

    def _mask(self, batch: TokenBatch, mask_name: str) -> Tensor:
        masks = {
            "train_mask": batch.train_mask,
            "val_mask": batch.val_mask,
            "test_mask": batch.test_mask,
        }
        return masks[mask_name]

    def _node_loss(self, out: Tensor, batch: TokenBatch, mask_name: str) -> Tensor:
        """This rank's share of the sequence's mean loss (the shares add up to the mean)."""
        mask = self._mask(batch, mask_name)
        total = self._loss(out[mask], batch.y[mask], "sum")
        count = max(batch.global_counts.get(mask_name, int(mask.sum())), 1)
        return total / count

    def _loss_reduction(self, batch: TokenBatch) -> str:
        """How ranks' logged losses combine: shares of one sequence add up, batch means average."""
        return "sum" if self.task == "node" and batch.is_sharded else "mean"

    # ------------------------------------------------------------------------ training
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # Dual attention's dense interleave follows the optimiser step, also after resuming.
        for attention in self.attention_layers:
            attention.step = self.global_step
        self._step_timer.start()

    def training_step(self, batch: TokenBatch, batch_idx: int) -> Tensor:
        out = self.model(batch, "train")
        if self.task == "node":
            loss = self._node_loss(out, batch, "train_mask")
            size = 1
        else:
            loss = self._loss(out, batch.y, "mean")
            size = batch.num_graphs
        self.log(
            "train_loss",
            loss.detach(),
            reduce_fx=self._loss_reduction(batch),
            sync_dist=True,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=size,
        )
        sp = self.sequence_parallel
        if sp is not None and not batch.is_sharded:
            # Whole batches per rank under a strategy that sums gradients: average them.
            return loss / sp.world_size
        return loss

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
        layers = self.attention_layers
        if not layers:
            return
        dense = float(any(a.last_dense for a in layers))
        self.log("attention_dense", dense, on_step=True, on_epoch=False, batch_size=1)
        self.log(
            "attention_dense_fraction",
            dense,
            reduce_fx="mean",
            sync_dist=True,
            on_step=False,
            on_epoch=True,
            batch_size=1,
        )
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
            self.log(
                "val_loss",
                loss,
                reduce_fx=self._loss_reduction(batch),
                sync_dist=True,
                batch_size=1,
            )
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
