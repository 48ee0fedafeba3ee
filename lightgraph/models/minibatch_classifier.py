"""LightningModule for node classification on sampled mini-batches (any PyG model)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy, MultilabelF1Score

from lightgraph.data.batch import FullGraphBatch
from lightgraph.data.contract import DataContract, data_contract
from lightgraph.data.loader.data_parallel import data_parallel_shard
from lightgraph.functional.sequence_parallel import shard_range
from lightgraph.nn.destination import destination_forward
from lightgraph.nn.history import SYNC_MODES, HistoricalEmbeddings
from lightgraph.nn.layerwise import layerwise_inference
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_non_negative,
    check_positive,
)
from lightgraph.utilities.collectives import all_gather_rows
from lightgraph.utilities.timing import Stopwatch


class MiniBatchNodeClassifier(pl.LightningModule):
    """Node classification over sampled subgraphs, the way PyG's ``NeighborLoader`` feeds them.

    A training batch is a :class:`torch_geometric.data.Data` whose first ``batch_size``
    nodes are the targets (seeds) and whose other nodes are their sampled neighbourhood
    -- what :func:`lightgraph.data.loader.neighbor_loader`, the macro-batch and multistage data
    modules produce. The loss is the mean over the seeds.

    Evaluation batches come in two forms, chosen by the data module:

    * a sampled :class:`~torch_geometric.data.Data` (e.g. fanouts 20, 20, 20): metrics
      over its seeds;
    * a :class:`~lightgraph.data.FullGraphBatch`: exact layer-wise inference over the
      whole graph (:func:`lightgraph.nn.layerwise.layerwise_inference`, PyG ``BasicGNN``
      models only), then metrics over the split's nodes.

    Under data parallelism (the strategy's ``distributed_sampler_kwargs``: ``N`` replicas)
    evaluation is split over the ranks: layer-wise inference computes every layer for this
    rank's contiguous share of the nodes and all-gathers the layer (every rank then holds
    every node's output, the history refresh below included), and each rank updates the
    metrics with the evaluation nodes of its share; sampled evaluation batches are split by
    the data module. The metrics sum their states over the ranks when computed and
    ``val_loss`` is the global mean, so the logged values are those of one process.

    Logged metrics: ``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``,
    ``test_acc`` (``*_f1``, micro-F1, for multi-label graphs) and ``train_step_time``
    (seconds of forward + backward + optimiser step, mean over the epoch's steps).

    Args:
        model: any PyG model ``model(x, edge_index) -> logits`` (e.g.
            ``torch_geometric.nn.models.GraphSAGE``/``GAT``/``GCN``).
        num_classes: number of classes (labels) for the metrics.
        multilabel: multi-label targets (binary cross-entropy, micro-F1).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        trim: destination-only layers when a batch has per-hop counts
            (``num_sampled_nodes``/``num_sampled_edges``): for PyG ``BasicGNN`` models
            (``jk`` ``None`` or ``"last"``) each layer computes only the rows the next
            one reads (:func:`~lightgraph.nn.destination.destination_forward`: bipartite
            message passing, layer ``l`` of ``L`` outputs hops ``0..L-1-l``); other
            ``BasicGNN`` models get PyG's trimming. Same seed outputs and gradients, less
            work; in training mode batch-statistics norms and dropout masks cover the
            destination rows only. ``False``: every layer runs over the whole sampled
            subgraph.
        inference_chunk_size: destination nodes per chunk of layer-wise inference.
        refresh_history: with historical embeddings (PBS), exact validation over the whole
            graph also writes every node's hidden-layer outputs into the history tables
            (they are the most recent embeddings of every node, computed anyway), so rows
            that no training step pushes do not stay at the warm fill.
        history_sync: how the history replicas of data-parallel ranks meet
            (:class:`~lightgraph.nn.history.HistoricalEmbeddings`): ``"step"`` all-gathers
            every step's pushed rows, so every replica holds every rank's latest rows;
            ``"epoch"`` keeps pushes local (no collective per step) and makes the replicas
            equal at the end of every training epoch by the exact refresh: the one
            validation does when it runs that epoch, else one of its own
            (``history.stats["refresh_seconds"]``). Between refreshes, another rank's rows
            are at most one epoch old. ``"auto"`` (the default) picks ``"epoch"`` when
            exact layer-wise validation runs after every training epoch (the refresh then
            costs nothing) and ``"step"`` otherwise; measured in docs/benchmarks.md
            ("Data-parallel sampled training"). ``"epoch"`` and ``"auto"`` need
            ``refresh_history=True`` (``"auto"`` falls back to ``"step"`` without it).
            One process: no difference.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        multilabel: bool = False,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        trim: bool = True,
        inference_chunk_size: int = 8192,
        refresh_history: bool = True,
        history_sync: str = "auto",
    ) -> None:
        super().__init__()
        owner = "MiniBatchNodeClassifier"
        low = 1 if multilabel else 2
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < low:
            raise ValueError(f"{owner}: expected `num_classes` >= {low} but got {num_classes!r}.")
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"{owner}: expected `model` to be a torch.nn.Module (e.g. "
                f"torch_geometric.nn.models.GraphSAGE) but got {type(model).__name__}."
            )
        check_non_negative(owner, "lr", lr)
        check_non_negative(owner, "weight_decay", weight_decay)
        check_bool(owner, "trim", trim)
        check_positive(owner, "inference_chunk_size", inference_chunk_size)
        check_bool(owner, "refresh_history", refresh_history)
        check_choice(owner, "history_sync", history_sync, (*SYNC_MODES, "auto"))
        if history_sync == "epoch" and not refresh_history:
            raise ValueError(
                f"{owner}: `history_sync='epoch'` makes the ranks' history replicas equal by "
                f"the exact refresh at every epoch's end, which `refresh_history=False` "
                f"turns off; set `refresh_history=True` or use `history_sync='step'`."
            )
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.multilabel = multilabel
        self.metric_name = "f1" if multilabel else "acc"
        self.train_metric = self._make_metric(num_classes)
        self.val_metric = self._make_metric(num_classes)
        self.test_metric = self._make_metric(num_classes)
        # Losses as metrics: their (weighted sum, count) states are summed over the ranks.
        # (Lightning's `sync_dist` mean averages the ranks' integer batch counts, which
        # truncates when they are unequal, as evaluation shares may be.)
        self.train_loss_metric = MeanMetric()
        self.val_loss_metric = MeanMetric()
        self._stopwatch = Stopwatch()
        self._refreshed_step = -1  # global step of the last exact history refresh

    def _make_metric(self, num_classes: int) -> Metric:
        if self.multilabel:
            return MultilabelF1Score(num_labels=num_classes, average="micro")
        return MulticlassAccuracy(num_classes=num_classes, average="micro")

    # ------------------------------------------------------------------------ forward
    def _layered(self) -> bool:
        # A PyG BasicGNN whose layers can run one at a time (jk None or "last").
        model = self.model
        return isinstance(model, BasicGNN) and model.jk_mode in (None, "last")

    def model_step(self, batch: Data) -> tuple[Tensor, list[Tensor]]:
        """Run the GNN over ``batch``: ``(out, hidden)`` in the batch's row layout.

        ``out`` holds the model's output rows, the seeds' logits first. For a PyG
        ``BasicGNN`` (``jk`` ``None`` or ``"last"``) and a batch with per-hop counts
        (``num_sampled_nodes``/``num_sampled_edges``), with ``trim=True`` it runs
        :func:`lightgraph.nn.destination.destination_forward`: every layer computes only
        the rows the next one reads, and ``out`` holds the seeds' rows only. A batch that
        carries historical embeddings (``halo_index``/``hist``, see
        :class:`~lightgraph.data.MultistageDataModule` with ``first_stage="pbs"``) goes
        through the same function: halo rows of every hidden layer are replaced by their
        pulled history and ``hidden[l]`` is the output of hidden layer ``l`` (what is
        pushed back); otherwise ``hidden`` is empty. Other models run as
        ``model(x, edge_index)`` (PyG ``BasicGNN``s with another ``jk`` mode with PyG's
        trimming).
        """
        nodes_per_hop = getattr(batch, "num_sampled_nodes", None)
        edges_per_hop = getattr(batch, "num_sampled_edges", None)
        counts = bool(self.hparams.trim) and nodes_per_hop is not None and edges_per_hop is not None
        halo_index = getattr(batch, "halo_index", None)
        if halo_index is not None or (counts and self._layered()):
            return destination_forward(
                self.model,
                batch.x,
                batch.edge_index,
                list(nodes_per_hop) if counts else None,
                list(edges_per_hop) if counts else None,
                None if halo_index is None else list(halo_index),
                None if halo_index is None else list(batch.hist),
            )
        kwargs: dict[str, Any] = {}
        if counts and isinstance(self.model, BasicGNN):
            kwargs["num_sampled_nodes_per_hop"] = list(nodes_per_hop)
            kwargs["num_sampled_edges_per_hop"] = list(edges_per_hop)
        return self.model(batch.x, batch.edge_index, **kwargs), []

    def run_model(self, batch: Data) -> tuple[Tensor, list[Tensor]]:
        """:meth:`model_step`, through :attr:`model_runner` when one is installed.

        A runner (e.g. the one :class:`~lightgraph.callbacks.GraphCompile` installs) is a
        callable ``runner(module, batch) -> (out, hidden)`` that must return the same
        values as :meth:`model_step` for the rows that matter: the first ``batch_size``
        rows of ``out`` and the rows ``push_index[l]`` of ``hidden[l]``.
        """
        runner = self.model_runner
        return runner(self, batch) if runner is not None else self.model_step(batch)

    @property
    def model_runner(self) -> Any:
        """The installed runner (not a submodule: it is never saved in checkpoints)."""
        return self.__dict__.get("_model_runner")

    @model_runner.setter
    def model_runner(self, runner: Any) -> None:
        self.__dict__["_model_runner"] = runner

    def forward(self, batch: Data) -> Tensor:
        """Logits of the batch's seeds (its first ``batch_size`` nodes; all nodes without)."""
        size = getattr(batch, "batch_size", None)
        out, _ = self.run_model(batch)
        return out if size is None else out[:size]

    def _loss(self, logits: Tensor, target: Tensor) -> Tensor:
        if self.multilabel:
            return F.binary_cross_entropy_with_logits(logits, target.float())
        return F.cross_entropy(logits, target)

    def _scores(self, logits: Tensor) -> Tensor:
        # torchmetrics applies a sigmoid itself only when some value leaves [0, 1].
        return torch.sigmoid(logits) if self.multilabel else logits

    @staticmethod
    def _seed_targets(batch: Data) -> Tensor:
        size = getattr(batch, "batch_size", None)
        return batch.y if size is None else batch.y[:size]

    # ------------------------------------------------------------------------ training
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._stopwatch.start()

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        out, hidden = self.run_model(batch)
        size = getattr(batch, "batch_size", None)
        logits = out if size is None else out[:size]
        if hidden:
            self._push_history(batch, hidden)
        target = self._seed_targets(batch)
        loss = self._loss(logits, target)
        n = int(target.size(0))
        self.train_loss_metric.update(loss.detach(), weight=n)
        self.log(
            "train_loss",
            self.train_loss_metric,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            batch_size=n,
        )
        self.train_metric.update(self._scores(logits.detach()), target)
        self.log(
            f"train_{self.metric_name}",
            self.train_metric,
            on_step=False,
            on_epoch=True,
            batch_size=n,
        )
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log(
            "train_step_time",
            self._stopwatch.stop(),
            on_step=False,
            on_epoch=True,
            batch_size=1,
            sync_dist=True,  # every rank runs the same number of steps: the mean over all
        )

    def _push_history(self, batch: Data, hidden: list[Tensor]) -> None:
        history = self.history
        if history is None:
            raise RuntimeError(
                "MiniBatchNodeClassifier: the batch carries historical embeddings but no "
                "history table is attached; use it with a data module that has `history` "
                "(MultistageDataModule(first_stage='pbs')) or set `module.history`."
            )
        pairs = zip(hidden, batch.push_index, batch.push_ids, strict=True)
        for layer, (h, rows, ids) in enumerate(pairs):
            history.push(layer, ids, h[rows].detach())

    @property
    def history(self) -> Any:
        """The :class:`~lightgraph.nn.history.HistoricalEmbeddings` of PBS training (or ``None``).

        Created and warm-filled at train start when the data module asks for one
        (``history_layers > 0``, :class:`~lightgraph.data.MultistageDataModule` with
        ``first_stage="pbs"``), saved in and restored from checkpoints.
        """
        return self.__dict__.get("_history")

    @history.setter
    def history(self, table: Any) -> None:
        self.__dict__["_history"] = table

    def on_train_start(self) -> None:
        contract = data_contract(self.trainer)
        layers = contract.history_layers
        if layers == 0:
            return
        num_layers = getattr(self.model, "num_layers", None)
        if num_layers is not None and num_layers != layers + 1:
            raise ValueError(
                f"MiniBatchNodeClassifier: historical embeddings need one sampled hop per "
                f"layer, but the model has num_layers={num_layers} and the data module "
                f"samples {layers + 1} hops (fanouts); make them equal."
            )
        if self.history is None:
            self.history = HistoricalEmbeddings(
                contract.num_store_nodes, sync=self._history_sync(contract)
            )
        assert contract.attach_history is not None  # DataContract checks it with history
        contract.attach_history(self.history)
        # Historical embeddings start from the exact embeddings of the initial model
        # (GNNAutoScale's warm-up fill), not from zeros; a resumed run keeps its table.
        if not self.history.filled:
            graph = contract.require_full_graph(
                "MiniBatchNodeClassifier", "the warm fill of the historical embeddings"
            )
            self.history.fill(
                self.model,
                graph.indptr,
                graph.indices,
                graph.x,
                chunk_size=int(self.hparams.inference_chunk_size),
                device=self.device,
            )

    def _history_sync(self, contract: DataContract) -> str:
        """``history_sync`` with ``"auto"`` resolved for this Trainer and data module."""
        sync = str(self.hparams.history_sync)
        if sync != "auto":
            return sync
        trainer = self.trainer
        # Exact layer-wise validation (it refreshes the tables) after every training epoch.
        validates = (
            self.hparams.refresh_history
            and contract.eval_mode == "layerwise"
            and trainer.limit_val_batches != 0
            and trainer.check_val_every_n_epoch == 1
            and trainer.val_check_interval in (1.0, None)
        )
        return "epoch" if validates else "step"

    def on_train_epoch_end(self) -> None:
        # history_sync="epoch": the replicas meet at the end of every training epoch, by the
        # exact refresh of a validation that ran after the epoch's last step, else by one here.
        history = self.history
        if history is None or history.sync != "epoch" or not history.filled:
            return
        if self._evaluation_shard()[1] <= 1 or self._refreshed_step == self.global_step:
            return
        graph = data_contract(self.trainer).require_full_graph(
            "MiniBatchNodeClassifier", "`history_sync='epoch'` (a refresh at every epoch's end)"
        )
        tic = time.perf_counter()
        with torch.no_grad():
            self._full_graph_logits(graph, refresh=True)
        history.stats["refresh_seconds"] += time.perf_counter() - tic

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.history is not None:
            checkpoint["history"] = {
                "num_nodes": int(self.history.num_nodes),
                "state": self.history.state_dict(),
            }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("history")
        if saved is not None:
            table = HistoricalEmbeddings(int(saved["num_nodes"]))
            table.load_state_dict(saved["state"])
            self.history = table

    # ---------------------------------------------------------------------- evaluation
    def _full_graph_logits(self, batch: FullGraphBatch, refresh: bool = False) -> Tensor:
        history = self.history
        tables: list[Tensor] = []
        if refresh and history is not None and history.filled and self.hparams.refresh_history:
            tables = list(history.tables)

        def buffer(layer: int, num_nodes: int, channels: int) -> Tensor:
            # Hidden layers are written straight into the history tables when refreshing.
            if layer < len(tables) and tuple(tables[layer].shape) == (num_nodes, channels):
                return tables[layer]
            return torch.empty(num_nodes, channels)

        chunk = int(self.hparams.inference_chunk_size)
        rank, world = self._evaluation_shard()
        rows, exchange = None, None
        if world > 1:
            shares = [shard_range(batch.num_nodes, world, r) for r in range(world)]
            rows = shares[rank]

            def exchange(layer: int, out: Tensor) -> None:
                _gather_rows(out, shares, rank, chunk, self._all_gather_rows)

        if tables:  # every replica now holds the same, exact rows
            self._refreshed_step = self.global_step if self._trainer is not None else -1
        return layerwise_inference(
            self.model,
            batch.indptr,
            batch.indices,
            batch.x,
            chunk_size=chunk,
            device=self.device,
            buffer=buffer,
            rows=rows,
            exchange=exchange,
        )

    def _evaluation_shard(self) -> tuple[int, int]:
        """``(rank, world_size)`` over which layer-wise evaluation splits the nodes.

        The data-parallel replicas (:func:`~lightgraph.data.loader.data_parallel.data_parallel_shard`)
        when they are all the Trainer's processes (the all-gather spans the whole world);
        ``(0, 1)`` otherwise (one process, or a strategy whose ranks are not replicas, such
        as graph or pipeline parallelism: every rank computes everything).
        """
        trainer = self._trainer
        shard = data_parallel_shard(trainer)
        if shard.world_size > 1 and shard.world_size == int(trainer.world_size):
            return shard.rank, shard.world_size
        return 0, 1

    def _all_gather_rows(self, block: Tensor) -> Tensor:
        # On the module's device (NCCL gathers CUDA tensors), back where the rows live:
        # ``[world_size, *block.shape]``.
        send = block.to(self.device)
        world = int(self.trainer.world_size)
        out = send.new_empty((world * send.size(0), *send.shape[1:]))
        all_gather_rows(out, send)
        return out.view(world, *send.shape).to(block.device)

    def _evaluate(self, batch: Data | FullGraphBatch, stage: str) -> None:
        metric = self.val_metric if stage == "val" else self.test_metric
        if isinstance(batch, FullGraphBatch):
            logits_all = self._full_graph_logits(batch, refresh=stage == "val")
            nodes = batch.nodes(stage)
            if nodes.numel() == 0:  # the same on every rank: none of them logs
                return
            rank, world = self._evaluation_shard()
            if world > 1:  # this rank's share; the metric states are summed over the ranks
                start, stop = shard_range(batch.num_nodes, world, rank)
                nodes = nodes[(nodes >= start) & (nodes < stop)]
            logits = logits_all[nodes].to(self.device)
            target = batch.y[nodes].to(self.device)
        else:
            logits = self(batch)
            target = self._seed_targets(batch)
        n = int(target.size(0))
        if n == 0 and not isinstance(batch, FullGraphBatch):
            return
        # A rank whose share holds no evaluation node still logs (with weight 0, its metric
        # states zero), as every rank takes part in the epoch-end reductions.
        if n:
            if stage == "val":
                self.val_loss_metric.update(self._loss(logits, target), weight=n)
            metric.update(self._scores(logits), target)
        if stage == "val":
            self.log("val_loss", self.val_loss_metric, batch_size=n)
        self.log(f"{stage}_{self.metric_name}", metric, prog_bar=True, batch_size=n)

    def validation_step(self, batch: Data | FullGraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Data | FullGraphBatch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: Data | FullGraphBatch, batch_idx: int) -> dict[str, Tensor]:
        if isinstance(batch, FullGraphBatch):
            return {"node": batch.node_ids, "logits": self._full_graph_logits(batch)}
        size = getattr(batch, "batch_size", batch.num_nodes)
        return {"node": batch.n_id[:size], "logits": self(batch)}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )


def _gather_rows(
    out: Tensor,
    shares: list[tuple[int, int]],
    rank: int,
    block: int,
    all_gather: Callable[[Tensor], Tensor],
) -> None:
    """Fill the rows of ``out`` the other ranks computed (rank ``r`` wrote ``shares[r]``).

    In rounds of at most ``block`` rows per rank, so no round holds more than
    ``world_size * block`` rows: ``all_gather(t)`` returns ``[world_size, *t.shape]``, every
    rank's ``t``; shorter shares are padded with zeros.
    """
    longest = max(stop - start for start, stop in shares)
    mine = shares[rank]
    for offset in range(0, longest, block):
        size = min(block, longest - offset)
        lo, hi = min(mine[0] + offset, mine[1]), min(mine[0] + offset + size, mine[1])
        send = out.new_zeros(size, out.size(1))
        send[: hi - lo] = out[lo:hi]
        gathered = all_gather(send)
        for r, (start, stop) in enumerate(shares):
            if r != rank:
                lo, hi = min(start + offset, stop), min(start + offset + size, stop)
                out[lo:hi] = gathered[r, : hi - lo]
