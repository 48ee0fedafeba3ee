"""A DDP strategy for graph parallelism: every rank holds a shard of each sequence's tokens."""

from __future__ import annotations

import torch.distributed as dist
from typing_extensions import override

from lightgraph.data.node_sequence import NodeSequenceDataModule
from lightgraph.data.token_batch import TokenShard
from lightgraph.distributed.context import ParallelContext
from lightgraph.distributed.sequence_parallel import SequenceParallel
from lightgraph.strategies.exchange_group import ExchangeGroupStrategy


class GraphParallelStrategy(ExchangeGroupStrategy):
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

    The strategy builds a :class:`~lightgraph.distributed.SequenceParallel` on its dedicated
    exchange group (:class:`~lightgraph.strategies.ExchangeGroupStrategy`) and hands it to
    the module in a :class:`~lightgraph.distributed.ParallelContext`; it tells a
    :class:`~lightgraph.data.NodeSequenceDataModule` which token shard this rank loads
    (``datamodule.token_shard``). Weights are replicated and their gradients all-reduced.
    The same code path serves gloo (CPU) and NCCL (CUDA). The number of attention heads must
    be a multiple of the number of ranks.

    Loss scaling: gradients are *summed* over the ``P`` ranks, and a rank's gradient is
    already its share of the gradient of the global loss (the all-to-all backward routes the
    gradient of every remote token's attention output back to the rank that owns it). For the
    summed gradient to equal the single-process gradient of a mean over all ``S`` tokens,
    each rank's loss must be

    .. math::
        \\mathcal{L}_r = \\frac{1}{S} \\sum_{i \\in \\text{shard}(r)} \\ell_i,

    i.e. the sum over its tokens divided by the *total* number of tokens.

    Registered names: ``"graph_parallel"`` (``start_method="popen"``, works under
    ``torchrun`` and SLURM), ``"graph_parallel_spawn"``, ``"graph_parallel_fork"``.

    Args:
        process_group_backend: ``"gloo"``, ``"nccl"``, ...; default from the device.
        timeout: timeout of collectives.
        start_method: how processes are launched (see ``DDPStrategy``).
        find_unused_parameters: forwarded to ``DistributedDataParallel``.
    """

    strategy_name = "graph_parallel"
    strategy_description = "Graph (sequence) parallelism with all-to-all over DDP"

    @property
    def sequence_parallel(self) -> SequenceParallel:
        """The sequence/head all-to-all exchanger; available after the process group is set up."""
        return self.parallel_context.require_sequence_parallel(type(self).__name__)

    @override
    def build_context(self, group: dist.ProcessGroup) -> ParallelContext:
        return ParallelContext(sequence_parallel=SequenceParallel(group=group))

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        module = self.lightning_module
        trainer = module._trainer if module is not None else None
        datamodule = trainer.datamodule if trainer is not None else None
        if isinstance(datamodule, NodeSequenceDataModule):
            sp = self.sequence_parallel
            datamodule.token_shard = TokenShard(world_size=sp.world_size, rank=sp.rank)
