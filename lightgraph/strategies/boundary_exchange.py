"""A DDP strategy whose model layers exchange boundary (halo) rows between partitions."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Literal

import torch.distributed as dist
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import _StrategyRegistry
from lightning.pytorch.strategies import DDPStrategy
from typing_extensions import override

from lightgraph.functional.halo_exchange import check_transport
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.strategies.halo_exchanger import HaloExchanger, check_mode, check_sampling

log = logging.getLogger(__name__)

START_METHODS = ("popen", "spawn", "fork", "forkserver")


class BoundaryExchangeStrategy(DDPStrategy):
    """Partition-parallel full-graph training: one graph partition per process.

    Weights are replicated and their gradients all-reduced exactly as in
    :class:`~lightning.pytorch.strategies.DDPStrategy`. In addition the strategy owns a
    second process group dedicated to halo exchanges and a
    :class:`~lightgraph.strategies.HaloExchanger` on it, which the node-classification
    module hands to every partition-aware layer: forward passes fetch the halo rows of
    each layer's input, backward passes return the halo gradients to their owners.
    Keeping the exchange on its own group means its collectives never interleave with
    DDP's gradient buckets. The same code path serves gloo (CPU) and NCCL (CUDA).

    The exchange is configurable, and each setting composes with the others: FP32 or
    quantised messages (``quantization``, a :mod:`lightgraph.quant` policy: Sylvie's
    degree-aware widths, fixed widths, ...), synchronous or pipelined execution
    (``mode``; PipeGCN is ``mode="async"`` in FP32), and BNS-GCN boundary sampling
    (``boundary_sampling``). Callbacks such as
    :class:`~lightgraph.callbacks.AdaptiveBitWidth` and
    :class:`~lightgraph.callbacks.PipelineAdaptor` retune ``exchanger.policy.base_bits``
    and ``exchanger.mode`` between epochs.

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
        check_transport(transport, "BoundaryExchangeStrategy")
        check_mode(mode, "BoundaryExchangeStrategy")
        check_sampling(boundary_sampling, "BoundaryExchangeStrategy")
        if quantization is not None and not isinstance(quantization, BitWidthPolicy):
            raise TypeError(
                f"BoundaryExchangeStrategy: expected `quantization` to be a lightgraph.quant.BitWidthPolicy "
                f"(e.g. DegreeAwareBits, FixedBits) or None but got {type(quantization).__name__}."
            )
        if start_method not in START_METHODS:
            raise ValueError(
                f"BoundaryExchangeStrategy: expected `start_method` in {START_METHODS} but got {start_method!r}."
            )
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=find_unused_parameters,
        )
        self.transport = transport
        self.quantization = quantization
        self.mode = mode
        self.boundary_sampling = boundary_sampling
        self.seed = seed
        self.compile_quantization = compile_quantization
        self._exchange_group: dist.ProcessGroup | None = None
        self._exchanger: HaloExchanger | None = None

    @property
    def exchanger(self) -> HaloExchanger:
        """The halo exchanger; available after the process group is set up."""
        if self._exchanger is None:
            raise RuntimeError(
                "BoundaryExchangeStrategy.exchanger is available once the Trainer has set up the "
                "strategy (inside fit/validate/test)."
            )
        return self._exchanger

    @override
    def setup_distributed(self) -> None:
        super().setup_distributed()
        # A dedicated group: exchanges in forward/backward and DDP's asynchronous gradient
        # all-reduce never share a queue, so their order cannot diverge across ranks.
        self._exchange_group = dist.new_group(
            backend=self._get_process_group_backend(), timeout=self._timeout
        )
        self._exchanger = HaloExchanger(
            group=self._exchange_group,
            transport=self.transport,
            policy=self.quantization,
            mode=self.mode,
            boundary_sampling=self.boundary_sampling,
            seed=self.seed,
            compile_quantization=self.compile_quantization,
        )
        # e.g. VarianceAwareBits profiles the links of its cost model here (collective).
        self._exchanger.setup()
        log.debug("%s: exchange group ready (transport=%s)", type(self).__name__, self.transport)

    @override
    def teardown(self) -> None:
        if self._exchanger is not None:
            self._exchanger.drain()
        super().teardown()
        if self._exchange_group is not None and dist.is_initialized():
            dist.destroy_process_group(self._exchange_group)
        self._exchange_group = None
        self._exchanger = None

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        for name, start_method in (
            ("boundary_exchange", "popen"),
            ("boundary_exchange_spawn", "spawn"),
            ("boundary_exchange_fork", "fork"),
        ):
            if name not in strategy_registry:
                strategy_registry.register(
                    name,
                    cls,
                    description=f"Partition-parallel halo exchange over DDP (start_method={start_method!r})",
                    start_method=start_method,
                )
