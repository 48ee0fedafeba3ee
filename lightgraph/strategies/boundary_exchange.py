"""A DDP strategy whose model layers exchange boundary (halo) rows between partitions."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

import torch.distributed as dist
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from typing_extensions import override

from lightgraph.distributed.context import ParallelContext
from lightgraph.distributed.halo_exchanger import MODES, HaloExchanger
from lightgraph.functional.halo_exchange import TRANSPORTS
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.strategies.exchange_group import ExchangeGroupStrategy
from lightgraph.utilities.checks import check_choice, check_probability, check_type


class BoundaryExchangeStrategy(ExchangeGroupStrategy):
    """Partition-parallel full-graph training: one graph partition per process.

    Weights are replicated and their gradients all-reduced (summed: every rank's loss is
    its share of the global loss) as in
    :class:`~lightgraph.strategies.ExchangeGroupStrategy`. The strategy builds a
    :class:`~lightgraph.distributed.HaloExchanger` on its dedicated exchange group and
    hands it to the module in a :class:`~lightgraph.distributed.ParallelContext`; the
    node-classification module passes it to every partition-aware layer: forward passes
    fetch the halo rows of each layer's input, backward passes return the halo gradients
    to their owners. The same code path serves gloo (CPU) and NCCL (CUDA).

    The exchange is configurable, and each setting composes with the others: FP32 or
    quantised messages (``quantization``, a :mod:`lightgraph.quant` policy: Sylvie's
    degree-aware widths, fixed widths, ...), synchronous or pipelined execution
    (``mode``; PipeGCN is ``mode="async"`` in FP32), and BNS-GCN boundary sampling
    (``boundary_sampling``). Callbacks such as
    :class:`~lightgraph.callbacks.AdaptiveBitWidth` and
    :class:`~lightgraph.callbacks.PipelineAdaptor` retune the exchanger's
    ``policy.base_bits`` and ``mode`` between epochs.

    Each rank trains its own partition, so the ranks are replicas over disjoint data: the
    inherited ``distributed_sampler_kwargs`` (``N`` replicas, this rank) describe them.

    Registered names: ``"boundary_exchange"`` (``start_method="popen"``, works under
    ``torchrun`` and SLURM), ``"boundary_exchange_spawn"``, ``"boundary_exchange_fork"``.

    Args:
        transport: ``"all_to_all"`` (one ``all_to_all_single`` per exchange) or ``"ring"``
            (``P - 1`` rounds of paired send/recv).
        quantization: bit-width policy for training messages; ``None`` sends FP32.
        mode: ``"sync"``, ``"async"`` (one-epoch-stale pipeline) or ``"overlap"``
            (AdaQP: central rows computed while the marginal rows' messages travel; exact).
        boundary_sampling: BNS-GCN keep-probability of boundary nodes per epoch
            (the BNS-GCN paper uses 0.1); ``None`` keeps all.
        seed: seed of quantisation noise and boundary sampling.
        compile_quantization: use the ``torch.compile``-d quantisation kernels (same bytes,
            faster once compiled; the first epoch pays the compilation). Use it with the
            ``popen`` or ``spawn`` start methods: compiling inside ``fork``-ed workers can
            hang in the compiler's worker pool.
        process_group_backend: ``"gloo"``, ``"nccl"``, ...; default from the device.
        timeout: timeout of collectives.
        start_method: how processes are launched (see ``DDPStrategy``).
        find_unused_parameters: forwarded to ``DistributedDataParallel``.
    """

    strategy_name = "boundary_exchange"
    strategy_description = "Partition-parallel halo exchange over DDP"

    def __init__(
        self,
        transport: Literal["all_to_all", "ring"] = "all_to_all",
        quantization: BitWidthPolicy | None = None,
        mode: Literal["sync", "async", "overlap"] = "sync",
        boundary_sampling: float | None = None,
        seed: int = 0,
        compile_quantization: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        find_unused_parameters: bool = False,
    ) -> None:
        owner = "BoundaryExchangeStrategy"
        check_choice(owner, "transport", transport, TRANSPORTS)
        check_choice(owner, "mode", mode, MODES)
        check_probability(owner, "boundary_sampling", boundary_sampling, optional=True)
        if quantization is not None:
            check_type(
                owner,
                "quantization",
                quantization,
                BitWidthPolicy,
                "a lightgraph.quant.BitWidthPolicy such as DegreeAwareBits or FixedBits, or None",
            )
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=find_unused_parameters,
        )
        self.transport = transport
        self._quantization = quantization
        self.mode = mode
        self.boundary_sampling = boundary_sampling
        self.seed = seed
        self.compile_quantization = compile_quantization

    @property
    def quantization(self) -> BitWidthPolicy | None:
        """The bit-width policy in force: the exchanger's once set up (callbacks may change
        it there), the configured one before."""
        if self._context is not None and self._context.halo_exchanger is not None:
            return self._context.halo_exchanger.policy
        return self._quantization

    @property
    def exchanger(self) -> HaloExchanger:
        """The halo exchanger; available after the process group is set up."""
        exchanger = self._context.halo_exchanger if self._context is not None else None
        if exchanger is None:
            raise RuntimeError(
                "BoundaryExchangeStrategy.exchanger is available once the Trainer has set up the "
                "strategy (inside fit/validate/test)."
            )
        return exchanger

    @override
    def build_context(self, group: dist.ProcessGroup) -> ParallelContext:
        exchanger = HaloExchanger(
            group=group,
            transport=self.transport,
            policy=self._quantization,
            mode=self.mode,
            boundary_sampling=self.boundary_sampling,
            seed=self.seed,
            compile_quantization=self.compile_quantization,
        )
        # e.g. VarianceAwareBits gets its cost model here (profiling is collective).
        exchanger.setup()
        return ParallelContext(halo_exchanger=exchanger)

    @override
    def close_context(self, context: ParallelContext) -> None:
        if context.halo_exchanger is not None:
            context.halo_exchanger.close()
