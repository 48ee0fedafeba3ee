"""UniTG's affinity-aware flow parallelism: a GPipe pipeline of GNN stages over graph
microbatches (thesis §5.3.2), on :mod:`torch.distributed.pipelining`.

The thesis is Zhang's (*Algorithm and System Co-design for Efficient and Scalable Graph
Learning*, NTU 2026), ch. 5.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from lightgraph.data.partition.affinity import (
    AFFINITY_REORDERS,
    AffinityMicrobatches,
    affinity_microbatches,
    default_num_microbatches,
)
from lightgraph.nn.models.pipeline_stages import (
    pipeline_depth,
    reset_dropout,
    shared_dropouts,
    split_stages,
    stage_width,
)
from lightgraph.utilities.checks import check_choice, check_int, check_optional_int
from lightgraph.utilities.random_state import check_rng_state, generator_state, restore_generator

__all__ = ["COMPUTE_KINDS", "ComputeObserver", "FlowPipeline"]

#: The ``kind`` values a :class:`ComputeObserver` receives.
COMPUTE_KINDS: tuple[str, ...] = ("forward", "backward", "loss", "first_step")

_IGNORE = -100  # target of padding rows and of nodes outside the training mask


@runtime_checkable
class ComputeObserver(Protocol):
    """Told when a pipeline stage computes, e.g. to run other work in the pipeline bubbles.

    :class:`FlowPipeline` calls :meth:`compute_begin` right before and :meth:`compute_end`
    right after every compute of its stage, on the thread that runs the schedule:

    * ``"forward"``: the stage's forward pass of one microbatch;
    * ``"loss"``: the last stage's loss of one microbatch;
    * ``"backward"``: the stage's backward pass of one microbatch (and, on the first stage,
      once more after the schedule: the gradient of ``x`` into whatever produced it);
    * ``"first_step"``: the whole first step of a pipeline schedule (the training one, and
      the evaluation one of :meth:`FlowPipeline.forward_eval`) after :meth:`FlowPipeline.build`,
      as one compute, instead of that step's ``"forward"``, ``"loss"`` and ``"backward"``:
      torch's schedule initialises its stage in its first step, inside
      ``torch.random.fork_rng``, which saves torch's default generator and restores it
      afterwards; draws another thread made meanwhile would be undone (and drawn again).
      Several processes only: one process runs no torch schedule.

    The point-to-point waits between them (the pipeline bubbles) are not bracketed.
    Calls never nest: every ``compute_begin(kind)`` is followed by ``compute_end(kind)``
    before the next ``compute_begin``.
    """

    def compute_begin(self, kind: str) -> None: ...

    def compute_end(self, kind: str) -> None: ...


class _StageRunner(nn.Module):
    """The module a ``PipelineStage`` runs: one stage of the GNN on the current microbatch.

    The pipeline only carries the activations ``h``; the runner looks up the microbatch's
    graph (its local ``edge_index``) by the chunk id the schedule passes to
    ``forward_one_chunk`` / ``backward_one_chunk`` (:meth:`enter`). It also keeps one set of
    :class:`~lightgraph.nn.SharedDropout` masks per microbatch, so a reversible block's
    recomputation in the backward pass of microbatch ``c`` uses the masks of ``c``'s
    forward pass.

    In a training forward pass of a stage that receives its input from the previous
    stage (:attr:`input_needs_grad`), the received tensor is made to require grad: the
    schedule sends that tensor's gradient back to the previous stage.
    """

    def __init__(self, stage: nn.Module, edge_indices: list[Tensor]) -> None:
        super().__init__()
        self.stage = stage
        self.edge_indices = edge_indices
        self.chunk = 0
        #: whether the current forward pass must give its input a gradient (set by the
        #: pipeline stage before every forward pass)
        self.input_needs_grad = False
        self._dropouts = shared_dropouts(stage)
        self._masks: dict[int, list[Tensor | None]] = {}

    def new_step(self) -> None:
        """Forget every microbatch's dropout masks (once per pipeline step)."""
        reset_dropout(self.stage)
        self._masks.clear()

    def enter(self, chunk: int) -> None:
        """Make microbatch ``chunk`` current: its graph and its dropout masks."""
        self.chunk = chunk
        masks = self._masks.get(chunk)
        for i, drop in enumerate(self._dropouts):
            drop.mask = None if masks is None else masks[i]

    def leave(self, chunk: int) -> None:
        """Remember the masks microbatch ``chunk``'s forward pass drew."""
        self._masks[chunk] = [drop.mask for drop in self._dropouts]

    def forward(self, h: Tensor) -> Tensor:
        if self.input_needs_grad and not h.requires_grad:
            # A receive buffer (a leaf) the schedule reads the input gradient from.
            h.requires_grad_(True)
        return self.stage(h, self.edge_indices[self.chunk]).contiguous()


