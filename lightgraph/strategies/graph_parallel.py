"""A DDP strategy for graph parallelism: every rank holds a shard of each sequence's tokens."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

import torch.distributed as dist
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from typing_extensions import override

from lightgraph.distributed.context import ParallelContext
from lightgraph.distributed.sequence_parallel import (
    SequenceParallel,
    check_sequence_policy,
    token_importance,
)
from lightgraph.quant.bit_width_policy import BitWidthPolicy
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
    the module in a :class:`~lightgraph.distributed.ParallelContext`. Data modules learn
    which token shard this rank loads from :attr:`sequence_parallel_kwargs`
    (:class:`~lightgraph.data.NodeSequenceDataModule` reads it in ``setup``), as Lightning's
    loaders learn their replica from ``distributed_sampler_kwargs``; the strategy knows no
    data module. Graph parallelism is not data parallelism: every rank reads every batch,
    so :attr:`distributed_sampler_kwargs` reports one replica and neither Lightning's
    ``DistributedSampler`` nor a sampled data module splits the batches over the ranks.
    Weights are replicated and their gradients all-reduced.
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

    Quantised all-to-alls (``quantization``, a :mod:`lightgraph.quant` policy, as
    :class:`~lightgraph.strategies.BoundaryExchangeStrategy` takes): in training both
    all-to-alls of every attention layer (``Q, K, V`` out, attention output back) and
    their backward all-to-alls (the gradients) send every token row — one token's values
    for one peer's heads — as stochastically rounded codes of the policy's width with a
    bf16 scale and zero point (see :class:`~lightgraph.distributed.SequenceParallel`);
    evaluation stays FP32. :class:`~lightgraph.quant.FixedBits` and
    :class:`~lightgraph.quant.RandomBits` apply as they are;
    :class:`~lightgraph.quant.DegreeAwareBits` ranks tokens by how many queries attend to
    them in the batch's attention pattern (the strategy sets
    :func:`~lightgraph.distributed.sequence_parallel.token_importance` of every training
    batch's graph); :class:`~lightgraph.quant.VarianceAwareBits` is rejected.
    :class:`~lightgraph.callbacks.AdaptiveBitWidth` drives the policy's ``base_bits``
    (and installs ``FixedBits`` on an FP32 run). Bytes are counted per layer, direction
    and stage, codes and parameters apart, in ``sequence_parallel.stats``.

    Registered names: ``"graph_parallel"`` (``start_method="popen"``, works under
    ``torchrun`` and SLURM), ``"graph_parallel_spawn"``, ``"graph_parallel_fork"``.

    Args:
        quantization: bit-width policy of training all-to-alls; ``None`` sends FP32.
        seed: seed of the quantisation noise.
        process_group_backend: ``"gloo"``, ``"nccl"``, ...; default from the device.
        timeout: timeout of collectives.
        start_method: how processes are launched (see ``DDPStrategy``).
        find_unused_parameters: forwarded to ``DistributedDataParallel``.
    """

    strategy_name = "graph_parallel"
    strategy_description = "Graph (sequence) parallelism with all-to-all over DDP"

    def __init__(
        self,
        quantization: BitWidthPolicy | None = None,
        seed: int = 0,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        find_unused_parameters: bool = False,
    ) -> None:
        owner = "GraphParallelStrategy"
        check_sequence_policy(owner, "quantization", quantization)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"{owner}: expected `seed` to be an integer but got {seed!r}.")
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=find_unused_parameters,
        )
        self._quantization = quantization
        self.seed = seed

    @property
    def quantization(self) -> BitWidthPolicy | None:
        """The bit-width policy in force: the runtime's once set up (callbacks may change it
        there), the configured one before."""
        if self._context is not None and self._context.sequence_parallel is not None:
            return self._context.sequence_parallel.policy
        return self._quantization

    @property
    def sequence_parallel(self) -> SequenceParallel:
        """The sequence/head all-to-all exchanger; available after the process group is set up."""
        return self.parallel_context.require_sequence_parallel(type(self).__name__)

    @override
    def build_context(self, group: dist.ProcessGroup) -> ParallelContext:
        sp = SequenceParallel(group=group, policy=self._quantization, seed=self.seed)
        sp.setup()  # the quantiser's kernels compile here, not in the first step
        return ParallelContext(sequence_parallel=sp)

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        # A degree-aware policy sizes token rows by the batch's attention pattern.
        sp = self._context.sequence_parallel if self._context is not None else None
        if sp is not None and sp.needs_token_importance:
            batch = args[0] if args else kwargs.get("batch")
            graph = getattr(batch, "graph", None)
            if graph is not None and hasattr(graph, "edge_index"):
                sp.set_token_importance(token_importance(graph))
        return super().training_step(*args, **kwargs)

    @property
    def sequence_parallel_kwargs(self) -> dict[str, int]:
        """This rank's token shard: ``{"world_size": P, "rank": r}`` of the sequence-parallel
        group, for data modules that cut sequences into token shards (read in their
        ``setup``, after the strategy has set up its group;
        :func:`~lightgraph.data.loader.token_batch.sequence_parallel_shard`)."""
        sp = self.sequence_parallel
        return {"world_size": sp.world_size, "rank": sp.rank}

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        # Every rank holds a token shard of the *same* sequences: one data-parallel replica.
        return {"num_replicas": 1, "rank": 0}
