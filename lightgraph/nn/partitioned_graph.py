"""The graph view that partition-aware layers consume."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.typing import HaloExchange


class PartitionedGraph:
    """One rank's partition plus the means to fetch halo rows from other ranks.

    Models in :mod:`lightgraph.nn` take a :class:`PartitionedGraph` instead of an
    ``edge_index``. On one process (a single-partition plan) :meth:`exchange` returns its
    input unchanged, so the same model trains with and without partitioning.

    Args:
        plan: the rank's :class:`~lightgraph.data.PartitionPlan`.
        exchanger: a :class:`~lightgraph.typing.HaloExchange`, usually the
            :class:`~lightgraph.distributed.HaloExchanger` the strategy hands the module;
            may be ``None`` only when the plan has no halo nodes.
        stage: label under which exchanged bytes are counted (``"train"``, ``"val"``, ...).
    """

    def __init__(
        self, plan: PartitionPlan, exchanger: HaloExchange | None = None, stage: str = "train"
    ) -> None:
        if exchanger is None and plan.num_parts > 1:
            raise ValueError(
                f"PartitionedGraph: partition {plan.rank} of {plan.num_parts} needs an `exchanger` "
                f"to fetch its {plan.num_halo} halo nodes; train with "
                f"`Trainer(strategy='boundary_exchange', devices={plan.num_parts})`."
            )
        self.plan = plan
        self.exchanger = exchanger
        self.stage = stage

    @classmethod
    def from_data(cls, data: Data) -> PartitionedGraph:
        """The whole graph as one partition (single-process training and inference)."""
        return cls(PartitionPlan.from_data(data))

    @property
    def num_inner(self) -> int:
        return self.plan.num_inner

    @property
    def overlaps(self) -> bool:
        """Whether layers should compute central rows while the exchange is in flight."""
        return self.exchanger is not None and self.exchanger.overlaps(self.stage)

    def start_exchange(
        self, x: Tensor, layer: str = "layer", aggregation: str | None = None
    ) -> Any:
        """Start the exchange of ``x``'s rows (overlap mode); see :meth:`finish_exchange`."""
        self._report(layer, aggregation)
        return self.exchanger.start(x, self.plan, layer)  # type: ignore[union-attr]

    def finish_exchange(self, handle: Any, x: Tensor) -> Tensor:
        """``[x; halo rows]`` once the exchange started by :meth:`start_exchange` is done."""
        return self.exchanger.finish(handle, x, self.plan)  # type: ignore[union-attr]

    def start_halo(self, x: Tensor, layer: str = "layer", aggregation: str | None = None) -> Any:
        """The exchange of ``x``'s rows for a layer that computes in two halves around it.

        Returns a handle with an ``inner`` tensor (``x``, possibly routed through a
        gradient join: compute every inner-row term from it) and a ``halo()`` method
        giving the ``[num_halo, F]`` halo rows; in overlap mode the rows travel between
        the two (see :meth:`~lightgraph.distributed.HaloExchanger.start_halo`). Without an
        exchanger the halo is empty; an exchanger without ``start_halo`` is driven through
        its ``start`` / ``finish`` (overlap) or ``__call__``.

        Args:
            x: the inner rows ``[num_inner, F]``.
            layer: label of the exchanging layer.
            aggregation: how the layer weighs halo rows (see :meth:`exchange`).
        """
        if self.exchanger is None:
            return _LocalHalo(x, x.new_zeros((0,) + tuple(x.shape[1:])))
        self._report(layer, aggregation)
        start = getattr(self.exchanger, "start_halo", None)
        if start is not None:
            return start(x, self.plan, self.stage, layer)
        if self.overlaps:
            return _FinishedHalo(self, x, self.exchanger.start(x, self.plan, layer))
        x_local = self.exchanger(x, self.plan, stage=self.stage, layer=layer)
        return _LocalHalo(x, x_local[self.plan.num_inner :])

    def exchange(self, x: Tensor, layer: str = "layer", aggregation: str | None = None) -> Tensor:
        """Return ``[x; halo rows]`` with ``x`` holding the inner rows.

        Args:
            x: the inner rows.
            layer: label of the exchanging layer (byte counters, per-layer bit-widths).
            aggregation: how the layer weighs halo rows — ``"gcn"``, ``"mean"`` or
                ``"sum"``; variance-aware bit-width policies
                (:class:`~lightgraph.quant.VarianceAwareBits`) use it. ``None``: unknown
                (treated as ``"sum"``, an upper bound for normalised aggregations).
        """
        if self.exchanger is None:
            return x
        self._report(layer, aggregation)
        return self.exchanger(x, self.plan, stage=self.stage, layer=layer)

    def _report(self, layer: str, aggregation: str | None) -> None:
        if aggregation is not None and self.exchanger is not None:
            self.exchanger.set_aggregation(layer, aggregation)

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"{self.__class__.__name__}(rank={p.rank}/{p.num_parts}, inner={p.num_inner}, "
            f"halo={p.num_halo}, edges={p.edge_index.size(1)}, stage={self.stage!r})"
        )


class _LocalHalo:
    """Halo rows that are already there (no exchanger, or a protocol-only one)."""

    def __init__(self, inner: Tensor, halo: Tensor) -> None:
        self.inner = inner
        self._halo = halo

    def halo(self) -> Tensor:
        return self._halo

    def local(self) -> Tensor:
        return torch.cat([self.inner, self._halo], dim=0)


class _FinishedHalo:
    """Halo rows of a protocol-only exchanger's ``start`` / ``finish`` (overlap mode)."""

    def __init__(self, graph: PartitionedGraph, inner: Tensor, handle: Any) -> None:
        self.inner, self._graph, self._handle = inner, graph, handle

    def halo(self) -> Tensor:
        return self.local()[self._graph.num_inner :]

    def local(self) -> Tensor:
        return self._graph.finish_exchange(self._handle, self.inner)
