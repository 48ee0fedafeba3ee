"""AdaQP's re-assignment round: gather the traces on rank 0, solve there, broadcast the widths."""

from __future__ import annotations

import time
from typing import Any

import torch.distributed as dist

from lightgraph.quant.variance_aware_bits import AssignmentReport, VarianceAwareBits


def reassign_bits(
    policy: VarianceAwareBits,
    group: dist.ProcessGroup | None = None,
    transport: str = "all_to_all",
    epoch: int | None = None,
) -> AssignmentReport:
    """Re-assign ``policy``'s widths from the rows traced since the last assignment (collective).

    Every rank of ``group`` sends :attr:`VarianceAwareBits.traces` to rank 0, which runs
    :meth:`VarianceAwareBits.solve` (the MILP of every layer and direction); the widths
    and the report are broadcast and every rank :meth:`~VarianceAwareBits.apply`-s them,
    so sender and receiver of every row agree. The report's ``seconds`` is the wall clock
    of the whole round on this rank (gather, solve, broadcast).

    Args:
        policy: the exchange's policy (the same configuration on every rank).
        group: the exchange's process group.
        transport: the exchange's transport (``"ring"`` makes the time term a sum of
            rounds).
        epoch: recorded in the report.
    """
    if not isinstance(policy, VarianceAwareBits):
        raise TypeError(
            f"reassign_bits: expected `policy` to be a VarianceAwareBits but got "
            f"{type(policy).__name__}."
        )
    tic = time.perf_counter()
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    root = 0 if group is None else dist.get_global_rank(group, 0)
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(policy.traces, gathered, dst=root, group=group)
    payload: list[Any] = [None]
    if rank == 0:
        assert gathered is not None  # rank 0 always allocates it
        payload[0] = policy.solve(gathered, world, ring=transport != "all_to_all", epoch=epoch)
    dist.broadcast_object_list(payload, src=root, group=group)
    table, report = payload[0]
    report.seconds = time.perf_counter() - tic
    policy.apply(table, report)
    return report
