"""UniTG's language-model work, planned before training: the learning-rate schedule over
the LM's optimiser steps, the jobs (training batches of one degree group, plus the nodes
encoded after them) of every step, and which steps each GNN epoch runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lightgraph.data.loader.group_batch_sampler import GroupBatchSampler

__all__ = ["LM_SCHEDULES", "LMJob", "LMJobPlan", "lm_learning_rate"]

#: How the LM's learning rate moves over its optimiser steps.
LM_SCHEDULES: tuple[str, ...] = ("constant", "linear")


def lm_learning_rate(step: int, total: int, peak: float, schedule: str, warmup: float) -> float:
    """The LM's learning rate at optimiser step ``step`` (0-based) of ``total``.

    ``"constant"``: ``peak`` throughout. ``"linear"``: linear warm-up over the first
    ``W = ceil(warmup * total)`` steps (step ``s < W`` takes ``peak * (s + 1) / W``), then
    linear decay to ``peak / (total - W)`` at the last step (step ``s >= W`` takes
    ``peak * (total - s) / (total - W)``) -- the schedule BERT-style encoders are
    fine-tuned with (Hugging Face's ``get_linear_schedule_with_warmup``, shifted by one
    step so that no step has a zero rate).
    """
    if schedule == "constant" or total <= 0:
        return peak
    w = math.ceil(warmup * total)
    if step < w:
        return peak * (step + 1) / w
    return peak * max(total - step, 1) / max(total - w, 1)


@dataclass(frozen=True)
class LMJob:
    """One unit of language-model work: a training batch (and an encoding batch).

    Attributes:
        index: position in the run's job list (also the stamp of the embeddings it writes).
        group: centrality group of the training batch (its exit is ``exit_layers[group]``).
        nodes: ids of the training batch's nodes.
        encode: ids of the nodes encoded without gradient after the training batch.
    """

    index: int
    group: int
    nodes: Tensor
    encode: Tensor


@dataclass
class LMJobPlan:
    """The LM jobs of a run: ``lm_epochs`` passes of ``sampler``'s one-group batches, cut
    into optimiser steps of ``batches_per_step`` batches, spread over ``span`` GNN epochs.

    Attributes:
        sampler: the training batches of an LM epoch (:class:`GroupBatchSampler`).
        train_nodes: node id of every position the sampler yields.
        lm_epochs: passes over the training nodes.
        batches_per_step: batches per LM optimiser step.
        num_nodes: nodes of the graph (the encoding cycles over them).
        encode_batch_size: nodes encoded without gradient after each job (0: none).
        span: GNN epochs the LM steps are spread over (``ceil(lm_share * epochs)``).
    """

    sampler: GroupBatchSampler
    train_nodes: Tensor
    lm_epochs: int
    batches_per_step: int
    num_nodes: int
    encode_batch_size: int
    span: int
    batches_per_epoch: int = field(init=False)

    def __post_init__(self) -> None:
        self.batches_per_epoch = len(self.sampler)

    @property
    def total_jobs(self) -> int:
        return self.lm_epochs * self.batches_per_epoch

    @property
    def steps_per_lm_epoch(self) -> int:
        return math.ceil(self.batches_per_epoch / self.batches_per_step)

    @property
    def total_steps(self) -> int:
        """The LM's optimiser steps over the run: ``lm_epochs * ceil(B / batches_per_step)``."""
        return self.lm_epochs * self.steps_per_lm_epoch

    @property
    def steps_per_epoch(self) -> int:
        """LM optimiser steps per GNN epoch: ``ceil(total_steps / span)``, at least one."""
        return max(1, math.ceil(self.total_steps / self.span))

    def epoch_steps(self, epoch: int, done: int, finish: bool = False) -> range:
        """The LM steps GNN epoch ``epoch`` runs after ``done`` were taken (all the rest
        with ``finish``)."""
        total, per = self.total_steps, self.steps_per_epoch
        if finish:
            return range(done, total)
        stop = min((epoch + 1) * per, total)
        return range(min(max(done, epoch * per), stop), stop)

    def jobs(self, step: int) -> list[LMJob]:
        """The jobs of LM optimiser step ``step``: the ``s``-th group of
        ``batches_per_step`` consecutive batches of one LM epoch (empty past the last step)."""
        per_epoch = self.batches_per_epoch
        lm_epoch, s = divmod(step, self.steps_per_lm_epoch)
        if step < 0 or lm_epoch >= self.lm_epochs:
            return []
        start = lm_epoch * per_epoch + s * self.batches_per_step
        stop = min(start + self.batches_per_step, (lm_epoch + 1) * per_epoch)
        jobs = []
        cache: dict[int, list[tuple[int, Tensor]]] = {}
        n, enc = self.num_nodes, self.encode_batch_size
        for j in range(start, stop):
            epoch, k = divmod(j, per_epoch)
            if epoch not in cache:
                cache[epoch] = self.sampler.batches(epoch)
            group, positions = cache[epoch][k]
            encode = (
                (torch.arange(j * enc, (j + 1) * enc) % n)
                if enc and n
                else torch.empty(0, dtype=torch.long)
            )
            jobs.append(LMJob(j, group, self.train_nodes[positions], encode))
        return jobs