class _ObservedStage(PipelineStage):
    """A ``PipelineStage`` that selects the microbatch's graph and tells the observer.

    It also makes a non-first stage's received input require grad in every training
    forward pass. The training and the evaluation schedule share this stage, and a
    schedule's first step (re)creates the stage's receive buffers, asking for their
    gradient only if that schedule runs backward; torch releases that do not set
    ``requires_grad`` again on every forward pass (2.11 does not) would leave the training
    schedule, after the evaluation schedule's first step, with inputs that get no
    gradient -- and stage ``i - 1`` with none to receive.
    """

    def __init__(self, runner: _StageRunner, flow: FlowPipeline, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        self._flow = flow
        self._runner = runner

    def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        self._runner.input_needs_grad = (
            self.has_backward and not self.is_first and torch.is_grad_enabled()
        )
        self._runner.enter(fwd_chunk_id)
        with self._flow._compute("forward"):
            out = super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
        self._runner.leave(fwd_chunk_id)
        return out

    def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> None:
        if not self.has_backward:  # forward-only (eval) schedule: nothing to compute
            return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)
        self._runner.enter(bwd_chunk_id)
        with self._flow._compute("backward"):
            super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)


class FlowPipeline:
    """The flow-parallel runtime: GNN stages on the ranks of ``group``, GPipe over
    affinity microbatches (UniTG, thesis §5.3.2).

    :meth:`build` splits a deep GNN into ``P`` stages of consecutive layers
    (:func:`~lightgraph.nn.models.pipeline_stages.split_stages`), one per rank of
    ``group`` (rank ``i`` runs stage ``i``), and the graph into ``M`` affinity microbatches
    (:func:`~lightgraph.data.partition.affinity_microbatches`; edges between microbatches are
    dropped). :meth:`step` runs one training step with
    :class:`torch.distributed.pipelining.ScheduleGPipe`: the forward passes of all
    microbatches, then their backward passes; every rank accumulates the gradients of its
    own stage's parameters over the microbatches (the caller zeroes them and steps the
    optimiser). The loss is the mean cross-entropy over all training nodes,

    .. math::
        \\mathcal{L} = \\frac{1}{|V_{\\text{train}}|} \\sum_{m=1}^{M}
        \\sum_{v \\in V_{\\text{train}} \\cap B_m} \\ell_v ,

    i.e. the single-process loss on the graph without the cut edges (not a mean of
    microbatch means); the schedule does not rescale gradients (``scale_grads=False``).

    Every microbatch is padded to ``n_max`` rows, since the pipeline sends equal shapes;
    padding rows are isolated nodes and never targets. The shapes are given to
    ``PipelineStage`` up front (static metadata), so no extra shape-inference forward
    pass runs. Each microbatch's graph is looked up by the chunk id the schedule passes to
    the stage (nothing but activations travels through the pipeline).

    With one process (no process group, or a group of one rank) the single stage runs
    all microbatches in the same order, without ``torch.distributed``: a reference for
    the pipelined run.

    Every rank holds the whole model, but a rank only trains its stage's parameters; to
    save the trained model, :meth:`state_dict_of_stages` gathers every stage's parameters
    from its rank.

    **Random stream.** Every stage compute (dropout masks of any kind) draws from the
    pipeline's own stream, not from the one torch's default generators carry on: for the
    duration of the compute the default CPU generator (and the device's, on an
    accelerator) is switched to this rank's stream and back. Work running between the
    computes -- a :class:`~lightgraph.distributed.BubbleInterleaver`'s LM jobs in the
    bubbles, parked while the stage computes -- keeps the default stream to itself, so
    neither side's draws depend on how the two interleave in time. Nor does the main
    thread's own work between the computes touch the default generator, except torch's
    stage initialisation in a schedule's first step (``fork_rng``), which is why that step
    is reported to the observer as one ``"first_step"`` compute. The stream is seeded,
    at the first compute, from ``(torch.initial_seed(), rank)`` (``seed_everything``'s
    seed) and is part of :meth:`rng_state` (a
    :class:`~lightgraph.typing.RandomStateful`, saved per rank by
    :class:`~lightgraph.callbacks.RandomStateCheckpoint`). The switch assumes that no
    other thread draws while the stage computes (true with the interleaver's gate on).
    Nothing else is carried from one step into the next: a step's activations, gradients
    and dropout masks are dropped when it ends.

    Args:
        group: process group of the pipeline (default: the world group); its size is the
            number of stages ``P``.
        num_microbatches: default ``M`` of :meth:`build` (``None``:
            :func:`~lightgraph.data.partition.default_num_microbatches`).
        reorder: default node reordering of :meth:`build` (``"metis"``, ``"random"``,
            ``"none"``).
        seed: default seed of :meth:`build` (METIS, random permutation).
        observer: a :class:`ComputeObserver` told about every stage compute.
    """

    def __init__(
        self,
        group: dist.ProcessGroup | None = None,
        num_microbatches: int | None = None,
        reorder: str = "metis",
        seed: int = 0,
        observer: ComputeObserver | None = None,
    ) -> None:
        owner = "FlowPipeline"
        self.num_microbatches = check_optional_int(owner, "num_microbatches", num_microbatches)
        self.reorder = check_choice(owner, "reorder", reorder, AFFINITY_REORDERS)
        self.seed = check_int(owner, "seed", seed, low=0)
        self.group = group
        if dist.is_available() and dist.is_initialized():
            self._world = dist.get_world_size(group)
            self._rank = dist.get_rank(group)
        elif group is not None:
            raise RuntimeError(
                "FlowPipeline: got a process `group` but torch.distributed is not initialised."
            )
        else:
            self._world, self._rank = 1, 0
        self.observer = observer
        self._model: nn.Module | None = None
        self._stages: list[nn.Module] = []
        self._microbatches: AffinityMicrobatches | None = None
        self._runner: _StageRunner | None = None
        self._schedule: ScheduleGPipe | None = None
        self._eval_schedule: ScheduleGPipe | None = None
        # Schedules that ran a step since the runtime was made (torch initialised their
        # stage then), and whether a "first_step" compute is in progress.
        self._started: list[ScheduleGPipe] = []
        self._whole_step = False
        self._device = torch.device("cpu")
        self._dtype = torch.float32
        self._count = 1
        # The stages' random stream (see the class doc): CPU, and the device's on an
        # accelerator; None until the first compute draws on it.
        self._stream: torch.Generator | None = None
        self._device_stream: torch.Generator | None = None
        #: logits ``[N, C]`` (original order, detached) of the last :meth:`step` with
        #: ``keep_logits=True``, on the last stage
        self.last_logits: Tensor | None = None

    # ------------------------------------------------------------------ properties
    @property
    def observer(self) -> ComputeObserver | None:
        """The :class:`ComputeObserver` (``None``: nobody is told)."""
        return self._observer

    @observer.setter
    def observer(self, observer: ComputeObserver | None) -> None:
        if observer is not None and not isinstance(observer, ComputeObserver):
            raise TypeError(
                f"FlowPipeline: expected `observer` to be a ComputeObserver (an object with "
                f"compute_begin(kind) and compute_end(kind)) or None but got "
                f"{type(observer).__name__}."
            )
        self._observer = observer

    @property
    def rank(self) -> int:
        """This process's rank in ``group``, the index of its stage."""
        return self._rank

    @property
    def num_stages(self) -> int:
        """Number of stages ``P`` (the size of ``group``)."""
        return self._world

    @property
    def is_first(self) -> bool:
        """Whether this rank runs the first stage (it gives ``x``)."""
        return self._rank == 0

    @property
    def is_last(self) -> bool:
        """Whether this rank runs the last stage (it gives labels and gets the loss)."""
        return self._rank == self._world - 1

    @property
    def built(self) -> bool:
        return self._runner is not None

    @property
    def microbatches(self) -> AffinityMicrobatches:
        """The affinity microbatches of the last :meth:`build`."""
        return self._require_built("microbatches")[0]

    @property
    def stage(self) -> nn.Module:
        """This rank's stage (a module ``forward(h, edge_index)`` sharing the model's
        parameters); only its parameters receive gradients here."""
        return self._require_built("stage")[1].stage

    def stage_parameters(self) -> Iterator[nn.Parameter]:
        """The parameters this rank trains (those of its stage)."""
        return self.stage.parameters()

    def __repr__(self) -> str:
        built = f", microbatches={self._microbatches!r}" if self._microbatches is not None else ""
        return f"{type(self).__name__}(rank={self._rank}, num_stages={self._world}{built})"

    # ------------------------------------------------------------------ build
    def build(
        self,
        model: nn.Module,
        edge_index: Tensor,
        num_nodes: int,
        num_microbatches: int | None = None,
        reorder: str | None = None,
        seed: int | None = None,
    ) -> AffinityMicrobatches:
        """Split ``model`` into stages, the graph into microbatches, and set up the schedule.

        Collective: every rank of ``group`` calls it with the same model architecture and
        graph. Rank 0 computes the microbatches and sends them to the others, so every rank
        agrees on them (including ``M``). This rank keeps stage ``rank``. Calling it again
        rebuilds everything (e.g. another graph).

        Args:
            model: a deep GNN :func:`split_stages` accepts (RevGCN, RevGAT, ResGEN, a
                BasicGNN); it must have at least ``P`` layers.
            edge_index: ``[2, E]`` edges in original node ids.
            num_nodes: number of nodes ``N``.
            num_microbatches: ``M`` in ``[1, N]``; ``None``: the constructor's
                ``num_microbatches``, or if that is ``None`` too
                :func:`~lightgraph.data.partition.default_num_microbatches` ``(N, P)``.
            reorder: ``"metis"``, ``"random"`` or ``"none"``; ``None``: the constructor's.
            seed: seed of the reordering; ``None``: the constructor's.

        Returns:
            The :class:`~lightgraph.data.partition.AffinityMicrobatches`.
        """
        owner = "FlowPipeline.build"
        num_nodes = check_int(owner, "num_nodes", num_nodes)
        reorder = check_choice(
            owner, "reorder", self.reorder if reorder is None else reorder, AFFINITY_REORDERS
        )
        seed = check_int(owner, "seed", self.seed if seed is None else seed, low=0)
        m = num_microbatches if num_microbatches is not None else self.num_microbatches
        if m is None:
            m = default_num_microbatches(num_nodes, self._world)
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= num_nodes:
            raise ValueError(
                f"{owner}: expected `num_microbatches` to be an integer in [1, {num_nodes}] "
                f"(num_nodes = {num_nodes}) or None but got {m!r}."
            )
        depth = pipeline_depth(model, owner)
        if self._world > depth:
            raise ValueError(
                f"{owner}: the pipeline runs one stage per rank of `group`, and a stage needs "
                f"at least one layer: expected a `group` of at most {depth} ranks (the "
                f"{type(model).__name__} has {depth} layers) but got {self._world} ranks; use "
                "fewer ranks or a deeper model."
            )
        stages = split_stages(model, self._world)
        self.close()
        device, dtype = _device_dtype(model)
        if self._world == 1:
            mb = affinity_microbatches(edge_index, num_nodes, m, reorder, seed)
        else:
            mb = self._agreed_microbatches(edge_index, num_nodes, m, reorder, seed, device)
        self._model = model
        self._stages = stages
        self._microbatches = mb
        self._make_runtime(device, dtype)
        return mb

    def _agreed_microbatches(
        self,
        edge_index: Tensor,
        num_nodes: int,
        m: int,
        reorder: str,
        seed: int,
        device: torch.device,
    ) -> AffinityMicrobatches:
        mb: AffinityMicrobatches | None = None
        payload: list[Any] = [None]
        if self._rank == 0:
            try:
                mb = affinity_microbatches(edge_index, num_nodes, m, reorder, seed)
                payload = [("ok", mb.order, mb.bounds)]
            except Exception as err:  # noqa: BLE001 - every rank raises it below
                payload = [("error", f"{type(err).__name__}: {err}")]
        dist.broadcast_object_list(
            payload, src=self._global_rank(0), group=self.group, device=_p2p_device(device)
        )
        message = payload[0]
        if message[0] == "error":
            raise ValueError(
                f"FlowPipeline.build: rank 0 could not build the microbatches: {message[1]}"
            )
        if mb is None:
            mb = AffinityMicrobatches.from_order(edge_index, message[1], message[2])
        return mb

    def _make_runtime(self, device: torch.device, dtype: torch.dtype) -> None:
        mb = self._microbatches
        assert mb is not None
        stage = self._stages[self._rank]
        runner = _StageRunner(stage, mb.edge_indices_to(device))
        self._runner = runner
        self._device, self._dtype = device, dtype
        self._schedule = self._eval_schedule = None
        self._started = []
        if self._world == 1:
            return
        n = mb.n_max
        # Static shapes: PipelineStage then allocates its buffers without an extra
        # shape-inference forward pass.
        inputs = torch.empty(
            n,
            stage_width(stage, "in_channels"),
            dtype=dtype,
            device="meta",
            requires_grad=not self.is_first,
        )
        outputs = torch.empty(
            n, stage_width(stage, "out_channels"), dtype=dtype, device="meta", requires_grad=True
        )
        pipe_stage = _ObservedStage(
            runner,
            self,
            stage_index=self._rank,
            num_stages=self._world,
            device=device,
            input_args=inputs,
            output_args=outputs,
            group=self.group,
        )
        m = mb.num_microbatches
        # The loss function is set on every rank: it tells the schedule to run backward.
        self._schedule = ScheduleGPipe(pipe_stage, m, loss_fn=self._loss, scale_grads=False)
        self._eval_schedule = ScheduleGPipe(pipe_stage, m, loss_fn=None, scale_grads=False)

    def close(self) -> None:
        """Drop the stage, the schedules and the microbatches (before the group goes)."""
        self._runner = None
        self._schedule = self._eval_schedule = None
        self._microbatches = None
        self._stages = []
        self._model = None
        self.last_logits = None

    # ------------------------------------------------------------------ training
    def step(
        self,
        x: Tensor | None,
        y: Tensor | None,
        train_mask: Tensor | None,
        *,
        keep_logits: bool = False,
        observer: ComputeObserver | None = None,
    ) -> Tensor | None:
        """One training step of the pipeline (forward and backward, no optimiser step).

        Collective: every rank calls it. Gradients of this rank's stage parameters are
        accumulated over the microbatches into ``.grad`` (zero them before, step after).

        Args:
            x: first stage only (ignored elsewhere): node features ``[N, F]`` in original
                node order, of the model's dtype and device. It may require grad: after
                the step its gradient has flowed back into whatever produced it (e.g. an
                input projection outside the pipeline).
            y: last stage only: class ids ``[N]`` in original node order.
            train_mask: last stage only: boolean ``[N]``, the nodes of the loss.
            keep_logits: keep the logits of the step in :attr:`last_logits` (last stage).
            observer: a :class:`ComputeObserver` for this call only (instead of
                :attr:`observer`).

        Returns:
            On the last stage the global loss (a 0-dim tensor, detached): the sum over
            microbatches of the per-node cross-entropies over training nodes divided by the
            number of training nodes; ``None`` on the other stages (see
            :meth:`broadcast_loss`).
        """
        with self._observed_by(observer):
            return self._step(x, y, train_mask, keep_logits)

    def _step(
        self, x: Tensor | None, y: Tensor | None, train_mask: Tensor | None, keep_logits: bool
    ) -> Tensor | None:
        mb, runner = self._require_built("step")
        self._follow_model()
        target = None
        if self.is_first:
            x = self._check_x(x, "step")
        if self.is_last:
            target = self._target(y, train_mask)
        runner.new_step()
        args: tuple[Tensor, ...] = ()
        x_pad = leaf = None
        if self.is_first:
            assert x is not None
            x_pad = mb.pad(x)
            # The stages see a leaf: the schedule runs one backward pass per microbatch,
            # and the graph that produced x is traversed once, after the schedule.
            leaf = x_pad.detach().requires_grad_(x_pad.requires_grad)
            args = (leaf,)
        logits: Tensor | None = None
        losses: list[Tensor] | None
        if self._world == 1:
            losses, logits = self._local_step(args[0], target, keep_logits)
        else:
            assert self._schedule is not None
            losses = [] if self.is_last else None
            out = self._run_schedule(
                self._schedule,
                *args,
                target=target,
                losses=losses,
                return_outputs=keep_logits and self.is_last,
            )
            logits = out if keep_logits and self.is_last else None
        if x_pad is not None and leaf is not None and leaf.grad is not None and x_pad.grad_fn:
            with self._compute("backward"):
                torch.autograd.backward(x_pad, leaf.grad)
        if not self.is_last:
            return None
        assert losses is not None
        if keep_logits and logits is not None:
            self.last_logits = mb.unpad(logits.detach())
        return torch.stack([loss.detach() for loss in losses]).sum()

    def _local_step(
        self, x_pad: Tensor, target: Tensor | None, keep_logits: bool
    ) -> tuple[list[Tensor], Tensor | None]:
        """All microbatches through the single stage: the forward passes, then the backward
        passes (GPipe on one process)."""
        mb, runner = self._require_built("step")
        assert target is not None
        n = mb.n_max
        outputs, losses = [], []
        for c in range(mb.num_microbatches):
            runner.enter(c)
            with self._compute("forward"):
                out = runner(x_pad[c * n : (c + 1) * n])
            runner.leave(c)
            losses.append(self._loss(out, target[c * n : (c + 1) * n]))
            outputs.append(out)
        for c in range(mb.num_microbatches):
            runner.enter(c)
            with self._compute("backward"):
                losses[c].backward()
        logits = torch.cat([o.detach() for o in outputs]) if keep_logits else None
        return losses, logits

    def _loss(self, logits: Tensor, target: Tensor) -> Tensor:
        with self._compute("loss"):
            total = F.cross_entropy(logits, target, ignore_index=_IGNORE, reduction="sum")
            return total / self._count

    def broadcast_loss(self, loss: Tensor | None) -> Tensor:
        """The last stage's ``loss`` (from :meth:`step`) on every rank (collective)."""
        if self._world == 1:
            if loss is None:
                raise ValueError(
                    "FlowPipeline.broadcast_loss: expected the loss of step() but got None."
                )
            return loss.detach()
        if self.is_last:
            if not isinstance(loss, Tensor):
                raise ValueError(
                    f"FlowPipeline.broadcast_loss: the last stage must pass the loss step() "
                    f"returned but got {type(loss).__name__}."
                )
            buf = loss.detach().to(device=self._device, dtype=self._dtype).reshape(()).clone()
        else:
            buf = torch.zeros((), dtype=self._dtype, device=self._device)
        dist.broadcast(buf, src=self._global_rank(self._world - 1), group=self.group)
        return buf

    # ------------------------------------------------------------------ evaluation
    def forward_eval(
        self, x: Tensor | None, *, observer: ComputeObserver | None = None
    ) -> Tensor | None:
        """The pipelined forward pass without gradients over the same microbatches.

        Collective. The model's train/eval mode is left as it is (call ``model.eval()``
        for inference without dropout).

        Args:
            x: first stage only: node features ``[N, F]`` in original node order.
            observer: a :class:`ComputeObserver` for this call only.

        Returns:
            On the last stage the logits ``[N, C]`` in original node order (on the cut
            graph, like training); ``None`` elsewhere.
        """
        with self._observed_by(observer):
            return self._forward_eval(x)

    def _forward_eval(self, x: Tensor | None) -> Tensor | None:
        mb, runner = self._require_built("forward_eval")
        self._follow_model()
        args: tuple[Tensor, ...] = ()
        with torch.no_grad():
            if self.is_first:
                x = self._check_x(x, "forward_eval")
                args = (mb.pad(x),)
            runner.new_step()
            if self._world == 1:
                n, outputs = mb.n_max, []
                for c in range(mb.num_microbatches):
                    runner.enter(c)
                    with self._compute("forward"):
                        outputs.append(runner(args[0][c * n : (c + 1) * n]))
                    runner.leave(c)
                out: Any = torch.cat(outputs)
            else:
                assert self._eval_schedule is not None
                out = self._run_schedule(self._eval_schedule, *args, return_outputs=self.is_last)
        runner.new_step()
        return mb.unpad(out) if self.is_last else None

    # ------------------------------------------------------------------ checkpoints
    def stage_owners(self) -> dict[int, int]:
        """``id(tensor) -> stage`` for every parameter and buffer of the built model."""
        owners: dict[int, int] = {}
        for i, stage in enumerate(self._stages):
            for t in itertools.chain(stage.parameters(), stage.buffers()):
                owners.setdefault(id(t), i)
        return owners

    def state_dict_of_stages(self, module: nn.Module | None = None) -> dict[str, Tensor]:
        """The state dict of ``module`` with every stage's tensors from the rank that trains it.

        Collective (every rank calls it; every rank gets the result). ``module`` defaults
        to the built model and may be any module containing it (a LightningModule): its
        entries that belong to a stage (parameters and buffers, found by identity) come from
        the stage's rank; the others stay this rank's values. Before :meth:`build`, or
        with one stage, it is ``module.state_dict()``. ``module`` is left unchanged.
        """
        return self._gather_stages(module, inplace=False, method="state_dict_of_stages")

    def sync_stages(self, module: nn.Module | None = None) -> None:
        """Copy every stage's parameters and buffers from the rank that trains it into this
        rank's model, in place, so every rank holds the whole trained model (collective;
        ``module`` as in :meth:`state_dict_of_stages`). The stages keep training correctly
        afterwards: a rank only ever updates its own stage."""
        self._gather_stages(module, inplace=True, method="sync_stages")

    def _gather_stages(
        self, module: nn.Module | None, inplace: bool, method: str
    ) -> dict[str, Tensor]:
        if module is None:
            if self._model is None:
                raise RuntimeError(f"FlowPipeline.{method}: pass `module` or call build() first.")
            module = self._model
        state = module.state_dict(keep_vars=True)
        out: dict[str, Tensor] = {
            k: (v.detach() if isinstance(v, Tensor) else v) for k, v in state.items()
        }
        if self._world == 1 or not self._stages:
            return out
        owners = self.stage_owners()
        for r in range(self._world):
            keys = [k for k, v in state.items() if isinstance(v, Tensor) and owners.get(id(v)) == r]
            for dtype in sorted({state[k].dtype for k in keys}, key=str):
                group_keys = [k for k in keys if state[k].dtype == dtype]
                device = state[group_keys[0]].device
                total = sum(state[k].numel() for k in group_keys)
                if self._rank == r:
                    flat = torch.cat([out[k].reshape(-1).to(device) for k in group_keys])
                else:
                    flat = torch.empty(total, dtype=dtype, device=device)
                dist.broadcast(flat, src=self._global_rank(r), group=self.group)
                if self._rank == r:
                    continue
                offset = 0
                for k in group_keys:
                    size = state[k].numel()
                    value = flat[offset : offset + size].view(state[k].shape)
                    offset += size
                    if inplace:
                        with torch.no_grad():
                            state[k].copy_(value)
                    else:
                        out[k] = value.clone()
        return out

    def load_state_dict_of_stages(
        self, module: nn.Module, state_dict: dict[str, Any], strict: bool = True
    ) -> Any:
        """Load a state dict of :meth:`state_dict_of_stages` into ``module`` on this rank.

        Every rank holds the whole model and its stage shares the model's parameters, so
        loading the full state dict restores every rank's stage. Returns what
        ``load_state_dict`` returns.
        """
        return module.load_state_dict(state_dict, strict=strict)

    # ------------------------------------------------------------------ random state
    def rng_state(self) -> dict[str, Any]:
        """The stages' random stream (:class:`~lightgraph.typing.RandomStateful`):
        ``{"generator": CPU state, "device_generator": the accelerator's or None}``, each
        ``None`` before the first compute."""
        return {
            "generator": generator_state(self._stream),
            "device_generator": generator_state(self._device_stream),
        }

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Continue the stream of :meth:`rng_state` (a ``None`` state: seeded afresh)."""
        owner = "FlowPipeline.set_rng_state"
        check_rng_state(owner, state, ("generator", "device_generator"), "FlowPipeline.rng_state()")
        self._stream = restore_generator(state["generator"], self._stream, owner, "generator")
        self._device_stream = restore_generator(
            state["device_generator"], self._device_stream, owner, "device_generator"
        )

    def _streams(self) -> tuple[torch.Generator, torch.Generator | None]:
        """The stream's generators, seeded from ``(torch.initial_seed(), rank)`` at first use."""
        device = self._device
        accel = device.type != "cpu"
        if self._stream is None or (accel and self._device_stream is None):
            key = f"lightgraph-flow-stage\x1f{torch.initial_seed()}\x1f{self._rank}".encode()
            seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1
            if self._stream is None:
                self._stream = torch.Generator().manual_seed(seed)
            if accel and self._device_stream is None:
                self._device_stream = torch.Generator(device=device).manual_seed(seed)
        if accel and self._device_stream is not None and self._device_stream.device != device:
            # The model moved to another accelerator: the stream follows it.
            moved = torch.Generator(device=device)
            moved.set_state(self._device_stream.get_state())
            self._device_stream = moved
        return self._stream, self._device_stream if accel else None

    @contextmanager
    def _stage_stream(self) -> Iterator[None]:
        """Torch's default generators switched to the stages' stream (and back)."""
        stream, device_stream = self._streams()
        saved = torch.get_rng_state()
        torch.set_rng_state(stream.get_state())
        saved_device = None
        if device_stream is not None:
            accel = torch.get_device_module(device_stream.device)
            saved_device = accel.get_rng_state(device_stream.device)
            accel.set_rng_state(device_stream.get_state(), device_stream.device)
        try:
            yield
        finally:
            stream.set_state(torch.get_rng_state())
            torch.set_rng_state(saved)
            if device_stream is not None and saved_device is not None:
                accel = torch.get_device_module(device_stream.device)
                device_stream.set_state(accel.get_rng_state(device_stream.device))
                accel.set_rng_state(saved_device, device_stream.device)

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def _observed_by(self, observer: ComputeObserver | None) -> Iterator[None]:
        if observer is None:
            yield
            return
        saved = self._observer
        self.observer = observer  # checks the type
        try:
            yield
        finally:
            self._observer = saved

    def _run_schedule(self, schedule: ScheduleGPipe, *args: Any, **kwargs: Any) -> Any:
        """``schedule.step(*args, **kwargs)``; its first step is one ``"first_step"`` compute.

        torch initialises the stage in a schedule's first step (point-to-point warm-up,
        buffers) inside ``torch.random.fork_rng``: torch's default generator is saved on
        entry and restored on exit, on this thread, outside every stage compute. A bubble
        interleaver's worker drawing from that generator meanwhile (the LM's dropout)
        would have its draws undone and drawn again, by chance of thread timing. So the
        observer sees the whole first step as one compute (its worker stays parked); the
        step's own computes still draw from the stage stream.
        """
        if any(s is schedule for s in self._started):
            return schedule.step(*args, **kwargs)
        observer = self._observer
        if observer is not None:
            observer.compute_begin("first_step")
        self._whole_step = True
        try:
            out = schedule.step(*args, **kwargs)
        finally:
            self._whole_step = False
            if observer is not None:
                observer.compute_end("first_step")
        self._started.append(schedule)
        return out

    @contextmanager
    def _compute(self, kind: str) -> Iterator[None]:
        # Inside a "first_step" compute the observer already holds its bracket.
        observer = None if self._whole_step else self._observer
        if observer is None:
            with self._stage_stream():
                yield
            return
        observer.compute_begin(kind)
        try:
            # Inside the observer's bracket: a bubble interleaver's LM work is parked.
            with self._stage_stream():
                yield
        finally:
            observer.compute_end(kind)

    def _require_built(self, what: str) -> tuple[AffinityMicrobatches, _StageRunner]:
        if self._runner is None or self._microbatches is None:
            raise RuntimeError(
                f"FlowPipeline.{what}: call build(model, edge_index, num_nodes) first (every rank)."
            )
        return self._microbatches, self._runner

    def _follow_model(self) -> None:
        """Rebuild the runtime when the model moved to another device or dtype."""
        assert self._model is not None
        device, dtype = _device_dtype(self._model)
        if device != self._device or dtype != self._dtype:
            self._make_runtime(device, dtype)

    def _global_rank(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def _check_x(self, x: Tensor | None, method: str) -> Tensor:
        mb = self._microbatches
        stage = self._stages[0]
        assert mb is not None
        expected = (mb.num_nodes, stage_width(stage, "in_channels"))
        if not isinstance(x, Tensor) or tuple(x.shape) != expected:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"FlowPipeline.{method}: the first stage expects `x` of shape [num_nodes, "
                f"in_channels] = {list(expected)} in original node order but got {shape}."
            )
        if x.dtype != self._dtype or x.device != self._device:
            raise ValueError(
                f"FlowPipeline.{method}: expected `x` with the model's dtype and device "
                f"({self._dtype}, {self._device}) but got ({x.dtype}, {x.device})."
            )
        return x

    def _target(self, y: Tensor | None, train_mask: Tensor | None) -> Tensor:
        mb = self._microbatches
        assert mb is not None
        n = mb.num_nodes
        if (
            not isinstance(y, Tensor)
            or y.shape != (n,)
            or y.is_floating_point()
            or y.dtype == torch.bool
        ):
            got = (
                f"shape {tuple(y.shape)}, dtype {y.dtype}"
                if isinstance(y, Tensor)
                else type(y).__name__
            )
            raise ValueError(
                f"FlowPipeline.step: the last stage expects `y`, integer class ids of shape "
                f"[{n}], but got {got}."
            )
        if (
            not isinstance(train_mask, Tensor)
            or train_mask.shape != (n,)
            or train_mask.dtype != torch.bool
        ):
            got = (
                f"shape {tuple(train_mask.shape)}, dtype {train_mask.dtype}"
                if isinstance(train_mask, Tensor)
                else type(train_mask).__name__
            )
            raise ValueError(
                f"FlowPipeline.step: the last stage expects `train_mask`, a boolean tensor of "
                f"shape [{n}], but got {got}."
            )
        count = int(train_mask.sum())
        if count == 0:
            raise ValueError("FlowPipeline.step: `train_mask` selects no node; the loss needs one.")
        self._count = count
        labels = torch.where(train_mask, y.long(), torch.full_like(y, _IGNORE, dtype=torch.long))
        return mb.pad(labels.to(self._device), fill=_IGNORE)


def _device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    for p in model.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    return torch.device("cpu"), torch.get_default_dtype()


def _p2p_device(device: torch.device) -> torch.device | None:
    return device if device.type != "cpu" else None
