"""A strategy for UniTG's flow parallelism: GNN stages pipelined over affinity microbatches.

UniTG is ch. 5 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

import torch.distributed as dist
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.optimizer import _optimizer_to_device
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.overrides.distributed import _sync_module_states
from torch.optim import Optimizer
from typing_extensions import override

from lightgraph.data.partition.affinity import AFFINITY_REORDERS
from lightgraph.distributed.context import ParallelContext
from lightgraph.distributed.flow_pipeline import FlowPipeline
from lightgraph.strategies.exchange_group import ExchangeGroupStrategy
from lightgraph.utilities.checks import check_choice, check_int, check_optional_int

#: Key of the per-rank optimiser states in a checkpoint's ``optimizer_states`` entries.
RANK_STATES_KEY = "flow_parallel_rank_states"


class FlowParallelStrategy(ExchangeGroupStrategy):
    """UniTG's affinity-aware flow parallelism (thesis §5.3.2) through the Trainer.

    The ``P`` ranks form a GPipe pipeline: rank ``i`` trains stage ``i`` of the GNN
    (``L / P`` consecutive layers), and the graph is cut into ``M`` affinity microbatches
    that flow through the stages. The strategy builds a
    :class:`~lightgraph.distributed.FlowPipeline` on its dedicated process group and hands
    it to the module in a :class:`~lightgraph.distributed.ParallelContext`
    (``parallel_context.flow_pipeline``); the module calls
    ``flow_pipeline.build(model, edge_index, num_nodes)`` (which takes this strategy's
    ``num_microbatches`` and ``reorder`` unless it passes its own), then
    ``flow_pipeline.step(x, y, train_mask)`` in a manual-optimisation ``training_step``.

    Unlike the other lightgraph strategies it does **not** wrap the module in
    ``DistributedDataParallel``: every rank trains different parameters (those of its
    stage), so there is nothing to all-reduce. ``training_step`` and ``validation_step``
    run on the LightningModule itself. At the start of fitting every rank takes rank 0's
    weights, as DDP would. Every rank sees every batch (the distributed sampler is given
    one replica): a batch is the whole graph, which every stage needs.

    Checkpoints hold the whole model: :meth:`lightning_module_state_dict` gathers every
    stage's parameters from the rank that trains them, and loading a checkpoint gives
    every rank the full state dict (each rank's stage shares the model's parameters, so
    every stage is restored). The optimiser states of all ranks are saved, one per rank
    (under ``"flow_parallel_rank_states"``), and every rank gets its own back when
    training resumes with the same number of ranks.

    Registered names: ``"flow_parallel"`` (``start_method="popen"``: torchrun, SLURM),
    ``"flow_parallel_spawn"``, ``"flow_parallel_fork"``.

    Args:
        num_microbatches: ``M`` (``None``: UniTG's rule,
            :func:`~lightgraph.data.partition.default_num_microbatches`, at most ``P``).
        reorder: node reordering before the microbatches are cut: ``"metis"`` (affinity
            aware), ``"random"`` or ``"none"``.
        seed: seed of the reordering.
        process_group_backend: ``"gloo"``, ``"nccl"``, ...; default from the device.
        timeout: timeout of collectives.
        start_method: how processes are launched (see ``DDPStrategy``).
    """

    strategy_name = "flow_parallel"
    strategy_description = "UniTG flow parallelism: GNN stages pipelined over affinity microbatches"

    def __init__(
        self,
        num_microbatches: int | None = None,
        reorder: str = "metis",
        seed: int = 0,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
    ) -> None:
        owner = type(self).__name__
        self.num_microbatches = check_optional_int(owner, "num_microbatches", num_microbatches)
        self.reorder = check_choice(owner, "reorder", reorder, AFFINITY_REORDERS)
        self.seed = check_int(owner, "seed", seed, low=0)
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
        )

    @property
    def flow_pipeline(self) -> FlowPipeline:
        """The pipeline runtime; available after the process group is set up."""
        return self.parallel_context.require_flow_pipeline(type(self).__name__)

    # ------------------------------------------------------------------ runtime
    @override
    def build_context(self, group: dist.ProcessGroup) -> ParallelContext:
        pipeline = FlowPipeline(
            group, num_microbatches=self.num_microbatches, reorder=self.reorder, seed=self.seed
        )
        return ParallelContext(flow_pipeline=pipeline)

    @override
    def close_context(self, context: ParallelContext) -> None:
        if context.flow_pipeline is not None:
            context.flow_pipeline.close()

    # ------------------------------------------------------------------ no DDP
    @override
    def configure_ddp(self) -> None:
        # Each rank trains its own stage: no DDP wrapper, no gradient all-reduce. Start
        # every rank from rank 0's weights, as the DDP wrapper would -- unless the fit
        # resumes: every rank has just loaded the checkpoint's whole model, and rank 0's
        # state would overwrite what each rank keeps for itself (UniTG's per-rank LM
        # cache, restored by the module's `on_load_checkpoint`).
        assert self.model is not None
        module = self.lightning_module
        trainer = module._trainer if module is not None else None
        if trainer is not None and trainer.ckpt_path is not None:
            return
        _sync_module_states(self.model)

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        # Every stage needs every batch (the graph), in the same order.
        return {"num_replicas": 1, "rank": 0}

    @override
    def on_train_end(self) -> None:
        # Every rank (and the main process of spawn / fork launchers, which reloads rank
        # 0's weights) ends up with the whole trained model.
        super().on_train_end()
        context = self._context
        module = self.lightning_module
        if context is not None and context.flow_pipeline is not None and module is not None:
            context.flow_pipeline.sync_stages(module)

    # ------------------------------------------------------------------ checkpoints
    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        module = self.lightning_module
        assert module is not None
        context = self._context
        if context is None or context.flow_pipeline is None:
            return super().lightning_module_state_dict()
        return context.flow_pipeline.state_dict_of_stages(module)

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        if isinstance(optimizer, LightningOptimizer):
            optimizer = optimizer._optimizer
        state = optimizer.state_dict()
        if not (dist.is_available() and dist.is_initialized()) or self.world_size == 1:
            return state
        states: list[Any] = [None] * self.world_size
        dist.all_gather_object(states, state)
        return {RANK_STATES_KEY: states}

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        for optimizer, opt_state in zip(
            self.optimizers, checkpoint["optimizer_states"], strict=False
        ):
            if isinstance(opt_state, Mapping) and RANK_STATES_KEY in opt_state:
                states = opt_state[RANK_STATES_KEY]
                if len(states) != self.world_size:
                    raise ValueError(
                        f"{type(self).__name__}: the checkpoint holds the optimiser states of "
                        f"{len(states)} pipeline ranks but this run has {self.world_size}; resume "
                        f"with devices={len(states)} (or load the weights only)."
                    )
                opt_state = states[self.global_rank]
            optimizer.load_state_dict(opt_state)
            _optimizer_to_device(optimizer, self.root_device)
