"""Base of lightgraph's DDP strategies: a dedicated exchange group and a typed hand-off."""

from __future__ import annotations

import logging
from abc import abstractmethod
from datetime import timedelta
from typing import ClassVar, Literal, get_type_hints

import torch.distributed as dist
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import _StrategyRegistry
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor
from torch.distributed import GradBucket
from torch.futures import Future
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from lightgraph.distributed.context import ParallelContext, ParallelContextHolder

log = logging.getLogger(__name__)

START_METHODS: tuple[str, ...] = ("popen", "spawn", "fork", "forkserver")


def sum_gradients_hook(group: dist.ProcessGroup | None, bucket: GradBucket) -> Future[Tensor]:
    """DDP communication hook that *sums* gradients over the ranks instead of averaging."""
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


# DDP's `register_comm_hook` compares the annotations of `bucket` and of the return value
# with `dist.GradBucket` and `Future[torch.Tensor]`; under `from __future__ import
# annotations` they are strings and it refuses the hook, so resolve them here.
sum_gradients_hook.__annotations__ = get_type_hints(sum_gradients_hook)


class ExchangeGroupStrategy(DDPStrategy):
    """A :class:`~lightning.pytorch.strategies.DDPStrategy` with a runtime on its own group.

    Subclasses build their runtime (:mod:`lightgraph.distributed`) in
    :meth:`build_context`; the base

    * validates ``start_method``;
    * creates a process group dedicated to the runtime's collectives in
      ``setup_distributed``, so that exchanges in forward/backward never share a queue
      with DDP's asynchronous gradient all-reduce (their order could otherwise diverge
      across ranks);
    * hands the :class:`~lightgraph.distributed.ParallelContext` to the LightningModule
      in ``setup_environment`` (before ``configure_model``) when the module is a
      :class:`~lightgraph.distributed.ParallelContextHolder`, and takes it back in
      ``teardown``;
    * **sums** gradients over the ranks (a DDP communication hook) instead of averaging
      them: under partition and graph parallelism every rank's loss is its share of the
      one global loss (its partial sum divided by the global count), so the sum of the
      ranks' gradients is the single-process gradient;
    * registers ``"<strategy_name>"`` (``popen``: torchrun, SLURM),
      ``"<strategy_name>_spawn"`` and ``"<strategy_name>_fork"``.

    Args:
        process_group_backend: ``"gloo"``, ``"nccl"``, ...; default from the device.
        timeout: timeout of collectives.
        start_method: how processes are launched (see ``DDPStrategy``).
        find_unused_parameters: forwarded to ``DistributedDataParallel``.
    """

    strategy_name: ClassVar[str] = ""
    #: one-line description of the registered aliases
    strategy_description: ClassVar[str] = ""

    def __init__(
        self,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        find_unused_parameters: bool = False,
    ) -> None:
        if start_method not in START_METHODS:
            raise ValueError(
                f"{type(self).__name__}: expected `start_method` in {START_METHODS} but got "
                f"{start_method!r}."
            )
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=find_unused_parameters,
        )
        self._exchange_group: dist.ProcessGroup | None = None
        self._context: ParallelContext | None = None

    # ------------------------------------------------------------------ subclass interface
    @abstractmethod
    def build_context(self, group: dist.ProcessGroup) -> ParallelContext:
        """Build the runtime on ``group`` (collective calls allowed: every rank runs it)."""

    def close_context(self, context: ParallelContext) -> None:  # noqa: B027 - optional hook
        """Release the runtime before the group is destroyed (drain transfers, stop threads)."""

    # ------------------------------------------------------------------ public
    @property
    def parallel_context(self) -> ParallelContext:
        """The runtime handed to the module; available once the strategy is set up."""
        if self._context is None:
            raise RuntimeError(
                f"{type(self).__name__}.parallel_context is available once the Trainer has set up "
                "the strategy (inside fit/validate/test/predict)."
            )
        return self._context

    # ------------------------------------------------------------------ Lightning hooks
    @override
    def setup_distributed(self) -> None:
        super().setup_distributed()
        self._exchange_group = dist.new_group(
            backend=self._get_process_group_backend(), timeout=self._timeout
        )
        self._context = self.build_context(self._exchange_group)
        log.debug("%s: exchange group and runtime ready", type(self).__name__)

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        module = self.lightning_module
        if isinstance(module, ParallelContextHolder):
            module.attach_parallel_context(self._context)

    @override
    def configure_ddp(self) -> None:
        super().configure_ddp()
        assert isinstance(self.model, DistributedDataParallel)
        # Lightning registers `ddp_comm_hook` on CUDA only; the sum is needed everywhere.
        self.model.register_comm_hook(None, sum_gradients_hook)

    @override
    def teardown(self) -> None:
        if self._context is not None:
            self.close_context(self._context)
        module = self.lightning_module
        if isinstance(module, ParallelContextHolder):
            module.attach_parallel_context(None)
        super().teardown()
        if self._exchange_group is not None and dist.is_initialized():
            dist.destroy_process_group(self._exchange_group)
        self._exchange_group = None
        self._context = None

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        for suffix, start_method in (("", "popen"), ("_spawn", "spawn"), ("_fork", "fork")):
            name = cls.strategy_name + suffix
            if name not in strategy_registry:
                strategy_registry.register(
                    name,
                    cls,
                    description=f"{cls.strategy_description} (start_method={start_method!r})",
                    start_method=start_method,
                )
