"""The typed hand-off from a lightgraph strategy to the module it trains."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightgraph.distributed.flow_pipeline import FlowPipeline
from lightgraph.distributed.halo_exchanger import HaloExchanger
from lightgraph.distributed.sequence_parallel import SequenceParallel


@dataclass(frozen=True)
class ParallelContext:
    """The runtime objects a strategy built on its dedicated process group.

    A lightgraph strategy builds them in ``setup_environment`` and attaches the context
    to the LightningModule (a :class:`ParallelContextHolder`) — the way Lightning's
    ``ModelParallelStrategy`` hands its device mesh to the module — so modules install
    them in ``configure_model`` and callbacks reach them through :func:`parallel_context`,
    never by probing the strategy. Outside such a strategy (one process, plain DDP) the
    context is empty and modules run without exchanges.

    Attributes:
        halo_exchanger: boundary-exchange runtime of partition-parallel training
            (:class:`~lightgraph.strategies.BoundaryExchangeStrategy`).
        sequence_parallel: sequence/head all-to-all of graph parallelism
            (:class:`~lightgraph.strategies.GraphParallelStrategy`).
        flow_pipeline: GNN stages pipelined over affinity microbatches, UniTG's flow
            parallelism (:class:`~lightgraph.strategies.FlowParallelStrategy`).
    """

    halo_exchanger: HaloExchanger | None = None
    sequence_parallel: SequenceParallel | None = None
    flow_pipeline: FlowPipeline | None = None

    def require_halo_exchanger(self, owner: str) -> HaloExchanger:
        """The halo exchanger, or a RuntimeError telling ``owner``'s user what to train with."""
        if self.halo_exchanger is None:
            raise RuntimeError(
                f"{owner} needs a halo exchanger: train with "
                "`Trainer(strategy='boundary_exchange', devices=num_parts)` (or a "
                "BoundaryExchangeStrategy) and a LightningModule that accepts the strategy's "
                "runtime (lightgraph.models.NodeClassifier or any ParallelContextHolder)."
            )
        return self.halo_exchanger

    def require_sequence_parallel(self, owner: str) -> SequenceParallel:
        """The sequence-parallel runtime, or a RuntimeError naming the strategy to use."""
        if self.sequence_parallel is None:
            raise RuntimeError(
                f"{owner} needs sequence parallelism: train with "
                "`Trainer(strategy='graph_parallel', devices=P)` and a module that accepts the "
                "strategy's runtime (lightgraph.models.GraphTransformerModule)."
            )
        return self.sequence_parallel

    def require_flow_pipeline(self, owner: str) -> FlowPipeline:
        """The flow-parallel pipeline, or a RuntimeError naming the strategy to use."""
        if self.flow_pipeline is None:
            raise RuntimeError(
                f"{owner} needs flow parallelism: train with "
                "`Trainer(strategy='flow_parallel', devices=num_stages)` (or a "
                "FlowParallelStrategy) and a module that accepts the strategy's runtime "
                "(lightgraph.models.UniTGModule or any ParallelContextHolder)."
            )
        return self.flow_pipeline


class ParallelContextHolder:
    """Mixin for modules that accept a lightgraph strategy's :class:`ParallelContext`.

    ``class MyModule(ParallelContextHolder, pl.LightningModule)``: the strategy calls
    :meth:`attach_parallel_context` before ``configure_model`` and again with ``None``
    in ``teardown``; the module reads :attr:`parallel_context`.
    """

    _parallel_context: ParallelContext | None = None

    @property
    def parallel_context(self) -> ParallelContext:
        """The attached context (empty when no lightgraph strategy runs the module)."""
        return self._parallel_context if self._parallel_context is not None else _EMPTY

    def attach_parallel_context(self, context: ParallelContext | None) -> None:
        """Called by the strategy; ``None`` detaches (after teardown)."""
        if context is not None and not isinstance(context, ParallelContext):
            raise TypeError(
                f"{type(self).__name__}.attach_parallel_context: expected a ParallelContext or "
                f"None but got {type(context).__name__}."
            )
        self._parallel_context = context


_EMPTY = ParallelContext()


def parallel_context(module: Any) -> ParallelContext:
    """The context a strategy attached to ``module`` (empty for modules that take none).

    The one accessor callbacks use: ``parallel_context(pl_module).halo_exchanger``.
    """
    if isinstance(module, ParallelContextHolder):
        return module.parallel_context
    return _EMPTY
