"""The exchange object a boundary-exchange strategy hands to the model layers."""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor

from lightgraph.data.partition_plan import PartitionPlan
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.halo_exchange import check_transport, halo_exchange


class HaloExchanger:
    """Exchanges halo rows of a :class:`~lightgraph.data.PartitionPlan` over a process group.

    It holds what stays fixed during a run — the process group, the transport and the
    byte counters — so that layers only pass the rows, the plan and a label.

    Args:
        group: process group of the exchange (``None``: the default group).
        transport: ``"all_to_all"`` (one ``all_to_all_single`` with uneven splits) or
            ``"ring"`` (``P - 1`` rounds of paired send/recv).
    """

    def __init__(
        self, group: dist.ProcessGroup | None = None, transport: str = "all_to_all"
    ) -> None:
        self.group = group
        self.transport = check_transport(transport, "HaloExchanger")
        self.stats = ExchangeStats()

    def __call__(
        self, x: Tensor, plan: PartitionPlan, stage: str = "train", layer: str = "layer"
    ) -> Tensor:
        return halo_exchange(
            x,
            plan.send_index,
            plan.send_counts,
            plan.halo_counts,
            group=self.group,
            transport=self.transport,
            stats=self.stats,
            stage=stage,
            layer=layer,
        )

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(transport={self.transport!r})"
