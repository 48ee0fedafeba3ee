"""UniTG's language-model job: the LM's optimiser steps, run between or inside the GNN's.

:class:`UniTGLanguageModelSteps` is the LM part of :class:`~lightgraph.models.UniTGModule`
(a mixin: it reads the module's LM, graph, plan and settings). An LM optimiser step runs
this rank's share of the step's jobs (:class:`~lightgraph.models.unitg_lm_jobs.LMJobPlan`:
training batches, each followed by the encoding batch it pays for), alone or inside the
bubbles of a pipeline step (:class:`~lightgraph.distributed.bubble_interleaver.
BubbleInterleaver`), sums the gradients over the ranks and updates the LM at the rate of
its schedule; every embedding it computes goes into the per-rank LM cache that the
embedding store's sync merges.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from lightgraph.models.unitg_lm_jobs import LMJob, lm_learning_rate
from lightgraph.nn.early_exit import early_exit_loss

__all__ = ["UniTGLanguageModelSteps"]


class UniTGLanguageModelSteps:
    """The LM steps of :class:`~lightgraph.models.UniTGModule`."""

    # Provided by the module.
    lm: Any
    hparams: Any
    trainer: Any
    lm_cache: Tensor
    lm_cache_exit: Tensor
    lm_stamp: Tensor

    @property
    def num_lm_steps(self) -> int:
        """The LM's optimiser steps over the run: ``lm_epochs · ceil(B / lm_batches_per_step)``
        for ``B`` training batches per LM epoch (whatever the number of GNN epochs)."""
        return 0 if self._lm_plan is None else self._lm_plan.total_steps

    def lm_lr_at(self, step: int) -> float:
        """The LM's learning rate at its optimiser step ``step`` (``lm_schedule``)."""
        return lm_learning_rate(
            step, self.num_lm_steps, self.hparams.lm_lr, self.lm_schedule, self.lm_warmup
        )

    @property
    def lm_steps_per_epoch(self) -> int:
        """LM optimiser steps per GNN epoch: ``ceil(num_lm_steps / ceil(lm_share · J))``."""
        return 1 if self._lm_plan is None else self._lm_plan.steps_per_epoch

    @property
    def lm_finished(self) -> bool:
        """Whether the LM took all its steps (the store was then refreshed by the final LM)."""
        return self.lm is None or self.lm_steps_done >= self.num_lm_steps

    def finish_lm(self) -> None:
        """Run all the LM's remaining steps in the next training epoch, then refresh the
        store (what :class:`~lightgraph.callbacks.CoTrainingEarlyStopping` asks before it
        stops a run). A no-op once the LM is finished."""
        if not self.lm_finished:
            self._finish_requested = True

    def lm_jobs(self, step: int) -> list[LMJob]:
        """The LM jobs (training batches) of LM optimiser step ``step``
        (:meth:`~lightgraph.models.unitg_lm_jobs.LMJobPlan.jobs`)."""
        assert self._lm_plan is not None
        return self._lm_plan.jobs(step)

    def run_lm_job(self, job: LMJob, scale: float) -> float:
        """Forward + backward of one LM training batch (gradients accumulate, scaled by
        ``scale``), then its encoding batch; writes both into the LM cache. Returns the
        batch loss."""
        lm = self.lm
        assert lm is not None and self._input_ids is not None and self._attention_mask is not None
        assert self._graph is not None and self._encode_groups is not None
        lm.train()
        nodes = job.nodes
        exit_layer = lm.exit_layers[job.group]
        emb = lm.embed(self._input_ids[nodes], self._attention_mask[nodes], exit_layer)
        logits = lm.heads[job.group](emb)
        target = self._graph.y[nodes]
        if self.lazy_tuner:
            exits: list[Tensor | None] = [None] * lm.num_groups
            exits[job.group] = logits
            loss = early_exit_loss(exits, target)
        else:
            loss = F.cross_entropy(logits, target)
        (loss * scale).backward()
        if self.encode_at == "exit" or job.group == lm.num_groups - 1:
            # The batch's own embeddings, when they are taken where the store wants them.
            self.lm_cache[nodes] = emb.detach()
            self.lm_cache_exit[nodes] = job.group
            self.lm_stamp[nodes] = 2 * job.index
        if job.encode.numel():
            self._encode(job.encode, 2 * job.index + 1)
        return float(loss.detach())

    @torch.no_grad()
    def _encode(self, nodes: Tensor, stamp: int) -> None:
        lm = self.lm
        assert lm is not None and self._encode_groups is not None
        assert self._input_ids is not None and self._attention_mask is not None
        was_training = lm.training
        lm.eval()
        emb = lm.embed_by_group(
            self._input_ids[nodes],
            self._attention_mask[nodes],
            self._encode_groups[nodes],
            batch_size=max(1, nodes.numel()),
        )
        lm.train(was_training)
        self.lm_cache[nodes] = emb
        self.lm_cache_exit[nodes] = self._encode_groups[nodes]
        self.lm_stamp[nodes] = stamp

    def _lm_step(self, step: int, during: Callable[[], Any] | None = None) -> Any:
        """This rank's LM jobs of ``step``, the gradient sum over ranks, one LM update.

        With ``during`` (a pipeline step) and a bubble interleaver, the jobs run on the
        interleaver's worker inside the bubbles of ``during``; jobs left when it returns
        run here, after it. Returns what ``during`` returns.
        """
        jobs = self.lm_jobs(step)
        rank, world = self._rank_world()
        mine = iter(jobs[rank::world])
        scale = 1.0 / max(len(jobs), 1)

        def run_next() -> bool:
            job = next(mine, None)
            if job is None:
                return False
            self._record_lm_loss(self.run_lm_job(job, scale))
            return True

        result = None
        if during is not None:
            interleaver = self.interleaver
            if interleaver is not None and jobs:
                bubble_before = interleaver.lm_bubble_seconds
                interleaver.start(run_next)
                try:
                    result = during()
                finally:
                    interleaver.stop()
                self._lm_bubble_seconds += interleaver.lm_bubble_seconds - bubble_before
            else:
                result = during()
        if not jobs:
            return result
        start = time.perf_counter()
        while run_next():
            pass
        self._sum_lm_gradients()
        optimizers = self.optimizers()
        assert isinstance(optimizers, list)
        lr = self.lm_lr_at(step)
        for group in getattr(optimizers[1], "optimizer", optimizers[1]).param_groups:
            group["lr"] = lr
        optimizers[1].step()
        optimizers[1].zero_grad(set_to_none=True)
        self.lm_steps_done = max(self.lm_steps_done, step + 1)
        self._lm_version += 1
        self._lm_seconds += time.perf_counter() - start
        return result

    def _record_lm_loss(self, loss: float) -> None:
        self._lm_loss_sum += loss
        self._lm_loss_count += 1

    def _sum_lm_gradients(self) -> None:
        _, world = self._rank_world()
        if world == 1:
            return
        assert self.lm is not None
        params = [p for p in self.lm.parameters() if p.requires_grad]
        # The has-gradient flags travel with the gradients, on their device (NCCL takes no
        # host tensors).
        flags = torch.tensor(
            [float(p.grad is not None) for p in params],
            dtype=params[0].dtype,
            device=params[0].device,
        )
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
            + [flags]
        )
        dist.all_reduce(flat)
        has_grad = flat[-len(params) :]
        offset = 0
        for i, p in enumerate(params):
            count = p.numel()
            # A parameter no rank touched keeps grad None, as in one process: Adam then
            # leaves it (and its moments) alone instead of stepping on a zero gradient.
            if has_grad[i] > 0:
                p.grad = flat[offset : offset + count].view_as(p).clone()
            else:
                p.grad = None
            offset += count

    def _rank_world(self) -> tuple[int, int]:
        if dist.is_available() and dist.is_initialized() and self.trainer.world_size > 1:
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
