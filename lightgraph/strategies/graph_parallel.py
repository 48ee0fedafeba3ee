"""A DDP strategy for graph parallelism: every rank holds a shard of each sequence's tokens."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Literal

import torch.distributed as dist
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import _StrategyRegistry
from lightning.pytorch.strategies import DDPStrategy
from typing_extensions import override

from lightgraph.functional.sequence_parallel import SequenceParallel
from lightgraph.strategies.boundary_exchange import START_METHODS

log = logging.getLogger(__name__)


class GraphParallelStrategy(DDPStrategy):
    """Graph parallelism for graph transformers (TorchGT §4.3.3, after DeepSpeed-Ulysses).

    Data layout: each of the ``P`` ranks holds ``S / P`` tokens (nodes) of every sequence
    (graph), the contiguous shard :func:`~lightgraph.functional.sequence_parallel.shard_range`
    gives it; shards differ by at most one token when ``P`` does not divide ``S``. Token-wise
    layers (input and output projections, FFN, layer norms) run on the local shard. Before
    attention, an all-to-all turns the sequence shards of ``Q``, ``K`` and ``V`` into head
    shards over the full sequence (``[S/P, H, D]`` → ``[S, H/P, D]``); each rank attends with
    its ``H / P`` heads over all ``S`` tokens; after attention the reverse all-to-all restores
    the token shards. Both all-to-alls move ``O(S H D / P)`` values per rank. The attention
    pattern (mask or edge list) and the attention-bias bucket tables must be available on
    every rank for the full sequence, since every rank attends over all tokens; the rank
    slices the bias with :meth:`SequenceParallel.head_slice`. The data module therefore gives
    every rank the full pattern.

    The strategy owns a process group dedicated to these all-to-alls and a
    :class:`~lightgraph.functional.sequence_parallel.SequenceParallel` on it
    (:attr:`sequence_parallel`), so that the exchanges in forward and backward never share a
    queue with DDP's asynchronous gradient all-reduce. Weights are replicated and their
    gradients all-reduced (averaged) by :class:`~lightning.pytorch.strategies.DDPStrategy`.
    The same code path serves gloo (CPU) and NCCL (CUDA). The number of attention heads must
    be a multiple of the number of ranks.

    Loss scaling: DDP *averages* gradients over the ``P`` ranks, while a rank's gradient is
    already its share of the gradient of the global loss (the all-to-all backward routes the
    gradient of every remote token's attention output back to the rank that owns it). For the
    averaged gradient to equal the single-process gradient of a mean over all ``S`` tokens,
    each rank's loss must be

    .. math::
        \\mathcal{L}_r = P \\cdot \\frac{1}{S} \\sum_{i \\in \\text{shard}(r)} \\ell_i,

    i.e. the sum over its tokens divided by the *total* number of tokens, times ``P``.

    Registered names: ``"graph_parallel"`` (``start_method="popen"``, works under
    ``torchrun`` and SLURM), ``"graph_parallel_spawn"``, ``"graph_parallel_fork"``.

    Args:
        process_group_backend: ``"gloo"``, ``"nccl"``, ...; default from the device.
        timeout: timeout of collectives.
        start_method: how processes are launched (see ``DDPStrategy``).
        find_unused_parameters: forwarded to ``DistributedDataParallel``.
    """

    strategy_name = "graph_parallel"

    def __init__(
        self,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        find_unused_parameters: bool = False,
    ) -> None:
        if start_method not in START_METHODS:
            raise ValueError(
                f"GraphParallelStrategy: expected `start_method` in {START_METHODS} but got "
                f"{start_method!r}."
            )
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=find_unused_parameters,
        )
        self._sequence_group: dist.ProcessGroup | None = None
        self._sequence_parallel: SequenceParallel | None = None

    @property
    def sequence_parallel(self) -> SequenceParallel:
        """The sequence/head all-to-all exchanger; available after the process group is set up."""
        if self._sequence_parallel is None:
            raise RuntimeError(
                "GraphParallelStrategy.sequence_parallel is available once the Trainer has set "
                "up the strategy (inside fit/validate/test/predict)."
            )
        return self._sequence_parallel

    @override
    def setup_distributed(self) -> None:
        super().setup_distributed()
        self._sequence_group = dist.new_group(
            backend=self._get_process_group_backend(), timeout=self._timeout
        )
        self._sequence_parallel = SequenceParallel(group=self._sequence_group)
        log.debug(
            "%s: all-to-all group ready (world size %d)", type(self).__name__, self.world_size
        )

    @override
    def teardown(self) -> None:
        super().teardown()
        if self._sequence_group is not None and dist.is_initialized():
            dist.destroy_process_group(self._sequence_group)
        self._sequence_group = None
        self._sequence_parallel = None

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        for name, start_method in (
            ("graph_parallel", "popen"),
            ("graph_parallel_spawn", "spawn"),
            ("graph_parallel_fork", "fork"),
        ):
            if name not in strategy_registry:
                strategy_registry.register(
                    name,
                    cls,
                    description=f"Graph (sequence) parallelism with all-to-all over DDP "
                    f"(start_method={start_method!r})",
                    start_method=start_method,
                )
