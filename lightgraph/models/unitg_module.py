"""UniTG: a language model and a deep GNN trained together in one run.

UniTG is ch. 5 of Zhang's thesis (*Algorithm and System Co-design for Efficient and
Scalable Graph Learning*, NTU 2026); section numbers below are the thesis's.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import degree as node_degree

from lightgraph.data.lightning.text_graph import TextGraphDataModule
from lightgraph.data.loader.group_batch_sampler import GroupBatchSampler
from lightgraph.distributed.bubble_interleaver import BubbleInterleaver
from lightgraph.distributed.context import ParallelContextHolder
from lightgraph.distributed.flow_pipeline import FlowPipeline
from lightgraph.distributed.timeline import Timeline
from lightgraph.models.unitg_evaluation import UniTGEvaluation
from lightgraph.models.unitg_lm_jobs import LM_SCHEDULES, LMJob, LMJobPlan
from lightgraph.models.unitg_lm_steps import UniTGLanguageModelSteps
from lightgraph.models.unitg_store import UniTGEmbeddingStore
from lightgraph.nn.early_exit import (
    EarlyExitEncoder,
    degree_groups,
)
from lightgraph.nn.models.pipeline_stages import pipeline_depth
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_non_negative,
    check_optional_int,
    check_positive,
    check_rate,
    check_type,
)

SCHEDULES: tuple[str, ...] = ("collaborative", "sequential")
#: Checkpoint key of what a UniTGModule keeps per rank (see ``on_save_checkpoint``).
RANK_STATE_KEY = "unitg_rank_states"
_CACHE_BUFFERS: tuple[str, ...] = ("lm_cache", "lm_cache_exit", "lm_stamp")
ENCODE_AT: tuple[str, ...] = ("last", "exit")


class UniTGModule(
    ParallelContextHolder,
    UniTGLanguageModelSteps,
    UniTGEmbeddingStore,
    UniTGEvaluation,
    pl.LightningModule,
):
    """UniTG's dual-modality collaborative learning (thesis §5.3.3) as one LightningModule.

    Two models, two optimisers, manual optimisation. Each training step is one GNN epoch
    (full-graph) plus that epoch's share of language-model (LM) work:

    * **LM** (:class:`~lightgraph.nn.EarlyExitEncoder`): fine-tuned on the training nodes'
      texts for ``lm_epochs`` passes. With ``lazy_tuner=True`` (the Lazy Tuner) batches
      hold nodes of one degree quartile and exit at that group's layer, loss Eq. 5.1;
      otherwise every batch runs the full depth with cross-entropy. Each LM epoch of
      ``B`` batches is ``ceil(B / lm_batches_per_step)`` optimiser steps (the mean loss of
      ``lm_batches_per_step`` consecutive batches each), whatever ``J = max_epochs``; the
      steps run in the first ``ceil(lm_share · J)`` GNN epochs,
      ``ceil(steps / ceil(lm_share · J))`` per epoch, so the LM sees the same updates
      however its batches are placed (in-line, in pipeline bubbles, or spread over
      stages). After its last step every node is encoded by the finished LM.
    * **Embedding store**: per node, the LM's latest pooled embedding (``[N, H]``) and an
      ``encoded`` flag. The GNN input is

      .. math::
          \\mathbf{x}^{\\text{GNN}}_v = \\begin{cases}
          (1 - \\alpha_v)\\,\\mathbf{x}_v + \\alpha_v\\,(\\mathbf{W}_{\\text{lm}}\\,\\mathbf{e}_v + \\mathbf{b}_{\\text{lm}}) & v \\text{ encoded} \\\\
          \\mathbf{x}_v & \\text{otherwise}
          \\end{cases}

      (original features ``x_v`` for nodes the LM has not encoded yet, LM embeddings
      ``e_v`` projected to the GNN's input width by a linear map trained with the GNN,
      one map per exit layer since different layers embed into different spaces;
      :math:`\\alpha_v` ramps from 0 at the sync that first encodes ``v`` to 1 over
      ``sync_ramp_epochs``, and with ``sync_check`` a sync that lowers the validation
      accuracy is reverted and retried at the next one).
      The LM writes embeddings into a private cache as it works: ``encode_batch_size``
      nodes per job, walked round-robin over all nodes, without gradient, at the layer
      ``encode_at`` names (and a training batch's own nodes when its exit is that layer); :meth:`sync_embeddings`
      (called by :class:`~lightgraph.callbacks.ModalitySync` every ``Δt`` epochs) copies
      the cache into the store.
    * **GNN**: ``model(x, edge_index) -> logits``, mean cross-entropy over training
      nodes, one optimiser step per epoch. Under
      :class:`~lightgraph.strategies.FlowParallelStrategy` the GNN runs as a GPipe
      pipeline over affinity microbatches (the strategy's runtime arrives in
      :attr:`parallel_context`), the LM runs data-parallel: stage ``r`` takes jobs
      ``r, r + P, ...`` of the epoch, the LM gradients are summed over the stages and
      every stage takes the same LM step; with ``bubble_interleave=True`` the jobs run
      inside the stage's pipeline bubbles (see
      :class:`~lightgraph.distributed.BubbleInterleaver`).

    ``schedule="sequential"`` is the GLEM/TAPE-style baseline with the same LM, batches
    and updates: the first training step fine-tunes the LM completely, then encodes every
    node with it and fills the store; the GNN then trains on LM embeddings for all
    epochs. ``lm=None`` trains the GNN alone on the node features (any deep GNN, single
    process or flow-parallel).

    Logged every epoch (identical on every rank): ``train_loss`` (GNN), ``lm_loss``,
    ``val_loss``, ``val_acc``, ``test_acc``, ``lm_time`` / ``gnn_time`` (seconds of the
    epoch, the slowest rank), ``lm_time_total`` / ``gnn_time_total`` (since the start of
    the run), ``lm_bubble_time_total``, ``sync_time_total`` (the slowest rank's
    :meth:`sync_embeddings` calls, up to the previous epoch's end: the syncs run after
    the epoch's logging; :attr:`totals` holds the running sums, with ``refresh_time``, the
    store refresh by the finished LM, which ``lm_time`` includes), and with an LM
    ``lm_val_acc`` / ``lm_test_acc``
    (:meth:`lm_accuracy`) and ``encoded_fraction``: the fraction
    of nodes whose GNN input is an LM embedding, at the end of the epoch (after a
    :class:`~lightgraph.callbacks.ModalitySync` sync or the sequential schedule's
    encoding), with or without ``ModalitySync``.

    Args:
        model: the GNN, ``model(x, edge_index) -> [N, num_classes]`` (e.g.
            :class:`~lightgraph.nn.RevGCN`), with ``in_channels`` = node feature size.
        num_classes: number of classes.
        lm: the early-exit LM (``None``: GNN only).
        schedule: ``"collaborative"`` (UniTG) or ``"sequential"`` (LM, then GNN).
        lm_epochs: passes of LM fine-tuning over the training nodes.
        lm_batch_size: nodes per LM training batch.
        encode_batch_size: nodes encoded without gradient after every LM training batch
            (collaborative schedule; 0: only training nodes get embeddings).
        lazy_tuner: degree-quartile early exits (Eq. 5.1) instead of full depth.
        lr: GNN (and LM projection) Adam learning rate.
        lm_lr: LM Adam learning rate (the peak of ``lm_schedule``).
        lm_schedule: ``"constant"`` (``lm_lr`` throughout) or ``"linear"``: warm-up over
            the first ``lm_warmup`` of the LM's optimiser steps, then linear decay
            (:func:`lm_learning_rate`). The linear schedule lets one ``lm_lr`` train LMs of
            different widths and both the full-depth and the Lazy-Tuner LM (docs/unitg.md,
            "The LM's learning rate").
        lm_warmup: fraction of the LM's optimiser steps in the linear warm-up, in [0, 1)
            (``lm_schedule="linear"`` only).
        weight_decay: Adam weight decay of both optimisers.
        encode_at: where the store's embeddings are taken: ``"last"`` (the LM's last
            layer for every node; the Lazy Tuner then only shortens fine-tuning) or
            ``"exit"`` (each node at its degree group's exit layer, as fine-tuning does).
        lm_share: fraction of the GNN epochs over which the LM's batches are spread
            (collaborative schedule): the LM finishes after ``lm_share · J`` epochs and the
            GNN trains its remaining epochs on the final embeddings (after the next sync).
        lm_batches_per_step: LM training batches per LM optimiser step.
        sync_check: keep a sync only if the GNN's validation accuracy does not drop
            (collaborative schedule), else revert it and retry at the next sync.
        sync_ramp_epochs: GNN epochs over which a newly encoded node's LM embedding is
            blended in (0: replaced at once).
        bubble_interleave: run the LM jobs inside the pipeline bubbles (flow-parallel only).
        in_channels: the GNN's input width (default: ``model.in_channels``).
        total_epochs: ``J``, the GNN epochs the LM work is spread over (default: the
            Trainer's ``max_epochs``; set it when a run is stopped and resumed with another
            ``max_epochs``).
        seed: seed of the LM batch shuffle.
        multilabel: must be ``False`` (kept for the CLI's data links).
    """

    # Per-node buffers of the embedding store and the LM cache (sized in ``setup``).
    store: Tensor
    encoded: Tensor
    store_exit: Tensor
    lm_cache: Tensor
    lm_cache_exit: Tensor
    lm_stamp: Tensor
    lm_proj: nn.ModuleList | None

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        lm: EarlyExitEncoder | None = None,
        schedule: str = "collaborative",
        lm_epochs: int = 2,
        lm_batch_size: int = 32,
        encode_batch_size: int = 64,
        lazy_tuner: bool = True,
        lr: float = 5e-3,
        lm_lr: float = 1e-3,
        lm_schedule: str = "constant",
        lm_warmup: float = 0.1,
        weight_decay: float = 0.0,
        lm_share: float = 0.5,
        encode_at: str = "last",
        lm_batches_per_step: int = 2,
        sync_check: bool = True,
        sync_ramp_epochs: int = 10,
        bubble_interleave: bool = False,
        in_channels: int | None = None,
        total_epochs: int | None = None,
        seed: int = 0,
        multilabel: bool = False,
    ) -> None:
        super().__init__()
        owner = "UniTGModule"
        check_type(owner, "model", model, nn.Module, "a GNN such as lightgraph.nn.RevGCN")
        self.num_classes = check_int(owner, "num_classes", num_classes, low=2)
        if lm is not None:
            check_type(owner, "lm", lm, EarlyExitEncoder, "lightgraph.nn.EarlyExitEncoder(...)")
            if lm.num_classes != num_classes:
                raise ValueError(
                    f"{owner}: the LM's exit heads have {lm.num_classes} outputs but "
                    f"`num_classes` is {num_classes}; build EarlyExitEncoder with "
                    f"num_classes={num_classes}."
                )
        self.schedule = check_choice(owner, "schedule", schedule, SCHEDULES)
        self.lm_epochs = check_int(owner, "lm_epochs", lm_epochs)
        self.lm_batch_size = check_int(owner, "lm_batch_size", lm_batch_size)
        self.encode_batch_size = check_int(owner, "encode_batch_size", encode_batch_size, low=0)
        self.lazy_tuner = check_bool(owner, "lazy_tuner", lazy_tuner)
        check_positive(owner, "lr", lr)
        check_positive(owner, "lm_lr", lm_lr)
        self.lm_schedule = check_choice(owner, "lm_schedule", lm_schedule, LM_SCHEDULES)
        self.lm_warmup = check_rate(owner, "lm_warmup", lm_warmup)
        check_non_negative(owner, "weight_decay", weight_decay)
        self.lm_share = check_fraction(owner, "lm_share", lm_share)
        self.encode_at = check_choice(owner, "encode_at", encode_at, ENCODE_AT)
        self.lm_batches_per_step = check_int(owner, "lm_batches_per_step", lm_batches_per_step)
        self.sync_check = check_bool(owner, "sync_check", sync_check)
        self.sync_ramp_epochs = check_int(owner, "sync_ramp_epochs", sync_ramp_epochs, low=0)
        self.bubble_interleave = check_bool(owner, "bubble_interleave", bubble_interleave)
        self.seed = check_int(owner, "seed", seed, low=0)
        self.total_epochs = check_optional_int(owner, "total_epochs", total_epochs)
        if check_bool(owner, "multilabel", multilabel):
            raise ValueError(f"{owner}: multi-label graphs are not supported; got multilabel=True.")
        if in_channels is None:
            value = getattr(model, "in_channels", None)
            if not isinstance(value, int):
                raise ValueError(
                    f"{owner}: could not read `in_channels` from {type(model).__name__}; pass "
                    "`in_channels` (the GNN's input width)."
                )
            in_channels = value
        self.in_channels = check_int(owner, "in_channels", in_channels)
        self.save_hyperparameters(ignore=["model", "lm"])
        self.automatic_optimization = False
        self.model = model
        self.lm = lm
        # One projection per exit: embeddings taken after different numbers of layers live
        # in different spaces, so each exit gets its own map to the GNN's input width.
        self.lm_proj = (
            nn.ModuleList(
                nn.Linear(lm._hidden_size(), self.in_channels) for _ in range(lm.num_groups)
            )
            if lm is not None
            else None
        )
        if lm is not None:
            self._allocate_store(0)
        self._graph: Data | None = None
        self._input_ids: Tensor | None = None
        self._attention_mask: Tensor | None = None
        self._train_nodes: Tensor | None = None
        self._encode_groups: Tensor | None = None
        self._exit_groups: Tensor | None = None
        self._lm_plan: LMJobPlan | None = None
        #: LM optimiser steps taken so far (checkpointed).
        self.lm_steps_done = 0
        # The remaining LM steps are to run in the next training epoch (early stopping).
        self._finish_requested = False
        # Incremented at every LM update: the LM accuracy is recomputed only when it changed.
        self._lm_version = 0
        self._lm_acc_cache: tuple[int, list[float]] | None = None
        #: ``(epoch, val_acc_before, val_acc_after, kept)`` of every checked sync.
        self.sync_checks: list[tuple[int, float, float, bool]] = []
        self._epoch_gnn_loss: float | None = None
        self._lm_loss_sum = 0.0
        self._lm_loss_count = 0
        self._lm_seconds = 0.0
        self.totals = {
            "lm_time": 0.0,
            "gnn_time": 0.0,
            "lm_bubble_time": 0.0,
            "sync_time": 0.0,
            "refresh_time": 0.0,
        }
        self._lm_bubble_seconds = 0.0
        #: Runs this rank's LM jobs in the pipeline bubbles (flow-parallel, bubble_interleave).
        self.interleaver: BubbleInterleaver | None = None
        self.encoded_fraction = 0.0

    # ------------------------------------------------------------------------ set-up
    def setup(self, stage: str) -> None:
        trainer = self.trainer
        datamodule = trainer.datamodule
        owner = "UniTGModule"
        self._check_pipeline_depth(owner)
        if not isinstance(datamodule, TextGraphDataModule):
            raise TypeError(
                f"{owner}: expected the Trainer's data module to be a "
                f"lightgraph.data.TextGraphDataModule (serve='graph') but got "
                f"{type(datamodule).__name__}."
            )
        graph = datamodule.graph()
        self._graph = graph
        n = int(graph.num_nodes)
        if int(graph.x.size(1)) != self.in_channels:
            raise ValueError(
                f"{owner}: the GNN's input width is {self.in_channels} but the graph's nodes "
                f"have {graph.x.size(1)} features; set the GNN's `in_channels` to "
                f"{graph.x.size(1)}."
            )
        if self.lm is not None:
            tokens = datamodule.tokens()
            self._input_ids = tokens["input_ids"]
            self._attention_mask = tokens["attention_mask"]
            vocab = self._lm_vocab_size()
            top = int(self._input_ids.max())
            if vocab is not None and top >= vocab:
                raise ValueError(
                    f"{owner}: the tokenizer produces ids up to {top} but the LM's embedding "
                    f"table has {vocab} rows; set the LM's `vocab_size` to at least "
                    f"{datamodule.vocab_size}."
                )
            self._check_sequence_length(owner, datamodule)
            if self.store.size(0) != n:  # not restored from a checkpoint of this graph
                self._allocate_store(n)
            deg = node_degree(graph.edge_index[1], n)
            self._train_nodes = graph.train_mask.nonzero().view(-1)
            groups_g = self.lm.num_groups
            # ONE grouping for fine-tuning, encoding and the LM's accuracy: the training
            # nodes' degree quantiles (the Lazy Tuner's, the groups the exit heads are
            # trained on), applied to every node by its degree.
            if self.lazy_tuner:
                self._exit_groups = degree_groups(
                    deg, self._train_nodes, groups_g, nodes=torch.arange(n)
                )
            else:
                self._exit_groups = torch.full((n,), groups_g - 1, dtype=torch.long)
            train_groups = self._exit_groups[self._train_nodes]
            if self.encode_at == "exit":
                self._encode_groups = self._exit_groups
            else:
                self._encode_groups = torch.full((n,), groups_g - 1, dtype=torch.long)
            epochs = self.total_epochs or trainer.max_epochs
            if epochs is None or epochs < 1:
                raise ValueError(
                    f"{owner}: the LM's batches are spread over the GNN epochs, so it needs "
                    f"`total_epochs` or the Trainer's `max_epochs` (got max_epochs={epochs!r})."
                )
            self._lm_plan = LMJobPlan(
                GroupBatchSampler(train_groups, self.lm_batch_size, seed=self.seed),
                self._train_nodes,
                lm_epochs=self.lm_epochs,
                batches_per_step=self.lm_batches_per_step,
                num_nodes=n,
                encode_batch_size=self.encode_batch_size if self.schedule == "collaborative" else 0,
                span=max(1, math.ceil(self.lm_share * epochs)),
            )
        pipe = self.parallel_context.flow_pipeline
        if pipe is not None:
            pipe.build(self.model, graph.edge_index, n)
            if self.bubble_interleave and self.lm is not None and self.interleaver is None:
                self.interleaver = BubbleInterleaver(timeline=Timeline())
                self.interleaver.attach(self.lm)
        elif self.bubble_interleave:
            raise ValueError(
                f"{owner}: `bubble_interleave=True` needs pipeline bubbles: train with "
                "`strategy=FlowParallelStrategy(...)` (or strategy='flow_parallel')."
            )

    def _check_sequence_length(self, owner: str, datamodule: TextGraphDataModule) -> None:
        """Token sequences longer than the LM's position table fail deep inside the LM:
        refuse them here, naming both settings."""
        assert self.lm is not None and self._input_ids is not None
        config = getattr(self.lm.backbone, "config", None)
        limit = getattr(config, "max_position_embeddings", None)
        length = int(self._input_ids.size(1))
        if not isinstance(limit, int) or length <= limit:
            return
        words = datamodule.words_per_node
        source = (
            f"`words_per_node={words}` (plus [CLS] and [SEP])"
            if isinstance(words, int)
            else "the texts"
        )
        raise ValueError(
            f"{owner}: {source} give token sequences of length {length} but the LM's "
            f"`max_position` (max_position_embeddings) is {limit}; expected a length of at most "
            f"{limit}. Lower `words_per_node` to at most {limit - 2} or raise the LM's "
            f"`max_position` to at least {length}."
        )

    def _check_pipeline_depth(self, owner: str) -> None:
        """Flow parallelism runs one GNN stage per process and a stage needs a layer: the
        Trainer's ``devices`` (x ``num_nodes``) may not exceed the GNN's depth. Checked here,
        in the terms the user set, before the pipeline splits the model."""
        pipe = self.parallel_context.flow_pipeline
        if pipe is None:
            return
        depth = pipeline_depth(self.model, owner)
        if pipe.num_stages <= depth:
            return
        trainer = self.trainer
        nodes = trainer.num_nodes
        on_nodes = (
            f" on num_nodes={nodes} ({pipe.num_stages} processes, one stage each)"
            if nodes > 1
            else " (one pipeline stage per device)"
        )
        raise ValueError(
            f"{owner}: flow parallelism gives every process one stage of the GNN, and every "
            f"stage needs at least one layer: expected the Trainer's `devices` to be at most "
            f"{depth // nodes} (the {type(self.model).__name__} has {depth} layers) but got "
            f"devices={trainer.num_devices}{on_nodes}. Lower `devices` or deepen the GNN "
            "(`num_layers`)."
        )

    # ------------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add every rank's LM cache and the run's time totals.

        The LM cache (``lm_cache``, ``lm_cache_exit``, ``lm_stamp``) is per rank: stage
        ``r`` caches the embeddings of its own jobs until :meth:`sync_embeddings` merges
        the ranks' caches. The state dict the strategy writes holds rank 0's only, so the
        checkpoint also gets ``checkpoint["unitg_rank_states"] = {"world_size": W,
        "lm_caches": [rank 0's, ..., rank W-1's], "totals": {...}}`` (collective: every
        rank saves checkpoints together, as Lightning does). ``totals`` are the wall-clock
        sums behind ``lm_time_total`` / ``gnn_time_total`` / ``lm_bubble_time_total``, which
        a resumed run continues.
        """
        caches: list[dict[str, Tensor]] = []
        if self.lm is not None:
            local = {name: getattr(self, name).detach().cpu().clone() for name in _CACHE_BUFFERS}
            _, world = self._rank_world()
            if world > 1:
                gathered: list[Any] = [None] * world
                dist.all_gather_object(gathered, local)
                caches = list(gathered)
            else:
                caches = [local]
        checkpoint[RANK_STATE_KEY] = {
            "world_size": max(len(caches), 1),
            "lm_caches": caches,
            "totals": {k: float(v) for k, v in self.totals.items()},
            "lm_steps_done": int(self.lm_steps_done),
            "finish_requested": bool(self._finish_requested),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Give this rank its own LM cache back (before the state dict is loaded).

        Resumed with the number of ranks that saved it, every rank gets its own cache.
        Otherwise (another world size, or a checkpoint saved before the caches were kept
        per rank, whose state dict holds rank 0's cache on every rank) rank 0 gets the
        merge of the saved caches (each node's latest stamp wins) and the other ranks an
        empty cache, so the next :meth:`sync_embeddings` counts every cached embedding
        once.
        """
        state_dict = checkpoint.get("state_dict")
        saved = checkpoint.get(RANK_STATE_KEY)
        if isinstance(saved, dict):
            self.totals.update({k: float(v) for k, v in saved.get("totals", {}).items()})
            self.lm_steps_done = int(saved.get("lm_steps_done", 0))
            self._finish_requested = bool(saved.get("finish_requested", False))
        if self.lm is None or not isinstance(state_dict, dict) or "lm_stamp" not in state_dict:
            return
        rank, world = self._rank_world()
        caches = saved.get("lm_caches") if isinstance(saved, dict) else None
        if caches and len(caches) == world:
            mine = caches[rank]
        elif rank == 0:
            mine = _merge_caches(caches) if caches else None  # None: keep the state dict's
        else:
            mine = {
                "lm_cache": torch.zeros_like(state_dict["lm_cache"]),
                "lm_cache_exit": torch.zeros_like(state_dict["lm_cache_exit"]),
                "lm_stamp": torch.full_like(state_dict["lm_stamp"], -1),
            }
        if mine is not None:
            for name in _CACHE_BUFFERS:
                state_dict[name] = mine[name]
        if "encoded" in state_dict:
            self.encoded_fraction = float(state_dict["encoded"].float().mean())

    def _lm_vocab_size(self) -> int | None:
        assert self.lm is not None
        emb = (
            self.lm.backbone.get_input_embeddings()
            if hasattr(self.lm.backbone, "get_input_embeddings")
            else None
        )
        return int(emb.num_embeddings) if isinstance(emb, nn.Embedding) else None

    def configure_optimizers(self) -> Any:
        gnn_params = list(self.model.parameters())
        if self.lm_proj is not None:
            gnn_params += list(self.lm_proj.parameters())
        wd = self.hparams.weight_decay
        gnn = torch.optim.Adam(gnn_params, lr=self.hparams.lr, weight_decay=wd)
        if self.lm is None:
            return gnn
        lm = torch.optim.Adam(self.lm.parameters(), lr=self.hparams.lm_lr, weight_decay=wd)
        return [gnn, lm]

    # ------------------------------------------------------------------------ store
    @property
    def epoch_gnn_loss(self) -> float | None:
        """The GNN training loss of the last finished epoch (identical on every rank)."""
        return self._epoch_gnn_loss

    @property
    def has_lm(self) -> bool:
        """Whether there is an LM whose embeddings :meth:`sync_embeddings` can copy."""
        return self.lm is not None

    # ------------------------------------------------------------------------ steps
    def on_train_epoch_start(self) -> None:
        self._lm_loss_sum = 0.0
        self._lm_loss_count = 0
        self._lm_seconds = 0.0
        self._lm_bubble_seconds = 0.0

    def on_train_epoch_end(self) -> None:
        # After the callbacks' epoch end (Lightning calls the module's hook last), so after
        # ModalitySync's sync: the store the next epoch trains on.
        if self.lm is not None:
            _, world = self._rank_world()
            self.log(
                "encoded_fraction",
                self.encoded_fraction,
                on_step=False,
                on_epoch=True,
                batch_size=1,
                reduce_fx="max",
                sync_dist=world > 1,  # identical on every rank
            )

    def teardown(self, stage: str) -> None:
        if self.interleaver is not None:
            self.interleaver.stop()
            self.interleaver.detach()
            self.interleaver = None

    def _follow_device(self) -> None:
        """Move the graph, its tokens and the encoding groups to the module's device.

        ``setup`` reads them on the host, before the Trainer moves the module; the GNN, the
        LM and the store then need them where the module is (a GPU)."""
        device = self.device
        # Each on its own: the Trainer's batch transfer may have moved the graph already
        # (PyG moves a `Data` in place), never the tokens.
        if self._graph is not None and self._graph.x.device != device:
            self._graph = self._graph.to(device)
        if self._input_ids is not None and self._input_ids.device != device:
            self._input_ids = self._input_ids.to(device)
        if self._attention_mask is not None and self._attention_mask.device != device:
            self._attention_mask = self._attention_mask.to(device)
        if self._encode_groups is not None and self._encode_groups.device != device:
            self._encode_groups = self._encode_groups.to(device)

    def training_step(self, batch: Data, batch_idx: int) -> None:
        self._follow_device()
        optimizers = self.optimizers()
        gnn_opt = optimizers[0] if isinstance(optimizers, list) else optimizers
        epoch = self.current_epoch
        steps: range = range(0)
        if self.lm is not None:
            if self.schedule == "sequential":
                steps = range(self.lm_steps_done, self.num_lm_steps)
            else:
                assert self._lm_plan is not None
                steps = self._lm_plan.epoch_steps(
                    epoch, self.lm_steps_done, finish=self._finish_requested
                )
        unfinished = not self.lm_finished
        # The epoch's first LM step runs in the pipeline bubbles (bubble_interleave); the
        # others need the previous update, hence the gradient sum over the stages, first.
        in_bubbles = self.interleaver is not None and len(steps) > 0 and not self._finish_requested
        if not in_bubbles:
            for step in steps:
                self._lm_step(step)
            if self.schedule == "sequential" and unfinished:
                self._refresh_store()  # the GNN trains on the final LM's embeddings only
        start = time.perf_counter()
        lm_before = self._lm_seconds
        loss = self._gnn_step(gnn_opt, steps[0] if in_bubbles else None)
        # LM jobs left over after an interleaved pipeline step are LM time, not GNN time.
        gnn_seconds = time.perf_counter() - start - (self._lm_seconds - lm_before)
        if in_bubbles:
            for step in steps[1:]:
                self._lm_step(step)
        if self.schedule == "collaborative" and unfinished and self.lm_finished:
            self._refresh_store()
        self._finish_requested = False
        self._epoch_gnn_loss = loss
        self._log_epoch(loss, gnn_seconds)

    def _refresh_store(self) -> None:
        """After the LM's last step: encode every node with the finished LM into the store
        (the round-robin cache holds embeddings of earlier LM states)."""
        start = time.perf_counter()
        self.encode_all()
        seconds = time.perf_counter() - start
        self._lm_seconds += seconds
        self.totals["refresh_time"] += seconds

    def _gnn_step(self, gnn_opt: Any, lm_step: int | None) -> float:
        graph = self._graph
        assert graph is not None
        self.model.train()
        pipe = self.parallel_context.flow_pipeline
        gnn_opt.zero_grad(set_to_none=True)
        if pipe is None:
            logits = self.model(self.gnn_input(), graph.edge_index)
            mask = graph.train_mask
            loss = F.cross_entropy(logits[mask], graph.y[mask])
            self.manual_backward(loss)
            value = float(loss.detach())
        else:
            x = self.gnn_input() if pipe.is_first else None
            out = self._pipeline_step(pipe, x, graph, lm_step)
            value = float(pipe.broadcast_loss(out))
        gnn_opt.step()
        return value

    def _pipeline_step(
        self, pipe: FlowPipeline, x: Tensor | None, graph: Data, lm_step: int | None
    ) -> Tensor | None:
        def step() -> Tensor | None:
            return pipe.step(x, graph.y, graph.train_mask)

        if lm_step is None or self.interleaver is None:
            return step()
        pipe.observer = self.interleaver
        try:
            return self._lm_step(lm_step, during=step)
        finally:
            pipe.observer = None

    def _log_epoch(self, loss: float, gnn_seconds: float) -> None:
        stats = torch.tensor(
            [
                self._lm_loss_sum,
                float(self._lm_loss_count),
                self._lm_seconds + self._lm_bubble_seconds,
                gnn_seconds,
                self._lm_bubble_seconds,
                self.totals["sync_time"],
            ],
            dtype=torch.float64,
            device=self.device,  # all-reduced below: on the compute device
        )
        _, world = self._rank_world()
        if world > 1:
            sums = stats[:2].clone()
            dist.all_reduce(sums)
            times = stats[2:].clone()
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            stats = torch.cat([sums, times])
        lm_loss_sum, lm_count, lm_seconds, gnn_s, bubble_s, sync_total = stats.tolist()
        self.totals["lm_time"] += lm_seconds
        self.totals["gnn_time"] += gnn_s
        self.totals["lm_bubble_time"] += bubble_s
        values = {
            "train_loss": loss,
            "lm_time": lm_seconds,
            "gnn_time": gnn_s,
            "lm_time_total": self.totals["lm_time"],
            "gnn_time_total": self.totals["gnn_time"],
            "lm_bubble_time_total": self.totals["lm_bubble_time"],
            "sync_time_total": sync_total,  # the slowest rank's
        }
        if lm_count:
            values["lm_loss"] = lm_loss_sum / lm_count
        # The values are already global (identical on every rank); the "max" reduction
        # only tells Lightning so.
        for name, value in values.items():
            self.log(
                name,
                value,
                on_step=False,
                on_epoch=True,
                prog_bar=name == "train_loss",
                batch_size=1,
                reduce_fx="max",
                sync_dist=world > 1,
            )


def _merge_caches(caches: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """One cache from several ranks' caches: for each node the entry with the latest stamp."""
    out = {name: caches[0][name].clone() for name in _CACHE_BUFFERS}
    for cache in caches[1:]:
        newer = cache["lm_stamp"] > out["lm_stamp"]
        out["lm_cache"][newer] = cache["lm_cache"][newer]
        out["lm_cache_exit"][newer] = cache["lm_cache_exit"][newer]
        out["lm_stamp"][newer] = cache["lm_stamp"][newer]
    return out


__all__ = ["LMJob", "UniTGModule"]
